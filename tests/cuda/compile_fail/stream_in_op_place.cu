// Must not compile, with a message that says why: the op is left out and a literal 0 (the default
// stream, as CUDA code often writes it) stands in its place. A cudaStream_t variable there compiles
// (the forms without an op; test_cuda_device.cu), but 0 and nullptr deduce the op's type.
#include <collx/cuda/device_collectives.cuh>

void stream_in_op_place(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::reduce_scatter(dc, send, recv, count, 0);
}
