// Downstream consumer of collx::nccl (find_package COMPONENTS nccl), host code only: NCCL's name for
// a collx type and op, and an NCCL error as a collx::error. Runs without a GPU.
#include <collx/nccl/communicator.hpp>
#include <collx/version.hpp>

#include <cstdio>
#include <string>

int main() {
  namespace nc = collx::nccl;
  const bool types = nc::to_nccl(nc::element_type_v<collx::bfloat16>) == ncclBfloat16 &&
                     nc::to_nccl(nc::red_op_v<collx::ops::avg>) == ncclAvg;
  bool threw = false;
  try {
    nc::check(ncclInvalidUsage, "ncclCommInitRank");
  } catch (const collx::error& e) {
    threw = e.code() == collx::errc::transport && std::string(e.what()).find("ncclCommInitRank failed") == 0;
  }
  const bool ok = types && threw;
  std::printf("collx %s consumer (find_package nccl, NCCL %d): %s\n", COLLX_VERSION_STRING, NCCL_VERSION_CODE,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
