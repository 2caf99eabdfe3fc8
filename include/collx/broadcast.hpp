/// @file broadcast.hpp
/// collx::broadcast: the root's vector, copied to every rank.
#pragma once

#include <span>
#include <type_traits>

#include <collx/algo/automatic.hpp>
#include <collx/algo/direct.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/tree.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/dispatch.hpp>

namespace collx {
inline namespace v0 {

/// Broadcast: recv = send of rank `root`, on every rank.
/// @param send read on the root only (recv.size() elements there; ignored elsewhere, may be empty)
/// @param recv recv.size() elements on every rank, the same count everywhere. On the root, in place
///   when recv.data() == send.data(); any other overlap is an error.
/// @param root in [0, world size); checked before any byte moves.
/// @tparam Algo ring (pipelined chain), tree (binomial), direct (root to all), automatic, or
///   hierarchical<Intra, Inter> (across nodes, then inside each: algo/hierarchical.hpp).
/// @throws collx::error invalid_argument (bad root, sizes, overlap, a null pointer with elements),
///   mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T>
void broadcast(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, int root) {
  using detail::no_op;
  detail::static_check_algorithm<Algo, no_op>();
  if (root < 0 || root >= comm.size())
    detail::invalid_call<T, no_op>(comm, collective::broadcast,
                                   "root " + std::to_string(root) + " is not a rank of this communicator (world size " +
                                       std::to_string(comm.size()) + ")");
  const bool is_root = comm.rank() == root;
  if (is_root) detail::require_address<T, no_op>(comm, collective::broadcast, "send", send.data(), send.size());
  detail::require_address<T, no_op>(comm, collective::broadcast, "recv", recv.data(), recv.size());
  const bool in_place = is_root && static_cast<const void*>(send.data()) == recv.data();
  if (is_root && send.size() != recv.size())
    detail::invalid_call<T, no_op>(comm, collective::broadcast,
                                   "at the root send has " + std::to_string(send.size()) + " elements and recv " +
                                       std::to_string(recv.size()) + "; they must be equal");
  if (is_root && !in_place && detail::overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    detail::invalid_call<T, no_op>(comm, collective::broadcast, "send and recv overlap without being the same buffer");
  detail::run_collective<T, no_op, Algo>(comm, collective::broadcast, is_root ? send.data() : nullptr, recv.data(),
                                         in_place, root, no_op{}, detail::call_layout::vector(recv.size()));
}

/// In-place broadcast: buf becomes the root's buf on every rank.
template <class Algo = algo::automatic, element T>
void broadcast(communicator& comm, std::span<T> buf, int root) {
  broadcast<Algo, T>(comm, std::span<const T>(buf), buf, root);
}

/// Starts broadcast on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T>
request broadcast_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, int root) {
  return detail::start_async(comm, [=](communicator& c) { broadcast<Algo, T>(c, send, recv, root); });
}

/// Starts an in-place broadcast on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T>
request broadcast_async(communicator& comm, std::span<T> buf, int root) {
  return detail::start_async(comm, [=](communicator& c) { broadcast<Algo, T>(c, buf, root); });
}

/// broadcast on contiguous ranges (std::vector, std::array, C arrays; see output_buffer). send is
/// read on the root only: elsewhere it may be `{}`.
template <class Algo = algo::automatic, output_buffer R, input_buffer S = std::span<const buffer_element_t<R>>>
  requires same_elements<S, R>
void broadcast(communicator& comm, const S& send, R&& recv, int root) {
  broadcast<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv), root);
}

/// In-place broadcast on a contiguous range (std::vector, ...; see output_buffer).
template <class Algo = algo::automatic, output_buffer R>
void broadcast(communicator& comm, R&& buf, int root) {
  broadcast<Algo, buffer_element_t<R>>(comm, detail::as_span(buf), root);
}

/// broadcast_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S = std::span<const buffer_element_t<R>>>
  requires same_elements<S, R>
request broadcast_async(communicator& comm, const S& send, R&& recv, int root) {
  return broadcast_async<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv), root);
}

/// In-place broadcast_async on a contiguous range (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R>
request broadcast_async(communicator& comm, R&& buf, int root) {
  return broadcast_async<Algo, buffer_element_t<R>>(comm, detail::as_span(buf), root);
}

/// Refused (deleted): broadcast_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request broadcast_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
