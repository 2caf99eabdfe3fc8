/// @file detail/fork_generation.hpp
/// Tells a process from the children fork() makes of it, so that a communicator copied into a
/// child by fork() is neither used there (the child would take part as the rank, and the ranks'
/// results would differ silently) nor torn down (its peers would see the rank leave).
#pragma once

#include <pthread.h>

#include <atomic>

namespace collx {
inline namespace v0 {
namespace detail {

/// fork()s in this process's line since collx first asked: each child counts one more.
inline std::atomic<unsigned> forks_seen{0};

/// forks_seen now: a value taken in one process differs from the one read in any child forked
/// after it. The first call registers the pthread_atfork handler that counts (once per process;
/// children inherit it).
inline unsigned fork_generation() noexcept {
  static const bool registered = [] {
    return ::pthread_atfork(nullptr, nullptr, [] { forks_seen.fetch_add(1, std::memory_order_relaxed); }) == 0;
  }();
  (void)registered;
  return forks_seen.load(std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
