// collx's device communicator and collectives (collx/cuda/device_communicator.hpp,
// device_collectives.cuh) with ranks as threads of one process, each on its own stream (device 0
// for every rank, or one device per rank when there are enough): the reference sweep of
// device_sweep.cuh over 2, 3 and 4 ranks, chunked through a small staging buffer, plus the
// failures: ranks that make different calls get errc::mismatch / errc::aborted, a rank that never
// calls makes its peer time out, a rank whose count is 0 where its peers' is not gets a mismatch,
// all_to_all_v counts that disagree fail on every rank, a rank that rejects a call's arguments (a negative
// v-form count among them) ends its peers' calls at once, a window of another communicator or a deregistered one is rejected (count 0 too), and later
// calls on a failed communicator fail at once; two-shot
// all-reduce (forced at every size) against the same reference, and rank 0's form threshold
// holding for ranks whose options say otherwise; the same sweep with the workspaces in shared
// host memory (the path between GPUs without peer access); send/recv (rings, every pair,
// collectives in between, a count mismatch, two ranks that both send first); the ring forms
// (algo::ring) against the ring's own fold, in several ring orders, over device and host memory,
// and untagged calls under COLLX_ALGO=allreduce:ring or from device_options::ring_min_bytes on;
// and everything with mixed memory (pairs taken out of peer access go through host memory).
// Tagged [gpu]: without a device, gpu_test_main.cpp skips them.
#include <catch2/catch.hpp>

#include <collx/cuda/device_collectives.cuh>
#include <collx/transport/threads.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_sweep.cuh"

namespace gpu = collx::gpu;
using collx_cuda_test::affine;
using collx_cuda_test::then_op;
using collx_cuda_test::triple;
using collx_cuda_test::triple_op;

namespace {

int device_for(int rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return 0;
  return rank % n;
}

// Prints to stderr, once per stall, each rank's host phase (collx_cuda_test::phase) when one has
// not changed for 5 s: a rank that never enqueues the call its peers wait for shows what blocks it.
void watch_host_phases(const std::vector<collx_cuda_test::host_phase>& phases, const std::atomic<bool>& done) {
  std::vector<std::int64_t> reported(phases.size(), -1);
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const std::int64_t now = collx_cuda_test::steady_ns();
    for (std::size_t r = 0; r < phases.size(); ++r) {
      const std::int64_t since = phases[r].since_ns.load();
      if (since == 0 || now - since < 5'000'000'000 || reported[r] == since) continue;
      reported[r] = since;
      std::string line = "watchdog: rank " + std::to_string(r) + " stalled in '" + phases[r].what.load() + "'; every rank:";
      for (std::size_t q = 0; q < phases.size(); ++q)
        line += " [" + std::to_string(q) + "] '" + phases[q].what.load() + "' for " +
                std::to_string((now - phases[q].since_ns.load()) / 1'000'000) + " ms";
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
}

// Runs fn(dc, stream, problems) on `world` ranks as threads; returns every rank's problems and
// every exception's message.
// `adjust(rank, options)`, when given, changes one rank's options (ranks that disagree).
template <class Fn>
std::vector<std::string> on_ranks(int world, gpu::device_options opt, std::chrono::milliseconds host_timeout, Fn fn,
                                  void (*adjust)(int, gpu::device_options&) = nullptr) {
  collx::communicator_options copt;
  copt.timeout = host_timeout;
  auto comms = collx::make_thread_communicators(world, copt);
  std::vector<std::vector<std::string>> problems(static_cast<std::size_t>(world));
  std::vector<collx_cuda_test::host_phase> phases(static_cast<std::size_t>(world));
  std::atomic<bool> done{false};
  std::thread watchdog([&] { watch_host_phases(phases, done); });
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto& mine = problems[static_cast<std::size_t>(r)];
      collx_cuda_test::current_phase = &phases[static_cast<std::size_t>(r)];
      collx_cuda_test::phase("constructing its device_communicator");
      try {
        gpu::device_options o = opt;
        o.device = device_for(r);
        if (adjust) adjust(r, o);
        gpu::check(cudaSetDevice(o.device), "cudaSetDevice");
        cudaStream_t s{};
        gpu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        {
          gpu::device_communicator dc(comms[static_cast<std::size_t>(r)], o);
          collx_cuda_test::phase(collx_cuda_test::host_work);
          fn(dc, s, mine);
          collx_cuda_test::phase("destroying its device_communicator");
        }
        cudaStreamDestroy(s);
      } catch (const std::exception& e) {
        mine.push_back("rank " + std::to_string(r) + " threw: " + e.what());
      }
      phases[static_cast<std::size_t>(r)].since_ns = 0;  // finished (or threw): nothing to watch
    });
  for (auto& t : threads) t.join();
  done = true;
  watchdog.join();
  std::vector<std::string> all;
  for (auto& p : problems) all.insert(all.end(), p.begin(), p.end());
  return all;
}

// Element counts of the sweeps: 9001 takes several chunks of 16 KiB slots.
constexpr std::size_t sweep_counts[] = {1, 5, 1000, 9001};

// The reductions (all_reduce in and out of place, reduce, reduce_scatter) over float, half and two
// struct types with their ops, every count, aligned and misaligned; `call` numbers the inputs.
void reduction_sweep(gpu::device_communicator& dc, cudaStream_t s, int& call, std::vector<std::string>& out) {
  for (std::size_t count : sweep_counts)
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      ++call;
      collx_cuda_test::sweep_reductions<float>(dc, s, count, offset, call, collx::ops::sum{}, out);
      collx_cuda_test::sweep_reductions<collx::half>(dc, s, count, offset, call, collx::ops::sum{}, out);
      collx_cuda_test::sweep_reductions<affine>(dc, s, count, offset, call, then_op{}, out);
      collx_cuda_test::sweep_reductions<triple>(dc, s, count, offset, call, triple_op{}, out);
    }
}

void require_none(const std::vector<std::string>& problems) {
  for (const auto& p : problems) UNSCOPED_INFO(p);
  CHECK(problems.empty());
}

}  // namespace

TEST_CASE("gpu device collectives: reference sweep, ranks as threads", "[gpu][cuda]") {
  for (int world : {2, 3, 4}) {
    gpu::device_options opt;
    opt.staging_bytes = 32 << 10;  // 16 KiB slots: the larger counts take several chunks
    opt.timeout = std::chrono::seconds(15);
    INFO("world " << world);
    require_none(on_ranks(world, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      for (int peer = 0; peer < dc.size(); ++peer)
        if (peer != dc.rank() && dc.path_to_peer(peer) != gpu::peer_path::same_process)
          out.push_back("rank " + std::to_string(dc.rank()) + ": peer " + std::to_string(peer) + " not reached in-process");
      int call = 0;
      reduction_sweep(dc, s, call, out);
      for (std::size_t count : sweep_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          ++call;
          collx_cuda_test::sweep_copies<float>(dc, s, count, offset, call, out);
          collx_cuda_test::sweep_copies<triple>(dc, s, count, offset, call, out);
        }
      for (std::size_t base : {std::size_t{2}, std::size_t{4099}})  // 4099: several chunks of 16 KiB slots
        for (bool aligned : {false, true})
          for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
            call += 2;
            collx_cuda_test::sweep_v_forms<float>(dc, s, base, aligned, offset, call, collx::ops::sum{}, out);
            collx_cuda_test::sweep_v_forms<affine>(dc, s, base, aligned, offset, call, then_op{}, out);
            collx_cuda_test::sweep_v_forms<collx::half>(dc, s, base, aligned, offset, call, collx::ops::sum{}, out);
            collx_cuda_test::sweep_all_to_all_v<float>(dc, s, base, aligned, offset, call, out);
            collx_cuda_test::sweep_all_to_all_v<triple>(dc, s, base, aligned, offset, call, out);
          }
      for (std::size_t count : {std::size_t{3}, std::size_t{5000}}) {
        collx_cuda_test::sweep_windows<float>(dc, s, count, ++call, collx::ops::sum{}, false, out);
        collx_cuda_test::sweep_windows<affine>(dc, s, count, ++call, then_op{}, false, out);
      }
    }));
  }
}

TEST_CASE("gpu device collectives: the op left out before a stream sums, on that stream", "[gpu][cuda]") {
  // gpu::all_reduce(dc, send, recv, count, stream) and the other reductions without an op, against
  // the reference folds. Where ranks share a GPU (one GPU), a form that dropped the stream for the
  // legacy default stream would serialise the ranks' kernels and time out; the graph-capture test
  // below catches that on any GPU count for all_reduce.
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  require_none(on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    using collx_cuda_test::sweep_fold;
    using collx_cuda_test::sweep_input;
    using collx_cuda_test::sweep_sync;
    using collx::algo::ring;
    const collx::ops::sum sum;
    const int n = dc.size(), me = dc.rank();
    const std::size_t count = 5001, un = static_cast<std::size_t>(n);
    const std::string tag = "rank " + std::to_string(me) + ": ";
    auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
    const auto mine = sweep_input<float>(me, count, 1);
    const auto blocks = sweep_input<float>(me, un * count, 2);
    sweep_buffer<float> in(count, 1, s), all(un * count, 0, s);
    in.set(mine);
    all.set(blocks);
    {
      sweep_buffer<float> res(count, 0, s);
      gpu::all_reduce(dc, in.data(), res.data(), count, s);
      note(sweep_sync(dc, s, tag + "all_reduce"));
      note(res.compare(sweep_fold<float>(n, count, 0, 1, sum), tag + "all_reduce"));
    }
    {
      sweep_buffer<float> res(count, 0, s);
      gpu::all_reduce<ring>(dc, in.data(), res.data(), count, s);
      note(sweep_sync(dc, s, tag + "all_reduce<ring>"));
      note(res.compare(collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::all_reduce, count, 0, 1, sum),
                       tag + "all_reduce<ring>"));
    }
    {
      const int root = 2;
      sweep_buffer<float> res(count, 0, s);
      // Off the root, recv may be a literal nullptr (recv's type follows send's).
      if (me == root) gpu::reduce(dc, in.data(), res.data(), count, root, s);
      else gpu::reduce(dc, in.data(), nullptr, count, root, s);
      note(sweep_sync(dc, s, tag + "reduce"));
      if (me == root) note(res.compare(sweep_fold<float>(n, count, 0, 1, sum), tag + "reduce"));
    }
    const std::size_t first = static_cast<std::size_t>(me) * count;
    {
      sweep_buffer<float> res(count, 0, s);
      gpu::reduce_scatter(dc, all.data(), res.data(), count, s);
      note(sweep_sync(dc, s, tag + "reduce_scatter"));
      note(res.compare(sweep_fold<float>(n, count, first, 2, sum), tag + "reduce_scatter"));
    }
    {
      sweep_buffer<float> res(count, 0, s);
      gpu::reduce_scatter<ring>(dc, all.data(), res.data(), count, s);
      note(sweep_sync(dc, s, tag + "reduce_scatter<ring>"));
      note(res.compare(collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::reduce_scatter, count, first, 2, sum),
                       tag + "reduce_scatter<ring>"));
    }
    {
      const std::vector<std::size_t> counts(un, count);
      sweep_buffer<float> res(count, 0, s);
      gpu::reduce_scatter_v(dc, all.data(), res.data(), std::span<const std::size_t>(counts), s);
      note(sweep_sync(dc, s, tag + "reduce_scatter_v"));
      note(res.compare(sweep_fold<float>(n, count, first, 2, sum), tag + "reduce_scatter_v"));
    }
    // In place (NCCL's layout): the result lands in this rank's block of send, the other blocks
    // keep their input. 4096 elements: 16-byte aligned blocks, so the vector kernels run too.
    for (const std::size_t c : {count, std::size_t{4096}})
      for (const int form : {0, 1, 2}) {
        const std::string what = tag + (form == 0 ? "reduce_scatter" : form == 1 ? "reduce_scatter<ring>" : "reduce_scatter_v") +
                                 " in place, count " + std::to_string(c);
        const auto input = sweep_input<float>(me, un * c, 2);
        const std::size_t at = static_cast<std::size_t>(me) * c;
        sweep_buffer<float> buf(un * c, 0, s);
        buf.set(input);
        const std::vector<std::size_t> counts(un, c);
        if (form == 0) gpu::reduce_scatter(dc, buf.data(), buf.data() + at, c, s);
        else if (form == 1) gpu::reduce_scatter<ring>(dc, buf.data(), buf.data() + at, c, s);
        else gpu::reduce_scatter_v(dc, buf.data(), buf.data() + at, std::span<const std::size_t>(counts), s);
        note(sweep_sync(dc, s, what));
        const auto block = form == 1 ? collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::reduce_scatter, c, at, 2, sum)
                                     : sweep_fold<float>(n, c, at, 2, sum);
        auto want = input;
        std::copy(block.begin(), block.end(), want.begin() + static_cast<std::ptrdiff_t>(at));
        note(buf.compare(want, what));
      }
    {
      float* mem = nullptr;  // cudaMalloc: CUDA IPC cannot export pool memory
      gpu::check(cudaMalloc(&mem, un * count * sizeof(float)), "cudaMalloc");
      gpu::check(cudaMemcpyAsync(mem, blocks.data(), un * count * sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
      gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      const gpu::window w = dc.register_window(mem, un * count * sizeof(float));
      {
        sweep_buffer<float> res(count, 0, s);
        gpu::all_reduce(dc, w, 3, res.data(), count, s);
        note(sweep_sync(dc, s, tag + "window all_reduce"));
        note(res.compare(sweep_fold<float>(n, count, 3, 2, sum), tag + "window all_reduce"));
      }
      {
        sweep_buffer<float> res(count - 1, 0, s);
        gpu::reduce_scatter(dc, w, 1, res.data(), count - 1, s);
        note(sweep_sync(dc, s, tag + "window reduce_scatter"));
        note(res.compare(sweep_fold<float>(n, count - 1, 1 + static_cast<std::size_t>(me) * (count - 1), 2, sum),
                         tag + "window reduce_scatter"));
      }
      dc.deregister_window(w);
      cudaFree(mem);
      collx::barrier(dc.host());  // nobody launches again while a peer's cudaFree waits for the device
    }
  }));
}

TEST_CASE("gpu device collectives: an error the caller left unread neither fails a call nor is cleared by it",
          "[gpu][cuda]") {
  // A failed cudaMalloc leaves cudaErrorMemoryAllocation for cudaGetLastError. Checking the launch
  // with cudaGetLastError() would throw it after the kernel was enqueued: the rank would think
  // its call failed while its peers finished it (launch_kernel checks the launch's own status).
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.two_shot_min_bytes = 1;  // two kernels per call: a throw between them would desynchronise the ranks
  opt.timeout = std::chrono::seconds(15);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const int n = dc.size(), me = dc.rank();
    const std::size_t count = 5001;
    const std::string tag = "rank " + std::to_string(me) + ": ";
    sweep_buffer<float> in(count, 1, s), res(count, 0, s);
    in.set(collx_cuda_test::sweep_input<float>(me, count, 1));
    void* huge = nullptr;
    if (cudaMalloc(&huge, std::size_t{1} << 60) == cudaSuccess) {
      cudaFree(huge);
      out.push_back(tag + "a 1 EiB cudaMalloc succeeded: no error to leave unread");
      return;
    }
    try {
      gpu::all_reduce(dc, in.data(), res.data(), count, collx::ops::sum{}, s);
    } catch (const collx::error& e) {
      out.push_back(tag + "all_reduce threw: " + e.what());
    }
    if (const cudaError_t left = cudaGetLastError(); left != cudaErrorMemoryAllocation)
      out.push_back(tag + "the unread cudaErrorMemoryAllocation became " + cudaGetErrorName(left));
    for (std::string p : {collx_cuda_test::sweep_sync(dc, s, tag + "all_reduce"),
                          res.compare(collx_cuda_test::sweep_fold<float>(n, count, 0, 1, collx::ops::sum{}), tag + "all_reduce")})
      if (!p.empty()) out.push_back(p);
  }));
}

TEST_CASE("gpu device collectives: calls on alternating streams run in the order made", "[gpu][cuda]") {
  // Each call reads what the one before it, on the other stream, wrote. Two kernels of one
  // communicator running at once would take the same epochs and staging slots: the communicator
  // orders a call on another stream after the previous call (an event), as NCCL does.
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  require_none(on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const int n = dc.size(), me = dc.rank();
    const std::size_t count = 9001;
    const std::string tag = "rank " + std::to_string(me) + ": ";
    cudaStream_t other = nullptr;
    if (cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) != cudaSuccess) {
      out.push_back(tag + "cudaStreamCreateWithFlags failed");
      return;
    }
    sweep_buffer<std::int32_t> a(count, 0, s), b(count, 0, s);
    std::vector<std::int32_t> mine(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<std::int32_t>(i % 1000) + 7 * me;
    a.set(mine);
    // a -> b on s, b -> a on other, ...: each call sums n copies of what the last one gave.
    std::vector<std::int32_t> want(count);
    for (std::size_t i = 0; i < count; ++i) want[i] = n * static_cast<std::int32_t>(i % 1000) + 7 * n * (n - 1) / 2;
    for (int k = 0; k < 6; ++k) {
      const bool even = k % 2 == 0;
      gpu::all_reduce(dc, even ? a.data() : b.data(), even ? b.data() : a.data(), count, collx::ops::sum{}, even ? s : other);
      if (k > 0)
        for (auto& w : want) w *= n;
    }
    if (cudaStreamSynchronize(other) != cudaSuccess) out.push_back(tag + "the other stream failed");
    for (std::string p : {collx_cuda_test::sweep_sync(dc, s, tag + "alternating all_reduce"),
                          a.compare(want, tag + "six all_reduces on alternating streams")})
      if (!p.empty()) out.push_back(p);
    cudaStreamDestroy(other);
  }));
}

// Loads in flight per thread in the zero-copy folds (zero_copy_fold_unroll): four for 32-bit
// elements and structs of them, two for 64-bit elements (register pairs) and fp16 (fp32 partials).
static_assert(gpu::device_detail::zero_copy_fold_unroll<float, collx::ops::sum, 4> == 4);
static_assert(gpu::device_detail::zero_copy_fold_unroll<affine, then_op, 2> == 4);
static_assert(gpu::device_detail::zero_copy_fold_unroll<double, collx::ops::sum, 2> == 2);
static_assert(gpu::device_detail::zero_copy_fold_unroll<collx::half, collx::ops::sum, 8> == 2);
static_assert(std::is_same_v<gpu::device_detail::vec_word<double>, ulonglong2>);
static_assert(std::is_same_v<gpu::device_detail::vec_word<affine>, uint4>);

TEST_CASE("gpu device collectives: float64 (two 64-bit halves per 16-byte access) gives the host's bits", "[gpu][cuda]") {
  // 8-byte arithmetic elements move as ulonglong2, not uint4 (vec_word): the reductions, 16-byte
  // aligned and not, and the zero-copy window folds, against the host's fold in rank order.
  require_none(on_ranks(3, {}, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    int call = 300;
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}})
      for (std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{70001}})
        collx_cuda_test::sweep_reductions<double>(dc, s, count, offset, call += 2, collx::ops::sum{}, out);
    collx_cuda_test::sweep_windows<double>(dc, s, 5001, ++call, collx::ops::sum{}, false, out);
  }));
}

TEST_CASE("gpu device collectives: workspaces in shared host memory give the same results", "[gpu][cuda]") {
  // workspace_memory::host is the path between GPUs without peer access; forced here, it runs
  // between ranks of one GPU too: every flag and staging slot crosses PCIe to host memory.
  for (int world : {2, 3}) {
    gpu::device_options opt;
    opt.staging_bytes = 32 << 10;
    opt.timeout = std::chrono::seconds(15);
    opt.memory = gpu::workspace_memory::host;
    opt.two_shot_min_bytes = world == 3 ? 1 : 0;  // two-shot at every size on 3 ranks
    INFO("world " << world);
    require_none(on_ranks(world, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      if (dc.memory() != gpu::workspace_memory::host) out.push_back("workspace memory is not host");
      for (int peer = 0; peer < dc.size(); ++peer)
        if (peer != dc.rank() && dc.path_to_peer(peer) != gpu::peer_path::host_memory)
          out.push_back("rank " + std::to_string(dc.rank()) + ": peer " + std::to_string(peer) + " not reached through host memory");
      int call = 0;
      reduction_sweep(dc, s, call, out);
      for (std::size_t count : sweep_counts) {
        collx_cuda_test::sweep_copies<float>(dc, s, count, 1, ++call, out);
        collx_cuda_test::sweep_v_forms<float>(dc, s, count, false, 1, ++call, collx::ops::sum{}, out);
        collx_cuda_test::sweep_all_to_all_v<triple>(dc, s, count, true, 0, ++call, out);
      }
      collx_cuda_test::sweep_windows<float>(dc, s, 5000, ++call, collx::ops::sum{}, false, out);
      for (std::size_t count : sweep_counts) collx_cuda_test::sweep_send_recv<float>(dc, s, count, 1, call += 20, out);
    }));
  }
  // A mismatch is still reported on every rank, through flags in host memory.
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  opt.memory = gpu::workspace_memory::host;
  require_none(on_ranks(2, opt, std::chrono::seconds(30), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");
    gpu::all_reduce(dc, buf, buf, dc.rank() == 0 ? std::size_t{100} : std::size_t{101}, collx::ops::sum{}, s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": mismatched all_reduce succeeded over host memory");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::mismatch && e.code() != collx::errc::aborted)
        out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + e.what());
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
}

TEST_CASE("gpu device ring: all_reduce, reduce_scatter and all_gather give the ring's fold", "[gpu][cuda]") {
  // Rings in rank order and in other orders (the order decides the fold), one channel and several
  // (each channel folds its part around its own ring), staging small enough that 9001 elements
  // take several chunks; a direct call between ring calls in every sweep.
  using rings = std::vector<std::vector<int>>;
  const std::vector<rings> sets[] = {{{}, {{0, 1}, {1, 0}}},
                                     {{}, {{1, 0, 2}}, {{0, 1, 2}, {2, 1, 0}}},
                                     {{}, {{0, 2, 1, 3}}, {{3, 1, 2, 0}}, {{0, 2, 1, 3}, {1, 0, 3, 2}, {0, 1, 2, 3}}}};
  for (int world : {2, 3, 4})
    for (const rings& given : sets[world - 2]) {
      gpu::device_options opt;
      opt.staging_bytes = 32 << 10;
      opt.timeout = std::chrono::seconds(15);
      opt.rings = given;
      opt.discover_wiring = false;  // no rings given: the rank order here, not the machine's rings
      INFO("world " << world << ", " << given.size() << " rings given");
      require_none(on_ranks(world, opt, std::chrono::seconds(60), [&](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
        const rings want = given.empty() ? gpu::ring_channels::single(gpu::ring_order::identity(world)).lists() : given;
        if (dc.rings().lists() != want) out.push_back("rank " + std::to_string(dc.rank()) + ": the rings are not the ones given");
        int call = 0;
        for (std::size_t count : sweep_counts)
          for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
            call += 3;
            collx_cuda_test::sweep_ring<float>(dc, s, count, offset, call, collx::ops::sum{}, out);
            collx_cuda_test::sweep_ring<collx::half>(dc, s, count, offset, call, collx::ops::sum{}, out);
            collx_cuda_test::sweep_ring<triple>(dc, s, count, offset, call, triple_op{}, out);
          }
      }));
    }
}

TEST_CASE("gpu device ring: through shared host memory, and with the default staging", "[gpu][cuda]") {
  // Host workspaces (every slot and flag over PCIe), then device workspaces with the default staging.
  for (auto memory : {gpu::workspace_memory::host, gpu::workspace_memory::automatic}) {
    gpu::device_options opt;
    opt.timeout = std::chrono::seconds(15);
    opt.memory = memory;
    if (memory == gpu::workspace_memory::host) opt.staging_bytes = 32 << 10;
    INFO("memory " << gpu::workspace_memory_name(memory));
    require_none(on_ranks(3, opt, std::chrono::seconds(60), [&](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      int call = 0;
      const std::size_t big = memory == gpu::workspace_memory::host ? 9001 : (std::size_t{3} << 20) + 17;  // several 4 MiB slots
      for (std::size_t count : {std::size_t{5}, big}) {
        collx_cuda_test::sweep_ring<float>(dc, s, count, 0, call += 3, collx::ops::sum{}, out);
        // half stages fp32 partials and half elements in the same slot: many blocks on the
        // 16-byte path must each keep to their own bytes (ring_plan::region_offset).
        collx_cuda_test::sweep_ring<collx::half>(dc, s, count, 0, call += 3, collx::ops::sum{}, out);
        collx_cuda_test::sweep_ring<collx::half>(dc, s, count, 1, call += 3, collx::ops::sum{}, out);
      }
    }));
  }
}

TEST_CASE("gpu device ring: COLLX_ALGO=allreduce:ring sends untagged commutative all-reduces to the ring", "[gpu][cuda]") {
  ::setenv("COLLX_ALGO", "allreduce:ring", 1);  // read by the host communicators' default options
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  const auto problems = on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    if (dc.ring_min_bytes(collx::collective::allreduce) != 1 || dc.ring_min_bytes(collx::collective::all_gather) != SIZE_MAX)
      out.push_back("ring_min_bytes does not follow COLLX_ALGO");
    const std::size_t count = 9001;
    const auto mine = collx_cuda_test::sweep_input<float>(dc.rank(), count, 7);
    collx_cuda_test::sweep_buffer<float> in(count, 0, s), res(count, 0, s);
    in.set(mine);
    gpu::all_reduce(dc, in.data(), res.data(), count, collx::ops::sum{}, s);  // commutative: the ring
    out.push_back(collx_cuda_test::sweep_sync(dc, s, "ring by default"));
    out.push_back(res.compare(collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::all_reduce, count, 0, 7, collx::ops::sum{}),
                              "untagged all_reduce under COLLX_ALGO=allreduce:ring"));
    gpu::all_reduce<collx::algo::direct>(dc, in.data(), res.data(), count, collx::ops::sum{}, s);  // the tag still forces direct
    out.push_back(collx_cuda_test::sweep_sync(dc, s, "direct"));
    out.push_back(res.compare(collx_cuda_test::sweep_fold<float>(dc.size(), count, 0, 7, collx::ops::sum{}), "all_reduce<algo::direct>"));
    // A non-commutative op stays in rank order.
    const auto am = collx_cuda_test::sweep_input<affine>(dc.rank(), count, 8);
    collx_cuda_test::sweep_buffer<affine> ain(count, 0, s), ares(count, 0, s);
    ain.set(am);
    gpu::all_reduce(dc, ain.data(), ares.data(), count, then_op{}, s);
    out.push_back(collx_cuda_test::sweep_sync(dc, s, "then"));
    out.push_back(ares.compare(collx_cuda_test::sweep_fold<affine>(dc.size(), count, 0, 8, then_op{}), "non-commutative all_reduce"));
    std::erase(out, std::string());
  });
  ::unsetenv("COLLX_ALGO");
  require_none(problems);
}

TEST_CASE("gpu device ring: from device_options::ring_min_bytes on, untagged calls take the ring", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  opt.ring_min_bytes = 4096;  // 9001 floats (36 KB) take the ring, 500 (2 KB) do not
  require_none(on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    const std::size_t n = static_cast<std::size_t>(dc.size());
    for (const auto c : {collx::collective::allreduce, collx::collective::reduce_scatter, collx::collective::all_gather})
      if (dc.ring_min_bytes(c) != 4096) out.push_back("ring_min_bytes does not follow device_options::ring_min_bytes");
    int call = 20;
    for (const std::size_t count : {std::size_t{500}, std::size_t{9001}}) {
      const bool ring = count * sizeof(float) >= 4096;
      const std::string what = std::to_string(count) + " floats, " + (ring ? "ring" : "direct") + ": ";
      ++call;
      const auto mine = collx_cuda_test::sweep_input<float>(dc.rank(), count, call);
      collx_cuda_test::sweep_buffer<float> in(count, 0, s), res(count, 0, s);
      in.set(mine);
      gpu::all_reduce(dc, in.data(), res.data(), count, collx::ops::sum{}, s);
      out.push_back(collx_cuda_test::sweep_sync(dc, s, what + "all_reduce"));
      out.push_back(res.compare(ring ? collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::all_reduce, count, 0, call, collx::ops::sum{})
                                     : collx_cuda_test::sweep_fold<float>(dc.size(), count, 0, call, collx::ops::sum{}),
                                what + "untagged all_reduce"));
      // reduce_scatter counts its whole input, size() blocks.
      ++call;
      const std::size_t block = count / n;
      const auto rs_in = collx_cuda_test::sweep_input<float>(dc.rank(), block * n, call);
      collx_cuda_test::sweep_buffer<float> rin(block * n, 0, s), rout(block, 0, s);
      rin.set(rs_in);
      gpu::reduce_scatter(dc, rin.data(), rout.data(), block, collx::ops::sum{}, s);
      out.push_back(collx_cuda_test::sweep_sync(dc, s, what + "reduce_scatter"));
      const std::size_t first = static_cast<std::size_t>(dc.rank()) * block;
      out.push_back(rout.compare(block * n * sizeof(float) >= 4096
                                     ? collx_cuda_test::sweep_ring_fold<float>(dc, gpu::ring_phase::reduce_scatter, block, first, call,
                                                                               collx::ops::sum{})
                                     : collx_cuda_test::sweep_fold<float>(dc.size(), block, first, call, collx::ops::sum{}),
                                 what + "untagged reduce_scatter"));
      // all_gather counts its whole output (the same bytes whichever form runs).
      ++call;
      collx_cuda_test::sweep_buffer<float> gin(block, 0, s), gout(block * n, 0, s);
      gin.set(collx_cuda_test::sweep_input<float>(dc.rank(), block, call));
      gpu::all_gather(dc, gin.data(), gout.data(), block, s);
      out.push_back(collx_cuda_test::sweep_sync(dc, s, what + "all_gather"));
      std::vector<float> gathered;
      for (int q = 0; q < dc.size(); ++q) {
        const auto theirs = collx_cuda_test::sweep_input<float>(q, block, call);
        gathered.insert(gathered.end(), theirs.begin(), theirs.end());
      }
      out.push_back(gout.compare(gathered, what + "untagged all_gather"));
    }
    std::erase(out, std::string());
  }));
}

TEST_CASE("gpu device ring: a ring call against a direct call fails on every rank; bad ring orders are rejected", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  require_none(on_ranks(3, opt, std::chrono::seconds(30), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");
    if (dc.rank() == 1) gpu::all_reduce(dc, buf, buf, 100, collx::ops::sum{}, s);
    else gpu::all_reduce<collx::algo::ring>(dc, buf, buf, 100, collx::ops::sum{}, s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": a ring all_reduce against a direct one succeeded");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::mismatch && e.code() != collx::errc::aborted)
        out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + e.what());
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  // A ring that repeats a rank fails on every rank when the communicator is created.
  opt.rings = {{0, 0}};
  const auto problems = on_ranks(2, opt, std::chrono::seconds(30), [](gpu::device_communicator&, cudaStream_t, auto&) {});
  REQUIRE(problems.size() == 2);
  for (const auto& p : problems) CHECK(p.find("the ring of channel 0: it lists rank 0 twice") != std::string::npos);
}

TEST_CASE("gpu device collectives: mixed memory, some pairs through host memory, gives the same results", "[gpu][cuda]") {
  // Ranks 0-2 and 1-3 taken out of peer access (device_options::no_peer_access): those pairs
  // read and flag each other through shared host memory, the others in device memory, and every
  // rank stages what all peers read in both. The sweeps of the other tests, the ring included:
  // in rank order (hops 0-1, 1-2, 2-3, 3-0, all in device memory), then 0-2-1-3 (two hops
  // through host memory).
  for (const std::vector<int>& order : {std::vector<int>{}, std::vector<int>{0, 2, 1, 3}}) {
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  opt.no_peer_access = {{0, 2}, {1, 3}};
  if (!order.empty()) opt.rings = {order};
  opt.ring_min_bytes = SIZE_MAX;  // the sweeps check untagged calls against the rank-order fold
  INFO("ring order of " << order.size() << " ranks");
  require_none(on_ranks(4, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    if (dc.memory() == gpu::workspace_memory::device) out.push_back("workspace memory is device despite no_peer_access");
    const int across = (dc.rank() + 2) % 4;
    if (dc.path_to_peer(across) != gpu::peer_path::host_memory) out.push_back("the pair without peer access is not in host memory");
    int call = 0;
    reduction_sweep(dc, s, call, out);
    for (std::size_t count : sweep_counts) {
      collx_cuda_test::sweep_copies<float>(dc, s, count, 0, ++call, out);
      collx_cuda_test::sweep_v_forms<float>(dc, s, count, false, 1, ++call, collx::ops::sum{}, out);
      collx_cuda_test::sweep_all_to_all_v<triple>(dc, s, count, true, 0, ++call, out);
      collx_cuda_test::sweep_ring<float>(dc, s, count, 0, call += 3, collx::ops::sum{}, out);
      collx_cuda_test::sweep_ring<collx::half>(dc, s, count, 1, call += 3, collx::ops::sum{}, out);
    }
    collx_cuda_test::sweep_windows<float>(dc, s, 5000, ++call, collx::ops::sum{}, false, out);
    for (std::size_t count : sweep_counts) collx_cuda_test::sweep_send_recv<float>(dc, s, count, 1, call += 20, out);
  }));
  }
}

TEST_CASE("gpu device send/recv: rings, every pair, and collectives in between", "[gpu][cuda]") {
  for (int world : {2, 3, 4}) {
    gpu::device_options opt;
    opt.staging_bytes = 32 << 10;  // 8 KiB halves: 9001 floats take five chunks
    opt.timeout = std::chrono::seconds(15);
    INFO("world " << world);
    require_none(on_ranks(world, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      int call = 0;
      for (std::size_t count : sweep_counts)
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          call += 20;
          collx_cuda_test::sweep_send_recv<float>(dc, s, count, offset, call, out);
          collx_cuda_test::sweep_send_recv<triple>(dc, s, count, offset, call, out);
          collx_cuda_test::sweep_send_recv<collx::half>(dc, s, count, offset, call, out);
        }
    }));
  }
}

TEST_CASE("gpu device send/recv: a count that differs fails with mismatch at the receiver", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  require_none(on_ranks(2, opt, std::chrono::seconds(30), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 8192, s), "cudaMallocAsync");
    // 5 and 1003 floats: the same one chunk and block, and the same 6-bit count hash in the
    // signature; the exact size published with the message tells them apart.
    if (dc.rank() == 0) gpu::send(dc, buf, 5, 1, s);
    else gpu::recv(dc, buf, 1003, 0, s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": a send and recv of different counts succeeded");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool named = dc.rank() == 1 ? e.code() == collx::errc::mismatch && what.find("sends 5 elements of 4 bytes") != std::string::npos &&
                                              what.find("takes 1003 elements") != std::string::npos
                                        : e.code() == collx::errc::aborted;
      if (!named) out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + what);
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}

TEST_CASE("gpu device send_recv pairs with a peer's recv-then-send, and with itself", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;  // 8 KiB halves: 9001 floats take five chunks
  opt.timeout = std::chrono::seconds(15);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    using collx_cuda_test::sweep_input;
    const int me = dc.rank(), other = 1 - me;
    for (std::size_t count : {std::size_t{3}, std::size_t{9001}}) {
      const std::string tag = "rank " + std::to_string(me) + " count " + std::to_string(count) + ": ";
      sweep_buffer<float> in(count, 0, s), res(count, 1, s), self(count, 0, s);
      in.set(sweep_input<float>(me, count, 7));
      if (me == 0) gpu::send_recv(dc, in.data(), count, other, res.data(), count, other, s);
      else {
        gpu::recv(dc, res.data(), count, other, s);
        gpu::send(dc, in.data(), count, other, s);
      }
      out.push_back(collx_cuda_test::sweep_sync(dc, s, tag + "send_recv against recv + send"));
      out.push_back(res.compare(sweep_input<float>(other, count, 7), tag + "send_recv against recv + send"));
      gpu::send_recv(dc, in.data(), count, me, self.data(), count, me, s);  // to itself
      out.push_back(collx_cuda_test::sweep_sync(dc, s, tag + "send_recv to itself"));
      out.push_back(self.compare(sweep_input<float>(me, count, 7), tag + "send_recv to itself"));
    }
    std::erase(out, std::string());
  }));
}

// Runs fn(dc, stream, buf, problems) on 3 ranks, each with a 4 KiB device buffer `buf` (float*), for
// a rejected call's failure that must end every rank's calls at once: with a 30 s device timeout,
// all must be done within 20 s.
template <class Fn>
void ends_every_rank_at_once(Fn fn) {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(30);
  const auto t0 = std::chrono::steady_clock::now();
  require_none(on_ranks(3, opt, std::chrono::seconds(60), [&](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");
    fn(dc, s, buf, out);
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));  // well before the 30 s timeout
}

TEST_CASE("gpu device send/recv: a failure travels down a pipeline of messages", "[gpu][cuda]") {
  // Rank 2 rejects its send (a null buffer) to rank 1; rank 1, receiving from 2 before it sends to
  // 0, ends and passes the failure on; rank 0, receiving from 1, must end too, not time out.
  ends_every_rank_at_once([](gpu::device_communicator& dc, cudaStream_t s, float* buf, auto& out) {
    collx::errc code = collx::errc::internal;
    try {
      if (dc.rank() == 2) gpu::send(dc, static_cast<const float*>(nullptr), 100, 1, s);
      if (dc.rank() == 1) {
        gpu::recv(dc, buf, 100, 2, s);
        gpu::send(dc, buf, 100, 0, s);
      }
      if (dc.rank() == 0) gpu::recv(dc, buf, 100, 1, s);
      dc.synchronize(s);
    } catch (const collx::error& e) {
      code = e.code();
    }
    const collx::errc want = dc.rank() == 2 ? collx::errc::invalid_argument : collx::errc::aborted;
    if (code != want)
      out.push_back("rank " + std::to_string(dc.rank()) + ": got errc " + std::to_string(static_cast<int>(code)) + ", not " +
                    std::to_string(static_cast<int>(want)));
  });
}

TEST_CASE("gpu device v-forms: a negative count is rejected on its rank, naming it, and ends its peers' calls",
          "[gpu][cuda]") {
  // Rank 1 passes std::vector<int> counts with a negative entry (block_counts copies and checks
  // them); ranks 0 and 2 pass good ones and must end with aborted, long before the timeout.
  ends_every_rank_at_once([](gpu::device_communicator& dc, cudaStream_t s, float* buf, auto& out) {
    const std::vector<int> counts = dc.rank() == 1 ? std::vector<int>{100, -7, 100} : std::vector<int>{100, 0, 100};
    collx::errc code = collx::errc::internal;
    std::string what;
    try {
      gpu::all_gather_v(dc, buf + 512, buf, counts, s);
      dc.synchronize(s);
    } catch (const collx::error& e) {
      code = e.code();
      what = e.what();
    }
    const std::string me = "rank " + std::to_string(dc.rank()) + ": ";
    const collx::errc want = dc.rank() == 1 ? collx::errc::invalid_argument : collx::errc::aborted;
    if (code != want) out.push_back(me + "got errc " + std::to_string(static_cast<int>(code)) + ": " + what);
    if (dc.rank() == 1 && what.find("counts[1] = -7 is negative") == std::string::npos)
      out.push_back(me + "the message does not name the negative count: " + what);
  });
}

TEST_CASE("gpu device send/recv: two ranks that both send first time out with a message saying why", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(2);
  opt.staging_bytes = 32 << 10;
  require_none(on_ranks(2, opt, std::chrono::seconds(30), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    const std::size_t count = 10000;  // more than two chunks: the sender needs its first chunk back
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 2 * count * sizeof(float), s), "cudaMallocAsync");
    const int other = 1 - dc.rank();
    gpu::send(dc, buf, count, other, s);
    gpu::recv(dc, buf + count, count, other, s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": two sends first did not time out");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool named = e.code() == collx::errc::timeout ? what.find("matching recv") != std::string::npos
                                                          : e.code() == collx::errc::aborted;
      if (!named) out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + what);
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
}

TEST_CASE("gpu device collectives: two-shot all-reduce gives one-shot's bits", "[gpu][cuda]") {
  // two_shot_min_bytes = 1 sends every all-reduce two-shot (reduce-scatter of the pieces, then
  // all-gather), in place and out of place; the expected values are the same rank-order folds.
  for (int world : {2, 3, 4}) {
    gpu::device_options opt;
    opt.staging_bytes = 32 << 10;  // 16 KiB slots: the larger counts take several chunks per phase
    opt.timeout = std::chrono::seconds(15);
    opt.two_shot_min_bytes = 1;
    INFO("world " << world);
    require_none(on_ranks(world, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      if (dc.two_shot_min_bytes() != 1) out.push_back("two_shot_min_bytes was not taken from the options");
      int call = 0;
      reduction_sweep(dc, s, call, out);
    }));
  }
}

TEST_CASE("gpu device collectives: rank 0's all-reduce form threshold holds for every rank", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(15);
  const auto problems = on_ranks(
      3, opt, std::chrono::seconds(60),
      [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
        if (dc.two_shot_min_bytes() != 1)
          out.push_back("rank " + std::to_string(dc.rank()) + ": two_shot_min_bytes " + std::to_string(dc.two_shot_min_bytes()) +
                        ", not rank 0's 1");
        collx_cuda_test::sweep_reductions<float>(dc, s, 9001, 0, 1, collx::ops::sum{}, out);
      },
      [](int rank, gpu::device_options& o) { o.two_shot_min_bytes = rank == 0 ? 1 : SIZE_MAX; });
  require_none(problems);
}

TEST_CASE("gpu device collectives: ranks whose pointers differ in alignment cut calls the same way", "[gpu][cuda]") {
  for (std::size_t two_shot_min : {std::size_t{0}, std::size_t{1}}) {  // the default (one-shot here), then two-shot
    gpu::device_options opt;
    opt.staging_bytes = 32 << 10;
    opt.timeout = std::chrono::seconds(15);
    opt.two_shot_min_bytes = two_shot_min;
    INFO("two_shot_min_bytes " << two_shot_min);
    require_none(on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      // Rank 1's buffers are misaligned (scalar accesses), the others' aligned (16-byte vectors).
      const std::size_t offset = dc.rank() == 1 ? 1 : 0;
      collx_cuda_test::sweep_reductions<float>(dc, s, 9001, offset, 1, collx::ops::sum{}, out);
      collx_cuda_test::sweep_copies<float>(dc, s, 9001, offset, 2, out);
      collx_cuda_test::sweep_all_to_all_v<float>(dc, s, 4099, true, offset, 3, out);
    }));
  }
}

TEST_CASE("gpu device collectives: many blocks and chunks with the default staging", "[gpu][cuda]") {
  // 8 MiB of staging: calls of megabytes take every block the communicator allows (up to 64 per
  // rank) and several chunks, so per-block flags, exchange rows and block ranges all take part.
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(30);
  opt.two_shot_min_bytes = std::size_t{1} << 20;  // two-shot from 1 MiB: the large all-reduces
  require_none(on_ranks(3, opt, std::chrono::seconds(120), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      collx_cuda_test::sweep_reductions<float>(dc, s, std::size_t{1} << 21, offset, 1, collx::ops::sum{}, out);
      collx_cuda_test::sweep_all_to_all_v<float>(dc, s, 800000, offset == 0, offset, 2, out);
    }
  }));
}

TEST_CASE("gpu device all_to_all_v: calls with nothing to move, then calls that move data", "[gpu][cuda]") {
  require_none(on_ranks(3, {}, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    const std::vector<std::size_t> zeros(3, 0);
    const float* no_send = nullptr;
    float* no_recv = nullptr;
    for (int round = 0; round < 3; ++round) {  // exchange rows of both parities, no data epochs
      // Both null: T named; one typed null pointer: T from it, a literal nullptr for the other.
      const std::span<const std::size_t> none(zeros);
      if (round == 0) gpu::all_to_all_v<float>(dc, nullptr, none, nullptr, none, s);
      else if (round == 1) gpu::all_to_all_v(dc, no_send, none, nullptr, none, s);
      else gpu::all_to_all_v(dc, nullptr, none, no_recv, none, s);
      collx_cuda_test::sweep_all_to_all_v<float>(dc, s, 100 + static_cast<std::size_t>(round), false, 0, 10 + round, out);
    }
  }));
}

namespace {
// Element types no other test uses: their kernels are not loaded yet when the test below begins.
struct first_use_a2a {
  float x;
};
struct first_use_p2p {
  float x;
};
struct first_use_zero {
  float x;
};
struct first_use_pipe_a {
  float x;
};
struct first_use_pipe_b {
  float x;
};
template <class T>
std::vector<T> first_use_values(int rank, std::size_t count) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = T{static_cast<float>(rank * 1000) + static_cast<float>(i)};
  return v;
}
}  // namespace

TEST_CASE("gpu device collectives: ranks that launch different kernels for one call meet at the kernels' first use",
          "[gpu][cuda]") {
  // The access width follows each rank's own pointers and offsets, so the ranks of one call may
  // launch different kernels (here all_to_all_v's displacements, and a send's buffer against its
  // recv's). Ranks as threads share the GPU's context, and under CUDA's lazy loading (the default)
  // a kernel's first launch may load it, which waits for every kernel running in the context:
  // rank 1 launching its kernel while rank 0's kernel of the same call already waits for it would
  // wait until rank 0's timeout. Rank 0 launches first and rank 1 only after a host barrier that
  // rank 0 reaches after its launch. (Each call's load_kernels and the communicator's load of every
  // registered kernel at creation each prevent it; so does CUDA_MODULE_LOADING=EAGER.)
  gpu::device_options opt;
  opt.staging_bytes = 32 << 10;
  opt.timeout = std::chrono::seconds(10);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const int me = dc.rank();
    const std::string tag = "rank " + std::to_string(me) + ": ";
    auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
    auto in_turn = [&](auto call) {  // rank 0's kernel is out (and waiting) before rank 1 launches
      if (me == 1) collx::barrier(dc.host());
      call();
      if (me == 0) collx::barrier(dc.host());
    };
    {  // the reference sweep's all_to_all_v on 2 ranks, base 2: rank 0 16-byte accesses, rank 1 not
      using T = first_use_a2a;
      const std::vector<std::size_t> send = me == 0 ? std::vector<std::size_t>{0, 42} : std::vector<std::size_t>{29, 0};
      const std::vector<std::size_t> recv = me == 0 ? std::vector<std::size_t>{0, 29} : std::vector<std::size_t>{42, 0};
      const std::size_t sent = send[0] + send[1], got = recv[0] + recv[1];
      sweep_buffer<T> in(sent, 0, s), res(got, 0, s);
      in.set(first_use_values<T>(me, sent));
      in_turn([&] {
        gpu::all_to_all_v(dc, in.data(), std::span<const std::size_t>(send), res.data(), std::span<const std::size_t>(recv), s);
      });
      note(collx_cuda_test::sweep_sync(dc, s, tag + "all_to_all_v"));
      note(res.compare(first_use_values<T>(1 - me, got), tag + "all_to_all_v"));
    }
    {  // a send from a 16-byte aligned buffer to a recv into a misaligned one
      using T = first_use_p2p;
      const std::size_t count = 1000;
      sweep_buffer<T> buf(count, me == 0 ? 0 : 1, s);
      if (me == 0) buf.set(first_use_values<T>(0, count));
      in_turn([&] {
        if (me == 0) gpu::send(dc, buf.data(), count, 1, s);
        else gpu::recv(dc, buf.data(), count, 0, s);
      });
      note(collx_cuda_test::sweep_sync(dc, s, tag + (me == 0 ? "send" : "recv")));
      if (me == 1) note(buf.compare(first_use_values<T>(0, count), tag + "recv"));
    }
  }));
}

namespace collx_test {
extern std::size_t kernels_registered_at_main;  // gpu_test_main.cpp
}

TEST_CASE("gpu kernel registry: the kernels this program's calls may launch are registered before main", "[cuda]") {
  // Needs no GPU. The registration is the dynamic initialization of a variable template
  // (kernel_registered), which must run at program start, before any kernel's first use, for the
  // device communicator to find the kernels when it is created; each kernel once.
  using namespace collx::gpu::device_detail;
  INFO(collx_test::kernels_registered_at_main << " kernels registered when main() began");
  CHECK(collx_test::kernels_registered_at_main >= 40);  // this file calls every collective on several types
  kernel_loaders& r = registered_kernels();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<kernel_loader> all = r.all;
  CHECK(all.size() == collx_test::kernels_registered_at_main);
  std::sort(all.begin(), all.end(), [](kernel_loader a, kernel_loader b) { return std::less<>{}(a, b); });
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
}

TEST_CASE("gpu device collectives: a rank with count 0 against a peer's first use of the kernel fails with mismatch",
          "[gpu][cuda]") {
  // Rank 0 moves nothing (its empty-call kernel waits for rank 1) and launches first; rank 1 then
  // launches the all_gather kernel of a type no other test uses. Under lazy loading that launch
  // loaded the kernel, which waited for rank 0's waiting kernel: both ranks ended at the timeout
  // instead of the mismatch, until the communicator loaded every kernel at its creation.
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using T = first_use_zero;
    const int me = dc.rank();
    const std::size_t count = me == 0 ? 0 : 1000;
    collx_cuda_test::sweep_buffer<T> in(1000, 0, s), res(2000, 0, s);
    if (me == 1) collx::barrier(dc.host());  // rank 0's kernel is out (and waiting) first
    gpu::all_gather(dc, in.data(), res.data(), count, s);
    if (me == 0) collx::barrier(dc.host());
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(me) + ": counts 0 and 1000 succeeded");
    } catch (const collx::error& e) {  // a timeout (the stall) is an unexpected error here
      if (e.code() != collx::errc::mismatch && e.code() != collx::errc::aborted)
        out.push_back("rank " + std::to_string(me) + ": unexpected error: " + e.what());
    }
  }));
}

TEST_CASE("gpu device collectives: calls pipelined with a new type along the way do not wait on its first use",
          "[gpu][cuda]") {
  // Rank 0 enqueues two calls, the second of a type no other test uses, before rank 1 calls at
  // all: its first call's kernel waits for rank 1 while rank 0 launches the second. Under lazy
  // loading that launch loaded its kernel and so waited for the first, which waited for rank 1,
  // which waited for rank 0 at the host barrier: a timeout, until the communicator loaded every
  // kernel at its creation.
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const int me = dc.rank();
    const std::string tag = "rank " + std::to_string(me) + ": ";
    const std::size_t count = 777;
    sweep_buffer<first_use_pipe_a> in_a(count, 0, s), res_a(2 * count, 0, s);
    sweep_buffer<first_use_pipe_b> in_b(count, 0, s), res_b(2 * count, 0, s);
    in_a.set(first_use_values<first_use_pipe_a>(me, count));
    in_b.set(first_use_values<first_use_pipe_b>(me + 2, count));
    if (me == 1) collx::barrier(dc.host());
    gpu::all_gather(dc, in_a.data(), res_a.data(), count, s);
    gpu::all_gather(dc, in_b.data(), res_b.data(), count, s);
    if (me == 0) collx::barrier(dc.host());
    auto gathered = [&](auto first, int base) {
      auto all = first_use_values<decltype(first)>(base, count);
      const auto second = first_use_values<decltype(first)>(base + 1, count);
      all.insert(all.end(), second.begin(), second.end());
      return all;
    };
    const std::string sync = collx_cuda_test::sweep_sync(dc, s, tag + "two all_gathers");
    if (!sync.empty()) out.push_back(sync);
    else {
      if (auto p = res_a.compare(gathered(first_use_pipe_a{}, 0), tag + "first all_gather"); !p.empty()) out.push_back(p);
      if (auto p = res_b.compare(gathered(first_use_pipe_b{}, 2), tag + "second all_gather"); !p.empty()) out.push_back(p);
    }
  }));
}

TEST_CASE("gpu device collectives: calls with count 0 on every rank meet and keep the epochs in step", "[gpu][cuda]") {
  require_none(on_ranks(3, {}, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    const std::vector<std::size_t> zeros(3, 0);
    for (int round = 0; round < 2; ++round) {  // an odd and an even number of empty epochs before data
      gpu::all_reduce<float>(dc, nullptr, nullptr, 0, collx::ops::sum{}, s);
      if (round == 1) {
        gpu::broadcast<float>(dc, nullptr, nullptr, 0, 2, s);
        gpu::all_gather_v<float>(dc, nullptr, nullptr, std::span<const std::size_t>(zeros), s);
      }
      collx_cuda_test::sweep_reductions<float>(dc, s, 1000, 0, 20 + round, collx::ops::sum{}, out);
    }
    dc.synchronize(s);
  }));
}

namespace {

// `world` ranks whose all_reduce counts differ (count_for(rank)): every rank fails with
// errc::mismatch naming the count, or errc::aborted (a peer failed first), well before the
// timeout; the communicator is then unusable and the next call fails at once.
void check_mismatched_counts(int world, std::size_t (*count_for)(int)) {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  const auto problems = on_ranks(world, opt, std::chrono::seconds(30), [count_for](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");  // never a device-wide sync: see device_sweep.cuh
    gpu::all_reduce(dc, buf, buf, count_for(dc.rank()), collx::ops::sum{}, s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": mismatched all_reduce succeeded");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool named = e.code() == collx::errc::mismatch ? what.find("count") != std::string::npos
                                                            : e.code() == collx::errc::aborted;
      if (!named) out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + what);
    }
    try {  // the communicator is now unusable: the next call fails at once
      gpu::all_reduce(dc, buf, buf, 10, collx::ops::sum{}, s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": a call after the failure was accepted");
    } catch (const collx::error&) {
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  });
  require_none(problems);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // well before the timeout
}

}  // namespace

TEST_CASE("gpu device collectives: mismatched calls fail on every rank instead of hanging", "[gpu][cuda]") {
  check_mismatched_counts(2, [](int rank) -> std::size_t { return rank == 0 ? 100 : 101; });
}

TEST_CASE("gpu device collectives: a rank whose count is 0 where the others' is not fails with mismatch", "[gpu][cuda]") {
  // The rank with count 0 meets its peers once (empty_call_kernel): before, it launched nothing,
  // so its peers timed out or paired with its next call.
  check_mismatched_counts(3, [](int rank) -> std::size_t { return rank == 1 ? 0 : 1000; });
}

TEST_CASE("gpu device all_to_all_v: counts that disagree fail with mismatch on every rank", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  require_none(on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 1 << 20, s), "cudaMallocAsync");
    std::vector<std::size_t> send_counts(3, 1000), recv_counts(3, 1000);
    if (dc.rank() == 2) recv_counts[0] = 999;  // rank 0 sends 1000
    gpu::all_to_all_v(dc, buf, std::span<const std::size_t>(send_counts), buf + 4000, std::span<const std::size_t>(recv_counts), s);
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": disagreeing counts succeeded");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool expected = dc.rank() == 2 ? e.code() == collx::errc::mismatch && what.find("rank 0 sends 1000") != std::string::npos &&
                                                 what.find("recv_counts[0] is 999") != std::string::npos
                                           : e.code() == collx::errc::aborted;
      if (!expected) out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + what);
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 20 s timeout
}

TEST_CASE("gpu device collectives: a rank that never calls makes its peer time out", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::milliseconds(500);
  const auto problems = on_ranks(2, opt, std::chrono::seconds(30), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    if (dc.rank() == 1) return;  // never calls
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");  // never a device-wide sync: see device_sweep.cuh
    gpu::all_gather(dc, buf, buf, 8, s);
    try {
      dc.synchronize(s);
      out.push_back("all_gather without its peer succeeded");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      if (e.code() != collx::errc::timeout || what.find("rank 1") == std::string::npos)
        out.push_back(std::string("unexpected error: ") + what);
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  });
  require_none(problems);
}

TEST_CASE("gpu device collectives: bad arguments are rejected before the call is enqueued and end the communicator", "[gpu][cuda]") {
  // Every rank makes the same bad call (the common case: the same code on every rank).
  struct bad_call {
    const char* what;
    void (*call)(gpu::device_communicator&, float*, cudaStream_t);
  };
  const bad_call cases[] = {
      {"root 2 of 2", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::broadcast(dc, buf, buf, 4, 2, s); }},
      {"root -1", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::reduce(dc, buf, buf, 4, -1, collx::ops::sum{}, s); }},
      {"null recv", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::all_reduce<float>(dc, buf, nullptr, 4, collx::ops::sum{}, s); }},
      {"partial overlap", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::all_reduce(dc, buf, buf + 1, 4, collx::ops::sum{}, s); }},
      {"reduce_scatter overlap",
       [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::reduce_scatter(dc, buf, buf + 2, 4, collx::ops::sum{}, s); }},
      {"all_gather overlap", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) { gpu::all_gather(dc, buf, buf + 1, 4, s); }},
      // Counts past memory, e.g. negative ones converted to size_t (send == recv: before, the wrapped
      // byte counts passed the overlap checks).
      {"all_reduce count -1", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         gpu::all_reduce(dc, buf, buf, static_cast<std::size_t>(-1), collx::ops::sum{}, s); }},
      {"reduce_scatter count 2^62 times 2 ranks", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         gpu::reduce_scatter(dc, buf, buf, std::size_t{1} << 62, collx::ops::sum{}, s); }},
      {"all_gather count -4", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         gpu::all_gather(dc, buf, buf, static_cast<std::size_t>(-4), s); }},
      {"all_to_all count -2", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         gpu::all_to_all(dc, buf, buf, static_cast<std::size_t>(-2), s); }},
      {"broadcast count -1", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         gpu::broadcast(dc, buf, buf, static_cast<std::size_t>(-1), 0, s); }},
      {"send count -1", [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         if (dc.rank() == 0) gpu::send(dc, buf, static_cast<std::size_t>(-1), 1, s);
         else gpu::recv(dc, buf, static_cast<std::size_t>(-1), 0, s); }},
      {"all_gather_v with 3 counts for 2 ranks",
       [](gpu::device_communicator& dc, float* buf, cudaStream_t s) {
         const std::size_t counts[] = {1, 1, 1};
         gpu::all_gather_v(dc, buf, buf + 8, std::span<const std::size_t>(counts), s);
       }},
  };
  for (const bad_call& c : cases) {
    INFO(c.what);
    require_none(on_ranks(2, {}, std::chrono::seconds(30), [&](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
      const std::string me = "rank " + std::to_string(dc.rank()) + ", " + c.what + ": ";
      float* buf = nullptr;
      gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");  // never a device-wide sync: see device_sweep.cuh
      try {
        c.call(dc, buf, s);
        out.push_back(me + "accepted");
      } catch (const collx::error& e) {
        if (e.code() != collx::errc::invalid_argument) out.push_back(me + e.what());
      }
      try {  // the rejected call ended the communicator
        dc.synchronize(s);
        out.push_back(me + "synchronize reports no failure");
      } catch (const collx::error& e) {
        if (e.code() != collx::errc::invalid_argument) out.push_back(me + "synchronize: " + e.what());
      }
      try {
        gpu::all_reduce(dc, buf, buf, 4, collx::ops::sum{}, s);
        out.push_back(me + "a call after the rejected one was accepted");
      } catch (const collx::error&) {
      }
      cudaFreeAsync(buf, s);
      cudaStreamSynchronize(s);
    }));
  }
}

TEST_CASE("gpu device collectives: a window of another communicator, or a deregistered one, is rejected at any count",
          "[gpu][cuda]") {
  // Two device communicators of the same ranks number their windows alike: only the communicator
  // tells them apart. Every rank makes the same bad call (count 0 too: a foreign window is a
  // mistake whatever the count).
  enum class bad { foreign, deregistered };
  for (const bad which : {bad::foreign, bad::deregistered})
    for (const std::size_t count : {std::size_t{0}, std::size_t{4}})
      for (const int form : {0, 1, 2, 3}) {
        const std::string what = std::string(which == bad::foreign ? "another communicator's" : "a deregistered") +
                                 " window, form " + std::to_string(form) + ", count " + std::to_string(count);
        INFO(what);
        require_none(on_ranks(2, {}, std::chrono::seconds(30), [&](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
          const std::string me = "rank " + std::to_string(dc.rank()) + ", " + what + ": ";
          gpu::device_options o;
          o.device = dc.device();
          gpu::device_communicator other(dc.host(), o);
          float* mem = nullptr;
          float* res = nullptr;
          gpu::check(cudaMalloc(&mem, 2 * 4096), "cudaMalloc");  // cudaMalloc: what a window needs across processes
          gpu::check(cudaMalloc(&res, 4096), "cudaMalloc");
          const gpu::window theirs = other.register_window(mem, 4096);
          const gpu::window gone = dc.register_window(mem + 1024, 4096);
          dc.deregister_window(gone);
          const gpu::window& w = which == bad::foreign ? theirs : gone;
          try {
            if (form == 0) gpu::all_reduce(dc, w, 0, res, count, collx::ops::sum{}, s);
            else if (form == 1) gpu::reduce_scatter(dc, w, 0, res, count / 2, collx::ops::sum{}, s);
            else if (form == 2) gpu::all_gather(dc, w, 0, res, count / 2, s);
            else gpu::broadcast(dc, w, 0, res, count, 0, s);
            out.push_back(me + "accepted");
          } catch (const collx::error& e) {
            if (e.code() != collx::errc::invalid_argument || std::string(e.what()).find("not registered with this communicator") == std::string::npos)
              out.push_back(me + "unexpected error: " + e.what());
          }
          try {  // the rejected call ended the communicator
            dc.synchronize(s);
            out.push_back(me + "synchronize reports no failure");
          } catch (const collx::error& e) {
            if (e.code() != collx::errc::invalid_argument) out.push_back(me + "synchronize: " + e.what());
          }
          other.deregister_window(theirs);
          cudaFree(res);
          cudaFree(mem);
        }));
      }
}

TEST_CASE("gpu device collectives: a rejection does not cut short the call before it", "[gpu][cuda]") {
  // Both ranks enqueue a valid all-reduce, then rank 0 a rejected call and rank 1 its valid twin,
  // without synchronising in between: rank 0's rejection must not end rank 1's first call, which
  // may still be waiting at its last barrier when rank 0's kernel has finished.
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(20);
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const std::size_t count = 100000;
    const int me = dc.rank();
    sweep_buffer<float> in(count, 0, s), res(count, 0, s), other(count, 0, s);
    const auto mine = collx_cuda_test::sweep_input<float>(me, count, 1);
    in.set(mine);
    gpu::all_reduce(dc, in.data(), res.data(), count, collx::ops::sum{}, s);
    if (me == 0) {
      try {
        gpu::all_reduce<float>(dc, in.data(), nullptr, count, collx::ops::sum{}, s);
        out.push_back("rank 0: a null recv was accepted");
      } catch (const collx::error&) {
      }
    } else {
      gpu::all_reduce(dc, in.data(), other.data(), count, collx::ops::sum{}, s);
    }
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(me) + ": no failure after rank 0 rejected its second call");
    } catch (const collx::error&) {
    }
    const std::string p = res.compare(collx_cuda_test::sweep_fold<float>(2, count, 0, 1, collx::ops::sum{}),
                                      "rank " + std::to_string(me) + ": the first (valid) all_reduce");
    if (!p.empty()) out.push_back(p);
  }));
}

TEST_CASE("gpu device collectives: a rank that rejects a call ends its peers' waits at once", "[gpu][cuda]") {
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  require_none(on_ranks(2, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    float* buf = nullptr;
    gpu::check(cudaMallocAsync(reinterpret_cast<void**>(&buf), 4096, s), "cudaMallocAsync");
    if (dc.rank() == 0) {
      try {
        gpu::all_reduce<float>(dc, buf, nullptr, 4, collx::ops::sum{}, s);  // rank 0 alone passes a null recv
        out.push_back("rank 0: a null recv was accepted");
      } catch (const collx::error& e) {
        if (e.code() != collx::errc::invalid_argument) out.push_back(std::string("rank 0: ") + e.what());
      }
    } else {
      gpu::all_reduce(dc, buf, buf, 4, collx::ops::sum{}, s);
    }
    try {
      dc.synchronize(s);
      out.push_back("rank " + std::to_string(dc.rank()) + ": no failure after rank 0 rejected the call");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool expected = dc.rank() == 0 ? e.code() == collx::errc::invalid_argument
                                           : e.code() == collx::errc::aborted && what.find("rank 0 failed first") != std::string::npos;
      if (!expected) out.push_back("rank " + std::to_string(dc.rank()) + ": unexpected error: " + what);
    }
    cudaFreeAsync(buf, s);
    cudaStreamSynchronize(s);
  }));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 20 s timeout
}

TEST_CASE("gpu device collectives: a rank whose kernel fails to launch ends its peers' waits at once", "[gpu][cuda]") {
  // Rank 1 alone passes count 0 (empty_call_kernel: one block), and that kernel is made
  // unlaunchable for the process (a required cluster of 2 blocks: its launch fails); the peers'
  // collective_kernel is untouched. Rank 1 throws errc::cuda at once; the peers, whose kernels are
  // out, must end with errc::aborted naming rank 1, not wait for the 20 s timeout.
  const void* empty = reinterpret_cast<const void*>(&gpu::device_detail::empty_call_kernel<>);
  const auto cluster = [&](int w) {
    cudaError_t e = cudaFuncSetAttribute(empty, cudaFuncAttributeRequiredClusterWidth, w);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(empty, cudaFuncAttributeRequiredClusterHeight, w ? 1 : 0);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(empty, cudaFuncAttributeRequiredClusterDepth, w ? 1 : 0);
    return e;
  };
  if (const cudaError_t e = cluster(2); e != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cluster(0);
    WARN("cannot make a kernel unlaunchable here (cudaFuncSetAttribute: " << cudaGetErrorName(e) << "): not tested");
    return;
  }
  gpu::device_options opt;
  opt.timeout = std::chrono::seconds(20);
  const auto t0 = std::chrono::steady_clock::now();
  const auto problems = on_ranks(3, opt, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const std::size_t count = 1000;
    const std::string tag = "rank " + std::to_string(dc.rank()) + ": ";
    sweep_buffer<float> in(count, 0, s), res(count, 0, s);
    bool threw = false;
    try {
      gpu::all_reduce(dc, in.data(), res.data(), dc.rank() == 1 ? 0 : count, collx::ops::sum{}, s);
    } catch (const collx::error& e) {
      threw = true;
      if (dc.rank() != 1 || e.code() != collx::errc::cuda) out.push_back(tag + "all_reduce threw: " + e.what());
    }
    if (dc.rank() == 1 && !threw) out.push_back(tag + "the unlaunchable kernel did not fail its launch");
    try {
      dc.synchronize(s);
      out.push_back(tag + "no failure after rank 1's launch failed");
    } catch (const collx::error& e) {
      const std::string what = e.what();
      const bool expected = dc.rank() == 1 ? e.code() == collx::errc::cuda && what.find("could not launch") != std::string::npos
                                           : e.code() == collx::errc::aborted && what.find("rank 1 failed first") != std::string::npos;
      if (!expected) out.push_back(tag + "unexpected error: " + what);
    }
  });
  (void)cluster(0);  // launchable again for the tests after this one
  require_none(problems);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 20 s timeout
}

TEST_CASE("gpu device collectives: captured in a CUDA graph, replays keep counting epochs", "[gpu][cuda]") {
  require_none(on_ranks(2, {}, std::chrono::seconds(60), [](gpu::device_communicator& dc, cudaStream_t s, auto& out) {
    using collx_cuda_test::sweep_buffer;
    const std::size_t count = 3001;
    const int n = dc.size(), me = dc.rank();
    sweep_buffer<float> in(count, 0, s), res(count, 0, s), extra(count, 0, s);
    cudaGraph_t graph{};
    cudaGraphExec_t exec{};
    gpu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    // The form without an op: a launch it sent anywhere but `s` would be missing from the graph
    // (and the legacy stream refuses launches while this thread captures), whatever the GPU count.
    gpu::all_reduce(dc, in.data(), res.data(), count, s);
    gpu::check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    gpu::check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int round = 1; round <= 4; ++round) {
      in.set(collx_cuda_test::sweep_input<float>(me, count, round));
      res.poison();
      gpu::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
      out.push_back(collx_cuda_test::sweep_sync(dc, s, "graph replay " + std::to_string(round)));
      out.push_back(res.compare(collx_cuda_test::sweep_fold<float>(n, count, 0, round, collx::ops::sum{}),
                                "rank " + std::to_string(me) + " graph replay " + std::to_string(round)));
      // An ordinary call between replays: the epochs it takes must not confuse the next replay.
      gpu::all_reduce(dc, in.data(), extra.data(), count, collx::ops::sum{}, s);
      out.push_back(collx_cuda_test::sweep_sync(dc, s, "call between replays"));
    }
    std::erase(out, std::string());
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }));
}
