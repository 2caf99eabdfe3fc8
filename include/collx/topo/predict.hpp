/// @file topo/predict.hpp
/// What the cost model (topo/cost_model.hpp) says about whole machines: the peak all-reduce busbw
/// it predicts for an nccl-tests table's message sizes (to set against the measured peak), and
/// all-reduce from one node to thousands of GPUs (`collx-topo simulate`, docs/scaling.md).
#pragma once

#include <cstddef>
#include <vector>

#include <collx/error.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/nccl_tests.hpp>
#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// The highest all-reduce busbw `m` predicts over the message sizes of `table` (each size with the
/// algorithms NCCL chooses among for the model's node count, nccl_allreduce_algos, and the best
/// protocol): what `collx-topo check` and test_topo_model set against table.peak_busbw(). busbw
/// as nccl-tests defines it (algbw * 2 (n - 1) / n). Sizes whose both results have #wrong above 0
/// are left out, as peak_busbw leaves them out. An invalid prediction when no size is left (an empty
/// table, or one whose every size has both results wrong).
inline prediction predicted_peak_busbw(model& m, const nccl_tests_table& table) {
  prediction peak;
  for (const nccl_tests_row& row : table.rows) {
    if (row.wrong[0] > 0 && row.wrong[1] > 0) continue;
    const prediction p = m.best(collective::allreduce, row.bytes, nccl_allreduce_algos(m.nodes()));
    if (p.valid && p.busbw_GBps > peak.busbw_GBps) peak = p;
  }
  return peak;
}

/// Settings of simulate_allreduce.
struct scaling_options {
  int max_gpus = 4096;          ///< largest GPU count (counts are the node's GPUs times 1, 2, 4, ...)
  double network_step_us = 0;   ///< latency of one network step in microseconds for every protocol
                                ///< (e.g. measured with collx-perf sendrecv); 0: NCCL's figures
  std::vector<std::size_t> sizes = {};  ///< all-reduce sizes in bytes; empty: 8 KiB, 32 KiB, ..., 8 GiB
};

/// One GPU count and size of simulate_allreduce.
struct scaling_point {
  int gpus = 0;                    ///< GPUs in all
  int nodes = 0;                   ///< copies of the node
  std::size_t bytes = 0;           ///< all-reduce size
  std::vector<prediction> by_algo; ///< one per scaling_algos(), in that order (best protocol each)
  std::size_t winner = 0;          ///< index into by_algo of the fastest valid prediction
};

/// The algorithms simulate_allreduce compares: ring, double binary tree, hierarchical.
inline std::vector<algo> scaling_algos() { return {algo::ring, algo::double_tree, algo::hierarchical}; }

/// Predicted all-reduce on 1, 2, 4, ... copies of `node` (make_cluster: nodes joined by a
/// non-blocking network at the NICs' speed), up to o.max_gpus GPUs, for each size and each of
/// scaling_algos(), all ranks on all GPUs. Rows in order of GPU count, then size; none when
/// o.max_gpus is below the node's GPU count. A count of one GPU is left out (an all-reduce there
/// moves nothing: busbw 0 by definition), so a one-GPU node starts at 2 GPUs on 2 nodes.
/// @throws collx::error (errc::invalid_argument) for a node without GPUs, and what make_cluster and
///         model throw (e.g. NICs of unknown speed beyond one node).
inline std::vector<scaling_point> simulate_allreduce(const topology& node, const scaling_options& o = {}) {
  const int per = static_cast<int>(node.gpus().size());
  if (per < 1) COLLX_THROW(errc::invalid_argument, "simulate_allreduce: the node has no GPU");
  std::vector<std::size_t> sizes = o.sizes;
  if (sizes.empty())
    for (std::size_t b = 8 << 10; b <= (std::size_t{8} << 30); b *= 4) sizes.push_back(b);
  std::vector<scaling_point> out;
  for (int nodes = 1; nodes * per <= o.max_gpus; nodes *= 2) {
    if (nodes * per < 2) continue;
    const topology t = make_cluster(node, nodes);
    model_options mo;
    if (o.network_step_us > 0)  // a measured figure replaces NCCL's per-protocol ones for network steps
      for (int p = 0; p < 3; ++p) mo.latency.ring_step[2][p] = mo.latency.tree_step[2][p] = o.network_step_us * 1e-6;
    model m(t, t.gpus(), mo);
    for (std::size_t b : sizes) {
      scaling_point s;
      s.gpus = nodes * per, s.nodes = nodes, s.bytes = b;
      for (algo a : scaling_algos()) s.by_algo.push_back(m.best(collective::allreduce, b, {a}));
      for (std::size_t k = 0; k < s.by_algo.size(); ++k)
        if (s.by_algo[k].valid && (!s.by_algo[s.winner].valid || s.by_algo[k].time_s < s.by_algo[s.winner].time_s)) s.winner = k;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
