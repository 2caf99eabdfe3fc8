// Must not compile: an op without a __device__ call operator in collx's reduction kernel. (collx's
// shared host/device code switches nvcc's host/device check off for host code, so without
// require_device_callable this would build a kernel that computes nothing.)
#include <collx/cuda/reduce_kernel.cuh>

struct host_only_op {
  int operator()(const int& a, const int& b) const { return a - b; }
};

void reduce_on_device(int* dst, const int* a, const int* b, std::size_t n) {
  collx::gpu::reduce_elementwise<int>(dst, a, b, n, host_only_op{}, 1, cudaStream_t{});
}
