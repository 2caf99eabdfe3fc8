/// @file cuda/reduce_step.hpp
/// What one element of collx's element-wise kernels computes, written once for host and device
/// (COLLX_HOST_DEVICE) on top of detail::reduction, so a kernel gives the host path's bits: narrow
/// floats widened to fp32 when read and rounded once when written as elements; avg divided by the
/// world size when written as elements; user ops called as op(left, right). Plain C++.
#pragma once

#include <type_traits>

#include <collx/detail/host_device.hpp>
#include <collx/detail/reduction.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// What a buffer of an element-wise kernel holds for a reduction of T with Op.
enum class values {
  elements,  ///< the user's values, type T (inputs, and final results: rounded, avg divided)
  partials,  ///< partial results in the accumulator type, detail::reduction<T, Op>::acc (fp32 for
             ///< half/bfloat16 under built-in ops, T otherwise), between steps of one collective
};

/// The type of one value of a buffer holding `V` for a reduction of T with Op.
template <class T, class Op, values V>
using value_t = std::conditional_t<V == values::partials, typename detail::reduction<T, Op>::acc, T>;

/// One value read from a buffer holding `V`, as an accumulator (widened when V is elements).
template <class T, class Op, values V>
COLLX_HOST_DEVICE constexpr typename detail::reduction<T, Op>::acc read_partial(const value_t<T, Op, V>& x) {
  if constexpr (V == values::partials) return x;
  else return detail::reduction<T, Op>::widen(x);
}

/// An accumulator written to a buffer holding `V`: as is for partials; finalised (rounded once,
/// avg divided by world_size) for elements.
template <class T, class Op, values V>
COLLX_HOST_DEVICE constexpr value_t<T, Op, V> write_partial(const typename detail::reduction<T, Op>::acc& x,
                                                           int world_size) {
  if constexpr (V == values::partials) {
    (void)world_size;
    return x;
  } else {
    return detail::reduction<T, Op>::finalize(x, world_size);
  }
}

/// dst = op(a, b) for one element, `a` the left operand, with the roles of the three buffers.
template <class T, class Op, values A, values B, values D>
COLLX_HOST_DEVICE constexpr value_t<T, Op, D> reduce_step(const Op& op, const value_t<T, Op, A>& a,
                                                         const value_t<T, Op, B>& b, int world_size) {
  using red = detail::reduction<T, Op>;
  return write_partial<T, Op, D>(red::combine(op, read_partial<T, Op, A>(a), read_partial<T, Op, B>(b)), world_size);
}

/// Converts one value between roles: elements -> partials widens, partials -> elements finalises,
/// same role copies.
template <class T, class Op, values S, values D>
struct convert_step {
  int world_size = 1;  ///< n for avg's division when D is elements
  /// The converted value.
  COLLX_HOST_DEVICE constexpr value_t<T, Op, D> operator()(const value_t<T, Op, S>& x) const {
    if constexpr (S == D) return x;  // a copy: bits unchanged, no division
    else return write_partial<T, Op, D>(read_partial<T, Op, S>(x), world_size);
  }
};

}  // namespace gpu
}  // namespace v0
}  // namespace collx
