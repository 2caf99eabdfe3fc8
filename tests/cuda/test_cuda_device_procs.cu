// collx's device collectives with ranks as processes (run by `collx-run -n N`): the workspaces
// are reached over CUDA IPC (cudaIpcOpenMemHandle), then, on a second communicator, through one
// shared pinned host-memory object (workspace_memory::host, the path between GPUs without peer
// access), then both (workspace_memory::mixed, ranks 0 and 2 without peer access); the host
// bootstrap is shared memory. Runs a
// trimmed reference sweep of device_sweep.cuh on one device per rank (device rank % devices, so
// several processes share a GPU on a one-GPU machine: correct, but each barrier then waits for
// the GPU's time slicing between processes, milliseconds, so the sweep is short).
// Without a device every rank prints SKIPPED and exits 77 (ctest's SKIP_RETURN_CODE).
#include <collx/cuda/device_collectives.cuh>
#include <collx/transport/shm.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "device_sweep.cuh"

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  namespace gpu = collx::gpu;
  try {
    auto host = collx::connect_shm_from_environment();
    const int me = host.rank();
    gpu::device_options opt;
    opt.device = me % devices;
    opt.staging_bytes = 32 << 10;  // several chunks for the larger count
    opt.timeout = std::chrono::seconds(30);
    opt.ring_min_bytes = SIZE_MAX;  // the sweep checks untagged calls against the rank-order fold
    gpu::check(cudaSetDevice(opt.device), "cudaSetDevice");
    cudaStream_t s{};
    gpu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    std::vector<std::string> problems;
    // device, host, then mixed: ranks 0 and 2 taken out of peer access (device_options::
    // no_peer_access), so that pair goes through host memory and the others over CUDA IPC.
    for (gpu::workspace_memory memory : {gpu::workspace_memory::device, gpu::workspace_memory::host, gpu::workspace_memory::mixed}) {
      opt.memory = memory;
      if (memory == gpu::workspace_memory::mixed) opt.no_peer_access = {{0, 2}};
      gpu::device_communicator dc(host, opt);
      const std::string tag = std::string("workspace memory ") + gpu::workspace_memory_name(memory) + ": ";
      if (dc.memory() != memory) problems.push_back(tag + "the communicator chose " + gpu::workspace_memory_name(dc.memory()));
      for (int peer = 0; peer < dc.size(); ++peer) {
        const bool across = memory == gpu::workspace_memory::host || (memory == gpu::workspace_memory::mixed && me + peer == 2 && me != peer);
        const gpu::peer_path want = across ? gpu::peer_path::host_memory : gpu::peer_path::ipc;
        if (peer != me && dc.path_to_peer(peer) != want) problems.push_back(tag + "peer " + std::to_string(peer) + " not reached as asked");
      }
      const std::size_t before = problems.size();
      int call = 0;
      for (std::size_t count : {std::size_t{7}, std::size_t{5000}})
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          ++call;
          collx_cuda_test::sweep_reductions<float>(dc, s, count, offset, call, collx::ops::sum{}, problems);
          collx_cuda_test::sweep_reductions<collx_cuda_test::affine>(dc, s, count, offset, call, collx_cuda_test::then_op{}, problems);
          collx_cuda_test::sweep_copies<float>(dc, s, count, offset, call, problems);
          collx_cuda_test::sweep_v_forms<float>(dc, s, count, offset == 0, offset, call + 50, collx::ops::sum{}, problems);
          collx_cuda_test::sweep_all_to_all_v<float>(dc, s, count, offset == 0, offset, call + 60, problems);
          collx_cuda_test::sweep_send_recv<float>(dc, s, count, offset, call + 70, problems);
          collx_cuda_test::sweep_ring<float>(dc, s, count, offset, call + 80, collx::ops::sum{}, problems);
        }
      // Registered windows over CUDA IPC, the cache shared by two windows on one allocation; then
      // again after the memory was freed and allocated anew (a new handle must be mapped afresh).
      // With host memory the window calls stage and nothing is mapped.
      for (int round = 0; round < 2; ++round)
        collx_cuda_test::sweep_windows<float>(dc, s, 3000, 100 + round, collx::ops::sum{}, dc.zero_copy_windows(), problems);
      for (std::size_t i = before; i < problems.size(); ++i) problems[i] = tag + problems[i];
    }
    cudaStreamDestroy(s);
    for (const auto& p : problems) std::fprintf(stderr, "rank %d: %s\n", me, p.c_str());
    std::printf("rank %d of %d (device %d): %s\n", me, host.size(), opt.device,
                problems.empty() ? "every check passed" : "FAILED");
    return problems.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_cuda_device_procs: %s\n", e.what());
    return 1;
  }
}
