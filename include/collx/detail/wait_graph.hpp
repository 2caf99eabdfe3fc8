/// @file detail/wait_graph.hpp
/// Deadlock detection for transports whose waits can only be ended by one peer: each rank
/// publishes what it waits for while it waits, and a waiting rank follows the chain "waits for"
/// from itself. A chain that comes back to it, every link still waiting on an unmet condition when
/// looked at twice, is a deadlock: its ranks fail at once instead of at their timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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

/// The wait_record of every rank of a world, each written by its rank only (a seqlock of atomics:
/// readers see a whole record or retry later) and read by the others.
class published_waits {
 public:
  explicit published_waits(int world_size) : n_(world_size), slots_(new slot[static_cast<std::size_t>(world_size)]) {}

  /// Rank r begins (kind != 0) or ends (kind == 0) a wait. By rank r only.
  void publish(int r, const wait_record& w) noexcept {
    slot& s = slots_[static_cast<std::size_t>(r)];
    const std::uint64_t v = s.version.load(std::memory_order_relaxed);
    s.version.store(v + 1, std::memory_order_relaxed);  // odd: being written
    std::atomic_thread_fence(std::memory_order_release);
    s.kind.store(w.kind, std::memory_order_relaxed);
    s.peer.store(w.peer, std::memory_order_relaxed);
    s.k.store(w.k, std::memory_order_relaxed);
    s.seq.store(w.seq, std::memory_order_relaxed);
    s.version.store(v + 2, std::memory_order_release);
  }

  /// Rank r's record and its version, if r is in a wait and not rewriting the record.
  bool read(int r, wait_record& w, std::uint64_t& version) const noexcept {
    const slot& s = slots_[static_cast<std::size_t>(r)];
    version = s.version.load(std::memory_order_acquire);
    if (version & 1) return false;
    w.kind = s.kind.load(std::memory_order_relaxed);
    w.peer = s.peer.load(std::memory_order_relaxed);
    w.k = s.k.load(std::memory_order_relaxed);
    w.seq = s.seq.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    return s.version.load(std::memory_order_relaxed) == version && w.kind != 0;
  }

  /// A cycle of waits through rank `me`, or none (empty): from `me`, each rank's wait names the next.
  /// `unmet(r, w)` says whether rank r's wait w still cannot end (the transport's condition, read
  /// from shared state). Only a condition that, once met, stays met, and that only w.peer can
  /// meet, may be published: then two walks of the cycle in which every record is the same wait
  /// (same version) and unmet show an instant at which every rank of it waited on the next, none of
  /// which could go on. Returns (rank, record) along the cycle, starting at me. A chain that ends
  /// at a rank not waiting, or at a cycle without me (its own ranks report it), gives none.
  template <class Unmet>
  std::vector<std::pair<int, wait_record>> cycle_through(int me, Unmet&& unmet) const {
    struct link {
      int rank;
      wait_record w;
      std::uint64_t version;
    };
    {  // A first look without allocating (asked on every wake-up of a wait): the peer must wait too.
      wait_record w, next;
      std::uint64_t v = 0;
      if (!read(me, w, v) || w.peer < 0 || w.peer >= n_ || !read(w.peer, next, v) || !unmet(w.peer, next)) return {};
    }
    std::vector<link> chain;
    int r = me;
    for (int steps = 0; steps < n_; ++steps) {
      link l{r, {}, 0};
      if (!read(r, l.w, l.version) || l.w.peer < 0 || l.w.peer >= n_ || !unmet(r, l.w)) return {};
      chain.push_back(l);
      r = l.w.peer;
      if (r == me) break;
      for (const link& seen : chain)
        if (seen.rank == r) return {};
    }
    if (r != me) return {};
    std::vector<std::pair<int, wait_record>> out;
    for (const link& l : chain) {  // the second walk: nothing changed since the first
      wait_record again;
      std::uint64_t version = 0;
      if (!read(l.rank, again, version) || version != l.version || !unmet(l.rank, again)) return {};
      out.emplace_back(l.rank, l.w);
    }
    return out;
  }

 private:
  struct alignas(64) slot {
    std::atomic<std::uint64_t> version{0};
    std::atomic<std::uint32_t> kind{0};
    std::atomic<int> peer{-1};
    std::atomic<std::uint64_t> k{0};
    std::atomic<std::uint64_t> seq{0};
  };
  int n_;
  std::unique_ptr<slot[]> slots_;
};

}  // namespace detail
}  // namespace v0
}  // namespace collx
