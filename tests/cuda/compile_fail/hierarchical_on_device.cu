// Must not compile, with a message that says why: algo::hierarchical runs on host communicators
// only.
#include <collx/cuda/device_collectives.cuh>

void hierarchical_on_device(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::all_gather<collx::algo::hierarchical<>>(dc, send, recv, count);
}
