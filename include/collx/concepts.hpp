/// @file concepts.hpp
/// What collx asks of element types and reduction ops.
#pragma once

#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>

#include <collx/ops.hpp>  // op_operand_t: the operands an op gets (fp32 for some ops on narrow floats)

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

namespace detail {
// reduction_op's requirements one by one, so that a compiler's "constraints not satisfied" names
// the one that failed; each ends in the comment the compiler quotes with its source line.
template <class Op>
concept op_trivially_copyable =
    std::is_trivially_copyable_v<Op>;  // collx copies the op (into GPU kernels too): capture values or pointers, not a std::string or vector
// `skip`: not tried on U at all (see op_call_is_const); one disjunction, so that the line a
// compiler quotes for a failure is the one with the advice.
template <class Op, class U, bool skip = false>
concept call_is_const_on =
    skip || !std::invocable<Op&, U&, U&> || std::invocable<const Op&, U&, U&>;  // operator() must be const: no `mutable` lambda (keep state outside the op)
template <class Op, class U, bool skip = false>
concept takes_const_operands_of =
    skip || !std::invocable<Op&, U&, U&> || std::invocable<Op&, const U&, const U&>;  // take `const T&`, `T` or `auto` operands, not `T&`
/// The operand types an op on T is tried with for the two checks above: T, and float too on
/// narrow floats (an op may take floats there: op_runs_in_fp32).
template <class T>
using probe_operand_t = std::conditional_t<is_narrow_float_v<T>, float, T>;
// T is tried only where the op does not run in fp32: a generic op with a deduced result would be a
// hard error on collx::half operands (no arithmetic).
template <class Op, class T>
concept op_call_is_const = call_is_const_on<Op, probe_operand_t<T>> && call_is_const_on<Op, T, op_runs_in_fp32<Op, T>>;
template <class Op, class T>
concept op_takes_const_operands =
    takes_const_operands_of<Op, probe_operand_t<T>> && takes_const_operands_of<Op, T, op_runs_in_fp32<Op, T>>;
/// An op's result R can stand for a partial result of operand type U on elements T: it converts to
/// U, or, on narrow floats where the op takes floats, it is a T (rounded each step: fp32_op_result).
template <class R, class U, class T>
concept partial_result_of =
    std::convertible_to<R, U> || (is_narrow_float_v<T> && std::same_as<U, float> && std::same_as<std::remove_cvref_t<R>, T>);
template <class Op, class T, class U = op_operand_t<Op, T>>  // U: T, or float for an op on narrow floats that runs in fp32
concept op_returns_element = requires(const Op& op, const U& a, const U& b) {
  { op(a, b) } -> partial_result_of<U, T>;  // op(a, b) takes two const T& and returns T (on half and bfloat16 also float operands, result float or T); built-ins: sum/prod/avg need arithmetic or complex T, min/max ordered T, band/bor/bxor integer T
};
}  // namespace detail

/// A reduction op on T: `op(a, b)` with `const T&` operands returns something convertible to T, and
/// Op is trivially copyable (so it can be passed to a GPU kernel by value). On narrow floats
/// (collx::half, bfloat16, CUDA's __half, __nv_bfloat16) an op may instead take float and return
/// float or T: it then gets fp32 operands (detail::op_runs_in_fp32). Associativity is assumed, as
/// MPI does, and not checked. Commutativity is declared (see collx::op_traits).
/// The requirements are separate concepts so that a compile error names the one an op misses: a
/// `mutable` lambda, `T&` parameters, a capture that owns memory, or an op with no meaning on T.
template <class Op, class T>
concept reduction_op = element<T> && detail::op_trivially_copyable<Op> && detail::op_call_is_const<Op, T> &&
                       detail::op_takes_const_operands<Op, T> && detail::op_returns_element<Op, T>;

namespace detail {
/// std::span<T> of any T, as the span overloads take it (not a fixed-extent span<T, N>).
template <class R>
inline constexpr bool is_dynamic_span = false;
template <class T>
inline constexpr bool is_dynamic_span<std::span<T>> = true;
/// std::ranges' contiguous_range and sized_range as one value, not a concept: where a call's
/// argument is not a buffer (an op in a buffer's place among an overload set's candidates), a
/// compiler then notes one line, not a page of std::ranges' internals.
template <class R>
inline constexpr bool is_contiguous_sized_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;
}  // namespace detail

/// A buffer given as a contiguous, sized range of elements: std::vector<T>, std::array<T, N>,
/// T[N], std::span<T>, ... Every collective and point-to-point call takes its buffers as
/// std::span; each also has an overload taking contiguous ranges, which views them as spans
/// (data(), size()) and calls the span form, so `allreduce(comm, grad, mean)` works on vectors.
/// Sizes are the ranges' sizes, in elements; nothing is resized. Not of volatile elements
/// (range_value_t drops the volatile of `volatile int[4]`; collx moves elements as bytes).
template <class R>
concept contiguous_buffer = detail::is_contiguous_sized_range<R> &&  // a buffer: a vector, array, span or C array
                            element<std::ranges::range_value_t<R>> &&
                            !std::is_volatile_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// A contiguous_buffer collx only reads, taken as `const S&`: contiguous when const too.
template <class S>
concept input_buffer = contiguous_buffer<const S&>;

/// A contiguous_buffer collx writes (R as deduced for a forwarding reference): non-const
/// elements, passed as an lvalue or as a view that does not own them (std::ranges::borrowed_range:
/// a std::span<T, N>, a std::ranges::subrange, ...; a temporary container's results would be
/// lost), and not a std::span<T> (those take the span overloads, which already accept any range
/// convertible to the read-only span next to them).
template <class R>
concept output_buffer = contiguous_buffer<R> && std::ranges::borrowed_range<R> &&
                        !detail::is_dynamic_span<std::remove_cvref_t<R>> &&
                        !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// A container passed as a temporary (S as deduced for a forwarding reference; not a view): the
/// async calls refuse it as their send buffer, which they read after they return, when it is gone.
template <class S>
concept temporary_buffer = contiguous_buffer<S> && !std::ranges::borrowed_range<S>;

/// The element type of a contiguous_buffer.
template <contiguous_buffer R>
using buffer_element_t = std::ranges::range_value_t<R>;

/// Two contiguous_buffers of one element type (send and recv of a collective).
template <class S, class R>
concept same_elements = std::same_as<buffer_element_t<S>, buffer_element_t<R>>;

/// A reduction_op on the elements of contiguous_buffer R.
template <class Op, class R>
concept reduction_op_on = reduction_op<Op, buffer_element_t<R>>;

namespace detail {
/// A contiguous_buffer viewed as a span of its (possibly const) elements.
template <contiguous_buffer R>
auto as_span(R& r) {
  return std::span<std::remove_reference_t<std::ranges::range_reference_t<R>>>(std::ranges::data(r),
                                                                               std::ranges::size(r));
}

/// A contiguous_buffer viewed as a span of const elements.
template <input_buffer R>
std::span<const buffer_element_t<R>> as_const_span(const R& r) {
  return {std::ranges::data(r), std::ranges::size(r)};
}
}  // namespace detail

}  // namespace v0
}  // namespace collx
