// collx-topo: show a machine's topology as collx sees it, the rings and trees it builds there, and
// the bandwidth it predicts; or simulate all-reduce on many such machines.
//
//   collx-topo [show] [FILE] [options]     FILE: nvidia-smi topo -m text or NCCL topology XML
//                                          (detected); no FILE: this machine (sysfs, NVML)
//   collx-topo simulate [options]          all-reduce on 8..4096 GPUs, nodes of 8 over NVLink
//   collx-topo check PERF.txt FILE [opts]  an nccl-tests table against the model's prediction
//
// Run `collx-topo --help` for the options.
#include <collx/detail/c_locale.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/device_cost.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/nccl_tests.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/topo/nvidia_smi.hpp>
#include <collx/topo/predict.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace collx::topo;
using collx::collective;

namespace {

const char* const usage =
    "usage: collx-topo [show] [FILE] [options]\n"
    "       collx-topo simulate [options]\n"
    "       collx-topo check PERF.txt FILE [options]\n"
    "\n"
    "show      print the GPU/NIC matrix (as nvidia-smi topo -m), the notes (every assumption made),\n"
    "          the rings and trees collx builds with each hop's link, and predicted all-reduce busbw\n"
    "          per algorithm and size. FILE is nvidia-smi topo -m text or an NCCL topology XML\n"
    "          (detected; - reads standard input); without FILE, this machine is discovered: sysfs for\n"
    "          CPUs and PCIe, the CUDA runtime for GPUs and peer access, NVML for NVLinks and NVSwitches.\n"
    "simulate  predicted all-reduce time and busbw for 8..4096 GPUs: nodes of --gpus-per-node GPUs on\n"
    "          NVSwitch, joined by a non-blocking network of --net-gbps per NIC; ring, tree and\n"
    "          hierarchical, and which wins at each size.\n"
    "check     predicted vs measured peak busbw for an nccl-tests all_reduce_perf table (on the GPUs\n"
    "          of its CUDA_VISIBLE_DEVICES= where its command line gives them; NCCL_P2P_DISABLE=1\n"
    "          there counts as --p2p off), with the topology's notes; results whose #wrong is above 0\n"
    "          are left out, and a ratio beyond 2x either way prints a hint.\n"
    "\n"
    "options:\n"
    "  --gpu NAME         GPU model (A100, H100, V100, A40, ...) instead of inferring it\n"
    "  --graph FILE       also evaluate the rings of an NCCL graph dump (NCCL_GRAPH_DUMP_FILE)\n"
    "  --gpus LIST        only these GPU indices (e.g. 0,1,6,7)\n"
    "  --nodes N          N copies of the machine joined by a network (needs NIC speeds)\n"
    "  --nvswitch LINKS   add an NVSwitch fabric with LINKS NVLinks per GPU (files without NVLink)\n"
    "  --nic-gbps G       speed of NICs whose speed the file does not give\n"
    "  --p2p off          GPU peer access disabled (NCCL_P2P_DISABLE=1)\n"
    "  --json             machine-readable output\n"
    "  --hwloc            discover CPUs with hwloc (builds with COLLX_TOPO_HWLOC=ON)\n"
    "  --cudart LIB       CUDA runtime to load for discovery (default libcudart.so, then .so.13, .so.12)\n"
    "  --nvml LIB         NVML to load for discovery (default libnvidia-ml.so.1)\n"
    "simulate only:\n"
    "  --node FILE        node topology from a file instead of a synthetic HGX node\n"
    "  --nvlinks N        NVLinks per GPU to the NVSwitch (default: all the GPU model has, e.g. 18 for H100)\n"
    "  --gpus-per-node N  default 8\n"
    "  --net-gbps G       per NIC (default 400); --nics-per-gpu N (default 1)\n"
    "  --net-us L         network latency per step in microseconds, e.g. measured with\n"
    "                     collx-perf sendrecv --transport mpi (default: NCCL's figures)\n"
    "  --max-gpus N       default 4096\n";

[[noreturn]] void die(const std::string& m) {
  std::fprintf(stderr, "collx-topo: %s\n", m.c_str());
  std::exit(2);
}

// Topology files and nccl-tests logs are kilobytes to a few MiB; past this a file is not one
// (/dev/zero, a disk image) and would take all memory.
constexpr std::size_t max_input_bytes = std::size_t{64} << 20;

// The whole of a file ("-": standard input); a file that cannot be read, or one larger than
// max_input_bytes, ends the tool, saying why.
std::string slurp(const std::string& path) {
  std::error_code ec;
  if (path != "-" && std::filesystem::is_directory(path, ec)) die("cannot read " + path + ": it is a directory");
  errno = 0;
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) die("cannot read " + path + (errno != 0 ? ": " + std::string(std::strerror(errno)) : std::string()));
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_input_bytes)
      die("cannot read " + (path == "-" ? std::string("standard input") : path) + ": more than " +
          std::to_string(max_input_bytes >> 20) + " MiB, which no topology file or nccl-tests log is");
  }
  return text;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) o += ' ';
    else o += c;
  }
  return o + "\"";
}

// A bandwidth for JSON: null when infinite (one GPU: nothing moves) or undefined.
std::string json_GBps(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// A bandwidth for text: "-" when infinite or undefined.
std::string text_GBps(double v) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// "Notes (what was assumed):" and a line per note of the topology's reader, or nothing.
void print_notes(const topology& t) {
  if (t.notes.empty()) return;
  std::printf("Notes (what was assumed):\n");
  for (const std::string& n : t.notes) std::printf("  - %s\n", n.c_str());
}

std::string size_name(std::size_t b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int k = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && k < 4) v /= 1024, ++k;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g %s", v, u[k]);  // 22.32 KiB, not 22.3223 KiB
  return buf;
}

// collx's device all-reduce on one node's GPUs: what a rank reads from its peers at once, the
// size from which two-shot beats one-shot, the rings for algo::ring with rank r on the node's r-th
// GPU, and the size from which untagged all-reduces take them (topo/device_cost.hpp, as the
// device communicator decides with these figures and its default 4 MiB staging slots). Empty with
// fewer than 2 GPUs.
struct device_form_info {
  int gpus = 0;
  collx::gpu::direct_cost cost;
  std::size_t two_shot_min = SIZE_MAX;
  std::vector<std::vector<int>> rings;  // device_options::rings; empty when no ring joins the GPUs
  bool all_peers = true;  // every pair has peer access (workspace_memory device), else mixed or host
  double ring_hop_GBps = 0;  // what a rank reads from its ring predecessors, every channel's
  std::size_t ring_min = SIZE_MAX;  // untagged all-reduces of this many bytes or more take the ring
};
std::optional<device_form_info> device_form(const topology& node, const std::vector<int>& gpus, const model_options& mo) {
  if (gpus.size() < 2 || static_cast<int>(gpus.size()) > collx::gpu::max_device_world) return std::nullopt;
  device_form_info d;
  d.gpus = static_cast<int>(gpus.size());
  d.all_peers = all_pairs_peer_access(node, gpus, mo.routing);
  d.cost = device_direct_cost(node, gpus, {}, mo.routing);
  d.two_shot_min = collx::gpu::two_shot_crossover_bytes(d.gpus, collx::gpu::direct_cost_where(d.all_peers, d.cost));
  try {
    d.rings = device_rings(node, gpus, mo.routing);
  } catch (const collx::error&) {  // GPUs no ring joins: no rings to suggest
    return d;
  }
  d.ring_hop_GBps = device_ring_cost(node, gpus, {}, mo.routing).hop_bytes_per_second / 1e9;
  d.ring_min = device_ring_min_bytes(node, gpus, collx::gpu::ring_phase::all_reduce, collx::gpu::default_staging_bytes, mo.routing);
  return d;
}

struct opts {
  std::string cmd = "show", file, graph, perf, node_file;
  discover_options discovery;  // --cudart, --nvml
  const gpu_arch* gpu = nullptr;
  std::vector<int> gpus;
  int nodes = 1, nvswitch = 0, nvlinks = 0 /* 0: the GPU model's */, per_node = 8, nics_per_gpu = 1, max_gpus = 4096;
  double nic_gbps = 0, net_gbps = 400;
  double net_us = 0;  // simulate: measured network latency per step (0: NCCL's figures)
  bool p2p = true, json = false, hwloc = false;
};

opts parse(int argc, char** argv) {
  opts o;
  std::vector<std::string> pos, given;  // positional arguments; options, as typed
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-') given.push_back(a);
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    // A rate (Gb/s) or latency (microseconds) from 0.001 to a million: a positive finite number
    // (1e-300 Gb/s would make every predicted time inf).
    auto num = [&](const std::string& v) {
      char* end = nullptr;
      const double x = collx::detail::strtod_c(v.c_str(), &end);
      if (end == v.c_str() || *end || !std::isfinite(x) || x < 1e-3 || x > 1e6)
        die(a + ": '" + v + "' is not a number from 0.001 to 1000000");
      return x;
    };
    // A count or index: decimal digits only (no sign, no spaces), from `least` to `most`.
    auto count = [&](const std::string& v, long least, long most) {
      const bool digits = !v.empty() && v.size() <= 9 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      const long x = digits ? std::strtol(v.c_str(), nullptr, 10) : -1;
      if (!digits || x < least || x > most)
        die(a + ": '" + v + "' is not a whole number from " + std::to_string(least) + " to " + std::to_string(most));
      return static_cast<int>(x);
    };
    if (a == "-h" || a == "--help") std::fputs(usage, stdout), std::exit(0);
    else if (a == "--gpu") {
      const std::string n = val();
      o.gpu = find_gpu_arch(n);
      if (!o.gpu) die("unknown GPU model " + n);
    } else if (a == "--graph") {
      o.graph = val();
      if (o.graph.empty()) die("--graph: an empty file name");
    } else if (a == "--gpus") {
      const std::string list = val();
      std::stringstream ss(list);
      std::string x;
      o.gpus.clear();  // repeated: the last one counts, as for every other option
      while (std::getline(ss, x, ',')) {
        const int g = count(x, 0, 4095);
        if (std::find(o.gpus.begin(), o.gpus.end(), g) != o.gpus.end()) die("--gpus: GPU " + x + " is listed twice");
        o.gpus.push_back(g);
      }
      if (o.gpus.empty() || list.back() == ',') die("--gpus needs GPU indices separated by commas, e.g. 0,1,6,7");
    } else if (a == "--nodes") o.nodes = count(val(), 1, 64);  // the model grows with nodes squared: use simulate beyond
    else if (a == "--nvswitch") o.nvswitch = count(val(), 1, 64);
    else if (a == "--nic-gbps") o.nic_gbps = num(val());
    else if (a == "--p2p") {
      const std::string v = val();
      if (v != "on" && v != "off") die("--p2p takes on or off");
      o.p2p = v == "on";
    } else if (a == "--json") o.json = true;
    else if (a == "--hwloc") o.hwloc = true;
    else if (a == "--cudart") o.discovery.cudart_library = val();
    else if (a == "--nvml") o.discovery.nvml_library = val();
    else if (a == "--node") {
      o.node_file = val();
      if (o.node_file.empty()) die("--node: an empty file name");
    }
    else if (a == "--nvlinks") o.nvlinks = count(val(), 1, 64);
    else if (a == "--gpus-per-node") o.per_node = count(val(), 1, 72);
    else if (a == "--net-gbps") o.net_gbps = num(val());
    else if (a == "--net-us") o.net_us = num(val());
    else if (a == "--nics-per-gpu") o.nics_per_gpu = count(val(), 1, 16);
    else if (a == "--max-gpus") o.max_gpus = count(val(), 1, 1 << 16);
    else if (a.size() > 1 && a[0] == '-') die("unknown option " + a + " (see --help)");
    else pos.push_back(a);
  }
  // An empty FILE would read as none given (and discover this machine), as would an empty
  // --graph or --node (above).
  for (const std::string& p : pos)
    if (p.empty()) die("an empty file name (a variable that was not set?)");
  std::size_t k = 0;
  if (k < pos.size() && (pos[k] == "show" || pos[k] == "simulate" || pos[k] == "check")) o.cmd = pos[k++];
  else if (k < pos.size() && pos.size() > 1 && !std::filesystem::exists(pos[k]) && pos[k].find_first_of("./") == std::string::npos)
    die("unknown command '" + pos[k] + "': use show, simulate or check (see --help)");  // e.g. "collx-topo rings FILE"
  else if (pos.size() == 1 && pos[0] == "help") die("unknown command 'help': see collx-topo --help");
  if (o.cmd == "check") {
    if (pos.size() - k != 2) die("check needs PERF.txt and a topology FILE");
    o.perf = pos[k++];
  }
  if (k < pos.size() && o.cmd != "simulate") o.file = pos[k++];
  if (k < pos.size()) die("unexpected argument " + pos[k] + (o.cmd == "simulate" ? " (simulate reads a node with --node FILE)" : ""));
  // Standard input can be read once.
  if ((o.perf == "-") + (o.file == "-") + (o.graph == "-") + (o.node_file == "-") > 1) die("only one file can be - (standard input)");
  // An option the command would ignore is an error, not a silent no-op.
  const auto refuse = [&](std::initializer_list<const char*> names, const std::string& why) {
    for (const std::string& g : given)
      for (const char* n : names)
        if (g == n) die(g + " " + why);
  };
  if (o.cmd == "simulate") {
    refuse({"--graph", "--gpus", "--nodes", "--p2p", "--hwloc", "--cudart", "--nvml"}, "is not an option of simulate (see --help)");
    if (!o.node_file.empty())
      refuse({"--nvlinks", "--gpus-per-node", "--net-gbps", "--nics-per-gpu"}, "describes simulate's built-in node: with --node FILE the file does");
    else refuse({"--nvswitch", "--nic-gbps"}, "applies to a node read from a file: use it with --node FILE");
  } else {
    refuse({"--node", "--nvlinks", "--gpus-per-node", "--net-gbps", "--net-us", "--nics-per-gpu", "--max-gpus"}, "is an option of simulate only");
    if (o.cmd == "check") refuse({"--graph"}, "is not an option of check");
    if (!o.file.empty()) refuse({"--hwloc", "--cudart", "--nvml"}, "discovers this machine: it does nothing with a FILE");
  }
  return o;
}

topology load(const opts& o, const std::string& file) {
  read_options ro;
  ro.gpu = o.gpu;
  topology t;
  if (!file.empty()) {
    const std::string text = slurp(file);
    try {
      t = read_topology(text, file, ro);
    } catch (const collx::error& e) {
      // An nccl-tests table given where a topology belongs: say which command reads it.
      if (text.find("busbw") != std::string::npos && text.find("algbw") != std::string::npos)
        die(std::string(e.what()) + "\n" + file + " looks like an nccl-tests table: collx-topo check " + file +
            " TOPOLOGY compares one with a topology's prediction");
      throw;
    }
  } else if (o.hwloc) {
#if defined(COLLX_TOPO_HAVE_HWLOC)
    t = discover_cpus_hwloc();
    discover_devices(t, o.discovery);
#else
    die("--hwloc: collx-topo was built without COLLX_TOPO_HWLOC");
#endif
  } else {
    t = discover(o.discovery);
  }
  if (o.nvswitch) add_nvswitch(t, o.nvswitch);
  if (o.nic_gbps > 0) set_unknown_nic_speed(t, o.nic_gbps);
  return t;
}

std::string hop_label(router& r, int a, int b) {
  const route& rt = r.between(a, b);
  std::string s = rt.path.cell();
  if (rt.path.via_nvswitch) s += " via NVSwitch";
  if (rt.host_staged) s += ", host-staged";
  if (rt.path.type != path_type::net && (rt.path.type != path_type::nvlink || !r.options().p2p))
    s += " (" + std::string(transport_class_name(rt.cls)) + ")";
  return s;
}

std::string vname(const topology& t, int v) {
  const vertex& x = t.vertices[static_cast<std::size_t>(v)];
  return (t.hosts > 1 ? "h" + std::to_string(x.host) + ":" : std::string()) + x.name;
}

const std::vector<std::size_t> show_sizes = {1024, 64 << 10, 1 << 20, 16 << 20, 256 << 20, std::size_t{1} << 30, std::size_t{4} << 30};

// The number of a CPU vertex's logical CPUs (0 when not known).
std::size_t cpu_count(const vertex& c) { return !c.cores.empty() ? c.cores.size() : parse_cpulist(c.cpu_affinity).size(); }

int show(const opts& o) {
  const topology node = load(o, o.file);
  const topology t = make_cluster(node, o.nodes);
  std::vector<int> gpus;
  if (o.gpus.empty()) gpus = t.gpus();
  for (int h = 0; h < t.hosts; ++h)
    for (int i : o.gpus) gpus.push_back(t.gpu(i, h));
  model_options mo;
  mo.routing.p2p = o.p2p;
  std::unique_ptr<model> m;
  if (!gpus.empty()) m = std::make_unique<model>(t, gpus, mo);
  std::vector<int> node_gpus;  // the first node's GPUs of the selection: what one device communicator spans
  if (o.gpus.empty()) node_gpus = node.gpus();
  for (int i : o.gpus) node_gpus.push_back(node.gpu(i));
  std::vector<std::vector<int>> nccl_rings;
  if (!o.graph.empty()) {
    for (const nccl_graph& g : read_nccl_graph(slurp(o.graph), o.graph))
      if (g.pattern == 4) {
        for (std::size_t c = 0; c < g.channels.size(); ++c) {
          std::vector<int> ring;
          for (int d : g.channels[c].gpus) {
            try {
              ring.push_back(node.gpu(d));
            } catch (const collx::error&) {  // node.gpu()'s own message names neither file
              die(o.graph + ": ring graph " + std::to_string(g.id) + ", channel " + std::to_string(c) + " names GPU " +
                  std::to_string(d) + ", which " + (o.file.empty() ? std::string("this machine") : o.file) + " does not have");
            }
          }
          nccl_rings.push_back(ring);
        }
        break;
      }
    // NCCL's rings join the GPUs its graph was made for: set against rings over another set of
    // GPUs (--gpus) they would compare unlike things.
    if (!nccl_rings.empty()) {
      std::vector<int> theirs = nccl_rings.front(), ours = node_gpus;
      std::sort(theirs.begin(), theirs.end());
      std::sort(ours.begin(), ours.end());
      if (theirs != ours) {
        std::fprintf(stderr, "collx-topo: %s: NCCL's rings join other GPUs than the selection: not compared\n", o.graph.c_str());
        nccl_rings.clear();
      }
    }
  }
  if (o.json) {
    std::printf("{\"source\":%s,\"hosts\":%d,\"notes\":[", json_str(t.source).c_str(), t.hosts);
    for (std::size_t i = 0; i < t.notes.size(); ++i) std::printf("%s%s", i ? "," : "", json_str(t.notes[i]).c_str());
    std::printf("],\"devices\":[");
    std::vector<int> dev = node.gpus();
    for (int n : node.nics()) dev.push_back(n);
    for (std::size_t i = 0; i < dev.size(); ++i) {
      const vertex& v = node.vertices[static_cast<std::size_t>(dev[i])];
      std::printf("%s{\"name\":%s,\"kind\":%s,\"model\":%s,\"row\":[", i ? "," : "", json_str(v.name).c_str(), json_str(std::string(vertex_kind_name(v.kind))).c_str(),
                  json_str(v.arch ? std::string(v.arch->name) : v.device).c_str());
      for (std::size_t j = 0; j < dev.size(); ++j) std::printf("%s%s", j ? "," : "", json_str(node.classify(dev[i], dev[j]).cell()).c_str());
      std::printf("]}");
    }
    std::printf("],\"links\":[");  // as the text's Links table: GB/s per direction
    bool first_link = true;
    for (const collx::topo::link& l : node.links) {
      if (l.kind == link_kind::internal) continue;
      std::printf("%s{\"a\":%s,\"b\":%s,\"kind\":%s,\"generation\":%d,\"count\":%d,\"width\":%d,\"spec_GBps\":%s,\"GBps\":%s}",
                  first_link ? "" : ",", json_str(node.vertices[static_cast<std::size_t>(l.a)].name).c_str(),
                  json_str(node.vertices[static_cast<std::size_t>(l.b)].name).c_str(), json_str(std::string(link_kind_name(l.kind))).c_str(),
                  l.generation, l.count, l.width, l.spec_GBps > 0 ? json_GBps(l.spec_GBps).c_str() : "null", json_GBps(l.GBps).c_str());
      first_link = false;
    }
    std::printf("],\"cpus\":[");
    const std::vector<int> cpus = node.of_kind(vertex_kind::cpu, 0);
    for (std::size_t i = 0; i < cpus.size(); ++i) {
      const vertex& c = node.vertices[static_cast<std::size_t>(cpus[i])];
      std::printf("%s{\"name\":%s,\"numa_node\":%d,\"socket\":%d,\"vendor\":%s,\"family\":%d,\"model\":%d,\"cpus\":%s,\"count\":%zu}",
                  i ? "," : "", json_str(c.name).c_str(), c.index, c.socket, json_str(c.cpu_vendor).c_str(), c.cpu_family,
                  c.cpu_model, json_str(c.cpu_affinity).c_str(), cpu_count(c));
    }
    std::printf("]");
    if (m) {
      std::printf(",\"rings\":{\"channel_GBps\":%s,\"total_GBps\":%s,\"channels\":[", json_GBps(m->node_rings().channel_GBps).c_str(),
                  json_GBps(m->node_rings().total_GBps).c_str());
      for (std::size_t c = 0; c < m->rings().size(); ++c) {
        std::printf("%s[", c ? "," : "");
        const auto& ring = m->rings()[c];
        for (std::size_t i = 0; i < ring.size(); ++i)
          std::printf("%s{\"gpu\":%s,\"next\":%s}", i ? "," : "", json_str(vname(t, ring[i])).c_str(),
                      json_str(ring.size() > 1 ? hop_label(m->routes(), ring[i], ring[(i + 1) % ring.size()]) : "").c_str());
        std::printf("]");
      }
      std::printf("]}");
      if (!m->trees().empty() && m->ranks() > 1) {  // the double binary tree of channel 0: each GPU's parent per tree
        const double_tree& dt = m->trees().front();
        std::printf(",\"trees\":[");
        for (int k = 0; k < 2; ++k) {
          std::printf("%s[", k ? "," : "");
          for (std::size_t i = 0; i < dt.gpus.size(); ++i) {
            const int p = dt.parent[k][i];
            std::printf("%s{\"gpu\":%s,\"parent\":%s}", i ? "," : "", json_str(vname(t, dt.gpus[i])).c_str(),
                        p < 0 ? "null" : json_str(vname(t, dt.gpus[static_cast<std::size_t>(p)])).c_str());
          }
          std::printf("]");
        }
        std::printf("]");
      }
      if (!nccl_rings.empty()) {
        router r(node, mo.routing);
        const ring_evaluation e = evaluate_rings(r, nccl_rings);
        std::printf(",\"nccl_rings\":{\"channels\":%zu,\"min_channel_GBps\":%s,\"total_GBps\":%s}", nccl_rings.size(),
                    json_GBps(e.min_channel_GBps).c_str(), json_GBps(e.total_GBps).c_str());
      }
      std::printf(",\"allreduce\":[");  // empty for one GPU: no data moves between GPUs
      bool first = true;
      for (std::size_t b : m->ranks() > 1 ? show_sizes : std::vector<std::size_t>{})
        for (algo a : {algo::ring, algo::double_tree, algo::hierarchical, algo::direct}) {
          const prediction p = m->best(collective::allreduce, b, {a});
          if (!p.valid) continue;
          std::printf("%s{\"bytes\":%zu,\"algorithm\":%s,\"protocol\":%s,\"time_s\":%.9g,\"busbw_GBps\":%s,\"bottleneck\":%s}", first ? "" : ",", b,
                      json_str(std::string(algo_name(a))).c_str(), json_str(std::string(protocol_name(p.proto))).c_str(), p.time_s,
                      json_GBps(p.busbw_GBps).c_str(), json_str(p.bottleneck).c_str());
          first = false;
        }
      std::printf("]");
    }
    if (const auto d = device_form(node, node_gpus, mo)) {
      std::string rings = "[";
      for (std::size_t c = 0; c < d->rings.size(); ++c) {
        rings += c ? ",[" : "[";
        for (std::size_t k = 0; k < d->rings[c].size(); ++k) rings += (k ? "," : "") + std::to_string(d->rings[c][k]);
        rings += "]";
      }
      std::printf(",\"device_allreduce\":{\"gpus\":%d,\"peer_read_GBps\":%s,\"two_shot_min_bytes\":%s,\"rings\":%s,"
                  "\"all_pairs_peer_access\":%s,\"ring_hop_GBps\":%s,\"ring_min_bytes\":%s}",
                  d->gpus, json_GBps(d->cost.peer_read_bytes_per_second / 1e9).c_str(),
                  d->two_shot_min == SIZE_MAX ? "null" : std::to_string(d->two_shot_min).c_str(), (rings + "]").c_str(),
                  d->all_peers ? "true" : "false", d->rings.empty() ? "null" : json_GBps(d->ring_hop_GBps).c_str(),
                  d->ring_min == SIZE_MAX ? "null" : std::to_string(d->ring_min).c_str());
    } else {
      std::printf(",\"device_allreduce\":null");  // no GPU on the node: the key is there, without figures
    }
    std::printf("}\n");
    return 0;
  }
  std::printf("Topology: %s\n\n%s", t.source.c_str(), format_nvidia_smi(node).c_str());
  if (!t.notes.empty()) std::printf("\n");
  print_notes(t);
  if (const std::vector<int> cpus = node.of_kind(vertex_kind::cpu, 0); !cpus.empty()) {
    std::printf("\nCPUs (NUMA nodes: what ranks on this machine are pinned to and allocate on):\n");
    for (int id : cpus) {
      const vertex& c = node.vertices[static_cast<std::size_t>(id)];
      std::string what = c.cpu_vendor.empty() ? "" : c.cpu_vendor + " family " + std::to_string(c.cpu_family) + " model " +
                                                      std::to_string(c.cpu_model);
      if (c.socket >= 0) what = "socket " + std::to_string(c.socket) + (what.empty() ? "" : ", " + what);
      const std::string& list = c.cpu_affinity;
      const std::string cpus = list.empty() ? "no CPUs listed" : std::to_string(cpu_count(c)) + " CPUs (" + list + ")";
      std::printf("  %-6s NUMA node %d: %s%s\n", c.name.c_str(), c.index, cpus.c_str(), what.empty() ? "" : ("; " + what).c_str());
    }
  }
  std::printf("\nLinks (GB/s per direction: datasheet / reachable):\n");
  for (const collx::topo::link& l : node.links) {
    if (l.kind == link_kind::internal) continue;
    std::string what(link_kind_name(l.kind));
    if (l.kind == link_kind::nvlink) what += " gen" + std::to_string(l.generation) + " x" + std::to_string(l.count);
    if (l.kind == link_kind::pcie) what += " Gen" + std::to_string(l.generation) + " x" + std::to_string(l.width);
    char spec[32] = "      -";
    if (l.spec_GBps > 0) std::snprintf(spec, sizeof spec, "%7.2f", l.spec_GBps);
    std::printf("  %-22s %-22s %-16s %s / %7.2f\n", node.vertices[static_cast<std::size_t>(l.a)].name.c_str(),
                node.vertices[static_cast<std::size_t>(l.b)].name.c_str(), what.c_str(), spec, l.GBps);
  }
  if (!node.peers.empty()) {
    std::string denied;
    int open = 0;
    for (const peer_info& p : node.peers) {
      if (p.access) ++open;
      else denied += " " + node.vertices[static_cast<std::size_t>(p.from)].name + "->" + node.vertices[static_cast<std::size_t>(p.to)].name;
    }
    std::printf("\nPeer access (CUDA runtime): %d of %zu GPU pairs (ordered)%s%s\n", open, node.peers.size(),
                denied.empty() ? "" : "; none, so host-staged:", denied.c_str());
  }
  if (!m) {
    std::printf("\nNo GPU: nothing to build rings over.\n");
    return 0;
  }
  if (m->ranks() < 2) {
    std::printf("\nOne GPU: no rings or trees to build, and collectives move no data between GPUs.\n");
    return 0;
  }
  std::printf("\nRings: %zu channel(s) over %d GPU(s) on %d node(s); per node %s GB/s per channel, %s GB/s in all\n", m->rings().size(),
              m->ranks(), m->nodes(), text_GBps(m->node_rings().channel_GBps).c_str(), text_GBps(m->node_rings().total_GBps).c_str());
  for (std::size_t c = 0; c < m->rings().size(); ++c) {
    const auto& ring = m->rings()[c];
    std::printf("  channel %zu: ", c);
    for (std::size_t i = 0; i < ring.size(); ++i) {
      std::printf("%s", vname(t, ring[i]).c_str());
      if (ring.size() > 1) std::printf(" -[%s]-> ", hop_label(m->routes(), ring[i], ring[(i + 1) % ring.size()]).c_str());
    }
    std::printf("%s\n", ring.size() > 1 ? vname(t, ring[0]).c_str() : "");
  }
  if (!nccl_rings.empty()) {
    router r(node, mo.routing);
    const ring_evaluation e = evaluate_rings(r, nccl_rings);
    std::printf("  NCCL's rings (%s): %zu channels, slowest %s GB/s, %s GB/s in all (limited by %s)\n", o.graph.c_str(), nccl_rings.size(),
                text_GBps(e.min_channel_GBps).c_str(), text_GBps(e.total_GBps).c_str(), e.bottleneck.c_str());
  }
  if (!m->trees().empty()) {
    const double_tree& dt = m->trees().front();
    for (int k = 0; k < 2; ++k) {
      std::printf("  tree %d (channel 0): ", k);
      for (std::size_t i = 0; i < dt.gpus.size(); ++i) {
        const int p = dt.parent[k][i];
        if (p < 0) continue;
        std::printf("%s->%s [%s]  ", vname(t, dt.gpus[i]).c_str(), vname(t, dt.gpus[static_cast<std::size_t>(p)]).c_str(),
                    hop_label(m->routes(), dt.gpus[i], dt.gpus[static_cast<std::size_t>(p)]).c_str());
      }
      std::printf("\n");
    }
  }
  std::printf("\nPredicted all-reduce (busbw GB/s, best protocol per algorithm; time in us):\n  %-10s", "size");
  const std::vector<algo> algos = {algo::ring, algo::double_tree, algo::hierarchical, algo::direct};
  for (algo a : algos) std::printf(" %22s", algo_name(a).data());
  std::printf("  best\n");
  for (std::size_t b : show_sizes) {
    std::printf("  %-10s", size_name(b).c_str());
    const prediction best = m->best(collective::allreduce, b, algos);
    for (algo a : algos) {
      const prediction p = m->best(collective::allreduce, b, {a});
      if (!p.valid) std::printf(" %22s", "-");
      else std::printf(" %8.2f %-6s %6.0fus", p.busbw_GBps, protocol_name(p.proto).data(), p.time_s * 1e6);
    }
    std::printf("  %s\n", algo_name(best.method).data());
  }
  const prediction big = m->best(collective::allreduce, show_sizes.back(), algos);
  std::printf("  bottleneck at %s: %s\n", size_name(show_sizes.back()).c_str(), big.bottleneck.c_str());
  if (const auto d = device_form(node, node_gpus, mo)) {
    std::printf("\ncollx's device all-reduce (gpu::all_reduce, one rank per GPU of a node): a rank reads its %d peer%s at %s GB/s;\n",
                d->gpus - 1, d->gpus > 2 ? "s" : "", text_GBps(d->cost.peer_read_bytes_per_second / 1e9).c_str());
    if (!d->all_peers)
      std::printf("  pairs without peer access go through shared host memory (workspace_memory mixed, or host where no\n"
                  "  pair has it), and gpu::host_memory_direct_cost's figures decide the direct forms instead\n");
    if (d->two_shot_min == SIZE_MAX) std::printf("  one-shot at every size\n");
    else std::printf("  one-shot below %s, two-shot from there on%s\n", size_name(d->two_shot_min).c_str(),
                     d->all_peers ? " (device_options::cost = topo::device_direct_cost(...))" : "");
    if (!d->rings.empty()) {
      std::printf("  algo::ring on device, rank r on the r-th GPU listed, one ring per channel: device_options::rings = {");
      for (std::size_t c = 0; c < d->rings.size(); ++c) {
        std::printf("%s{", c ? ", " : "");
        for (std::size_t k = 0; k < d->rings[c].size(); ++k) std::printf("%s%d", k ? ", " : "", d->rings[c][k]);
        std::printf("}");
      }
      std::printf("} (topo::device_rings)\n  to measure them: collx-perf-cuda --ranks %d --algo ring --rings ", d->gpus);
      for (std::size_t c = 0; c < d->rings.size(); ++c) {  // --rings' own format: ranks with commas, rings with slashes
        std::printf("%s", c ? "/" : "");
        for (std::size_t k = 0; k < d->rings[c].size(); ++k) std::printf("%s%d", k ? "," : "", d->rings[c][k]);
      }
      std::printf("\n");
      std::printf("  a rank reads its predecessors at %s GB/s (device_options::ring_hops = topo::device_ring_cost(...)):\n",
                  text_GBps(d->ring_hop_GBps).c_str());
      if (d->ring_min == SIZE_MAX) std::printf("  untagged all-reduces never take the ring\n");
      else std::printf("  untagged all-reduces take the ring from %s on\n", size_name(d->ring_min).c_str());
    }
  } else if (static_cast<int>(node_gpus.size()) > collx::gpu::max_device_world) {
    std::printf("\ncollx's device communicator takes at most %d ranks (gpu::max_device_world); %zu GPUs here: no device figures\n",
                collx::gpu::max_device_world, node_gpus.size());
  }
  return 0;
}

int simulate(const opts& o) {
  topology node;
  if (!o.node_file.empty()) {
    node = load(o, o.node_file);
  } else {
    const gpu_arch* a = o.gpu ? o.gpu : find_gpu_arch("H100");
    if (a->nvlink_generation && a->max_nvlinks < 6)  // bridged pairs (A40) or a cube mesh (P100): no NVSwitch systems
      die("--gpu " + std::string(a->name) + ": no NVSwitch machines are built with " + std::string(a->name) +
          " GPUs (NVLink joins them in pairs or a mesh): describe the machine with --node FILE");
    if (o.nvlinks > a->max_nvlinks && a->nvlink_generation)
      die("--nvlinks " + std::to_string(o.nvlinks) + ": " + std::string(a->name) + " GPUs have at most " +
          std::to_string(a->max_nvlinks) + " NVLinks");
    const int links = a->nvlink_generation ? (o.nvlinks ? o.nvlinks : a->max_nvlinks) : 0;
    node = make_hgx_node(*a, o.per_node, links, o.nics_per_gpu, o.net_gbps);
  }
  const int per = static_cast<int>(node.gpus().size());
  if (per < 1) die("the node has no GPU");
  if (o.max_gpus < per) die("--max-gpus " + std::to_string(o.max_gpus) + " is below one node's " + std::to_string(per) + " GPUs");
  scaling_options so;
  so.max_gpus = o.max_gpus;
  so.network_step_us = o.net_us;
  const std::vector<scaling_point> points = simulate_allreduce(node, so);
  if (points.empty()) die("--max-gpus " + std::to_string(o.max_gpus) + " with 1 GPU per node: an all-reduce needs at least 2 GPUs");
  const std::vector<algo> algos = scaling_algos();
  // The built-in node's network is --net-gbps per NIC; a node read from a file has its own NICs.
  const bool built_in = o.node_file.empty();
  if (o.json) {
    char net[32] = "null";
    if (built_in) std::snprintf(net, sizeof net, "%g", o.net_gbps);
    std::printf("{\"node\":%s,\"gpus_per_node\":%d,\"net_gbps\":%s,\"notes\":[", json_str(node.source).c_str(), per, net);
    for (std::size_t i = 0; i < node.notes.size(); ++i) std::printf("%s%s", i ? "," : "", json_str(node.notes[i]).c_str());
    std::printf("],\"results\":[");
  }
  else if (built_in)
    std::printf("All-reduce on nodes like: %s (%d GPUs each), network %g Gb/s per NIC, %d NIC(s) per GPU\n"
                "busbw GB/s (time us) per algorithm, best protocol each; * marks the fastest\n\n",
                node.source.c_str(), per, o.net_gbps, o.nics_per_gpu);
  else {
    std::printf("All-reduce on nodes like: %s (%d GPUs each), network through that file's NICs\n", node.source.c_str(), per);
    print_notes(node);  // what the reader assumed (e.g. no NVLink listed on NVSwitch GPUs), as show prints them
    std::printf("busbw GB/s (time us) per algorithm, best protocol each; * marks the fastest\n\n");
  }
  bool first = true;
  for (const scaling_point& s : points) {
    const std::vector<prediction>& ps = s.by_algo;
    if (o.json) {
      for (std::size_t k = 0; k < ps.size(); ++k) {
        if (!ps[k].valid) continue;
        std::printf("%s{\"gpus\":%d,\"nodes\":%d,\"bytes\":%zu,\"algorithm\":%s,\"protocol\":%s,\"time_s\":%.9g,\"busbw_GBps\":%.4f,\"winner\":%s}",
                    first ? "" : ",", s.gpus, s.nodes, s.bytes, json_str(std::string(algo_name(algos[k]))).c_str(),
                    json_str(std::string(protocol_name(ps[k].proto))).c_str(), ps[k].time_s, ps[k].busbw_GBps, k == s.winner ? "true" : "false");
        first = false;
      }
      continue;
    }
    if (&s == points.data() || s.gpus != (&s - 1)->gpus) std::printf("%5d GPUs %4d nodes\n", s.gpus, s.nodes);
    std::printf("  %-9s", size_name(s.bytes).c_str());
    for (std::size_t k = 0; k < ps.size(); ++k) {
      if (!ps[k].valid) std::printf("   %-13s %20s", algo_name(algos[k]).data(), "-");
      else std::printf("   %-13s%c%8.2f (%9.1f us)", algo_name(algos[k]).data(), k == s.winner ? '*' : ' ', ps[k].busbw_GBps, ps[k].time_s * 1e6);
    }
    std::printf("\n");
  }
  if (o.json) std::printf("]}\n");
  return 0;
}

int check(const opts& o) {
  const topology node = load(o, o.file);
  const topology t = make_cluster(node, o.nodes);
  const nccl_tests_table table = read_nccl_tests(slurp(o.perf), o.perf);
  // Another collective's table can pass the busbw check below (broadcast's factor is all-reduce's
  // on 2 GPUs) and would be compared as an all-reduce: its command line says which it is.
  if (!table.binary.empty() && table.binary.rfind("all_reduce_perf", 0) != 0)
    die(o.perf + " is a table of " + table.binary + " (its command line): check compares all_reduce_perf tables only");
  // The GPUs the table ran on, where its command line says (CUDA_VISIBLE_DEVICES=0,1,6,7; CUDA
  // ordinals, taken as the topology's GPU numbers, as on machines whose GPUs are all alike):
  // used when --gpus is not given, and a --gpus that differs is an error, not another comparison.
  std::vector<int> chosen = o.gpus;
  std::vector<int> visible;
  {
    std::stringstream ss(table.visible_devices);
    std::string x;
    while (std::getline(ss, x, ','))
      if (!x.empty() && x.size() <= 4 && std::all_of(x.begin(), x.end(), [](char c) { return c >= '0' && c <= '9'; }))
        visible.push_back(std::stoi(x));
      else {
        visible.clear();  // UUIDs or MIG names: not numbers of the topology's GPUs
        break;
      }
  }
  if (!visible.empty() && chosen.empty()) {
    chosen = visible;
    if (!o.json) std::printf("GPUs %s: the table's CUDA_VISIBLE_DEVICES\n", table.visible_devices.c_str());
  } else if (!visible.empty() && chosen != visible) {
    std::string given;
    for (int g : chosen) {
      if (!given.empty()) given += ',';
      given += std::to_string(g);
    }
    die("--gpus " + given + ", but " + o.perf + " ran on CUDA_VISIBLE_DEVICES=" + table.visible_devices +
        ": leave --gpus out, or give those GPUs");
  }
  std::vector<int> gpus;
  if (chosen.empty()) gpus = t.gpus();
  for (int h = 0; h < t.hosts; ++h)
    for (int i : chosen) gpus.push_back(t.gpu(i, h));
  if (gpus.empty()) die(o.file + " describes no GPU: nothing to compare " + o.perf + " with");
  // The table's rank count (from busbw / algbw) must be the model's: a 4-GPU table against an 8-GPU
  // topology would compare unlike things and still print a ratio.
  if (!table.fits_allreduce_ranks(static_cast<int>(gpus.size())))
    die(o.perf + ": its busbw / algbw is not 2 (n - 1) / n for the model's n = " + std::to_string(gpus.size()) +
        " GPUs (another GPU count, or not an all-reduce table): choose the GPUs with --gpus (and --nodes)");
  model_options mo;
  mo.routing.p2p = o.p2p && !table.p2p_disabled;
  model m(t, gpus, mo);
  const prediction peak = predicted_peak_busbw(m, table);
  const std::size_t wrong = table.wrong_results();
  if (wrong == 2 * table.rows.size())
    die(o.perf + ": every result has #wrong above 0 (nccl-tests found wrong sums): no measured peak to compare with");
  if (!(table.peak_busbw() > 0)) die(o.perf + ": every busbw is 0: no measured peak to compare with");
  const double ratio = peak.busbw_GBps / table.peak_busbw();
  if (!std::isfinite(ratio)) {  // a busbw of 1e-320: the ratio overflows (and "inf" is no JSON number)
    char busbw[32];
    std::snprintf(busbw, sizeof busbw, "%g", table.peak_busbw());
    die(o.perf + ": the measured peak busbw, " + busbw + " GB/s, is too small to compare with (ratio beyond a double)");
  }
  // A ratio far from 1 is more often a mismatch of inputs than of the model.
  const bool far = ratio < 0.5 || ratio > 2;
  const char* far_hint =
      "the model and the table differ by more than 2x: check that the topology is the machine the table ran on, "
      "that the GPUs compared are the ones it used (--gpus, --nodes), and whether NCCL ran with P2P or NVLink off "
      "(NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_NVLS_ENABLE) or over another network than the topology's NICs";
  if (o.json) {
    std::printf("{\"measured_GBps\":%.4f,\"predicted_GBps\":%.4f,\"ratio\":%.4f,\"algorithm\":%s,\"bottleneck\":%s,"
                "\"wrong_results_left_out\":%zu,\"notes\":[",
                table.peak_busbw(), peak.busbw_GBps, ratio, json_str(std::string(algo_name(peak.method))).c_str(),
                json_str(peak.bottleneck).c_str(), wrong);
    for (std::size_t i = 0; i < node.notes.size(); ++i) std::printf("%s%s", i ? "," : "", json_str(node.notes[i]).c_str());
    std::printf("],\"hint\":%s}\n", far ? json_str(far_hint).c_str() : "null");
    return 0;
  }
  print_notes(node);  // what the reader assumed (e.g. no NVLink listed): the prediction rests on it
  if (wrong)
    std::printf("%zu result%s with #wrong above 0 left out (nccl-tests found wrong sums there)\n", wrong, wrong > 1 ? "s" : "");
  std::printf("measured peak busbw %.2f GB/s, predicted %.2f GB/s (%s/%s), ratio %.2f\nbottleneck: %s\n", table.peak_busbw(), peak.busbw_GBps,
              algo_name(peak.method).data(), protocol_name(peak.proto).data(), ratio, peak.bottleneck.c_str());
  if (far) std::printf("hint: %s\n", far_hint);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const opts o = parse(argc, argv);
  int rc = 0;
  try {
    rc = o.cmd == "simulate" ? simulate(o) : o.cmd == "check" ? check(o) : show(o);
  } catch (const collx::error& e) {
    die(e.what());
  } catch (const std::bad_alloc&) {
    die("out of memory");
  }
  // A full disk or closed pipe must not pass for a report written.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) die("could not write the report to standard output");
  return rc;
}
