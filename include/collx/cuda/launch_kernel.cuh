/// @file cuda/launch_kernel.cuh
/// Kernel launches that report their own error only. For .cu files (nvcc).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include <collx/cuda/runtime.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// Enqueues kernel(args...) on `stream` (current device) as `blocks` blocks of `threads` threads,
/// without dynamic shared memory; the arguments convert to the kernel's parameters as in
/// `kernel<<<blocks, threads, 0, stream>>>(args...)`. Returns this launch's own status: unlike
/// cudaGetLastError() after `<<<...>>>`, not an error an earlier CUDA call of the caller's left
/// unread (which is neither returned nor cleared).
template <class... Params, class... Args>
cudaError_t launch_status(void (*kernel)(Params...), unsigned blocks, unsigned threads, cudaStream_t stream,
                          Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = nullptr;
  config.numAttrs = 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// Throws `status` (errc::cuda, naming `what`) if it is an error, clearing it first from what
/// cudaGetLastError() would return (it is this call's own: an error the caller left unread was
/// overwritten by it).
inline void check_own(cudaError_t status, const char* what) {
  if (status != cudaSuccess) (void)cudaGetLastError();  // the exception carries it
  check(status, what);
}

/// launch_status, checked.
/// @throws collx::error (errc::cuda) naming `what` when this launch fails (bad configuration, no
/// kernel image for the device, a context already broken by an earlier fault). An error left
/// unread by the caller's earlier calls does not throw here: it would make a collective that was
/// enqueued look failed, and a retry would meet the peers' next call.
template <class... Params, class... Args>
void launch_kernel(const char* what, void (*kernel)(Params...), unsigned blocks, unsigned threads, cudaStream_t stream,
                   Args&&... args) {
  check_own(launch_status(kernel, blocks, threads, stream, std::forward<Args>(args)...), what);
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
