/// @file concepts.hpp
/// What collx asks of element types and reduction ops.
#pragma once

#include <concepts>
#include <type_traits>

namespace collx {
inline namespace v0 {

/// An element: a trivially copyable, non-const object type. collx moves elements as bytes, so a
/// struct with padding works; padding bytes of outputs are unspecified.
template <class T>
concept element = std::is_trivially_copyable_v<T> && std::is_object_v<T> && !std::is_const_v<T> &&
                  !std::is_volatile_v<T> && !std::is_array_v<T>;

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
