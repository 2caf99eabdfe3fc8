// How a device communicator is set up (collx/cuda/device_communicator.hpp), without a GPU: this
// program links tests/fakes/fake_cudart.cpp in place of libcudart, so the canned machines of
// fake_gpu_machines.hpp decide peer access. Ranks are threads. Checked: the ranks agree on the
// workspace memory from the wiring (device memory on an NVSwitch machine and between NVLink
// neighbours of a DGX-1, shared host memory between GPUs without peer access, host when asked);
// with host memory every rank's workspace lies in one shared-memory object that each rank maps
// itself and whose name is gone once the communicator exists; requests that cannot be met fail on
// every rank; a rank whose setup fails makes every rank throw at once; nothing stays allocated;
// ring calls keep their slots in device memory where every ring hop has peer access.
// Kernels cannot run here: the collectives themselves are tested on a GPU (tests/cuda).
#include <catch2/catch.hpp>

#include <collx/cuda/device_communicator.hpp>
#include <collx/transport/threads.hpp>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <functional>
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
    CHECK(r.memory == gpu::workspace_memory::host);
  }
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
}

TEST_CASE("device bootstrap: without peer access the workspaces share one host memory object", "[cuda][bootstrap]") {
  fake_machine m("pcie2");
  std::atomic<int> objects_while_alive{-1};
  const gpu::workspace_layout lay = gpu::workspace_layout::for_staging(64 << 10);
  const auto res = create({0, 1}, {}, [&](gpu::device_communicator& dc) {
    const gpu::device_view& v = dc.view();
    // Each rank mapped the object itself; the regions follow each other, a page-rounded workspace apart.
    const std::size_t region = gpu::workspace_layout::round_up(lay.total_bytes, 4096);
    CHECK(static_cast<std::size_t>(v.workspace[1] - v.workspace[0]) == region);
    CHECK(v.local != nullptr);
    CHECK(v.local != v.workspace[dc.rank()]);  // counters and claim stay in the rank's device memory
    // What rank 0 writes at rank 1's flags through its mapping, rank 1 reads through its own.
    auto* flag = reinterpret_cast<std::atomic<std::uint64_t>*>(v.workspace[1] + v.flags_offset);
    if (dc.rank() == 0) flag->store(0x5eed, std::memory_order_release);
    collx::barrier(dc.host());
    if (dc.rank() == 1) CHECK(flag->load(std::memory_order_acquire) == 0x5eed);
    if (dc.rank() == 0) objects_while_alive = host_workspace_objects();
    collx::barrier(dc.host());
  });
  for (const auto& r : res) {
    INFO(r.error);
    REQUIRE(r.error.empty());
    CHECK(r.memory == gpu::workspace_memory::host);
    CHECK(r.paths[0] == (&r == &res[0] ? gpu::peer_path::self : gpu::peer_path::host_memory));
  }
  CHECK(objects_while_alive == 0);  // the name went once every rank had mapped it
  CHECK(fake_cudart_live() == 0);
}

TEST_CASE("device bootstrap: ring calls stage in device memory where every ring hop has peer access", "[cuda][bootstrap]") {
  // DGX-1 GPUs 0, 1, 5, 4: the ring 0 -> 1 -> 5 -> 4 -> 0 runs over NVLink, but 0-5 and 1-4 have
  // no peer access, so the workspaces go to host memory while the ring's slots stay on the GPUs.
  fake_machine dgx("dgx1-v100");
  struct lanes {
    std::byte* own = nullptr;
    std::byte* prev = nullptr;
    gpu::workspace_memory ring{};
  };
  const gpu::workspace_layout lay = gpu::workspace_layout::for_staging(64 << 10);
  auto run = [&](std::vector<int> order, bool allowed) {
    std::vector<lanes> seen(4);
    const auto res = create(
        {0, 1, 5, 4}, {},
        [&](gpu::device_communicator& dc) {
          const gpu::device_view& v = dc.view();
          seen[static_cast<std::size_t>(dc.rank())] = {v.ring_own_staging, v.ring_prev_staging, dc.ring_staging_memory()};
          if (v.ring_own_staging) CHECK(v.ring_own_staging == v.local + lay.staging_offset);  // its own device workspace
        },
        [&](gpu::device_options& o) {
          o.ring_order = order;
          o.ring_device_staging = allowed;
        });
    for (const auto& r : res) {
      INFO(r.error);
      REQUIRE(r.error.empty());
      CHECK(r.memory == gpu::workspace_memory::host);
    }
    return seen;
  };
  const auto on = run({}, true);
  for (int r = 0; r < 4; ++r) {
    const lanes& l = on[static_cast<std::size_t>(r)];
    CHECK(l.ring == gpu::workspace_memory::device);
    REQUIRE(l.own != nullptr);
    CHECK(l.prev == on[static_cast<std::size_t>((r + 3) % 4)].own);  // the predecessor's slots, as it sees them
  }
  // A ring with a hop without peer access (GPU 0 -> GPU 5), or the option off: the host slots.
  for (const auto& seen : {run({0, 2, 1, 3}, true), run({}, false)})
    for (const lanes& l : seen) {
      CHECK(l.ring == gpu::workspace_memory::host);
      CHECK(l.own == nullptr);
      CHECK(l.prev == nullptr);
    }
  // Device workspaces: the ring uses their slots, no extra staging.
  for (const auto& r : create({0, 1, 2, 3}, {}, [&](gpu::device_communicator& dc) {
         CHECK(dc.ring_staging_memory() == gpu::workspace_memory::device);
         CHECK(dc.view().ring_own_staging == nullptr);
       }))
    CHECK(r.error.empty());
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
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
    CHECK(res[1].error.find("rank 2 could not allocate its device workspace") != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));  // no host timeout (20 s) waited out
  CHECK(fake_cudart_live() == 0);
  CHECK(host_workspace_objects() == 0);
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
