// Must not compile, with a message that says why: algo::tree has no device form (collx's device
// collectives take algo::ring, algo::direct or algo::automatic).
#include <collx/cuda/device_collectives.cuh>

void tree_on_device(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::all_reduce<collx::algo::tree>(dc, send, recv, count);
}
