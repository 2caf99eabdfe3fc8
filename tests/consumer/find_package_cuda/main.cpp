// Downstream consumer of collx::cuda (find_package COMPONENTS cuda): builds and links a .cu file that
// uses collx's reduction kernel; runs it when a CUDA device exists.
#include <collx/version.hpp>

#include <cstdio>

int run_bf16_sum();

int main() {
  const int wrong = run_bf16_sum();
  if (wrong < 0) {
    std::printf("collx %s consumer (find_package cuda): ok (compiled and linked; no CUDA device to run on)\n",
                COLLX_VERSION_STRING);
    return 0;
  }
  std::printf("collx %s consumer (find_package cuda): %s\n", COLLX_VERSION_STRING, wrong ? "MISMATCH" : "ok");
  return wrong ? 1 : 0;
}
