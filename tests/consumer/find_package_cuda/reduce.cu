// A user's kernel call through collx::cuda: bfloat16 sum of two device vectors.
#include <collx/cuda/reduce_kernel.cuh>

#include <cuda_runtime_api.h>

#include <vector>

// Returns the number of wrong results, or -1 when there is no device to run on.
int run_bf16_sum() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return -1;
  }
  constexpr std::size_t n = 1001;
  std::vector<collx::bfloat16> a(n, collx::bfloat16(256.0f)), b(n, collx::bfloat16(1.0f)), out(n);
  collx::bfloat16 *da = nullptr, *db = nullptr, *dd = nullptr;
  collx::gpu::check(cudaMalloc(&da, n * 2), "cudaMalloc");
  collx::gpu::check(cudaMalloc(&db, n * 2), "cudaMalloc");
  collx::gpu::check(cudaMalloc(&dd, n * 2), "cudaMalloc");
  collx::gpu::check(cudaMemcpy(da, a.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  collx::gpu::check(cudaMemcpy(db, b.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  collx::gpu::reduce_elementwise<collx::bfloat16>(dd, da, db, n, collx::ops::sum{}, 1, cudaStream_t{});
  collx::gpu::check(cudaMemcpy(out.data(), dd, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  int wrong = 0;
  for (const auto& x : out) wrong += !(x == collx::bfloat16(256.0f));  // 257 rounds to even: 256
  return wrong;
}
