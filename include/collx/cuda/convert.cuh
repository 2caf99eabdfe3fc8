/// @file cuda/convert.cuh
/// Copy and convert between the value roles of a reduction on the device: elements -> partials
/// (widen), partials -> elements (finalise: round once, divide for avg), same role (copy).
/// For .cu files (nvcc, with collx::cuda's --expt-relaxed-constexpr).
#pragma once

#include <cuda_runtime_api.h>

#include <cub/device/device_transform.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <collx/cuda/device_callable.cuh>
#include <collx/cuda/launch_kernel.cuh>  // check_own
#include <collx/cuda/reduce_kernel.cuh>  // ranges_overlap
#include <collx/cuda/reduce_step.hpp>
#include <collx/cuda/runtime.hpp>
#include <collx/cuda_types.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// convert_step<T, Op, S, D> as a device-only function object for cub::DeviceTransform: a
/// narrow_float<T> specialisation without __device__ conversions is a compile error here
/// (require_device_callable) rather than a kernel compiled to nothing.
template <class T, class Op, values S, values D>
struct device_convert {
  Op op;               ///< the reduction's op (only named, for the device check)
  int world_size = 1;  ///< n for avg's division when D is elements
  /// The converted value.
  __device__ value_t<T, Op, D> operator()(const value_t<T, Op, S>& x) const {
    if (world_size == 0) require_device_callable<T>(op, *reinterpret_cast<const T*>(&x));  // never taken
    return convert_step<T, Op, S, D>{world_size}(x);
  }
};

/// Enqueues dst[i] = convert(src[i]) for i in [0, count) on `stream` and returns. Counts are
/// elements. S and D are the roles of src and dst (see values): S == D copies the bytes
/// (cudaMemcpyAsync; nothing when dst == src); otherwise cub::DeviceTransform applies
/// convert_step<T, Op, S, D> (it picks vector widths and bulk copies itself; it guards its own
/// reads at both ends of the buffers), and D == elements finalises with world_size. Only
/// [src, src + count) is read and [dst, dst + count) written.
/// Preconditions: device pointers on the stream's device; no overlap except dst == src with S == D.
/// @throws collx::error (errc::invalid_argument) for a null pointer with count > 0, world_size < 1,
///         a count past memory or overlapping buffers; (errc::cuda) when CUDA refuses the copy or the launch, finds no device, or the
///         context is broken (a sticky error). When S != D, a non-sticky error an earlier call of
///         the caller's left unread is cleared (CUB reads cudaGetLastError() itself), not reported.
template <class T, values S, values D, class Op>
void convert(value_t<T, Op, D>* dst, const value_t<T, Op, S>* src, std::size_t count, const Op& op,
             int world_size, cudaStream_t stream) {
  using VS = value_t<T, Op, S>;
  using VD = value_t<T, Op, D>;
  if (world_size < 1)
    COLLX_THROW(errc::invalid_argument, "gpu::convert: world_size " + std::to_string(world_size) + " < 1");
  if (count == 0) return;
  if (count > static_cast<std::size_t>(PTRDIFF_MAX) / std::max(sizeof(VS), sizeof(VD)))
    COLLX_THROW(errc::invalid_argument, "gpu::convert: count " + std::to_string(count) +
                                            " is more than memory holds (a negative count converted to std::size_t?)");
  if (dst == nullptr || src == nullptr)
    COLLX_THROW(errc::invalid_argument, "gpu::convert: null buffer with count " + std::to_string(count));
  if constexpr (S == D) {
    if (static_cast<const void*>(dst) == static_cast<const void*>(src)) return;
  }
  if (ranges_overlap(dst, count * sizeof(VD), src, count * sizeof(VS)))
    COLLX_THROW(errc::invalid_argument, "gpu::convert: dst and src overlap");
  if constexpr (S == D) {
    check_own(cudaMemcpyAsync(dst, src, count * sizeof(VD), cudaMemcpyDefault, stream), "gpu::convert: cudaMemcpyAsync");
  } else {
    // CUB wraps its calls in CubDebug, which calls cudaGetLastError(): an error an earlier call of
    // the caller's left unread (a failed cudaMalloc) comes back from Transform as its own, before
    // anything is launched, and is cleared; CUB's own launch error may be cleared or (older CCCL,
    // cudaPeekAtLastError) left pending. So take the unread one out of the way first (a sticky
    // error stays and fails the launch below, as it should), and clear whatever CUB leaves: the
    // status is then this launch's alone, and nothing is left for the caller's next
    // cudaGetLastError(). No stream query: it is illegal on a stream being captured (and would
    // invalidate the capture).
    (void)cudaGetLastError();
    const cudaError_t status = cub::DeviceTransform::Transform(src, dst, count, device_convert<T, Op, S, D>{op, world_size}, stream);
    if (status != cudaSuccess) {
      // CUB first reads the current device's attributes: without a driver or a device that fails
      // as "invalid device ordinal". Name the cause the runtime gives for it instead.
      int devices = 0;
      const cudaError_t found = cudaGetDeviceCount(&devices);
      if (found != cudaSuccess) check_own(found, "gpu::convert: cudaGetDeviceCount (no device to convert on)");
    }
    check_own(status, "gpu::convert: cub::DeviceTransform::Transform");  // cleared, then thrown
  }
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
