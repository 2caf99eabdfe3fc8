// Must not compile, with a message that says why: an extended __device__ lambda as the op (nvcc
// cannot call it in host code, where collx checks the op; a __host__ __device__ one works).
#include <collx/cuda/device_collectives.cuh>

void device_lambda_sum(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count,
                       cudaStream_t stream) {
  collx::gpu::all_reduce(dc, send, recv, count, collx::commutative_op{[] __device__(float a, float b) { return a + b; }},
                         stream);
}
