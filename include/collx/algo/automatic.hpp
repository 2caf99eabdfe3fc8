/// @file algo/automatic.hpp
/// algo::automatic: picks ring, tree or direct per call from an alpha-beta cost model (Hockney:
/// time = steps * latency + bytes moved per rank / bandwidth). The model is a plain struct so a
/// topology-aware one can replace it; a communicator option can replace the whole selector. Each
/// transport gives the figures for its wiring (transport::costs: the host transports lower the
/// bandwidth when the ranks' CPUs span NUMA nodes, topo/host_cost.hpp).
#pragma once

#include <bit>
#include <cstddef>
#include <limits>

#include <collx/algo/schedule.hpp>

namespace collx {
inline namespace v0 {
namespace algo {
/// Automatic algorithm tag: the communicator's selector (by default collx::cost_model) decides per
/// call from the collective, world size and bytes. Never picks ring for a non-commutative op.
struct automatic {};
}  // namespace algo

/// What a selector is asked.
struct selection_query {
  collective coll = collective::allreduce;  ///< the collective called
  int world_size = 1;                       ///< ranks in the communicator
  std::size_t bytes = 0;     ///< bytes of the whole vector (allreduce, reduce, broadcast) or of all
                             ///< ranks' blocks together (reduce_scatter, all_gather and their
                             ///< v-forms; all_to_all: what each rank sends); the same on every
                             ///< rank, so 0 for all_to_all_v, whose ranks send different amounts
                             ///< that the others do not know (a choice made from them would differ)
  bool commutative = true;   ///< false: ring is not allowed

  /// Equal in every field: a deterministic selector answers both alike.
  friend constexpr bool operator==(const selection_query&, const selection_query&) = default;
};

/// Alpha-beta cost model of one transport: a step costs alpha (latency) + bytes x beta (1 / bandwidth),
/// Hockney's model ("The communication challenge for MPP: Intel Paragon and Meiko CS-2", Parallel
/// Computing 20(3), 1994), with the per-algorithm step and byte counts of Thakur, Rabenseifner &
/// Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005.
/// Defaults describe shared memory on one node.
struct cost_model {
  double latency_s = 1.0e-6;       ///< per synchronising step, seconds
  double bandwidth_Bps = 8.0e9;    ///< per rank, bytes per second

  /// Predicted seconds for the call (+inf for a pair that does not exist).
  constexpr double predict(const selection_query& q, algorithm a) const noexcept {
    const double n = q.world_size, B = static_cast<double>(q.bytes), al = latency_s, be = 1.0 / bandwidth_Bps;
    if (q.world_size <= 1) return 0.0;
    const double lg = static_cast<double>(std::bit_width(static_cast<unsigned>(q.world_size - 1)));
    const double frac = (n - 1) / n;
    switch (q.coll) {
      case collective::allreduce:
        if (a == algorithm::ring) return 2 * (n - 1) * al + 2 * frac * B * be;
        if (a == algorithm::tree) return 2 * lg * (al + B * be);
        return direct_allreduce_one_shot(q) ? al + (n - 1) * B * be : 2 * al + 2 * frac * B * be;
      case collective::reduce_scatter:
      case collective::all_gather:
        if (a == algorithm::ring) return (n - 1) * al + frac * B * be;
        if (a == algorithm::tree) return 2 * lg * (al + B * be);
        return al + frac * B * be;
      case collective::broadcast:
        if (a == algorithm::ring) return (n - 1 + 7) * (al + B / 8 * be);
        if (a == algorithm::tree) return lg * (al + B * be);
        return al + B * be;
      case collective::reduce:
        if (a == algorithm::ring) return n * al + 2 * frac * B * be;
        if (a == algorithm::tree) return lg * (al + B * be) + al;
        return al + (n - 1) * B * be;
      case collective::all_to_all:
        if (a == algorithm::ring) return (n - 1) * al + frac * B * be;
        if (a == algorithm::direct) return al + frac * B * be;
        return std::numeric_limits<double>::infinity();
      default:
        return a == algorithm::direct ? al : std::numeric_limits<double>::infinity();
    }
  }

  /// This model for ranks whose CPUs span NUMA nodes joined by an inter-CPU link (QPI, UPI,
  /// Infinity Fabric) that reaches `link_GBps` per direction: a rank's copies to and from the far
  /// node run at most at the link's rate, so the bandwidth is the lower of the two (unchanged for
  /// link_GBps <= 0). topo::smp_GBps gives the link's figure from the CPU model (NCCL's: 6 GB/s
  /// Broadwell, 10 Skylake to Ice Lake, 16 AMD, ...); topo::host_cost_model applies it to the
  /// live machine.
  constexpr cost_model across_numa_link(double link_GBps) const noexcept {
    cost_model m = *this;
    if (link_GBps > 0 && link_GBps * 1e9 < m.bandwidth_Bps) m.bandwidth_Bps = link_GBps * 1e9;
    return m;
  }

  /// Direct allreduce: one-shot below this many bytes, two-shot above (both give the same bits).
  static constexpr std::size_t one_shot_max_bytes = 64 * 1024;
  /// Whether direct allreduce runs one-shot for q: q.bytes <= one_shot_max_bytes.
  static constexpr bool direct_allreduce_one_shot(const selection_query& q) noexcept {
    return q.bytes <= one_shot_max_bytes;
  }

  /// The cheapest algorithm for q; ties go to direct (reproducible), then tree.
  constexpr algorithm choose(const selection_query& q) const noexcept {
    algorithm best = algorithm::direct;
    double best_t = predict(q, algorithm::direct);
    for (algorithm a : {algorithm::tree, algorithm::ring}) {
      if (a == algorithm::ring && !q.commutative) continue;
      if (a == algorithm::tree && q.coll == collective::all_to_all) continue;
      const double t = predict(q, a);
      if (t < best_t) best = a, best_t = t;
    }
    return best;
  }
};

}  // namespace v0
}  // namespace collx
