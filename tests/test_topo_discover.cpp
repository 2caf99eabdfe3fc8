// Discovery from sysfs, on a fake sysfs tree written here (so the result is known) and on the live
// machine (which must at least give a CPU-only topology without throwing).
#include <catch2/catch.hpp>

#include <collx/topo/cost_model.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/host_cost.hpp>
#include <collx/topo/placement.hpp>
#include <collx/transport/threads.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace collx::topo;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << s << "\n";
}

// Two NUMA nodes (CPUs 0-3 on package 0, 4-7 on package 1); on node 0, root port 0000:00:01.0 leads
// to a PCIe switch (upstream 0000:01:00.0, downstream 0000:02:00.0 and 0000:02:01.0) with GPU
// 0000:03:00.0 and NIC 0000:04:00.0 (mlx5_0, 200 Gb/s); on node 1, GPU 0000:81:00.0 sits on its own
// root port 0000:80:01.0.
fs::path fake_sysfs() {
  const fs::path root = fs::temp_directory_path() / ("collx-fake-sysfs-" + std::to_string(::getpid()));
  fs::remove_all(root);
  write(root / "sys/devices/system/node/node0/cpulist", "0-3");
  write(root / "sys/devices/system/node/node1/cpulist", "4-7");
  for (int c = 0; c < 8; ++c) {
    const fs::path cpu = root / "sys/devices/system/cpu" / ("cpu" + std::to_string(c));
    write(cpu / "topology/physical_package_id", c < 4 ? "0" : "1");
    fs::create_directories(cpu / (c < 4 ? "node0" : "node1"));  // as sysfs links each CPU to its node
  }
  write(root / "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n");
  const fs::path pci0 = root / "sys/devices/pci0000:00/0000:00:01.0";
  const fs::path sw_up = pci0 / "0000:01:00.0";
  const fs::path gpu0 = sw_up / "0000:02:00.0/0000:03:00.0";
  const fs::path nic0 = sw_up / "0000:02:01.0/0000:04:00.0";
  const fs::path gpu1 = root / "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
  auto device = [&](const fs::path& d, const std::string& cls, const std::string& vendor, const std::string& dev, const std::string& node) {
    write(d / "class", cls);
    write(d / "vendor", vendor);
    write(d / "device", dev);
    write(d / "numa_node", node);
    write(d / "current_link_speed", "16.0 GT/s PCIe");
    write(d / "current_link_width", "16");
    fs::create_directories(root / "sys/bus/pci/devices");
    fs::create_directory_symlink(d, root / "sys/bus/pci/devices" / d.filename());
  };
  write(sw_up / "current_link_speed", "16.0 GT/s PCIe");
  write(sw_up / "current_link_width", "16");
  device(gpu0, "0x030200", "0x10de", "0x20b2", "0");
  device(nic0, "0x020700", "0x15b3", "0x101b", "0");
  write(nic0 / "infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)");
  device(gpu1, "0x030200", "0x10de", "0x20b2", "1");
  return root;
}

}  // namespace

TEST_CASE("discovery on a fake sysfs: NUMA nodes, sockets, GPUs behind switches, NIC speed") {
  const fs::path root = fake_sysfs();
  discover_options o;
  o.sysfs = (root / "sys").string();
  o.procfs = (root / "proc").string();
  o.cuda = false;  // GPUs from this fake sysfs alone (the machine's CUDA runtime would say it has none)
  o.nvml = false;
  const topology t = discover(o);
  const std::vector<int> cpus = t.of_kind(vertex_kind::cpu);
  REQUIRE(cpus.size() == 2);
  CHECK(t.vertices[static_cast<std::size_t>(cpus[1])].cores == std::vector<int>{4, 5, 6, 7});
  CHECK(t.vertices[static_cast<std::size_t>(cpus[1])].socket == 1);
  CHECK(t.links[static_cast<std::size_t>(t.link_between(cpus[0], cpus[1], link_kind::smp))].GBps == Approx(22.0));  // Sapphire Rapids
  REQUIRE(t.gpus().size() == 2);
  REQUIRE(t.nics().size() == 1);
  CHECK(t.vertices[static_cast<std::size_t>(t.gpu(0))].arch == find_gpu_arch("A100"));
  CHECK(t.classify(t.gpu(0), t.nics()[0]).cell() == "PIX");  // one switch, its ports folded in
  CHECK(t.classify(t.gpu(0), t.gpu(1)).cell() == "SYS");
  CHECK(t.vertices[static_cast<std::size_t>(t.nics()[0])].device == "mlx5_0");
  CHECK(t.vertices[static_cast<std::size_t>(t.nics()[0])].nic_Gbps == Approx(200.0));
  CHECK(t.links[static_cast<std::size_t>(t.parent_link(t.gpu(0)))].generation == 4);
  // Placement follows the GPUs.
  CHECK(numa_node_for_local_rank(t, 0, 2) == 0);
  CHECK(numa_node_for_local_rank(t, 1, 2) == 1);
  // Without PCI scanning it is CPU-only, and 4 ranks split 2 + 2.
  o.pci = false;
  const topology c = discover(o);
  CHECK(c.gpus().empty());
  CHECK(numa_node_for_local_rank(c, 1, 4) == 0);
  CHECK(numa_node_for_local_rank(c, 2, 4) == 1);
  fs::remove_all(root);
}

TEST_CASE("discovery: a sysfs without CPU information is an error; NVML absent is a note") {
  discover_options o;
  o.sysfs = "/nonexistent-collx-sysfs";
  CHECK_THROWS_AS(discover_cpus(o), collx::error);
  topology t;
  const int added = discover_nvlinks_nvml(t);  // no GPU here: NVML absent (or nothing to link)
  CHECK(added == 0);
}

TEST_CASE("discovery on this machine gives at least its CPUs") {
  const topology t = discover();
  CHECK_FALSE(t.of_kind(vertex_kind::cpu).empty());
  for (int c : t.of_kind(vertex_kind::cpu)) CHECK_FALSE(t.vertices[static_cast<std::size_t>(c)].cores.empty());
  CHECK(numa_node_for_local_rank(t, 0, 1) >= 0);
}

// hwloc's view of the CPUs (COLLX_TOPO_HWLOC=ON, as .ci/run's ASan pass builds) must be sysfs's:
// collx-topo --hwloc and a program using discover_cpus_hwloc then pin and place ranks alike.
TEST_CASE("discovery: hwloc and sysfs agree on NUMA nodes, their CPUs, sockets and CPU model") {
#if defined(COLLX_TOPO_HAVE_HWLOC)
  const topology a = discover_cpus(), b = discover_cpus_hwloc();
  const std::vector<int> ca = a.of_kind(vertex_kind::cpu), cb = b.of_kind(vertex_kind::cpu);
  REQUIRE(ca.size() == cb.size());
  REQUIRE_FALSE(ca.empty());
  for (std::size_t i = 0; i < ca.size(); ++i) {
    // By node number: hwloc orders nodes by locality (CPU-less nodes, e.g. CXL or HBM, move).
    const vertex& x = a.vertices[static_cast<std::size_t>(ca[i])];
    const vertex* found = nullptr;
    for (int c : cb)
      if (b.vertices[static_cast<std::size_t>(c)].index == x.index) found = &b.vertices[static_cast<std::size_t>(c)];
    INFO("sysfs NUMA node " << x.index);
    REQUIRE(found != nullptr);
    const vertex& y = *found;
    INFO("NUMA node " << x.index << ": sysfs CPUs " << x.cpu_affinity << ", hwloc CPUs " << y.cpu_affinity);
    CHECK(x.index == y.index);
    CHECK(x.cores == y.cores);
    CHECK(x.socket == y.socket);
    CHECK(x.cpu_vendor == y.cpu_vendor);
    CHECK(x.cpu_family == y.cpu_family);
    CHECK(x.cpu_model == y.cpu_model);
  }
  REQUIRE(a.links.size() == b.links.size());
  for (std::size_t i = 0; i < a.links.size(); ++i) CHECK(a.links[i].GBps == b.links[i].GBps);
#else
  WARN("SKIPPED: built without COLLX_TOPO_HWLOC (hwloc discovery is compiled and compared in .ci/run's ASan pass)");
#endif
}

// algo::automatic's default on host ranks (topo::host_cost_model, what the threads and shm
// transports report as transport::costs) follows the machine: the inter-CPU link's bandwidth
// when the ranks' CPUs span NUMA nodes, as topo::make_selector decides for the same topology.
TEST_CASE("host ranks: automatic's figures follow the NUMA nodes the ranks span and the CPU model") {
  const fs::path root = fake_sysfs();  // two nodes, CPUs 0-3 and 4-7; cpuinfo: Sapphire Rapids
  const std::string sys = (root / "sys").string(), sapphire = (root / "proc").string();
  const std::string broadwell = (root / "proc-broadwell").string();
  write(fs::path(broadwell) / "cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 79\n");
  const auto cpus = [](std::initializer_list<int> list) {
    collx::detail::cpu_bits b;
    for (int c : list) b.set(c);
    return b;
  };
  const collx::cost_model plain{};
  // One node: nothing changes, whatever the CPU.
  CHECK(host_cost_model(cpus({0, 1, 2}), sys, broadwell).bandwidth_Bps == plain.bandwidth_Bps);
  CHECK(host_cost_model(cpus({5, 6}), sys, broadwell).bandwidth_Bps == plain.bandwidth_Bps);
  // Both nodes: the link's 6 GB/s on Broadwell; Sapphire Rapids' 22 GB/s is above cost_model's 8.
  CHECK(host_cost_model(cpus({0, 5}), sys, broadwell).bandwidth_Bps == Approx(6e9));
  CHECK(host_cost_model(cpus({0, 5}), sys, sapphire).bandwidth_Bps == plain.bandwidth_Bps);
  CHECK(host_cost_model(cpus({0, 5}), sys, broadwell).latency_s == plain.latency_s);
  // Arm's cpuinfo has no vendor_id: its "CPU implementer" makes it ARM (NCCL's 6 GB/s).
  const std::string arm = (root / "proc-arm").string();
  write(fs::path(arm) / "cpuinfo", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n");
  CHECK(read_cpu_identity(arm).vendor == "ARM");
  CHECK(host_cost_model(cpus({0, 5}), sys, arm).bandwidth_Bps == Approx(6e9));

  // The same answers as the selector made from the discovered topology (ranks in blocks over both
  // nodes), and different from the one-node defaults somewhere.
  discover_options o;
  o.sysfs = sys, o.procfs = broadwell;
  const auto selector = make_selector(discover_cpus(o));
  const collx::cost_model spanning = host_cost_model(cpus({0, 5}), sys, broadwell);
  int differ = 0;
  for (collx::collective c : {collx::collective::allreduce, collx::collective::reduce_scatter, collx::collective::all_gather,
                              collx::collective::broadcast, collx::collective::reduce, collx::collective::all_to_all})
    for (int n = 2; n <= 8; ++n)
      for (std::size_t b = 8; b <= (std::size_t{1} << 30); b *= 2) {
        const collx::selection_query q{c, n, b, true};
        INFO("collective " << static_cast<int>(c) << ", " << n << " ranks, " << b << " B");
        CHECK(spanning.choose(q) == selector(q));
        differ += spanning.choose(q) != plain.choose(q);
      }
  CHECK(differ > 0);
  fs::remove_all(root);
}

namespace {
// A transport that moves nothing and reports given figures: what communicator::select does with them.
class figures_only_transport final : public collx::transport {
 public:
  figures_only_transport(int size, collx::cost_model costs) : size_(size), costs_(costs) {}
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return size_; }
  std::string_view name() const noexcept override { return "figures-only"; }
  void post_send(int, const void*, std::size_t, std::size_t, const collx::call_signature&) override { unused(); }
  void recv(int, std::size_t, std::size_t, const collx::call_signature&, collx::consumer_ref) override { unused(); }
  void wait_sends() override {}
  void check() override {}
  void fail(collx::errc, const std::string&) noexcept override {}
  void set_timeout(std::chrono::milliseconds) noexcept override {}
  collx::cost_model costs() const noexcept override { return costs_; }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("figures_only_transport moves no data"); }
  int size_;
  collx::cost_model costs_;
};
}  // namespace

TEST_CASE("host ranks: a communicator's automatic asks its transport's figures") {
  // The threads transport reports host_cost_model of the process's CPUs.
  auto comms = collx::make_thread_communicators(3);
  const collx::cost_model want = host_cost_model(collx::detail::allowed_cpus());
  CHECK(comms[0].get_transport().costs().bandwidth_Bps == want.bandwidth_Bps);
  CHECK(comms[0].get_transport().costs().latency_s == want.latency_s);
  // select() follows the transport's figures, not cost_model's defaults: a slow link (0.1 GB/s)
  // turns large all-reduces from one choice to another somewhere in the sweep.
  const collx::cost_model slow = collx::cost_model{}.across_numa_link(0.1);
  collx::communicator c(std::make_shared<figures_only_transport>(6, slow));
  int differ = 0;
  for (std::size_t b = 8; b <= (std::size_t{1} << 30); b *= 2) {
    const collx::selection_query q{collx::collective::allreduce, 6, b, true};
    CHECK(c.select(q) == slow.choose(q));
    differ += slow.choose(q) != collx::cost_model{}.choose(q);
  }
  CHECK(differ > 0);
}
