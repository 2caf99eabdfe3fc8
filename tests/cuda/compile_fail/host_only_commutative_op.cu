// Must not compile: a host-only op wrapped in collx::commutative_op (whose forwarding call operator
// also has nvcc's host/device check off) in collx's reduction kernel.
#include <collx/cuda/reduce_kernel.cuh>

struct host_only_op {
  int operator()(const int& a, const int& b) const { return a + b; }
};

void reduce_on_device(int* dst, const int* a, const int* b, std::size_t n) {
  collx::gpu::reduce_elementwise<int>(dst, a, b, n, collx::commutative_op{host_only_op{}}, 1, cudaStream_t{});
}
