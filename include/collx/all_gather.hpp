/// @file all_gather.hpp
/// collx::all_gather and all_gather_v: every rank ends with all ranks' blocks, in rank order.
#pragma once

#include <span>
#include <type_traits>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/algo/direct.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/tree.hpp>
#include <collx/block_counts.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/dispatch.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
template <class T, class Algo>
void all_gather_impl(communicator& comm, std::span<const T> send, std::span<T> recv, const block_counts& given,
                     bool varying) {
  static_check_algorithm<Algo, no_op>();
  const int n = comm.size(), r = comm.rank();
  const std::span<const std::size_t> counts = given.values();
  if (counts.size() != static_cast<std::size_t>(n))
    invalid_call<T, no_op>(comm, collective::all_gather,
                           "counts has " + std::to_string(counts.size()) + " entries for " + std::to_string(n) + " ranks",
                           varying);
  if (!counts_are_sound(given, sizeof(T)))
    invalid_call<T, no_op>(comm, collective::all_gather, bad_counts("counts", given, sizeof(T)), varying);
  std::size_t total = 0, mine = 0;
  for (int c = 0; c < n; ++c) {
    if (c == r) mine = total;
    total += counts[static_cast<std::size_t>(c)];
  }
  if (send.size() != counts[static_cast<std::size_t>(r)])
    invalid_call<T, no_op>(comm, collective::all_gather,
                           "send has " + std::to_string(send.size()) + " elements; this rank's block has " +
                               std::to_string(counts[static_cast<std::size_t>(r)]), varying);
  if (recv.size() != total)
    invalid_call<T, no_op>(comm, collective::all_gather,
                           "recv has " + std::to_string(recv.size()) + " elements; the blocks need " + std::to_string(total),
                           varying);
  require_address<T, no_op>(comm, collective::all_gather, "send", send.data(), send.size(), varying);
  require_address<T, no_op>(comm, collective::all_gather, "recv", recv.data(), recv.size(), varying);
  const bool in_place = static_cast<const void*>(recv.data() + mine) == send.data() && !send.empty();
  if (!in_place && overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    invalid_call<T, no_op>(comm, collective::all_gather,
                           "send overlaps recv but is not this rank's own block of it (in place means "
                           "send.data() == recv.data() + offset of block rank)", varying);
  run_collective<T, no_op, Algo>(comm, collective::all_gather, send.data(), recv.data(), in_place, -1, no_op{},
                                 call_layout::blocks(counts, varying));
}
}  // namespace detail

/// All-gather: recv = send_0 | send_1 | ... | send_{n-1} on every rank.
/// @param send this rank's block (same size on every rank; never written unless inside recv)
/// @param recv n * send.size() elements. In place when send.data() == recv.data() + rank * send.size()
///   (NCCL's convention; collx::rank_block(recv, comm) gives that block); any other overlap is an error.
/// @tparam Algo ring, tree (binomial gather + broadcast), direct, automatic, or hierarchical<Intra, Inter>
///   (across nodes, then inside each: algo/hierarchical.hpp).
/// @throws collx::error invalid_argument, mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T>
void all_gather(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
  const detail::count_array counts(static_cast<std::size_t>(comm.size()), send.size());
  detail::all_gather_impl<T, Algo>(comm, send, recv, counts.span(), false);
}

/// All-gather with uneven blocks: rank c contributes counts[c] elements, packed in rank order in recv.
/// @param counts world-size entries, identical on every rank (checked); std::size_t or any integer
///   type, or a braced list (see block_counts)
/// @param send counts[rank] elements
/// @param recv sum(counts) elements; in place when send is this rank's block of recv.
/// @throws collx::error invalid_argument, mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T>
void all_gather_v(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                  const block_counts& counts) {
  detail::all_gather_impl<T, Algo>(comm, send, recv, counts, true);
}

/// Starts all_gather on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T>
request all_gather_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
  return detail::start_async(comm, [=](communicator& c) { all_gather<Algo, T>(c, send, recv); });
}

/// Starts all_gather_v on the progress thread; see allreduce_async. counts is copied (it may be a
/// temporary).
template <class Algo = algo::automatic, element T>
request all_gather_v_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                           const block_counts& counts) {
  return detail::start_async(comm, [=, counts = counts.owned()](communicator& c) {
    all_gather_v<Algo, T>(c, send, recv, counts);
  });
}

/// all_gather on contiguous ranges (std::vector, std::array, C arrays; see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
void all_gather(communicator& comm, const S& send, R&& recv) {
  all_gather<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv));
}

/// all_gather_v on contiguous ranges (see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
void all_gather_v(communicator& comm, const S& send, R&& recv, const block_counts& counts) {
  all_gather_v<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv), counts);
}

/// all_gather_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
request all_gather_async(communicator& comm, const S& send, R&& recv) {
  return all_gather_async<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv));
}

/// all_gather_v_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
request all_gather_v_async(communicator& comm, const S& send, R&& recv, const block_counts& counts) {
  return all_gather_v_async<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv),
                                                       counts);
}

/// Refused (deleted): all_gather_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request all_gather_async(communicator& comm, S&& send, Rest&&... rest) = delete;

/// Refused (deleted): all_gather_v_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request all_gather_v_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
