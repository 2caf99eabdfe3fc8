/// @file node_layout.hpp
/// Ranks grouped by node: which rank sits on which node (node_layout), the node-local and
/// cross-node communicators that algo::hierarchical runs on (hierarchy), and this process's node
/// id. The checked way to attach a hierarchy to a communicator is in hierarchy.hpp.
///
/// A node here is whatever shares a fast transport: the ranks of one machine, found by host name,
/// or any grouping named by COLLX_NODE_ID (so that tests can run several "nodes" on one machine).
#pragma once

#include <unistd.h>

#include <climits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <collx/communicator.hpp>
#include <collx/environment.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

/// Where every rank of a communicator sits: nodes are numbered in the order of their lowest rank,
/// and ranks within a node (local ranks) in rank order.
struct node_layout {
  int node_count = 1;   ///< number of nodes
  int node_index = 0;   ///< this rank's node, in [0, node_count)
  int local_rank = 0;   ///< this rank's index among its node's ranks
  int local_size = 1;   ///< ranks on this rank's node
  bool uniform = true;  ///< every node has the same number of ranks
  /// Node m holds exactly ranks [m * local_size, (m + 1) * local_size): then a hierarchical
  /// reduction combines in rank order, as non-commutative ops need.
  bool contiguous = true;
  std::vector<std::vector<int>> ranks;  ///< ranks[m]: the ranks on node m, ascending

  /// The rank with local rank `local` on node `node` (both in range).
  int world_rank(int node, int local) const { return ranks.at(static_cast<std::size_t>(node)).at(static_cast<std::size_t>(local)); }
  /// Ranks with local rank `local` on every node that has one, ascending by node (the members of
  /// that local rank's cross-node communicator).
  std::vector<int> cross_ranks(int local) const {
    std::vector<int> out;
    for (const auto& node : ranks)
      if (local < static_cast<int>(node.size())) out.push_back(node[static_cast<std::size_t>(local)]);
    return out;
  }

  /// Builds the layout from every rank's node id (ids[r] for rank r; the same list on every rank).
  /// @throws collx::error invalid_argument (rank out of range, an empty id)
  static node_layout from_ids(std::span<const std::string> ids, int rank) {
    const int n = static_cast<int>(ids.size());
    if (rank < 0 || rank >= n)
      COLLX_THROW(errc::invalid_argument, "node_layout: rank " + std::to_string(rank) + " outside [0, " + std::to_string(n) + ")");
    node_layout l;
    std::vector<std::string> names;
    std::vector<int> node_of(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      const std::string& id = ids[static_cast<std::size_t>(r)];
      if (id.empty()) COLLX_THROW(errc::invalid_argument, "node_layout: rank " + std::to_string(r) + " has an empty node id");
      std::size_t m = 0;
      while (m < names.size() && names[m] != id) ++m;
      if (m == names.size()) {
        names.push_back(id);
        l.ranks.emplace_back();
      }
      l.ranks[m].push_back(r);
      node_of[static_cast<std::size_t>(r)] = static_cast<int>(m);
    }
    l.node_count = static_cast<int>(names.size());
    l.node_index = node_of[static_cast<std::size_t>(rank)];
    const auto& mine = l.ranks[static_cast<std::size_t>(l.node_index)];
    l.local_size = static_cast<int>(mine.size());
    for (int i = 0; i < l.local_size; ++i)
      if (mine[static_cast<std::size_t>(i)] == rank) l.local_rank = i;
    for (std::size_t m = 0; m < l.ranks.size(); ++m) {
      if (l.ranks[m].size() != l.ranks[0].size()) l.uniform = false;
      for (std::size_t i = 0; i < l.ranks[m].size(); ++i)
        if (l.ranks[m][i] != static_cast<int>(m * l.ranks[0].size() + i)) l.contiguous = false;
    }
    if (!l.uniform) l.contiguous = false;
    return l;
  }
};

/// A communicator's view of its nodes: the layout, this rank's node-local communicator (rank =
/// local rank) and its cross-node communicator (the ranks with the same local rank on every node;
/// rank = node index when the layout is uniform).
struct hierarchy {
  node_layout layout;  ///< which rank sits on which node
  communicator node;   ///< this node's ranks; rank = local rank
  communicator cross;  ///< the ranks with this local rank on every node; rank = node index
};

/// This process's node id: COLLX_NODE_ID when set (validated: printable, at most 255 bytes), else
/// the host name.
/// @throws collx::error invalid_argument (a bad COLLX_NODE_ID), system (no host name)
inline std::string node_id_from_environment() {
  if (const auto v = env::get("COLLX_NODE_ID")) {
    if (v->empty() || v->size() > 255) env::reject("COLLX_NODE_ID", *v, "a non-empty string of at most 255 bytes");
    for (char c : *v)
      if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e)
        env::reject("COLLX_NODE_ID", *v, "printable characters without spaces");
    return std::string(*v);
  }
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) COLLX_THROW(errc::system, "node_id_from_environment: gethostname failed");
  return host;
}

namespace detail {
/// "[0, 3, 5]".
inline std::string rank_list(std::span<const int> ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

/// Whether algo::automatic runs collective `coll` on the levels of a hierarchy with layout `l`
/// (options `o`): several ranks on each node, the same number on every node, COLLX_ALGO (or the
/// options' overrides) not forcing a flat algorithm for it, an op that is commutative (or none)
/// unless the nodes are contiguous, and a collective with a two-level form.
inline bool automatic_runs_on_levels(const node_layout& l, const communicator_options& o, collective coll,
                                     bool commutative) {
  if (o.algorithm_overrides.for_collective(coll) || l.local_size < 2 || !l.uniform) return false;
  if (!commutative && !l.contiguous) return false;
  return coll == collective::allreduce || coll == collective::reduce_scatter || coll == collective::all_gather ||
         coll == collective::broadcast || coll == collective::reduce;
}

/// Attaches `node` and `cross` to `world` (algo::hierarchical runs on them), for callers that built
/// them from `layout` themselves (make_hierarchical_thread_communicators, mpi::connect_hierarchical):
/// nothing is checked. abort() on world aborts them too, and a wait on any of the three ends when
/// another of them fails (transport::watch).
inline void attach_levels(communicator& world, node_layout layout, communicator node, communicator cross) {
  // What the hierarchy changes, for communicator::describe() and COLLX_DEBUG=info.
  std::string note = "node " + std::to_string(layout.node_index) + " of " + std::to_string(layout.node_count) +
                     " (world ranks " + rank_list(layout.ranks[static_cast<std::size_t>(layout.node_index)]) +
                     "), local rank " + std::to_string(layout.local_rank) + "; algo::automatic runs ";
  std::string on_levels;
  for (collective c : {collective::allreduce, collective::reduce_scatter, collective::all_gather,
                       collective::broadcast, collective::reduce})
    if (automatic_runs_on_levels(layout, world.options(), c, true))
      on_levels.append(on_levels.empty() ? "" : ", ").append(collective_name(c));
  note += on_levels.empty() ? "every collective flat"
                            : on_levels + " on the levels" + (layout.contiguous ? "" : " (with a commutative op)");
  log_message(log_level::info, "rank " + std::to_string(world.rank()) + "/" + std::to_string(world.size()) +
                                   " hierarchy attached: " + note + world.log_where());
  // Their failures, passed on to world's peers, name world ranks too.
  node.get_transport().set_level("node communicator", layout.ranks.at(static_cast<std::size_t>(layout.node_index)));
  cross.get_transport().set_level("cross-node communicator", layout.cross_ranks(layout.local_rank));
  std::vector<std::shared_ptr<transport>> parts{node.shared_transport(), cross.shared_transport()};
  const std::shared_ptr<transport> levels[] = {world.shared_transport(), node.shared_transport(), cross.shared_transport()};
  for (const auto& t : levels)
    for (const auto& other : levels)
      if (t != other) t->watch(other);
  world.set_hierarchy(std::make_shared<hierarchy>(hierarchy{std::move(layout), std::move(node), std::move(cross)}),
                      std::move(parts), std::move(note));
}
}  // namespace detail

}  // namespace v0
}  // namespace collx
