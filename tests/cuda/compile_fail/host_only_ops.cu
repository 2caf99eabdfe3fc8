// Must not compile: ops without a __device__ call operator, in collx's reduction kernel and in a
// device collective. collx's shared host/device code switches nvcc's host/device check off for host
// code, so without require_device_callable (and the check in fold_ranks) nvcc built kernels that
// dropped the op and computed nothing, or wrong results. One file, one nvcc run; each
// `// expect:` line's message must be in nvcc's output (expect_compile_errors.cmake).
#include <collx/cuda/device_collectives.cuh>

struct host_only_minus {
  int operator()(const int& a, const int& b) const { return a - b; }
};
struct host_only_plus {
  int operator()(const int& a, const int& b) const { return a + b; }
};
struct host_only_max {
  float operator()(const float& a, const float& b) const { return a < b ? b : a; }
};

// A host-only op in collx's reduction kernel.
// expect: calling a __host__ function\("host_only_minus::operator \(\)[^"]*"\) from a __device__ function
void reduce_minus(int* dst, const int* a, const int* b, std::size_t n) {
  collx::gpu::reduce_elementwise<int>(dst, a, b, n, host_only_minus{}, 1, cudaStream_t{});
}

// The same wrapped in collx::commutative_op, whose forwarding call operator also has nvcc's
// host/device check off.
// expect: calling a __host__ function\("host_only_plus::operator \(\)[^"]*"\) from a __device__ function
void reduce_commutative_plus(int* dst, const int* a, const int* b, std::size_t n) {
  collx::gpu::reduce_elementwise<int>(dst, a, b, n, collx::commutative_op{host_only_plus{}}, 1, cudaStream_t{});
}

// A device collective with a host-only op.
// expect: calling a __host__ function\("host_only_max::operator \(\)[^"]*"\) from a __device__ function
void all_reduce_max(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t n) {
  collx::gpu::all_reduce(dc, send, recv, n, host_only_max{}, cudaStream_t{});
}
