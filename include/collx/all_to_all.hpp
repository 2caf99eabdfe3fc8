/// @file all_to_all.hpp
/// collx::all_to_all and all_to_all_v: rank r's block c goes to rank c, landing in block r there.
#pragma once

#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/algo/direct.hpp>
#include <collx/algo/ring.hpp>
#include <collx/block_counts.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/dispatch.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
template <class T, class Algo>
void all_to_all_impl(communicator& comm, std::span<const T> send, const block_counts& send_given, std::span<T> recv,
                     const block_counts& recv_given, bool varying) {
  static_assert(!std::is_same_v<Algo, algo::tree>,
                "collx: all_to_all has no tree algorithm; use algo::direct, algo::ring (pairwise exchange) "
                "or algo::automatic");
  static_check_algorithm<Algo, no_op>();
  const std::size_t n = static_cast<std::size_t>(comm.size());
  const std::span<const std::size_t> send_counts = send_given.values(), recv_counts = recv_given.values();
  if (send_counts.size() != n || recv_counts.size() != n)
    invalid_call<T, no_op>(comm, collective::all_to_all,
                           "send_counts has " + std::to_string(send_counts.size()) + " and recv_counts " +
                               std::to_string(recv_counts.size()) + " entries for " + std::to_string(n) +
                               " ranks (both need one per rank)",
                           varying);
  for (const auto& [name, counts] : {std::pair{"send_counts", &send_given}, std::pair{"recv_counts", &recv_given}})
    if (!counts_are_sound(*counts, sizeof(T)))
      invalid_call<T, no_op>(comm, collective::all_to_all, bad_counts(name, *counts, sizeof(T)), varying);
  std::size_t st = 0, rt = 0;
  for (std::size_t c = 0; c < n; ++c) st += send_counts[c], rt += recv_counts[c];
  if (send.size() != st || recv.size() != rt)
    invalid_call<T, no_op>(comm, collective::all_to_all,
                           "send/recv have " + std::to_string(send.size()) + "/" + std::to_string(recv.size()) +
                               " elements; the counts need " + std::to_string(st) + "/" + std::to_string(rt), varying);
  const std::size_t me = static_cast<std::size_t>(comm.rank());
  if (send_counts[me] != recv_counts[me])
    invalid_call<T, no_op>(comm, collective::all_to_all,
                           "this rank sends itself " + std::to_string(send_counts[me]) + " elements (send_counts[" +
                               std::to_string(me) + "]) but receives " + std::to_string(recv_counts[me]) +
                               " from itself (recv_counts[" + std::to_string(me) + "]); they must be equal",
                           varying);
  require_address<T, no_op>(comm, collective::all_to_all, "send", send.data(), send.size(), varying);
  require_address<T, no_op>(comm, collective::all_to_all, "recv", recv.data(), recv.size(), varying);
  if (overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    invalid_call<T, no_op>(comm, collective::all_to_all,
                           "send and recv overlap (all_to_all is never in place)", varying);
  run_collective<T, no_op, Algo>(comm, collective::all_to_all, send.data(), recv.data(), false, -1, no_op{},
                                 call_layout::pairs(send_counts, recv_counts, varying));
}
}  // namespace detail

/// All-to-all: send holds n blocks of send.size()/n elements; block c goes to rank c, which stores it
/// as its block `rank`. send and recv must not overlap.
/// @param send n * k elements (k the same on every rank)
/// @param recv n * k elements
/// @tparam Algo direct (all pairs at once), ring (n-1 pairwise exchange steps), or automatic
///   (algo::hierarchical<...> runs direct).
/// @throws collx::error invalid_argument, mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T>
void all_to_all(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  if (send.size() % n != 0 || recv.size() != send.size())
    detail::invalid_call<T, detail::no_op>(comm, collective::all_to_all,
                                           "send and recv need the same size, a multiple of the world size; got " +
                                               std::to_string(send.size()) + " and " + std::to_string(recv.size()));
  const detail::count_array counts(n, send.size() / n);
  detail::all_to_all_impl<T, Algo>(comm, send, counts.span(), recv, counts.span(), false);
}

/// All-to-all with uneven blocks, packed in rank order: this rank sends send_counts[c] elements to
/// rank c and receives recv_counts[c] from it. send_counts[c] on rank r must equal recv_counts[r] on
/// rank c: a disagreement is reported as errc::mismatch on the receiving rank (zero-element pairs
/// included) and reaches every rank; a sender whose sends completed may return from this call and
/// see it at its next call. Where only the senders know their counts (a mixture-of-experts token
/// dispatch), exchange them first, as MPI codes call MPI_Alltoall before MPI_Alltoallv:
/// `collx::all_to_all(comm, send_counts, recv_counts)`, one count per rank on each side.
/// @param send_counts world-size entries; std::size_t or any integer type, or a braced list (see
///   block_counts)
/// @param recv_counts as send_counts
/// send and recv must not overlap (all_to_all is never in place).
/// @throws collx::error invalid_argument (counts not one per rank or not summing to the buffers'
///   sizes, send_counts[rank] != recv_counts[rank], overlap, a null pointer with elements),
///   mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T>
void all_to_all_v(communicator& comm, std::type_identity_t<std::span<const T>> send,
                  const block_counts& send_counts, std::span<T> recv, const block_counts& recv_counts) {
  detail::all_to_all_impl<T, Algo>(comm, send, send_counts, recv, recv_counts, true);
}

/// Starts all_to_all on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T>
request all_to_all_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
  return detail::start_async(comm, [=](communicator& c) { all_to_all<Algo, T>(c, send, recv); });
}

/// Starts all_to_all_v on the progress thread; see allreduce_async. The counts are copied (they may
/// be temporaries).
template <class Algo = algo::automatic, element T>
request all_to_all_v_async(communicator& comm, std::type_identity_t<std::span<const T>> send,
                           const block_counts& send_counts, std::span<T> recv, const block_counts& recv_counts) {
  return detail::start_async(comm, [=, send_counts = send_counts.owned(), recv_counts = recv_counts.owned()](communicator& c) {
    all_to_all_v<Algo, T>(c, send, send_counts, recv, recv_counts);
  });
}

/// all_to_all on contiguous ranges (std::vector, std::array, C arrays; see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
void all_to_all(communicator& comm, const S& send, R&& recv) {
  all_to_all<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv));
}

/// all_to_all_v on contiguous ranges (see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
void all_to_all_v(communicator& comm, const S& send, const block_counts& send_counts, R&& recv,
                  const block_counts& recv_counts) {
  all_to_all_v<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), send_counts, detail::as_span(recv),
                                          recv_counts);
}

/// all_to_all_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
request all_to_all_async(communicator& comm, const S& send, R&& recv) {
  return all_to_all_async<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), detail::as_span(recv));
}

/// all_to_all_v_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S>
  requires same_elements<S, R>
request all_to_all_v_async(communicator& comm, const S& send, const block_counts& send_counts, R&& recv,
                           const block_counts& recv_counts) {
  return all_to_all_v_async<Algo, buffer_element_t<R>>(comm, detail::as_const_span(send), send_counts,
                                                       detail::as_span(recv), recv_counts);
}

/// Refused (deleted): all_to_all_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request all_to_all_async(communicator& comm, S&& send, Rest&&... rest) = delete;

/// Refused (deleted): all_to_all_v_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request all_to_all_v_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
