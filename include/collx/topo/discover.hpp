/// @file topo/discover.hpp
/// Discovery of the machine collx runs on (Linux).
///
/// - CPUs: NUMA nodes, their CPUs and sockets from sysfs (/sys/devices/system/node,
///   /sys/devices/system/cpu), the CPU vendor and model from /proc/cpuinfo. Always available; with
///   no GPU this is the whole topology (what place_local_rank() needs).
/// - GPUs: the CUDA runtime, loaded with dlopen (discover_options::cudart_library, default
///   "libcudart.so", then libcudart.so.13 and .12) so nothing links against it. Its device list is
///   authoritative: which GPUs this process sees (CUDA_VISIBLE_DEVICES applies), their CUDA device
///   numbers (vertex::index), PCI bus ids and compute capabilities, and for every ordered pair
///   cudaDeviceCanAccessPeer and cudaDeviceGetP2PAttribute (topology::peers: a pair without peer
///   access is host-staged by the router). cudaGetDeviceCount failing (cudaErrorNoDevice 100,
///   cudaErrorInsufficientDriver 35, ...) gives the note "no CUDA device" and no GPU at all. Without
///   a loadable runtime, GPUs come from sysfs alone.
/// - PCIe: GPUs (NVIDIA display/3D controllers) and NICs from /sys/bus/pci/devices, with their
///   bridges (PCIe switches, root ports) from the device paths, link speed and width, NUMA node,
///   and NIC port speeds from /sys/class/net and /sys/class/infiniband. Needs no driver library.
///   A GPU the CUDA runtime lists but sysfs lacks (a container without /sys/bus/pci) is put directly
///   under the first CPU, with a note.
/// - NVLink: NVML, loaded with dlopen (discover_options::nvml_library, default
///   "libnvidia-ml.so.1"). Per GPU and link 0..17 (NVML_NVLINK_MAX_LINKS): the link's state, the
///   remote device's type (nvmlDeviceGetNvLinkRemoteDeviceType; where that symbol is missing, a
///   remote PCI bus id that is none of the GPUs counts as an NVSwitch) and PCI bus id. GPU-to-GPU
///   links become NVLink edges with their link count; links to NVSwitches join the GPU to the one
///   NVSwitch vertex of the machine (as make_hgx_node and the NCCL XML reader build it), so routing
///   sees every GPU on the fabric as connected; links to an IBM NPU join the GPU to its CPU.
/// - Every failing CUDA or NVML call becomes a note in topology::notes, never an exception or a
///   crash; nvmlShutdown runs after every successful nvmlInit_v2, also when something throws.
///
/// TESTED AGAINST FAKES ONLY: the CUDA runtime and NVML paths have run against the fake libraries
/// in tests/fakes/ (written from CUDA 13.0's cuda_runtime_api.h/driver_types.h and NVML's nvml.h,
/// API version 13, PyPI nvidia-nvml-dev 13.0.87), which serve an 8-GPU HGX H100, a DGX-1 V100 and a
/// 2-GPU PCIe box; and against the real libcudart.so.13 on a machine without a GPU or driver
/// (cudaGetDeviceCount returns 35). They have never run on a machine with a GPU: treat their
/// output there with care, and report what differs.
/// - hwloc (optional, Debian libhwloc-dev): defining COLLX_TOPO_USE_HWLOC (CMake option
///   COLLX_TOPO_HWLOC, which also links hwloc) adds discover_cpus_hwloc(). The core stays
///   header-only: nothing here needs linking unless that macro is defined (dlopen is in glibc).
///
/// Every function takes the sysfs/procfs roots and library names as options so tests can point
/// them at a fake tree and fake libraries.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <collx/detail/c_locale.hpp>
#include <collx/detail/numa.hpp>
#include <collx/topo/host_cost.hpp>
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
  bool cuda = true;               ///< ask the CUDA runtime for GPUs and peer access (when it can be loaded)
  bool nvml = true;               ///< ask NVML for NVLinks (when it can be loaded)
  /// What dlopen loads for the CUDA runtime: a file name searched the usual way, or a path. With
  /// the default, libcudart.so.13 and libcudart.so.12 are tried when libcudart.so (a development
  /// link, often missing where only the runtime is installed) cannot be loaded. The library stays
  /// loaded (unloading the CUDA runtime from a running process is not safe).
  std::string cudart_library = "libcudart.so";
  /// What dlopen loads for NVML: a file name or a path. Unloaded after nvmlShutdown.
  std::string nvml_library = "libnvidia-ml.so.1";
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

/// A PCI bus id as "dddd:bb:dd.f", lower case, from the forms the CUDA runtime and NVML write
/// ("0000:3B:00.0", "00000000:3B:00.0", "3b:00.0"); "" for text that is none of them.
inline std::string normalize_busid(const std::string& s) {
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return "";
  unsigned dom = 0, bus = 0, dev = 0, fn = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
    dom = 0, fn = 0;
    if (std::sscanf(s.c_str(), "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3) return "";
  }
  if (bus > 0xff || dev > 0x1f || fn > 7) return "";
  char b[32];
  std::snprintf(b, sizeof b, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
  return b;
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
  const cpu_identity cpu = read_cpu_identity(o.procfs);
  const fs::path node_dir = fs::path(o.sysfs) / "devices/system/node";
  const fs::path cpu_dir = fs::path(o.sysfs) / "devices/system/cpu";
  std::map<int, std::string> nodes;
  collx::detail::for_each_node_entry(node_dir.string(), [&](int id) {
    nodes[id] = detail::read_first_line(node_dir / ("node" + std::to_string(id)) / "cpulist");
  });
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
    v.cpu_vendor = cpu.vendor, v.cpu_family = cpu.family, v.cpu_model = cpu.model;
    if (!v.cores.empty()) {
      const std::string pkg = detail::read_first_line(cpu_dir / ("cpu" + std::to_string(v.cores.front())) / "topology/physical_package_id");
      if (!pkg.empty()) v.socket = std::atoi(pkg.c_str());
    }
    ids.push_back(t.add_vertex(v));
  }
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) t.add_link(make_smp(ids[i], ids[j], smp_GBps(cpu.vendor, cpu.family, cpu.model)));
  if (cpu.vendor.empty()) t.notes.push_back("no cpuinfo: CPU model unknown, inter-CPU bandwidth " + std::to_string(static_cast<int>(smp_GBps("", 0, 0))) + " GB/s assumed");
  return t;
}

/// Adds GPUs and NICs found on PCI to a topology from discover_cpus (see the file comment): each
/// device hangs under its bridges (a switch's upstream port stands for the switch; its downstream
/// ports are folded into it; a root port becomes a host bridge) under the CPU of its NUMA node
/// (node 0, noted, when the kernel reports -1). GPUs are numbered in bus-id order, unless `gpus`
/// is given: then only GPUs whose bus id (lower case dddd:bb:dd.f) it lists are added, each with
/// its position in the list as index (pass the CUDA runtime's list, cuda_runtime_report::busids():
/// GPUs hidden from this process are not its to use), and the others are skipped with a note.
/// Returns how many GPUs it added.
inline int discover_pci(topology& t, const discover_options& o = {}, const std::vector<std::string>* gpus_only = nullptr) {
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
    const double gt = collx::detail::atof_c(sp.c_str());
    const int gen = gt <= 0 ? 0 : gt < 3 ? 1 : gt < 6 ? 2 : gt < 12 ? 3 : gt < 24 ? 4 : gt < 48 ? 5 : 6;
    const int width = std::atoi(w.c_str());
    const link l = make_pcie(a, b, gen, width);
    if (gen == 0 || width <= 0)  // a virtual device (virtio) reports neither
      t.notes.push_back(p.filename().string() + ": no PCIe link speed or width in sysfs: Gen" + std::to_string(l.generation) +
                        " x" + std::to_string(l.width) + " assumed");
    return l;
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
    int wanted = -1;  // position in gpus_only
    if (gpu && gpus_only) {
      const auto w = std::find(gpus_only->begin(), gpus_only->end(), id);
      if (w == gpus_only->end()) {
        t.notes.push_back("GPU " + id + " on PCI is not one the CUDA runtime lists" +
                          std::string(gpus_only->empty() ? " (it lists none)" : " (CUDA_VISIBLE_DEVICES?)") + ": left out");
        continue;
      }
      wanted = static_cast<int>(w - gpus_only->begin());
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
      v.index = wanted >= 0 ? wanted : gpus;
      ++gpus;
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
            v.nic_Gbps = collx::detail::atof_c(rate.c_str());
          } else {
            const std::string sp = detail::read_first_line(fs::path(o.sysfs) / "class/net" / v.device / "speed");  // Mb/s
            if (std::atoi(sp.c_str()) > 0) v.nic_Gbps = collx::detail::atof_c(sp.c_str()) / 1000.0;
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
  if (gpus == 0 && !gpus_only) t.notes.push_back("no NVIDIA GPU on PCI: CPU-only topology");
  return gpus;
}

// ---------------------------------------------------------------------------------------------
// CUDA runtime (dlopen'ed)

/// One GPU as the CUDA runtime reports it.
struct cuda_device_info {
  int ordinal = -1;   ///< CUDA device number (what cudaSetDevice takes)
  std::string busid;  ///< cudaDeviceGetPCIBusId, as lower case dddd:bb:dd.f; "" if the call failed
  int sm = 0;         ///< compute capability x10 (cudaDevAttrComputeCapabilityMajor/Minor); 0 if not known
};

/// One ordered pair of CUDA devices as cudaDeviceCanAccessPeer and cudaDeviceGetP2PAttribute report it.
struct cuda_peer_info {
  int from = -1;               ///< CUDA device number that accesses ...
  int to = -1;                 ///< ... this device's memory
  bool access = false;         ///< cudaDeviceCanAccessPeer(from, to) == 1
  bool native_atomics = false; ///< cudaDevP2PAttrNativeAtomicSupported == 1
  int performance_rank = -1;   ///< cudaDevP2PAttrPerformanceRank (0: the best link); -1 not known
};

/// What query_cuda_runtime() found.
struct cuda_runtime_report {
  /// The runtime was loaded and has the entry points collx needs: its device list (possibly empty,
  /// when cudaGetDeviceCount failed) is then authoritative for which GPUs this process has.
  bool loaded = false;
  int count_error = 0;                    ///< cudaGetDeviceCount's cudaError_t (0 success; 35 insufficient driver; 100 no device)
  std::string library;                    ///< the library dlopen loaded
  std::vector<cuda_device_info> devices;  ///< in CUDA device order
  std::vector<cuda_peer_info> peers;      ///< ordered pairs whose cudaDeviceCanAccessPeer call succeeded
  std::vector<std::string> notes;         ///< every failed call and assumption, for topology::notes

  /// The devices' bus ids in CUDA order, leaving out those that could not be read (discover_pci's
  /// `gpus_only`).
  std::vector<std::string> busids() const {
    std::vector<std::string> out;
    for (const cuda_device_info& d : devices)
      if (!d.busid.empty()) out.push_back(d.busid);
    return out;
  }
};

/// Asks the CUDA runtime (dlopen'ed as discover_options::cudart_library) for its devices, their PCI
/// bus ids and compute capabilities, and for every ordered pair whether peer access is possible
/// and how it performs. Calls only cudaGetDeviceCount, cudaDeviceGetPCIBusId,
/// cudaDeviceGetAttribute, cudaDeviceCanAccessPeer, cudaDeviceGetP2PAttribute and
/// cudaGetErrorString (none creates a context). Never throws for what the runtime answers: a
/// missing library or entry point, or a failing call, becomes a note in the report.
/// @throws std::bad_alloc only.
inline cuda_runtime_report query_cuda_runtime(const discover_options& o = {}) {
  cuda_runtime_report r;
#if defined(COLLX_TOPO_HAVE_DLOPEN)
  std::vector<std::string> names{o.cudart_library};
  if (o.cudart_library == discover_options{}.cudart_library) names.insert(names.end(), {"libcudart.so.13", "libcudart.so.12"});
  void* lib = nullptr;
  std::string why;
  for (const std::string& n : names) {
    lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      r.library = n;
      break;
    }
    const char* e = dlerror();
    if (why.empty() && e) why = e;
  }
  if (!lib) {
    r.notes.push_back("CUDA runtime not available (" + why + "): GPUs from sysfs only, peer access not known");
    return r;
  }
  // The C ABI of CUDA 13.0's cuda_runtime_api.h and driver_types.h: cudaError_t and the attribute
  // enums are C enums (int-sized), cudaSuccess = 0.
  using count_t = int (*)(int*);                // cudaGetDeviceCount(int* count)
  using busid_t = int (*)(char*, int, int);     // cudaDeviceGetPCIBusId(char* pciBusId, int len, int device)
  using attr_t = int (*)(int*, int, int);       // cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device)
  using can_t = int (*)(int*, int, int);        // cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice)
  using p2p_t = int (*)(int*, int, int, int);   // cudaDeviceGetP2PAttribute(int* value, enum cudaDeviceP2PAttr attr, int srcDevice, int dstDevice)
  using errstr_t = const char* (*)(int);        // const char* cudaGetErrorString(cudaError_t error)
  constexpr int attr_cc_major = 75, attr_cc_minor = 76;                           // cudaDevAttrComputeCapabilityMajor/Minor
  constexpr int p2p_rank = 1, p2p_access = 2, p2p_atomics = 3;                    // cudaDevP2PAttrPerformanceRank/AccessSupported/NativeAtomicSupported
  const auto count = reinterpret_cast<count_t>(dlsym(lib, "cudaGetDeviceCount"));
  const auto busid = reinterpret_cast<busid_t>(dlsym(lib, "cudaDeviceGetPCIBusId"));
  const auto attr = reinterpret_cast<attr_t>(dlsym(lib, "cudaDeviceGetAttribute"));
  const auto can = reinterpret_cast<can_t>(dlsym(lib, "cudaDeviceCanAccessPeer"));
  const auto p2p = reinterpret_cast<p2p_t>(dlsym(lib, "cudaDeviceGetP2PAttribute"));
  const auto errstr = reinterpret_cast<errstr_t>(dlsym(lib, "cudaGetErrorString"));
  if (!count || !busid || !can) {
    r.notes.push_back("CUDA runtime " + r.library + " lacks cudaGetDeviceCount, cudaDeviceGetPCIBusId or cudaDeviceCanAccessPeer: not used");
    dlclose(lib);  // nothing was called: safe to unload
    return r;
  }
  auto err = [&](int e) {
    std::string s = "error " + std::to_string(e);
    if (e == 35) s += " cudaErrorInsufficientDriver";
    else if (e == 100) s += " cudaErrorNoDevice";
    const char* m = errstr ? errstr(e) : nullptr;
    if (m && *m) s += " (" + std::string(m) + ")";
    return s;
  };
  r.loaded = true;
  int n = 0;
  r.count_error = count(&n);
  if (r.count_error != 0 || n <= 0) {
    r.notes.push_back("no CUDA device (" + r.library + ": cudaGetDeviceCount: " + (r.count_error ? err(r.count_error) : std::to_string(n) + " devices") +
                      "): no GPU in the topology, CPU-only");
    return r;
  }
  std::string sm_failed;
  for (int d = 0; d < n; ++d) {
    cuda_device_info dev;
    dev.ordinal = d;
    char buf[64] = {};
    const int e = busid(buf, static_cast<int>(sizeof buf) - 1, d);
    if (e != 0) r.notes.push_back("CUDA device " + std::to_string(d) + ": cudaDeviceGetPCIBusId: " + err(e) + ": its PCIe place and NVLinks not known");
    else if ((dev.busid = detail::normalize_busid(buf)).empty())
      r.notes.push_back("CUDA device " + std::to_string(d) + ": PCI bus id '" + std::string(buf) + "' not understood: its PCIe place and NVLinks not known");
    int major = 0, minor = 0;
    if (attr) {
      const int e1 = attr(&major, attr_cc_major, d), e2 = e1 ? 0 : attr(&minor, attr_cc_minor, d);
      if (e1 || e2) sm_failed += (sm_failed.empty() ? "" : ", ") + std::to_string(d) + " (" + err(e1 ? e1 : e2) + ")";
      else dev.sm = major * 10 + minor;
    }
    r.devices.push_back(std::move(dev));
  }
  if (!sm_failed.empty()) r.notes.push_back("cudaDeviceGetAttribute (compute capability) failed for CUDA device(s) " + sm_failed);
  int can_failed = 0, attr_failed = 0, first_error = 0;
  std::string disagree;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      cuda_peer_info p;
      p.from = a, p.to = b;
      int c = 0;
      const int e = can(&c, a, b);
      if (e != 0) {
        if (!can_failed++) first_error = e;
        continue;
      }
      p.access = c == 1;
      if (p2p) {
        int v = 0;
        if (p2p(&v, p2p_rank, a, b) == 0) p.performance_rank = v;
        else ++attr_failed;
        if (p2p(&v, p2p_atomics, a, b) == 0) p.native_atomics = v == 1;
        else ++attr_failed;
        if (p2p(&v, p2p_access, a, b) == 0) {
          if ((v == 1) != p.access) disagree += (disagree.empty() ? "" : ", ") + std::to_string(a) + "->" + std::to_string(b);
        } else {
          ++attr_failed;
        }
      }
      r.peers.push_back(p);
    }
  if (can_failed)
    r.notes.push_back("cudaDeviceCanAccessPeer failed for " + std::to_string(can_failed) + " device pair(s) (first: " + err(first_error) +
                      "): peer access of those pairs not known, assumed where the links allow it");
  if (attr_failed) r.notes.push_back("cudaDeviceGetP2PAttribute failed " + std::to_string(attr_failed) + " time(s): those attributes not known");
  if (!disagree.empty())
    r.notes.push_back("cudaDevP2PAttrAccessSupported disagrees with cudaDeviceCanAccessPeer for " + disagree + ": cudaDeviceCanAccessPeer used");
  // The runtime stays loaded: it has initialised the driver, and unloading it is not safe.
#else
  (void)o;
  r.notes.push_back("no dlopen on this platform: CUDA runtime not used");
#endif
  return r;
}

/// Puts what the CUDA runtime reported into `t`: GPU vertices with a bus id the runtime lists get
/// its device number as index (and name GPU<n>), and its compute capability's model when theirs is
/// not known; devices with no vertex yet (no sysfs) are added under the first CPU with a PCIe link
/// of their model's generation, x16 (noted); GPUs of `t` it does not list keep their place but are
/// numbered after its devices (noted); peer access per ordered pair goes to topology::peers, and
/// each pair without it gets a note (the router host-stages it). Adds the report's notes. Does
/// nothing else when the runtime was not loaded. Returns the number of CUDA devices.
/// @throws std::bad_alloc only.
inline int add_cuda_devices(topology& t, const cuda_runtime_report& r) {
  for (const std::string& n : r.notes) t.notes.push_back(n);
  if (!r.loaded) return 0;
  std::map<int, int> vertex_of;  // CUDA device number -> vertex id
  std::set<int> listed;
  const std::vector<int> cpus = t.of_kind(vertex_kind::cpu);
  for (const cuda_device_info& d : r.devices) {
    int v = -1;
    for (int g : t.gpus())
      if (!d.busid.empty() && t.vertices[static_cast<std::size_t>(g)].busid == d.busid) v = g;
    const gpu_arch* by_sm = d.sm ? gpu_arch_for_sm(d.sm) : nullptr;
    const std::string cc = std::to_string(d.sm / 10) + "." + std::to_string(d.sm % 10);
    const std::string name = "GPU" + std::to_string(d.ordinal);
    if (v < 0) {
      vertex x;
      x.kind = vertex_kind::gpu, x.index = d.ordinal, x.name = name, x.busid = d.busid;
      x.arch = by_sm ? by_sm : &unknown_gpu_arch;
      x.device = std::string(x.arch->name);
      if (!by_sm) t.notes.push_back(name + ": compute capability " + (d.sm ? cc : "not known") + ": generic GPU figures");
      if (!cpus.empty()) x.parent = cpus.front();
      v = t.add_vertex(x);
      if (x.parent >= 0) {
        t.add_link(make_pcie(v, x.parent, x.arch->pcie_gen, 16));
        t.notes.push_back(name + " (" + (d.busid.empty() ? "bus id unknown" : d.busid) + ") is not on PCI in sysfs: put under " +
                          t.vertices[static_cast<std::size_t>(x.parent)].name + " with a PCIe Gen" + std::to_string(x.arch->pcie_gen) + " x16 link (assumed)");
      } else {
        t.notes.push_back(name + ": no CPU to hang it under: outside every PCIe tree");
      }
    } else {
      vertex& x = t.vertices[static_cast<std::size_t>(v)];
      x.index = d.ordinal, x.name = name;
      if ((!x.arch || x.arch == &unknown_gpu_arch) && by_sm) {
        x.arch = by_sm, x.device = std::string(by_sm->name);
        t.notes.push_back(name + ": model from compute capability " + cc + ": " + std::string(by_sm->name) + " figures");
      }
    }
    vertex_of[d.ordinal] = v;
    listed.insert(v);
  }
  int next = static_cast<int>(r.devices.size());
  for (int g : t.gpus()) {
    if (listed.count(g)) continue;
    vertex& x = t.vertices[static_cast<std::size_t>(g)];
    x.index = next++, x.name = "GPU" + std::to_string(x.index);
    t.notes.push_back(x.name + " (" + x.busid + ") is not listed by the CUDA runtime (CUDA_VISIBLE_DEVICES?): numbered after its devices");
  }
  std::set<std::pair<int, int>> told;
  for (const cuda_peer_info& p : r.peers) {
    const auto a = vertex_of.find(p.from), b = vertex_of.find(p.to);
    if (a == vertex_of.end() || b == vertex_of.end()) continue;
    peer_info q;
    q.from = a->second, q.to = b->second, q.access = p.access, q.native_atomics = p.native_atomics, q.performance_rank = p.performance_rank;
    t.peers.push_back(q);
    if (!p.access && told.insert({std::min(p.from, p.to), std::max(p.from, p.to)}).second)
      t.notes.push_back("GPU" + std::to_string(std::min(p.from, p.to)) + " and GPU" + std::to_string(std::max(p.from, p.to)) +
                        ": no peer access (cudaDeviceCanAccessPeer): their transfers are host-staged");
  }
  return static_cast<int>(r.devices.size());
}

/// query_cuda_runtime() then add_cuda_devices(): the CUDA runtime's GPUs and peer access into `t`.
/// Returns the number of CUDA devices (0 with a note when there is no runtime or no device).
/// @throws std::bad_alloc only.
inline int discover_cuda(topology& t, const discover_options& o = {}) { return add_cuda_devices(t, query_cuda_runtime(o)); }

// ---------------------------------------------------------------------------------------------
// NVML (dlopen'ed)

/// What discover_nvlinks_nvml could not read.
struct nvlink_gaps {
  bool nvml = false;  ///< NVML was loaded and initialised (false: no NVLink was read at all)
  int gpus = 0;       ///< GPUs NVML did not find (nvmlDeviceGetHandleByPciBusId_v2 failed): none of their links read
  int links = 0;      ///< links a call failed on, or whose far end made no sense (the GPU itself)
  /// Every GPU's NVLinks were read.
  bool complete() const noexcept { return nvml && gpus == 0 && links == 0; }
};

/// Adds the NVLinks NVML reports between the GPUs of `t` (those with a PCI bus id), as the file
/// comment describes: GPU pairs get one NVLink edge with the number of links between them (each
/// side's count; the larger where they differ, noted), GPUs with links to NVSwitches are joined to
/// the machine's NVSwitch vertex (made if there is none) with that many links, GPUs with links to
/// an IBM NPU to their CPU. Link figures follow the GPU's model (sysfs PCI device id or compute
/// capability), or, where that is unknown or has no NVLink, the generation nvmlDeviceGetNvLinkVersion
/// reports (noted). Links that NVML reports as absent (NVML_ERROR_INVALID_ARGUMENT or
/// NOT_SUPPORTED from nvmlDeviceGetNvLinkState) are skipped silently; every other failure is a note
/// naming the GPU, the call, how many links it failed on and NVML's error. nvmlShutdown runs after
/// every successful nvmlInit_v2, exceptions included. Returns the number of NVLink edges added; 0
/// with a note when NVML cannot be loaded or initialised. `gaps`, when given, says what could not
/// be read (for a caller that must not decide on a partial picture, as topo::device_wiring).
/// @throws collx::error or std::bad_alloc only from building the graph, after NVML is shut down.
inline int discover_nvlinks_nvml(topology& t, const discover_options& o = {}, nvlink_gaps* gaps = nullptr) {
  nvlink_gaps unused;
  nvlink_gaps& gap = gaps ? *gaps : unused;
  gap = nvlink_gaps{};
#if defined(COLLX_TOPO_HAVE_DLOPEN)
  std::map<std::string, int> by_busid;
  for (int g : t.gpus())
    if (!t.vertices[static_cast<std::size_t>(g)].busid.empty()) by_busid[t.vertices[static_cast<std::size_t>(g)].busid] = g;
  if (by_busid.empty()) {
    t.notes.push_back("no GPU with a PCI bus id: NVML not asked for NVLinks");
    return 0;
  }
  void* lib = dlopen(o.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    t.notes.push_back("NVML not available (" + (e ? std::string(e) : o.nvml_library) + "): NVLinks not discovered");
    return 0;
  }
  // NVML's C ABI as nvml.h declares it (NVML_API_VERSION 13, from PyPI nvidia-nvml-dev 13.0.87;
  // unchanged since the _v2 entry points of API version 10): nvmlReturn_t, nvmlEnableState_t and
  // nvmlIntNvLinkDeviceType_t are C enums (int-sized), nvmlDevice_t is an opaque pointer.
  struct nvml_pci_info {       // nvmlPciInfo_t
    char busIdLegacy[16];      // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, "%04X:%02X:%02X.0"
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];            // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "%08X:%02X:%02X.0"
  };
  using handle = void*;                                      // nvmlDevice_t (struct nvmlDevice_st*)
  using init_t = int (*)();                                  // nvmlInit_v2(void), nvmlShutdown(void)
  using errstr_t = const char* (*)(int);                     // const char* nvmlErrorString(nvmlReturn_t result)
  using by_bus_t = int (*)(const char*, handle*);            // nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device)
  using state_t = int (*)(handle, unsigned, int*);           // nvmlDeviceGetNvLinkState(nvmlDevice_t, unsigned int link, nvmlEnableState_t* isActive)
  using version_t = int (*)(handle, unsigned, unsigned*);    // nvmlDeviceGetNvLinkVersion(nvmlDevice_t, unsigned int link, unsigned int* version)
  using remote_pci_t = int (*)(handle, unsigned, nvml_pci_info*);  // nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int link, nvmlPciInfo_t* pci)
  using remote_type_t = int (*)(handle, unsigned, int*);     // nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t, unsigned int link, nvmlIntNvLinkDeviceType_t*)
  constexpr int nvml_success = 0, nvml_invalid_argument = 2, nvml_not_supported = 3;  // nvmlReturn_t
  constexpr int feature_enabled = 1;                                                  // NVML_FEATURE_ENABLED
  constexpr int type_gpu = 0, type_ibmnpu = 1, type_switch = 2;                       // NVML_NVLINK_DEVICE_TYPE_*; 0xFF unknown
  constexpr unsigned max_links = 18;                                                  // NVML_NVLINK_MAX_LINKS
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  const auto init = reinterpret_cast<init_t>(sym("nvmlInit_v2"));
  const auto shutdown = reinterpret_cast<init_t>(sym("nvmlShutdown"));
  const auto by_bus = reinterpret_cast<by_bus_t>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
  const auto state = reinterpret_cast<state_t>(sym("nvmlDeviceGetNvLinkState"));
  const auto remote_pci = reinterpret_cast<remote_pci_t>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  const auto remote_type = reinterpret_cast<remote_type_t>(sym("nvmlDeviceGetNvLinkRemoteDeviceType"));  // NVML 11.5+
  const auto version = reinterpret_cast<version_t>(sym("nvmlDeviceGetNvLinkVersion"));
  const auto errstr = reinterpret_cast<errstr_t>(sym("nvmlErrorString"));
  if (!init || !shutdown || !by_bus || !state || !remote_pci) {
    std::string missing;
    for (const char* n : {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo_v2"})
      if (!sym(n)) missing += (missing.empty() ? "" : ", ") + std::string(n);
    t.notes.push_back("NVML (" + o.nvml_library + ") lacks " + missing + ": NVLinks not discovered");
    dlclose(lib);
    return 0;
  }
  auto err = [&](int e) {
    const char* m = errstr ? errstr(e) : nullptr;
    return "error " + std::to_string(e) + (m && *m ? " (" + std::string(m) + ")" : std::string());
  };
  if (const int e = init(); e != nvml_success) {
    t.notes.push_back("NVML (" + o.nvml_library + "): nvmlInit_v2: " + err(e) + ": NVLinks not discovered");
    dlclose(lib);
    return 0;
  }
  struct session {  // shuts NVML down and unloads it however this function is left
    init_t shutdown;
    void* lib;
    int result = 0;
    bool open = true;
    void close() {
      if (open) result = shutdown(), dlclose(lib), open = false;
    }
    ~session() { close(); }
  } nvml{shutdown, lib};
  gap.nvml = true;

  struct failure {
    int links = 0;
    unsigned first_link = 0;
    int code = 0;
  };
  std::map<std::pair<int, std::string>, failure> failures;  // (GPU vertex, what failed)
  auto failed = [&](int g, const std::string& what, unsigned l, int code) {
    failure& f = failures[{g, what}];
    if (!f.links++) f.first_link = l, f.code = code;
  };
  std::map<std::pair<int, int>, int> reported;  // (GPU, other GPU) -> links the first reports
  std::map<int, int> to_switch, to_cpu;          // GPU -> links
  std::map<int, unsigned> version_of;            // GPU -> nvmlNvlinkVersion_t of its first active link
  std::set<std::string> strangers;               // GPUs at the far end that are not in t
  bool guessed_switch = false;
  auto gname = [&](int g) { return t.vertices[static_cast<std::size_t>(g)].name; };
  for (const auto& [bus, g] : by_busid) {
    handle h = nullptr;
    if (const int e = by_bus(bus.c_str(), &h); e != nvml_success) {
      t.notes.push_back(gname(g) + " (" + bus + "): nvmlDeviceGetHandleByPciBusId_v2: " + err(e) + ": its NVLinks not discovered");
      ++gap.gpus;
      continue;
    }
    for (unsigned l = 0; l < max_links; ++l) {
      int active = 0;
      const int se = state(h, l, &active);
      if (se == nvml_invalid_argument || se == nvml_not_supported) continue;  // the GPU has no such link
      if (se != nvml_success) {
        failed(g, "nvmlDeviceGetNvLinkState", l, se);
        continue;
      }
      if (active != feature_enabled) continue;
      if (version && !version_of.count(g)) {
        unsigned v = 0;
        if (version(h, l, &v) == nvml_success) version_of[g] = v;
      }
      int type = -1;  // not known
      if (remote_type) {
        int ty = 0;
        if (const int e = remote_type(h, l, &ty); e == nvml_success) type = ty;
        else failed(g, "nvmlDeviceGetNvLinkRemoteDeviceType", l, e);
      }
      if (type == type_switch) {
        ++to_switch[g];
        continue;
      }
      if (type == type_ibmnpu) {
        ++to_cpu[g];
        continue;
      }
      if (type != -1 && type != type_gpu) {
        failed(g, "a remote device of unknown type (nvmlIntNvLinkDeviceType_t)", l, type);
        continue;
      }
      nvml_pci_info pi{};
      if (const int e = remote_pci(h, l, &pi); e != nvml_success) {
        failed(g, "nvmlDeviceGetNvLinkRemotePciInfo_v2", l, e);
        continue;
      }
      pi.busId[sizeof pi.busId - 1] = pi.busIdLegacy[sizeof pi.busIdLegacy - 1] = 0;
      std::string rb = detail::normalize_busid(pi.busId);
      if (rb.empty()) rb = detail::normalize_busid(pi.busIdLegacy);
      const auto it = by_busid.find(rb);
      if (it != by_busid.end() && it->second != g) ++reported[{g, it->second}];
      else if (it != by_busid.end()) failed(g, "an NVLink to the GPU itself", l, 0);
      else if (type == type_gpu) strangers.insert(rb.empty() ? std::string(pi.busId) : rb);
      else ++to_switch[g], guessed_switch = true;  // no remote type: not one of the GPUs, so a switch
    }
  }
  for (const auto& [key, f] : failures) gap.links += f.links;
  for (const auto& [key, f] : failures)
    t.notes.push_back(gname(key.first) + ": " + key.second + (key.second.rfind("nvml", 0) == 0 ? " failed" : "") + " on " + std::to_string(f.links) +
                      " link(s) (first link " + std::to_string(f.first_link) + ", " + (key.second.rfind("nvml", 0) == 0 ? err(f.code) : "code " + std::to_string(f.code)) +
                      "): those links not discovered");
  nvml.close();
  if (nvml.result != nvml_success) t.notes.push_back("NVML: nvmlShutdown returned error " + std::to_string(nvml.result));

  // The graph, with NVML closed.
  std::map<int, const gpu_arch*> arch_of;
  auto link_arch = [&](int g) -> const gpu_arch& {
    const auto known = arch_of.find(g);
    if (known != arch_of.end()) return *known->second;
    const vertex& v = t.vertices[static_cast<std::size_t>(g)];
    const gpu_arch* a = v.arch ? v.arch : &unknown_gpu_arch;
    if (a == &unknown_gpu_arch || a->nvlink_generation == 0) {
      // nvmlNvlinkVersion_t: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0. Only a
      // fallback: some drivers report 7 for Hopper's NVLink 4.
      const auto ver = version_of.find(g);
      const char* like = nullptr;
      if (ver != version_of.end()) {
        switch (ver->second) {
          case 1: like = "P100"; break;
          case 2: case 3: like = "V100"; break;
          case 4: case 5: like = "A100"; break;
          case 6: like = "H100"; break;
          case 7: like = "B200"; break;
          default: break;
        }
      }
      if (like) {
        a = find_gpu_arch(like);
        t.notes.push_back(v.name + ": NVLink generation from nvmlDeviceGetNvLinkVersion (" + std::to_string(ver->second) + "): " + like + "'s link figures");
      } else if (a->nvlink_generation == 0) {
        a = &unknown_gpu_arch;
        t.notes.push_back(v.name + ": NVLinks on a model without NVLink figures: generic figures");
      }
    }
    arch_of[g] = a;
    return *a;
  };
  int added = 0, pairs = 0;
  std::set<std::pair<int, int>> done;
  for (const auto& [key, n] : reported) {
    const int a = std::min(key.first, key.second), b = std::max(key.first, key.second);
    if (!done.insert({a, b}).second) continue;
    const auto ab = reported.find({a, b}), ba = reported.find({b, a});
    const int na = ab == reported.end() ? 0 : ab->second, nb = ba == reported.end() ? 0 : ba->second;
    if (na && nb && na != nb)
      t.notes.push_back("NVLinks between " + gname(a) + " and " + gname(b) + " differ per side (" + std::to_string(na) + " and " + std::to_string(nb) + "): the larger used");
    if (t.link_between(a, b, link_kind::nvlink) >= 0) continue;
    t.add_link(make_nvlink(a, b, link_arch(a), std::max(na, nb))), ++added, ++pairs;
  }
  if (!to_switch.empty()) {
    const std::vector<int> existing = t.of_kind(vertex_kind::nvswitch, 0);
    int sw = existing.empty() ? -1 : existing.front();
    if (sw < 0) {
      vertex s;
      s.kind = vertex_kind::nvswitch, s.name = "NVSwitch";
      sw = t.add_vertex(s);
    }
    for (const auto& [g, n] : to_switch)
      if (t.link_between(g, sw, link_kind::nvlink) < 0) t.add_link(make_nvlink(g, sw, link_arch(g), n)), ++added;
  }
  for (const auto& [g, n] : to_cpu) {
    const int cpu = t.cpu_of(g);
    if (cpu < 0) t.notes.push_back(gname(g) + ": " + std::to_string(n) + " NVLink(s) to a CPU (IBM NPU) outside its PCIe tree: ignored");
    else if (t.link_between(g, cpu, link_kind::nvlink) < 0) t.add_link(make_nvlink(g, cpu, link_arch(g), n)), ++added;
  }
  if (guessed_switch)
    t.notes.push_back("NVML has no nvmlDeviceGetNvLinkRemoteDeviceType: NVLinks to PCI devices that are not GPUs taken as NVSwitch links");
  if (!strangers.empty()) {
    std::string list;
    for (const std::string& s : strangers) list += (list.empty() ? "" : ", ") + s;
    t.notes.push_back("NVLinks to GPU(s) not in this topology (hidden from this process?): " + list + ": ignored");
  }
  t.notes.push_back("NVLinks from NVML (" + o.nvml_library + "): " + std::to_string(pairs) + " GPU pair(s), " + std::to_string(to_switch.size()) +
                    " GPU(s) on NVSwitch");
  return added;
#else
  (void)o;
  t.notes.push_back("no dlopen on this platform: NVLinks not discovered");
  return 0;
#endif
}

/// Everything after the CPUs, for a topology from discover_cpus() or discover_cpus_hwloc(): the
/// CUDA runtime's devices (o.cuda), PCIe devices from sysfs (o.pci; only the GPUs the runtime
/// lists, when it could be loaded), then NVLinks from NVML (o.nvml, when there is a GPU). Returns
/// the number of GPUs in `t` afterwards. Failures of the libraries are notes (see the file comment).
/// @throws collx::error or std::bad_alloc only from building the graph.
inline int discover_devices(topology& t, const discover_options& o = {}) {
  cuda_runtime_report cuda;
  if (o.cuda) cuda = query_cuda_runtime(o);
  const std::vector<std::string> listed = cuda.busids();
  if (o.pci) discover_pci(t, o, cuda.loaded ? &listed : nullptr);
  if (o.cuda) add_cuda_devices(t, cuda);
  if (o.nvml && !t.gpus().empty()) discover_nvlinks_nvml(t, o);
  return static_cast<int>(t.gpus().size());
}

/// The live machine: discover_cpus, then discover_devices as `o` asks.
/// @throws collx::error(system) as discover_cpus does.
inline topology discover(const discover_options& o = {}) {
  topology t = discover_cpus(o);
  discover_devices(t, o);
  return t;
}

#if defined(COLLX_TOPO_HAVE_HWLOC)
/// The CPU part of the machine from hwloc (NUMA nodes with their cpusets, packages and the CPU
/// model hwloc reports: CPUVendor, CPUFamilyNumber, CPUModelNumber; hwloc 2), instead of sysfs:
/// the same vertices and links as discover_cpus, the CPUs this process may not use included (as
/// sysfs lists them).
/// Only with COLLX_TOPO_USE_HWLOC defined and hwloc linked.
/// @throws collx::error(system) if hwloc fails.
inline topology discover_cpus_hwloc() {
  hwloc_topology_t h;
  if (hwloc_topology_init(&h) != 0) COLLX_THROW(errc::system, "hwloc: cannot initialise a topology");
  if (hwloc_topology_set_flags(h, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) != 0 || hwloc_topology_load(h) != 0) {
    hwloc_topology_destroy(h);
    COLLX_THROW(errc::system, "hwloc: cannot load the topology");
  }
  topology t;
  t.source = "hwloc";
  const auto info = [](hwloc_obj_t o, const char* name) -> std::string {
    const char* v = o ? hwloc_obj_get_info_by_name(o, name) : nullptr;
    return v ? v : "";
  };
  const int n = hwloc_get_nbobjs_by_type(h, HWLOC_OBJ_NUMANODE);
  std::vector<int> ids;
  std::string vendor;
  int family = 0, model = 0;
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
    if (!pkg && !v.cores.empty())  // a NUMA node attached above the packages: the package of its first CPU
      pkg = hwloc_get_ancestor_obj_by_type(h, HWLOC_OBJ_PACKAGE, hwloc_get_pu_obj_by_os_index(h, static_cast<unsigned>(v.cores.front())));
    if (pkg) v.socket = static_cast<int>(pkg->os_index);
    if (vendor.empty() && pkg) {
      vendor = info(pkg, "CPUVendor");
      family = std::atoi(info(pkg, "CPUFamilyNumber").c_str());
      model = std::atoi(info(pkg, "CPUModelNumber").c_str());
    }
    ids.push_back(t.add_vertex(v));
  }
  hwloc_topology_destroy(h);
  for (int id : ids) {
    vertex& v = t.vertices[static_cast<std::size_t>(id)];
    v.cpu_vendor = vendor, v.cpu_family = family, v.cpu_model = model;
  }
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j) t.add_link(make_smp(ids[i], ids[j], smp_GBps(vendor, family, model)));
  return t;
}
#endif

}  // namespace topo
}  // namespace v0
}  // namespace collx
