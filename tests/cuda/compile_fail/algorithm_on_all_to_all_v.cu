// Must not compile, with a message that says why: the device all_to_all_v has one form and takes no
// algorithm.
#include <collx/cuda/device_collectives.cuh>

#include <span>

void direct_all_to_all_v_on_device(collx::gpu::device_communicator& dc, const int* send, std::span<const std::size_t> send_counts,
                                   int* recv, std::span<const std::size_t> recv_counts) {
  collx::gpu::all_to_all_v<collx::algo::direct>(dc, send, send_counts, recv, recv_counts);
}
