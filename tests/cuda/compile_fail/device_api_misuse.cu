// Must not compile: each function misuses the device API, and nvcc must say why in collx's words.
// One file for all of them (one nvcc run instead of eight: each spent ~15 s parsing the same
// headers): nvcc reports every failed static_assert of a file, and expect_compile_errors.cmake
// requires each `// expect:` line's message (a regular expression) in its output.
#include <collx/cuda/device_collectives.cuh>

#include <span>
#include <string>

// The device all_to_all_v has one form and takes no algorithm.
// expect: collx::gpu::all_to_all_v takes no algorithm
void direct_all_to_all_v(collx::gpu::device_communicator& dc, const int* send, std::span<const std::size_t> send_counts,
                         int* recv, std::span<const std::size_t> recv_counts) {
  collx::gpu::all_to_all_v<collx::algo::direct>(dc, send, send_counts, recv, recv_counts);
}

// The same with braced lists for counts, which the catch-all's pack cannot deduce (it was nvcc's
// "no instance of overloaded function matches" then); the second all_to_all_v message is this one's.
// expect: collx::gpu::all_gather_v takes no algorithm
// expect: collx::gpu::reduce_scatter_v takes no algorithm
// expect: collx::gpu::all_to_all_v takes no algorithm.*collx::gpu::all_to_all_v takes no algorithm
void braced_counts_v_forms(collx::gpu::device_communicator& dc, const int* send, int* recv) {
  collx::gpu::all_gather_v<collx::algo::ring>(dc, send, recv, {1, 2});
  collx::gpu::reduce_scatter_v<collx::algo::direct>(dc, send, recv, {1, 2});
  collx::gpu::all_to_all_v<collx::algo::direct>(dc, send, {1, 2}, recv, {2, 1});
}

// The device broadcast has one form and takes no algorithm (the host API's broadcast<algo::ring>
// has no device counterpart).
// expect: collx::gpu::broadcast takes no algorithm
void ring_broadcast(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::broadcast<collx::algo::ring>(dc, send, recv, count, 0);
}

// The window (zero-copy) forms read every peer's window directly and take no algorithm.
// expect: collx::gpu::all_reduce on a window takes no algorithm
void ring_window_all_reduce(collx::gpu::device_communicator& dc, const collx::gpu::window& w, float* recv,
                            std::size_t count) {
  collx::gpu::all_reduce<collx::algo::ring>(dc, w, 0, recv, count);
}

// An extended __device__ lambda as the op (nvcc cannot call it in host code, where collx checks
// the op; a __host__ __device__ one works).
// expect: collx::gpu: a __device__ lambda cannot be a reduction op
void device_lambda_sum(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count,
                       cudaStream_t stream) {
  collx::gpu::all_reduce(dc, send, recv, count, collx::commutative_op{[] __device__(float a, float b) { return a + b; }},
                         stream);
}

// algo::hierarchical runs on host communicators only.
// expect: collx::gpu::all_gather: algo::tree and algo::hierarchical run on host communicators only
void hierarchical_all_gather(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::all_gather<collx::algo::hierarchical<>>(dc, send, recv, count);
}

// algo::tree has no device form (collx's device collectives take algo::ring, algo::direct or
// algo::automatic).
// expect: collx::gpu::all_reduce: algo::tree and algo::hierarchical run on host communicators only
void tree_all_reduce(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::all_reduce<collx::algo::tree>(dc, send, recv, count);
}

// Moving an element type that is not trivially copyable between GPUs.
// expect: collx::gpu::all_gather: T must be a trivially copyable object type
void gather_strings(collx::gpu::device_communicator& dc, const std::string* send, std::string* recv, std::size_t n) {
  collx::gpu::all_gather(dc, send, recv, n, cudaStream_t{});
}

// The op left out and a literal 0 (the default stream, as CUDA code often writes it) in its place.
// A cudaStream_t variable there compiles (the forms without an op; test_cuda_device.cu), but 0 and
// nullptr deduce the op's type.
// expect: collx::gpu: a reduction got a stream, 0 or nullptr where its op goes
void stream_in_op_place(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::reduce_scatter(dc, send, recv, count, 0);
}

// Ops whose parameters narrow the elements (int on float elements truncates each value): a struct
// and a __host__ __device__ lambda.
// expect: collx::gpu: the op's parameter or return type narrows the elements.*collx::gpu: the op's parameter or return type narrows the elements
struct int_sum {
  __host__ __device__ int operator()(int a, int b) const { return a + b; }
};
void int_ops_on_floats(collx::gpu::device_communicator& dc, const float* send, float* recv, std::size_t count) {
  collx::gpu::all_reduce(dc, send, recv, count, int_sum{}, cudaStream_t{});
  collx::gpu::reduce(dc, send, recv, count, 0, [] __host__ __device__(int a, int b) { return a + b; }, cudaStream_t{});
}
