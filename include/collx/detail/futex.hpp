/// @file detail/futex.hpp
/// Sleeping waits on a 32-bit word (Linux futex), usable between threads and, with shared = true,
/// between processes mapping the same memory. Ranks outnumber cores in tests and small jobs, so a
/// wait spins briefly and then sleeps instead of burning a core.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace collx {
inline namespace v0 {
namespace detail {

/// Sleeps while *word == expected, at most `timeout` (returns early on a wake or a signal).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::nanoseconds timeout, bool shared) noexcept {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE,
            expected, &ts, nullptr, 0);
}

/// Wakes every sleeper on `word`.
inline void futex_wake_all(std::atomic<std::uint32_t>& word, bool shared) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE,
            INT_MAX, nullptr, nullptr, 0);
}

/// A rank's doorbell: whoever changes state the rank may wait on rings it afterwards. Lives in
/// memory all parties map (for processes: shared memory), so it is a standard-layout pair of words.
struct doorbell {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint32_t> sleepers{0};

  /// Wakes the owner if it sleeps. Call it after the state change the owner waits for.
  /// While the owner spins (sleepers == 0) nothing is written: the owner's wait_until counts
  /// itself in `sleepers` before its last look at the state, and the fences make this ring either
  /// see that count or the owner see the new state (the store-buffering pattern). A ring that
  /// wrote `seq` every time moved the owner's line to the ringing core once per message.
  void ring(bool shared) noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) == 0) return;
    seq.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(seq, shared);
  }
};

/// Outcome of wait_until.
enum class wait_status { ready, timed_out, interrupted };

/// Waits until ready() holds: polls for up to `spin` first (cheap when the peer is running on
/// another core), then sleeps on `bell`. interrupted() is checked on every wake-up and at least every
/// `slice` (abort, peer failure, dead peer) and ends the wait.
template <class Ready, class Interrupted>
wait_status wait_until(doorbell& bell, bool shared, std::chrono::steady_clock::time_point deadline,
                       std::chrono::nanoseconds spin, Ready ready, Interrupted interrupted,
                       std::chrono::nanoseconds slice = std::chrono::hours(24)) {
  if (spin.count() > 0) {
    const auto spin_end = std::chrono::steady_clock::now() + spin;
    for (unsigned i = 1;; ++i) {
      if (ready()) return wait_status::ready;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if (i % 32 == 0 && std::chrono::steady_clock::now() >= spin_end) break;
    }
  }
  for (;;) {
    const std::uint32_t v = bell.seq.load(std::memory_order_seq_cst);
    if (ready()) return wait_status::ready;
    if (interrupted()) return wait_status::interrupted;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return wait_status::timed_out;
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with doorbell::ring's fence
    // interrupted() again: abort() and failures ring the bell only when they see a sleeper.
    if (bell.seq.load(std::memory_order_seq_cst) == v && !ready() && !interrupted())
      futex_wait(bell.seq, v, std::min<std::chrono::nanoseconds>(deadline - now, slice), shared);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

/// wait_until with a deadline `timeout` from now, read from the clock only once a short poll (64
/// looks, a few microseconds) did not find ready(): a small message's wait that ends within the
/// poll costs no clock reads.
template <class Ready, class Interrupted>
wait_status wait_until(doorbell& bell, bool shared, std::chrono::nanoseconds timeout, std::chrono::nanoseconds spin,
                       Ready ready, Interrupted interrupted, std::chrono::nanoseconds slice = std::chrono::hours(24)) {
  if (spin.count() > 0)
    for (int i = 0; i < 64; ++i) {
      if (ready()) return wait_status::ready;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  return wait_until(bell, shared, std::chrono::steady_clock::now() + timeout, spin, ready, interrupted, slice);
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
