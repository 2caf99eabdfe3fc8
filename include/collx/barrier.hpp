/// @file barrier.hpp
/// collx::barrier: no rank leaves before every rank has entered.
#pragma once

#include <collx/communicator.hpp>
#include <collx/detail/dispatch.hpp>

namespace collx {
inline namespace v0 {

/// Blocks until every rank of `comm` has called barrier (dissemination barrier, ceil(log2 n) rounds).
/// @throws collx::error mismatch (a rank called another collective), timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
inline void barrier(communicator& comm) {
  detail::run_collective<std::byte, detail::no_op, algo::direct>(comm, collective::barrier, nullptr, nullptr, false,
                                                                 -1, detail::no_op{}, detail::call_layout::vector(0));
}

/// Starts a barrier on the progress thread; wait() returns once every rank entered it.
inline request barrier_async(communicator& comm) {
  return detail::start_async(comm, [](communicator& c) { barrier(c); });
}

}  // namespace v0
}  // namespace collx
