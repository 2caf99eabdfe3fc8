// collx-perf-cuda: collx's device collectives (collx/cuda/device_collectives.cuh) on device memory,
// measured as nccl-tests measures (time per call, algbw, busbw with nccl-tests' factors, from
// bench/perf_math.hpp), with NCCL on the same GPUs interleaved size by size where NCCL can run
// (one rank per GPU: NCCL refuses two ranks on one GPU).
//
// Ranks are threads of this process, each with its own non-blocking stream, rank r on GPU
// r % (GPUs). First the device-to-device copy rate (cudaMemcpyAsync), the ceiling of a copy-bound
// collective on one GPU; then float32 sum all-reduce, reduce-scatter and all-gather from -b to -e
// bytes, each size twice: from ordinary buffers (staged through the communicator's bounded
// staging) and from a registered window (zero-copy: peers read the send buffer in place, where
// every pair has peer access, memory device; --memory host puts every workspace in shared host
// memory, the path between GPUs without peer access, where window calls stage too, as with
// mixed); then
// custom ops and struct types against built-in sums of the same element size.
// Each row: the median over --rounds rounds of the slowest rank's mean time over -n calls;
// "#wrong" counts elements that differ from the expected sums (checked up to 64 MiB).
//
// usage: collx-perf-cuda [--ranks N] [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] [-w WARMUP]
//                        [--rounds R] [--staging BYTES] [--two-shot-min BYTES|never]
//                        [--memory device|host|automatic] [--algo automatic|direct|ring] [--rings LIST]
//                        [--no-custom]
// (sizes as collx-perf takes them: 8, 64K, 4M, 1G; -f an integer factor). --two-shot-min sets
// device_options::two_shot_min_bytes: all-reduces from that size run two-shot (1: all of them;
// never: none; default: the cost model's crossover for the rank count). --algo picks the staged
// columns' algorithm: automatic (the default) the calls without one (direct, or the ring from
// device_communicator::ring_min_bytes on), direct algo::direct, ring algo::ring (each rank reading
// its ring predecessor's slots, in device memory or, with --memory host, host memory); the reg
// columns and the custom-op rows run algo::direct whatever it says. --rings sets
// device_options::rings, one ring per channel, rings separated by '/' and ranks by ',' (e.g.
// 0,1,2,3/3,2,1,0: two channels, the ring both ways); default: the machine's (wiring_note).
#include <collx/cuda/device_collectives.cuh>
#include <collx/transport/threads.hpp>

#include <cuda_runtime_api.h>
#ifdef COLLX_PERF_CUDA_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "perf_common.hpp"
#include "perf_math.hpp"

namespace gpu = collx::gpu;
using collx_perf::coll;

namespace {

struct options {
  int ranks = 2;
  std::size_t min_bytes = 8, max_bytes = std::size_t{1} << 30;
  double factor = 2;
  int iters = 20, warmup = 5, rounds = 3;
  std::size_t staging = std::size_t{8} << 20;
  std::size_t two_shot_min = 0;  // device_options::two_shot_min_bytes (0: the cost model's)
  gpu::workspace_memory memory = gpu::workspace_memory::automatic;  // device_options::memory
  bool custom = true;
  enum class algorithm { automatic, direct, ring } algo = algorithm::automatic;  // --algo: the staged columns
  std::vector<std::vector<int>> rings;  // device_options::rings (--rings; empty: the communicator's choice)
};

// The options, for --help and for usage errors.
constexpr const char* option_help =
    "  --ranks N            ranks (threads), rank r on GPU r % GPUs (default 2)\n"
    "  -b, -e BYTES         smallest and largest vector (8, 64K, 4M, 1G); -f FACTOR between sizes\n"
    "  -n, -w               timed and warm-up calls per size; --rounds R: rounds, median reported\n"
    "  --staging BYTES      device_options::staging_bytes\n"
    "  --two-shot-min B|never  device_options::two_shot_min_bytes (all-reduces two-shot from B)\n"
    "  --memory M           device_options::memory: device, host or automatic\n"
    "  --algo A             the staged columns' algorithm: automatic, direct or ring\n"
    "  --rings R0/R1/...    device_options::rings, one ring per channel, ranks by ',' (0,1,2,3/3,2,1,0)\n"
    "  --no-custom          skip the custom-op rows\n";

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "collx-perf-cuda: %s\nusage: collx-perf-cuda [--ranks N] [-b BYTES] [-e BYTES] [-f FACTOR] [-n ITERS] "
               "[-w WARMUP] [--rounds R] [--staging BYTES] [--two-shot-min BYTES|never] [--memory device|host|automatic] "
               "[--algo automatic|direct|ring] [--rings R0/R1/... (ranks r,r,...)] [--no-custom]\n",
               why);
  std::fputs(option_help, stderr);
  std::exit(2);
}

// Sizes and counts parse as collx-perf's do (perf_common.hpp: 8, 64K, 4M, 1G; bounded integers).
options parse(int argc, char** argv) {
  using collx_perf::parse_bytes;
  using collx_perf::parse_integer;
  options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto val = [&]() -> std::string {
        if (i + 1 >= argc) usage(("missing value after " + a).c_str());
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::fputs("usage: collx-perf-cuda [options]\n", stdout);
        std::fputs(option_help, stdout);
        std::exit(0);
      }
      if (a == "--ranks") o.ranks = static_cast<int>(parse_integer(a, val(), 1, gpu::max_device_world));
      else if (a == "-b") o.min_bytes = parse_bytes(a, val());
      else if (a == "-e") o.max_bytes = parse_bytes(a, val());
      else if (a == "-f") o.factor = static_cast<double>(parse_integer(a, val(), 2, 1024));
      else if (a == "-n") o.iters = static_cast<int>(parse_integer(a, val(), 1, 1 << 30));
      else if (a == "-w") o.warmup = static_cast<int>(parse_integer(a, val(), 0, 1 << 30));
      else if (a == "--rounds") o.rounds = static_cast<int>(parse_integer(a, val(), 1, 1000));
      else if (a == "--staging") o.staging = parse_bytes(a, val());
      else if (a == "--two-shot-min") {
        const std::string v = val();
        o.two_shot_min = v == "never" ? SIZE_MAX : std::max<std::size_t>(1, parse_bytes(a, v));
      }
      else if (a == "--memory") {
        const std::string v = val();
        if (v == "device") o.memory = gpu::workspace_memory::device;
        else if (v == "host") o.memory = gpu::workspace_memory::host;
        else if (v != "automatic") usage("--memory takes device, host or automatic");
      }
      else if (a == "--algo") {
        const std::string v = val();
        if (v == "ring") o.algo = options::algorithm::ring;
        else if (v == "direct") o.algo = options::algorithm::direct;
        else if (v != "automatic") usage("--algo takes automatic, direct or ring");
      }
      else if (a == "--rings") {  // "0,1,2,3/3,2,1,0", checked against --ranks below
        const std::string v = val();
        if (v.empty() || v.back() == '/') usage("--rings: an empty ring (rings are separated by '/')");
        std::stringstream all(v);
        for (std::string ring; std::getline(all, ring, '/');) {
          std::stringstream ranks(ring);
          o.rings.emplace_back();
          for (std::string r; std::getline(ranks, r, ',');)
            o.rings.back().push_back(static_cast<int>(parse_integer(a, r, 0, gpu::max_device_world - 1)));
        }
      }
      else if (a == "--no-custom") o.custom = false;
      else usage(("unknown option " + a).c_str());
    }
  } catch (const collx_perf::usage_error& e) {
    usage(e.what());
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) usage("need 4 <= -b <= -e");
  if (!o.rings.empty()) {  // as the communicator will check them, before any GPU is touched
    try {
      (void)gpu::make_ring_channels(o.rings, o.ranks);
    } catch (const collx::error& e) {
      usage(("--rings: " + std::string(e.what())).c_str());
    }
  }
  return o;
}

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "collx-perf-cuda: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__global__ void fill_kernel(float* p, std::size_t n, int rank) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 7));
}

// One staged call of collective `c` on float32 sums with algorithm Algo (algo::automatic: the
// calls without one).
template <class Algo>
void staged_call(coll c, gpu::device_communicator& dc, const float* send, float* recv, std::size_t count, cudaStream_t s) {
  switch (c) {
    case coll::allreduce: gpu::all_reduce<Algo>(dc, send, recv, count, collx::ops::sum{}, s); break;
    case coll::reduce_scatter: gpu::reduce_scatter<Algo>(dc, send, recv, count, collx::ops::sum{}, s); break;
    default: gpu::all_gather<Algo>(dc, send, recv, count, s); break;
  }
}

/// A user op the compiler knows nothing about: collx compiles it into the kernel.
struct user_plus {
  static constexpr const char* name = "user_plus";
  __host__ __device__ float operator()(float a, float b) const { return a + b; }
};
/// An 8-byte struct with a non-commutative op (composition of affine maps mod 2^32).
struct affine {
  std::uint32_t mul, add;
};
struct then_op {
  static constexpr const char* name = "then";
  __host__ __device__ affine operator()(const affine& f, const affine& g) const { return {f.mul * g.mul, f.add * g.mul + g.add}; }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// What the rank threads share.
struct shared_state {
  options opt;
  int devices = 1;
  std::barrier<> sync;
  std::vector<double> seconds;  // per rank, the last measurement
  std::vector<long> wrong;      // per rank
  bool nccl = false;
  bool any_wrong = false;  // some checked row had a wrong element: the exit status says so
  double copy_GBps = 0;  // cudaMemcpyAsync device to device, bytes copied per second / 1e9
#ifdef COLLX_PERF_CUDA_NCCL
  std::vector<ncclComm_t> comms;
#endif
  explicit shared_state(const options& o, int d)
      : opt(o), devices(d), sync(o.ranks), seconds(static_cast<std::size_t>(o.ranks)), wrong(static_cast<std::size_t>(o.ranks)) {}
};

/// Sum of the ranks' wrong counts, or -1 when unchecked.
long total_wrong(const shared_state& st) {
  long w = 0;
  for (long x : st.wrong) w = (w < 0 || x < 0) ? -1 : w + x;
  return w;
}

std::string wrong_text(long w) { return w < 0 ? "-" : std::to_string(w); }

/// Times `call` on every rank: warmup, then --rounds rounds of -n calls; returns (on every rank) the
/// median over rounds of the slowest rank's mean seconds per call.
template <class Call>
double time_call(shared_state& st, int rank, cudaStream_t s, int iters, Call&& call) {
  cudaEvent_t e0, e1;
  ok(cudaEventCreate(&e0), "cudaEventCreate");
  ok(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < st.opt.warmup; ++i) call();
  ok(cudaStreamSynchronize(s), "warmup");
  std::vector<double> rounds;
  for (int r = 0; r < st.opt.rounds; ++r) {
    st.sync.arrive_and_wait();
    ok(cudaEventRecord(e0, s), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) call();
    ok(cudaEventRecord(e1, s), "cudaEventRecord");
    ok(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    st.seconds[static_cast<std::size_t>(rank)] = ms * 1e-3 / iters;
    st.sync.arrive_and_wait();
    rounds.push_back(*std::max_element(st.seconds.begin(), st.seconds.end()));
    st.sync.arrive_and_wait();
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return median(rounds);
}

int iters_for(const options& o, std::size_t bytes) {
  if (bytes >= (std::size_t{256} << 20)) return std::max(1, std::min(o.iters, 5));
  if (bytes >= (std::size_t{16} << 20)) return std::max(1, std::min(o.iters, 10));
  return o.iters;
}

/// Expected float sum at index i of the fill pattern over n ranks (exact: small integers).
float expected_sum(std::size_t i, int n) {
  return static_cast<float>(n * (n + 1) / 2 + n * static_cast<int>(i % 7));
}

void rank_main(shared_state& st, gpu::device_communicator& dc, cudaStream_t s) {
  const options& o = st.opt;
  const int me = dc.rank(), n = dc.size();
  float *send = nullptr, *recv = nullptr;
  ok(cudaMalloc(&send, o.max_bytes), "cudaMalloc(send)");
  ok(cudaMalloc(&recv, o.max_bytes), "cudaMalloc(recv)");
  fill_kernel<<<1024, 256, 0, s>>>(send, o.max_bytes / sizeof(float), me);
  ok(cudaStreamSynchronize(s), "fill");
  // No rank starts a call while another still allocates: cudaMalloc may wait for the device, and a
  // peer's kernel on it waits for this rank's call.
  st.sync.arrive_and_wait();
  const gpu::window win = dc.register_window(send, o.max_bytes);
  double copy_bound_share = 0;  // all_gather from the window at the largest size: output rate / copy rate

  for (coll c : {coll::allreduce, coll::reduce_scatter, coll::all_gather}) {
    if (me == 0) {
      std::printf("\n# %s, float32, sum; %d ranks; time in us, bandwidths in GB/s\n", std::string(collx_perf::coll_name(c)).c_str(), n);
      std::printf("%12s %12s %10s %9s %9s %7s %10s %9s %9s %7s", "size(B)", "count", "time", "algbw", "busbw", "#wrong",
                  "reg time", "algbw", "busbw", "#wrong");
      if (st.nccl) std::printf(" %10s %9s %9s %10s", "nccl time", "algbw", "busbw", "nccl/collx");
      std::printf("\n");
    }
    for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0000001; b *= o.factor) {
      const std::size_t bytes = static_cast<std::size_t>(b) / 4 * 4;
      const auto k = collx_perf::counts_for(c, bytes / sizeof(float), n);
      if (k.param_count == 0) continue;
      auto run = [&] {
        switch (o.algo) {
          case options::algorithm::ring: return staged_call<collx::algo::ring>(c, dc, send, recv, k.param_count, s);
          case options::algorithm::direct: return staged_call<collx::algo::direct>(c, dc, send, recv, k.param_count, s);
          default: return staged_call<collx::algo::automatic>(c, dc, send, recv, k.param_count, s);
        }
      };
      auto run_registered = [&] {
        switch (c) {
          case coll::allreduce: gpu::all_reduce(dc, win, 0, recv, k.param_count, collx::ops::sum{}, s); break;
          case coll::reduce_scatter: gpu::reduce_scatter(dc, win, 0, recv, k.param_count, collx::ops::sum{}, s); break;
          default: gpu::all_gather(dc, win, 0, recv, k.param_count, s); break;
        }
      };
      // Elements of one call's output that differ from the expected sums; -1: not checked (large).
      auto count_wrong = [&](auto&& call) -> long {
        if (bytes > (std::size_t{64} << 20)) return -1;
        ok(cudaMemsetAsync(recv, 0xff, k.recv_count * sizeof(float), s), "poison");
        call();
        dc.synchronize(s);
        std::vector<float> got(k.recv_count);
        ok(cudaMemcpyAsync(got.data(), recv, got.size() * sizeof(float), cudaMemcpyDeviceToHost, s), "copy back");
        ok(cudaStreamSynchronize(s), "copy back");
        long wrong = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          float want;
          if (c == coll::allreduce) want = expected_sum(i, n);
          else if (c == coll::reduce_scatter) want = expected_sum(static_cast<std::size_t>(me) * k.param_count + i, n);
          else want = static_cast<float>(static_cast<int>(i / k.param_count) + 1 + static_cast<int>((i % k.param_count) % 7));
          wrong += got[i] != want;
        }
        return wrong;
      };
      st.wrong[static_cast<std::size_t>(me)] = count_wrong(run);
      const double t = time_call(st, me, s, iters_for(o, bytes), run);
      dc.check();
      st.sync.arrive_and_wait();
      const long wrong_staged = total_wrong(st);
      st.sync.arrive_and_wait();
      st.wrong[static_cast<std::size_t>(me)] = count_wrong(run_registered);
      const double tr = time_call(st, me, s, iters_for(o, bytes), run_registered);
      dc.check();
      double tn = 0;
#ifdef COLLX_PERF_CUDA_NCCL
      if (st.nccl) {
        ncclComm_t comm = st.comms[static_cast<std::size_t>(me)];
        auto run_nccl = [&] {
          ncclResult_t r = ncclSuccess;
          switch (c) {
            case coll::allreduce: r = ncclAllReduce(send, recv, k.param_count, ncclFloat, ncclSum, comm, s); break;
            case coll::reduce_scatter: r = ncclReduceScatter(send, recv, k.param_count, ncclFloat, ncclSum, comm, s); break;
            default: r = ncclAllGather(send, recv, k.param_count, ncclFloat, comm, s); break;
          }
          if (r != ncclSuccess) {
            std::fprintf(stderr, "NCCL: %s\n", ncclGetErrorString(r));
            std::exit(1);
          }
        };
        tn = time_call(st, me, s, iters_for(o, bytes), run_nccl);
      }
#endif
      st.sync.arrive_and_wait();
      if (me == 0) {
        const long wrong_registered = total_wrong(st);
        if (wrong_staged > 0 || wrong_registered > 0) st.any_wrong = true;
        const auto bw = collx_perf::bandwidth_for(c, k.param_count, sizeof(float), n, t);
        const auto br = collx_perf::bandwidth_for(c, k.param_count, sizeof(float), n, tr);
        std::printf("%12zu %12zu %10.2f %9.2f %9.2f %7s %10.2f %9.2f %9.2f %7s", collx_perf::size_column_bytes(k, sizeof(float)),
                    k.param_count, t * 1e6, bw.algbw, bw.busbw, wrong_text(wrong_staged).c_str(), tr * 1e6, br.algbw, br.busbw,
                    wrong_text(wrong_registered).c_str());
        if (st.nccl) {
          const auto bn = collx_perf::bandwidth_for(c, k.param_count, sizeof(float), n, tn);
          std::printf(" %10.2f %9.2f %9.2f %10.2f", tn * 1e6, bn.algbw, bn.busbw, tn / std::min(t, tr));
        }
        std::printf("\n");
        std::fflush(stdout);
        if (c == coll::all_gather) copy_bound_share = br.algbw * n;  // output bytes all ranks write per second
      }
      st.sync.arrive_and_wait();
    }
  }
  if (me == 0 && st.devices == 1)
    std::printf("\n# copy-bound check, one GPU: all_gather from a window at the largest size writes %.1f GB/s of output over all "
                "ranks = %.0f%% of the device-to-device copy rate (%.1f GB/s)\n",
                copy_bound_share, 100.0 * copy_bound_share / st.copy_GBps, st.copy_GBps);

  if (o.custom) {
    if (me == 0)
      std::printf("\n# custom ops and struct types against a built-in sum of the same element size (all-reduce)\n"
                  "%12s %24s %10s %9s %24s %10s %9s %8s\n",
                  "size(B)", "builtin", "time", "busbw", "custom", "time", "busbw", "ratio");
    for (std::size_t bytes : {std::size_t{1} << 20, std::size_t{64} << 20, std::size_t{512} << 20}) {
      if (bytes > o.max_bytes) continue;
      const int it = iters_for(o, bytes);
      const std::size_t nf = bytes / 4, nd = bytes / 8;
      const double t_sum = time_call(st, me, s, it, [&] { gpu::all_reduce<collx::algo::direct>(dc, send, recv, nf, collx::ops::sum{}, s); });
      const double t_user = time_call(st, me, s, it, [&] { gpu::all_reduce<collx::algo::direct>(dc, send, recv, nf, user_plus{}, s); });
      const double t_dsum = time_call(st, me, s, it, [&] {
        gpu::all_reduce<collx::algo::direct>(dc, reinterpret_cast<const double*>(send), reinterpret_cast<double*>(recv), nd,
                                             collx::ops::sum{}, s);
      });
      const double t_aff = time_call(st, me, s, it, [&] {
        gpu::all_reduce<collx::algo::direct>(dc, reinterpret_cast<const affine*>(send), reinterpret_cast<affine*>(recv), nd, then_op{}, s);
      });
      dc.check();
      if (me == 0) {
        const auto row = [&](const char* a, double ta, const char* b, double tb) {
          const double ba = collx_perf::bandwidth_for(coll::allreduce, bytes, 1, n, ta).busbw;
          const double bb = collx_perf::bandwidth_for(coll::allreduce, bytes, 1, n, tb).busbw;
          std::printf("%12zu %24s %10.2f %9.2f %24s %10.2f %9.2f %8.2f\n", bytes, a, ta * 1e6, ba, b, tb * 1e6, bb, bb / ba);
        };
        row("float32 sum", t_sum, "float32 user_plus", t_user);
        row("float64 sum", t_dsum, "affine(8 B) then (n.c.)", t_aff);
        std::fflush(stdout);
      }
    }
  }
  st.sync.arrive_and_wait();
  dc.deregister_window(win);
  cudaFree(send);
  cudaFree(recv);
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line: a run stopped by a time limit (gpu-check.sh) still leaves the rows it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const options o = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("collx-perf-cuda: SKIPPED: no CUDA device\n");
    return 77;
  }
  shared_state st(o, devices);
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("# collx-perf-cuda: %d ranks as threads, %d GPU(s) (%s, %d SMs); rank r on GPU r %% %d; staging %zu B per rank\n",
              o.ranks, devices, prop.name, prop.multiProcessorCount, devices, o.staging);

  {  // the copy ceiling: cudaMemcpyAsync device to device on GPU 0
    ok(cudaSetDevice(0), "cudaSetDevice");
    const std::size_t n = std::min<std::size_t>(o.max_bytes, std::size_t{1} << 30);
    void *a = nullptr, *b = nullptr;
    ok(cudaMalloc(&a, n), "cudaMalloc");
    ok(cudaMalloc(&b, n), "cudaMalloc");
    ok(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    for (int i = 0; i < 10; ++i) cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    ok(cudaEventSynchronize(e1), "copy");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    st.copy_GBps = 10.0 * static_cast<double>(n) / (ms * 1e6);
    std::printf("# device-to-device copy (cudaMemcpyAsync, %zu B): %.1f GB/s copied (%.1f GB/s read + written)\n", n,
                st.copy_GBps, 2 * st.copy_GBps);
    cudaFree(a);
    cudaFree(b);
  }

#ifdef COLLX_PERF_CUDA_NCCL
  if (o.ranks <= devices && o.ranks > 1) {
    std::vector<int> devs(static_cast<std::size_t>(o.ranks));
    for (int r = 0; r < o.ranks; ++r) devs[static_cast<std::size_t>(r)] = r;
    st.comms.resize(static_cast<std::size_t>(o.ranks));
    st.nccl = ncclCommInitAll(st.comms.data(), o.ranks, devs.data()) == ncclSuccess;
  }
  std::printf("# NCCL %s\n", st.nccl ? "interleaved size by size (same GPUs, same buffers)"
                                     : "not run: it needs one GPU per rank (and at least 2 ranks)");
#else
  std::printf("# NCCL not built in (configure with COLLX_NCCL)\n");
#endif

  auto hosts = collx::make_thread_communicators(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        ok(cudaSetDevice(r % devices), "cudaSetDevice");
        cudaStream_t s{};
        ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        gpu::device_options dopt;
        dopt.device = r % devices;
        dopt.staging_bytes = o.staging;
        dopt.two_shot_min_bytes = o.two_shot_min;
        dopt.memory = o.memory;
        dopt.rings = o.rings;
        {
          gpu::device_communicator dc(hosts[static_cast<std::size_t>(r)], dopt);
          if (r == 0) {
            std::printf("# workspaces in %s memory%s\n", gpu::workspace_memory_name(dc.memory()),
                        dc.zero_copy_windows() ? "" : " (the registered rows stage too)");
            std::printf("# wiring: %s\n", dc.wiring_note().c_str());
            std::printf("# algo::ring: %d channel%s (fewer for calls with fewer vectors):", dc.rings().count,
                        dc.rings().count > 1 ? "s" : "");
            for (const std::vector<int>& ring : dc.rings().lists()) {
              std::printf(" ");
              for (std::size_t k = 0; k < ring.size(); ++k) std::printf("%s%d", k ? "," : "", ring[k]);
            }
            std::printf("\n");
            if (dc.two_shot_min_bytes() == SIZE_MAX) std::printf("# all-reduce: one-shot at every size\n");
            else std::printf("# all-reduce: one-shot below %zu B per rank, two-shot from there on\n", dc.two_shot_min_bytes());
            for (const auto& [c, what] : {std::pair{collx::collective::allreduce, "all-reduce"},
                                         std::pair{collx::collective::reduce_scatter, "reduce-scatter"},
                                         std::pair{collx::collective::all_gather, "all-gather"}}) {
              if (dc.ring_min_bytes(c) == SIZE_MAX) std::printf("# %s: never on the ring\n", what);
              else std::printf("# %s: on the ring from %zu B (device_options::ring_min_bytes)\n", what, dc.ring_min_bytes(c));
            }
            if (o.algo != options::algorithm::automatic)
              std::printf("# --algo %s: the staged columns run algo::%s whatever the sizes above say; the reg columns and custom "
                          "rows run algo::direct\n", o.algo == options::algorithm::ring ? "ring" : "direct",
                          o.algo == options::algorithm::ring ? "ring" : "direct");
          }
          rank_main(st, dc, s);
        }
        cudaStreamDestroy(s);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "collx-perf-cuda: rank %d: %s\n", r, e.what());
        std::exit(1);
      }
    });
  for (auto& t : threads) t.join();
#ifdef COLLX_PERF_CUDA_NCCL
  for (auto c : st.comms) ncclCommDestroy(c);
#endif
  if (st.any_wrong) {
    std::fprintf(stderr, "collx-perf-cuda: some rows have wrong elements (#wrong > 0)\n");
    return 1;
  }
  return 0;
}
