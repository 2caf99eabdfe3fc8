/// @file topo/topology.hpp
/// The topology model: a graph of GPUs, NICs, CPUs (NUMA nodes), PCIe switches, host bridges,
/// NVSwitches and the network fabric, joined by typed links (NVLink of a generation and link count,
/// PCIe of a generation and width, the CPU-to-CPU interconnect, network ports) that carry
/// per-direction bandwidth figures. Path classes between two devices (X, NV#, PIX, PXB, PHB, NODE,
/// SYS, NET) are computed from the graph the way `nvidia-smi topo -m` reports them.
///
/// Units everywhere in collx::topo: bandwidth in GB/s (10^9 bytes per second) per direction,
/// network port speeds in Gb/s, times in seconds, sizes in bytes.
///
/// Where the numbers come from (each table below repeats its source):
/// - Per-link signalling rates: NVIDIA's P100/V100/A100/A40/H100/B200 datasheets and the PCI-SIG
///   base specifications (transfer rate x lanes x line-code efficiency).
/// - What a collective actually reaches on a link ("achievable"): NCCL's own per-link assumptions
///   in src/graph/topo.h (e.g. SM80_NVLINK_BW 20 GB/s per A100 link, PCI_BW 12 GB/s for Gen3 x16,
///   NET_BW 12 GB/s for 100 Gb/s). collx stores the datasheet figure and the achievable fraction
///   separately so either can be inspected.
/// - Host-staged copies (peer access disabled) have no datasheet figure: see host_staged_GBps().
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collx/error.hpp>
#include <collx/topo/smp_link.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

// ---------------------------------------------------------------------------------------------
// Hardware figures

/// PCIe bandwidth of one lane in one direction, GB/s, for generation `gen` (1-6); 0 if unknown.
/// Transfer rate x line code / 8 bits, from the PCI-SIG base specifications: Gen1 2.5 GT/s and Gen2
/// 5 GT/s with 8b/10b; Gen3 8, Gen4 16, Gen5 32 GT/s with 128b/130b; Gen6 64 GT/s PAM4 with 242/256
/// FLIT efficiency. x16: Gen3 15.75, Gen4 31.5, Gen5 63.0 GB/s.
constexpr double pcie_lane_GBps(int gen) noexcept {
  switch (gen) {
    case 1: return 2.5 * 0.8 / 8;
    case 2: return 5.0 * 0.8 / 8;
    case 3: return 8.0 * 128.0 / 130.0 / 8;
    case 4: return 16.0 * 128.0 / 130.0 / 8;
    case 5: return 32.0 * 128.0 / 130.0 / 8;
    case 6: return 64.0 * 242.0 / 256.0 / 8;
    default: return 0.0;
  }
}

/// Fraction of the PCIe signalling rate a collective reaches: NCCL assumes 12 GB/s for Gen3 x16
/// (PCI_BW in src/graph/topo.h) against 15.75 GB/s on the wire, 0.762; applied to every generation
/// (TLP headers and flow control cost the same fraction at any rate).
inline constexpr double pcie_efficiency = 12.0 / (8.0 * 128.0 / 130.0 / 8 * 16);

/// Fraction of a network port's line rate a collective reaches: NCCL's NET_BW is 12 GB/s for a
/// 100 Gb/s port (12.5 GB/s), 0.96.
inline constexpr double network_efficiency = 12.0 / 12.5;

/// One GPU model: its NVLink generation and per-link rate, how many NVLinks it has, its PCIe
/// generation, and the fraction of the NVLink rate NCCL assumes a collective reaches.
struct gpu_arch {
  std::string_view name;        ///< "A100", "H100", ...
  int sm = 0;                   ///< compute capability x10 (80 for sm_80)
  int nvlink_generation = 0;    ///< 0: no NVLink
  double nvlink_GBps = 0;       ///< per link, per direction, datasheet
  int max_nvlinks = 0;          ///< NVLinks per GPU
  double nvlink_efficiency = 0; ///< NCCL's SMxx_NVLINK_BW / nvlink_GBps
  int pcie_gen = 0;             ///< host interface generation (x16)
  std::string_view source;      ///< where the figures come from
};

/// The GPU models collx knows. Per-link rates are the datasheet's total NVLink bandwidth divided by
/// the link count and by 2 (datasheets quote both directions together); efficiencies are NCCL's
/// per-SM NVLink constants (src/graph/topo.h: SM60 18, SM70 20, SM80 20, SM86 12, SM90 20.6,
/// SM100 40.1 GB/s per link) divided by that rate.
inline constexpr gpu_arch known_gpu_archs[] = {
    {"P100", 60, 1, 20.0, 4, 18.0 / 20.0, 3, "Tesla P100 datasheet: NVLink 160 GB/s over 4 links"},
    {"V100", 70, 2, 25.0, 6, 20.0 / 25.0, 3, "Tesla V100 datasheet: NVLink 300 GB/s over 6 links"},
    {"A100", 80, 3, 25.0, 12, 20.0 / 25.0, 4, "A100 datasheet: NVLink 600 GB/s over 12 links"},
    {"A800", 80, 3, 25.0, 8, 20.0 / 25.0, 4, "A800 datasheet: NVLink 400 GB/s over 8 links"},
    {"A40", 86, 3, 14.0625, 4, 12.0 / 14.0625, 4,
     "A40 datasheet: NVLink bridge 112.5 GB/s bidirectional over 4 links"},
    {"A10G", 86, 0, 0.0, 0, 0.0, 4, "A10G: no NVLink, PCIe Gen4 x16"},
    {"H100", 90, 4, 25.0, 18, 20.6 / 25.0, 5, "H100 SXM datasheet: NVLink 900 GB/s over 18 links"},
    {"H800", 90, 4, 25.0, 8, 20.6 / 25.0, 5, "H800 SXM: NVLink 400 GB/s over 8 links"},
    {"H200", 90, 4, 25.0, 18, 20.6 / 25.0, 5, "H200 SXM datasheet: NVLink 900 GB/s over 18 links"},
    {"B200", 100, 5, 50.0, 18, 40.1 / 50.0, 5, "DGX B200 datasheet: NVLink 1.8 TB/s per GPU over 18 links"},
};

/// Stand-in for a GPU whose model is not known: A100-like NVLink and PCIe Gen4 (the readers add a
/// note to the topology whenever they use it).
inline constexpr gpu_arch unknown_gpu_arch{"unknown", 0, 3, 25.0, 12, 0.8, 4, "unknown GPU: A100-like figures assumed"};

/// The known GPU model called `name` (case-insensitive, e.g. "a100", "H100"), or nullptr.
inline const gpu_arch* find_gpu_arch(std::string_view name) noexcept {
  for (const gpu_arch& a : known_gpu_archs) {
    if (a.name.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) {
      char c = name[i];
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      same = c == a.name[i];
    }
    if (same) return &a;
  }
  return nullptr;
}

/// The first known GPU model with compute capability `sm` (x10: 70, 80, 90, ...), or nullptr.
inline const gpu_arch* gpu_arch_for_sm(int sm) noexcept {
  for (const gpu_arch& a : known_gpu_archs)
    if (a.sm == sm) return &a;
  return nullptr;
}

/// The GPU model of an NVIDIA PCI device id (NCCL XML `device=` attribute), or nullptr. Ids from
/// the PCI ID Repository (pci-ids.ucw.cz, vendor 10de).
inline const gpu_arch* gpu_arch_for_pci_device(unsigned device) noexcept {
  switch (device) {
    case 0x15f8: case 0x15f9: return find_gpu_arch("P100");
    case 0x1db1: case 0x1db4: case 0x1db5: case 0x1db6: return find_gpu_arch("V100");
    case 0x20b0: case 0x20b2: case 0x20b5: case 0x20f1: return find_gpu_arch("A100");
    case 0x2235: return find_gpu_arch("A40");
    case 0x2237: return find_gpu_arch("A10G");
    case 0x2330: case 0x2331: return find_gpu_arch("H100");
    case 0x2335: return find_gpu_arch("H200");  // H200 SXM 141GB (seen on a live H200: device 0x2335)
    default: return nullptr;
  }
}

/// GPU-to-GPU bandwidth, GB/s per direction, when peer access is off (NCCL_P2P_DISABLE=1 or a path
/// beyond the peer-access limit) and every byte is staged through host memory: written by one GPU
/// over PCIe, read by the other. No datasheet gives this (it depends on how many SMs copy, the
/// IOMMU, the memory controller); these are CALIBRATED on the P2P-disabled nccl-tests tables in
/// tests/data/topologies (see SOURCES.md), so predictions that use them are fits, not forecasts:
/// - Gen4, same NUMA node / socket: 4.57 = geometric mean of 8x A40 (GPUs 1,2, NODE) 4.02 and
///   DGX A100 (GPUs 4-7) 5.20.
/// - Gen4, across sockets: 1.44, 8x A40 GPUs 0,1,6,7.
/// - Gen5, same socket: 24.3, DGX H100 4 GPUs (peak 24.27).
/// - Gen5 across sockets and Gen3: extrapolated (Gen5 x Gen4's cross/same ratio; Gen3 = Gen4 / 2).
inline double host_staged_GBps(int pcie_gen, bool cross_socket) noexcept {
  const double same4 = 4.572, cross4 = 1.44, same5 = 24.3;
  if (pcie_gen >= 5) return cross_socket ? same5 * cross4 / same4 : same5;
  if (pcie_gen == 4 || pcie_gen == 0) return cross_socket ? cross4 : same4;
  return (cross_socket ? cross4 : same4) / 2;
}

// ---------------------------------------------------------------------------------------------
// The graph

/// What a vertex of the topology is.
enum class vertex_kind : std::uint8_t {
  gpu,          ///< a GPU
  nic,          ///< a network port (NIC)
  cpu,          ///< a NUMA node of a CPU socket (the root of its PCIe trees; its memory)
  pci_switch,   ///< a PCIe switch or bridge
  host_bridge,  ///< a PCIe host bridge (root complex) shared by several devices
  nvswitch,     ///< the NVSwitch fabric of one machine (all its NVSwitch chips as one vertex, as NCCL does)
  fabric,       ///< the network between machines (a non-blocking switch)
};

/// Name of a vertex kind ("GPU", "NIC", "CPU", "PCI", "PHB", "NVS", "NET").
constexpr std::string_view vertex_kind_name(vertex_kind k) noexcept {
  switch (k) {
    case vertex_kind::gpu: return "GPU";
    case vertex_kind::nic: return "NIC";
    case vertex_kind::cpu: return "CPU";
    case vertex_kind::pci_switch: return "PCI";
    case vertex_kind::host_bridge: return "PHB";
    case vertex_kind::nvswitch: return "NVS";
    case vertex_kind::fabric: return "NET";
  }
  return "?";
}

/// What a link is.
enum class link_kind : std::uint8_t {
  nvlink,    ///< `count` bonded NVLinks of `generation` (GPU-GPU or GPU-NVSwitch)
  pcie,      ///< PCIe of `generation` and `width` lanes (device-switch, switch-switch, switch-CPU)
  smp,       ///< CPU-to-CPU interconnect between NUMA nodes (QPI, UPI, Infinity Fabric)
  network,   ///< a NIC's port to the network fabric
  internal,  ///< inside a chip (host bridge to its CPU): never a bottleneck
};

/// Name of a link kind ("NVLink", "PCIe", "SMP", "NET", "internal").
constexpr std::string_view link_kind_name(link_kind k) noexcept {
  switch (k) {
    case link_kind::nvlink: return "NVLink";
    case link_kind::pcie: return "PCIe";
    case link_kind::smp: return "SMP";
    case link_kind::network: return "NET";
    case link_kind::internal: return "internal";
  }
  return "?";
}

/// How two devices are connected, in `nvidia-smi topo -m` terms (best first).
enum class path_type : std::uint8_t {
  self,     ///< X: the same device
  nvlink,   ///< NV#: a bonded set of NVLinks, direct or through NVSwitch
  pix,      ///< at most one PCIe bridge
  pxb,      ///< several PCIe bridges, no host bridge
  phb,      ///< a PCIe host bridge
  node,     ///< PCIe and the interconnect between host bridges within a NUMA node
  sys,      ///< PCIe and the SMP interconnect between NUMA nodes
  net,      ///< different machines: through the network
  unknown,  ///< not known (an elided `...` cell)
};

/// The matrix abbreviation of a path type ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NET", "?").
constexpr std::string_view path_type_name(path_type t) noexcept {
  switch (t) {
    case path_type::self: return "X";
    case path_type::nvlink: return "NV";
    case path_type::pix: return "PIX";
    case path_type::pxb: return "PXB";
    case path_type::phb: return "PHB";
    case path_type::node: return "NODE";
    case path_type::sys: return "SYS";
    case path_type::net: return "NET";
    case path_type::unknown: return "?";
  }
  return "?";
}

/// The class of a path between two devices.
struct path_info {
  path_type type = path_type::unknown;  ///< the path's class (nvidia-smi topo -m's legend)
  int nvlinks = 0;             ///< nvlink: links in the bond (for NVSwitch: the fewer of the two GPUs' links)
  bool via_nvswitch = false;   ///< nvlink: through the NVSwitch fabric
  /// The matrix cell: "X", "NV12", "PIX", ...
  std::string cell() const {
    return type == path_type::nvlink ? "NV" + std::to_string(nvlinks) : std::string(path_type_name(type));
  }
};

/// A vertex of the topology.
struct vertex {
  vertex_kind kind = vertex_kind::gpu;  ///< what the vertex is
  std::string name;           ///< "GPU0", "NIC1", "CPU0", "PCI 0000:03:00.0", "NVSwitch", "network"
  std::string busid;          ///< PCI bus id, lower case (dddd:bb:dd.f); empty when not known
  int index = -1;             ///< gpu: device index (CUDA / NCCL dev); nic: NIC index; cpu: NUMA node id
  int host = 0;               ///< machine; 0 on a one-machine topology; -1 for the network fabric
  int parent = -1;            ///< PCIe tree parent (pci_switch, host_bridge or cpu); -1 at a root
  const gpu_arch* arch = nullptr;  ///< gpu: its model (never null for a gpu vertex made by collx's readers)
  double nic_Gbps = 0;        ///< nic: port speed in Gb/s; 0 = unknown
  std::string device;         ///< nic: OS name (mlx5_0, rdmap79s0, eth0); gpu: model name if reported
  std::string cpu_affinity;   ///< cpu: its CPUs as a list ("0-31,64-95"); gpu/nic: as reported
  std::string numa_affinity;  ///< gpu/nic: NUMA affinity as reported by nvidia-smi ("0", "N/A")
  std::string cpu_vendor;     ///< cpu: "GenuineIntel", "AuthenticAMD", ...
  int cpu_family = 0;         ///< cpu: family id
  int cpu_model = 0;          ///< cpu: model id
  int socket = -1;            ///< cpu: physical package (discovery); -1 unknown
  std::vector<int> cores;     ///< cpu: logical CPU numbers (discovery)
};

/// A link between two vertices; the same bandwidth in each direction.
struct link {
  int a = -1;                 ///< one end (vertex id)
  int b = -1;                 ///< the other end
  link_kind kind = link_kind::pcie;  ///< what joins the two ends
  int count = 1;              ///< nvlink: bonded links
  int generation = 0;         ///< NVLink generation (1-5) or PCIe generation (1-6); 0 unknown
  int width = 0;              ///< pcie: lanes
  double spec_GBps = 0;       ///< datasheet rate, GB/s per direction (0 where none exists)
  double GBps = 0;            ///< what a collective reaches, GB/s per direction: what the model uses
  std::string origin;         ///< where the figure comes from
};

/// What the CUDA runtime reported for one ordered pair of GPUs (cudaDeviceCanAccessPeer and
/// cudaDeviceGetP2PAttribute). Discovery fills these (discover.hpp); the file readers leave them
/// empty, and then peer access is assumed wherever routing allows it.
struct peer_info {
  int from = -1;                ///< GPU vertex id that accesses ...
  int to = -1;                  ///< ... this GPU's memory
  bool access = false;          ///< cudaDeviceCanAccessPeer(from, to) == 1 (and cudaDevP2PAttrAccessSupported)
  bool native_atomics = false;  ///< cudaDevP2PAttrNativeAtomicSupported == 1
  int performance_rank = -1;    ///< cudaDevP2PAttrPerformanceRank (0: the machine's best link); -1 not known
};

/// An NVLink bond of `count` links of GPU model `arch`, per direction: datasheet rate x count and
/// NCCL's achievable fraction.
inline link make_nvlink(int a, int b, const gpu_arch& arch, int count) {
  link l;
  l.a = a, l.b = b, l.kind = link_kind::nvlink, l.count = count, l.generation = arch.nvlink_generation;
  l.spec_GBps = arch.nvlink_GBps * count;
  l.GBps = l.spec_GBps * arch.nvlink_efficiency;
  l.origin = std::string(arch.source) + "; achievable per NCCL src/graph/topo.h";
  return l;
}

/// A PCIe link of generation `gen` and `width` lanes (gen 0 or width 0: Gen4 x16 is assumed; the
/// caller notes it).
inline link make_pcie(int a, int b, int gen, int width) {
  link l;
  l.a = a, l.b = b, l.kind = link_kind::pcie;
  l.generation = gen > 0 ? gen : 4;
  l.width = width > 0 ? width : 16;
  l.spec_GBps = pcie_lane_GBps(l.generation) * l.width;
  l.GBps = l.spec_GBps * pcie_efficiency;
  l.origin = "PCI-SIG Gen" + std::to_string(l.generation) + " x" + std::to_string(l.width) +
             "; achievable per NCCL PCI_BW";
  return l;
}

/// A CPU-to-CPU link with NCCL's achievable figure for that CPU (see smp_GBps).
inline link make_smp(int a, int b, double GBps) {
  link l;
  l.a = a, l.b = b, l.kind = link_kind::smp, l.GBps = GBps, l.spec_GBps = 0;
  l.origin = "NCCL src/graph/topo.h inter-CPU bandwidth";
  return l;
}

/// A NIC's port of `Gbps` to the fabric.
inline link make_network(int nic, int fabric, double Gbps) {
  link l;
  l.a = nic, l.b = fabric, l.kind = link_kind::network;
  l.spec_GBps = Gbps / 8.0;
  l.GBps = l.spec_GBps * network_efficiency;
  l.origin = "port speed; achievable per NCCL NET_BW (12 GB/s per 100 Gb/s)";
  return l;
}

/// A link inside a chip (never the bottleneck).
inline link make_internal(int a, int b) {
  link l;
  l.a = a, l.b = b, l.kind = link_kind::internal, l.GBps = 5000.0, l.spec_GBps = 0;
  l.origin = "on-chip (NCCL LOC_BW)";
  return l;
}

/// A machine (or several) as a graph. Plain data plus the adjacency it keeps; built by the readers
/// (nvidia_smi.hpp, nccl_xml.hpp), discovery (discover.hpp) or by hand with add_vertex/add_link.
class topology {
 public:
  std::vector<vertex> vertices;     ///< vertex id = index here
  std::vector<link> links;          ///< link id = index here
  std::vector<std::string> notes;   ///< every assumption a reader made (printed by collx-topo)
  std::string source;               ///< where it was read from (file name, "sysfs", ...)
  int hosts = 1;                    ///< number of machines
  int vertices_per_host = 0;        ///< made by make_cluster: host h owns vertex ids [h*this, (h+1)*this)
  int links_per_host = 0;           ///< made by make_cluster: host h owns link ids [h*this, (h+1)*this)
  /// Peer access between GPU pairs as the CUDA runtime reported it (discovery only; see peer_info).
  /// A pair recorded without access is host-staged by the router (routing.hpp) whatever its links.
  std::vector<peer_info> peers;

  /// The CUDA runtime's record for GPU vertex `from` accessing `to`, or nullptr if none was made.
  const peer_info* peer(int from, int to) const noexcept {
    for (const peer_info& p : peers)
      if (p.from == from && p.to == to) return &p;
    return nullptr;
  }

  /// Whether GPU vertices a and b may use peer access (loads and stores into each other's memory
  /// over NVLink or PCIe) in both directions: false if `peers` records either direction without
  /// access, true otherwise (also when nothing is recorded, as for topologies read from files).
  bool peer_access(int a, int b) const noexcept {
    const peer_info *ab = peer(a, b), *ba = peer(b, a);
    return (!ab || ab->access) && (!ba || ba->access);
  }

  /// Adds a vertex; returns its id.
  int add_vertex(vertex v) {
    vertices.push_back(std::move(v));
    adjacency_.emplace_back();
    return static_cast<int>(vertices.size()) - 1;
  }

  /// Adds a link; returns its id. @throws collx::error(invalid_argument) for an end that is not a
  /// vertex, a link from a vertex to itself, or a bandwidth that is not positive.
  int add_link(link l) {
    const int n = static_cast<int>(vertices.size());
    if (l.a < 0 || l.a >= n || l.b < 0 || l.b >= n || l.a == l.b)
      COLLX_THROW(errc::invalid_argument, "topology: bad link ends " + std::to_string(l.a) + "-" + std::to_string(l.b));
    if (!(l.GBps > 0)) COLLX_THROW(errc::invalid_argument, "topology: link without bandwidth");
    links.push_back(std::move(l));
    const int id = static_cast<int>(links.size()) - 1;
    adjacency_[static_cast<std::size_t>(links.back().a)].push_back(id);
    adjacency_[static_cast<std::size_t>(links.back().b)].push_back(id);
    return id;
  }

  /// Ids of the links that touch vertex v.
  const std::vector<int>& incident(int v) const { return adjacency_.at(static_cast<std::size_t>(v)); }

  /// The vertex at the other end of link l from v.
  int other(int l, int v) const {
    const link& k = links.at(static_cast<std::size_t>(l));
    return k.a == v ? k.b : k.a;
  }

  /// Vertex ids of every vertex of `kind` (on `host`, or every host when -1), ordered by host, then
  /// index, then id.
  std::vector<int> of_kind(vertex_kind kind, int host = -1) const {
    std::vector<int> out;
    auto scan = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i)
        if (vertices[i].kind == kind && (host < 0 || vertices[i].host == host)) out.push_back(static_cast<int>(i));
    };
    const std::size_t V = static_cast<std::size_t>(vertices_per_host), laid_out = V * static_cast<std::size_t>(hosts);
    if (host >= 0 && host < hosts && V > 0 && laid_out <= vertices.size()) {
      // A cluster (make_cluster): the host's own block, then whatever was added after the blocks.
      // Asking host by host stays linear in the cluster's size (simulate asks for every host's NICs).
      scan(static_cast<std::size_t>(host) * V, static_cast<std::size_t>(host + 1) * V);
      scan(laid_out, vertices.size());
    } else {
      scan(0, vertices.size());
    }
    std::stable_sort(out.begin(), out.end(), [&](int x, int y) {
      const vertex &a = vertices[static_cast<std::size_t>(x)], &b = vertices[static_cast<std::size_t>(y)];
      return a.host != b.host ? a.host < b.host : a.index < b.index;
    });
    return out;
  }
  /// GPUs (see of_kind).
  std::vector<int> gpus(int host = -1) const { return of_kind(vertex_kind::gpu, host); }
  /// NICs (see of_kind).
  std::vector<int> nics(int host = -1) const { return of_kind(vertex_kind::nic, host); }

  /// The vertex id of GPU `index` on `host`. @throws collx::error(invalid_argument) if there is none.
  int gpu(int index, int host = 0) const {
    for (std::size_t i = 0; i < vertices.size(); ++i)
      if (vertices[i].kind == vertex_kind::gpu && vertices[i].index == index && vertices[i].host == host)
        return static_cast<int>(i);
    COLLX_THROW(errc::invalid_argument, "topology: no GPU " + std::to_string(index) + " on host " + std::to_string(host));
  }

  /// The CPU (NUMA node) vertex at the root of v's PCIe tree, v itself for a CPU, -1 if none.
  int cpu_of(int v) const {
    int guard = 0;
    while (v >= 0 && vertices[static_cast<std::size_t>(v)].kind != vertex_kind::cpu && guard++ < 64)
      v = vertices[static_cast<std::size_t>(v)].parent;
    return v >= 0 && vertices[static_cast<std::size_t>(v)].kind == vertex_kind::cpu ? v : -1;
  }

  /// The link between a and its PCIe parent, -1 if none.
  int parent_link(int a) const {
    const int p = vertices.at(static_cast<std::size_t>(a)).parent;
    if (p < 0) return -1;
    for (int l : incident(a))
      if (other(l, a) == p && links[static_cast<std::size_t>(l)].kind != link_kind::nvlink) return l;
    return -1;
  }

  /// The direct link of `kind` between a and b, -1 if none.
  int link_between(int a, int b, link_kind kind) const {
    for (int l : incident(a))
      if (other(l, a) == b && links[static_cast<std::size_t>(l)].kind == kind) return l;
    return -1;
  }

  /// NVLinks from GPU a to the NVSwitch fabric of its host (0 if none) and that vertex (or -1).
  std::pair<int, int> nvswitch_links(int a) const {
    for (int l : incident(a)) {
      const int o = other(l, a);
      if (vertices[static_cast<std::size_t>(o)].kind == vertex_kind::nvswitch && links[static_cast<std::size_t>(l)].kind == link_kind::nvlink)
        return {links[static_cast<std::size_t>(l)].count, o};
    }
    return {0, -1};
  }

  /// PCIe class between two devices (ignoring NVLink): PIX, PXB, PHB, NODE, SYS, NET, or unknown
  /// when either is outside every PCIe tree.
  path_type pcie_class(int a, int b) const {
    if (a == b) return path_type::self;
    const vertex &va = vertices.at(static_cast<std::size_t>(a)), &vb = vertices.at(static_cast<std::size_t>(b));
    if (va.host != vb.host) return path_type::net;
    const std::vector<int> ua = ancestors(a), ub = ancestors(b);
    if (ua.empty() || ub.empty()) return path_type::unknown;
    if (ua.back() != ub.back()) {
      const bool cpus = vertices[static_cast<std::size_t>(ua.back())].kind == vertex_kind::cpu &&
                        vertices[static_cast<std::size_t>(ub.back())].kind == vertex_kind::cpu;
      return cpus ? path_type::sys : path_type::unknown;
    }
    // Lowest common ancestor, and the bridges on the way there.
    int lca = -1;
    std::size_t ia = 0, ib = 0;
    for (std::size_t i = 0; i < ua.size() && lca < 0; ++i)
      for (std::size_t j = 0; j < ub.size(); ++j)
        if (ua[i] == ub[j]) { lca = ua[i], ia = i, ib = j; break; }
    const vertex_kind k = vertices[static_cast<std::size_t>(lca)].kind;
    if (k == vertex_kind::cpu) return path_type::node;
    if (k == vertex_kind::host_bridge) return path_type::phb;
    int bridges = 0;
    for (std::size_t i = 0; i <= ia; ++i) bridges += vertices[static_cast<std::size_t>(ua[i])].kind == vertex_kind::pci_switch;
    for (std::size_t j = 0; j < ib; ++j) bridges += vertices[static_cast<std::size_t>(ub[j])].kind == vertex_kind::pci_switch;
    return bridges <= 1 ? path_type::pix : path_type::pxb;
  }

  /// The class of the best path between devices a and b as `nvidia-smi topo -m` shows it: X, NV#
  /// (direct NVLinks, or both GPUs on the NVSwitch fabric), else the PCIe class.
  path_info classify(int a, int b) const {
    if (a == b) return {path_type::self, 0, false};
    int direct = 0;
    for (int l : incident(a))
      if (other(l, a) == b && links[static_cast<std::size_t>(l)].kind == link_kind::nvlink)
        direct += links[static_cast<std::size_t>(l)].count;
    const auto [sa, va] = nvswitch_links(a);
    const auto [sb, vb] = nvswitch_links(b);
    const int switched = (va >= 0 && va == vb) ? std::min(sa, sb) : 0;
    if (direct > 0 || switched > 0) return {path_type::nvlink, std::max(direct, switched), switched > direct};
    return {pcie_class(a, b), 0, false};
  }

 private:
  // v's PCIe ancestors, nearest first, ending at the root (excluding v). Empty when v has no parent.
  std::vector<int> ancestors(int v) const {
    std::vector<int> out;
    int p = vertices[static_cast<std::size_t>(v)].parent;
    while (p >= 0 && out.size() < 64) {
      out.push_back(p);
      p = vertices[static_cast<std::size_t>(p)].parent;
    }
    return out;
  }

  std::vector<std::vector<int>> adjacency_;
};

// ---------------------------------------------------------------------------------------------
// Helpers the readers and tools share

/// Adds an NVSwitch fabric to every host that has none and links each GPU on it with `links_per_gpu`
/// NVLinks of its model (e.g. 12 for HGX A100, 18 for HGX H100: every GPU's links go to the
/// NVSwitches). For NCCL topology files written without NVLink elements (AWS p4d/p5 static files).
/// Adds a note (and drops the reader's note that no NVLink was listed). @throws collx::error(invalid_argument) if links_per_gpu < 1,
/// a GPU has no NVLink, or links_per_gpu is more than a known GPU model has (gpu_arch::max_nvlinks).
inline void add_nvswitch(topology& t, int links_per_gpu) {
  if (links_per_gpu < 1) COLLX_THROW(errc::invalid_argument, "add_nvswitch: links_per_gpu must be >= 1");
  for (int h = 0; h < t.hosts; ++h) {
    const std::vector<int> g = t.gpus(h);
    if (g.empty() || !t.of_kind(vertex_kind::nvswitch, h).empty()) continue;
    vertex s;
    s.kind = vertex_kind::nvswitch, s.name = "NVSwitch", s.host = h;
    const int sw = t.add_vertex(s);
    for (int v : g) {
      const gpu_arch& a = *t.vertices[static_cast<std::size_t>(v)].arch;
      if (a.nvlink_generation == 0)
        COLLX_THROW(errc::invalid_argument, "add_nvswitch: " + std::string(a.name) + " has no NVLink");
      if (a.max_nvlinks > 0 && links_per_gpu > a.max_nvlinks)
        COLLX_THROW(errc::invalid_argument, "add_nvswitch: " + std::string(a.name) + " GPUs have at most " +
                                                std::to_string(a.max_nvlinks) + " NVLinks, not " + std::to_string(links_per_gpu));
      t.add_link(make_nvlink(v, sw, a, links_per_gpu));
    }
  }
  // The reader's "no NVLink listed ... PCIe only assumed" note (nccl_xml.hpp) no longer holds.
  std::erase_if(t.notes, [](const std::string& n) { return n.starts_with("no NVLink listed"); });
  t.notes.push_back("NVSwitch fabric added: " + std::to_string(links_per_gpu) + " NVLinks per GPU (given, not read)");
}

/// Sets the port speed of every NIC whose speed is unknown (e.g. NCCL files that list NICs only as
/// PCI devices) to `Gbps`, and adds a note. @throws collx::error(invalid_argument) if Gbps <= 0.
inline void set_unknown_nic_speed(topology& t, double Gbps) {
  if (!(Gbps > 0)) COLLX_THROW(errc::invalid_argument, "set_unknown_nic_speed: speed must be > 0 Gb/s");
  int n = 0;
  for (vertex& v : t.vertices)
    if (v.kind == vertex_kind::nic && !(v.nic_Gbps > 0)) v.nic_Gbps = Gbps, ++n;
  if (n) t.notes.push_back(std::to_string(n) + " NIC(s) of unknown speed set to " + std::to_string(static_cast<int>(Gbps)) + " Gb/s (given)");
}

/// `nodes` copies of the one-machine topology `node`, their NICs joined by a non-blocking network
/// fabric (one `fabric` vertex; each NIC's port is a network link of its speed). Host h's vertices
/// are ids [h*V, (h+1)*V) with V = node.vertices.size(), in the same order as in `node`.
/// @throws collx::error(invalid_argument) if nodes < 1, node has several hosts, or a NIC's speed is
/// unknown (set it with set_unknown_nic_speed) or there is no NIC at all when nodes > 1.
inline topology make_cluster(const topology& node, int nodes) {
  if (nodes < 1) COLLX_THROW(errc::invalid_argument, "make_cluster: nodes must be >= 1");
  if (node.hosts != 1) COLLX_THROW(errc::invalid_argument, "make_cluster: the node topology must describe one machine");
  topology t;
  t.source = node.source + (nodes > 1 ? " x" + std::to_string(nodes) + " nodes" : "");
  t.notes = node.notes;
  t.hosts = nodes;
  t.vertices_per_host = static_cast<int>(node.vertices.size());
  t.links_per_host = static_cast<int>(node.links.size());
  const int V = t.vertices_per_host;
  for (int h = 0; h < nodes; ++h) {
    for (vertex v : node.vertices) {
      v.host = h;
      if (v.parent >= 0) v.parent += h * V;
      t.add_vertex(std::move(v));
    }
    for (link l : node.links) {
      l.a += h * V, l.b += h * V;
      t.add_link(std::move(l));
    }
    for (peer_info p : node.peers) {
      p.from += h * V, p.to += h * V;
      t.peers.push_back(p);
    }
  }
  if (nodes > 1) {
    const std::vector<int> nics = node.nics();
    if (nics.empty())
      COLLX_THROW(errc::invalid_argument, "make_cluster: the node has no NIC to join nodes with (a topology without NICs "
                                          "models one node: an nvidia-smi paste without NIC columns, for example)");
    for (int n : nics)
      if (!(node.vertices[static_cast<std::size_t>(n)].nic_Gbps > 0))
        COLLX_THROW(errc::invalid_argument, "make_cluster: NIC " + node.vertices[static_cast<std::size_t>(n)].name +
                                                " has no known speed (set it: set_unknown_nic_speed, collx-topo --nic-gbps)");
    vertex f;
    f.kind = vertex_kind::fabric, f.name = "network", f.host = -1;
    const int fab = t.add_vertex(f);
    for (int h = 0; h < nodes; ++h)
      for (int n : nics) t.add_link(make_network(n + h * V, fab, node.vertices[static_cast<std::size_t>(n)].nic_Gbps));
    t.notes.push_back("nodes joined by a non-blocking network (full bisection bandwidth assumed)");
  }
  return t;
}

/// A synthetic HGX/DGX-style machine: `gpus` GPUs of model `arch` on one NVSwitch fabric with
/// `nvlinks` links each (0: no NVSwitch; at most arch.max_nvlinks, else invalid_argument), two CPUs (Skylake-class SMP link) with half the GPUs each,
/// and per GPU a PCIe switch holding that GPU and `nics_per_gpu` NICs of `nic_Gbps` (GPU and switch
/// links at the model's PCIe generation x16). What `collx-topo simulate` scales up.
/// @throws collx::error(invalid_argument) for gpus < 1 or nvlinks > 0 on a model without NVLink.
inline topology make_hgx_node(const gpu_arch& arch, int gpus = 8, int nvlinks = 18, int nics_per_gpu = 1, double nic_Gbps = 400) {
  if (gpus < 1) COLLX_THROW(errc::invalid_argument, "make_hgx_node: gpus must be >= 1");
  topology t;
  t.source = "synthetic " + std::to_string(gpus) + "x " + std::string(arch.name) + " node";
  const int cpus = gpus > 1 ? 2 : 1;
  std::vector<int> cpu;
  for (int c = 0; c < cpus; ++c) {
    vertex v;
    v.kind = vertex_kind::cpu, v.index = c, v.name = "CPU" + std::to_string(c), v.cpu_vendor = "GenuineIntel", v.cpu_family = 6, v.cpu_model = 0x8F;
    cpu.push_back(t.add_vertex(v));
  }
  if (cpus == 2) t.add_link(make_smp(cpu[0], cpu[1], smp_GBps("GenuineIntel", 6, 0x8F)));
  std::vector<int> g;
  int nic_no = 0;
  for (int i = 0; i < gpus; ++i) {
    const int c = cpu[static_cast<std::size_t>(i * cpus / gpus)];
    vertex s;
    s.kind = vertex_kind::pci_switch, s.name = "PCIe switch " + std::to_string(i), s.parent = c;
    const int sw = t.add_vertex(s);
    t.add_link(make_pcie(sw, c, arch.pcie_gen, 16));
    vertex v;
    v.kind = vertex_kind::gpu, v.index = i, v.name = "GPU" + std::to_string(i), v.arch = &arch, v.parent = sw;
    g.push_back(t.add_vertex(v));
    t.add_link(make_pcie(g.back(), sw, arch.pcie_gen, 16));
    for (int k = 0; k < nics_per_gpu; ++k) {
      vertex n;
      n.kind = vertex_kind::nic, n.index = nic_no, n.name = "NIC" + std::to_string(nic_no), n.device = "nic" + std::to_string(nic_no);
      n.parent = sw, n.nic_Gbps = nic_Gbps;
      ++nic_no;
      t.add_link(make_pcie(t.add_vertex(n), sw, arch.pcie_gen, 16));
    }
  }
  if (nvlinks > 0) {
    if (arch.nvlink_generation == 0) COLLX_THROW(errc::invalid_argument, "make_hgx_node: " + std::string(arch.name) + " has no NVLink");
    if (arch.max_nvlinks > 0 && nvlinks > arch.max_nvlinks)
      COLLX_THROW(errc::invalid_argument, "make_hgx_node: " + std::string(arch.name) + " GPUs have at most " +
                                              std::to_string(arch.max_nvlinks) + " NVLinks, not " + std::to_string(nvlinks));
    vertex s;
    s.kind = vertex_kind::nvswitch, s.name = "NVSwitch";
    const int sw = t.add_vertex(s);
    for (int v : g) t.add_link(make_nvlink(v, sw, arch, nvlinks));
  }
  return t;
}

/// A CPU list ("0-11,24-35") from a Linux/NCCL hexadecimal CPU mask ("0000,0fffff00,000fffff":
/// 32-bit words, most significant first). Returns "" for a mask that is not hexadecimal.
inline std::string cpulist_from_mask(std::string_view mask) {
  std::vector<bool> bits;
  for (auto it = mask.rbegin(); it != mask.rend(); ++it) {
    const char c = *it;
    if (c == ',') continue;
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return "";
    for (int b = 0; b < 4; ++b) bits.push_back((d >> b) & 1);
  }
  std::string out;
  for (std::size_t i = 0; i < bits.size();) {
    if (!bits[i]) { ++i; continue; }
    std::size_t j = i;
    while (j + 1 < bits.size() && bits[j + 1]) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(i);
    if (j > i) out += "-" + std::to_string(j);
    i = j + 1;
  }
  return out;
}

/// The most NVLinks the readers accept between two GPUs, or between a GPU and its NVSwitches: no GPU
/// has more than 18 (H100, B200); past this a count is a corrupt file, whose bandwidth products
/// would overflow.
inline constexpr int max_nvlink_count = 64;

/// CPU numbers parse_cpulist accepts are below this: no machine has more CPUs, and a range up to a
/// number past it (a typo, or a corrupt file) would take gigabytes.
inline constexpr int max_cpu_number = 1 << 16;

/// The CPU numbers of a CPU list ("0-3,8,10-11" -> 0 1 2 3 8 10 11), ascending, each once (a CPU
/// listed twice, as in "0-11,0-3", counts once). Returns an empty vector for text that is not a CPU
/// list, and for CPU numbers of max_cpu_number or more. Memory and time stay bounded by
/// max_cpu_number whatever the text repeats.
inline std::vector<int> parse_cpulist(std::string_view s) {
  std::vector<bool> listed(static_cast<std::size_t>(max_cpu_number), false);
  std::size_t i = 0;
  auto number = [&](int& v) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
    v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (s[i++] - '0');
      if (v >= max_cpu_number) return false;
    }
    return true;
  };
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  while (i < s.size()) {
    int lo, hi;
    if (!number(lo)) return {};
    hi = lo;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (!number(hi) || hi < lo) return {};
    }
    std::fill(listed.begin() + lo, listed.begin() + hi + 1, true);  // word at a time
    if (i < s.size() && s[i] == ',') ++i;
    else break;
  }
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r')) ++i;
  if (i != s.size()) return {};
  std::vector<int> out;
  for (int c = 0; c < max_cpu_number; ++c)
    if (listed[static_cast<std::size_t>(c)]) out.push_back(c);
  return out;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
