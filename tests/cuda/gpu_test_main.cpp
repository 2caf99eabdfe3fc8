// main() of collx's GPU test executables (Catch2). Without a CUDA device it runs only the tests not
// tagged [gpu] (host-side argument checks), prints "SKIPPED: no CUDA device" and exits with
// collx_gpu_skip_code (77, the SKIP_RETURN_CODE tests/cuda/CMakeLists.txt registers), so ctest
// reports the test as skipped instead of passed. Catch2's implementation is in ../catch_impl.cpp.
#include "../catch_runner.hpp"

#include <collx/cuda/kernel_registry.hpp>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>

#ifndef COLLX_GPU_TEST_MIN_DEVICES  // nccl_test_main: 2 (one rank per GPU)
#define COLLX_GPU_TEST_MIN_DEVICES 1
#endif

namespace {
constexpr int collx_gpu_skip_code = 77;
constexpr int min_devices = COLLX_GPU_TEST_MIN_DEVICES;
}

namespace collx_test {
// collx kernels registered when main() starts (kernel_registry.hpp): registration must not wait
// for a kernel's first use (test_cuda_device's registry test checks it).
std::size_t kernels_registered_at_main = 0;
}  // namespace collx_test

int main(int argc, char** argv) {
  {
    auto& registry = collx::gpu::device_detail::registered_kernels();
    const std::lock_guard<std::mutex> lock(registry.mutex);
    collx_test::kernels_registered_at_main = registry.all.size();
  }
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaSuccess && devices >= min_devices) return collx_test::run_catch(argc, argv);

  if (min_devices > 1 && status == cudaSuccess && devices > 0)
    std::printf("SKIPPED: needs %d CUDA devices, found %d; running only the tests not tagged [gpu]\n", min_devices,
                devices);
  else
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices); running only the tests "
                "not tagged [gpu]\n",
                status == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(status), devices);
  std::fflush(stdout);
  (void)cudaGetLastError();  // the failed query is not an error of the tests that follow
  const int failures = collx_test::run_catch(argc, argv, "~[gpu]");
  return failures != 0 ? failures : collx_gpu_skip_code;
}
