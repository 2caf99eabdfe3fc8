/// @file split.hpp
/// collx::split: new communicators over groups of a communicator's ranks, as MPI_Comm_split and
/// ncclCommSplit make them; for example the tensor-parallel and the data-parallel groups of a
/// two-dimensional layout of ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <collx/all_gather.hpp>
#include <collx/barrier.hpp>
#include <collx/communicator.hpp>
#include <collx/detail/dispatch.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// One rank's part of collx::split's exchange: a type of its own, so that no collective a user
/// makes (an all_gather of two int64, say) can pass for the exchange on some ranks.
struct split_entry {
  std::int64_t color;
  std::int64_t key;
};
/// Errors name split's exchange as collx::split, the call the user made.
inline const bool split_exchange_named = remember_exchange_call(type_signature_hash<split_entry>, "collx::split");
}  // namespace detail

/// collx::split's color for a rank that joins no group (MPI's MPI_UNDEFINED, NCCL's
/// NCCL_SPLIT_NOCOLOR).
inline constexpr int no_color = -1;

/// Splits `comm` into disjoint communicators, one per color, as MPI_Comm_split does: the ranks
/// that pass the same `color` form a group, whose ranks are numbered by (`key`, rank in comm)
/// ascending. Collective over comm: every rank calls it, in the same order among its other calls
/// on comm (one all_gather of every rank's color and key, which errors call collx::split). The new
/// communicator is independent of comm: either may be used, failed or destroyed without the other.
///
/// It uses a new transport of comm's kind: threads share a new in-process world; processes over
/// shared memory connect a segment of the group's own (named after comm's job id, the split and
/// the color); over MPI, MPI_Comm_split of comm's duplicate. Its options are comm's, without
/// `ring_order` (comm's order means nothing to the group); it has no hierarchy (over MPI, call
/// mpi::connect_hierarchical on an MPI communicator of the group for one). Its failures, as its
/// ranks read them, name the group and which ranks of comm its ranks are ("split group (color 2)
/// rank 1 (world rank 3) failed: rank 0 (pid N) died ... (split group (color 2): its ranks 0, 1
/// are world ranks 1, 3)"; for a group of a group, the ranks of the first communicator split), and
/// so do the errors of its start ("rank 3: collx::split, starting the group of color 2 (2 ranks):
/// ... (split group (color 2): its ranks 0, 1 are world ranks 1, 3)").
///
/// @param color a group's number, >= 0; or no_color: this rank joins no group.
/// @param key orders the group's ranks; ties keep comm's order (pass 0, or comm.rank(), for it).
/// @return this rank's communicator of its group (rank = its place in the group, size = the
///   ranks with its color), or std::nullopt for no_color.
/// @throws collx::error invalid_argument (a moved-from communicator; a negative color other than
///   no_color: comm is then failed for every rank; a transport that cannot split, found after the
///   exchange), mismatch, timeout, aborted or transport as
///   the all_gather raises them (a rank calling another collective meanwhile), and what connecting the
///   group raises (shared memory: system when /dev/shm is full; aborted within about 50 ms when
///   comm fails or a member dies while the group starts; timeout when a live member never
///   arrives, after shm_options::connect_timeout); any error after the exchange fails comm too.
///   Over MPI, MPI_Comm_split itself has no timeout: the ranks first confirm, with a barrier
///   after the exchange, that all of them finished it; a rank that fails after that barrier but
///   before MPI_Comm_split (stopped for longer than the timeout) leaves the others waiting
///   there. Over threads, a rank whose exchange failed while its peers' ended well fails the
///   group it would have joined (its members' first call on it fails at once, errc::aborted).
[[nodiscard]] inline std::optional<communicator> split(communicator& comm, int color, int key) {
  const int n = comm.size(), me = comm.rank();  // a moved-from communicator throws here
  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  if (color < 0 && color != no_color)
    detail::reject_call(comm, "rank " + std::to_string(me) + ": collx::split: color " + std::to_string(color) +
                                  " is negative; pass a color >= 0, or collx::no_color to join no group");
  const detail::split_entry mine[1] = {{color, key}};
  std::vector<detail::split_entry> all(static_cast<std::size_t>(n));
  try {
    all_gather<algo::direct>(comm, std::span<const detail::split_entry>(mine), std::span<detail::split_entry>(all));
    // Over MPI a rank's exchange can end well while its peers' failed (their data came before
    // their failure notices): it must not go on into MPI_Comm_split, which would wait for them for
    // ever. A rank leaves this barrier only once every rank entered it, having finished the exchange.
    if (comm.get_transport().split_waits_for_all()) barrier(comm);
  } catch (const error& e) {  // say what the user called: the all_gather is ours, not theirs
    // Peers whose exchange ended well go on to start their groups, this rank's among them.
    if (color != no_color)
      comm.get_transport().split_failed(comm.calls_made(), color,
                                        "rank " + std::to_string(me) + " of the communicator split failed in collx::split "
                                        "before it joined its group: " + e.what());
    COLLX_THROW(e.code(), std::string("collx::split (collective: every rank splits, at the same point of its calls): ") +
                              e.what());
  }
  auto color_of = [&](int r) { return all[static_cast<std::size_t>(r)].color; };
  auto key_of = [&](int r) { return all[static_cast<std::size_t>(r)].key; };
  std::vector<int> members;
  if (color != no_color)
    for (int r = 0; r < n; ++r)
      if (color_of(r) == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return key_of(a) < key_of(b); });
  const int group_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  communicator_options opt = comm.options();
  opt.ring_order.clear();
  std::shared_ptr<transport> t;
  // The group numbers its ranks anew: its failures, as its ranks read them, also say which ranks
  // of comm (of comm's own world, when comm is a group itself) they are.
  const std::vector<int>& above = comm.get_transport().level_world_ranks();
  std::vector<int> world_ranks;
  for (const int m : members) world_ranks.push_back(above.empty() ? m : above.at(static_cast<std::size_t>(m)));
  const std::string level = "split group (color " + std::to_string(color) + ")";
  const std::string call = "rank " + std::to_string(me) + ": collx::split";
  try {
    t = comm.get_transport().split(members, group_rank, color, key, comm.calls_made());
  } catch (const error& e) {  // the group's own ranks and names: say whose start it was, and who they are
    detail::fail_for_escaping(comm, call);
    if (members.empty())  // no_color: over MPI this rank takes part in MPI_Comm_split all the same
      COLLX_THROW(e.code(), call + ", joining no group: " + e.what());
    COLLX_THROW(e.code(), call + ", starting the group of color " + std::to_string(color) + " (" +
                              std::to_string(members.size()) + " ranks): " + e.what() + " (" + level + ": " +
                              level_ranks_text(world_ranks) + ")");
  } catch (...) {
    detail::fail_for_escaping(comm, call);
    throw;
  }
  if (!t) return std::nullopt;
  t->set_level(level, std::move(world_ranks));
  return communicator(std::move(t), std::move(opt));
}

}  // namespace v0
}  // namespace collx
