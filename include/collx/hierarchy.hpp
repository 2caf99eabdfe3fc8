/// @file hierarchy.hpp
/// collx::attach_hierarchy: gives a communicator the node-local and cross-node communicators
/// (node_layout.hpp) that algo::hierarchical runs on, after checking that they hold the ranks the
/// layout says.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <collx/algo/direct.hpp>
#include <collx/all_gather.hpp>
#include <collx/communicator.hpp>
#include <collx/error.hpp>
#include <collx/node_layout.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// What is wrong with `l` as world rank `rank`'s layout of `n` ranks: "" when it is what
/// node_layout::from_ids builds from its own ranks (a hand-set `contiguous` would otherwise let a
/// non-commutative op combine out of rank order).
inline std::string layout_problem(const node_layout& l, int rank, int n) {
  const std::string whose = "the layout does not describe world rank " + std::to_string(rank) + " of " + std::to_string(n);
  std::vector<std::string> ids(static_cast<std::size_t>(n));
  for (std::size_t m = 0; m < l.ranks.size(); ++m)
    for (const int r : l.ranks[m]) {
      if (r < 0 || r >= n || !ids[static_cast<std::size_t>(r)].empty())
        return whose + ": its ranks do not hold world ranks 0 to " + std::to_string(n - 1) + " once each";
      ids[static_cast<std::size_t>(r)] = "node " + std::to_string(m);
    }
  for (const std::string& id : ids)
    if (id.empty()) return whose + ": its ranks do not hold world ranks 0 to " + std::to_string(n - 1) + " once each";
  const node_layout want = node_layout::from_ids(ids, rank);
  auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  const std::pair<const char*, std::pair<std::string, std::string>> fields[] = {
      {"node_count", {std::to_string(l.node_count), std::to_string(want.node_count)}},
      {"node_index", {std::to_string(l.node_index), std::to_string(want.node_index)}},
      {"local_rank", {std::to_string(l.local_rank), std::to_string(want.local_rank)}},
      {"local_size", {std::to_string(l.local_size), std::to_string(want.local_size)}},
      {"uniform", {flag(l.uniform), flag(want.uniform)}},
      {"contiguous", {flag(l.contiguous), flag(want.contiguous)}}};
  for (const auto& [name, values] : fields)
    if (values.first != values.second)
      return whose + ": its " + name + " is " + values.first + ", its ranks give " + values.second +
             " (build it with node_layout::from_ids(ids, world.rank()))";
  if (l.ranks != want.ranks)
    return whose + ": its nodes are not in order of their lowest rank, ranks ascending (build it with "
                   "node_layout::from_ids)";
  return {};
}

/// One rank's outcome of attach_hierarchy's checks, exchanged over world so that every rank ends
/// the same way.
struct attach_verdict {
  std::int32_t state;  ///< 0: its checks passed; 1: it refused the hierarchy; 2: a level check ended (a peer's failure)
  char why[500];       ///< what it found, cut to fit
};
/// Errors name attach_hierarchy's exchange as the call the user made.
inline const bool attach_exchange_named =
    remember_exchange_call(type_signature_hash<attach_verdict>, "collx::attach_hierarchy");
}  // namespace detail

/// Attaches `node` and `cross` to `world` so that algo::hierarchical (and algo::automatic, when
/// there are several nodes) can use them; abort() on world aborts them too, and a wait on any of
/// the three ends when another of them fails (transport::watch). For hierarchies built by hand
/// (collx::split of world by node, say); mpi::connect_hierarchical and
/// make_hierarchical_thread_communicators attach their own.
///
/// Collective over world, node and cross: every rank of world attaches, at the same point of its
/// calls on them (one thread attaching every rank of a thread world in turn waits for the
/// timeout). It checks that the layout is what node_layout::from_ids builds from its ranks, and,
/// with one all_gather on each level, that the level holds exactly the world ranks the layout says
/// (node: layout.ranks[layout.node_index] in local-rank order; cross: the ranks with this local
/// rank on every node, in node order); then one all_gather on world tells every rank every
/// rank's outcome, so that all attach or all throw (a rank that has returned can still fail world
/// by its next call before a slower rank has returned, which then throws that failure, as from any
/// collective). A hierarchy that passed only its sizes would
/// combine in the wrong order, silently. Attaching again (on every rank, as the first time)
/// replaces the hierarchy: the earlier levels are destroyed, and later calls run on the new ones.
/// @param world the communicator the layout describes (layout.ranks covers its ranks)
/// @param layout this rank's node_layout (node_layout::from_ids of the same ids on every rank)
/// @param node this rank's node communicator: rank = layout.local_rank
/// @param cross this rank's cross-node communicator: rank = its node's place among the nodes that
///   have this local rank
/// @throws collx::error invalid_argument on every rank when any rank refused (its own finding, or
///   "world rank R refused the hierarchy: <R's finding>"); what a level's all_gather raised when
///   one ended otherwise; what the world all_gather raises (timeout: a rank that never attaches).
inline void attach_hierarchy(communicator& world, node_layout layout, communicator node, communicator cross) {
  const std::string call = "rank " + std::to_string(world.rank()) + ": attach_hierarchy";
  // One call on world (its all_gather, then attaching): an async call started meanwhile runs after.
  world.drain_async();
  const communicator::call_scope one_thread(world);
  detail::attach_verdict mine[1] = {};
  errc ended_code = errc::aborted;
  std::string found;  // this rank's finding, whole
  // A finding fails both levels at once: their other ranks' checks end now, not at their timeout.
  auto stop = [&](std::int32_t state, errc code, const std::string& what) {
    found = call + ": " + what;
    mine[0].state = state;
    std::snprintf(mine[0].why, sizeof mine[0].why, "%s", found.c_str());
    node.fail(code, state == 1 ? "invalid arguments: " + found : found);
    cross.fail(code, state == 1 ? "invalid arguments: " + found : found);
  };
  auto check = [&] {
    if (const std::string bad = detail::layout_problem(layout, world.rank(), world.size()); !bad.empty())
      return stop(1, errc::invalid_argument, bad);
    const std::vector<int> node_ranks = layout.ranks[static_cast<std::size_t>(layout.node_index)];
    const std::vector<int> cross_ranks = layout.cross_ranks(layout.local_rank);
    if (node.size() != layout.local_size || node.rank() != layout.local_rank)
      return stop(1, errc::invalid_argument,
                  "the node communicator is rank " + std::to_string(node.rank()) + "/" + std::to_string(node.size()) +
                      ", the layout says local rank " + std::to_string(layout.local_rank) + "/" +
                      std::to_string(layout.local_size));
    if (cross.size() != static_cast<int>(cross_ranks.size()) ||
        cross_ranks.at(static_cast<std::size_t>(cross.rank())) != world.rank())
      return stop(1, errc::invalid_argument,
                  "the cross-node communicator is rank " + std::to_string(cross.rank()) + "/" +
                      std::to_string(cross.size()) + "; the layout's ranks with local rank " +
                      std::to_string(layout.local_rank) + " are world ranks " + detail::rank_list(cross_ranks));
    const int me[1] = {world.rank()};
    for (const auto& [level, name, expected] : {std::tuple{&node, "node communicator", &node_ranks},
                                                std::tuple{&cross, "cross-node communicator", &cross_ranks}}) {
      std::vector<int> held(expected->size());
      try {
        all_gather<algo::direct>(*level, std::span<const int>(me), std::span<int>(held));
      } catch (const error& e) {  // a peer's finding, or its timeout
        ended_code = e.code();
        return stop(2, e.code(), std::string("checking the ") + name + ": " + e.what());
      }
      if (held != *expected)
        return stop(1, errc::invalid_argument,
                    "the " + std::string(name) + " holds world ranks " + detail::rank_list(held) +
                        " but the layout says " + detail::rank_list(*expected));
    }
  };
  check();
  std::vector<detail::attach_verdict> all(static_cast<std::size_t>(world.size()));
  try {
    all_gather<algo::direct>(world, std::span<const detail::attach_verdict>(mine), std::span<detail::attach_verdict>(all));
  } catch (const error& e) {  // ours, not the user's: say what they called
    COLLX_THROW(e.code(), call + " (collective over world: every rank attaches, at the same point of its calls): " +
                              e.what() + (found.empty() ? "" : "; this rank found: " + found));
  }
  if (mine[0].state == 1) COLLX_THROW(errc::invalid_argument, found);  // its own finding first
  for (const std::int32_t state : {1, 2})  // a refusal names the cause better than a check it ended
    for (int r = 0; r < world.size(); ++r) {
      const detail::attach_verdict& v = all[static_cast<std::size_t>(r)];
      if (v.state != state) continue;
      if (r == world.rank()) COLLX_THROW(state == 1 ? errc::invalid_argument : ended_code, found);
      COLLX_THROW(state == 1 ? errc::invalid_argument : errc::aborted,
                  call + ": world rank " + std::to_string(r) +
                      (state == 1 ? " refused the hierarchy: " : " could not check its levels: ") +
                      std::string(v.why, ::strnlen(v.why, sizeof v.why)));
    }
  detail::attach_levels(world, std::move(layout), std::move(node), std::move(cross));
}

}  // namespace v0
}  // namespace collx
