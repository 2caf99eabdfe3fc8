/// @file topo/ring_search.hpp
/// Rings and trees built from the topology.
///
/// Rings: several channels (rings that run at once, each carrying an equal share of the data), as
/// NCCL builds them. For each candidate per-channel speed s (every link's bandwidth divided by
/// 1..max_channels, fastest first) a depth-first search packs as many Hamiltonian rings as the links
/// hold: a ring may take a hop only if every directed link on the hop's route (see routing.hpp) still
/// has s GB/s left after the ring's own earlier hops; taking it uses them up. Hops with the most
/// bandwidth left are tried first, so load spreads over distinct links; a few trials with shuffled
/// ties recover from some unlucky choices. The set with the most total bandwidth (channels x s)
/// wins; on a tie, the faster channels (fewer of them). NCCL's search (src/graph/search.cc) works
/// the same way in spirit: fixed speed per channel, fewest links shared.
/// Up to 8 GPUs (ring_search_options::exact_max_gpus), a speed at which these greedy trials fall
/// short of the channel bound is searched again (detail::exact_ring_packer): every Hamiltonian ring
/// (7! = 5040 at 8 GPUs), then a branch and bound over how many of each to run, within a work
/// budget (at most about 0.05 s on this project's 2-core test machine). Why: packed one after
/// another, the greedy rings are not always the best set. A review compared them with an exact
/// search (every Hamiltonian ring, an integer program over their counts): best on every machine
/// file in tests/data, but 11-50% short on 24 of 405 other cases, e.g. DGX-1 GPUs {0, 2, 3, 7}:
/// one ring of 0.72 GB/s where two rings that each cross the sockets one way give 1.44; a DGX-1
/// whose GPU0-GPU3 bond is widened from NV2 to NV6: 100 GB/s where NCCL's six rings still give
/// 120. The second search finds both (tests/test_topo_model), and on random boxes of 2-6 GPUs it
/// matched every multiset of up to 8 rings (1,700 boxes in a review). It is not exact at 8 GPUs:
/// its bounds are weak over 5040 rings, and the budget can run out on a speed where nothing better
/// exists: 6 of 58 random 8-GPU boxes stayed 2-29% short of an integer program's best. Past 8
/// GPUs the greedy set stands: on some irregular boxes it is half the best.
/// Work: each trial packs rings until one does not fit, and giving up on that one used to take
/// the whole per-ring budget, at every speed and in every trial: irregular 12-16-GPU NVLink meshes
/// took up to 1.7 s on the 2-core test machine when quiet, 3-7 s under load, 82 s under ASan.
/// Now a trial stops once the links left cannot carry the rings it would need to count (two bounds
/// that hold for any set of rings: a flow of k rings out of and into every GPU, and 2k hop uses at
/// each GPU, at most k per neighbour); the depth-first search drops a path that leaves a GPU off
/// it with no usable hop in or out; a speed with no ring on idle links is tried once. None of these
/// loses a ring a trial found before, and the pruning finds some the budget used to cut short. On
/// a review's 124 meshes of 12-16 GPUs (random NVLink bonds of V100s, A100s, H100s; DGX-1 pairs; a
/// hypercube; NVSwitch boxes) it took at most 0.16 s there (0.6 s under ASan), with the same or
/// more total bandwidth on every one (more on 14, by up to 50%), and the same rings on every
/// machine file in tests/data. On a second review's 30 random meshes of 10-16 GPUs: at most 1.3 s
/// (13 rings where there were 5, in 2.9 s), never fewer rings.
///
/// Trees: NCCL's double binary tree (Sanders, Speck, Traeff, Parallel Computing 2009) over machines,
/// with a chain inside each machine; the second tree mirrors (odd machine count) or shifts (even) the
/// first so that most machines are a leaf in one tree and inside the other, and its chains run the
/// other way.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <collx/topo/routing.hpp>
#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// How the ring search works (see the file comment).
struct ring_search_options {
  int max_channels = 16;       ///< most rings
  int min_channels = 1;        ///< at least this many: rings are repeated, each at a share of the speed
  int trials = 24;             ///< greedy attempts per candidate speed (the first one unshuffled)
  std::size_t budget = 20000;  ///< depth-first steps per ring attempt
  /// Up to this many GPUs (at most 8: larger values act as 8), a speed at which the greedy packing
  /// falls short of the channel bound is searched again: every Hamiltonian ring (7! = 5040 at 8
  /// GPUs), then a branch and bound over how many of each, within exact_budget. 0 turns it off.
  std::size_t exact_max_gpus = 8;
  /// The branch and bound's work in all, in resource uses looked at (listing the rings counts too,
  /// but always runs to the end: about 2 x 10^5 at 8 GPUs); past it the best found stands.
  std::size_t exact_budget = 3000000;
};

/// Rings of GPU vertex ids, one per channel.
struct ring_set {
  std::vector<std::vector<int>> rings;  ///< per channel, GPU vertex ids in ring order (each sends to the next)
  double channel_GBps = 0;              ///< bandwidth every channel reaches with all of them running, GB/s
  double total_GBps = 0;                ///< channel_GBps x channels: a ring all-reduce's bus bandwidth
  /// Depth-first steps the greedy packing took over every speed and trial: its work, which unlike its
  /// time does not depend on the machine (for tests and tuning; the exact packing's is not counted).
  std::size_t steps = 0;
};

/// What a set of rings reaches on a topology with every channel running at once.
struct ring_evaluation {
  std::vector<double> channel_GBps;  ///< each channel's own bottleneck: min over its links of bandwidth / channels crossing
  double min_channel_GBps = 0;       ///< the slowest channel
  double total_GBps = 0;             ///< channels x slowest (equal shares, as NCCL splits data)
  std::string bottleneck;            ///< the link (or GPU pair) that limits the slowest channel
};

/// Evaluates rings (GPU vertex ids per channel) with sharing counted: every resource a hop uses
/// (directed links, host-staging engines; see route::load) is shared by all channel-hops that use it,
/// so a link crossed by k channels gives each 1/k of its bandwidth.
/// @throws collx::error(invalid_argument) for an empty ring list or a ring with a repeated GPU.
inline ring_evaluation evaluate_rings(router& r, const std::vector<std::vector<int>>& rings) {
  if (rings.empty()) COLLX_THROW(errc::invalid_argument, "evaluate_rings: no rings");
  std::map<long, double> util;  // utilisation per resource with every channel at 1 GB/s
  for (const auto& ring : rings) {
    for (std::size_t i = 0; i < ring.size(); ++i)
      for (std::size_t j = i + 1; j < ring.size(); ++j)
        if (ring[i] == ring[j]) COLLX_THROW(errc::invalid_argument, "evaluate_rings: a GPU appears twice in a ring");
    if (ring.size() < 2) continue;
    for (std::size_t i = 0; i < ring.size(); ++i)
      for (const auto& [res, w] : r.between(ring[i], ring[(i + 1) % ring.size()]).load) util[res] += w;
  }
  ring_evaluation e;
  e.min_channel_GBps = std::numeric_limits<double>::infinity();
  for (const auto& ring : rings) {
    double bw = std::numeric_limits<double>::infinity();
    std::string why;
    for (std::size_t i = 0; ring.size() >= 2 && i < ring.size(); ++i)
      for (const auto& [res, w] : r.between(ring[i], ring[(i + 1) % ring.size()]).load) {
        const double x = 1.0 / util[res];
        if (x < bw) bw = x, why = r.resource_name(res);
      }
    e.channel_GBps.push_back(bw);
    if (bw < e.min_channel_GBps) e.min_channel_GBps = bw, e.bottleneck = why;
  }
  e.total_GBps = e.min_channel_GBps * static_cast<double>(rings.size());
  return e;
}

/// A ring of GPU vertex ids (one of ring_set::rings) as ranks, for communicator_options::ring_order:
/// rank r drives GPU gpu_of_rank[r].
/// @throws collx::error(invalid_argument) when the ring and the ranks' GPUs are not the same set.
inline std::vector<int> ring_in_rank_order(const std::vector<int>& ring, const std::vector<int>& gpu_of_rank) {
  if (ring.size() != gpu_of_rank.size())
    COLLX_THROW(errc::invalid_argument, "ring_in_rank_order: the ring has " + std::to_string(ring.size()) + " GPUs for " +
                                            std::to_string(gpu_of_rank.size()) + " ranks");
  std::vector<int> order;
  for (int gpu : ring) {
    int found = -1;
    for (std::size_t r = 0; r < gpu_of_rank.size(); ++r)
      if (gpu_of_rank[r] == gpu) {
        if (found >= 0)
          COLLX_THROW(errc::invalid_argument, "ring_in_rank_order: two ranks drive GPU vertex " + std::to_string(gpu));
        found = static_cast<int>(r);
      }
    if (found < 0) COLLX_THROW(errc::invalid_argument, "ring_in_rank_order: no rank drives GPU vertex " + std::to_string(gpu));
    for (int seen : order)
      if (seen == found) COLLX_THROW(errc::invalid_argument, "ring_in_rank_order: the ring lists GPU vertex " + std::to_string(gpu) + " twice");
    order.push_back(found);
  }
  return order;
}

namespace detail {

/// search_rings' exact packing for a few GPUs (see the file comment): every Hamiltonian ring through
/// GPU 0 once, with what one GB/s of it uses of each resource (rings that use the same are one
/// candidate), then per speed a branch and bound over how many of each ring to run.
class exact_ring_packer {
 public:
  /// The most GPUs: 7! = 5040 rings at 8; 9! at 10 took 230 MB and a second.
  static constexpr std::size_t max_gpus = 8;

  /// `routes[i][j]`: the route from GPU i to GPU j (i != j) of search_rings' GPUs, which must be at
  /// most max_gpus. `budget`: work in all over every pack call, in resource uses looked at.
  exact_ring_packer(const std::vector<std::vector<const route*>>& routes, std::size_t budget) : n_(routes.size()), budget_(budget) {
    std::map<long, std::size_t> dense;  // resource ids, numbered from 0
    touching_.resize(2 * n_);
    std::vector<std::vector<use_list>> hop(n_, std::vector<use_list>(n_));
    for (std::size_t i = 0; i < n_; ++i)
      for (std::size_t j = 0; j < n_; ++j)
        if (i != j)
          for (const auto& [res, w] : routes[i][j]->load) {
            const std::size_t d = dense.try_emplace(res, dense.size()).first->second;
            hop[i][j].emplace_back(d, w);
            touching_[i].push_back(d), touching_[n_ + j].push_back(d);
          }
    nres_ = dense.size();
    for (auto& group : touching_) {
      std::sort(group.begin(), group.end());
      group.erase(std::unique(group.begin(), group.end()), group.end());
    }
    enumerate(hop);
  }

  /// More than `have` rings (up to `bound`) that fit together at `s` GB/s each, as GPU indices in
  /// ring order; empty when the budget ran out first or there are none.
  std::vector<std::vector<std::size_t>> pack(double s, int bound, std::size_t have) {
    std::vector<std::vector<std::size_t>> none;
    if (steps_ >= budget_) return none;
    std::vector<std::size_t> ids;  // candidates that fit alone at s
    std::vector<use_list> uses;    // their utilisation at s
    for (std::size_t k = 0; k < uses_.size(); ++k) {
      use_list u = uses_[k];
      bool fits = true;
      for (auto& [res, x] : u) x *= s, fits = fits && x <= 1 + eps;
      steps_ += u.size();
      if (fits) ids.push_back(k), uses.push_back(std::move(u));
    }
    const std::size_t m = uses.size();
    // Candidates that use the least in all first: good packings come early.
    std::vector<std::size_t> by(m);
    std::vector<double> total_use(m, 0.0);
    for (std::size_t k = 0; k < m; ++k) {
      by[k] = k;
      for (const auto& [res, u] : uses[k]) total_use[k] += u;
    }
    std::stable_sort(by.begin(), by.end(), [&](std::size_t x, std::size_t y) { return total_use[x] < total_use[y]; });
    // For the bounds: least_by_all[res], what every candidate uses of res at least (0 if one does
    // not use it); least_by_users[res], the least of those that use it.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> least_by_users(nres_, inf), least_by_all(nres_, 0.0);
    std::vector<std::size_t> users(nres_, 0);
    for (const use_list& u : uses)
      for (const auto& [res, x] : u) least_by_users[res] = std::min(least_by_users[res], x), ++users[res];
    for (std::size_t res = 0; res < nres_; ++res)
      if (users[res] == m) least_by_all[res] = least_by_users[res];
    std::vector<double> left(nres_, 1.0);
    std::vector<std::size_t> chosen, best_chosen;
    std::size_t best_count = have;
    // A speed may take a quarter of what is left: one where no better set exists (the search must
    // try every one) leaves some to slower speeds.
    const std::size_t stop = steps_ + (budget_ - std::min(budget_, steps_)) / 4;  // the scan above may have passed it
    // floor(x + 1e-6): a count that divides exactly up to rounding is not lost.
    auto search = [&](auto& self, std::size_t from) -> void {
      if (chosen.size() > best_count) best_count = chosen.size(), best_chosen = chosen;
      if (best_count >= static_cast<std::size_t>(bound) || steps_ > stop || steps_ > budget_) return;
      steps_ += nres_;
      double more = static_cast<double>(bound) - static_cast<double>(chosen.size());
      for (std::size_t res = 0; res < nres_; ++res)
        if (least_by_all[res] > 0) more = std::min(more, std::floor(left[res] / least_by_all[res] + 1e-6));
      // Every ring leaves (enters) each GPU once, using some resource on the routes out of (into)
      // it: no more rings than such uses the resources there still hold.
      for (const auto& group : touching_) {
        double uses_left = 0;
        for (std::size_t res : group)
          if (least_by_users[res] < inf) uses_left += std::floor(left[res] / least_by_users[res] + 1e-6);
        more = std::min(more, uses_left);
      }
      if (static_cast<double>(chosen.size()) + more <= static_cast<double>(best_count)) return;
      for (std::size_t k = from; k < m && best_count < static_cast<std::size_t>(bound) && steps_ <= stop && steps_ <= budget_; ++k) {
        const use_list& u = uses[by[k]];
        steps_ += u.size();
        bool fits = true;
        for (const auto& [res, x] : u) fits = fits && left[res] - x >= -eps;
        if (!fits) continue;
        for (const auto& [res, x] : u) left[res] -= x;
        chosen.push_back(by[k]);
        self(self, k);
        chosen.pop_back();
        for (const auto& [res, x] : u) left[res] += x;
      }
    };
    search(search, 0);
    std::vector<std::vector<std::size_t>> rings;
    for (std::size_t k : best_chosen) rings.push_back(orders_[ids[k]]);
    return rings;
  }

 private:
  using use_list = std::vector<std::pair<std::size_t, double>>;  // (resource, utilisation), nonzero ones
  static constexpr double eps = 1e-9;  // as search_rings': a resource full up to rounding still fits

  // Every directed ring through GPU 0, depth first; counted against the budget.
  void enumerate(const std::vector<std::vector<use_list>>& hop) {
    std::map<std::vector<std::pair<std::size_t, long long>>, std::size_t> seen;  // uses rounded to 1e-12
    std::vector<double> acc(nres_, 0.0);
    std::vector<std::size_t> path{0};
    std::vector<bool> on(n_, false);
    on[0] = true;
    auto add = [&](std::size_t i, std::size_t j, double sign) {
      steps_ += hop[i][j].size();
      for (const auto& [res, w] : hop[i][j]) acc[res] += sign * w;
    };
    auto extend = [&](auto& self) -> void {
      const std::size_t at = path.back();
      if (path.size() == n_) {
        add(at, 0, 1);
        use_list u;
        std::vector<std::pair<std::size_t, long long>> key;
        for (std::size_t res = 0; res < nres_; ++res)
          if (acc[res] > 1e-12) u.emplace_back(res, acc[res]), key.emplace_back(res, std::llround(acc[res] * 1e12));
        if (seen.try_emplace(std::move(key), orders_.size()).second) orders_.push_back(path), uses_.push_back(std::move(u));
        add(at, 0, -1);
        return;
      }
      for (std::size_t j = 1; j < n_; ++j)
        if (!on[j]) {
          add(at, j, 1);
          on[j] = true, path.push_back(j);
          self(self);
          on[j] = false, path.pop_back();
          add(at, j, -1);
        }
    };
    extend(extend);
  }

  std::size_t n_, budget_, nres_ = 0, steps_ = 0;
  std::vector<std::vector<std::size_t>> touching_;  // resources on the routes out of GPU i, then into it (n + i)
  std::vector<std::vector<std::size_t>> orders_;    // candidate rings
  std::vector<use_list> uses_;                      // their use per GB/s
};

/// Whether a flow of `want` fits from node `source` to node `sink` of a network given as a dense
/// matrix of capacities (left holding the residual network).
inline bool flow_reaches(std::vector<std::vector<int>>& cap, std::size_t source, std::size_t sink, long want) {
  const std::size_t m = cap.size();
  std::vector<std::size_t> from(m), queue;
  while (want > 0) {  // shortest augmenting paths (Edmonds-Karp), each carrying all it can
    std::fill(from.begin(), from.end(), m);
    from[source] = source;
    queue.assign(1, source);
    for (std::size_t q = 0; q < queue.size() && from[sink] == m; ++q)
      for (std::size_t v = 0; v < m; ++v)
        if (from[v] == m && cap[queue[q]][v] > 0) from[v] = queue[q], queue.push_back(v);
    if (from[sink] == m) return false;
    long push = want;
    for (std::size_t v = sink; v != source; v = from[v]) push = std::min<long>(push, cap[from[v]][v]);
    for (std::size_t v = sink; v != source; v = from[v]) cap[from[v]][v] -= static_cast<int>(push), cap[v][from[v]] += static_cast<int>(push);
    want -= push;
  }
  return true;
}

}  // namespace detail

/// Searches rings over `gpus` (GPU vertex ids, one machine) as the file comment describes.
/// One GPU gives one ring of one GPU and infinite bandwidth (nothing moves).
/// @throws collx::error(invalid_argument) for no GPUs, a repeated GPU, or GPUs no ring can join.
inline ring_set search_rings(router& r, const std::vector<int>& gpus, ring_search_options opt = {}) {
  const std::size_t n = gpus.size();
  if (n == 0) COLLX_THROW(errc::invalid_argument, "search_rings: no GPUs");
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j)
      if (gpus[i] == gpus[j]) COLLX_THROW(errc::invalid_argument, "search_rings: a GPU is listed twice");
  ring_set out;
  if (n == 1) {
    out.rings = {gpus};
    out.channel_GBps = out.total_GBps = std::numeric_limits<double>::infinity();
    return out;
  }
  opt.max_channels = std::max(1, opt.max_channels);
  // Routes; a GPU's sending capacity (its first links, plus host staging) bounds the channels.
  std::vector<std::vector<const route*>> R(n, std::vector<const route*>(n, nullptr));
  std::vector<double> out_cap(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::map<int, double> first;
    double staged = 0;
    bool any_staged = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      R[i][j] = &r.between(gpus[i], gpus[j]);
      if (!R[i][j]->hops.empty()) first[R[i][j]->hops.front().first] = r.GBps(R[i][j]->hops.front().first);
      if (R[i][j]->host_staged) any_staged = true, staged = std::max(staged, R[i][j]->pair_cap_GBps);
    }
    for (const auto& [d, c] : first) out_cap[i] += c;
    if (any_staged) out_cap[i] += staged;  // loose but safe: staged hops also share those links
  }
  // A ring leaves and enters every group of GPUs at least once: over a partition of the GPUs, it
  // puts on a resource at least the sum, over groups, of the least load any hop out of (into) the
  // group puts on it. At speed s a resource with such a floor f holds at most 1 / (s f) rings.
  // Partitions: single GPUs, and the GPUs of each NUMA node (whose hops out share its CPU's
  // cross-node host staging). The tightest floor bounds the channels before any search: without
  // it, each speed's trials searched for rings that resource could not hold (a minute at 200 GPUs).
  double ring_floor = 0;
  auto floor_over = [&](const std::vector<std::vector<std::size_t>>& groups) {
    std::vector<char> inside(n, 0);
    std::map<long, double> out_floor, in_floor;
    for (const auto& g : groups) {
      if (g.empty() || g.size() == n) continue;
      for (std::size_t i : g) inside[i] = 1;
      const std::size_t crossing = g.size() * (n - g.size());
      std::map<long, std::pair<std::size_t, double>> out_min, in_min;  // resource: hops using it, least load
      for (std::size_t i : g)
        for (std::size_t j = 0; j < n; ++j) {
          if (inside[j]) continue;
          for (const auto& [res, w] : R[i][j]->load) {
            auto& o = out_min.try_emplace(res, 0, w).first->second;
            o = {o.first + 1, std::min(o.second, w)};
          }
          for (const auto& [res, w] : R[j][i]->load) {
            auto& o = in_min.try_emplace(res, 0, w).first->second;
            o = {o.first + 1, std::min(o.second, w)};
          }
        }
      for (const auto& [res, m] : out_min)
        if (m.first == crossing) out_floor[res] += m.second;  // every hop out of the group uses it
      for (const auto& [res, m] : in_min)
        if (m.first == crossing) in_floor[res] += m.second;
      for (std::size_t i : g) inside[i] = 0;
    }
    for (const auto& [res, f] : out_floor) ring_floor = std::max(ring_floor, f);
    for (const auto& [res, f] : in_floor) ring_floor = std::max(ring_floor, f);
  };
  {
    std::vector<std::vector<std::size_t>> single(n), by_cpu;
    std::map<int, std::size_t> group_of_cpu;
    for (std::size_t i = 0; i < n; ++i) {
      single[i] = {i};
      const int c = r.topo().cpu_of(gpus[i]);
      const auto [it, added] = group_of_cpu.try_emplace(c, by_cpu.size());
      if (added) by_cpu.emplace_back();
      by_cpu[it->second].push_back(i);
    }
    floor_over(single);
    floor_over(by_cpu);
  }
  // Each hop's load over resources numbered from 0: the search looks up what is left at every step,
  // and looking it up in a map took most of its time.
  using resource_loads = std::vector<std::pair<std::size_t, double>>;  // (resource, use per GB/s)
  std::vector<std::vector<resource_loads>> hop_load(n, std::vector<resource_loads>(n));
  std::size_t resources = 0;
  {
    std::map<long, std::size_t> dense;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (i != j)
          for (const auto& [res, w] : R[i][j]->load) hop_load[i][j].emplace_back(dense.try_emplace(res, dense.size()).first->second, w);
    resources = dense.size();
  }
  std::vector<double> residual(resources, 1.0);  // utilisation left per resource
  // Per resource: the one GPU all hops using it leave (enter), else n (none yet) or n + 1 (several).
  std::vector<std::size_t> only_from(resources, n), only_to(resources, n);
  std::vector<std::size_t> users(resources, 0);  // hops that use it
  {
    auto note = [&](std::size_t& only, std::size_t gpu) { only = only == n || only == gpu ? gpu : n + 1; };
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        for (const auto& [res, w] : hop_load[i][j]) note(only_from[res], i), note(only_to[res], j), ++users[res];
  }
  auto hop_bw = [&](std::size_t i, std::size_t j) {
    double bw = std::numeric_limits<double>::infinity();
    for (const auto& [res, w] : hop_load[i][j]) bw = std::min(bw, residual[res] / w);
    return bw;
  };
  auto use = [&](std::size_t i, std::size_t j, double s) {
    for (const auto& [res, w] : hop_load[i][j]) residual[res] -= s * w;
  };
  // Candidate speeds: what each hop reaches alone, divided by 1..max_channels.
  std::vector<double> base;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      double alone = std::numeric_limits<double>::infinity();
      for (const auto& [res, w] : R[i][j]->load) alone = std::min(alone, 1.0 / w);
      base.push_back(alone);
    }
  std::sort(base.begin(), base.end());
  base.erase(std::unique(base.begin(), base.end(), [](double a, double b) { return std::abs(a - b) <= 1e-9 * b; }), base.end());
  std::vector<double> speeds;
  for (double b : base)
    for (int k = 1; k <= opt.max_channels; ++k) speeds.push_back(b / k);
  std::sort(speeds.begin(), speeds.end(), std::greater<>());
  speeds.erase(std::unique(speeds.begin(), speeds.end(), [](double a, double b) { return std::abs(a - b) <= 1e-9 * a; }), speeds.end());

  const double eps = 1e-9;
  std::uint64_t rng = 0;  // seeded per speed and trial (below)
  auto next_rand = [&] {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
  };
  std::size_t steps_in_all = 0;  // depth-first steps over every ring attempt (ring_set::steps)
  bool ran_out = false;          // a one_ring stopped at the budget, not having tried every path
  // One ring at speed s (its resources taken); empty if none within the budget.
  auto one_ring = [&](double s, int trial) {
    std::vector<std::size_t> path{0};
    std::vector<bool> seen(n, false);
    seen[0] = true;
    std::size_t steps = 0;
    struct count_steps {  // into steps_in_all on every return
      std::size_t& in_all;
      const std::size_t& steps;
      ~count_steps() { in_all += steps; }
    } counted{steps_in_all, steps};
    std::vector<std::uint64_t> tie(n);
    for (auto& x : tie) x = trial == 0 ? 0 : next_rand();
    std::vector<std::vector<std::size_t>> cands(n + 1);  // per depth: hops still to try, best last (kept, not reallocated)
    std::size_t depth = 0;                               // depths in use
    std::vector<std::pair<double, std::size_t>> scored;  // (bandwidth left, GPU): each hop's looked up once
    auto add_cands = [&](std::size_t at) {
      scored.clear();
      for (std::size_t j = 0; j < n; ++j)
        if (!seen[j])
          if (const double bw = hop_bw(at, j); bw >= s * (1 - eps)) scored.emplace_back(bw, j);
      std::sort(scored.begin(), scored.end(), [&](const auto& x, const auto& y) {
        if (std::abs(x.first - y.first) > eps * std::max(x.first, y.first)) return x.first > y.first;
        return tie[x.second] != tie[y.second] ? tie[x.second] < tie[y.second] : x.second < y.second;
      });
      std::vector<std::size_t>& c = cands[depth++];
      c.clear();
      for (auto it = scored.rbegin(); it != scored.rend(); ++it) c.push_back(it->second);
    };
    // Whether a GPU off the path can no longer be entered (from the path's end or another GPU off
    // it) or left (to another, or back to GPU 0): hops only lose bandwidth as the path grows, so no
    // ring completes from here. The hop last seen usable into (out of) each GPU is tried first, so
    // most checks cost a hop per GPU. (A cycle cover and reachability checked at every step cut a
    // tenth more steps, at three times the time: hops that share PCIe links fit one by one.)
    std::vector<std::size_t> in_seen(n, 0), out_seen(n, 0);
    auto usable = [&](std::size_t i, std::size_t j) { return i != j && hop_bw(i, j) >= s * (1 - eps); };
    auto found_from = [&](std::size_t& last, auto ok) {
      for (std::size_t k = 0; k < n; ++k)
        if (const std::size_t u = (last + k) % n; ok(u)) return last = u, true;
      return false;
    };
    auto stranded = [&] {
      const std::size_t end = path.back();
      for (std::size_t v = 0; v < n; ++v) {
        if (seen[v]) continue;
        if (!found_from(in_seen[v], [&](std::size_t u) { return (u == end || !seen[u]) && usable(u, v); })) return true;
        if (!found_from(out_seen[v], [&](std::size_t u) { return (u == 0 || !seen[u]) && usable(v, u); })) return true;
      }
      return false;
    };
    auto push_hop = [&](std::size_t j) {
      use(path.back(), j, s);
      path.push_back(j);
      seen[j] = true;
    };
    auto pop_hop = [&] {
      const std::size_t last = path.back();
      path.pop_back();
      seen[last] = false;
      use(path.back(), last, -s);
    };
    ran_out = false;
    if (!stranded()) add_cands(0);
    while (depth > 0 && !(ran_out = steps++ >= opt.budget)) {
      if (path.size() == n) {
        if (hop_bw(path.back(), 0) >= s * (1 - eps)) {
          use(path.back(), 0, s);
          std::vector<int> ring;
          for (std::size_t k : path) ring.push_back(gpus[k]);
          return ring;
        }
        --depth;
        pop_hop();
        continue;
      }
      auto& c = cands[depth - 1];
      if (c.empty()) {
        --depth;
        if (path.size() > 1) pop_hop();
        continue;
      }
      const std::size_t j = c.back();
      c.pop_back();
      if (hop_bw(path.back(), j) < s * (1 - eps)) continue;
      push_hop(j);
      if (stranded()) {
        pop_hop();
        continue;
      }
      if (path.size() == n) cands[depth++].clear();
      else add_cands(j);
    }
    while (path.size() > 1) pop_hop();
    return std::vector<int>{};
  };

  // Whether a trial holding `have` rings at speed s can no longer matter: it counts only with more
  // rings than the speed's best trial so far (`got`) and than the best total needs (the exact
  // packing is asked for no fewer either), and the links left cannot carry that many more. Every
  // trial ends on a ring that does not fit, which often took the whole budget to give up on: most
  // of the search's time at 12-16 GPUs before this check. Two bounds, each holding for any k rings
  // (detail::flow_reaches and hops_fall_short below); up to 64 GPUs, as they cost about n^3 a ring.
  // Hop i -> j carries what its resources have left for rings at s; a resource that several hops
  // out of one GPU share (its PCIe or NVSwitch link) is a group node they pass through, likewise
  // into one GPU; other sharing is left out (a relaxation: no rings where it falls short).
  const std::size_t flow_source = 2 * n, flow_sink = 2 * n + 1;
  std::vector<std::pair<std::size_t, double>> groups;  // group node 2n + 2 + g: its resource, least use by a hop
  std::vector<std::size_t> group_gpu;                  // the GPU a group's hops leave or enter
  std::map<std::size_t, std::size_t> group_of;         // resource: its group node
  auto group = [&](std::size_t res, double w, std::size_t gpu) {
    const auto [it, added] = group_of.try_emplace(res, 2 * n + 2 + groups.size());
    if (added) groups.emplace_back(res, w), group_gpu.push_back(gpu);
    auto& least = groups[it->second - 2 * n - 2].second;
    least = std::min(least, w);
    return it->second;
  };
  // Where hop i -> j starts (GPU i's out node, or a group) and ends (GPU j's in node n + j, or a group).
  std::vector<std::vector<std::size_t>> hop_from(n, std::vector<std::size_t>(n)), hop_to(n, std::vector<std::size_t>(n));
  for (std::size_t i = 0; i < n && n <= 64; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      hop_from[i][j] = i, hop_to[i][j] = n + j;
      for (const auto& [res, w] : hop_load[i][j])
        if (i == j || users[res] < 2) continue;
        else if (only_from[res] == i && hop_from[i][j] == i) hop_from[i][j] = group(res, w, i);
        else if (only_to[res] == j && hop_to[i][j] == n + j) hop_to[i][j] = group(res, w, j);
    }
  std::vector<std::vector<int>> carries(n, std::vector<int>(n, 0)), flow;
  std::vector<int> group_carries(groups.size());
  // The first bound: k rings leave and enter every GPU k times, so a flow of k out of and into
  // each GPU fits. The second, for what the flow misses: a ring enters and leaves each GPU by hops
  // to two different GPUs (from 3 GPUs up), so k rings make 2k uses of the hops at a GPU, at most
  // k with each other GPU and no more than a group carries. (A GPU with one NVLink neighbour takes
  // a PCIe hop in every ring, where the flow sends k rings to that neighbour and k back.)
  std::map<std::size_t, long> group_uses;
  auto hops_fall_short = [&](long k) {
    for (std::size_t v = 0; v < n && n >= 3; ++v) {
      long uses = 0;
      group_uses.clear();
      for (std::size_t u = 0; u < n; ++u) {
        if (u == v) continue;
        const bool out_grouped = hop_from[v][u] != v, in_grouped = hop_to[u][v] != n + v;
        if (!out_grouped && !in_grouped) uses += std::min<long>(k, long{carries[v][u]} + carries[u][v]);
        if (out_grouped) group_uses[hop_from[v][u]] += carries[v][u];
        else if (in_grouped) uses += std::min<long>(k, carries[v][u]);
        if (in_grouped) group_uses[hop_to[u][v]] += carries[u][v];
        else if (out_grouped) uses += std::min<long>(k, carries[u][v]);
      }
      for (const auto& [node, sum] : group_uses) uses += std::min<long>(sum, group_carries[node - 2 * n - 2]);
      if (uses < 2 * k) return true;
    }
    return false;
  };
  double best_total = 0;
  auto cannot_matter = [&](double s, std::size_t have, std::size_t got) {
    if (n > 64) return false;
    const auto beaten = static_cast<std::size_t>(std::floor(best_total / s * (1 + 1e-9)));
    const std::size_t need = std::max(got, beaten) + 1;
    if (have >= need) return false;
    const long k = static_cast<long>(need - have);
    // Rings at s that `bw` GB/s hold; 1e-6: a count that divides exactly up to rounding is not lost.
    auto rings_in = [&](double bw) { return static_cast<int>(std::min(std::floor(bw / s + 1e-6), 1e6)); };
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) carries[i][j] = i == j ? 0 : rings_in(hop_bw(i, j));
    for (std::size_t g = 0; g < groups.size(); ++g) group_carries[g] = rings_in(residual[groups[g].first] / groups[g].second);
    if (hops_fall_short(k)) return true;
    flow.assign(2 * n + 2 + groups.size(), std::vector<int>(2 * n + 2 + groups.size(), 0));
    for (std::size_t i = 0; i < n; ++i) flow[flow_source][i] = flow[n + i][flow_sink] = static_cast<int>(k);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::size_t node = 2 * n + 2 + g, gpu = group_gpu[g];
      if (only_from[groups[g].first] == gpu) flow[gpu][node] = group_carries[g];
      else flow[node][n + gpu] = group_carries[g];
    }
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j)
        if (i != j) flow[hop_from[i][j]][hop_to[i][j]] += carries[i][j];
    return !detail::flow_reaches(flow, flow_source, flow_sink, k * static_cast<long>(n));
  };

  // Up to 8 GPUs, the exact packing (made when first needed: most searches never need it).
  std::optional<detail::exact_ring_packer> exact;
  const bool exact_allowed = n <= std::min<std::size_t>(opt.exact_max_gpus, detail::exact_ring_packer::max_gpus) && opt.exact_budget > 0;

  std::vector<std::vector<int>> best;
  for (std::size_t speed_no = 0; speed_no < speeds.size(); ++speed_no) {
    const double s = speeds[speed_no];
    int bound = opt.max_channels;
    for (double oc : out_cap) bound = std::min(bound, static_cast<int>(std::floor(oc / s + 1e-6)));
    if (ring_floor > 0) bound = std::min(bound, static_cast<int>(std::floor(1.0 / (s * ring_floor) + 1e-6)));
    if (bound < 1 || s * bound <= best_total * (1 + 1e-9)) continue;
    std::vector<std::vector<int>> got;
    for (int trial = 0; trial < std::max(1, opt.trials); ++trial) {
      // Each trial's tie-breaks from its own seed (splitmix64 of speed and trial): which speeds
      // the bound skips, or how early an earlier trial stopped, cannot change them.
      std::uint64_t z = 0x9E3779B97F4A7C15ull * (speed_no * 64 + static_cast<std::uint64_t>(trial) + 1);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      rng = (z ^ (z >> 31)) | 1;  // xorshift needs a nonzero state
      std::fill(residual.begin(), residual.end(), 1.0);
      ran_out = false;
      std::vector<std::vector<int>> rings;
      while (static_cast<int>(rings.size()) < bound && !cannot_matter(s, rings.size(), got.size())) {
        std::vector<int> ring = one_ring(s, trial);
        if (ring.empty()) break;
        rings.push_back(std::move(ring));
      }
      if (rings.size() > got.size()) got = std::move(rings);
      if (static_cast<int>(got.size()) == bound) break;
      // None on idle links (every path tried, or none could matter): the same for every trial.
      if (got.empty() && !ran_out) break;
    }
    // Searched again only for more rings than the greedy's and than the best total so far needs.
    const auto beaten = std::max(got.size(), static_cast<std::size_t>(std::floor(best_total / s * (1 + 1e-9))));
    if (exact_allowed && beaten < static_cast<std::size_t>(bound)) {
      if (!exact) exact.emplace(R, opt.exact_budget);
      if (auto packed = exact->pack(s, bound, beaten); packed.size() > beaten) {
        got.clear();
        for (const auto& order : packed) {
          got.emplace_back();
          for (std::size_t v : order) got.back().push_back(gpus[v]);
        }
      }
    }
    const double total = s * static_cast<double>(got.size());
    if (!got.empty() && total > best_total * (1 + 1e-9)) best_total = total, best = std::move(got);
  }
  if (best.empty()) COLLX_THROW(errc::invalid_argument, "search_rings: no ring joins these GPUs");
  const int have = static_cast<int>(best.size());
  if (have < opt.min_channels) {
    const int k = (opt.min_channels + have - 1) / have;
    std::vector<std::vector<int>> split;
    for (int c = 0; c < k; ++c)
      for (const auto& ring : best) split.push_back(ring);
    best = std::move(split);
  }
  out.rings = std::move(best);
  out.steps = steps_in_all;
  const ring_evaluation e = evaluate_rings(r, out.rings);
  out.channel_GBps = e.min_channel_GBps;
  out.total_GBps = e.total_GBps;
  return out;
}

/// Parent of `rank` in NCCL-style in-order binary tree over n ranks rooted at 0 (-1 for the root).
constexpr int btree_parent(int rank, int n) noexcept {
  if (rank <= 0 || rank >= n) return -1;
  const int bit = rank & -rank;
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  return up;
}

/// Parent of `rank` in the second tree of the double binary tree: the first tree mirrored (n odd)
/// or shifted by one (n even), so that leaves of one tree are inner nodes of the other.
constexpr int dtree_parent(int rank, int n) noexcept {
  if (n % 2 == 1) {
    const int p = btree_parent(n - 1 - rank, n);
    return p < 0 ? -1 : n - 1 - p;
  }
  const int p = btree_parent((rank - 1 + n) % n, n);
  return p < 0 ? -1 : (p + 1) % n;
}

/// Two spanning trees over the same GPUs (each carries half the data).
struct double_tree {
  std::vector<int> gpus;        ///< GPU vertex ids
  std::vector<int> parent[2];   ///< per tree: parent's index into gpus, -1 at the root
};

/// NCCL's double binary tree: `chains` lists each machine's GPUs in chain order (head first, e.g. a
/// ring order). Tree 0: chains head-first, machines joined by btree_parent between heads; tree 1:
/// chains reversed (the tail is the head), machines joined by dtree_parent. With one machine the two
/// trees are the chain and the reversed chain.
/// @throws collx::error(invalid_argument) for no machines or an empty chain.
inline double_tree build_double_tree(const std::vector<std::vector<int>>& chains) {
  if (chains.empty()) COLLX_THROW(errc::invalid_argument, "build_double_tree: no machines");
  double_tree t;
  std::vector<std::size_t> start;
  for (const auto& c : chains) {
    if (c.empty()) COLLX_THROW(errc::invalid_argument, "build_double_tree: a machine without GPUs");
    start.push_back(t.gpus.size());
    t.gpus.insert(t.gpus.end(), c.begin(), c.end());
  }
  const int m = static_cast<int>(chains.size());
  for (int k = 0; k < 2; ++k) {
    t.parent[k].assign(t.gpus.size(), -1);
    for (int h = 0; h < m; ++h) {
      const std::size_t len = chains[static_cast<std::size_t>(h)].size();
      auto idx = [&](std::size_t pos) { return static_cast<int>(start[static_cast<std::size_t>(h)] + (k == 0 ? pos : len - 1 - pos)); };
      for (std::size_t p = 1; p < len; ++p) t.parent[k][static_cast<std::size_t>(idx(p))] = idx(p - 1);
      const int up = k == 0 ? btree_parent(h, m) : dtree_parent(h, m);
      if (up >= 0) {
        const std::size_t ulen = chains[static_cast<std::size_t>(up)].size();
        const int head = static_cast<int>(start[static_cast<std::size_t>(up)] + (k == 0 ? 0 : ulen - 1));
        t.parent[k][static_cast<std::size_t>(idx(0))] = head;
      }
    }
  }
  return t;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
