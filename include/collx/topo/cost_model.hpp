/// @file topo/cost_model.hpp
/// A topology-aware cost model: time = latency + bytes / bandwidth per phase, where the bandwidth
/// term counts link sharing. Each algorithm becomes one or more phases of flows (GPU a sends B
/// bytes to GPU b); every flow is routed (routing.hpp) and adds B x fraction / bandwidth seconds of
/// busy time to each directed link it crosses; a phase's bandwidth time is its busiest link (or
/// host-staged GPU pair). Pipelined algorithms (ring, double binary tree, hierarchical) are one
/// phase; collx's binomial tree is one phase per round.
///
/// Algorithms: ring (channels from ring_search.hpp, NCCL's ring), double binary tree (NCCL's tree:
/// chains inside machines, two binary trees between them), hierarchical (reduce-scatter ring inside
/// each machine, all-reduce ring between machines per local GPU "rail", all-gather inside, all
/// pipelined), direct (collx's one-shot/two-shot), binomial tree (collx's tree.hpp).
///
/// Protocols and latencies follow NCCL's tuning model (src/graph/tuning.cc): per-step hardware
/// latency by transport (NVLink / PCIe / network) and protocol, a base latency per algorithm and
/// protocol, and bandwidth factors (LL moves 1/4 of the bandwidth in NCCL's ring model, LL128
/// 0.92, a tree reaches 0.9 of its links). Those are NCCL's measured figures, not collx's.
///
/// algo::automatic can use it: make_selector(topology) returns a callable for
/// communicator_options::selector.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/topo/placement.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/topo/routing.hpp>
#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// NCCL's protocols: how data and completion flags travel.
enum class protocol : std::uint8_t {
  simple,  ///< large chunks, a flag per chunk: full bandwidth, highest latency
  ll128,   ///< 120 data bytes per 128-byte line with an inline flag
  ll,      ///< 8-byte stores carrying 4 data bytes and a 4-byte flag: lowest latency
};

/// Name of a protocol ("Simple", "LL128", "LL").
constexpr std::string_view protocol_name(protocol p) noexcept {
  return p == protocol::simple ? "Simple" : p == protocol::ll128 ? "LL128" : "LL";
}

/// The algorithms the model knows.
enum class algo : std::uint8_t {
  ring,           ///< ring over channels (NCCL ring; collx ring with one channel in rank order)
  double_tree,    ///< NCCL's double binary tree (chains inside machines)
  binomial_tree,  ///< collx's rank-ordered binomial tree (algo/tree.hpp)
  direct,         ///< collx's direct: one-shot up to cost_model::one_shot_max_bytes, two-shot above
  hierarchical,   ///< intra-machine reduce-scatter, inter-machine all-reduce per rail, intra all-gather
};

/// Name of an algorithm of the model ("ring", "tree", "binomial", "direct", "hierarchical").
constexpr std::string_view algo_name(algo a) noexcept {
  switch (a) {
    case algo::ring: return "ring";
    case algo::double_tree: return "tree";
    case algo::binomial_tree: return "binomial";
    case algo::direct: return "direct";
    case algo::hierarchical: return "hierarchical";
  }
  return "?";
}

/// Latency figures in seconds, NCCL's tuning model (src/graph/tuning.cc, NCCL 2.8 era):
/// base latency per algorithm family and protocol, and per-step hardware latency per transport.
struct latency_figures {
  // [protocol: LL, LL128, Simple]
  double ring_base[3] = {3.6e-6, 10.0e-6, 8.4e-6};   ///< ring, direct, binomial, hierarchical
  double tree_base[3] = {4.4e-6, 4.4e-6, 0.0};       ///< double binary tree
  // [transport: NVLink, PCIe, network][protocol]
  double ring_step[3][3] = {{0.47e-6, 1.9e-6, 3.4e-6}, {1.0e-6, 2.5e-6, 5.7e-6}, {2.7e-6, 4.0e-6, 9.6e-6}};  ///< per ring step
  double tree_step[3][3] = {{0.52e-6, 1.2e-6, 28e-6}, {1.0e-6, 1.9e-6, 28e-6}, {5.0e-6, 8.5e-6, 50e-6}};    ///< per tree level
};

/// Settings of the model.
struct model_options {
  route_options routing = {};      ///< peer access and its limit
  ring_search_options rings = {};  ///< channels and search effort
  bool search = true;              ///< false: one ring in rank order (what collx's own ring does)
  latency_figures latency = {};    ///< latency figures
  double tree_efficiency = 0.9;    ///< fraction of link bandwidth a tree pipeline reaches (NCCL: busBw * .9)
};

/// One predicted call.
struct prediction {
  collective coll = collective::allreduce;  ///< the collective
  algo method = algo::ring;                 ///< the algorithm predicted
  protocol proto = protocol::simple;        ///< the NCCL protocol predicted
  std::size_t bytes = 0;       ///< as selection_query::bytes
  int ranks = 0;               ///< GPUs
  int nodes = 0;               ///< machines
  bool valid = false;          ///< false: the algorithm does not apply (e.g. hierarchical on one machine)
  double time_s = 0;           ///< latency_s + bandwidth_s
  double latency_s = 0;        ///< the latency term
  double bandwidth_s = 0;      ///< the bytes / bandwidth term (busiest link)
  double algbw_GBps = 0;       ///< bytes / time, GB/s (nccl-tests' algbw)
  double busbw_GBps = 0;       ///< algbw x the collective's bus factor (nccl-tests' busbw)
  std::string bottleneck;      ///< the busiest link
};

/// nccl-tests' bus-bandwidth factor for a collective on n ranks: all-reduce 2(n-1)/n;
/// reduce-scatter, all-gather, all-to-all (n-1)/n; broadcast, reduce 1 (doc/PERFORMANCE.md).
constexpr double bus_factor(collective c, int n) noexcept {
  if (n <= 1) return 1.0;
  const double f = static_cast<double>(n - 1) / n;
  switch (c) {
    case collective::allreduce: return 2 * f;
    case collective::reduce_scatter:
    case collective::all_gather:
    case collective::all_to_all: return f;
    default: return 1.0;
  }
}

/// The cost model of a set of GPUs (rank order) on a topology. Rings, trees and routes are built
/// once, at construction. Not thread-safe (routes are cached as they are used).
class model {
 public:
  /// A GPU sends `bytes` to another GPU.
  struct flow {
    int src = -1, dst = -1;  ///< GPU vertex ids
    double bytes = 0;        ///< bytes sent
  };

  /// @param t     must outlive the model
  /// @param gpus  GPU vertex ids in rank order; ranks on one machine must be contiguous
  /// @throws collx::error(invalid_argument) for an empty or repeated GPU list, or GPUs of one
  ///         machine that are not contiguous.
  model(const topology& t, std::vector<int> gpus, model_options o = {})
      : t_(&t), o_(o), r_(t, o.routing), gpus_(std::move(gpus)) {
    if (gpus_.empty()) COLLX_THROW(errc::invalid_argument, "model: no GPUs");
    for (int g : gpus_)
      if (g < 0 || g >= static_cast<int>(t.vertices.size()) || t.vertices[static_cast<std::size_t>(g)].kind != vertex_kind::gpu)
        COLLX_THROW(errc::invalid_argument, "model: vertex " + std::to_string(g) + " is not a GPU");
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
      const int h = t.vertices[static_cast<std::size_t>(gpus_[i])].host;
      if (hosts_.empty() || hosts_.back() != h) {
        if (std::find(hosts_.begin(), hosts_.end(), h) != hosts_.end())
          COLLX_THROW(errc::invalid_argument, "model: the GPUs of host " + std::to_string(h) + " are not contiguous in rank order");
        hosts_.push_back(h);
        per_host_.emplace_back();
      }
      per_host_.back().push_back(gpus_[i]);
    }
    for (std::size_t i = 0; i < gpus_.size(); ++i)
      for (std::size_t j = i + 1; j < gpus_.size(); ++j)
        if (gpus_[i] == gpus_[j]) COLLX_THROW(errc::invalid_argument, "model: a GPU is listed twice");
    build();
  }

  /// Ranks (GPUs).
  int ranks() const noexcept { return static_cast<int>(gpus_.size()); }
  /// Machines.
  int nodes() const noexcept { return static_cast<int>(hosts_.size()); }
  /// GPUs per machine of the first machine.
  int per_node() const noexcept { return static_cast<int>(per_host_.front().size()); }
  /// The rings (GPU vertex ids) the ring algorithm uses, one per channel, across all machines.
  const std::vector<std::vector<int>>& rings() const noexcept { return rings_; }
  /// The first machine's intra-machine ring set (what the search found there).
  const ring_set& node_rings() const noexcept { return node_rings_.front(); }
  /// The double binary trees, one per channel.
  const std::vector<double_tree>& trees() const noexcept { return trees_; }
  /// The router (for link names and routes).
  router& routes() noexcept { return r_; }
  /// The options.
  const model_options& options() const noexcept { return o_; }

  /// Predicts collective `c` of `bytes` (as selection_query::bytes) with algorithm `a` and protocol `p`.
  /// Applies: ring, direct and binomial_tree to every collective; double_tree to allreduce, broadcast
  /// and reduce; hierarchical to allreduce on two or more machines. Otherwise valid is false.
  prediction predict(collective c, algo a, protocol p, std::size_t bytes) {
    prediction out;
    out.coll = c, out.method = a, out.proto = p, out.bytes = bytes, out.ranks = ranks(), out.nodes = nodes();
    const int n = ranks(), m = nodes();
    // Flows are built for a reference size; bandwidth time is linear in the size (and inversely in
    // the efficiency), so each (collective, algorithm) is routed once and cached.
    const double S = 1e9, scale = static_cast<double>(bytes) / S;
    const bool one_shot = c == collective::allreduce && bytes <= cost_model::one_shot_max_bytes;
    const int key = static_cast<int>(c) * 64 + static_cast<int>(a) * 2 + (a == algo::direct && one_shot ? 1 : 0);
    const auto cached = unit_.find(key);
    const int pi = p == protocol::ll ? 0 : p == protocol::ll128 ? 1 : 2;
    const latency_figures& L = o_.latency;
    const int intra = intra_class_;
    const double pf = p == protocol::ll ? 0.25 : p == protocol::ll128 ? 0.92 : 1.0;
    if (n == 1) {
      out.valid = a != algo::hierarchical;
      return out;
    }
    std::vector<flow> f;
    double lat = 0, eff = pf;
    const int C = static_cast<int>(rings_.size());
    const int ppn = per_node();
    auto ring_flows = [&](double per_hop_share) {
      for (const auto& ring : rings_)
        for (std::size_t i = 0; i < ring.size(); ++i) f.push_back({ring[i], ring[(i + 1) % ring.size()], per_hop_share * S / C});
    };
    auto steps_lat = [&](int steps, int inter_steps) {
      return L.ring_base[pi] + (steps - inter_steps) * L.ring_step[intra][pi] + inter_steps * L.ring_step[2][pi];
    };
    switch (a) {
      case algo::ring:
        switch (c) {
          case collective::allreduce: ring_flows(2.0 * (n - 1) / n), lat = steps_lat(2 * (n - 1), m > 1 ? 2 * (m - 1) : 0); break;
          case collective::reduce_scatter:
          case collective::all_gather: ring_flows(1.0 * (n - 1) / n), lat = steps_lat(n - 1, m > 1 ? m - 1 : 0); break;
          case collective::broadcast:
          case collective::reduce:
            for (const auto& ring : rings_)
              for (std::size_t i = 0; i + 1 < ring.size(); ++i) f.push_back({ring[i], ring[i + 1], S / C});
            lat = steps_lat(n - 1, m > 1 ? m - 1 : 0);
            break;
          case collective::all_to_all: ring_flows((n - 1) / 2.0), lat = steps_lat(n - 1, m > 1 ? m - 1 : 0); break;
          default: lat = steps_lat(n - 1, m > 1 ? m - 1 : 0); break;
        }
        break;
      case algo::double_tree: {
        if (c != collective::allreduce && c != collective::broadcast && c != collective::reduce) return out;
        for (const double_tree& t : trees_)
          for (int k = 0; k < 2; ++k)
            for (std::size_t i = 0; i < t.gpus.size(); ++i) {
              const int par = t.parent[k][i];
              if (par < 0) continue;
              const double b = S / 2 / static_cast<double>(trees_.size());
              if (c != collective::broadcast) f.push_back({t.gpus[i], t.gpus[static_cast<std::size_t>(par)], b});
              if (c != collective::reduce) f.push_back({t.gpus[static_cast<std::size_t>(par)], t.gpus[i], b});
            }
        const int levels = m > 1 ? static_cast<int>(std::ceil(std::log2(static_cast<double>(m)))) : 0;
        lat = L.tree_base[pi] + (c == collective::allreduce ? 2 : 1) * ((ppn - 1) * L.tree_step[intra][pi] + levels * L.tree_step[2][pi]);
        eff = (p == protocol::ll ? 1.0 / 3.8 : pf) * o_.tree_efficiency;  // NCCL: tree LL busBw / 3.8
        break;
      }
      case algo::hierarchical: {
        if (c != collective::allreduce || m < 2) return out;
        const int g = ppn;
        for (const auto& rs : node_rings_per_host_)
          for (const auto& ring : rs)
            for (std::size_t i = 0; ring.size() > 1 && i < ring.size(); ++i)
              f.push_back({ring[i], ring[(i + 1) % ring.size()], 2.0 * (g - 1) / g * S / static_cast<double>(rs.size())});
        for (int j = 0; j < g; ++j)
          for (int h = 0; h < m; ++h)
            f.push_back({per_host_[static_cast<std::size_t>(h)][static_cast<std::size_t>(j)],
                         per_host_[static_cast<std::size_t>((h + 1) % m)][static_cast<std::size_t>(j)], 2.0 * (m - 1) / m * S / g});
        lat = L.ring_base[pi] + 2 * (g - 1) * L.ring_step[intra][pi] + 2 * (m - 1) * L.ring_step[2][pi];
        break;
      }
      case algo::direct: {
        double per_pair;
        int steps = 1;
        switch (c) {
          case collective::allreduce: per_pair = one_shot ? S : 2 * S / n, steps = one_shot ? 1 : 2; break;
          case collective::broadcast: per_pair = S; break;
          case collective::reduce: per_pair = S; break;
          default: per_pair = S / n; break;
        }
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n; ++j) {
            if (i == j) continue;
            if ((c == collective::broadcast && i != 0) || (c == collective::reduce && j != 0)) continue;
            f.push_back({gpus_[static_cast<std::size_t>(i)], gpus_[static_cast<std::size_t>(j)], per_pair});
          }
        lat = L.ring_base[pi] + steps * L.ring_step[m > 1 ? 2 : intra][pi];
        break;
      }
      case algo::binomial_tree: {
        // Rounds of collx's rank-ordered binomial reduce to rank 0, then binomial broadcast.
        const bool up = c != collective::broadcast, down = c != collective::reduce;
        std::vector<std::vector<flow>> rounds;
        if (up)
          for (int mask = 1; mask < n; mask <<= 1) {
            rounds.emplace_back();
            for (int r = mask; r < n; r += 2 * mask) rounds.back().push_back({gpus_[static_cast<std::size_t>(r)], gpus_[static_cast<std::size_t>(r - mask)], S});
          }
        if (down) {
          int top = 1;
          while (top < n) top <<= 1;
          for (int mask = top >> 1; mask >= 1; mask >>= 1) {
            rounds.emplace_back();
            for (int r = 0; r + mask < n; r += 2 * mask) rounds.back().push_back({gpus_[static_cast<std::size_t>(r)], gpus_[static_cast<std::size_t>(r + mask)], S});
          }
        }
        out.valid = true;
        out.latency_s = L.ring_base[pi];
        if (cached == unit_.end()) {
          unit_cost u;
          double worst = 0;
          for (const auto& rf : rounds) {
            std::string why;
            const double bt = bandwidth_time(rf, 1.0, why);
            int cls = 0;
            for (const flow& x : rf) cls = std::max(cls, static_cast<int>(r_.between(x.src, x.dst).cls));
            u.step_latency.push_back(cls);
            u.seconds += bt;
            if (bt > worst) worst = bt, u.bottleneck = why;
          }
          unit_[key] = u;
        }
        const unit_cost& u = unit_[key];
        for (int cls : u.step_latency) out.latency_s += L.ring_step[cls][pi];
        out.bandwidth_s = u.seconds * scale / pf;
        out.bottleneck = u.bottleneck;
        finish(out);
        return out;
      }
    }
    out.valid = true;
    out.latency_s = lat;
    if (cached == unit_.end()) {
      unit_cost u;
      u.seconds = bandwidth_time(f, 1.0, u.bottleneck);
      unit_[key] = u;
    }
    out.bandwidth_s = unit_[key].seconds * scale / eff;
    out.bottleneck = unit_[key].bottleneck;
    finish(out);
    return out;
  }

  /// Predicts with the Simple protocol.
  prediction predict(collective c, algo a, std::size_t bytes) { return predict(c, a, protocol::simple, bytes); }

  /// The fastest valid (algorithm, protocol) among `algos` for collective `c` of `bytes`.
  prediction best(collective c, std::size_t bytes, std::vector<algo> algos = {algo::ring, algo::double_tree, algo::hierarchical},
                  std::vector<protocol> protos = {protocol::simple, protocol::ll128, protocol::ll}) {
    prediction b;
    for (algo a : algos)
      for (protocol p : protos) {
        const prediction x = predict(c, a, p, bytes);
        if (x.valid && (!b.valid || x.time_s < b.time_s)) b = x;
      }
    return b;
  }

  /// Bandwidth time of flows running at once, seconds: the busiest resource's busy time (for a
  /// directed link bytes x fraction / (GB/s x efficiency); for a host-staging engine bytes /
  /// (rate x efficiency)); `why` names it.
  double bandwidth_time(const std::vector<flow>& flows, double efficiency, std::string& why) {
    std::vector<double> busy(static_cast<std::size_t>(r_.resources()), 0.0);
    for (const flow& x : flows) {
      if (x.src == x.dst || x.bytes <= 0) continue;
      for (const auto& [res, w] : r_.between(x.src, x.dst).load) busy[static_cast<std::size_t>(res)] += x.bytes * w / (1e9 * efficiency);
    }
    double worst = 0;
    for (std::size_t k = 0; k < busy.size(); ++k)
      if (busy[k] > worst) worst = busy[k], why = r_.resource_name(static_cast<long>(k));
    return worst;
  }

 private:
  const topology* t_;
  model_options o_;
  router r_;
  std::vector<int> gpus_;
  std::vector<int> hosts_;
  std::vector<std::vector<int>> per_host_;
  std::vector<ring_set> node_rings_;
  std::vector<std::vector<std::vector<int>>> node_rings_per_host_;
  std::vector<std::vector<int>> rings_;
  std::vector<double_tree> trees_;
  int intra_class_ = 0;
  struct unit_cost {
    double seconds = 0;              // bandwidth time of 1e9 bytes at efficiency 1
    std::string bottleneck;
    std::vector<int> step_latency;   // binomial: transport class of each round
  };
  std::map<int, unit_cost> unit_;

  void finish(prediction& out) const {
    out.time_s = out.latency_s + out.bandwidth_s;
    if (out.time_s > 0) {
      out.algbw_GBps = static_cast<double>(out.bytes) / out.time_s / 1e9;
      out.busbw_GBps = out.algbw_GBps * bus_factor(out.coll, out.ranks);
    }
  }

  void build() {
    const int m = nodes();
    // Intra-machine rings: searched on each machine (once when machines are copies of one).
    ring_search_options ro = o_.rings;
    if (m > 1) {
      int nics = static_cast<int>(t_->nics(hosts_.front()).size());
      ro.min_channels = std::max(ro.min_channels, std::min(nics, ro.max_channels));
    }
    for (std::size_t h = 0; h < hosts_.size(); ++h) {
      const std::vector<int>& g = per_host_[h];
      if (!o_.search) {
        ring_set rs;
        rs.rings = {g};
        node_rings_.push_back(rs);
        continue;
      }
      const bool copy = h > 0 && t_->vertices_per_host > 0 && g.size() == per_host_[0].size() &&
                        [&] {
                          const int off = (hosts_[h] - hosts_[0]) * t_->vertices_per_host;
                          for (std::size_t i = 0; i < g.size(); ++i)
                            if (g[i] != per_host_[0][i] + off) return false;
                          return true;
                        }();
      if (copy) {
        const int off = (hosts_[h] - hosts_[0]) * t_->vertices_per_host;
        ring_set rs = node_rings_.front();
        for (auto& ring : rs.rings)
          for (int& v : ring) v += off;
        node_rings_.push_back(std::move(rs));
      } else {
        node_rings_.push_back(search_rings(r_, g, ro));
      }
    }
    for (const ring_set& rs : node_rings_) node_rings_per_host_.push_back(rs.rings);
    // Global rings: channel c cuts each machine's ring c at a rotating position and chains machines.
    const std::size_t C = node_rings_.front().rings.size();
    for (std::size_t c = 0; c < C; ++c) {
      std::vector<int> ring;
      std::vector<std::vector<int>> chains;
      for (std::size_t h = 0; h < hosts_.size(); ++h) {
        const std::vector<int>& local = node_rings_[h].rings[c % node_rings_[h].rings.size()];
        const std::size_t len = local.size();
        const std::size_t cut = m > 1 ? (c * len / C + 1) % len : 0;
        std::vector<int> chain;
        for (std::size_t k = 0; k < len; ++k) chain.push_back(local[(cut + k) % len]);
        ring.insert(ring.end(), chain.begin(), chain.end());
        chains.push_back(std::move(chain));
      }
      rings_.push_back(std::move(ring));
      trees_.push_back(build_double_tree(chains));
    }
    // Intra-machine transport class (for latency): NVLink if the first ring's intra hops all are.
    intra_class_ = 0;
    const std::vector<int>& first = node_rings_.front().rings.front();
    for (std::size_t i = 0; first.size() > 1 && i < first.size(); ++i)
      intra_class_ = std::max(intra_class_, static_cast<int>(r_.between(first[i], first[(i + 1) % first.size()]).cls));
    intra_class_ = std::min(intra_class_, 1);
  }
};

/// The all-reduce algorithms NCCL chooses among, in the model's terms: on one machine only its ring
/// (NCCL's tuning model rates its tree there -- a chain -- at half the bus bandwidth of its graph,
/// below the ring's 2(n-1)/n, so large messages go to the ring); across machines ring, tree, and the
/// hierarchical path that stands in for NCCL's NVLS/CollNet-style intra/inter splits.
inline std::vector<algo> nccl_allreduce_algos(int nodes) {
  if (nodes <= 1) return {algo::ring};
  return {algo::ring, algo::double_tree, algo::hierarchical};
}

/// Settings of make_selector.
struct selector_options {
  model_options model = {};         ///< for GPU topologies (search is turned off: collx rings run in rank order)
  double cpu_latency_s = 1.0e-6;    ///< CPU-only topologies: per-step latency (collx::cost_model's default)
  double cpu_copy_GBps = 8.0;       ///< CPU-only topologies: per-rank copy bandwidth (collx::cost_model's default)
};

/// A selector for communicator_options::selector built from a topology: for a query, it predicts
/// collx's ring (one channel, rank order), binomial tree and direct algorithms and returns the
/// fastest (ties: direct, then tree, as collx::cost_model does; never ring for a non-commutative op,
/// never tree for all_to_all). Rank r is the topology's r-th GPU (host-major). A world larger than
/// the topology's GPUs but a multiple of one machine's is modelled as that many machines joined by
/// a network (make_cluster; NIC speeds must be known). Otherwise — and for a topology without GPUs,
/// whose ranks are processes placed by place_local_rank — collx::cost_model's alpha-beta model is
/// used, with its bandwidth lowered to the inter-CPU link's when ranks span NUMA nodes.
/// The returned callable is thread-safe (models are built once per world size and shared).
inline std::function<algorithm(const selection_query&)> make_selector(const topology& t, selector_options o = {}) {
  struct state {
    topology base;
    selector_options opt;
    std::mutex mu;
    std::map<int, std::pair<std::unique_ptr<topology>, std::unique_ptr<model>>> models;
  };
  auto s = std::make_shared<state>();
  s->base = t;
  s->opt = o;
  s->opt.model.search = false;
  s->opt.model.rings.max_channels = 1;
  return [s](const selection_query& q) -> algorithm {
    const int n = q.world_size;
    auto alpha_beta = [&]() -> algorithm {
      cost_model cm{s->opt.cpu_latency_s, s->opt.cpu_copy_GBps * 1e9};
      const std::vector<int> cpus = s->base.of_kind(vertex_kind::cpu, 0);
      if (cpus.size() > 1 && n > 1) {
        const int first = numa_node_for_local_rank(s->base, 0, n), last = numa_node_for_local_rank(s->base, n - 1, n);
        if (first != last) {
          double smp = std::numeric_limits<double>::infinity();
          for (const link& l : s->base.links)
            if (l.kind == link_kind::smp) smp = std::min(smp, l.GBps);
          if (std::isfinite(smp)) cm = cm.across_numa_link(smp);
        }
      }
      return cm.choose(q);
    };
    if (n <= 1) return algorithm::direct;
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->models.find(n);
    if (it == s->models.end()) {
      std::unique_ptr<topology> tp;
      std::unique_ptr<model> md;
      const std::vector<int> all = s->base.gpus();
      const int per = static_cast<int>(s->base.gpus(0).size());
      try {
        if (static_cast<int>(all.size()) >= n) {
          md = std::make_unique<model>(s->base, std::vector<int>(all.begin(), all.begin() + n), s->opt.model);
        } else if (per > 0 && s->base.hosts == 1 && n % per == 0) {
          tp = std::make_unique<topology>(make_cluster(s->base, n / per));
          md = std::make_unique<model>(*tp, tp->gpus(), s->opt.model);
        }
      } catch (const error&) {
        md.reset();  // e.g. NIC speed unknown: fall back to the alpha-beta model
      }
      it = s->models.emplace(n, std::make_pair(std::move(tp), std::move(md))).first;
    }
    model* md = it->second.second.get();
    if (!md) return alpha_beta();
    algorithm best = algorithm::direct;
    double best_t = md->predict(q.coll, algo::direct, q.bytes).time_s;
    for (algorithm a : {algorithm::tree, algorithm::ring}) {
      if (a == algorithm::ring && !q.commutative) continue;
      if (a == algorithm::tree && q.coll == collective::all_to_all) continue;
      const prediction p = md->predict(q.coll, a == algorithm::ring ? algo::ring : algo::binomial_tree, q.bytes);
      if (p.valid && p.time_s < best_t) best = a, best_t = p.time_s;
    }
    return best;
  };
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
