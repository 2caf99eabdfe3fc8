/// @file algo/hierarchical.hpp
/// algo::hierarchical<Intra, Inter>: a two-level algorithm for communicators whose ranks sit on
/// several nodes (a hierarchy attached: hierarchy.hpp). All-reduce runs as reduce-scatter inside
/// each node, all-reduce across nodes among the ranks with the same local rank, and all-gather
/// inside each node, so each rank sends only 1/local_size of the vector over the network: the
/// scheme of NCCL's and Horovod's hierarchical all-reduce (Sergeev & Del Balso, "Horovod", 2018;
/// Jia et al., "Highly Scalable Deep Learning Training System with Mixed-Precision", 2018).
/// The other collectives:
/// - reduce_scatter(_v): reduce-scatter inside the node of the blocks grouped by local rank, then
///   reduce-scatter across nodes;
/// - all_gather(_v): all-gather across nodes, then inside the node;
/// - broadcast: across nodes among the root's local rank, then inside each node;
/// - reduce: inside each node to the root's local rank, then across nodes to the root;
/// - all_to_all(_v) and barrier run algo::direct on the whole communicator.
/// With one node (every rank on it), each of these but all_to_all and barrier runs whole on the
/// node communicator with Intra: shared memory under connect_hierarchical, where the whole
/// communicator's transport is MPI.
/// Numerics: partial results cross the levels in the accumulator type (fp32 for fp16/bf16), so the
/// result is rounded once, and avg divides once by the world size. Combination order: node by node
/// (inside a node in local rank order for tree and direct), so with contiguous nodes (node m holds
/// ranks [m*L, (m+1)*L)) a non-commutative op folds in rank order; with other layouts such an op is
/// rejected. Every node must hold the same number of ranks.
#pragma once

#include <type_traits>

#include <collx/algo/automatic.hpp>

namespace collx {
inline namespace v0 {
namespace algo {
/// Two-level algorithm tag: Intra (ring, tree, direct or automatic) inside a node, Inter across
/// nodes. Needs a communicator with a hierarchy attached (collx::mpi::connect_hierarchical,
/// collx::make_hierarchical_thread_communicators or collx::attach_hierarchy).
template <class Intra = automatic, class Inter = automatic>
struct hierarchical {
  using intra = Intra;  ///< the algorithm inside each node
  using inter = Inter;  ///< the algorithm across nodes
};
}  // namespace algo

/// True for algo::hierarchical<...>.
template <class A>
inline constexpr bool is_hierarchical_v = false;
/// algo::hierarchical with any intra- and inter-node algorithms: true.
template <class I, class E>
inline constexpr bool is_hierarchical_v<algo::hierarchical<I, E>> = true;

}  // namespace v0
}  // namespace collx
