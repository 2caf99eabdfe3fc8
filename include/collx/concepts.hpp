/// @file concepts.hpp
/// What collx asks of element types and reduction ops.
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

namespace collx {
inline namespace v0 {

/// The largest alignof an element may have (a page): collx's scratch for elements is aligned to it;
/// values that arrive unaligned in a transport's staging are copied out before use.
inline constexpr std::size_t max_element_alignment = 4096;

/// An element: a trivially copyable, non-const object type aligned to at most
/// max_element_alignment bytes. collx moves elements as bytes, so a struct with padding works;
/// padding bytes of outputs are unspecified. Over-aligned types (alignas(32) AVX vectors) are
/// read at their alignment: values that arrive in a transport's staging unaligned are copied out
/// first.
template <class T>
concept element = std::is_trivially_copyable_v<T> && std::is_object_v<T> && !std::is_const_v<T> &&
                  !std::is_volatile_v<T> && !std::is_array_v<T> && alignof(T) <= max_element_alignment;

/// A reduction op on T: `op(a, b)` with `const T&` operands returns something convertible to T, and
/// Op is trivially copyable (so it can be passed to a GPU kernel by value). Associativity is
/// assumed, as MPI does, and not checked. Commutativity is declared (see collx::op_traits).
template <class Op, class T>
concept reduction_op = element<T> && std::is_trivially_copyable_v<Op> &&
                       requires(const Op& op, const T& a, const T& b) {
                         { op(a, b) } -> std::convertible_to<T>;
                       };

}  // namespace v0
}  // namespace collx
