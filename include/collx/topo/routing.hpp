/// @file topo/routing.hpp
/// Which links a transfer between two GPUs crosses. The cost model and the ring search both count
/// load per *directed* link (id 2*link for a->b, 2*link+1 for b->a), so two transfers that share a
/// PCIe switch uplink, an NVSwitch port or a NIC slow each other down.
///
/// Rules (what NCCL does by default, simplified):
/// - Same machine, peer access on: NVLink if the GPUs have one (direct or both on the NVSwitch);
///   else PCIe through the lowest common switch/host bridge/CPU when the PCIe class is at most
///   route_options::p2p_max (NODE by default: peer access is not used across the SMP interconnect);
///   else host-staged.
/// - Host-staged (peer access off, NCCL_P2P_DISABLE=1, or beyond p2p_max, or a pair the CUDA
///   runtime said cannot access each other's memory: topology::peer_access()): up to the sender's CPU,
///   across to the receiver's CPU if different, down to the receiver; a pair cap of
///   host_staged_GBps() applies on top of the links.
/// - Different machines: from the GPU to its nearest NICs (the smallest PCIe class; ties share the
///   bytes evenly, as NCCL spreads channels over NICs), through the fabric, to the receiving GPU's
///   nearest NICs and down to it.
#pragma once

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// How routes are chosen.
struct route_options {
  bool p2p = true;                      ///< GPU peer access (false: NCCL_P2P_DISABLE=1, everything host-staged)
  path_type p2p_max = path_type::node;  ///< PCIe peer access up to this class; beyond it, host-staged
};

/// Which latency figures a transfer pays (see cost_model.hpp).
enum class transport_class : std::uint8_t {
  nvlink,   ///< peer access over NVLink (direct or through NVSwitch)
  pcie,     ///< any other path within a machine: PCIe peer access or host-staged
  network,  ///< between machines
};

/// Name of a transport class ("NVLink", "PCIe", "NET").
constexpr std::string_view transport_class_name(transport_class c) noexcept {
  return c == transport_class::nvlink ? "NVLink" : c == transport_class::pcie ? "PCIe" : "NET";
}

/// The links one GPU-to-GPU transfer crosses.
struct route {
  std::vector<std::pair<int, double>> hops;  ///< (directed link id, fraction of the bytes that cross it)
  double pair_cap_GBps = std::numeric_limits<double>::infinity();  ///< host-staged rate (GB/s, host_staged_GBps), else inf
  path_info path;                            ///< class, as the matrix shows it
  transport_class cls = transport_class::nvlink;  ///< for latency
  bool host_staged = false;                  ///< through host memory
  /// What one GB/s of this transfer uses of each resource (utilisation 1 = saturated): a directed
  /// link d uses fraction / GBps(d). A host-staged transfer also uses 1 / host_staged_GBps(gen,
  /// same socket) of the sender's and the receiver's staging engines (router::staging_out(gpu),
  /// staging_in(gpu)): a GPU copies through host memory at that rate however many peers it serves;
  /// across NUMA nodes it also uses 1 / pair_cap_GBps of the sending CPU's and the receiving CPU's
  /// cross-node staging (staging_out(cpu), staging_in(cpu)): all host-staged traffic leaving a NUMA
  /// node shares that rate.
  std::vector<std::pair<long, double>> load;
};

/// Routes between GPUs of one topology, cached. Not thread-safe (one per thread, or guard it).
class router {
 public:
  /// @param t must outlive the router
  explicit router(const topology& t, route_options o = {}) : t_(&t), o_(o) {}

  /// The topology routed over.
  const topology& topo() const noexcept { return *t_; }
  /// The options.
  const route_options& options() const noexcept { return o_; }

  /// Directed id of link l in the direction leaving vertex `from`.
  int directed(int l, int from) const { return 2 * l + (t_->links[static_cast<std::size_t>(l)].a == from ? 0 : 1); }

  /// Bandwidth (GB/s) of a directed link.
  double GBps(int d) const { return t_->links[static_cast<std::size_t>(d / 2)].GBps; }

  /// Resource id of vertex g's host-staging engine (a GPU's, or a CPU's cross-node one), sending side (see route::load).
  long staging_out(int g) const { return 2 * static_cast<long>(t_->links.size()) + 2 * static_cast<long>(g); }
  /// Resource id of GPU vertex g's host-staging engine, receiving side.
  long staging_in(int g) const { return staging_out(g) + 1; }
  /// Number of resource ids (directed links, then two staging engines per vertex).
  long resources() const { return 2 * static_cast<long>(t_->links.size()) + 2 * static_cast<long>(t_->vertices.size()); }

  /// Readable name of a resource: a directed link's name(), or "GPU3 host-staging (send)".
  std::string resource_name(long res) const {
    if (res < 2 * static_cast<long>(t_->links.size())) return name(static_cast<int>(res));
    const long k = res - 2 * static_cast<long>(t_->links.size());
    const vertex& x = t_->vertices[static_cast<std::size_t>(k / 2)];
    return (t_->hosts > 1 && x.host >= 0 ? "h" + std::to_string(x.host) + ":" : std::string()) + x.name +
           (x.kind == vertex_kind::cpu ? " host-staged copies across NUMA nodes (" : " host-staged copies (") + (k % 2 ? "receive" : "send") + ")";
  }

  /// Readable name of a directed link: "GPU0->NVSwitch (NVLink x18)".
  std::string name(int d) const {
    const link& l = t_->links[static_cast<std::size_t>(d / 2)];
    const int from = d % 2 ? l.b : l.a, to = d % 2 ? l.a : l.b;
    auto vn = [&](int v) {
      const vertex& x = t_->vertices[static_cast<std::size_t>(v)];
      return (t_->hosts > 1 && x.host >= 0 ? "h" + std::to_string(x.host) + ":" : std::string()) + x.name;
    };
    std::string what(link_kind_name(l.kind));
    if (l.kind == link_kind::nvlink) what += " x" + std::to_string(l.count);
    if (l.kind == link_kind::pcie) what += " Gen" + std::to_string(l.generation) + " x" + std::to_string(l.width);
    return vn(from) + "->" + vn(to) + " (" + what + ")";
  }

  /// The route from GPU vertex a to GPU vertex b (a != b). @throws collx::error(invalid_argument)
  /// if a or b is not a GPU or no route exists.
  const route& between(int a, int b) {
    const auto key = std::make_pair(a, b);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(key, compute(a, b)).first->second;
  }

 private:
  const topology* t_;
  route_options o_;
  std::map<std::pair<int, int>, route> cache_;
  mutable std::map<int, std::vector<int>> nearest_, host_nics_;

  const vertex& v(int i) const { return t_->vertices[static_cast<std::size_t>(i)]; }

  // Directed links from a up to `stop` (exclusive of nothing: each parent link on the way).
  void up(int a, int stop, std::vector<int>& out) const {
    int guard = 0;
    while (a != stop && guard++ < 64) {
      const int l = t_->parent_link(a);
      if (l < 0) COLLX_THROW(errc::invalid_argument, "topology: " + v(a).name + " is not under " + v(stop).name);
      out.push_back(directed(l, a));
      a = v(a).parent;
    }
  }
  // Directed links down from `top` to b.
  void down(int top, int b, std::vector<int>& out) const {
    std::vector<int> rev;
    up(b, top, rev);
    for (auto it = rev.rbegin(); it != rev.rend(); ++it) out.push_back(*it ^ 1);
  }
  int lca(int a, int b) const {
    std::vector<int> ua;
    for (int x = a, g = 0; x >= 0 && g < 64; x = v(x).parent, ++g) ua.push_back(x);
    for (int x = b, g = 0; x >= 0 && g < 64; x = v(x).parent, ++g)
      if (std::find(ua.begin(), ua.end(), x) != ua.end()) return x;
    return -1;
  }
  // PCIe (and SMP) links from device a to device b on one machine; `via_cpu` forces the path
  // through the CPUs (host memory) even when a switch is shared.
  std::vector<int> pcie_path(int a, int b, bool via_cpu) const {
    std::vector<int> out;
    const int ca = t_->cpu_of(a), cb = t_->cpu_of(b);
    if (ca < 0 || cb < 0) COLLX_THROW(errc::invalid_argument, "topology: " + v(a).name + " or " + v(b).name + " is outside every CPU's PCIe tree");
    if (!via_cpu && ca == cb) {
      const int top = lca(a, b);
      up(a, top, out);
      down(top, b, out);
      return out;
    }
    up(a, ca, out);
    if (ca != cb) {
      const int l = t_->link_between(ca, cb, link_kind::smp);
      if (l < 0) COLLX_THROW(errc::invalid_argument, "topology: no link between " + v(ca).name + " and " + v(cb).name);
      out.push_back(directed(l, ca));
    }
    down(cb, b, out);
    return out;
  }
  // The NICs nearest to GPU g on its machine (all of the best PCIe class).
  std::vector<int> nearest_nics(int g) const {
    const auto hit = nearest_.find(g);
    if (hit != nearest_.end()) return hit->second;
    auto hn = host_nics_.find(v(g).host);
    if (hn == host_nics_.end()) hn = host_nics_.emplace(v(g).host, t_->nics(v(g).host)).first;
    std::vector<int> best;
    path_type bt = path_type::unknown;
    for (int n : hn->second) {
      const path_type c = t_->pcie_class(g, n);
      if (c == path_type::unknown) continue;
      if (best.empty() || c < bt) best.assign(1, n), bt = c;  // (not `= {n}`: g++ 13 -Warray-bounds false positive)
      else if (c == bt) best.push_back(n);
    }
    if (best.empty()) COLLX_THROW(errc::invalid_argument, "topology: " + v(g).name + " has no NIC to reach another machine");
    nearest_[g] = best;
    return best;
  }
  int network_link(int nic) const {
    for (int l : t_->incident(nic))
      if (t_->links[static_cast<std::size_t>(l)].kind == link_kind::network) return l;
    COLLX_THROW(errc::invalid_argument, "topology: NIC " + v(nic).name + " has no network link");
  }

  route compute(int a, int b) const {
    route r = compute_links(a, b);
    for (const auto& [d, f] : r.hops) r.load.emplace_back(d, f / GBps(d));
    if (r.host_staged) {
      const int ca = t_->cpu_of(a), cb = t_->cpu_of(b);
      const double same = host_staged_GBps(staged_gen(a, b), false);
      r.load.emplace_back(staging_out(a), 1.0 / same);
      r.load.emplace_back(staging_in(b), 1.0 / same);
      if (ca != cb) {
        r.load.emplace_back(staging_out(ca), 1.0 / r.pair_cap_GBps);
        r.load.emplace_back(staging_in(cb), 1.0 / r.pair_cap_GBps);
      }
    }
    return r;
  }

  route compute_links(int a, int b) const {
    if (a == b || v(a).kind != vertex_kind::gpu || v(b).kind != vertex_kind::gpu)
      COLLX_THROW(errc::invalid_argument, "router: a route joins two different GPUs");
    route r;
    r.path = t_->classify(a, b);
    auto add = [&](const std::vector<int>& ds, double frac) {
      for (int d : ds) {
        bool merged = false;
        for (auto& h : r.hops)
          if (h.first == d) h.second += frac, merged = true;
        if (!merged) r.hops.emplace_back(d, frac);
      }
    };
    if (v(a).host != v(b).host) {
      r.cls = transport_class::network;
      const std::vector<int> na = nearest_nics(a), nb = nearest_nics(b);
      for (int n : na) {
        std::vector<int> p = pcie_path(a, n, false);
        p.push_back(directed(network_link(n), n));
        add(p, 1.0 / static_cast<double>(na.size()));
      }
      for (int n : nb) {
        std::vector<int> p{directed(network_link(n), n) ^ 1};
        const std::vector<int> q = pcie_path(n, b, false);
        p.insert(p.end(), q.begin(), q.end());
        add(p, 1.0 / static_cast<double>(nb.size()));
      }
      return r;
    }
    const bool p2p = o_.p2p && t_->peer_access(a, b);
    if (p2p && r.path.type == path_type::nvlink) {
      r.cls = transport_class::nvlink;
      int direct = -1;
      for (int l : t_->incident(a))
        if (t_->other(l, a) == b && t_->links[static_cast<std::size_t>(l)].kind == link_kind::nvlink) direct = l;
      const auto [ka, sa] = t_->nvswitch_links(a);
      const auto [kb, sb] = t_->nvswitch_links(b);
      double via = 0;
      int la = -1, lb = -1;
      if (sa >= 0 && sa == sb) {
        la = t_->link_between(a, sa, link_kind::nvlink), lb = t_->link_between(b, sb, link_kind::nvlink);
        via = std::min(t_->links[static_cast<std::size_t>(la)].GBps, t_->links[static_cast<std::size_t>(lb)].GBps);
      }
      if (direct >= 0 && t_->links[static_cast<std::size_t>(direct)].GBps >= via) add({directed(direct, a)}, 1.0);
      else add({directed(la, a), directed(lb, sb)}, 1.0);
      return r;
    }
    const path_type pc = t_->pcie_class(a, b);
    r.cls = transport_class::pcie;
    if (p2p && pc != path_type::unknown && pc <= o_.p2p_max) {
      add(pcie_path(a, b, false), 1.0);
      return r;
    }
    r.host_staged = true;
    add(pcie_path(a, b, true), 1.0);
    r.pair_cap_GBps = host_staged_GBps(staged_gen(a, b), t_->cpu_of(a) != t_->cpu_of(b));
    return r;
  }

  int staged_gen(int a, int b) const {
    const int la = t_->parent_link(a), lb = t_->parent_link(b);
    return std::min(la >= 0 ? t_->links[static_cast<std::size_t>(la)].generation : 0,
                    lb >= 0 ? t_->links[static_cast<std::size_t>(lb)].generation : 0);
  }
};

}  // namespace topo
}  // namespace v0
}  // namespace collx
