// Must not compile, with a message that says why: the window (zero-copy) forms read every peer's
// window directly and take no algorithm.
#include <collx/cuda/device_collectives.cuh>

void ring_window_all_reduce(collx::gpu::device_communicator& dc, const collx::gpu::window& w, float* recv, std::size_t count) {
  collx::gpu::all_reduce<collx::algo::ring>(dc, w, 0, recv, count);
}
