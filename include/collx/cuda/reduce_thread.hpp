/// @file cuda/reduce_thread.hpp
/// How the element-wise reduction kernel (reduce_kernel.cuh) splits its work: the vector width and
/// grid it is launched with (plan_reduce), and the work of one grid thread (reduce_thread, a
/// COLLX_HOST_DEVICE function). The kernel calls both; tests call them for every thread of a grid on
/// the CPU, so the head/vector/tail split is tested without a GPU. Plain C++.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <collx/cuda/launch_geometry.hpp>
#include <collx/cuda/reduce_step.hpp>
#include <collx/cuda/vector_access.hpp>
#include <collx/cuda/vector_plan.hpp>
#include <collx/detail/host_device.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// The vector width, in elements, the reduction uses for buffers holding A, B and D: 16 bytes of
/// the widest, or 1 (scalar only) when a value type cannot be vectorised (size not a power of two
/// dividing 16, or not default-constructible).
template <class T, class Op, values A, values B, values D>
inline constexpr unsigned reduce_vector_width = [] {
  using VA = value_t<T, Op, A>;
  using VB = value_t<T, Op, B>;
  using VD = value_t<T, Op, D>;
  constexpr std::size_t widest = std::max({sizeof(VA), sizeof(VB), sizeof(VD)});
  constexpr auto fits = [](std::size_t s) { return (s & (s - 1)) == 0 && s <= max_vector_bytes; };
  if constexpr (!fits(sizeof(VA)) || !fits(sizeof(VB)) || !fits(sizeof(VD)) ||
                !std::is_default_constructible_v<VA> || !std::is_default_constructible_v<VB> ||
                !std::is_default_constructible_v<VD>)
    return 1u;
  else
    return static_cast<unsigned>(max_vector_bytes / widest);
}();

/// What the element-wise reduction of `count` values over dst, a and b is launched with.
struct reduce_launch {
  vector_plan plan;      ///< the vector plan (width reduce_vector_width) or the scalar plan
  launch_geometry grid;  ///< blocks and threads; empty when count is 0
};

/// The plan and grid for dst[i] = op(a[i], b[i]), i < count, on a device with `limits`: the vector
/// plan when reduce_vector_width > 1 and plan_vectors allows it, else the scalar plan; a grid with a
/// thread per vector, head and tail element (plan_launch of max(vectors, head, tail)).
/// Only addresses are inspected. @throws collx::error (errc::invalid_argument) from plan_launch.
template <class T, class Op, values A, values B, values D>
reduce_launch plan_reduce(const value_t<T, Op, D>* dst, const value_t<T, Op, A>* a, const value_t<T, Op, B>* b,
                          std::size_t count, const device_limits& limits, const launch_policy& policy = {}) {
  constexpr unsigned width = reduce_vector_width<T, Op, A, B, D>;
  reduce_launch r;
  r.plan = width == 1 ? scalar_plan(count)
                      : plan_vectors(count, {buffer_ref::of(dst), buffer_ref::of(a), buffer_ref::of(b)});
  r.grid = plan_launch(std::max({r.plan.vectors, r.plan.head, r.plan.tail}), limits, policy);
  return r;
}

/// Grid thread `thread` of `stride` threads computes its share of dst[i] = op(a[i], b[i]) for i in
/// [0, plan.count()), `a` the left operand (reduce_step). Width == 1: plan is the scalar plan and the
/// thread does elements thread, thread + stride, ... Width > 1: the thread does head element
/// `thread` (if < plan.head), tail element plan.tail_begin() + thread (if < plan.tail), and vectors
/// thread, thread + stride, ... of plan.vectors. Every index below plan.count() is done by exactly
/// one thread when stride >= max(1, plan.head, plan.tail); nothing at or above it is touched.
/// dst may be a or b (same index, same type).
template <class T, class Op, values A, values B, values D, unsigned Width>
COLLX_HOST_DEVICE inline void reduce_thread(std::size_t thread, std::size_t stride, value_t<T, Op, D>* dst,
                                            const value_t<T, Op, A>* a, const value_t<T, Op, B>* b,
                                            const vector_plan& plan, const Op& op, int world_size) {
  if constexpr (Width == 1) {
    for (std::size_t i = thread; i < plan.vectors; i += stride)
      dst[i] = reduce_step<T, Op, A, B, D>(op, a[i], b[i], world_size);
  } else {
    if (thread < plan.head) dst[thread] = reduce_step<T, Op, A, B, D>(op, a[thread], b[thread], world_size);
    if (thread < plan.tail) {
      const std::size_t i = plan.tail_begin() + thread;
      dst[i] = reduce_step<T, Op, A, B, D>(op, a[i], b[i], world_size);
    }
    for (std::size_t v = thread; v < plan.vectors; v += stride) {
      const std::size_t i = plan.vector_begin(v);
      const auto va = load_vector<Width>(a + i);
      const auto vb = load_vector<Width>(b + i);
      aligned_vector<value_t<T, Op, D>, Width> vd;
#if defined(__CUDA_ARCH__)  // device pass only: the host compiler warns about the pragma
#pragma unroll
#endif
      for (unsigned k = 0; k < Width; ++k)
        vd.values[k] = reduce_step<T, Op, A, B, D>(op, va.values[k], vb.values[k], world_size);
      store_vector<Width>(dst + i, vd);
    }
  }
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
