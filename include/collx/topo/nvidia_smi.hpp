/// @file topo/nvidia_smi.hpp
/// Reads `nvidia-smi topo -m` (`--matrix`) text as people paste it, and writes it back.
///
/// Accepted: tabs or spaces between cells; CRLF or LF; a leading prompt line (`$ nvidia-smi topo -m`,
/// `> nvidia-smi topo --matrix`) and a trailing one (the shell's next prompt: a last line ending in
/// `$`, `#`, `>` or `%`, e.g. `user@host:~$`); a `#` or `N: ` prefix on every line; GPU and NIC columns (NIC0.. with
/// a "NIC Legend", or old-style mlx5_0 columns); CPU Affinity, NUMA Affinity and GPU NUMA ID
/// columns; cells X, NV<n>, PIX, PXB, PHB, NODE, SYS (and SOC, SYS's old name); `...` where the
/// author cut the rest of a row; the Legend block. Anything else throws collx::error(invalid_argument)
/// naming source:line:col; so do an asymmetric matrix and a matrix no PCIe tree can produce.
///
/// The matrix gives path classes, not the graph, so the reader builds the simplest graph that gives
/// exactly those classes (and checks that it does): devices whose cells say PIX share a switch,
/// PXB a tree of switches, PHB a host bridge, NODE a NUMA node; SYS separates NUMA nodes (CPU or NUMA
/// affinity columns, where present, place GPUs). NV<n> cells become n bonded NVLinks, or links to an
/// NVSwitch when a GPU has more NVLinks in its row than the model has (NV12 to 7 peers). The GPU
/// model is not in the matrix: give it (read_options::gpu) or it is inferred from the NVLink pattern
/// and a note says so.
#pragma once

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include <collx/topo/detail/xml.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

namespace detail {

struct smi_token {
  std::string text;
  int col = 1;  // 1-based column in the original line
};

/// Most device columns (GPUs and NICs) a `nvidia-smi topo -m` matrix may have: real nodes have a
/// few dozen; collx's synthetic machines (bench/topo-search-time.sh) up to 400 GPUs.
inline constexpr std::size_t max_smi_devices = 1024;

struct smi_cell {
  path_type type = path_type::unknown;
  int nvlinks = 0;
  text_pos pos;
  std::string text;
};

inline std::vector<smi_token> smi_tokens(std::string_view line, std::size_t from) {
  std::vector<smi_token> out;
  std::size_t i = from;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size()) break;
    const std::size_t b = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    out.push_back({std::string(line.substr(b, i - b)), static_cast<int>(b) + 1});
  }
  return out;
}

// Union-find over device indices.
struct union_find {
  std::vector<int> p;
  explicit union_find(std::size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) { return p[static_cast<std::size_t>(x)] == x ? x : p[static_cast<std::size_t>(x)] = find(p[static_cast<std::size_t>(x)]); }
  void unite(int a, int b) { p[static_cast<std::size_t>(find(a))] = find(b); }
};

inline bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
/// A number this format can hold (device numbers, NVLink counts, NUMA nodes): at most 6 digits, so
/// std::stoi never overflows; longer digit strings are not numbers here (and get a line:col error).
inline bool is_number(std::string_view s) { return all_digits(s) && s.size() <= 6; }

}  // namespace detail

/// Reads `nvidia-smi topo -m` text into a one-machine topology (see the file comment).
/// @param source name used in messages (the file name)
/// @throws collx::error(invalid_argument) naming source:line:col for text outside the format, an
///         asymmetric matrix, X off the diagonal, cells no PCIe tree gives, or more than
///         detail::max_smi_devices (1024) device columns.
inline topology read_nvidia_smi(std::string_view text, std::string_view source = "<nvidia-smi>", read_options opt = {}) {
  text = detail::utf8_text(text, source);
  using namespace detail;
  // Lines (line_at: LF, CRLF or lone CR ends one), with the prefix (# or "N: ") skipped.
  struct line_t {
    int no;
    std::string s;
    std::size_t from;
  };
  std::vector<line_t> lines;
  {
    int no = 1;
    std::size_t cr_run = 0;
    for (std::size_t b = 0; b <= text.size();) {
      const line_span span = line_at(text, b, cr_run);
      std::string s(text.substr(b, span.end - b));
      b = span.next;
      std::size_t f = 0;
      while (f < s.size() && (s[f] == ' ' || s[f] == '\t')) ++f;
      if (f < s.size() && s[f] == '#') {
        ++f;
      } else {
        std::size_t d = f;
        while (d < s.size() && std::isdigit(static_cast<unsigned char>(s[d]))) ++d;
        if (d > f && d + 1 < s.size() && s[d] == ':' && (s[d + 1] == ' ' || s[d + 1] == '\t')) f = d + 1;
      }
      lines.push_back({no++, std::move(s), f});
    }
  }
  auto blank = [](const line_t& l) { return l.s.find_first_not_of(" \t", l.from) == std::string::npos; };

  enum class col_kind { device, elided, cpu_affinity, numa_affinity, gpu_numa };
  struct column {
    col_kind kind;
    std::string label;
  };
  std::vector<column> cols;
  std::vector<std::string> devices;  // device labels in header order
  std::size_t li = 0;
  for (; li < lines.size(); ++li) {
    const line_t& l = lines[li];
    if (blank(l)) continue;
    if (l.s.find("nvidia-smi") != std::string::npos) continue;  // the prompt
    const std::vector<smi_token> tk = smi_tokens(l.s, l.from);
    if (tk[0].text.rfind("GPU", 0) != 0 || tk[0].text == "GPU")
      fail_at(source, {l.no, tk[0].col}, "expected the matrix header (GPU0 GPU1 ...), found '" + tk[0].text + "'");
    for (std::size_t k = 0; k < tk.size(); ++k) {
      const std::string& w = tk[k].text;
      auto next_is = [&](std::string_view x) { return k + 1 < tk.size() && tk[k + 1].text == x; };
      if (w == "CPU" && next_is("Affinity")) cols.push_back({col_kind::cpu_affinity, "CPU Affinity"}), ++k;
      else if (w == "NUMA" && next_is("Affinity")) cols.push_back({col_kind::numa_affinity, "NUMA Affinity"}), ++k;
      else if (w == "GPU" && next_is("NUMA") && k + 2 < tk.size() && tk[k + 2].text == "ID") cols.push_back({col_kind::gpu_numa, "GPU NUMA ID"}), k += 2;
      else if (w == "...") cols.push_back({col_kind::elided, w});
      else {
        if (!cols.empty() && cols.back().kind != col_kind::device)
          fail_at(source, {l.no, tk[k].col}, "device column '" + w + "' after the affinity columns");
        // The matrix is devices x devices cells: a 52 KB header of 9000 columns took 3.8 GB.
        if (devices.size() == max_smi_devices)
          fail_at(source, {l.no, tk[k].col}, "more than " + std::to_string(max_smi_devices) + " device columns");
        for (const std::string& d : devices)
          if (d == w) fail_at(source, {l.no, tk[k].col}, "column '" + w + "' twice");
        if (w.rfind("GPU", 0) == 0 && all_digits(std::string_view(w).substr(3)) && !is_number(std::string_view(w).substr(3)))
          fail_at(source, {l.no, tk[k].col}, "device number of '" + w + "' is too large");
        if (w.size() > 3 && w.rfind("GPU", 0) == 0 && is_number(std::string_view(w).substr(3)))
          for (const std::string& d : devices)  // GPU0 and GPU00 are one device twice
            if (d.size() > 3 && d.rfind("GPU", 0) == 0 && is_number(std::string_view(d).substr(3)) &&
                std::stoi(d.substr(3)) == std::stoi(w.substr(3)))
              fail_at(source, {l.no, tk[k].col}, "column '" + w + "' is device " + std::to_string(std::stoi(w.substr(3))) +
                                                     " again (as '" + d + "')");
        cols.push_back({col_kind::device, w});
        devices.push_back(w);
      }
    }
    ++li;
    break;
  }
  if (devices.empty()) fail_at(source, {static_cast<int>(lines.size()), 1}, "no `nvidia-smi topo -m` matrix found");
  const std::size_t n = devices.size();
  std::vector<std::vector<smi_cell>> cell(n, std::vector<smi_cell>(n));
  std::vector<std::string> cpu_aff(n), numa_aff(n);
  std::size_t row = 0;
  for (; li < lines.size() && row < n; ++li) {
    const line_t& l = lines[li];
    if (blank(l)) fail_at(source, {l.no, 1}, "the matrix ends after " + std::to_string(row) + " of " + std::to_string(n) + " rows");
    const std::vector<smi_token> tk = smi_tokens(l.s, l.from);
    if (tk[0].text != devices[row])
      fail_at(source, {l.no, tk[0].col}, "expected row '" + devices[row] + "', found '" + tk[0].text + "'");
    std::size_t c = 0, k = 1;
    bool elided = false;
    for (; c < cols.size() && k < tk.size(); ++c) {
      const smi_token& t = tk[k];
      if (cols[c].kind == col_kind::elided || t.text == "...") {
        if (t.text != "...") fail_at(source, {l.no, t.col}, "expected '...' under the header's '...'");
        elided = true;
        ++k;
        break;
      }
      if (cols[c].kind == col_kind::cpu_affinity) {
        // A CPU list, possibly split as "0-3, 8-11"; N/A when unknown.
        std::string v = t.text;
        ++k;
        while (!v.empty() && v.back() == ',' && k < tk.size()) v += tk[k++].text;
        if (v != "N/A" && parse_cpulist(v).empty()) fail_at(source, {l.no, t.col}, "CPU Affinity '" + v + "' is not a CPU list");
        cpu_aff[row] = v == "N/A" ? "" : v;
        continue;
      }
      if (cols[c].kind == col_kind::numa_affinity || cols[c].kind == col_kind::gpu_numa) {
        if (t.text != "N/A" && !is_number(t.text) && parse_cpulist(t.text).empty())
          fail_at(source, {l.no, t.col}, cols[c].label + " '" + t.text + "' is not a number");
        if (cols[c].kind == col_kind::numa_affinity) numa_aff[row] = t.text == "N/A" ? "" : t.text;
        ++k;
        continue;
      }
      smi_cell& x = cell[row][c];
      x.pos = {l.no, t.col};
      x.text = t.text;
      const std::string& w = t.text;
      if (w == "X") x.type = path_type::self;
      else if (w == "PIX") x.type = path_type::pix;
      else if (w == "PXB") x.type = path_type::pxb;
      else if (w == "PHB") x.type = path_type::phb;
      else if (w == "NODE") x.type = path_type::node;
      else if (w == "SYS" || w == "SOC") x.type = path_type::sys;
      else if (w.size() > 2 && w[0] == 'N' && w[1] == 'V' && all_digits(std::string_view(w).substr(2))) {
        // Too many digits for is_number is too many links as well (NV99999999).
        const std::string_view digits = std::string_view(w).substr(2);
        x.type = path_type::nvlink;
        x.nvlinks = is_number(digits) ? std::stoi(std::string(digits)) : max_nvlink_count + 1;
        if (x.nvlinks > max_nvlink_count)
          fail_at(source, x.pos, "cell '" + w + "': more NVLinks than any GPU has (at most " + std::to_string(max_nvlink_count) + " accepted)");
        if (x.nvlinks == 0) fail_at(source, x.pos, "cell '" + w + "': a pair joined by NVLink has at least one (NV1)");
      } else {
        fail_at(source, x.pos, "cell '" + w + "' is not X, NV<n>, PIX, PXB, PHB, NODE or SYS");
      }
      ++k;
    }
    if (k < tk.size()) fail_at(source, {l.no, tk[k].col}, "extra cell '" + tk[k].text + "' past the last column");
    if (!elided && c < n) fail_at(source, {l.no, static_cast<int>(l.s.size()) + 1}, "row " + devices[row] + " has " + std::to_string(c) + " of " + std::to_string(n) + " device cells");
    ++row;
  }
  if (row < n) fail_at(source, {lines.empty() ? 1 : lines.back().no, 1}, "the matrix ends after " + std::to_string(row) + " of " + std::to_string(n) + " rows");

  // Legend: "Legend:", "  X    = Self", "NIC Legend:", "  NIC0: mlx5_0". Nothing else.
  std::map<std::string, std::string> nic_names;
  for (; li < lines.size(); ++li) {
    const line_t& l = lines[li];
    if (blank(l)) continue;
    const std::vector<smi_token> tk = smi_tokens(l.s, l.from);
    if ((tk.size() == 1 && tk[0].text == "Legend:") || (tk.size() == 2 && tk[0].text == "NIC" && tk[1].text == "Legend:")) continue;
    if (tk.size() >= 2 && tk[1].text == "=") continue;
    if (tk.size() == 2 && tk[0].text.size() > 1 && tk[0].text.back() == ':') {
      const std::string key = tk[0].text.substr(0, tk[0].text.size() - 1);
      if (std::find(devices.begin(), devices.end(), key) == devices.end())
        fail_at(source, {l.no, tk[0].col}, "legend names '" + key + "', which is not a column");
      nic_names[key] = tk[1].text;
      continue;
    }
    // The shell's prompt after the output, as a terminal copy ends: the last line, ending in $, #, > or %.
    const bool last = std::all_of(lines.begin() + static_cast<std::ptrdiff_t>(li) + 1, lines.end(), blank);
    if (last && std::string_view("$#>%").find(tk.back().text.back()) != std::string_view::npos) continue;
    fail_at(source, {l.no, tk[0].col}, "unexpected text after the matrix: '" + tk[0].text + "'");
  }

  // Symmetry and diagonal.
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      smi_cell &a = cell[i][j], &b = cell[j][i];
      if (i == j) {
        if (a.type != path_type::self && a.type != path_type::unknown) fail_at(source, a.pos, "diagonal cell of " + devices[i] + " must be X");
        continue;
      }
      if (a.type == path_type::self) fail_at(source, a.pos, "X off the diagonal (" + devices[i] + "/" + devices[j] + ")");
      if (a.type == path_type::unknown) continue;
      if (b.type == path_type::unknown) { b.type = a.type, b.nvlinks = a.nvlinks, b.pos = a.pos, b.text = a.text; continue; }
      if (a.type != b.type || a.nvlinks != b.nvlinks)
        fail_at(source, b.pos, "matrix is not symmetric: " + devices[j] + "/" + devices[i] + " is '" + b.text + "' but " + devices[i] + "/" +
                                   devices[j] + " is '" + a.text + "' (line " + std::to_string(a.pos.line) + ")");
    }

  topology t;
  t.source = std::string(source);
  std::vector<bool> is_gpu(n);
  std::vector<int> gpu_index(n, -1), nic_index(n, -1);
  for (std::size_t i = 0, nic = 0; i < n; ++i) {
    const std::string& d = devices[i];
    is_gpu[i] = d.size() > 3 && d.rfind("GPU", 0) == 0 && is_number(std::string_view(d).substr(3));
    if (is_gpu[i]) gpu_index[i] = std::stoi(d.substr(3));
    else nic_index[i] = static_cast<int>(nic++);
  }

  // GPU model and NVSwitch.
  int max_nv = 0, max_sum = 0, max_peers = 0;
  std::vector<int> nv_sum(n, 0), nv_max(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    int peers = 0;
    for (std::size_t j = 0; j < n; ++j)
      if (cell[i][j].type == path_type::nvlink) {
        if (!is_gpu[i] || !is_gpu[j]) fail_at(source, cell[i][j].pos, "NVLink between " + devices[i] + " and " + devices[j] + ", which is not a GPU pair");
        nv_sum[i] += cell[i][j].nvlinks, nv_max[i] = std::max(nv_max[i], cell[i][j].nvlinks), ++peers;
      }
    max_nv = std::max(max_nv, nv_max[i]), max_sum = std::max(max_sum, nv_sum[i]), max_peers = std::max(max_peers, peers);
  }
  const gpu_arch* arch = opt.gpu;
  const int link_budget = arch ? arch->max_nvlinks : 18;
  const bool switched = max_sum > link_budget;
  if (!arch) {
    std::string why;
    if (max_nv == 0) arch = &unknown_gpu_arch, why = "no NVLink in the matrix";
    else if (switched && max_nv == 18) arch = find_gpu_arch("H100"), why = "NV18 through NVSwitch";
    else if (switched && max_nv == 12) arch = find_gpu_arch("A100"), why = "NV12 through NVSwitch";
    else if (switched && max_nv == 8) arch = find_gpu_arch("A800"), why = "NV8 through NVSwitch (A800 or H800)";
    else if (!switched && max_nv <= 2) arch = find_gpu_arch("V100"), why = "NV1/NV2 hybrid cube-mesh";
    else if (!switched && max_nv == 4 && max_peers == 1) arch = find_gpu_arch("A40"), why = "NV4 bridged pairs (GA102 class)";
    else if (!switched && max_nv == 4 && max_sum == 12) arch = find_gpu_arch("A100"), why = "NV4 to 3 peers (HGX A100 4-GPU)";
    else if (!switched && max_nv == 12 && max_peers == 1) arch = find_gpu_arch("H100"), why = "NV12 bridged pairs (H100 NVL)";
    else arch = &unknown_gpu_arch, why = "NVLink pattern not recognised";
    t.notes.push_back("GPU model not in the matrix: " + std::string(arch->name) + " assumed from " + why + " (set it with --gpu)");
  }
  if (switched) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (cell[i][j].type == path_type::nvlink && cell[i][j].nvlinks != std::min(nv_max[i], nv_max[j]))
          fail_at(source, cell[i][j].pos, "NVSwitch pattern with uneven cells: " + cell[i][j].text + " between " + devices[i] + " and " + devices[j]);
  }

  // CPU groups.
  auto pcie_known = [](path_type x) { return x == path_type::pix || x == path_type::pxb || x == path_type::phb || x == path_type::node || x == path_type::sys; };
  union_find cpu_uf(n);
  std::vector<bool> informed(n, false);
  std::vector<std::string> key(n);
  for (std::size_t i = 0; i < n; ++i) {
    key[i] = !numa_aff[i].empty() ? "numa:" + numa_aff[i] : !cpu_aff[i].empty() ? "cpus:" + cpu_aff[i] : "";
    if (!key[i].empty()) informed[i] = true;
    for (std::size_t j = 0; j < n; ++j)
      if (pcie_known(cell[i][j].type)) informed[i] = true;
  }
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      const path_type x = cell[i][j].type;
      if (pcie_known(x) && x != path_type::sys) {
        if (!key[i].empty() && !key[j].empty() && key[i] != key[j])
          fail_at(source, cell[i][j].pos, "cell says " + cell[i][j].text + " but " + devices[i] + " and " + devices[j] + " have different affinity");
        cpu_uf.unite(static_cast<int>(i), static_cast<int>(j));
      }
      if (!key[i].empty() && key[i] == key[j]) cpu_uf.unite(static_cast<int>(i), static_cast<int>(j));
    }
  // Devices joined through a third (each under one switch with a NIC, say) whose affinity columns
  // disagree: the NUMA node would take either one's, silently.
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (!key[i].empty() && !key[j].empty() && key[i] != key[j] && cpu_uf.find(static_cast<int>(i)) == cpu_uf.find(static_cast<int>(j)))
        fail_at(source, cell[i][j].pos, devices[i] + " and " + devices[j] + " have different affinity, but other cells place them on one NUMA node");
  int first_uninformed = -1;
  for (std::size_t i = 0; i < n; ++i)
    if (!informed[i]) {
      if (first_uninformed < 0) first_uninformed = static_cast<int>(i);
      else cpu_uf.unite(static_cast<int>(i), first_uninformed);
    }
  if (first_uninformed >= 0)
    t.notes.push_back("PCIe placement of " + devices[static_cast<std::size_t>(first_uninformed)] +
                      (std::count(informed.begin(), informed.end(), false) > 1 ? " and others" : "") +
                      " not in the matrix: assumed on one CPU, directly on its root ports");
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (cell[i][j].type == path_type::sys && cpu_uf.find(static_cast<int>(i)) == cpu_uf.find(static_cast<int>(j))) {
        // Say which evidence joined them: a VM may give every GPU one affinity over SYS cells.
        if (!key[i].empty() && key[i] == key[j])
          fail_at(source, cell[i][j].pos,
                  "SYS between " + devices[i] + " and " + devices[j] + ", but both have " +
                      (key[i].rfind("numa:", 0) == 0 ? "NUMA affinity " + numa_aff[i] : "CPU affinity " + cpu_aff[i]) +
                      " (one NUMA node); a virtual machine may report one affinity for every GPU: delete the "
                      "affinity columns to have the cells read alone");
        fail_at(source, cell[i][j].pos, "SYS between " + devices[i] + " and " + devices[j] + ", but other cells (or " +
                                            "their affinity columns) place them on one NUMA node");
      }

  // Vertices: CPUs in order of first member, then the trees under them.
  std::map<int, int> cpu_vertex;
  std::vector<int> dev_vertex(n, -1);
  std::vector<int> cpu_order;
  for (std::size_t i = 0; i < n; ++i) {
    const int g = cpu_uf.find(static_cast<int>(i));
    if (cpu_vertex.count(g)) continue;
    vertex c;
    c.kind = vertex_kind::cpu;
    c.index = static_cast<int>(cpu_vertex.size());
    for (std::size_t j = 0; j < n; ++j)
      if (cpu_uf.find(static_cast<int>(j)) == g) {
        if (!numa_aff[j].empty() && is_number(numa_aff[j])) c.index = std::stoi(numa_aff[j]);
        if (!cpu_aff[j].empty()) c.cpu_affinity = cpu_aff[j];
      }
    c.name = "CPU" + std::to_string(c.index);
    cpu_vertex[g] = t.add_vertex(c);
    cpu_order.push_back(g);
  }
  const int gen = arch->pcie_gen;
  bool nic_gen_noted = false;
  for (int g : cpu_order) {
    const int cpu = cpu_vertex[g];
    std::vector<int> members;
    for (std::size_t i = 0; i < n; ++i)
      if (cpu_uf.find(static_cast<int>(i)) == g) members.push_back(static_cast<int>(i));
    auto group = [&](const std::vector<int>& m, std::initializer_list<path_type> rel) {
      union_find uf(n);
      for (int a : m)
        for (int b : m)
          if (a < b && std::find(rel.begin(), rel.end(), cell[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)].type) != rel.end()) uf.unite(a, b);
      std::vector<std::vector<int>> out;
      std::map<int, std::size_t> at;
      for (int a : m) {
        const int r = uf.find(a);
        if (!at.count(r)) at[r] = out.size(), out.emplace_back();
        out[at[r]].push_back(a);
      }
      return out;
    };
    auto add_switch = [&](int parent, const std::string& what) {
      vertex s;
      s.kind = vertex_kind::pci_switch;
      s.name = what;
      s.parent = parent;
      const int id = t.add_vertex(s);
      t.add_link(make_pcie(id, parent, gen, 16));
      return id;
    };
    auto add_device = [&](int i, int parent) {
      vertex v;
      v.parent = parent;
      if (is_gpu[static_cast<std::size_t>(i)]) {
        v.kind = vertex_kind::gpu, v.index = gpu_index[static_cast<std::size_t>(i)], v.arch = arch;
        v.name = "GPU" + std::to_string(v.index);
      } else {
        v.kind = vertex_kind::nic;
        v.index = nic_index[static_cast<std::size_t>(i)];
        v.name = "NIC" + std::to_string(v.index);
        const auto it = nic_names.find(devices[static_cast<std::size_t>(i)]);
        v.device = it != nic_names.end() ? it->second : devices[static_cast<std::size_t>(i)];
        if (!nic_gen_noted) t.notes.push_back("NIC PCIe links not in the matrix: Gen" + std::to_string(gen) + " x16 assumed"), nic_gen_noted = true;
      }
      v.cpu_affinity = cpu_aff[static_cast<std::size_t>(i)];
      v.numa_affinity = numa_aff[static_cast<std::size_t>(i)];
      const int id = t.add_vertex(v);
      dev_vertex[static_cast<std::size_t>(i)] = id;
      t.add_link(make_pcie(id, parent, gen, 16));
    };
    int bridge_no = 0;
    for (const std::vector<int>& hb : group(members, {path_type::pix, path_type::pxb, path_type::phb})) {
      const std::vector<std::vector<int>> sw = group(hb, {path_type::pix, path_type::pxb});
      bool has_phb = false;
      for (int a : hb)
        for (int b : hb) has_phb |= cell[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)].type == path_type::phb;
      int attach = cpu;
      if (hb.size() > 1 && (has_phb || sw.size() > 1)) {
        vertex h;
        h.kind = vertex_kind::host_bridge;
        h.name = "host bridge " + std::to_string(bridge_no++) + " of " + t.vertices[static_cast<std::size_t>(cpu)].name;
        h.parent = cpu;
        attach = t.add_vertex(h);
        t.add_link(make_internal(attach, cpu));
      }
      for (const std::vector<int>& w : sw) {
        if (w.size() == 1) { add_device(w[0], attach); continue; }
        const std::vector<std::vector<int>> leaves = group(w, {path_type::pix});
        if (leaves.size() == 1) {
          const int s = add_switch(attach, "PCIe switch of " + devices[static_cast<std::size_t>(w[0])]);
          for (int d : w) add_device(d, s);
          continue;
        }
        const int up = add_switch(attach, "PCIe switch above " + devices[static_cast<std::size_t>(w[0])]);
        for (const std::vector<int>& leaf : leaves) {
          const int s = add_switch(up, "PCIe switch of " + devices[static_cast<std::size_t>(leaf[0])]);
          for (int d : leaf) add_device(d, s);
        }
      }
    }
  }
  t.notes.push_back("PCIe links not in the matrix: Gen" + std::to_string(gen) + " x16 assumed for GPUs and switches");
  for (std::size_t a = 0; a < cpu_order.size(); ++a)
    for (std::size_t b = a + 1; b < cpu_order.size(); ++b) t.add_link(make_smp(cpu_vertex[cpu_order[a]], cpu_vertex[cpu_order[b]], smp_GBps("", 0, 0)));
  if (cpu_order.size() > 1) t.notes.push_back("CPU model not in the matrix: inter-CPU bandwidth " + std::to_string(static_cast<int>(smp_GBps("", 0, 0))) + " GB/s assumed");

  // Check the tree gives every PCIe cell.
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const smi_cell& x = cell[i][j];
      if (i == j || !pcie_known(x.type)) continue;
      const path_type got = t.pcie_class(dev_vertex[i], dev_vertex[j]);
      if (got != x.type)
        fail_at(source, x.pos, "no PCIe tree gives every cell: " + devices[i] + "/" + devices[j] + " is " + x.text + ", but the other cells imply " +
                                   std::string(path_type_name(got)));
    }

  // NVLinks.
  if (switched) {
    // One switch per island of GPUs joined by NV cells: GPUs of two NVLink domains (trays with SYS
    // between them) must keep their SYS paths, not meet in one switch.
    union_find nv_uf(n);
    const auto id = [](std::size_t i) { return static_cast<int>(i); };
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j)
        if (cell[i][j].type == path_type::nvlink) nv_uf.unite(id(i), id(j));
    std::vector<int> roots;
    for (std::size_t i = 0; i < n; ++i)
      if (nv_max[i] > 0 && std::find(roots.begin(), roots.end(), nv_uf.find(id(i))) == roots.end()) roots.push_back(nv_uf.find(id(i)));
    for (std::size_t k = 0; k < roots.size(); ++k) {
      vertex s;
      s.kind = vertex_kind::nvswitch, s.name = roots.size() == 1 ? "NVSwitch" : "NVSwitch " + std::to_string(k);
      const int sw = t.add_vertex(s);
      for (std::size_t i = 0; i < n; ++i)
        if (nv_max[i] > 0 && nv_uf.find(id(i)) == roots[k]) t.add_link(make_nvlink(dev_vertex[i], sw, *arch, nv_max[i]));
    }
    t.notes.push_back("NVSwitch inferred: a GPU's NV cells add up to " + std::to_string(max_sum) + " links, more than " +
                      (opt.gpu ? "a " + std::string(opt.gpu->name) + " has" : std::string("any GPU has")) + " (" + std::to_string(link_budget) + ")" +
                      (roots.size() > 1 ? "; " + std::to_string(roots.size()) + " NVLink islands, a switch each" : ""));
  } else {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = i + 1; j < n; ++j)
        if (cell[i][j].type == path_type::nvlink) t.add_link(make_nvlink(dev_vertex[i], dev_vertex[j], *arch, cell[i][j].nvlinks));
  }
  return t;
}

/// The topology of `host` as `nvidia-smi topo -m` prints it: tab-separated GPU and NIC columns, CPU
/// Affinity and NUMA Affinity columns (N/A where unknown), the legend and the NIC legend. Reading it
/// back with read_nvidia_smi gives the same cells.
inline std::string format_nvidia_smi(const topology& t, int host = 0) {
  const std::vector<int> g = t.gpus(host), nics = t.nics(host);
  std::vector<int> dev = g;
  dev.insert(dev.end(), nics.begin(), nics.end());
  auto label = [&](int v) { return t.vertices[static_cast<std::size_t>(v)].name; };
  std::string out = "\t";
  for (int v : dev) out += label(v) + "\t";
  out += "CPU Affinity\tNUMA Affinity\n";
  for (int a : dev) {
    out += label(a);
    for (int b : dev) out += "\t " + t.classify(a, b).cell();
    const vertex& va = t.vertices[static_cast<std::size_t>(a)];
    if (va.kind == vertex_kind::gpu) {
      const int cpu = t.cpu_of(a);
      std::string aff = va.cpu_affinity, numa = va.numa_affinity;
      if (cpu >= 0) {
        const vertex& c = t.vertices[static_cast<std::size_t>(cpu)];
        if (aff.empty()) aff = c.cpu_affinity;
        if (numa.empty() && (!c.cpu_affinity.empty() || c.socket >= 0)) numa = std::to_string(c.index);
      }
      out += "\t" + (aff.empty() ? std::string("N/A") : aff) + "\t\t" + (numa.empty() ? std::string("N/A") : numa);
    }
    out += "\n";
  }
  out +=
      "\nLegend:\n\n"
      "  X    = Self\n"
      "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
      "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
      "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
      "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
      "  PIX  = Connection traversing at most a single PCIe bridge\n"
      "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (!nics.empty()) {
    out += "\nNIC Legend:\n\n";
    for (int v : nics) {
      const vertex& x = t.vertices[static_cast<std::size_t>(v)];
      out += "  " + x.name + ": " + (x.device.empty() ? x.name : x.device) + "\n";
    }
  }
  return out;
}

/// Reads a topology from text of either format: NCCL topology XML when the first non-blank
/// character is '<', `nvidia-smi topo -m` text otherwise. `text` is the file's contents, not its
/// path; `source` names it in messages.
/// @throws collx::error(invalid_argument) as the chosen reader does (an NCCL *graph* file is named
///         as such: read it with read_nccl_graph), saying so where `text` is one line that looks
///         like a path to a topology file.
inline topology read_topology(std::string_view text, std::string_view source = "<topology>", read_options opt = {}) {
  text = detail::utf8_text(text, source);
  const auto ends_with = [&](std::string_view end) { return text.size() >= end.size() && text.substr(text.size() - end.size()) == end; };
  if (text.find_first_of("\r\n") == std::string_view::npos && (ends_with(".xml") || ends_with(".txt")))
    COLLX_THROW(errc::invalid_argument, "read_topology takes the topology's text, not a path: read '" + std::string(text) +
                                            "' first and pass its contents");
  std::size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) ++i;
  if (i < text.size() && text[i] == '<') return read_nccl_topology(text, source, opt);
  return read_nvidia_smi(text, source, opt);
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
