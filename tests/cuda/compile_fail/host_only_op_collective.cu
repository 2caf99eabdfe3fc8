// Must not compile: a device collective with an op that has no __device__ call operator (without
// the check in fold_ranks, nvcc built a kernel that dropped the op and returned wrong results).
#include <collx/cuda/device_collectives.cuh>

struct host_only_op {
  float operator()(const float& a, const float& b) const { return a < b ? b : a; }
};

void reduce_on_device(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t n) {
  collx::gpu::all_reduce(dc, send, recv, n, host_only_op{}, cudaStream_t{});
}
