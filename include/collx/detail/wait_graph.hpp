/// @file detail/wait_graph.hpp
/// Deadlock detection for transports whose waits can only be ended by one peer: each rank
/// publishes what it waits for while it waits, and a waiting rank follows the chain "waits for"
/// from itself. A chain that comes back to it, every link still the same unmet wait when looked at
/// twice, is a deadlock: its ranks fail at once instead of at their timeout. This is the
/// wait-for graph's edge chasing of Chandy, Misra and Haas ("Distributed deadlock detection", ACM
/// TOCS 1(2), 1983), with each rank's edge published in shared memory instead of sent as probes,
/// and the second look standing in for their probe's path through still-blocked ranks.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

namespace collx {
inline namespace v0 {
namespace detail {

/// What a rank waits for: `kind` (the transport's own numbering; 0 = not waiting), the peer that
/// alone can end the wait, the counter value the wait needs (`k`, the transport's), and the call
/// it waits in (sequence number; 0: point-to-point).
struct wait_record {
  std::uint32_t kind = 0;
  int peer = -1;
  std::uint64_t k = 0;
  std::uint64_t seq = 0;
};

/// One rank's published wait_record, written by its rank only and read by the others: a seqlock of
/// lock-free atomics, so it may live in memory shared between processes (plain data, no pointers).
struct alignas(64) wait_slot {
  std::atomic<std::uint64_t> version{0};  ///< odd while being written; changes with every publish
  std::atomic<std::uint32_t> kind{0};    ///< wait_record::kind (0: not waiting)
  std::atomic<std::int32_t> peer{-1};    ///< wait_record::peer
  std::atomic<std::uint64_t> k{0};       ///< wait_record::k
  std::atomic<std::uint64_t> seq{0};     ///< wait_record::seq

  /// The rank begins (w.kind != 0) or ends (w.kind == 0) a wait. By the slot's rank only.
  void publish(const wait_record& w) noexcept {
    const std::uint64_t v = version.load(std::memory_order_relaxed);
    version.store(v + 1, std::memory_order_relaxed);  // odd: being written
    std::atomic_thread_fence(std::memory_order_release);
    kind.store(w.kind, std::memory_order_relaxed);
    peer.store(w.peer, std::memory_order_relaxed);
    k.store(w.k, std::memory_order_relaxed);
    seq.store(w.seq, std::memory_order_relaxed);
    version.store(v + 2, std::memory_order_release);
  }

  /// The rank acts inside its wait (a transport whose waiting ranks still move data): from
  /// begin_change to end_change the record reads as being rewritten, and afterwards as another
  /// version, so no check that overlaps the action concludes from state it changed halfway.
  void begin_change() noexcept {
    version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // odd
    std::atomic_thread_fence(std::memory_order_release);
  }
  void end_change() noexcept {
    version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // even again
  }

  /// The record and its version, if the rank is in a wait and not rewriting the record.
  bool read(wait_record& w, std::uint64_t& v) const noexcept {
    v = version.load(std::memory_order_acquire);
    if (v & 1) return false;
    w.kind = kind.load(std::memory_order_relaxed);
    w.peer = peer.load(std::memory_order_relaxed);
    w.k = k.load(std::memory_order_relaxed);
    w.seq = seq.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return version.load(std::memory_order_relaxed) == v && w.kind != 0;
  }
};

/// A cycle of waits through rank `me` of an `n`-rank world, or none (empty): from `me`, each rank's
/// wait names the next. `slot_of(r)` is rank r's wait_slot; `blocked(r, w)` says whether rank r's
/// wait w can still not end, read from shared state. A transport may use this only if each wait's
/// end needs an action of w.peer that w.peer cannot take while it waits itself (what `blocked`
/// must check where a waiting rank still moves data), and if a wait, once able to end, stays so.
/// Then two walks of the cycle in which every record is the same wait (same version) and blocked
/// show an instant at which every rank of it waited on the next, none able to go on. Returns
/// (rank, record) along the cycle, from me. A chain that ends at a rank not waiting, or at a cycle
/// without me (its own ranks report it), gives none.
template <class SlotOf, class Blocked>
std::vector<std::pair<int, wait_record>> find_wait_cycle(int me, int n, SlotOf&& slot_of, Blocked&& blocked) {
  const auto in_world = [n](int r) { return r >= 0 && r < n; };
  {  // A first look without allocating (asked on every wake-up of a wait): the peer must wait too.
    wait_record w, next;
    std::uint64_t v = 0;
    if (!slot_of(me).read(w, v) || !in_world(w.peer) || !slot_of(w.peer).read(next, v) || !in_world(next.peer) ||
        !blocked(w.peer, next))
      return {};
  }
  struct link {
    int rank;
    wait_record w;
    std::uint64_t version;
  };
  std::vector<link> chain;
  int r = me;
  for (int steps = 0; steps < n; ++steps) {  // n links without coming back: a cycle without me
    link l{r, {}, 0};
    if (!slot_of(r).read(l.w, l.version) || !in_world(l.w.peer) || !blocked(r, l.w)) return {};
    chain.push_back(l);
    r = l.w.peer;
    if (r == me) break;
  }
  if (r != me) return {};
  std::vector<std::pair<int, wait_record>> out;
  for (const link& l : chain) {  // the second walk: nothing changed since the first
    wait_record again;
    std::uint64_t version = 0;
    if (!slot_of(l.rank).read(again, version) || version != l.version || !blocked(l.rank, again)) return {};
    out.emplace_back(l.rank, l.w);
  }
  return out;
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
