/// @file topo/discover.hpp
/// Discovery of the machine collx runs on (Linux).
///
/// - CPUs: NUMA nodes, their CPUs and sockets from sysfs (/sys/devices/system/node,
///   /sys/devices/system/cpu), the CPU vendor and model from /proc/cpuinfo. Always available; with
///   no GPU this is the whole topology (what place_local_rank() needs).
/// - PCIe: GPUs (NVIDIA display/3D controllers) and NICs from /sys/bus/pci/devices, with their
///   bridges (PCIe switches, root ports) from the device paths, link speed and width, NUMA node,
///   and NIC port speeds from /sys/class/net and /sys/class/infiniband. Needs no driver library.
/// - NVLink: from NVML, loaded with dlopen("libnvidia-ml.so.1") at run time, so nothing links
///   against it. UNTESTED STUB: it compiles and runs where NVML is absent (it adds a note and
///   returns), but it has never run against a real NVML; treat its output with care.
/// - hwloc (optional, Debian libhwloc-dev): defining COLLX_TOPO_USE_HWLOC (CMake option
///   COLLX_TOPO_HWLOC, which also links hwloc) adds discover_cpus_hwloc(). The core stays
///   header-only: nothing here needs linking unless that macro is defined.
///
/// Every function takes the sysfs/procfs roots as parameters so tests can point them at a fake tree.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <collx/topo/topology.hpp>

#if defined(__linux__) && __has_include(<dlfcn.h>)
#include <dlfcn.h>
#define COLLX_TOPO_HAVE_DLOPEN 1
#endif

#if defined(COLLX_TOPO_USE_HWLOC) && __has_include(<hwloc.h>)
#include <hwloc.h>
#define COLLX_TOPO_HAVE_HWLOC 1
#endif

namespace collx {
inline namespace v0 {
namespace topo {

/// Where discovery looks.
struct discover_options {
  std::string sysfs = "/sys";     ///< sysfs root
  std::string procfs = "/proc";   ///< procfs root (cpuinfo)
  bool pci = true;                ///< look for GPUs and NICs on PCI
  bool nvml = true;               ///< ask NVML for NVLinks (when it can be loaded)
};

namespace detail {

inline std::string read_first_line(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string s;
  if (f) std::getline(f, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

inline bool looks_like_busid(const std::string& s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == 4 || i == 7 || i == 10) continue;
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

}  // namespace detail

/// The CPU part of the machine from sysfs: one `cpu` vertex per NUMA node (index = node id, cores =
/// its CPUs, cpu_affinity = its cpulist, socket = the physical package of its first CPU), vendor and
/// model from cpuinfo, SMP links between every pair of nodes (NCCL's figure for the CPU model). A
/// kernel without NUMA directories gives one node with every online CPU.
/// @throws collx::error(system) if sysfs has neither node nor cpu information.
inline topology discover_cpus(const discover_options& o = {}) {
  namespace fs = std::filesystem;
  topology t;
  t.source = "sysfs (" + o.sysfs + ")";
  std::string vendor;
  int family = 0, model = 0;
  {
    std::ifstream f(fs::path(o.procfs) / "cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      std::string val = line.substr(colon + 1);
      while (!val.empty() && val.front() == ' ') val.erase(val.begin());
      if (key == "vendor_id" && vendor.empty()) vendor = val;
      else if (key == "cpu family" && !family) family = std::atoi(val.c_str());
      else if (key == "model" && !model) model = std::atoi(val.c_str());
    }
  }
  const fs::path node_dir = fs::path(o.sysfs) / "devices/system/node";
  const fs::path cpu_dir = fs::path(o.sysfs) / "devices/system/cpu";
  std::map<int, std::string> nodes;
  std::error_code ec;
  if (fs::is_directory(node_dir, ec)) {
    for (const auto& e : fs::directory_iterator(node_dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("node", 0) != 0 || n.size() < 5 || !std::all_of(n.begin() + 4, n.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; })) continue;
      nodes[std::atoi(n.c_str() + 4)] = detail::read_first_line(e.path() / "cpulist");
    }
  }
  if (nodes.empty()) {
    const std::string online = detail::read_first_line(cpu_dir / "online");
    if (online.empty()) COLLX_THROW(errc::system, "discover_cpus: no NUMA or CPU information under " + o.sysfs);
    nodes[0] = online;
    t.notes.push_back("no NUMA information in sysfs: one node with every online CPU");
  }
  std::vector<int> ids;
  for (const auto& [id, list] : nodes) {
    vertex v;
    v.kind = vertex_kind::cpu;
    v.index = id;
    v.name = "CPU" + std::to_string(id);
    v.cpu_affinity = list;
    v.cores = parse_cpulist(list);
    v.cpu_vendor = vendor, v.cpu_family = family, v.cpu_model = model;
    if (!v.cores.empty()) {
      const std::string pkg = detail::read_first_line(cpu_dir / ("cpu" + std::to_string(v.cores.front())) / "topology/physical_package_id");
      if (!pkg.empty()) v.socket = std::atoi(pkg.c_str());
    }
    ids.push_back(t.add_vertex(v));
  }
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) t.add_link(make_smp(ids[i], ids[j], smp_GBps(vendor, family, model)));
  if (vendor.empty()) t.notes.push_back("no cpuinfo: CPU model unknown, inter-CPU bandwidth " + std::to_string(static_cast<int>(smp_GBps("", 0, 0))) + " GB/s assumed");
  return t;
}

/// Adds GPUs and NICs found on PCI to a topology from discover_cpus (see the file comment): each
/// device hangs under its bridges (a switch's upstream port stands for the switch; its downstream
/// ports are folded into it; a root port becomes a host bridge) under the CPU of its NUMA node
/// (node 0, noted, when the kernel reports -1). Returns how many GPUs it found.
inline int discover_pci(topology& t, const discover_options& o = {}) {
  namespace fs = std::filesystem;
  const fs::path dev_dir = fs::path(o.sysfs) / "bus/pci/devices";
  std::error_code ec;
  if (!fs::is_directory(dev_dir, ec)) {
    t.notes.push_back("no " + dev_dir.string() + ": PCI devices not discovered");
    return 0;
  }
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(dev_dir, ec)) ids.push_back(e.path().filename().string());
  std::sort(ids.begin(), ids.end());
  std::map<std::string, int> made;  // busid -> vertex (bridges, root ports)
  auto cpu_for_node = [&](int node) {
    for (int c : t.of_kind(vertex_kind::cpu))
      if (t.vertices[static_cast<std::size_t>(c)].index == node) return c;
    const std::vector<int> all = t.of_kind(vertex_kind::cpu);
    return all.empty() ? -1 : all.front();
  };
  auto link_of = [&](const fs::path& p, int a, int b) {
    const std::string sp = detail::read_first_line(p / "current_link_speed");
    const std::string w = detail::read_first_line(p / "current_link_width");
    const double gt = std::atof(sp.c_str());
    const int gen = gt <= 0 ? 0 : gt < 3 ? 1 : gt < 6 ? 2 : gt < 12 ? 3 : gt < 24 ? 4 : gt < 48 ? 5 : 6;
    return make_pcie(a, b, gen, std::atoi(w.c_str()));
  };
  int gpus = 0, nics = 0;
  for (const std::string& id : ids) {
    const fs::path p = dev_dir / id;
    const std::string cls = detail::read_first_line(p / "class"), vendor = detail::read_first_line(p / "vendor");
    const unsigned long c = std::strtoul(cls.c_str(), nullptr, 16);
    const bool gpu = vendor == "0x10de" && ((c >> 8) == 0x0302 || (c >> 8) == 0x0300);
    const bool nic = (c >> 16) == 0x02;
    if (!gpu && !nic) continue;
    int node = std::atoi(detail::read_first_line(p / "numa_node").c_str());
    if (detail::read_first_line(p / "numa_node").empty() || node < 0) {
      if (t.of_kind(vertex_kind::cpu).size() > 1) t.notes.push_back(id + ": no NUMA node reported: placed on the first");
      node = -1;
    }
    const int cpu = cpu_for_node(node);
    if (cpu < 0) continue;
    // Bridges between the root and the device, from the resolved device path.
    std::vector<std::pair<std::string, fs::path>> chain;
    const fs::path real = fs::canonical(p, ec);
    if (!ec) {
      fs::path prefix;
      for (const auto& part : real) {
        prefix /= part;
        if (detail::looks_like_busid(part.string()) && part.string() != id) chain.emplace_back(part.string(), prefix);
      }
    }
    int parent = cpu;
    for (std::size_t k = 0; k < chain.size(); ++k) {
      const bool root_port = k == 0, downstream = k > 0 && k % 2 == 0;
      if (downstream) continue;
      auto it = made.find(chain[k].first);
      if (it == made.end()) {
        vertex b;
        b.kind = root_port ? vertex_kind::host_bridge : vertex_kind::pci_switch;
        b.name = (root_port ? "root port " : "PCI ") + chain[k].first;
        b.busid = chain[k].first;
        b.parent = parent;
        const int v = t.add_vertex(b);
        if (root_port) t.add_link(make_internal(v, parent));
        else t.add_link(link_of(chain[k].second, v, parent));
        it = made.emplace(chain[k].first, v).first;
      }
      parent = it->second;
    }
    vertex v;
    v.busid = id;
    v.parent = parent;
    if (gpu) {
      const unsigned dev = static_cast<unsigned>(std::strtoul(detail::read_first_line(p / "device").c_str(), nullptr, 16));
      v.kind = vertex_kind::gpu;
      v.arch = gpu_arch_for_pci_device(dev);
      if (!v.arch) {
        v.arch = &unknown_gpu_arch;
        t.notes.push_back("GPU " + id + ": PCI device id " + detail::read_first_line(p / "device") + " not known: generic figures");
      }
      v.index = gpus++;
      v.name = "GPU" + std::to_string(v.index);
      v.device = std::string(v.arch->name);
    } else {
      v.kind = vertex_kind::nic;
      v.index = nics++;
      v.name = "NIC" + std::to_string(v.index);
      for (const char* sub : {"infiniband", "net"}) {
        for (const auto& e : fs::directory_iterator(p / sub, ec)) {
          v.device = e.path().filename().string();
          if (std::string(sub) == "infiniband") {
            const std::string rate = detail::read_first_line(e.path() / "ports/1/rate");  // "100 Gb/sec (4X EDR)"
            v.nic_Gbps = std::atof(rate.c_str());
          } else {
            const std::string sp = detail::read_first_line(fs::path(o.sysfs) / "class/net" / v.device / "speed");  // Mb/s
            if (std::atoi(sp.c_str()) > 0) v.nic_Gbps = std::atof(sp.c_str()) / 1000.0;
          }
          break;
        }
        ec.clear();
        if (!v.device.empty()) break;
      }
      if (v.device.empty()) v.device = id;
    }
    const int vid = t.add_vertex(v);
    t.add_link(link_of(p, vid, parent));
  }
  if (gpus == 0) t.notes.push_back("no NVIDIA GPU on PCI: CPU-only topology");
  return gpus;
}

/// Adds NVLinks reported by NVML (dlopen'ed at run time) between the GPUs of `t`. UNTESTED STUB
/// (see the file comment). Returns the number of links added; 0 with a note when NVML cannot be
/// loaded or initialised.
inline int discover_nvlinks_nvml(topology& t) {
#if defined(COLLX_TOPO_HAVE_DLOPEN)
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    t.notes.push_back("NVML not available (libnvidia-ml.so.1): NVLinks not discovered");
    return 0;
  }
  // NVML's C ABI (nvml.h): nvmlPciInfo_t as of NVML v2+.
  struct pci_info {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
  };
  using init_t = int (*)();
  using by_bus_t = int (*)(const char*, void**);
  using state_t = int (*)(void*, unsigned, int*);
  using remote_t = int (*)(void*, unsigned, pci_info*);
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  const auto init = reinterpret_cast<init_t>(sym("nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<init_t>(sym("nvmlShutdown"));
  const auto by_bus = reinterpret_cast<by_bus_t>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  const auto state = reinterpret_cast<state_t>(sym("nvmlDeviceGetNvLinkState"));
  const auto remote = reinterpret_cast<remote_t>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  if (!init || !shutdown || !by_bus || !state || !remote || init() != 0) {
    t.notes.push_back("NVML found but not usable: NVLinks not discovered");
    dlclose(lib);
    return 0;
  }
  std::map<std::string, int> by_busid;
  for (int g : t.gpus()) by_busid[t.vertices[static_cast<std::size_t>(g)].busid] = g;
  std::map<std::pair<int, int>, int> pairs;
  std::map<int, int> to_switch;
  for (const auto& [bus, g] : by_busid) {
    void* h = nullptr;
    if (by_bus(bus.c_str(), &h) != 0) continue;
    for (unsigned l = 0; l < 18; ++l) {
      int active = 0;
      if (state(h, l, &active) != 0 || !active) continue;
      pci_info pi{};
      if (remote(h, l, &pi) != 0) continue;
      std::string rb = pi.bus_id;
      for (char& ch : rb) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (rb.size() > 12) rb = rb.substr(rb.size() - 12);  // NVML pads the domain to 8 digits
      const auto it = by_busid.find(rb);
      if (it != by_busid.end()) ++pairs[{std::min(g, it->second), std::max(g, it->second)}];
      else ++to_switch[g];
    }
  }
  shutdown();
  dlclose(lib);
  int added = 0;
  for (const auto& [k, c] : pairs) t.add_link(make_nvlink(k.first, k.second, *t.vertices[static_cast<std::size_t>(k.first)].arch, c / 2)), ++added;
  if (!to_switch.empty()) {
    vertex s;
    s.kind = vertex_kind::nvswitch, s.name = "NVSwitch";
    const int sw = t.add_vertex(s);
    for (const auto& [g, c] : to_switch) t.add_link(make_nvlink(g, sw, *t.vertices[static_cast<std::size_t>(g)].arch, c)), ++added;
  }
  t.notes.push_back("NVLinks from NVML (untested code path)");
  return added;
#else
  t.notes.push_back("no dlopen on this platform: NVLinks not discovered");
  return 0;
#endif
}

/// The live machine: discover_cpus, then discover_pci and discover_nvlinks_nvml as `o` asks.
/// @throws collx::error(system) as discover_cpus does.
inline topology discover(const discover_options& o = {}) {
  topology t = discover_cpus(o);
  if (o.pci && discover_pci(t, o) > 0 && o.nvml) discover_nvlinks_nvml(t);
  return t;
}

#if defined(COLLX_TOPO_HAVE_HWLOC)
/// The CPU part of the machine from hwloc (NUMA nodes with their cpusets and packages), instead of
/// sysfs. Only with COLLX_TOPO_USE_HWLOC defined and hwloc linked.
/// @throws collx::error(system) if hwloc fails.
inline topology discover_cpus_hwloc() {
  hwloc_topology_t h;
  if (hwloc_topology_init(&h) != 0 || hwloc_topology_load(h) != 0) COLLX_THROW(errc::system, "hwloc: cannot load the topology");
  topology t;
  t.source = "hwloc";
  const int n = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t o = hwloc_get_obj_by_type(h, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    vertex v;
    v.kind = vertex_kind::cpu;
    v.index = static_cast<int>(o->os_index);
    v.name = "CPU" + std::to_string(v.index);
    char buf[4096];
    hwloc_bitmap_list_snprintf(buf, sizeof buf, o->cpuset);
    v.cpu_affinity = buf;
    v.cores = parse_cpulist(v.cpu_affinity);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_PACKAGE, o);
    if (pkg) v.socket = static_cast<int>(pkg->os_index);
    ids.push_back(t.add_vertex(v));
  }
  hwloc_topology_destroy(h);
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) t.add_link(make_smp(ids[i], ids[j], smp_GBps("", 0, 0)));
  return t;
}
#endif

}  // namespace topo
}  // namespace v0
}  // namespace collx
