/// @file cuda/reduce_kernel.cuh
/// The element-wise reduction kernel, dst[i] = op(a[i], b[i]), for any element type and op, and its
/// host-side launcher. The per-thread work is reduce_thread.hpp's (plain C++, also run on the CPU).
/// For .cu files (nvcc, with collx::cuda's --expt-relaxed-constexpr).
///
/// Hand-written rather than cub::DeviceTransform (which collx uses for plain conversions, see
/// convert.cuh): its per-thread body is what the device collectives will fuse with peer loads and
/// flag waits, and its vector width and head/tail split are explicit and unit-tested
/// (vector_plan.hpp, launch_geometry.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include <collx/concepts.hpp>
#include <collx/cuda/device_callable.cuh>
#include <collx/cuda/launch_geometry.hpp>
#include <collx/cuda/launch_kernel.cuh>
#include <collx/cuda/reduce_step.hpp>
#include <collx/cuda/reduce_thread.hpp>
#include <collx/cuda/runtime.hpp>
#include <collx/cuda/vector_plan.hpp>
#include <collx/cuda_types.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// dst[i] = op(a[i], b[i]) for i in [0, plan.count()), `a` the left operand: each grid thread does
/// reduce_thread's share (head and tail elements one at a time, aligned vectors of Width values by a
/// grid-stride loop; Width == 1 needs the scalar plan). Reads and writes only indices below
/// plan.count(). dst may be a or b (same index, same type); no other overlap. Launch with a geometry
/// from plan_launch(max(vectors, head, tail)). An Op without a __device__ call operator does not
/// compile (require_device_callable).
template <class T, class Op, values A, values B, values D, unsigned Width>
__global__ void reduce_kernel(value_t<T, Op, D>* dst, const value_t<T, Op, A>* a, const value_t<T, Op, B>* b,
                              vector_plan plan, Op op, int world_size) {
  const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  reduce_thread<T, Op, A, B, D, Width>(thread, stride, dst, a, b, plan, op, world_size);
  if (thread == ~std::size_t{0}) require_device_callable<T>(op, *reinterpret_cast<const T*>(a));  // never taken
}

/// True when the byte ranges [p, p + n) and [q, q + m) share a byte (empty ranges share none).
inline bool ranges_overlap(const void* p, std::size_t n, const void* q, std::size_t m) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(p), y = reinterpret_cast<std::uintptr_t>(q);
  return n != 0 && m != 0 && x < y + m && y < x + n;
}

/// Enqueues dst[i] = op(a[i], b[i]) for i in [0, count) on `stream` and returns. Counts are elements.
/// The buffers hold the values their roles A, B, D say (values::elements: T; values::partials: the
/// accumulator type); D == elements finalises (narrow floats rounded once, avg divided by
/// world_size). `a` is the left operand of non-commutative ops. Vector loads are used when the
/// pointers allow (plan_vectors), scalar accesses otherwise; nothing outside the three ranges is
/// read or written. `limits`: the stream's device (current_device_limits()).
/// Preconditions: device pointers (or managed/peer-mapped) on the stream's device; dst may equal a or
/// b when its value type is the same (in place), no other overlap.
/// @throws collx::error (errc::invalid_argument) for a null pointer with count > 0, world_size < 1,
///         a count past memory or overlapping buffers; (errc::cuda) when the launch fails. Kernel faults surface at the
///         next synchronising CUDA call, as for any kernel.
template <class T, values A = values::elements, values B = values::elements, values D = values::elements, class Op>
void reduce_elementwise(value_t<T, Op, D>* dst, const value_t<T, Op, A>* a, const value_t<T, Op, B>* b,
                        std::size_t count, const Op& op, int world_size, cudaStream_t stream,
                        const device_limits& limits) {
  static_assert(reduction_op<Op, T>,
                "collx::gpu::reduce_elementwise: Op must be a reduction op on T (see collx/concepts.hpp)");
  using VA = value_t<T, Op, A>;
  using VB = value_t<T, Op, B>;
  using VD = value_t<T, Op, D>;
  if (world_size < 1)
    COLLX_THROW(errc::invalid_argument, "gpu::reduce_elementwise: world_size " + std::to_string(world_size) + " < 1");
  if (count == 0) return;
  // Before the overlap test, whose byte counts such a count would wrap (or skip, in place).
  if (count > static_cast<std::size_t>(PTRDIFF_MAX) / std::max({sizeof(VA), sizeof(VB), sizeof(VD)}))
    COLLX_THROW(errc::invalid_argument, "gpu::reduce_elementwise: count " + std::to_string(count) +
                                            " is more than memory holds (a negative count converted to std::size_t?)");
  if (dst == nullptr || a == nullptr || b == nullptr)
    COLLX_THROW(errc::invalid_argument, "gpu::reduce_elementwise: null buffer with count " + std::to_string(count));
  const auto aliases = [&](const void* p, std::size_t size) {
    if (p == static_cast<const void*>(dst) && size == sizeof(VD)) return;  // in place
    if (ranges_overlap(dst, count * sizeof(VD), p, count * size))
      COLLX_THROW(errc::invalid_argument, "gpu::reduce_elementwise: dst overlaps an input other than in place");
  };
  aliases(a, sizeof(VA));
  aliases(b, sizeof(VB));

  constexpr unsigned width = reduce_vector_width<T, Op, A, B, D>;
  const auto [plan, g] = plan_reduce<T, Op, A, B, D>(dst, a, b, count, limits);
  if constexpr (width > 1) {
    if (!plan.scalar()) {
      if (plan.width != width)
        COLLX_THROW(errc::internal, "gpu::reduce_elementwise: plan width differs from the kernel's");
      launch_kernel("gpu::reduce_elementwise: reduce_kernel launch", &reduce_kernel<T, Op, A, B, D, width>, g.blocks,
                    g.threads_per_block, stream, dst, a, b, plan, op, world_size);
      return;
    }
  }
  launch_kernel("gpu::reduce_elementwise: reduce_kernel launch", &reduce_kernel<T, Op, A, B, D, 1>, g.blocks,
                g.threads_per_block, stream, dst, a, b, plan, op, world_size);
}

/// As above, on the current device's limits.
template <class T, values A = values::elements, values B = values::elements, values D = values::elements, class Op>
void reduce_elementwise(value_t<T, Op, D>* dst, const value_t<T, Op, A>* a, const value_t<T, Op, B>* b,
                        std::size_t count, const Op& op, int world_size, cudaStream_t stream) {
  // No device query for an empty call (the other overload still checks the arguments).
  reduce_elementwise<T, A, B, D>(dst, a, b, count, op, world_size, stream,
                                 count == 0 ? device_limits{1} : current_device_limits());
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
