// Batch statistics over GPUs, as synchronized batch normalization needs them: every rank holds a
// batch of activations (samples x features, row-major) in device memory, computes each feature's
// Welford state (count, mean, M2) with a kernel, and collx's device all-reduce merges the ranks'
// states with Chan, Golub & LeVeque's pairwise formula. The state is a struct and the merge a
// device functor compiled into collx's kernel: what NCCL's fixed types and ops cannot express
// (its workaround, all-reducing count, sum and sum of squares, cancels catastrophically when the
// mean is large against the spread; feature 2 below has mean 1e6 and spread 1).
//
// The merge is not commutative in its bits (its rounding depends on the order), and collx folds
// the ranks in rank order: every rank gets, bit for bit, the sequential merge of the ranks' states
// in rank order, which each rank recomputes on the host from the same data and checks. Then a
// float all-reduce of a gradient with algo::direct, checked against the sequential float sum in
// rank order. dc.synchronize(stream) waits and reports what a collective met on the device.
//
// Usage: gpu_moments [--ranks N] [--samples S] [--features F]   (or: collx-run -n N gpu_moments)
//   Rank r uses GPU r % (number of GPUs); several ranks may share one GPU. Rank r holds
//   S + 37 r samples (uneven on purpose). Without a CUDA device it prints "SKIPPED: ..." and exits 77.
// Built with nvcc --fmad=false (examples/CMakeLists.txt) and the host compiler's
// -ffp-contract=off, so that the device and the host reference round every operation alike.
#include "common.hpp"

#include <collx/cuda/device_collectives.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace ex = collx_examples;
namespace gpu = collx::gpu;

namespace {

/// One feature's running moments: count, mean and the sum of squared deviations from the mean.
struct moments {
  double n = 0, mean = 0, m2 = 0;
  __host__ __device__ void add(double x) {  // Welford's streaming update
    n += 1;
    const double d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
};

/// Chan, Golub & LeVeque's merge of two partial states, the parallel form of Welford's update
/// ("Updating formulae and a pairwise algorithm for computing sample variances", 1979).
/// Associative up to rounding, not declared commutative: collx then folds in rank order.
struct welford_merge {
  static constexpr const char* name = "welford";
  __host__ __device__ moments operator()(const moments& a, const moments& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * (b.n / n))};
  }
};

/// Thread f: feature f's moments over `samples` rows of `x` (samples x features, row-major).
__global__ void feature_moments(const float* x, std::size_t samples, std::size_t features, moments* out) {
  const std::size_t f = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (f >= features) return;
  moments m;
  for (std::size_t s = 0; s < samples; ++s) m.add(static_cast<double>(x[s * features + f]));
  out[f] = m;
}

/// Feature f's mean and spread: 0 and 1 for f = 0, growing with f; feature 2 sits at 1e6.
double feature_mean(std::size_t f) { return f == 2 ? 1e6 : 0.5 * static_cast<double>(f); }

/// Rank r's batch (samples x features, row-major) and its gradient, from fixed seeds.
std::vector<float> batch(int rank, std::size_t samples, std::size_t features) {
  ex::rng g(0xba7c4u + 131u * static_cast<unsigned>(rank));
  std::vector<float> x(samples * features);
  for (std::size_t s = 0; s < samples; ++s)
    for (std::size_t f = 0; f < features; ++f)
      x[s * features + f] = static_cast<float>(feature_mean(f) + (1.0 + 0.1 * static_cast<double>(f)) * (g.uniform(-1.0f, 1.0f) + 0.25 * rank));
  return x;
}
std::vector<float> gradient(int rank, std::size_t count) {
  ex::rng g(0x9e3du + 7u * static_cast<unsigned>(rank));
  std::vector<float> v(count);
  for (float& e : v) e = g.uniform(-1.0f, 1.0f) * static_cast<float>(1 + rank % 3);
  return v;
}

/// Device memory for `count` elements of T, freed when it goes (also when an exception passes).
template <class T>
struct device_buffer {
  T* data = nullptr;
  explicit device_buffer(std::size_t count) { gpu::check(cudaMalloc(&data, count * sizeof(T)), "cudaMalloc"); }
  ~device_buffer() { (void)cudaFree(data); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

/// A non-blocking stream of its own (ranks of one process must not share the legacy default stream).
struct stream_holder {
  cudaStream_t stream = nullptr;
  stream_holder() { gpu::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~stream_holder() { (void)cudaStreamDestroy(stream); }
  stream_holder(const stream_holder&) = delete;
  stream_holder& operator=(const stream_holder&) = delete;
};

int run(collx::communicator& comm, std::size_t samples0, std::size_t features) {
  const int n = comm.size(), r = comm.rank();
  // Skip only together: a rank without a device would leave the others waiting in the device
  // communicator's constructor until COLLX_TIMEOUT.
  int devices = 0;
  const cudaError_t found = cudaGetDeviceCount(&devices);
  int all_have = found == cudaSuccess && devices > 0 ? 1 : 0;
  collx::allreduce(comm, std::span<int>(&all_have, 1), collx::ops::min{});
  if (!all_have) {
    if (r == 0)
      std::printf("SKIPPED: no CUDA device on some rank (rank 0: cudaGetDeviceCount: %s, %d devices)\n",
                  found == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(found), devices);
    return ex::skipped_exit_code;
  }

  const std::size_t samples = samples0 + 37 * static_cast<std::size_t>(r);
  const std::size_t g_count = (std::size_t{1} << 20) + 3;  // an awkward count
  std::vector<moments> all(features);
  std::vector<float> summed(g_count);
  {
    gpu::device_options opt;
    opt.device = r % devices;
    gpu::device_communicator dc(comm, opt);
    if (r == 0) std::printf("gpu_moments: %d ranks on %d GPU(s); wiring: %s\n", n, devices, dc.wiring_note().c_str());
    const stream_holder s;

    // 1. Each rank's per-feature moments on its GPU, then the merge across ranks on device. The
    //    op is not commutative, so collx folds the ranks in rank order whatever the size.
    const std::vector<float> x = batch(r, samples, features);
    const device_buffer<float> d_x(x.size());
    const device_buffer<moments> d_mine(features), d_all(features);
    // Every buffer before the first collective: with ranks as threads sharing a GPU, an allocation
    // that waits for the device would wait for a peer's kernel that waits for this rank's call.
    const std::vector<float> grad = gradient(r, g_count);
    const device_buffer<float> d_grad(g_count);
    gpu::check(cudaMemcpyAsync(d_x.data, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, s.stream), "cudaMemcpyAsync");
    feature_moments<<<static_cast<unsigned>((features + 127) / 128), 128, 0, s.stream>>>(d_x.data, samples, features, d_mine.data);
    gpu::check(cudaGetLastError(), "feature_moments");
    gpu::all_reduce(dc, d_mine.data, d_all.data, features, welford_merge{}, s.stream);

    // 2. A gradient's float sum, in place. algo::direct: the rank-order fold at every size. (An
    //    untagged call with a commutative op may take the ring for large vectors where the
    //    machine's wiring favours it, which folds in another order: other bits.)
    gpu::check(cudaMemcpyAsync(d_grad.data, grad.data(), g_count * sizeof(float), cudaMemcpyHostToDevice, s.stream), "cudaMemcpyAsync");
    gpu::all_reduce<collx::algo::direct>(dc, d_grad.data, d_grad.data, g_count, collx::ops::sum{}, s.stream);

    gpu::check(cudaMemcpyAsync(all.data(), d_all.data, features * sizeof(moments), cudaMemcpyDeviceToHost, s.stream), "cudaMemcpyAsync");
    gpu::check(cudaMemcpyAsync(summed.data(), d_grad.data, g_count * sizeof(float), cudaMemcpyDeviceToHost, s.stream), "cudaMemcpyAsync");
    dc.synchronize(s.stream);  // also throws what a collective reported (a timeout, a mismatch)
  }

  // References on the host, from every rank's data: the sequential folds in rank order.
  ex::checker ok{r};
  std::vector<moments> want(features);
  std::vector<float> want_sum(g_count, 0.0f);
  for (int q = 0; q < n; ++q) {
    const std::size_t sq = samples0 + 37 * static_cast<std::size_t>(q);
    const std::vector<float> xq = batch(q, sq, features);
    for (std::size_t f = 0; f < features; ++f) {
      moments m;
      for (std::size_t i = 0; i < sq; ++i) m.add(static_cast<double>(xq[i * features + f]));
      want[f] = q == 0 ? m : welford_merge{}(want[f], m);
    }
    const std::vector<float> gq = gradient(q, g_count);
    for (std::size_t i = 0; i < g_count; ++i) want_sum[i] = q == 0 ? gq[i] : want_sum[i] + gq[i];
  }
  ok(std::memcmp(all.data(), want.data(), features * sizeof(moments)) == 0,
     "the merged moments are the rank-order merge's, bit for bit");
  ok(std::memcmp(summed.data(), want_sum.data(), g_count * sizeof(float)) == 0,
     "the gradient's sum is the rank-order float sum's, bit for bit");
  if (r == 0) {
    std::printf("feature       samples            mean        variance\n");
    for (std::size_t f = 0; f < features && f < 6; ++f)
      std::printf("%7zu %13.0f %15.6f %15.6f\n", f, all[f].n, all[f].mean, all[f].m2 / (all[f].n - 1));
  }
  const int failures = ok.total(comm);
  if (r == 0) std::printf("%s\n", failures == 0 ? "every rank: bit-identical to the rank-order references" : "MISMATCH");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--samples S] [--features F]");
  const int ranks = opt.get_ranks(collx::gpu::max_device_world, "ranks of one device communicator");
  const long long samples = opt.get_int("--samples", 1000, 2, 1 << 24), features = opt.get_int("--features", 300, 1, 1 << 20);
  opt.reject_unknown();
  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 2),
                       [&](collx::communicator& comm) {
    return run(comm, static_cast<std::size_t>(samples), static_cast<std::size_t>(features));
  });
}
