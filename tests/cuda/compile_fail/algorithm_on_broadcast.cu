// Must not compile, with a message that says why: the device broadcast has one form and takes no
// algorithm (the host API's broadcast<algo::ring> has no device counterpart).
#include <collx/cuda/device_collectives.cuh>

void ring_broadcast_on_device(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::broadcast<collx::algo::ring>(dc, send, recv, count, 0);
}
