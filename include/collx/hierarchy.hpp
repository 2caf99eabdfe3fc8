/// @file hierarchy.hpp
/// collx::attach_hierarchy: gives a communicator the node-local and cross-node communicators
/// (node_layout.hpp) that algo::hierarchical runs on, after checking that they hold the ranks the
/// layout says.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <collx/algo/direct.hpp>
#include <collx/all_gather.hpp>
#include <collx/communicator.hpp>
#include <collx/error.hpp>
#include <collx/node_layout.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// What each member of a level tells the others in attach_hierarchy's check.
struct level_member {
  std::int32_t world_rank;
  std::int32_t unused;
  std::uint64_t layout_hash;  ///< layout_hash(): ranks whose layouts differ disagree here
};

/// FNV-1a over what every rank's layout must agree on: its shape flags and every node's ranks.
inline std::uint64_t layout_hash(const node_layout& l) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
  mix(static_cast<std::uint64_t>(l.node_count));
  mix(l.uniform ? 1 : 0);
  mix(l.contiguous ? 1 : 0);
  for (const auto& node : l.ranks) {
    mix(0xffffffffull);
    for (int r : node) mix(static_cast<std::uint64_t>(r));
  }
  return h;
}

/// "[0, 3, 5]".
inline std::string rank_list(std::span<const int> ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}
}  // namespace detail

/// Attaches `node` and `cross` to `world` so that algo::hierarchical (and algo::automatic, when
/// there are several nodes) can use them; abort() on world aborts them too, and a wait on any of
/// the three ends when another of them fails (transport::watch). For hierarchies built by hand
/// (collx::split of world by node, say); mpi::connect_hierarchical and
/// make_hierarchical_thread_communicators attach their own.
///
/// Collective over `node` and `cross`: every rank of world attaches, at the same point of its calls
/// on them, for each checks with one all_gather that it holds exactly the world ranks the layout
/// says (node: layout.ranks[layout.node_index] in local-rank order; cross: the ranks with this
/// local rank on every node, in node order) and that every member passed the same layout. A
/// hierarchy that passed only its sizes would combine in the wrong order, silently.
/// @param world the communicator the layout describes (layout.ranks covers its ranks)
/// @param layout this rank's node_layout (node_layout::from_ids of the same ids on every rank)
/// @param node this rank's node communicator: rank = layout.local_rank
/// @param cross this rank's cross-node communicator: rank = its node's place among the nodes that
///   have this local rank
/// @throws collx::error invalid_argument (naming what differs; node and cross are then failed, so
///   that their other ranks' checks end at once with aborted, naming this rank's reason), or what
///   the all_gathers raise (timeout: a member that never attaches).
inline void attach_hierarchy(communicator& world, node_layout layout, communicator node, communicator cross) {
  const std::string call = "rank " + std::to_string(world.rank()) + ": attach_hierarchy";
  auto refuse = [&](const std::string& what) {
    const std::string msg = call + ": " + what;
    node.fail(errc::invalid_argument, "invalid arguments: " + msg);
    cross.fail(errc::invalid_argument, "invalid arguments: " + msg);
    COLLX_THROW(errc::invalid_argument, msg);
  };
  std::size_t ranks_in_layout = 0;
  for (const auto& n : layout.ranks) ranks_in_layout += n.size();
  if (ranks_in_layout != static_cast<std::size_t>(world.size()) || layout.node_index < 0 ||
      layout.node_index >= static_cast<int>(layout.ranks.size()) || layout.local_rank < 0 ||
      layout.local_rank >= static_cast<int>(layout.ranks[static_cast<std::size_t>(layout.node_index)].size()) ||
      layout.world_rank(layout.node_index, layout.local_rank) != world.rank())
    refuse("the layout does not describe world rank " + std::to_string(world.rank()) + " of " +
           std::to_string(world.size()) + " (build it with node_layout::from_ids(ids, world.rank()))");
  const std::vector<int> node_ranks = layout.ranks[static_cast<std::size_t>(layout.node_index)];
  const std::vector<int> cross_ranks = layout.cross_ranks(layout.local_rank);
  if (node.size() != layout.local_size || node.rank() != layout.local_rank)
    refuse("the node communicator is rank " + std::to_string(node.rank()) + "/" + std::to_string(node.size()) +
           ", the layout says local rank " + std::to_string(layout.local_rank) + "/" + std::to_string(layout.local_size));
  if (cross.size() != static_cast<int>(cross_ranks.size()) || cross_ranks.at(static_cast<std::size_t>(cross.rank())) != world.rank())
    refuse("the cross-node communicator is rank " + std::to_string(cross.rank()) + "/" + std::to_string(cross.size()) +
           "; the layout's ranks with local rank " + std::to_string(layout.local_rank) + " are world ranks " +
           detail::rank_list(cross_ranks));
  const detail::level_member mine[1] = {{world.rank(), 0, detail::layout_hash(layout)}};
  for (const auto& [level, name, expected] : {std::tuple{&node, "node communicator", &node_ranks},
                                              std::tuple{&cross, "cross-node communicator", &cross_ranks}}) {
    std::vector<detail::level_member> all(expected->size());
    try {
      all_gather<algo::direct>(*level, std::span<const detail::level_member>(mine), std::span<detail::level_member>(all));
    } catch (const error& e) {  // ours, not the user's: say what they called
      const std::string msg = call + " (collective: every rank of world attaches, at the same point of its calls on "
                                     "node and cross), checking the " + name + ": " + e.what();
      node.fail(e.code(), msg);  // the other level's ranks learn why too, not only that this rank left
      cross.fail(e.code(), msg);
      COLLX_THROW(e.code(), msg);
    }
    std::vector<int> held;
    for (const auto& m : all) held.push_back(m.world_rank);
    if (held != *expected)
      refuse("the " + std::string(name) + " holds world ranks " + detail::rank_list(held) + " but the layout says " +
             detail::rank_list(*expected));
    for (const auto& m : all)
      if (m.layout_hash != mine[0].layout_hash)
        refuse("world rank " + std::to_string(m.world_rank) + " passed another layout than this rank (every rank "
               "passes node_layout::from_ids of the same node ids)");
  }
  detail::attach_levels(world, std::move(layout), std::move(node), std::move(cross));
}

}  // namespace v0
}  // namespace collx
