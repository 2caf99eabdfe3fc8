// Must not compile: moving an element type that is not trivially copyable between GPUs.
#include <collx/cuda/device_collectives.cuh>

#include <string>

void gather(collx::gpu::device_communicator& dc, const std::string* send, std::string* recv, std::size_t n) {
  collx::gpu::all_gather(dc, send, recv, n, cudaStream_t{});
}
