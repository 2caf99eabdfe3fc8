// How a device communicator is set up (collx/cuda/device_communicator.hpp), without a GPU: this
// program links tests/fakes/fake_cudart.cpp in place of libcudart, so the canned machines of
// fake_gpu_machines.hpp decide peer access. Ranks are threads. Checked: the ranks agree on the
// workspace memory from the wiring (device memory on an NVSwitch machine and between NVLink
// neighbours of a DGX-1, shared host memory between GPUs without peer access: mixed where some
// pairs have it, host when asked);
// with host memory every rank's workspace lies in one shared-memory object that each rank maps
// itself and whose name is gone once the communicator exists; requests that cannot be met fail on
// every rank; a rank whose setup fails makes every rank throw at once; nothing stays allocated;
// with mixed memory the pointers of every pair of ranks meet in the same memory.
// Kernels cannot run here: the collectives themselves are tested on a GPU (tests/cuda).
#include <catch2/catch.hpp>

#include <collx/allreduce.hpp>
#include <collx/cuda/device_communicator.hpp>
#include <collx/topo/device_cost.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/transport/threads.hpp>

#include "fakes/fake_sysfs.hpp"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern "C" int fake_cudart_live();

namespace gpu = collx::gpu;

namespace {

// Sets the fake machine (and a failure to inject) for the scope of a test.
struct fake_machine {
  explicit fake_machine(const char* name, const char* fail = nullptr) {
    ::setenv("COLLX_FAKE_GPU_MACHINE", name, 1);
    if (fail) ::setenv("COLLX_FAKE_GPU_FAIL", fail, 1);
    else ::unsetenv("COLLX_FAKE_GPU_FAIL");
  }
  ~fake_machine() {
    ::unsetenv("COLLX_FAKE_GPU_MACHINE");
    ::unsetenv("COLLX_FAKE_GPU_FAIL");
  }
};

// Objects in /dev/shm named like the host workspaces this process creates (other tests may run
// at the same time).
int host_workspace_objects() {
  const std::string mine = "collx-gpu-" + std::to_string(::getpid()) + "-";
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(d)) n += std::string(e->d_name).rfind(mine, 0) == 0;
    ::closedir(d);
  }
  return n;
}

// The test's own CUDA calls inside a rank thread: an error, which create() records, rather than a
// REQUIRE (Catch2's assertions are not thread-safe).
void cuda_or_throw(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw collx::error(collx::errc::cuda, std::string("the test's own ") + what + " failed");
}

struct rank_result {
  std::string error;            // what the constructor threw ("" if nothing)
  collx::errc code{};           // its code
  gpu::workspace_memory memory{};
  std::vector<gpu::peer_path> paths;
};

// Creates a device communicator on every rank (rank r on devices[r], asking for memory[r] when
// given), runs `inside(dc)` on each while all exist, and returns what each rank saw.
std::vector<rank_result> create(const std::vector<int>& devices, std::vector<gpu::workspace_memory> memory = {},
                                std::function<void(gpu::device_communicator&)> inside = {},
                                std::function<void(gpu::device_options&)> adjust = {}) {
  collx::env::warn_unknown_variables_once(false);  // the fake's COLLX_FAKE_* variables are not collx's
  const int world = static_cast<int>(devices.size());
  if (memory.empty()) memory.assign(devices.size(), gpu::workspace_memory::automatic);
  collx::communicator_options copt;
  copt.timeout = std::chrono::seconds(20);
  auto comms = collx::make_thread_communicators(world, copt);
  std::vector<rank_result> out(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      const auto ur = static_cast<std::size_t>(r);
      try {
        gpu::device_options opt;
        opt.device = devices[ur];
        opt.staging_bytes = 64 << 10;
        opt.memory = memory[ur];
        opt.discover_wiring = false;  // the figures these tests give, not this machine's (see the wiring test)
        if (adjust) adjust(opt);
        gpu::device_communicator dc(comms[ur], opt);
        out[ur].memory = dc.memory();
        for (int p = 0; p < world; ++p) out[ur].paths.push_back(dc.path_to_peer(p));
        if (inside) inside(dc);
      } catch (const collx::error& e) {
        out[ur].error = e.what();
        out[ur].code = e.code();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("device bootstrap: device memory where every GPU reaches every other", "[cuda][bootstrap]") {
  fake_machine m("hgx-h100");
  const auto res = create({0, 1, 2, 3});
  for (const auto& r : res) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.memory == gpu::workspace_memory::device);
    CHECK(r.paths[1] != gpu::peer_path::host_memory);
  }
  CHECK(res[0].paths[1] == gpu::peer_path::same_process);
  CHECK(res[2].paths[2] == gpu::peer_path::self);
  // DGX-1: GPUs 0-3 are NVLink neighbours, 0 and 5 are not (no peer access across the sockets).
  fake_machine dgx("dgx1-v100");
  for (const auto& r : create({0, 1, 2, 3})) CHECK(r.memory == gpu::workspace_memory::device);
  for (const auto& r : create({0, 1, 5})) {
    INFO(r.error);
    CHECK(r.memory == gpu::workspace_memory::mixed);
  }
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
}

TEST_CASE("device bootstrap: COLLX_DEBUG=info describes each device communicator as its accessors read", "[cuda][bootstrap]") {
  // DGX-1: GPUs 0 and 1 are NVLink neighbours, 5 is across the sockets (mixed memory).
  fake_machine dgx("dgx1-v100");
  const std::string log_path = "/tmp/collx-test-device-log-" + std::to_string(::getpid()) + ".log";
  std::remove(log_path.c_str());
  collx::set_log(collx::log_level::info, log_path);
  std::vector<std::string> described(3), expected(3);
  const auto res = create({0, 1, 5}, {}, [&](gpu::device_communicator& dc) {
    const auto r = static_cast<std::size_t>(dc.rank());
    described[r] = dc.describe();
    // The same facts, from the accessors.
    const auto bytes = [](std::size_t b) { return b == SIZE_MAX ? std::string("never") : collx::detail::bytes_text(b); };
    std::string e = "rank " + std::to_string(r) + "/3 device communicator: GPU " + std::to_string(dc.device()) + " (";
    e += "|workspace memory " + std::string(gpu::workspace_memory_name(dc.memory())) + ", peers [";
    for (int p = 0; p < 3; ++p) e += (p ? ", " : "") + std::string(gpu::peer_path_name(dc.path_to_peer(p)));
    e += "]; all-reduce two-shot from " + bytes(dc.two_shot_min_bytes()) + "; ring from: allreduce " +
         bytes(dc.ring_min_bytes(collx::collective::allreduce)) + ", reduce_scatter " +
         bytes(dc.ring_min_bytes(collx::collective::reduce_scatter)) + ", all_gather " +
         bytes(dc.ring_min_bytes(collx::collective::all_gather)) + "; rings [";
    for (int i = 0; i < dc.rings().ring[0].world; ++i) e += (i ? " " : "") + std::to_string(dc.rings().ring[0].order[i]);
    e += "]; up to " + std::to_string(dc.block_limit()) + " blocks|" + dc.wiring_note();
    expected[r] = e;
  });
  collx::set_log(collx::log_level::off);
  std::ifstream f(log_path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  std::remove(log_path.c_str());
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << res[r].error << "\ndescribe(): " << described[r] << "\nexpected parts: " << expected[r]);
    REQUIRE(res[r].error.empty());
    CHECK(res[r].memory == gpu::workspace_memory::mixed);
    // Each '|'-separated part of the expectation, in order.
    std::size_t at = 0;
    std::stringstream parts(expected[r]);
    for (std::string part; std::getline(parts, part, '|');) {
      const std::size_t found = described[r].find(part, at);
      CHECK(found != std::string::npos);
      at = found == std::string::npos ? at : found + part.size();
    }
    // GPUs 0 and 5 reach each other through host memory (1 has NVLink to both)
    CHECK((described[r].find("host memory") != std::string::npos) == (r != 1));
    std::size_t logged = 0;
    for (const auto& l : lines) logged += l.size() > described[r].size() &&
                                          l.compare(l.size() - described[r].size(), described[r].size(), described[r]) == 0 &&
                                          l.find(" collx INFO rank ") != std::string::npos;
    CHECK(logged == 1);
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: without peer access the workspaces share one host memory object", "[cuda][bootstrap]") {
  fake_machine m("pcie2");
  std::atomic<int> objects_while_alive{-1};
  const gpu::workspace_layout lay = gpu::workspace_layout::for_staging(64 << 10);
  // What each rank sees, checked after the threads end (Catch2's checks are not thread-safe).
  std::vector<std::ptrdiff_t> gap(2, -1);
  std::vector<int> local_set(2, -1), local_apart(2, -1);
  std::atomic<std::uint64_t> flag_read{0};
  const auto res = create({0, 1}, {}, [&](gpu::device_communicator& dc) {
    const gpu::device_view& v = dc.view();
    const auto r = static_cast<std::size_t>(dc.rank());
    gap[r] = v.workspace[1] - v.workspace[0];
    local_set[r] = v.local != nullptr;
    local_apart[r] = v.local != v.workspace[dc.rank()];
    // What rank 0 writes at rank 1's flags through its mapping, rank 1 reads through its own.
    auto* flag = reinterpret_cast<std::atomic<std::uint64_t>*>(v.workspace[1] + v.flags_offset);
    if (dc.rank() == 0) flag->store(0x5eed, std::memory_order_release);
    collx::barrier(dc.host());
    if (dc.rank() == 1) flag_read = flag->load(std::memory_order_acquire);
    if (dc.rank() == 0) objects_while_alive = host_workspace_objects();
    collx::barrier(dc.host());
  });
  for (const auto& r : res) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.memory == gpu::workspace_memory::host);
    CHECK(r.paths[0] == (&r == &res[0] ? gpu::peer_path::self : gpu::peer_path::host_memory));
  }
  // Each rank mapped the object itself; the regions follow each other, a page-rounded workspace apart.
  const auto region = static_cast<std::ptrdiff_t>(gpu::workspace_layout::round_up(lay.total_bytes, 4096));
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(gap[r] == region);
    CHECK(local_set[r] == 1);
    CHECK(local_apart[r] == 1);  // counters and claim stay in the rank's device memory
  }
  CHECK(flag_read == 0x5eed);
  CHECK(objects_while_alive == 0);  // the name went once every rank had mapped it
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: mixed memory, device between GPUs with peer access and host between the others", "[cuda][bootstrap]") {
  // DGX-1 GPUs 0, 1, 5, 4: 0-1, 1-5, 5-4, 4-0 are NVLink neighbours, 0-5 and 1-4 have no peer
  // access. Every rank writes a distinct word through each of its pointers (flags into each peer,
  // a slot every peer reads, staging one peer reads), then every rank checks it reads each word
  // where the kernels read it: the pointers of every pair must meet in the same memory.
  fake_machine dgx("dgx1-v100");
  const std::vector<int> gpus{0, 1, 5, 4};
  const int n = 4;
  auto word = [](int writer, int reader, int what) { return 0x1000000ull * (what + 1) + 0x1000ull * writer + reader; };
  std::atomic<int> wrong{0}, checked{0}, without_mirror{0}, local_elsewhere{0};
  std::vector<std::vector<gpu::peer_path>> paths(n);
  const auto res = create(gpus, {}, [&](gpu::device_communicator& dc) {
    const gpu::device_view& v = dc.view();
    const int me = dc.rank();
    auto u64 = [](std::byte* base, std::size_t offset, std::size_t index) {
      return reinterpret_cast<std::atomic<std::uint64_t>*>(base + offset) + index;
    };
    for (int q = 0; q < n; ++q) {
      // flags: this rank's word in q's table, row 0, column me (barrier, flag_all_peers)
      u64(v.workspace[q], v.flags_offset, static_cast<std::size_t>(me))->store(word(me, q, 0));
      // what only q reads (a send's staging, the ring's slot for q): word at this rank's outbox[q]
      u64(v.outbox[q], v.p2p_staging_offset, static_cast<std::size_t>(q))->store(word(me, q, 1));
    }
    // a slot every peer reads: its own workspace, and the mirror where some peers read
    u64(v.workspace[me], v.staging_offset, 0)->store(word(me, -1, 2));
    if (v.mirror) u64(v.mirror, v.staging_offset, 0)->store(word(me, -1, 2));
    collx::barrier(dc.host());
    for (int p = 0; p < n; ++p) {
      if (u64(v.inbox[p], v.flags_offset, static_cast<std::size_t>(p))->load() != word(p, me, 0)) ++wrong;
      if (u64(v.workspace[p], v.p2p_staging_offset, static_cast<std::size_t>(me))->load() != word(p, me, 1)) ++wrong;
      if (u64(v.workspace[p], v.staging_offset, 0)->load() != word(p, -1, 2)) ++wrong;
      checked += 3;
    }
    paths[static_cast<std::size_t>(me)] = {};
    for (int p = 0; p < n; ++p) paths[static_cast<std::size_t>(me)].push_back(dc.path_to_peer(p));
    // Only ranks some peer cannot reach keep a mirror: here every rank (each has one such peer).
    if (v.mirror == nullptr) ++without_mirror;
    if (v.local != v.workspace[me]) ++local_elsewhere;  // device workspace first: counters, claim, then the rest
    collx::barrier(dc.host());
  });
  for (const auto& r : res) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.memory == gpu::workspace_memory::mixed);
  }
  CHECK(wrong == 0);
  CHECK(checked == 3 * n * n);
  CHECK(without_mirror == 0);
  CHECK(local_elsewhere == 0);
  // Rank 0 (GPU 0) reaches ranks 1 (GPU 1) and 3 (GPU 4) in device memory, rank 2 (GPU 5) in host.
  CHECK(paths[0][1] == gpu::peer_path::same_process);
  CHECK(paths[0][2] == gpu::peer_path::host_memory);
  CHECK(paths[0][3] == gpu::peer_path::same_process);
  CHECK(paths[1][3] == gpu::peer_path::host_memory);
  // The same exchange with every pair in host memory (asked for), and with every pair in device
  // memory (GPUs 0-3), where nobody needs a mirror.
  for (auto [devs, memory] : {std::pair{gpus, gpu::workspace_memory::host}, std::pair{std::vector<int>{0, 1, 2, 3}, gpu::workspace_memory::automatic}}) {
    wrong = 0;
    const auto again = create(devs, std::vector<gpu::workspace_memory>(4, memory), [&](gpu::device_communicator& dc) {
      const gpu::device_view& v = dc.view();
      const int me = dc.rank();
      if (v.mirror != nullptr) ++wrong;
      for (int q = 0; q < n; ++q)
        reinterpret_cast<std::atomic<std::uint64_t>*>(v.workspace[q] + v.flags_offset)[me].store(word(me, q, 0));
      collx::barrier(dc.host());
      for (int p = 0; p < n; ++p)
        if (reinterpret_cast<std::atomic<std::uint64_t>*>(v.inbox[p] + v.flags_offset)[p].load() != word(p, me, 0)) ++wrong;
      collx::barrier(dc.host());
    });
    for (const auto& r : again) CHECK(r.error.empty());
    CHECK(again[0].memory == (memory == gpu::workspace_memory::host ? gpu::workspace_memory::host : gpu::workspace_memory::device));
    CHECK(wrong == 0);
  }
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
}

TEST_CASE("device bootstrap: COLLX_ALGO's ring choices reach the device communicator", "[cuda][bootstrap]") {
  fake_machine m("hgx-h100");
  const std::size_t never = SIZE_MAX;
  const auto seen_under = [](const char* algo, std::size_t option) {
    ::setenv("COLLX_ALGO", algo, 1);  // the host communicators' default algorithm_overrides
    std::vector<std::array<std::size_t, 3>> seen(2);
    const auto res = create({0, 1}, {}, [&](gpu::device_communicator& dc) {
      seen[static_cast<std::size_t>(dc.rank())] = {dc.ring_min_bytes(collx::collective::allreduce),
                                                   dc.ring_min_bytes(collx::collective::reduce_scatter),
                                                   dc.ring_min_bytes(collx::collective::all_gather)};
    }, [&](gpu::device_options& o) { o.ring_min_bytes = option; });
    ::unsetenv("COLLX_ALGO");
    for (const auto& r : res) CHECK(r.error.empty());
    CHECK(seen[0] == seen[1]);
    return seen[0];
  };
  // ring: always; direct: never; others (tree): the figures, which never choose the ring here.
  CHECK(seen_under("allreduce:ring,all_gather:ring", 0) == std::array<std::size_t, 3>{1, never, 1});
  CHECK(seen_under("ring", 0) == std::array<std::size_t, 3>{1, 1, 1});
  CHECK(seen_under("tree", 0) == std::array<std::size_t, 3>{never, never, never});
  CHECK(seen_under("allreduce:direct", 0) == std::array<std::size_t, 3>{never, never, never});
  // The options' size, where given, wins over COLLX_ALGO (set for the host communicators).
  CHECK(seen_under("ring", 12345) == std::array<std::size_t, 3>{12345, 12345, 12345});
  CHECK(seen_under("allreduce:direct", never) == std::array<std::size_t, 3>{never, never, never});
}

TEST_CASE("device bootstrap: untagged calls take the ring where its hops beat the direct forms' reads", "[cuda][bootstrap]") {
  const auto thresholds = [](const std::vector<int>& devices, std::function<void(gpu::device_options&)> adjust = {}) {
    std::vector<std::array<std::size_t, 3>> seen(devices.size());
    const auto res = create(devices, {}, [&](gpu::device_communicator& dc) {
      seen[static_cast<std::size_t>(dc.rank())] = {dc.ring_min_bytes(collx::collective::allreduce),
                                                   dc.ring_min_bytes(collx::collective::reduce_scatter),
                                                   dc.ring_min_bytes(collx::collective::all_gather)};
    }, [&](gpu::device_options& o) {
      o.staging_bytes = 8 << 20;  // the default: 4 MiB slots
      if (adjust) adjust(o);
    });
    for (const auto& r : res) {
      INFO(r.error);
      CHECK(r.error.empty());
    }
    for (const auto& s : seen) CHECK(s == seen[0]);  // rank 0's for every rank
    return seen[0];
  };
  const std::size_t slot = 4 << 20, never = SIZE_MAX;
  const auto phases = {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather};
  // Every GPU a peer (NVSwitch), default figures: never; nor with only the direct figures given
  // (a slower machine's: the unknown hop rate is taken as theirs), nor with NVSwitch's hop rate.
  {
    fake_machine hgx("hgx-h100");
    CHECK(thresholds({0, 1, 2, 3}) == std::array<std::size_t, 3>{never, never, never});
    CHECK(thresholds({0, 1, 2, 3}, [](gpu::device_options& o) { o.cost = gpu::direct_cost{7e-6, 24e9}; }) ==
          std::array<std::size_t, 3>{never, never, never});
    CHECK(thresholds({0, 1, 2, 3}, [](gpu::device_options& o) { o.ring_hops.hop_bytes_per_second = 18 * 20.6e9; }) ==
          std::array<std::size_t, 3>{never, never, never});
  }
  // DGX-1 GPUs 0, 5, 1, 4: mixed memory, so the direct forms decide by host memory's figures; the
  // default ring (0, 2, 1, 3) keeps every hop on NVLink, so the ring's own figures count.
  fake_machine dgx("dgx1-v100");
  // Without the hops' rate: never, mixed memory or not.
  CHECK(thresholds({0, 5, 1, 4}) == std::array<std::size_t, 3>{never, never, never});
  const gpu::ring_cost nvlink{40e9, 2e-6};
  const auto with_nvlink = [&](gpu::device_options& o) { o.ring_hops = nvlink; };
  std::array<std::size_t, 3> want{};
  std::size_t i = 0;
  for (const auto phase : phases) want[i++] = gpu::ring_crossover_bytes(phase, 4, slot, gpu::host_memory_direct_cost, nvlink);
  for (const std::size_t w : want) CHECK((w > 1 && w < never));
  CHECK(thresholds({0, 5, 1, 4}, with_nvlink) == want);
  // A ring with hops between GPUs without peer access (0-5, 1-4): host memory's ring figures, no
  // faster per byte than the direct forms': never. So too where only a second channel's ring has
  // such hops.
  CHECK(thresholds({0, 5, 1, 4}, [&](gpu::device_options& o) { with_nvlink(o), o.rings = {{0, 1, 2, 3}}; }) ==
        std::array<std::size_t, 3>{never, never, never});
  CHECK(thresholds({0, 5, 1, 4}, [&](gpu::device_options& o) { with_nvlink(o), o.rings = {{0, 2, 1, 3}, {0, 1, 2, 3}}; }) ==
        std::array<std::size_t, 3>{never, never, never});
  // The option, where given, wins over the figures.
  CHECK(thresholds({0, 5, 1, 4}, [&](gpu::device_options& o) { with_nvlink(o), o.ring_min_bytes = 777; }) ==
        std::array<std::size_t, 3>{777, 777, 777});
  // Rank 0's figures decide (rank 0 is on GPU 0): the others' slower hops are not heard.
  CHECK(thresholds({0, 5, 1, 4}, [&](gpu::device_options& o) { o.ring_hops = o.device == 0 ? nvlink : gpu::ring_cost{1e9, 1e-3}; }) ==
        want);
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: ranks that all share one GPU run all-reduces one-shot at every size", "[cuda][bootstrap]") {
  fake_machine m("hgx-h100");
  const auto two_shot_min = [](const std::vector<int>& devices, std::vector<gpu::workspace_memory> memory = {},
                               std::size_t asked = 0) {
    std::vector<std::size_t> seen(devices.size(), 0);
    const auto res = create(devices, std::move(memory), [&](gpu::device_communicator& dc) {
      seen[static_cast<std::size_t>(dc.rank())] = dc.two_shot_min_bytes();
    }, [&](gpu::device_options& o) { o.two_shot_min_bytes = asked; });
    for (const auto& r : res) {
      INFO(r.error);
      REQUIRE(r.error.empty());
    }
    for (const std::size_t v : seen) CHECK(v == seen[0]);
    return seen[0];
  };
  const std::size_t model = gpu::two_shot_crossover_bytes(4, gpu::direct_cost{});
  REQUIRE(model < SIZE_MAX);
  CHECK(two_shot_min({0, 0, 0, 0}) == SIZE_MAX);  // no links between them to save
  CHECK(two_shot_min({0, 1, 2, 3}) == model);
  CHECK(two_shot_min({0, 0, 1, 1}) == model);  // two GPUs: the reads that cross still pay the link
  CHECK(two_shot_min({0, 0, 0, 0}, {}, 1) == 1);  // what the options ask holds
  // Workspaces in host memory: every read crosses PCIe, whatever GPU the ranks are on.
  CHECK(two_shot_min({0, 0, 0, 0}, std::vector<gpu::workspace_memory>(4, gpu::workspace_memory::host)) ==
        gpu::two_shot_crossover_bytes(4, gpu::host_memory_direct_cost));
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: without rings given, the ring keeps to pairs with peer access", "[cuda][bootstrap]") {
  // DGX-1 GPUs 0, 5, 1, 4 for ranks 0-3: GPU0-GPU5 and GPU1-GPU4 have no peer access, so the rank
  // order's hops 0-1 and 2-3 would go through host memory; ranks 0, 2, 1, 3 (GPUs 0, 1, 5, 4) keep
  // every hop on NVLink. Rings given in the options win, rank 0's for every rank.
  fake_machine dgx("dgx1-v100");
  for (const bool given : {false, true}) {
    std::vector<std::vector<std::vector<int>>> rings(4);
    const auto res = create({0, 5, 1, 4}, {}, [&](gpu::device_communicator& dc) {
      rings[static_cast<std::size_t>(dc.rank())] = dc.rings().lists();
    }, [&](gpu::device_options& o) {
      if (given) o.rings = o.device == 0 ? std::vector<std::vector<int>>{{0, 1, 2, 3}, {3, 2, 1, 0}} : std::vector<std::vector<int>>{{0, 3, 2, 1}};
    });
    INFO("rings given: " << given);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r << ": " << res[static_cast<std::size_t>(r)].error);
      REQUIRE(res[static_cast<std::size_t>(r)].error.empty());
      CHECK(res[static_cast<std::size_t>(r)].memory == gpu::workspace_memory::mixed);
      CHECK(rings[static_cast<std::size_t>(r)] == (given ? std::vector<std::vector<int>>{{0, 1, 2, 3}, {3, 2, 1, 0}}
                                                         : std::vector<std::vector<int>>{{0, 2, 1, 3}}));
    }
    // Each hop of the default ring is a pair whose path is not host memory.
    if (!given)
      for (int k = 0; k < 4; ++k) {
        const int a = rings[0][0][static_cast<std::size_t>(k)], b = rings[0][0][static_cast<std::size_t>((k + 1) % 4)];
        CHECK(res[static_cast<std::size_t>(a)].paths[static_cast<std::size_t>(b)] != gpu::peer_path::host_memory);
      }
  }
  // Every GPU a peer of every other: the rank order.
  fake_machine hgx("hgx-h100");
  std::vector<std::vector<int>> rings0;
  create({0, 1, 2, 3}, {}, [&](gpu::device_communicator& dc) {
    if (dc.rank() == 0) rings0 = dc.rings().lists();
  });
  CHECK(rings0 == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: rank 0 reads the machine's wiring for the figures the options leave open", "[cuda][bootstrap]") {
  fake_machine dgx("dgx1-v100");
  const fake_gpu::machine& dgx1 = *fake_gpu::find("dgx1-v100");
  const fake_gpu::sysfs_tree tree("bootstrap-dgx1", &dgx1);
  struct seen {
    std::array<std::size_t, 3> ring_min{};
    std::size_t two_shot_min = 0;
    std::vector<std::vector<int>> rings;
    std::string note;
    std::vector<std::vector<gpu::peer_path>> paths;  // per rank
  };
  const auto run = [&](const std::vector<int>& devices, std::function<void(gpu::device_options&)> adjust = {},
                       std::vector<gpu::workspace_memory> memory = {}) {
    std::vector<seen> out(devices.size());
    const auto res = create(devices, memory, [&](gpu::device_communicator& dc) {
      seen& s = out[static_cast<std::size_t>(dc.rank())];
      s.ring_min = {dc.ring_min_bytes(collx::collective::allreduce), dc.ring_min_bytes(collx::collective::reduce_scatter),
                    dc.ring_min_bytes(collx::collective::all_gather)};
      s.two_shot_min = dc.two_shot_min_bytes();
      s.rings = dc.rings().lists();
      s.note = dc.wiring_note();
    }, [&](gpu::device_options& o) {
      o.staging_bytes = gpu::default_staging_bytes;
      o.discover_wiring = true;
      o.discovery.sysfs = tree.sys();
      o.discovery.procfs = tree.proc();
      o.discovery.nvml_library = COLLX_FAKE_NVML;
      if (adjust) adjust(o);
    });
    for (std::size_t r = 0; r < res.size(); ++r) {
      INFO("rank " << r << ": " << res[r].error);
      REQUIRE(res[r].error.empty());
      CHECK(out[r].note == out[0].note);  // rank 0's account on every rank
      CHECK(out[r].rings == out[0].rings);
      CHECK(out[r].ring_min == out[0].ring_min);
      out[0].paths.push_back(res[r].paths);
    }
    INFO(out[0].note);
    return out[0];
  };
  // What collx decides from NCCL's own dump of a DGX-1 (tests/data/topologies): the same machine
  // as the fakes serve, read independently of sysfs and NVML.
  std::ifstream f(std::string(COLLX_TOPO_DATA) + "/dgx1-v100-como-nccl-topo.xml");
  std::stringstream xml;
  xml << f.rdbuf();
  const collx::topo::topology ref = collx::topo::read_nccl_topology(xml.str(), "dgx1");
  const auto from_dump = [&](const std::vector<int>& devices) {
    std::vector<int> gpus;
    for (int d : devices) gpus.push_back(ref.gpu(d));
    std::array<std::size_t, 3> want{};
    std::size_t i = 0;
    for (const auto phase : {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather})
      want[i++] = collx::topo::device_ring_min_bytes(ref, gpus, phase);
    return want;
  };
  // Every hop of every ring is a GPU pair with at least one NVLink, by the fake machine's own
  // table (CUDA device d is the table's GPU d: dgx1-v100's cuda_order is the identity).
  const auto nvlink_rings = [&](const std::vector<int>& devices, const std::vector<std::vector<int>>& rings) {
    REQUIRE(!rings.empty());
    for (const std::vector<int>& ring : rings) {
      REQUIRE(ring.size() == devices.size());
      for (std::size_t k = 0; k < ring.size(); ++k) {
        const int a = devices[static_cast<std::size_t>(ring[k])], b = devices[static_cast<std::size_t>(ring[(k + 1) % ring.size()])];
        INFO("hop GPU" << a << " - GPU" << b);
        CHECK(fake_gpu::links_between(dgx1, a, b) >= 1);
      }
    }
  };
  const std::size_t never = SIZE_MAX;
  for (const std::vector<int>& devices : {std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<int>{4, 7, 0, 3, 5, 2, 6, 1}}) {
    const seen s = run(devices);
    CHECK(s.note.rfind("read from " + tree.sys() + " and NVML in ", 0) == 0);
    CHECK(s.note.find(" ms (6 NVLinks per GPU); each rank reads its peers at ") != std::string::npos);
    CHECK(s.ring_min == from_dump(devices));
    nvlink_rings(devices, s.rings);
    CHECK(s.rings.size() == 6);  // each GPU's six NVLinks, each in a ring both ways
  }
  CHECK(run({0, 1, 2, 3, 4, 5, 6, 7}).ring_min == std::array<std::size_t, 3>{94960, 171540, 171540});
  // Rank 0's options hold: rank 1 turning it off changes nothing.
  CHECK(run({0, 1, 2, 3, 4, 5, 6, 7}, [](gpu::device_options& o) { o.discover_wiring = o.device != 1; }).ring_min ==
        std::array<std::size_t, 3>{94960, 171540, 171540});
  // A given ring is kept, and its own hops rated: GPU0-GPU2 and GPU1-GPU3 have one NVLink (20 GB/s).
  const seen given_ring = run({0, 1, 2, 3}, [](gpu::device_options& o) { o.rings = {{0, 2, 1, 3}}; });
  CHECK(given_ring.rings == std::vector<std::vector<int>>{{0, 2, 1, 3}});
  CHECK(given_ring.note.find("the given ring 0 2 1 3") != std::string::npos);
  CHECK(given_ring.note.find("hops at 20.0 GB/s") != std::string::npos);
  // Pairs the options take out of peer access: the ring keeps off them, every hop on NVLink.
  const seen denied = run({0, 1, 2, 3, 4, 5, 6, 7}, [](gpu::device_options& o) { o.no_peer_access = {{0, 4}, {1, 5}}; });
  for (const std::vector<int>& ring : denied.rings)
    for (std::size_t k = 0; k < 8; ++k) {
      const int a = ring[k], b = ring[(k + 1) % 8];
      CHECK(denied.paths[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] != gpu::peer_path::host_memory);
    }
  nvlink_rings({0, 1, 2, 3, 4, 5, 6, 7}, denied.rings);
  CHECK(denied.ring_min[0] < never);  // NVLink hops against the direct forms' host memory
  // Host memory for everything: no hop on device, so the rank order, and never the ring.
  const seen host = run({0, 1, 2, 3}, {}, std::vector<gpu::workspace_memory>(4, gpu::workspace_memory::host));
  CHECK(host.rings == std::vector<std::vector<int>>{{0, 1, 2, 3}});
  CHECK(host.ring_min == std::array<std::size_t, 3>{never, never, never});
  CHECK(host.note.find("read from") == 0);
  CHECK(host.note.find("the direct forms go by host memory's figures instead (host memory)") != std::string::npos);
  // GPUs 0-3, every pair a peer (device memory): the direct forms' read rate is the wiring's, and
  // two-shot starts where that rate puts it; a rate the options give holds instead.
  std::vector<int> quad;
  for (int d = 0; d < 4; ++d) quad.push_back(ref.gpu(d));
  const seen read_rate = run({0, 1, 2, 3});
  CHECK(read_rate.two_shot_min == gpu::two_shot_crossover_bytes(4, collx::topo::device_direct_cost(ref, quad)));
  CHECK(read_rate.two_shot_min != gpu::two_shot_crossover_bytes(4, gpu::direct_cost{}));
  const gpu::direct_cost given_cost{7e-6, 24e9};
  CHECK(run({0, 1, 2, 3}, [&](gpu::device_options& o) { o.cost = given_cost; }).two_shot_min ==
        gpu::two_shot_crossover_bytes(4, given_cost));
  const seen all_given = run({0, 1, 2, 3}, [&](gpu::device_options& o) {
    o.cost = given_cost, o.rings = {{0, 1, 2, 3}}, o.ring_hops = gpu::ring_cost{30e9, 2e-6};
  });
  CHECK(all_given.note == "device_options gives the read rate, rings and ring_hops");
  // What the options give holds: a slow hop rate means never.
  const seen given_hops = run({0, 1, 2, 3, 4, 5, 6, 7}, [](gpu::device_options& o) { o.ring_hops = gpu::ring_cost{1e9, 1e-3}; });
  CHECK(given_hops.ring_min == std::array<std::size_t, 3>{never, never, never});
  nvlink_rings({0, 1, 2, 3, 4, 5, 6, 7}, given_hops.rings);  // the rings are still the machine's
  CHECK(given_hops.rings.size() == 6);
  // Off (the option, or COLLX_GPU_WIRING), or ranks sharing a GPU, or no sysfs: collx's defaults, and why.
  const seen off = run({0, 1, 2, 3, 4, 5, 6, 7}, [](gpu::device_options& o) { o.discover_wiring = false; });
  CHECK(off.ring_min == std::array<std::size_t, 3>{never, never, never});
  CHECK(off.note == "collx's default figures: device_options::discover_wiring is off");
  ::setenv("COLLX_GPU_WIRING", "off", 1);
  const seen env_off = run({0, 1, 2, 3, 4, 5, 6, 7});
  ::unsetenv("COLLX_GPU_WIRING");
  CHECK(env_off.note == "collx's default figures: COLLX_GPU_WIRING is off");
  CHECK(env_off.ring_min == std::array<std::size_t, 3>{never, never, never});
  // A value that is neither is an error on every rank (each reads its own), naming the variable.
  ::setenv("COLLX_GPU_WIRING", "no", 1);
  const auto odd = create({0, 1, 2});
  ::unsetenv("COLLX_GPU_WIRING");
  for (const auto& r : odd) {
    CHECK(r.code == collx::errc::invalid_argument);
    CHECK(r.error.find("COLLX_GPU_WIRING='no' is not valid") != std::string::npos);
  }
  {
    fake_machine no_busid("dgx1-v100", "cudaDeviceGetPCIBusId@1");
    CHECK(run({0, 1, 2, 3}).note == "collx's default figures: rank 1's GPU has no PCI bus id");
  }
  fake_machine dgx_again("dgx1-v100");
  const seen shared = run({0, 0, 1});
  CHECK(shared.note.find("collx's default figures: ranks 0 and 1 share GPU 0000:06:00.0") == 0);
  CHECK(shared.ring_min == std::array<std::size_t, 3>{never, never, never});
  const seen elsewhere = run({0, 1}, [](gpu::device_options& o) { o.discovery.sysfs = "/nonexistent-sysfs"; });
  CHECK(elsewhere.note.find("collx's default figures: discovery failed") == 0);
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: pairs the options take out of peer access go through host memory", "[cuda][bootstrap]") {
  fake_machine m("hgx-h100");
  // Rank 1 alone names (0, 2): every rank takes the union, so all agree on mixed.
  std::vector<std::vector<gpu::peer_path>> paths(3);
  const auto res = create(
      {0, 1, 2}, {}, [&](gpu::device_communicator& dc) { paths[static_cast<std::size_t>(dc.rank())] = {dc.path_to_peer(0), dc.path_to_peer(1), dc.path_to_peer(2)}; },
      [](gpu::device_options& o) {
        if (o.device == 1) o.no_peer_access = {{0, 2}};
      });
  for (const auto& r : res) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.memory == gpu::workspace_memory::mixed);
  }
  CHECK(paths[0][2] == gpu::peer_path::host_memory);
  CHECK(paths[2][0] == gpu::peer_path::host_memory);
  CHECK(paths[0][1] == gpu::peer_path::same_process);
  // No pair left: all of it host. A rank outside the communicator: invalid_argument everywhere.
  for (const auto& r : create({0, 1}, {}, {}, [](gpu::device_options& o) { o.no_peer_access = {{1, 0}}; }))
    CHECK(r.memory == gpu::workspace_memory::host);
  for (const auto& r : create({0, 1}, {}, {}, [](gpu::device_options& o) {
         if (o.device == 0) o.no_peer_access = {{0, 2}};
       })) {
    CHECK(r.code == collx::errc::invalid_argument);
    CHECK(r.error.find("no_peer_access") != std::string::npos);
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: asked-for memory holds, or every rank fails alike", "[cuda][bootstrap]") {
  using gpu::workspace_memory;
  {
    fake_machine m("hgx-h100");  // host memory on request, where device memory would work
    for (const auto& r : create({0, 1, 2}, {workspace_memory::automatic, workspace_memory::host, workspace_memory::automatic})) {
      INFO(r.error);
      CHECK(r.memory == workspace_memory::host);
      CHECK(r.paths[r.paths[0] == gpu::peer_path::self ? 1 : 0] == gpu::peer_path::host_memory);
    }
    for (const auto& r : create({0, 1}, {workspace_memory::device, workspace_memory::host})) {
      CHECK(r.code == collx::errc::mismatch);
      CHECK(r.error.find("rank 0 asks for device memory, rank 1 for host memory") != std::string::npos);
    }
  }
  {
    fake_machine m("pcie2");
    for (const auto& r : create({0, 1}, {workspace_memory::automatic, workspace_memory::device})) {
      CHECK(r.code == collx::errc::invalid_argument);
      CHECK(r.error.find("has no peer access") != std::string::npos);
    }
  }
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
}

TEST_CASE("device bootstrap: a rank whose setup fails makes every rank throw at once", "[cuda][bootstrap]") {
  // pcie2 lists its GPUs in reverse: CUDA device 1 is GPU index 0 of the tables.
  const auto t0 = std::chrono::steady_clock::now();
  {
    fake_machine m("pcie2", "cudaHostRegister@0");
    const auto res = create({0, 1});
    CHECK(res[1].code == collx::errc::cuda);
    CHECK(res[1].error.find("cudaHostRegister") != std::string::npos);
    CHECK(res[0].error.find("rank 1 could not map the shared host workspace") != std::string::npos);
  }
  {
    fake_machine m("pcie2", "cudaHostRegister@1");  // rank 0, which creates the object
    const auto res = create({0, 1});
    CHECK(res[0].error.find("cudaHostRegister") != std::string::npos);
    CHECK(res[1].error.find("rank 0 could not create the shared host workspace") != std::string::npos);
  }
  {
    fake_machine m("hgx-h100", "cudaMalloc@2");  // the device workspace of rank 2
    const auto res = create({0, 1, 2});
    CHECK(res[2].code == collx::errc::cuda);
    CHECK(res[2].error.find("cudaMalloc") != std::string::npos);
    CHECK(res[0].error.find("rank 2 could not allocate its device workspace") != std::string::npos);
    CHECK(res[0].error.find("cudaMalloc") != std::string::npos);  // the failing rank's own reason, passed on
    CHECK(res[1].error.find("rank 2 could not allocate its device workspace") != std::string::npos);
  }
  {
    fake_machine m("nodevice");  // no GPU (or no driver): every rank says so, naming itself
    const auto res = create({0, 1});
    for (int r = 0; r < 2; ++r) {
      INFO(res[static_cast<std::size_t>(r)].error);
      CHECK(res[static_cast<std::size_t>(r)].code == collx::errc::cuda);
      CHECK(res[static_cast<std::size_t>(r)].error.find("finds no CUDA device") != std::string::npos);
    }
    INFO(res[1].error);
    CHECK(res[1].error.find("rank 1 finds no CUDA device (cudaGetDeviceCount: ") != std::string::npos);
    CHECK(res[1].error.find("no CUDA-capable device") != std::string::npos);  // the runtime's own words
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));  // no host timeout (20 s) waited out
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
}

TEST_CASE("device bootstrap: the arguments are checked before any CUDA call, as on a machine without a GPU", "[cuda][bootstrap]") {
  // They came after the device probe: without a GPU every one of these read "finds no CUDA device".
  fake_machine m("nodevice");
  struct bad_case {
    const char* name;
    int ranks;
    std::function<void(gpu::device_options&)> adjust;
    const char* expected;
  };
  const bad_case cases[] = {
      {"staging", 2, [](gpu::device_options& o) { o.staging_bytes = 1; }, "gpu: staging of 1 bytes is too small"},
      {"no_peer_access", 2, [](gpu::device_options& o) { o.no_peer_access = {{0, 5}}; },
       "no_peer_access names the pair (0, 5), outside ranks 0 to 1"},
      {"rings", 3, [](gpu::device_options& o) { o.rings = {{0, 0, 1}}; }, "gpu: the ring of channel 0"},
      {"world", gpu::max_device_world + 1, {}, "gpu: 17 ranks; a device communicator holds at most 16"},
  };
  for (const bad_case& c : cases) {
    INFO(c.name);
    const auto res = create(std::vector<int>(static_cast<std::size_t>(c.ranks), 0), {}, {}, c.adjust);
    for (const rank_result& r : res) {
      INFO(r.error);
      CHECK(r.code == collx::errc::invalid_argument);
      CHECK(r.error.find(c.expected) != std::string::npos);
    }
  }
  {  // one rank's bad staging: that rank says why, the other names it
    const auto res = create({0, 1}, {}, {}, [](gpu::device_options& o) {
      if (o.device == 1) o.staging_bytes = 100;
    });
    INFO(res[0].error);
    INFO(res[1].error);
    CHECK(res[1].error.find("staging of 100 bytes is too small") != std::string::npos);
    CHECK(res[0].code == collx::errc::invalid_argument);
    CHECK(res[0].error.find("rank 1") != std::string::npos);
    CHECK(res[0].error.find("device_options") != std::string::npos);
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: a moved-from host communicator is an error, not std::terminate", "[cuda][bootstrap]") {
  // rank() and size() are noexcept and forwarded to the host's, which throws once moved from:
  // the constructor's first call to them ended the program.
  fake_machine m("hgx-h100");
  auto comms = collx::make_thread_communicators(2);
  std::vector<std::string> error(2);
  std::vector<collx::errc> code(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      const auto ur = static_cast<std::size_t>(r);
      collx::communicator kept = std::move(comms[ur]);
      try {
        gpu::device_communicator dc(comms[ur]);
      } catch (const collx::error& e) {
        error[ur] = e.what();
        code[ur] = e.code();
      }
      comms[ur] = std::move(kept);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO(error[static_cast<std::size_t>(r)]);
    CHECK(code[static_cast<std::size_t>(r)] == collx::errc::invalid_argument);
    CHECK(error[static_cast<std::size_t>(r)].find("moved from") != std::string::npos);
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: a rank calling a host collective meanwhile is told its peer creates a device communicator", "[cuda][bootstrap]") {
  // The setup's exchanges are all_gathers of types of collx's own: the messages name the call the
  // user made, not all_gather.
  collx::env::warn_unknown_variables_once(false);  // the fake's COLLX_FAKE_* variables are not collx's
  fake_machine m("hgx-h100");
  collx::communicator_options copt;
  copt.timeout = std::chrono::seconds(20);
  auto comms = collx::make_thread_communicators(2, copt);
  std::vector<std::string> error(2);
  std::vector<collx::errc> code(2, collx::errc::internal);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      const auto ur = static_cast<std::size_t>(r);
      try {
        if (r == 0) {
          gpu::device_options o;
          o.device = 0;
          o.staging_bytes = 64 << 10;
          o.discover_wiring = false;
          gpu::device_communicator dc(comms[ur], o);
        } else {
          std::vector<std::int64_t> v(2, 1);
          collx::allreduce(comms[ur], std::span<std::int64_t>(v));
        }
      } catch (const collx::error& e) {
        error[ur] = e.what();
        code[ur] = e.code();
      }
    });
  for (auto& t : threads) t.join();
  INFO(error[0] << "\n" << error[1]);
  CHECK(code[0] == collx::errc::mismatch);
  CHECK(code[1] == collx::errc::mismatch);
  CHECK_THAT(error[1], Catch::Contains("rank 0 called collx::gpu::device_communicator's constructor"));
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device communicators make their device current; windows leave the caller's as they found it", "[cuda][bootstrap]") {
  fake_machine m("hgx-h100");
  std::vector<int> after_setup(3, -1), after_register(3, -1);
  std::vector<std::string> bytes_seen(3);
  const auto res = create({0, 1, 2}, {}, [&](gpu::device_communicator& dc) {
    const auto r = static_cast<std::size_t>(dc.rank());
    int d = -1;
    (void)cudaGetDevice(&d);
    after_setup[r] = d;  // the communicator's, for the caller's buffers and streams (each thread started on 0)
    void* buf = nullptr;
    cuda_or_throw(cudaSetDevice(dc.device()), "cudaSetDevice");
    cuda_or_throw(cudaMalloc(&buf, 4096), "cudaMalloc");
    cuda_or_throw(cudaSetDevice(7), "cudaSetDevice");  // the caller works on another GPU meanwhile
    const auto w = dc.register_window(static_cast<std::byte*>(buf) + 256, 1024 + 64 * r);
    (void)cudaGetDevice(&d);
    after_register[r] = d;
    for (int p = 0; p < dc.size(); ++p) bytes_seen[r] += std::to_string(w.bytes[static_cast<std::size_t>(p)]) + " ";
    dc.deregister_window(w);
    (void)cudaFree(buf);
  });
  for (std::size_t r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << res[r].error);
    CHECK(res[r].error.empty());
    CHECK(after_setup[r] == static_cast<int>(r));
    CHECK(after_register[r] == 7);  // not the communicator's
    CHECK(bytes_seen[r] == "1024 1088 1152 ");
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("a window one rank cannot register fails on every rank at once", "[cuda][bootstrap]") {
  // Rank 1's registration fails; it used to throw alone, leaving the others in the exchange of
  // records until their timeout (20 s here). Every thread has made GPU 0 current: the registration
  // must look on the rank's own GPU (the driver fails for GPU 1 only in the third case).
  struct failure {
    const char* name;
    const char* fake_fail;  // COLLX_FAKE_GPU_FAIL
    std::size_t offset, bytes;  // rank 1's window in its 4096-byte buffer
    bool host_pointer;          // rank 1 passes memory cudaMalloc did not give
    const char* says;           // in rank 1's error
  };
  const failure cases[] = {
      {"a host pointer", nullptr, 0, 64, true, "not in device memory"},
      {"a range past its allocation", nullptr, 4000, 128, false, "run past the end of its allocation"},
      // A negative size converted to std::size_t: its end address wraps below its start.
      {"a size that wraps past the end of memory", nullptr, 0, SIZE_MAX, false, "negative size converted"},
      {"the driver refuses on rank 1's GPU", "cuMemGetAddressRange@1", 0, 64, false, "not in device memory"},
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) {
      fake_machine m("hgx-h100", c.fake_fail);
      std::vector<std::string> whys(3);
      std::vector<collx::errc> codes(3, collx::errc::internal);
      std::vector<std::size_t> mapped(3, 99);
      const auto res = create({0, 1, 2}, {}, [&](gpu::device_communicator& dc) {
        const auto r = static_cast<std::size_t>(dc.rank());
        void* buf = nullptr;
        std::vector<std::byte> host(4096);
        cuda_or_throw(cudaSetDevice(dc.device()), "cudaSetDevice");
        cuda_or_throw(cudaMalloc(&buf, 4096), "cudaMalloc");
        cuda_or_throw(cudaSetDevice(0), "cudaSetDevice");
        std::byte* base = r == 1 && c.host_pointer ? host.data() : static_cast<std::byte*>(buf);
        try {
          const auto w = r == 1 ? dc.register_window(base + c.offset, c.bytes) : dc.register_window(base, 4096);
          dc.deregister_window(w);
        } catch (const collx::error& e) {
          whys[r] = e.what();
          codes[r] = e.code();
        }
        mapped[r] = dc.mapped_window_allocations();
        (void)cudaFree(buf);
      });
      for (std::size_t r = 0; r < 3; ++r) {
        INFO("rank " << r << ": " << whys[r] << res[r].error);
        CHECK(res[r].error.empty());
        CHECK(codes[r] == collx::errc::invalid_argument);  // the failing rank's code, on every rank
        CHECK(whys[r].find(c.says) != std::string::npos);
        if (r != 1) CHECK(whys[r].find("rank 1 could not register its window") != std::string::npos);
        CHECK(mapped[r] == 0);
      }
      CHECK(fake_cudart_live() == 0);
    }
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
}

TEST_CASE("a window belongs to the communicator that registered it, until it is deregistered", "[cuda][bootstrap]") {
  // Two device communicators of the same ranks (say a tensor- and a data-parallel group of one
  // size): each numbers its windows from 1, so only the registering communicator tells them apart.
  // Every rank deregisters the same window.
  fake_machine m("hgx-h100");
  std::vector<std::string> problems(2);
  const auto res = create({0, 1}, {}, [&](gpu::device_communicator& dc) {
    const auto r = static_cast<std::size_t>(dc.rank());
    auto problem = [&](const std::string& p) { problems[r] += p + "; "; };
    gpu::device_options o;
    o.device = dc.device();
    o.staging_bytes = 64 << 10;
    o.discover_wiring = false;
    gpu::device_communicator other(dc.host(), o);
    void* buf = nullptr;
    cuda_or_throw(cudaMalloc(&buf, 4096), "cudaMalloc");
    const gpu::window mine = dc.register_window(buf, 2048);
    const gpu::window theirs = other.register_window(static_cast<std::byte*>(buf) + 2048, 2048);
    if (mine.id != theirs.id) problem("the two first windows have different ids");  // what made them look alike
    if (!dc.owns(mine) || !other.owns(theirs)) problem("a communicator does not own its own window");
    if (dc.owns(theirs) || other.owns(mine)) problem("a communicator owns the other's window");
    if (dc.owns(gpu::window{})) problem("a communicator owns a window never registered");
    try {  // on every rank: a deregistration of a foreign window fails everywhere, and unmaps nothing
      dc.deregister_window(theirs);
      problem("deregistering the other communicator's window succeeded");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument || std::string(e.what()).find("not registered with this communicator") == std::string::npos)
        problem(std::string("unexpected error: ") + e.what());
    }
    if (!dc.owns(mine) || !other.owns(theirs)) problem("a failed deregistration took a window away");
    dc.deregister_window(mine);
    if (dc.owns(mine)) problem("a deregistered window is still owned");
    try {
      dc.deregister_window(mine);
      problem("deregistering a window twice succeeded");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument) problem(std::string("unexpected error: ") + e.what());
    }
    other.deregister_window(theirs);
    // Ranks that deregister different windows, each their communicator's: every rank is told, and
    // both windows stay (each rank would otherwise free a buffer its peer still maps).
    const gpu::window a = dc.register_window(buf, 2048);
    const gpu::window b = dc.register_window(static_cast<std::byte*>(buf) + 2048, 2048);
    try {
      dc.deregister_window(r == 0 ? a : b);
      problem("ranks that deregistered different windows were not told");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument || std::string(e.what()).find("every rank deregisters the same window") == std::string::npos)
        problem(std::string("unexpected error: ") + e.what());
    }
    if (!dc.owns(a) || !dc.owns(b)) problem("a refused deregistration took a window away");
    dc.deregister_window(a);
    dc.deregister_window(b);
    if (dc.owns(a) || dc.owns(b) || dc.mapped_window_allocations() != 0) problem("windows left after deregistration");
    (void)cudaFree(buf);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << res[r].error);
    CHECK(res[r].error.empty());
    INFO(problems[r]);
    CHECK(problems[r].empty());
  }
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("a rank registering a window while its peer deregisters one is told so, as is its peer", "[cuda][bootstrap]") {
  // register_window and deregister_window each start with an exchange of the ranks' outcomes: of
  // one type, a rank in one and its peer in the other passed it unflagged.
  fake_machine m("hgx-h100");
  std::vector<std::string> seen(2);
  std::vector<collx::errc> code(2, collx::errc::internal);
  const auto res = create({0, 1}, {}, [&](gpu::device_communicator& dc) {
    const auto r = static_cast<std::size_t>(dc.rank());
    void* buf = nullptr;
    cuda_or_throw(cudaMalloc(&buf, 4096), "cudaMalloc");
    const gpu::window a = dc.register_window(buf, 2048);
    try {
      if (r == 0) (void)dc.register_window(static_cast<std::byte*>(buf) + 2048, 2048);
      else dc.deregister_window(a);
    } catch (const collx::error& e) {
      seen[r] = e.what();
      code[r] = e.code();
    }
    (void)cudaFree(buf);
  });
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << res[r].error << " / " << seen[r]);
    CHECK(res[r].error.empty());
    CHECK(code[r] == collx::errc::mismatch);
  }
  CHECK_THAT(seen[0], Catch::Contains("rank 1 called collx::gpu::device_communicator::deregister_window"));
  CHECK_THAT(seen[1], Catch::Contains("rank 0 called collx::gpu::device_communicator::register_window"));
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: objects left by a creator that no longer runs are removed", "[cuda][bootstrap]") {
  // A child creates an object and exits without removing it, as a rank killed during setup would.
  const pid_t child = ::fork();
  if (child == 0) {
    auto m = gpu::shared_host_memory::create(4096);
    std::_Exit(m.name().empty() ? 1 : 0);  // no destructor: the name stays
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const std::string orphan = "/dev/shm/collx-gpu-" + std::to_string(child) + "-";
  auto left = [&] {
    int n = 0;
    if (DIR* d = ::opendir("/dev/shm")) {
      while (const dirent* e = ::readdir(d)) n += ("/dev/shm/" + std::string(e->d_name)).rfind(orphan, 0) == 0;
      ::closedir(d);
    }
    return n;
  };
  REQUIRE(left() == 1);
  (void)gpu::shared_host_memory::remove_orphans();  // too young: its creator might run where we cannot see it
  CHECK(left() == 1);
  CHECK(gpu::shared_host_memory::remove_orphans(std::chrono::seconds(0)) >= 1);
  CHECK(left() == 0);
  // A live creator's object stays.
  fake_machine m("pcie2");
  auto mine = gpu::shared_host_memory::create(4096);
  CHECK(host_workspace_objects() == 1);
  (void)gpu::shared_host_memory::remove_orphans(std::chrono::seconds(0));
  CHECK(host_workspace_objects() == 1);
  mine.unlink_name();
  CHECK(host_workspace_objects() == 0);
}

// As test_smoke's check for the host options: the README's `{.device = d}` leaves every other
// field at its default without a -Wextra warning (this file builds with -Werror in CI).
TEST_CASE("device options take designated initializers that leave fields out", "[cuda][bootstrap]") {
  const gpu::device_options o{.device = 1};
  CHECK(o.device == 1);
  CHECK(o.rings.empty());
  CHECK(o.no_peer_access.empty());
  CHECK(o.staging_bytes == gpu::device_options{}.staging_bytes);
}
