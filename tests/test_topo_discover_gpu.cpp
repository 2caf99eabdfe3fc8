// Live GPU discovery (collx/topo/discover.hpp: CUDA runtime and NVML through dlopen) against fake
// libraries built from tests/fakes/ that serve canned machines (fake_gpu_machines.hpp): an 8-GPU
// HGX H100 on NVSwitch, the DGX-1 V100 hybrid cube mesh (checked link for link against the NCCL
// topology dump in tests/data/topologies), and a 2-GPU PCIe box without peer access; then failing
// calls, no device, and the machine's own libcudart (no GPU or driver here).
#include <catch2/catch.hpp>

#include <collx/topo/device_cost.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/topo/routing.hpp>

#include "fakes/fake_sysfs.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#ifndef COLLX_FAKE_CUDART
#error "COLLX_FAKE_CUDART (path of the fake libcudart) must be defined by tests/CMakeLists.txt"
#endif

using namespace collx::topo;
namespace fs = std::filesystem;

namespace {

// A file of the fake trees, with its directories.
void write(const fs::path& p, const std::string& s) { fake_gpu::sysfs_tree::write(p, s); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fake sysfs/procfs: two NUMA nodes (CPUs 0-3, 4-7), Sapphire Rapids. With `gpus`, node 0 has a
// PCIe switch (upstream 0000:15:00.0) with the two A10Gs of the "pcie2" machine, 0000:17:00.0 and
// 0000:65:00.0 (bus ids need not be consistent with the tree for discovery), and node 1 a third
// A10G, 0000:b3:00.0, which the fake CUDA runtime does not list. Removed when it goes out of scope.
struct fake_sysfs {
  fake_gpu::sysfs_tree tree;
  fs::path root;
  explicit fake_sysfs(bool gpus) : tree(gpus ? "gpus" : "plain"), root(tree.root) {
    if (!gpus) return;
    const fs::path sw = root / "sys/devices/pci0000:00/0000:00:01.0/0000:15:00.0";
    write(sw / "current_link_speed", "16.0 GT/s PCIe");
    write(sw / "current_link_width", "16");
    auto gpu = [&](const fs::path& d, const std::string& node) {
      write(d / "class", "0x030200");
      write(d / "vendor", "0x10de");
      write(d / "device", "0x2237");
      write(d / "numa_node", node);
      write(d / "current_link_speed", "16.0 GT/s PCIe");
      write(d / "current_link_width", "16");
      fs::create_directory_symlink(d, root / "sys/bus/pci/devices" / d.filename());
    };
    gpu(sw / "0000:16:00.0/0000:17:00.0", "0");
    gpu(sw / "0000:16:01.0/0000:65:00.0", "0");
    gpu(root / "sys/devices/pci0000:b0/0000:b0:01.0/0000:b3:00.0", "1");
  }
  discover_options options() const {
    discover_options o;
    o.sysfs = tree.sys();
    o.procfs = tree.proc();
    o.cudart_library = COLLX_FAKE_CUDART;
    o.nvml_library = COLLX_FAKE_NVML;
    return o;
  }
};

// Sets COLLX_FAKE_GPU_MACHINE (and COLLX_FAKE_GPU_FAIL) for one scope.
struct fake_machine {
  fake_machine(const char* machine, const char* fail = nullptr) {
    if (machine) ::setenv("COLLX_FAKE_GPU_MACHINE", machine, 1);
    else ::unsetenv("COLLX_FAKE_GPU_MACHINE");
    if (fail) ::setenv("COLLX_FAKE_GPU_FAIL", fail, 1);
    else ::unsetenv("COLLX_FAKE_GPU_FAIL");
  }
  ~fake_machine() {
    ::unsetenv("COLLX_FAKE_GPU_MACHINE");
    ::unsetenv("COLLX_FAKE_GPU_FAIL");
  }
};

// Keeps a fake NVML loaded (discovery's own dlopen then gets the same copy) to ask it afterwards
// how many nvmlInit_v2 calls were left without nvmlShutdown.
struct nvml_probe {
  void* lib;
  explicit nvml_probe(const char* path) : lib(dlopen(path, RTLD_NOW | RTLD_LOCAL)) { REQUIRE(lib); }
  ~nvml_probe() { dlclose(lib); }
  int open_sessions() const {
    const auto f = reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvml_open_sessions"));
    REQUIRE(f);
    return f();
  }
};

bool has_note(const topology& t, const std::string& part) {
  for (const std::string& n : t.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string notes(const topology& t) {
  std::string s;
  for (const std::string& n : t.notes) s += "  " + n + "\n";
  return s;
}

const vertex& at(const topology& t, int v) { return t.vertices[static_cast<std::size_t>(v)]; }

// What discover_nvlinks_nvml could not read on the machine `o` discovers (CPUs, then the CUDA
// runtime's GPUs); `gaps` starts dirty, to show that the call resets it.
nvlink_gaps nvml_gaps(const discover_options& o) {
  topology t = discover_cpus(o);
  add_cuda_devices(t, query_cuda_runtime(o));
  nvlink_gaps gaps;
  gaps.gpus = 5, gaps.links = 5;
  discover_nvlinks_nvml(t, o, &gaps);
  return gaps;
}

// NVLinks between GPUs a and b (device indices) over direct GPU-GPU edges.
int nvlinks(const topology& t, int a, int b) {
  const int l = t.link_between(t.gpu(a), t.gpu(b), link_kind::nvlink);
  return l < 0 ? 0 : t.links[static_cast<std::size_t>(l)].count;
}

std::size_t count_kind(const topology& t, link_kind k) {
  std::size_t n = 0;
  for (const collx::topo::link& l : t.links) n += l.kind == k;
  return n;
}

const char* const h100_busids[8] = {"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
                                    "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"};

// The HGX H100 machine as every variant of it must come out: 8 H100s in CUDA order, each with 18
// NVLink4 links to the one NVSwitch vertex and no direct GPU-GPU NVLink; rings over all 8 at NVLink
// bandwidth (18 x 25 GB/s x NCCL's 20.6/25 per direction), every hop on NVLink, nothing host-staged.
void check_hgx_h100(const topology& t) {
  INFO(notes(t));
  REQUIRE(t.gpus().size() == 8);
  const std::vector<int> sw = t.of_kind(vertex_kind::nvswitch);
  REQUIRE(sw.size() == 1);
  for (int d = 0; d < 8; ++d) {
    const int g = t.gpu(d);
    CHECK(at(t, g).busid == h100_busids[d]);
    CHECK(at(t, g).arch == find_gpu_arch("H100"));
    const auto [links, s] = t.nvswitch_links(g);
    CHECK(links == 18);
    CHECK(s == sw[0]);
    const collx::topo::link& l = t.links[static_cast<std::size_t>(t.link_between(g, sw[0], link_kind::nvlink))];
    CHECK(l.generation == 4);
    CHECK(l.GBps == Approx(18 * 20.6));
  }
  CHECK(count_kind(t, link_kind::nvlink) == 8);  // only the 8 GPU-NVSwitch bonds
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      const path_info p = t.classify(t.gpu(a), t.gpu(b));
      CHECK(p.cell() == "NV18");
      CHECK(p.via_nvswitch);
      CHECK(t.peer_access(t.gpu(a), t.gpu(b)));
    }
  router r(t);
  const ring_set rings = search_rings(r, t.gpus());
  REQUIRE_FALSE(rings.rings.empty());
  for (const auto& ring : rings.rings) {
    CHECK(ring.size() == 8);
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const route& hop = r.between(ring[i], ring[(i + 1) % ring.size()]);
      CHECK(hop.cls == transport_class::nvlink);
      CHECK_FALSE(hop.host_staged);
    }
  }
  CHECK(rings.total_GBps == Approx(18 * 20.6));
}

}  // namespace

TEST_CASE("normalize_busid: the bus id forms of the CUDA runtime and NVML") {
  using collx::topo::detail::normalize_busid;
  CHECK(normalize_busid("0000:3B:00.0") == "0000:3b:00.0");      // cudaDeviceGetPCIBusId
  CHECK(normalize_busid("00000000:3B:00.0") == "0000:3b:00.0");  // nvmlPciInfo_t::busId
  CHECK(normalize_busid("3b:00.0") == "0000:3b:00.0");
  CHECK(normalize_busid("0001:c4:1f.7") == "0001:c4:1f.7");
  CHECK(normalize_busid("") == "");
  CHECK(normalize_busid("GPU0") == "");
  CHECK(normalize_busid("0000:3b:00.0x") == "");
  CHECK(normalize_busid("0000:3b:20.0") == "");  // device > 31
}

TEST_CASE("HGX H100 from the fake CUDA runtime and NVML: all 8 GPUs on the NVSwitch fabric") {
  const fake_sysfs fs(false);
  const fake_machine m("hgx-h100");
  const nvml_probe nvml(COLLX_FAKE_NVML);
  const topology t = discover(fs.options());
  check_hgx_h100(t);
  CHECK(t.peers.size() == 8 * 7);
  CHECK(has_note(t, "NVLinks from NVML"));
  CHECK(has_note(t, "0 GPU pair(s), 8 GPU(s) on NVSwitch"));
  CHECK(has_note(t, "GPU0 (0000:18:00.0) is not on PCI in sysfs: put under CPU0"));  // no GPU in this sysfs
  CHECK_FALSE(has_note(t, "no NVIDIA GPU on PCI"));
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("device all-reduce figures of the discovered machine: NVSwitch H100 against a PCIe pair") {
  const fake_sysfs fs(false);
  const nvml_probe nvml(COLLX_FAKE_NVML);
  {
    const fake_machine m("hgx-h100");
    CHECK(discovered_device_direct_cost(fs.options()).peer_read_bytes_per_second == Approx(18 * 20.6e9).epsilon(1e-6));
  }
  {  // two A10Gs without peer access: host-staged, a few GB/s
    const fake_machine m("pcie2");
    const fake_sysfs with_gpus(true);
    const auto pair = discovered_device_direct_cost(with_gpus.options());
    CHECK(pair.peer_read_bytes_per_second < 10e9);
    CHECK(pair.peer_read_bytes_per_second > 0.1e9);
  }
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("HGX H100 with an NVML that lacks nvmlDeviceGetNvLinkRemoteDeviceType: switches told by bus id") {
  const fake_sysfs fs(false);
  const fake_machine m("hgx-h100");
  const nvml_probe nvml(COLLX_FAKE_NVML_NOTYPE);
  discover_options o = fs.options();
  o.nvml_library = COLLX_FAKE_NVML_NOTYPE;
  const topology t = discover(o);
  check_hgx_h100(t);
  CHECK(has_note(t, "NVML has no nvmlDeviceGetNvLinkRemoteDeviceType"));
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("DGX-1 V100 from the fakes: the hybrid cube mesh of the NCCL topology dump, link for link") {
  const fake_sysfs fs(false);
  const fake_machine m("dgx1-v100");
  const nvml_probe nvml(COLLX_FAKE_NVML);
  const topology t = discover(fs.options());
  INFO(notes(t));
  const topology ref = read_nccl_topology(slurp(fs::path(COLLX_TOPO_DATA) / "dgx1-v100-como-nccl-topo.xml"), "dgx1");
  REQUIRE(t.gpus().size() == 8);
  REQUIRE(ref.gpus().size() == 8);
  int total = 0;
  for (int a = 0; a < 8; ++a) {
    CHECK(at(t, t.gpu(a)).busid == at(ref, ref.gpu(a)).busid);
    CHECK(at(t, t.gpu(a)).arch == find_gpu_arch("V100"));
    for (int b = a + 1; b < 8; ++b) {
      INFO("GPU" << a << "-GPU" << b);
      CHECK(nvlinks(t, a, b) == nvlinks(ref, a, b));
      total += nvlinks(t, a, b);
    }
  }
  CHECK(total == 24);  // 6 per GPU
  CHECK(nvlinks(t, 0, 3) == 2);
  CHECK(nvlinks(t, 0, 1) == 1);
  CHECK(nvlinks(t, 0, 5) == 0);
  CHECK(t.of_kind(vertex_kind::nvswitch).empty());
  CHECK(t.links[static_cast<std::size_t>(t.link_between(t.gpu(0), t.gpu(4), link_kind::nvlink))].generation == 2);
  // Peer access over NVLink only: GPU0 and GPU5 share no NVLink and sit on different sockets.
  CHECK(t.peer_access(t.gpu(0), t.gpu(1)));
  CHECK_FALSE(t.peer_access(t.gpu(0), t.gpu(5)));
  CHECK(t.peer(t.gpu(0), t.gpu(3))->performance_rank == 0);
  CHECK(t.peer(t.gpu(0), t.gpu(3))->native_atomics);
  CHECK(has_note(t, "GPU0 and GPU5: no peer access"));
  // The ring search reaches what it reaches on the NCCL dump: six rings of one V100 NVLink each.
  router r(t);
  const ring_set rings = search_rings(r, t.gpus());
  CHECK(rings.total_GBps == Approx(6 * 20.0));
  for (const auto& ring : rings.rings)
    for (std::size_t i = 0; i < ring.size(); ++i) CHECK(r.between(ring[i], ring[(i + 1) % ring.size()]).cls == transport_class::nvlink);
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("2-GPU PCIe box without peer access: CUDA's order and list win over sysfs, the pair is host-staged") {
  const fake_sysfs fs(true);
  const fake_machine m("pcie2");
  const nvml_probe nvml(COLLX_FAKE_NVML);
  const topology t = discover(fs.options());
  INFO(notes(t));
  REQUIRE(t.gpus().size() == 2);  // 0000:b3:00.0 is on PCI but not CUDA's
  CHECK(at(t, t.gpu(0)).busid == "0000:65:00.0");  // CUDA device 0
  CHECK(at(t, t.gpu(1)).busid == "0000:17:00.0");
  CHECK(at(t, t.gpu(0)).arch == find_gpu_arch("A10G"));
  CHECK(has_note(t, "GPU 0000:b3:00.0 on PCI is not one the CUDA runtime lists"));
  CHECK(count_kind(t, link_kind::nvlink) == 0);
  CHECK(has_note(t, "0 GPU pair(s), 0 GPU(s) on NVSwitch"));
  const int g0 = t.gpu(0), g1 = t.gpu(1);
  CHECK(t.classify(g0, g1).cell() == "PIX");  // one PCIe switch: peer access would be used ...
  CHECK_FALSE(t.peer_access(g0, g1));          // ... but the runtime says there is none
  CHECK(has_note(t, "GPU0 and GPU1: no peer access (cudaDeviceCanAccessPeer)"));
  router r(t);
  CHECK(r.between(g0, g1).host_staged);
  CHECK(r.between(g1, g0).host_staged);
  CHECK(search_rings(r, t.gpus()).total_GBps == Approx(host_staged_GBps(4, false)));
  // Without the runtime's records the same tree routes over the switch.
  topology open = t;
  open.peers.clear();
  router r2(open);
  CHECK_FALSE(r2.between(g0, g1).host_staged);
  CHECK(search_rings(r2, open.gpus()).total_GBps == Approx(pcie_lane_GBps(4) * 16 * pcie_efficiency));
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("failing NVML calls are notes, not crashes, and nvmlShutdown still runs") {
  const fake_sysfs fs(false);
  const nvml_probe nvml(COLLX_FAKE_NVML);
  SECTION("nvmlDeviceGetNvLinkState fails for GPU3 only: its links still come from the other side") {
    const fake_machine m("dgx1-v100", "nvmlDeviceGetNvLinkState@3");
    const topology t = discover(fs.options());
    INFO(notes(t));
    CHECK(has_note(t, "GPU3: nvmlDeviceGetNvLinkState failed on 6 link(s) (first link 0, error 999 (Unknown Error))"));
    const nvlink_gaps gaps = nvml_gaps(fs.options());
    CHECK(gaps.nvml);
    CHECK(gaps.gpus == 0);
    CHECK(gaps.links == 6);  // GPU3's 6 links, as the note says
    CHECK_FALSE(gaps.complete());
    CHECK(nvlinks(t, 3, 0) == 2);
    CHECK(nvlinks(t, 3, 7) == 1);
    CHECK(count_kind(t, link_kind::nvlink) == 16);
  }
  SECTION("nothing fails: every NVLink read") {
    const fake_machine m("dgx1-v100");
    const nvlink_gaps gaps = nvml_gaps(fs.options());
    CHECK(gaps.complete());
    CHECK(gaps.links == 0);
  }
  SECTION("nvmlDeviceGetNvLinkState fails everywhere: no NVLink, a note per GPU") {
    const fake_machine m("hgx-h100", "nvmlDeviceGetNvLinkState");
    const topology t = discover(fs.options());
    INFO(notes(t));
    CHECK(t.gpus().size() == 8);
    CHECK(count_kind(t, link_kind::nvlink) == 0);
    CHECK(t.of_kind(vertex_kind::nvswitch).empty());
    for (int d = 0; d < 8; ++d) CHECK(has_note(t, "GPU" + std::to_string(d) + ": nvmlDeviceGetNvLinkState failed on 18 link(s)"));
    router r(t);
    CHECK(r.between(t.gpu(0), t.gpu(1)).cls == transport_class::pcie);  // what is left: PCIe under CPU0
  }
  SECTION("nvmlDeviceGetNvLinkRemoteDeviceType fails for GPU0: its switch links are told by bus id") {
    const fake_machine m("hgx-h100", "nvmlDeviceGetNvLinkRemoteDeviceType@0");
    const topology t = discover(fs.options());
    CHECK(has_note(t, "GPU0: nvmlDeviceGetNvLinkRemoteDeviceType failed on 18 link(s)"));
    check_hgx_h100(t);
  }
  SECTION("nvmlDeviceGetNvLinkRemotePciInfo_v2 fails for GPU5 on the DGX-1") {
    const fake_machine m("dgx1-v100", "nvmlDeviceGetNvLinkRemotePciInfo_v2@5");
    const topology t = discover(fs.options());
    CHECK(has_note(t, "GPU5: nvmlDeviceGetNvLinkRemotePciInfo_v2 failed on 6 link(s)"));
    CHECK(nvlinks(t, 5, 6) == 2);  // from GPU6's side
  }
  SECTION("nvmlDeviceGetHandleByPciBusId_v2 fails for GPU2") {
    const fake_machine m("hgx-h100", "nvmlDeviceGetHandleByPciBusId_v2@2");
    const topology t = discover(fs.options());
    CHECK(has_note(t, "GPU2 (0000:3a:00.0): nvmlDeviceGetHandleByPciBusId_v2: error 999"));
    const nvlink_gaps gaps = nvml_gaps(fs.options());
    CHECK(gaps.nvml);
    CHECK(gaps.gpus == 1);
    CHECK(gaps.links == 0);
    CHECK(t.nvswitch_links(t.gpu(2)).first == 0);
    CHECK(t.nvswitch_links(t.gpu(3)).first == 18);
  }
  SECTION("nvmlInit_v2 fails") {
    const fake_machine m("hgx-h100", "nvmlInit_v2");
    const topology t = discover(fs.options());
    CHECK(has_note(t, "nvmlInit_v2: error 999"));
    const nvlink_gaps gaps = nvml_gaps(fs.options());
    CHECK_FALSE(gaps.nvml);
    CHECK(gaps.gpus == 0);
    CHECK_FALSE(gaps.complete());
    CHECK(t.gpus().size() == 8);
    CHECK(count_kind(t, link_kind::nvlink) == 0);
  }
  SECTION("NVML missing") {
    const fake_machine m("hgx-h100");
    discover_options o = fs.options();
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    const topology t = discover(o);
    CHECK(has_note(t, "NVML not available"));
    CHECK(t.gpus().size() == 8);
  }
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("failing CUDA runtime calls are notes") {
  const fake_sysfs fs(false);
  SECTION("cudaDeviceCanAccessPeer fails from GPU0: those pairs unknown, assumed open") {
    const fake_machine m("pcie2", "cudaDeviceCanAccessPeer@1");  // machine GPU 1 is CUDA device 0
    const topology t = discover(fs.options());
    INFO(notes(t));
    CHECK(has_note(t, "cudaDeviceCanAccessPeer failed for 1 device pair(s)"));
    REQUIRE(t.peers.size() == 1);  // 1 -> 0 only
    CHECK(t.peers[0].from == t.gpu(1));
    CHECK_FALSE(t.peer_access(t.gpu(0), t.gpu(1)));  // one direction denied is enough
  }
  SECTION("cudaDeviceGetPCIBusId fails for GPU2: no bus id, no NVLinks for it, still a GPU") {
    const fake_machine m("hgx-h100", "cudaDeviceGetPCIBusId@2");
    const topology t = discover(fs.options());
    INFO(notes(t));
    CHECK(has_note(t, "CUDA device 2: cudaDeviceGetPCIBusId: error 999"));
    REQUIRE(t.gpus().size() == 8);
    CHECK(at(t, t.gpu(2)).busid.empty());
    CHECK(t.nvswitch_links(t.gpu(2)).first == 0);
    CHECK(t.nvswitch_links(t.gpu(1)).first == 18);
  }
  SECTION("cudaDeviceGetAttribute fails: the model comes from sysfs or stays generic") {
    const fake_machine m("hgx-h100", "cudaDeviceGetAttribute@4");
    const topology t = discover(fs.options());
    CHECK(has_note(t, "cudaDeviceGetAttribute (compute capability) failed for CUDA device(s) 4"));
    CHECK(at(t, t.gpu(4)).arch == &unknown_gpu_arch);
    // NVML's link version (NVML_NVLINK_VERSION_4_0) gives its links H100 figures.
    CHECK(has_note(t, "GPU4: NVLink generation from nvmlDeviceGetNvLinkVersion (6): H100's link figures"));
    CHECK(t.nvswitch_links(t.gpu(4)).first == 18);
    CHECK(t.links[static_cast<std::size_t>(t.link_between(t.gpu(4), t.nvswitch_links(t.gpu(4)).second, link_kind::nvlink))].generation == 4);
  }
}

TEST_CASE("no CUDA device: a note and a CPU-only topology, even where sysfs shows GPUs") {
  const fake_sysfs fs(true);
  SECTION("cudaErrorNoDevice") {
    const fake_machine m("nodevice");
    const topology t = discover(fs.options());
    INFO(notes(t));
    CHECK(has_note(t, "no CUDA device"));
    CHECK(has_note(t, "cudaErrorNoDevice"));
    CHECK(has_note(t, "GPU 0000:17:00.0 on PCI is not one the CUDA runtime lists (it lists none): left out"));
    CHECK(t.gpus().empty());
    CHECK_FALSE(t.of_kind(vertex_kind::cpu).empty());
  }
  SECTION("cudaErrorInsufficientDriver (what the real libcudart says here)") {
    const fake_machine m(nullptr);
    const topology t = discover(fs.options());
    CHECK(has_note(t, "no CUDA device"));
    CHECK(has_note(t, "error 35 cudaErrorInsufficientDriver"));
    CHECK(t.gpus().empty());
  }
  SECTION("no CUDA runtime at all: the GPUs of sysfs") {
    const fake_machine m("pcie2");
    discover_options o = fs.options();
    o.cudart_library = "/nonexistent/libcudart.so";
    const topology t = discover(o);
    CHECK(has_note(t, "CUDA runtime not available"));
    CHECK(t.gpus().size() == 3);
    CHECK(t.peers.empty());
  }
}

TEST_CASE("the machine's own CUDA runtime, if any, on this machine") {
  // Here (no GPU, no driver) the real libcudart.so.13 returns cudaErrorInsufficientDriver; where
  // no runtime is installed there is a note; on a GPU machine there are GPUs.
  const topology t = discover();
  INFO(notes(t));
  if (has_note(t, "no CUDA device")) CHECK(t.gpus().empty());
  else CHECK((has_note(t, "CUDA runtime not available") || !t.gpus().empty()));
  const cuda_runtime_report r = query_cuda_runtime();
  if (r.loaded && r.count_error != 0) CHECK(r.devices.empty());
}

// device_wiring: what a device communicator's rank 0 reads from its ranks' PCI bus ids. Here the
// GPUs come from sysfs (a fake tree with the machine's GPUs on PCI) and NVML, never from the CUDA
// runtime (which would hide GPUs that CUDA_VISIBLE_DEVICES keeps from rank 0's process).
namespace {
discover_options tree_options(const fake_gpu::sysfs_tree& tree) {
  discover_options o;
  o.sysfs = tree.sys();
  o.procfs = tree.proc();
  o.cudart_library = COLLX_FAKE_CUDART;  // serves the same machine: device_wiring must not ask it
  o.nvml_library = COLLX_FAKE_NVML;
  return o;
}

// The ranks on GPUs gpu_of_rank of machine m (bus ids in cudaDeviceGetPCIBusId's upper case), with
// peer access as the fake CUDA runtime grants it when `with_reach`.
device_wiring_ranks ranks_on(const fake_gpu::machine& m, const std::vector<int>& gpu_of_rank, bool with_reach) {
  device_wiring_ranks out;
  for (int g : gpu_of_rank) {
    std::string id = m.gpus[g].busid;
    for (char& c : id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    out.busids.push_back(id);
    out.sm.push_back(m.gpus[g].sm);
  }
  if (with_reach)
    for (std::size_t a = 0; a < gpu_of_rank.size(); ++a) {
      std::uint64_t bits = 0;
      for (std::size_t b = 0; b < gpu_of_rank.size(); ++b)
        if (a == b || fake_gpu::peer_access(m, gpu_of_rank[a], gpu_of_rank[b])) bits |= std::uint64_t{1} << b;
      out.reach.push_back(bits);
    }
  return out;
}
}  // namespace

TEST_CASE("device_wiring: a DGX-1 read from sysfs and NVML decides as its NCCL topology dump does") {
  const fake_machine m("dgx1-v100");
  const fake_gpu::machine& dgx1 = *fake_gpu::find("dgx1-v100");
  const fake_gpu::sysfs_tree tree("dgx1", &dgx1);
  const nvml_probe nvml(COLLX_FAKE_NVML);
  const topology ref = read_nccl_topology(slurp(fs::path(COLLX_TOPO_DATA) / "dgx1-v100-como-nccl-topo.xml"), "dgx1");
  const std::size_t slot = collx::gpu::workspace_layout::for_staging(collx::gpu::default_staging_bytes).slot_bytes;
  // Rank r on GPU gpu_of_rank[r]: the identity, and an order that the ring must undo; peer access
  // as the router sees it, and as the CUDA runtime grants it.
  for (const std::vector<int>& gpu_of_rank : {std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<int>{5, 0, 7, 2, 6, 1, 4, 3}})
    for (const bool with_reach : {false, true}) {
      const device_wiring_result w = device_wiring(ranks_on(dgx1, gpu_of_rank, with_reach), tree_options(tree));
      INFO(w.note);
      REQUIRE(w.found);
      CHECK(w.note.find(" (6 NVLinks per GPU); ") != std::string::npos);
      // Six rings, every hop on NVLink by the fake machine's own link table, and no NVLink
      // direction used twice: each GPU pair's links are crossed at most as often, each way, as it
      // has links.
      REQUIRE(w.rings.size() == 6);
      std::map<std::pair<int, int>, int> crossings;
      for (const std::vector<int>& ring : w.rings) {
        REQUIRE(ring.size() == 8);
        for (std::size_t k = 0; k < 8; ++k) {
          const int a = gpu_of_rank[static_cast<std::size_t>(ring[k])], b = gpu_of_rank[static_cast<std::size_t>(ring[(k + 1) % 8])];
          INFO("hop GPU" << a << " - GPU" << b);
          CHECK(fake_gpu::links_between(dgx1, a, b) >= 1);
          CHECK(++crossings[{a, b}] <= fake_gpu::links_between(dgx1, a, b));
        }
      }
      // The figures equal those of NCCL's own dump of a DGX-1 (tests/data/topologies), GPUs in the same order.
      std::vector<int> ref_gpus;
      for (int g : gpu_of_rank) ref_gpus.push_back(ref.gpu(g));
      CHECK(w.rings == device_rings(ref, ref_gpus));
      CHECK(w.ring_hops.hop_bytes_per_second == Approx(device_ring_cost(ref, ref_gpus).hop_bytes_per_second));
      CHECK(w.ring_hops.hop_bytes_per_second == Approx(120e9));  // six channels of one V100 NVLink at NCCL's 20 GB/s
      CHECK(w.cost.peer_read_bytes_per_second == Approx(device_direct_cost(ref, ref_gpus).peer_read_bytes_per_second));
      // Without peer access across the sockets the direct forms stage through host memory (mixed).
      const std::size_t from = collx::gpu::ring_crossover_bytes_where(collx::gpu::ring_phase::all_reduce, 8, slot, false, w.cost, true, w.ring_hops);
      CHECK(from == device_ring_min_bytes(ref, ref_gpus, collx::gpu::ring_phase::all_reduce));
      CHECK(from == 94960);
    }
  // A given ring is rated as given: the rank order crosses the sockets (GPU3-GPU4, GPU7-GPU0)
  // without peer access, so its slowest hop is host-staged.
  device_wiring_ranks given = ranks_on(dgx1, {0, 1, 2, 3, 4, 5, 6, 7}, true);
  given.rings = {{0, 1, 2, 3, 4, 5, 6, 7}};
  const device_wiring_result rank_order = device_wiring(given, tree_options(tree));
  INFO(rank_order.note);
  CHECK(rank_order.found);
  CHECK(rank_order.rings == given.rings);
  CHECK(rank_order.ring_hops.hop_bytes_per_second < 12e9);
  CHECK(rank_order.note.find("the given ring 0 1 2 3 4 5 6 7 with hops at ") != std::string::npos);
  // Two given rings, the second the first reversed: each NVLink hop both ways, twice the one ring.
  device_wiring_ranks two = ranks_on(dgx1, {0, 1, 2, 3}, true);
  two.rings = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  const device_wiring_result both_ways = device_wiring(two, tree_options(tree));
  INFO(both_ways.note);
  two.rings.pop_back();
  const device_wiring_result one_way = device_wiring(two, tree_options(tree));
  CHECK(both_ways.rings.size() == 2);
  CHECK(both_ways.ring_hops.hop_bytes_per_second == Approx(2 * one_way.ring_hops.hop_bytes_per_second));
  CHECK(both_ways.note.find("the given 2 rings (0 1 2 3 / 3 2 1 0) with hops at ") != std::string::npos);
  CHECK(both_ways.note.find(" GB/s in all") != std::string::npos);
  CHECK(nvml.open_sessions() == 0);
}

TEST_CASE("device_wiring: on NVSwitch the figures are collx's defaults and the rank order stays") {
  const fake_machine m("hgx-h100");
  const fake_gpu::machine& hgx = *fake_gpu::find("hgx-h100");
  const fake_gpu::sysfs_tree tree("hgx", &hgx);
  for (const bool with_reach : {false, true}) {
    const device_wiring_result w = device_wiring(ranks_on(hgx, {0, 1, 2, 3}, with_reach), tree_options(tree));
    INFO(w.note);
    REQUIRE(w.found);
    CHECK(w.note.find(" (18 NVLinks per GPU); ") != std::string::npos);
    CHECK(w.cost.peer_read_bytes_per_second == Approx(collx::gpu::direct_cost{}.peer_read_bytes_per_second));
    CHECK(w.rings == std::vector<std::vector<int>>{{0, 1, 2, 3}});  // every ring alike: the rank order's bits
    const std::size_t slot = collx::gpu::workspace_layout::for_staging(collx::gpu::default_staging_bytes).slot_bytes;
    for (auto phase : {collx::gpu::ring_phase::all_reduce, collx::gpu::ring_phase::reduce_scatter, collx::gpu::ring_phase::all_gather})
      CHECK(collx::gpu::ring_crossover_bytes_where(phase, 4, slot, true, w.cost, true, w.ring_hops) == SIZE_MAX);
  }
}

TEST_CASE("device_wiring: GPUs the CUDA runtime does not list are read from sysfs all the same") {
  // The pcie2 tree has a third A10G, 0000:b3:00.0, that the fake CUDA runtime (given as
  // cudart_library) does not list, as CUDA_VISIBLE_DEVICES would hide another rank's GPU. (The
  // fake NVML does not know it either, where a real one would: NVML is left out here.)
  const fake_sysfs fs(true);
  const fake_machine m("pcie2");
  device_wiring_ranks ranks;
  ranks.busids = {"0000:17:00.0", "0000:b3:00.0"};
  ranks.reach = {0b01, 0b10};  // no peer access
  discover_options o = fs.options();
  o.nvml = false;
  const device_wiring_result w = device_wiring(ranks, o);
  INFO(w.note);
  CHECK(w.found);
  CHECK(w.note.find("(no NVLink)") != std::string::npos);
  CHECK(w.cost.peer_read_bytes_per_second < 12e9);  // host-staged across the sockets
}

TEST_CASE("device_wiring: what it cannot read leaves the given figures, with the reason") {
  const fake_machine m("dgx1-v100");
  const fake_gpu::machine& dgx1 = *fake_gpu::find("dgx1-v100");
  const fake_gpu::sysfs_tree tree("dgx1-gaps", &dgx1);
  const collx::gpu::direct_cost base{3e-6, 1e9};
  const collx::gpu::ring_cost base_ring{2e9, 5e-6};
  const auto check_not_found = [&](const device_wiring_ranks& ranks, const discover_options& o, const std::string& why) {
    const device_wiring_result w = device_wiring(ranks, o, base, base_ring);
    INFO(w.note);
    CHECK_FALSE(w.found);
    CHECK(w.note.find(why) != std::string::npos);
    CHECK(w.cost.peer_read_bytes_per_second == base.peer_read_bytes_per_second);
    CHECK(w.cost.call_seconds == base.call_seconds);
    CHECK(w.ring_hops.hop_bytes_per_second == base_ring.hop_bytes_per_second);
    CHECK(w.rings.empty());
  };
  const discover_options o = tree_options(tree);
  const auto ids = [](std::vector<std::string> busids) {
    device_wiring_ranks r;
    r.busids = std::move(busids);
    return r;
  };
  check_not_found(ids({"0000:06:00.0"}), o, "one rank");
  check_not_found(ids({"0000:06:00.0", "GPU1"}), o, "rank 1's GPU has no PCI bus id");
  check_not_found(ids({"0000:06:00.0", "0000:07:00.0", "00000000:06:00.0"}), o, "ranks 0 and 2 share GPU 0000:06:00.0");
  check_not_found(ids({"0000:06:00.0", "0000:65:00.0"}), o, "rank 1's GPU 0000:65:00.0 is not on the PCI tree of " + o.sysfs);
  device_wiring_ranks short_reach = ids({"0000:06:00.0", "0000:07:00.0"});
  short_reach.reach = {3};
  check_not_found(short_reach, o, "one entry per rank");
  device_wiring_ranks bad_ring = ids({"0000:06:00.0", "0000:07:00.0"});
  bad_ring.rings = {{0, 1}, {0, 0}};
  check_not_found(bad_ring, o, "not a permutation");
  bad_ring.rings.assign(collx::gpu::max_device_channels + 1, {0, 1});
  check_not_found(bad_ring, o, "more than 8 rings");
  discover_options gone = o;
  gone.sysfs = (tree.root / "no-such-sys").string();
  check_not_found(ids({"0000:06:00.0", "0000:07:00.0"}), gone, "discovery failed");
  // Without NVML the NVLinks would be missing: not a machine to decide by.
  discover_options no_nvml = o;
  no_nvml.nvml_library = "libcollx-no-such-nvml.so";
  check_not_found(ids({"0000:06:00.0", "0000:07:00.0"}), no_nvml, "NVLinks not read: NVML not available");
  {
    const fake_machine failing("dgx1-v100", "nvmlDeviceGetNvLinkState@1");
    check_not_found(ids({"0000:06:00.0", "0000:07:00.0"}), o, "NVLinks not read");
  }
  const fake_machine again("dgx1-v100");  // `failing` unset the machine when it went
  // A GPU whose PCI device id collx does not know: not found, unless its compute capability is.
  fake_gpu::sysfs_tree::write(tree.root / "sys/bus/pci/devices/0000:07:00.0/device", "0x9999");
  check_not_found(ids({"0000:06:00.0", "0000:07:00.0"}), o, "rank 1's GPU 0000:07:00.0 is of a model collx has no figures for");
  device_wiring_ranks with_sm = ids({"0000:06:00.0", "0000:07:00.0"});
  with_sm.sm = {70, 70};
  const device_wiring_result w = device_wiring(with_sm, o, base, base_ring);
  INFO(w.note);
  CHECK(w.found);
  CHECK(w.cost.call_seconds == base.call_seconds);  // collx's own cost, not the wiring's
  CHECK(w.ring_hops.step_seconds == base_ring.step_seconds);
  const topology ref = read_nccl_topology(slurp(fs::path(COLLX_TOPO_DATA) / "dgx1-v100-como-nccl-topo.xml"), "dgx1");
  CHECK(w.ring_hops.hop_bytes_per_second == Approx(device_ring_cost(ref, {ref.gpu(0), ref.gpu(1)}).hop_bytes_per_second));
}
