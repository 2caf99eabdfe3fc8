/// @file topo/nccl_xml.hpp
/// Readers for NCCL's XML files: the topology (NCCL_TOPO_FILE, or what NCCL_TOPO_DUMP_FILE writes:
/// `<system><cpu><pci><gpu><nvlink/></gpu></pci><nic><net/></nic></cpu></system>`) and the graph
/// dump (NCCL_GRAPH_DUMP_FILE / NCCL_GRAPH_FILE: `<graphs><graph ...><channel><net/><gpu dev/>...`),
/// which records the rings and trees NCCL chose.
///
/// Strict: an element this reader does not know, a missing required attribute, a number that is
/// not a number, an NVLink to a device that is not in the file, throw collx::error(invalid_argument)
/// naming `source:line:col`. Attributes it does not use are skipped. Every assumption it has to
/// make (a GPU model taken from a PCI id, an unknown PCIe speed, an NVLink to the GPU itself as the
/// Azure NC A100 v4 file has) is written to topology::notes.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collx/detail/c_locale.hpp>
#include <collx/topo/detail/xml.hpp>
#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// Options for the topology readers.
struct read_options {
  /// GPU model to use for every GPU, overriding what the file says or implies (nullptr: from the
  /// file: NCCL `sm=`, the PCI device id, or for `nvidia-smi` text the NVLink pattern).
  const gpu_arch* gpu = nullptr;
};

namespace detail {

/// Adds a note to a topology read from an NCCL topology file when its GPUs are of a known model
/// that comes on NVSwitch boards (12 or more NVLinks: A100, H100, H200, B200) but the file lists
/// no NVLink or NVSwitch at all: NCCL topology dumps of NVSwitch machines (AWS p4d/p4de, Azure
/// NDv4/NDv5) often leave NVLink out, and the model then routes every pair over PCIe (nvidia-smi
/// prints NVLinks where there are some, so its reader needs no such note); the fix is add_nvswitch
/// (collx-topo --nvswitch LINKS) where the machine has one.
inline void note_nvlink_not_listed(topology& t) {
  for (const link& l : t.links)
    if (l.kind == link_kind::nvlink) return;
  for (const vertex& v : t.vertices)
    if (v.kind == vertex_kind::nvswitch) return;
  for (int g : t.gpus()) {
    const gpu_arch* a = t.vertices[static_cast<std::size_t>(g)].arch;
    if (a && a != &unknown_gpu_arch && a->nvlink_generation > 0 && a->max_nvlinks >= 12) {
      t.notes.push_back("no NVLink listed, though the GPUs are " + std::string(a->name) + "s, which have up to " +
                        std::to_string(a->max_nvlinks) + " NVLinks (SXM form): PCIe only assumed; on a machine with " +
                        "NVSwitch (HGX/DGX) add it: collx-topo --nvswitch " + std::to_string(a->max_nvlinks) +
                        ", topo::add_nvswitch");
      return;
    }
  }
}

inline long parse_long(const xml_attribute& a, std::string_view src, int base = 10) {
  const std::string& v = a.value;
  if (v.empty()) fail_at(src, a.pos, "attribute '" + a.name + "' is empty, expected a number");
  char* end = nullptr;
  errno = 0;
  const long r = std::strtol(v.c_str(), &end, base);
  // All of the value: a NUL byte inside it would end strtol's read early, unnoticed.
  if (end == v.c_str() || end != v.c_str() + v.size()) fail_at(src, a.pos, "attribute '" + a.name + "'=\"" + v + "\" is not a number");
  // Every number of these files fits an int (counts, ids, speeds in Mb/s, 16-bit PCI ids).
  if (errno == ERANGE || r > 2147483647L || r < -2147483647L)
    fail_at(src, a.pos, "attribute '" + a.name + "'=\"" + v + "\" is out of range");
  return r;
}

/// parse_long, which must lie in [least, most] (device and NUMA ids, speeds, lane counts; in base
/// 16, PCI class and device ids, which are never negative).
inline int parse_in_range(const xml_attribute& a, std::string_view src, long least, long most, int base = 10) {
  const long r = parse_long(a, src, base);
  if (r < least || r > most) {
    auto shown = [base](long x) {
      if (base != 16) return std::to_string(x);
      char b[24];
      std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(x));
      return std::string(b);
    };
    fail_at(src, a.pos, "attribute '" + a.name + "'=\"" + a.value + "\" is outside " + shown(least) + " to " + shown(most));
  }
  return static_cast<int>(r);
}

/// A PCI class attribute (class, tclass) as a 24-bit class code. NCCL matches these strings by
/// prefix ("0x03" is any display controller, its placeholder for a GPU sysfs did not describe), so
/// fewer than six hex digits are the leading ones: "0x03" is 0x030000, "0x0302" 0x030200.
inline unsigned long parse_pci_class(const xml_attribute& a, std::string_view src) {
  const std::string& v = a.value;
  const std::size_t digits = v.size() > 2 ? v.size() - 2 : 0;
  if (v.size() < 3 || v[0] != '0' || (v[1] != 'x' && v[1] != 'X') || digits > 6 ||
      v.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos)
    fail_at(src, a.pos, "attribute '" + a.name + "'=\"" + v + "\" is not a PCI class (0x and up to 6 hex digits)");
  return std::strtoul(v.c_str() + 2, nullptr, 16) << (4 * (6 - digits));
}

inline double parse_double(const xml_attribute& a, std::string_view src) {
  const std::string& v = a.value;
  char* end = nullptr;
  const double r = collx::detail::strtod_c(v.c_str(), &end);
  if (v.empty() || end == v.c_str() || end != v.c_str() + v.size()) fail_at(src, a.pos, "attribute '" + a.name + "'=\"" + v + "\" is not a number");
  return r;
}

inline const xml_attribute& required(const xml_element& e, std::string_view n, std::string_view src) {
  const xml_attribute* a = e.find(n);
  if (!a) fail_at(src, e.pos, "<" + e.name + "> needs attribute '" + std::string(n) + "'");
  return *a;
}

inline std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

/// PCIe generation from an NCCL link_speed ("8 GT/s", "16.0 GT/s PCIe"); 0 (unknown) when empty
/// or "Unknown..." (what Linux prints, and NCCL copies, where the link's speed is not known).
inline int pcie_gen_from_speed(const xml_attribute& a, std::string_view src) {
  if (a.value.empty() || a.value.rfind("Unknown", 0) == 0) return 0;
  char* end = nullptr;
  const double gt = collx::detail::strtod_c(a.value.c_str(), &end);
  if (end == a.value.c_str()) fail_at(src, a.pos, "link_speed \"" + a.value + "\" is not a PCIe rate");
  // PCIe runs 2.5 (Gen1) to 64 GT/s (Gen6); anything far outside (0, inf, nan) is a broken file.
  if (!(gt >= 2 && gt <= 128))
    fail_at(src, a.pos, "link_speed \"" + a.value + "\" is outside 2 to 128 GT/s (PCIe runs 2.5 to 64)");
  if (gt < 3) return 1;
  if (gt < 6) return 2;
  if (gt < 12) return 3;
  if (gt < 24) return 4;
  if (gt < 48) return 5;
  return 6;
}

}  // namespace detail

/// Reads an NCCL topology XML file (text) into a one-machine topology. GPUs are named GPU<dev> by
/// their `<gpu dev=>` (or, for a GPU listed only as a PCI device, by order of appearance, noted);
/// NICs are NIC0, NIC1, ... in order of appearance with their OS name in vertex::device.
/// @param source name used in messages (the file name)
/// @throws collx::error(invalid_argument) naming source:line:col for input outside the format,
///         or more than 256 `<cpu>` elements.
inline topology read_nccl_topology(std::string_view text, std::string_view source = "<nccl-topo>", read_options opt = {}) {
  text = detail::utf8_text(text, source);
  using namespace detail;
  const xml_element root = parse_xml(text, source);
  if (root.name != "system")
    fail_at(source, root.pos, "expected <system> (an NCCL topology file), found <" + root.name + ">" +
                                  (root.name == "graphs" ? ": this is an NCCL graph file (read_nccl_graph)" : ""));
  topology t;
  t.source = std::string(source);
  struct pending_nvlink {
    int gpu;
    std::string target;
    int count;
    unsigned long tclass;
    text_pos pos;
  };
  std::vector<pending_nvlink> nvlinks;
  struct pending_c2c {
    int gpu, count, MBps_per_link;
    text_pos pos;
  };
  std::vector<pending_c2c> c2cs;
  std::map<std::string, int> by_busid;
  std::set<std::string> busids_seen;  // every <pci>'s, switches and NICs too: one device each
  int next_gpu_index = 0, nic_index = 0;
  bool gpu_index_assigned = false;

  auto add_nic = [&](int parent, const xml_element* net, const std::string& busid, link up) {
    vertex v;
    v.kind = vertex_kind::nic;
    v.index = nic_index++;
    v.name = "NIC" + std::to_string(v.index);
    v.busid = busid;
    v.parent = parent;
    if (net) {
      if (const xml_attribute* a = net->find("name")) v.device = a->value;
      if (const xml_attribute* a = net->find("speed")) v.nic_Gbps = parse_in_range(*a, source, 0, 100000000) / 1000.0;  // Mb/s
    }
    const int id = t.add_vertex(v);
    up.a = id, up.b = parent;
    t.add_link(up);
    return id;
  };

  // Walks one <pci> element under `parent`.
  auto walk_pci = [&](auto& self, const xml_element& e, int parent) -> void {
    const xml_attribute& bus = required(e, "busid", source);
    const std::string busid = lower(bus.value);
    if (busid.empty() || busid.find_first_not_of("0123456789abcdef:.") != std::string::npos)
      fail_at(source, bus.pos, "busid=\"" + bus.value + "\" is not a PCI bus id (domain:bus:device.function, hex)");
    if (!busids_seen.insert(busid).second) fail_at(source, bus.pos, "PCI bus id " + busid + " appears twice");
    int gen = 0, width = 0;
    if (const xml_attribute* a = e.find("link_speed")) gen = pcie_gen_from_speed(*a, source);
    // Widths past x32 are Linux's 255 for an unknown width (copied by NCCL): unknown here too.
    if (const xml_attribute* a = e.find("link_width")) width = a->value.empty() ? 0 : parse_in_range(*a, source, 0, 255);
    if (width > 32) width = 0;
    const xml_attribute* cls_attr = e.find("class");
    const unsigned long cls = cls_attr ? parse_pci_class(*cls_attr, source) : 0;
    const unsigned long base = cls >> 8;
    link up = make_pcie(-1, -1, gen, width);
    const bool speed_known = gen > 0 && width > 0;

    if (!cls_attr) {
      if (!e.children.empty()) fail_at(source, e.pos, "<pci busid=\"" + busid + "\"> without class has children");
      t.notes.push_back("PCI device " + busid + " has no class: ignored");
      return;
    }
    if (base == 0x0604) {  // PCI bridge: a switch
      vertex v;
      v.kind = vertex_kind::pci_switch, v.name = "PCI " + busid, v.busid = busid, v.parent = parent;
      const int id = t.add_vertex(v);
      by_busid[busid] = id;
      if (!speed_known) t.notes.push_back("PCIe speed of " + busid + " not given: Gen" + std::to_string(up.generation) + " x" + std::to_string(up.width) + " assumed");
      up.a = id, up.b = parent;
      t.add_link(up);
      for (const xml_element& c : e.children) {
        if (c.name == "pcilink") {  // a direct link to another switch (NCCL 2.19+, Broadcom Gen5): not modelled
          t.notes.push_back("PCI switch " + busid + " lists a direct link (<pcilink>) to " +
                            (c.find("target") ? lower(c.find("target")->value) : std::string("another switch")) +
                            ": not modelled, traffic between the two switches is routed through their CPU (a low estimate)");
          continue;
        }
        if (c.name != "pci") fail_at(source, c.pos, "unexpected <" + c.name + "> inside a PCI bridge");
        self(self, c, id);
      }
      return;
    }
    if (base >> 8 == 0x03) {  // display controller: a GPU (NCCL's "0x03")
      vertex v;
      v.kind = vertex_kind::gpu, v.busid = busid, v.parent = parent;
      const xml_element* g = nullptr;
      for (const xml_element& c : e.children) {
        if (c.name != "gpu") fail_at(source, c.pos, "unexpected <" + c.name + "> inside a GPU's <pci>");
        if (g) fail_at(source, c.pos, "second <gpu> in one <pci>");
        g = &c;
      }
      const gpu_arch* arch = opt.gpu;
      std::string unknown_because;  // what was tried and not known, for the one note below
      const auto tried = [&](const std::string& what) { unknown_because += (unknown_because.empty() ? "" : ", ") + what; };
      if (const xml_attribute* sm = g ? g->find("sm") : nullptr) {
        if (!arch) {
          arch = gpu_arch_for_sm(static_cast<int>(parse_long(*sm, source)));
          if (!arch) tried("sm " + sm->value + " not known");
        } else if (const std::string& sm_text = sm->value;  // --gpu wins (a malformed sm is no error then), but
                   !sm_text.empty() && sm_text.size() <= 4 &&      // say once where the file's sm disagrees
                   std::all_of(sm_text.begin(), sm_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          const gpu_arch* from_sm = gpu_arch_for_sm(std::stoi(sm_text));
          const std::string note = from_sm && from_sm->sm != arch->sm
                                       ? "--gpu " + std::string(arch->name) + " given (sm " + std::to_string(arch->sm) +
                                             "), but the file's GPUs are sm " + sm_text + " (" + std::string(from_sm->name) +
                                             " class): modelled as " + std::string(arch->name) + ", as asked"
                                       : std::string();
          if (!note.empty() && std::find(t.notes.begin(), t.notes.end(), note) == t.notes.end()) t.notes.push_back(note);
        }
      }
      if (!arch) {
        if (const xml_attribute* dev = e.find("device")) {
          arch = gpu_arch_for_pci_device(static_cast<unsigned>(parse_in_range(*dev, source, 0, 0xffff, 16)));
          if (arch)
            t.notes.push_back("GPU " + busid + ": model " + std::string(arch->name) + " from PCI device id " + dev->value +
                              (unknown_because.empty() ? "" : " (" + unknown_because + ")"));
          else
            tried("PCI device id " + dev->value + " not known");
        }
      }
      if (!arch) {
        arch = &unknown_gpu_arch;
        t.notes.push_back("GPU " + busid + ": model unknown (" + (unknown_because.empty() ? "no sm, no PCI device id" : unknown_because) +
                          "): " + std::string(unknown_gpu_arch.source));
      }
      v.arch = arch;
      if (g && g->find("dev")) {
        v.index = parse_in_range(required(*g, "dev", source), source, 0, 4095);
      } else {
        v.index = next_gpu_index;
        gpu_index_assigned = true;
      }
      next_gpu_index = std::max(next_gpu_index, v.index + 1);
      v.name = "GPU" + std::to_string(v.index);
      for (int other : t.gpus())
        if (t.vertices[static_cast<std::size_t>(other)].index == v.index)
          fail_at(source, g ? g->pos : e.pos, "GPU dev " + std::to_string(v.index) + " appears twice");
      const int id = t.add_vertex(v);
      by_busid[busid] = id;
      if (!speed_known) {
        up = make_pcie(-1, -1, arch->pcie_gen, 16);
        t.notes.push_back("PCIe speed of GPU " + busid + " not given: Gen" + std::to_string(up.generation) + " x16 assumed from its model");
      }
      up.a = id, up.b = parent;
      t.add_link(up);
      if (g) {
        for (const xml_element& nv : g->children) {
          if (nv.name == "c2c") {  // NVLink-C2C to this GPU's CPU (Grace Hopper): bw MB/s per link
            c2cs.push_back({id, parse_in_range(required(nv, "count", source), source, 1, max_nvlink_count),
                            parse_in_range(required(nv, "bw", source), source, 1, 10000000), nv.pos});
            continue;
          }
          if (nv.name != "nvlink") fail_at(source, nv.pos, "unexpected <" + nv.name + "> inside <gpu>");
          nvlinks.push_back({id, lower(required(nv, "target", source).value),
                             parse_in_range(required(nv, "count", source), source, 1, max_nvlink_count),
                             parse_pci_class(required(nv, "tclass", source), source), nv.pos});
        }
      }
      return;
    }
    if (base >> 8 == 0x02) {  // network controller (Ethernet 0x0200, InfiniBand 0x0207, ...)
      if (!speed_known) t.notes.push_back("PCIe speed of NIC " + busid + " not given: Gen" + std::to_string(up.generation) + " x" + std::to_string(up.width) + " assumed");
      bool any = false;
      for (const xml_element& c : e.children) {
        if (c.name != "nic") fail_at(source, c.pos, "unexpected <" + c.name + "> inside a NIC's <pci>");
        for (const xml_element& n : c.children) {
          if (n.name != "net") fail_at(source, n.pos, "unexpected <" + n.name + "> inside <nic>");
          add_nic(parent, &n, busid, up);
          any = true;
        }
      }
      if (!any) {
        add_nic(parent, nullptr, busid, up);
        t.notes.push_back("NIC " + busid + " has no <net>: port speed unknown");
      }
      return;
    }
    if (!e.children.empty()) fail_at(source, e.pos, "PCI device " + busid + " of class " + cls_attr->value + " has children");
    t.notes.push_back("PCI device " + busid + " of class " + cls_attr->value + " is neither GPU, NIC nor bridge: ignored");
  };

  std::vector<int> cpus, numa_ids;  // CPU vertices; the numaids given
  // Every pair of CPUs gets a link: 10,000 <cpu/> (60 KB of XML) took 7 GB. Machines have a few.
  constexpr std::size_t max_cpus = 256;
  for (const xml_element& c : root.children) {
    if (c.name != "cpu") fail_at(source, c.pos, "unexpected <" + c.name + "> inside <system> (expected <cpu>)");
    if (cpus.size() == max_cpus)
      fail_at(source, c.pos, "more than " + std::to_string(max_cpus) + " <cpu> elements (NUMA nodes), more than any machine has");
    vertex v;
    v.kind = vertex_kind::cpu;
    // numaid -1 (or none): NCCL copies sysfs numa_node, -1 on one-node machines and many VMs.
    const xml_attribute* numa = c.find("numaid");
    v.index = numa ? parse_in_range(*numa, source, -1, 4095) : static_cast<int>(cpus.size());
    if (numa && v.index >= 0) {
      if (std::find(numa_ids.begin(), numa_ids.end(), v.index) != numa_ids.end())
        fail_at(source, c.pos, "a second <cpu> with numaid " + std::to_string(v.index));
      numa_ids.push_back(v.index);
    }
    v.name = "CPU" + std::to_string(v.index);
    if (const xml_attribute* a = c.find("affinity")) {
      v.cpu_affinity = cpulist_from_mask(a->value);
      if (v.cpu_affinity.empty() && !a->value.empty()) fail_at(source, a->pos, "affinity \"" + a->value + "\" is not a CPU mask");
      if (!v.cpu_affinity.empty() && parse_cpulist(v.cpu_affinity).empty())  // it would show as 0 CPUs
        fail_at(source, a->pos, "affinity mask names CPUs past " + std::to_string(max_cpu_number - 1) + ", more than any machine has");
    }
    if (const xml_attribute* a = c.find("vendor")) v.cpu_vendor = a->value;
    if (const xml_attribute* a = c.find("familyid")) v.cpu_family = static_cast<int>(parse_long(*a, source));
    if (const xml_attribute* a = c.find("modelid")) v.cpu_model = static_cast<int>(parse_long(*a, source));
    const int id = t.add_vertex(v);
    cpus.push_back(id);
    for (const xml_element& k : c.children) {
      if (k.name == "pci") {
        walk_pci(walk_pci, k, id);
      } else if (k.name == "nic") {
        for (const xml_element& n : k.children) {
          if (n.name != "net") fail_at(source, n.pos, "unexpected <" + n.name + "> inside <nic>");
          add_nic(id, &n, "", make_internal(-1, -1));
          t.notes.push_back("NIC " + t.vertices.back().device + " has no PCI device (virtual?): attached to " + v.name);
        }
      } else {
        fail_at(source, k.pos, "unexpected <" + k.name + "> inside <cpu>");
      }
    }
  }
  if (cpus.empty()) fail_at(source, root.pos, "<system> has no <cpu>");
  for (std::size_t i = 0; i < cpus.size(); ++i)
    for (std::size_t j = i + 1; j < cpus.size(); ++j) {
      const vertex& c = t.vertices[static_cast<std::size_t>(cpus[i])];
      t.add_link(make_smp(cpus[i], cpus[j], smp_GBps(c.cpu_vendor, c.cpu_family, c.cpu_model)));
    }
  if (gpu_index_assigned) t.notes.push_back("GPUs listed only as PCI devices were numbered in order of appearance");

  // NVLinks: each side lists the other; one link per pair (the larger count if the sides differ).
  std::map<std::pair<int, int>, int> pair_count;
  std::map<std::pair<int, int>, int> pair_sides;  // bit 0: the lower GPU listed it, bit 1: the higher
  std::map<int, int> to_switch;
  for (const pending_nvlink& n : nvlinks) {
    const vertex& g = t.vertices[static_cast<std::size_t>(n.gpu)];
    const unsigned long tbase = n.tclass >> 8;
    // NCCL's classes (kvDictPciClass): 0x068000 an NVSwitch, 0x068001 a CPU (POWER9), 0x03 a GPU.
    if (tbase >> 8 == 0x03) {
      if (n.target == g.busid) {
        t.notes.push_back(g.name + " lists an NVLink to itself (count " + std::to_string(n.count) + "): ignored");
        continue;
      }
      const auto it = by_busid.find(n.target);
      if (it == by_busid.end() || t.vertices[static_cast<std::size_t>(it->second)].kind != vertex_kind::gpu)
        fail_at(source, n.pos, "nvlink target " + n.target + " is not a GPU in this file");
      const std::pair<int, int> key{std::min(n.gpu, it->second), std::max(n.gpu, it->second)};
      int& c = pair_count[key];
      if (c && c != n.count) t.notes.push_back("NVLink count between " + g.name + " and " + t.vertices[static_cast<std::size_t>(it->second)].name + " differs per side: the larger used");
      c = std::max(c, n.count);
      pair_sides[key] |= n.gpu == key.first ? 1 : 2;
    } else if (n.tclass == 0x068000) {
      to_switch[n.gpu] += n.count;
    } else if (tbase == 0x0600 || n.tclass == 0x068001) {
      const int cpu = t.cpu_of(n.gpu);
      if (cpu < 0) fail_at(source, n.pos, "nvlink to a CPU from a GPU outside every CPU");
      t.add_link(make_nvlink(n.gpu, cpu, *g.arch, n.count));
    } else {
      fail_at(source, n.pos, "nvlink target class 0x" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%06lx", n.tclass);
        return std::string(b);
      }() + " is not a GPU, NVSwitch or CPU");
    }
  }
  for (const pending_c2c& c : c2cs) {  // as NCCL's ncclTopoAddC2c: bw x count, an NVLink to the CPU
    const int cpu = t.cpu_of(c.gpu);
    if (cpu < 0) fail_at(source, c.pos, "<c2c> of a GPU outside every CPU");
    link l = make_nvlink(c.gpu, cpu, *t.vertices[static_cast<std::size_t>(c.gpu)].arch, c.count);
    l.spec_GBps = l.GBps = c.MBps_per_link / 1000.0 * c.count;
    l.origin = "the file's <c2c bw count> (NVLink-C2C), as NCCL's ncclTopoAddC2c";
    t.add_link(l);
  }
  for (const auto& [key, count] : pair_count) {
    t.add_link(make_nvlink(key.first, key.second, *t.vertices[static_cast<std::size_t>(key.first)].arch, count));
    if (const int sides = pair_sides[key]; sides != 3) {  // NCCL's dumps list every link from both ends
      const std::string& by = t.vertices[static_cast<std::size_t>(sides == 1 ? key.first : key.second)].name;
      const std::string& other = t.vertices[static_cast<std::size_t>(sides == 1 ? key.second : key.first)].name;
      t.notes.push_back("NVLink between " + by + " and " + other + " listed by " + by + " only: used as listed");
    }
  }
  {  // More links than the GPU has (a side's larger count taken, or a hand-edited file): said, kept.
    std::map<int, int> per_gpu = to_switch;
    for (const auto& [key, count] : pair_count) per_gpu[key.first] += count, per_gpu[key.second] += count;
    for (const auto& [gpu, count] : per_gpu) {
      const vertex& g = t.vertices[static_cast<std::size_t>(gpu)];
      if (g.arch && g.arch != &unknown_gpu_arch && g.arch->max_nvlinks > 0 && count > g.arch->max_nvlinks)
        t.notes.push_back(g.name + " has " + std::to_string(count) + " NVLinks to GPUs and NVSwitches in this file, but " +
                          std::string(g.arch->name) + " GPUs have at most " + std::to_string(g.arch->max_nvlinks) +
                          ": taken as written, so its NVLink bandwidth may be overstated");
    }
  }
  if (!to_switch.empty()) {
    vertex s;
    s.kind = vertex_kind::nvswitch, s.name = "NVSwitch";
    const int sw = t.add_vertex(s);
    for (const auto& [gpu, count] : to_switch)
      t.add_link(make_nvlink(gpu, sw, *t.vertices[static_cast<std::size_t>(gpu)].arch, count));
  }
  detail::note_nvlink_not_listed(t);
  return t;
}

/// One channel of an NCCL graph: the GPUs in order (a ring's order, or a tree's chain) and the
/// network devices it enters and leaves by.
struct nccl_channel {
  std::vector<int> gpus;      ///< GPU dev numbers in order
  std::vector<int> nets;      ///< <net dev> in order of appearance (empty on one machine)
};

/// One `<graph>` of an NCCL graph file.
struct nccl_graph {
  int id = 0;                 ///< graph id
  int pattern = 0;            ///< NCCL pattern: 1 balanced tree, 2 split tree, 3 tree, 4 ring, 5 NVLS, 6 CollNet direct
  int nchannels = 0;          ///< channel count as written (checked against the channels)
  double speed_intra = 0;     ///< GB/s per channel NCCL planned inside a machine
  double speed_inter = 0;     ///< GB/s per channel NCCL planned between machines
  std::string type_intra;     ///< link class NCCL used inside a machine (NVL, PIX, SYS, ...)
  std::string type_inter;     ///< link class NCCL used between machines
  bool same_channels = false; ///< samechannels attribute
  std::vector<nccl_channel> channels;  ///< its <channel>s, in file order
  detail::text_pos pos;       ///< where the <graph> starts
};

/// Name of an NCCL graph pattern ("ring", "tree", "balanced tree", ...).
constexpr std::string_view nccl_pattern_name(int p) noexcept {
  switch (p) {
    case 1: return "balanced tree";
    case 2: return "split tree";
    case 3: return "tree";
    case 4: return "ring";
    case 5: return "nvls";
    case 6: return "collnet direct";
    default: return "unknown";
  }
}

/// Reads an NCCL graph dump (`<graphs>`). @throws collx::error(invalid_argument) naming
/// source:line:col for anything outside the format, a GPU twice in one channel, or an `nchannels`
/// that disagrees with the channels listed.
inline std::vector<nccl_graph> read_nccl_graph(std::string_view text, std::string_view source = "<nccl-graph>") {
  text = detail::utf8_text(text, source);
  using namespace detail;
  const xml_element root = parse_xml(text, source);
  if (root.name != "graphs") fail_at(source, root.pos, "expected <graphs> (an NCCL graph file), found <" + root.name + ">");
  std::vector<nccl_graph> out;
  for (const xml_element& g : root.children) {
    if (g.name != "graph") fail_at(source, g.pos, "unexpected <" + g.name + "> inside <graphs>");
    nccl_graph r;
    r.pos = g.pos;
    r.id = static_cast<int>(parse_long(required(g, "id", source), source));
    r.pattern = static_cast<int>(parse_long(required(g, "pattern", source), source));
    r.nchannels = static_cast<int>(parse_long(required(g, "nchannels", source), source));
    if (const xml_attribute* a = g.find("speedintra")) r.speed_intra = parse_double(*a, source);
    if (const xml_attribute* a = g.find("speedinter")) r.speed_inter = parse_double(*a, source);
    if (const xml_attribute* a = g.find("typeintra")) r.type_intra = a->value;
    if (const xml_attribute* a = g.find("typeinter")) r.type_inter = a->value;
    if (const xml_attribute* a = g.find("samechannels")) r.same_channels = parse_long(*a, source) != 0;
    for (const xml_element& c : g.children) {
      if (c.name != "channel") fail_at(source, c.pos, "unexpected <" + c.name + "> inside <graph>");
      nccl_channel ch;
      for (const xml_element& d : c.children) {
        // NCCL writes these with "%#lx" (0, 0x1, ...; older files in decimal), the system id of
        // multi-node graphs in bits 56 and up.
        const xml_attribute& dev_attr = required(d, "dev", source);
        const std::string& dv = dev_attr.value;
        char* end = nullptr;
        errno = 0;
        // Decimal, or hex after 0x: strtoull's base 0 would read "010" as octal 8, and it skips
        // leading blanks and takes a sign.
        const bool hex = dv.size() > 2 && dv[0] == '0' && (dv[1] == 'x' || dv[1] == 'X');
        const std::string digits = hex ? dv.substr(2) : dv;
        const bool well_formed = !digits.empty() && digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") == std::string::npos;
        const unsigned long long raw = well_formed ? std::strtoull(digits.c_str(), &end, hex ? 16 : 10) : 0;
        if (!well_formed || *end != '\0' || errno == ERANGE || (raw & ((1ULL << 56) - 1)) > 4095)
          fail_at(source, dev_attr.pos, "attribute 'dev'=\"" + dv + "\" is not a device number (0 to 4095, decimal or 0x...)");
        const int dev = static_cast<int>(raw & ((1ULL << 56) - 1));
        if (d.name == "gpu") {
          for (int x : ch.gpus)
            if (x == dev) fail_at(source, d.pos, "GPU " + std::to_string(dev) + " twice in one channel");
          ch.gpus.push_back(dev);
        } else if (d.name == "net") {
          ch.nets.push_back(dev);
        } else {
          fail_at(source, d.pos, "unexpected <" + d.name + "> inside <channel>");
        }
      }
      if (ch.gpus.empty()) fail_at(source, c.pos, "channel without GPUs");
      r.channels.push_back(std::move(ch));
    }
    if (static_cast<int>(r.channels.size()) != r.nchannels)
      fail_at(source, g.pos, "nchannels=\"" + std::to_string(r.nchannels) + "\" but " + std::to_string(r.channels.size()) + " channels are listed");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
