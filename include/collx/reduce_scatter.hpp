/// @file reduce_scatter.hpp
/// collx::reduce_scatter and reduce_scatter_v: the reduced vector, cut into per-rank blocks; rank r
/// keeps block r.
#pragma once

#include <numeric>
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
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
template <class T, class Op, class Algo>
void reduce_scatter_impl(communicator& comm, std::span<const T> send, std::span<T> recv, const block_counts& given,
                         bool varying, const Op& op) {
  static_check_algorithm<Algo, Op>();
  const int n = comm.size(), r = comm.rank();
  const std::span<const std::size_t> counts = given.values();
  if (counts.size() != static_cast<std::size_t>(n))
    invalid_call<T, Op>(comm, collective::reduce_scatter,
                        "recv_counts has " + std::to_string(counts.size()) + " entries for " + std::to_string(n) + " ranks",
                        varying);
  if (!counts_are_sound(given, sizeof(T)))
    invalid_call<T, Op>(comm, collective::reduce_scatter, bad_counts("recv_counts", given, sizeof(T)), varying);
  std::size_t total = 0, mine = 0;
  for (int c = 0; c < n; ++c) {
    if (c == r) mine = total;
    total += counts[static_cast<std::size_t>(c)];
  }
  if (send.size() != total)
    invalid_call<T, Op>(comm, collective::reduce_scatter,
                        "send has " + std::to_string(send.size()) + " elements; the blocks need " + std::to_string(total),
                        varying);
  if (recv.size() != counts[static_cast<std::size_t>(r)])
    invalid_call<T, Op>(comm, collective::reduce_scatter,
                        "recv has " + std::to_string(recv.size()) + " elements; this rank's block has " +
                            std::to_string(counts[static_cast<std::size_t>(r)]), varying);
  require_address<T, Op>(comm, collective::reduce_scatter, "send", send.data(), send.size(), varying);
  require_address<T, Op>(comm, collective::reduce_scatter, "recv", recv.data(), recv.size(), varying);
  const bool in_place = static_cast<const void*>(send.data() + mine) == recv.data() && !recv.empty();
  if (!in_place && overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    invalid_call<T, Op>(comm, collective::reduce_scatter,
                        "recv overlaps send but is not this rank's own block of it (in place means "
                        "recv.data() == send.data() + offset of block rank)", varying);
  run_collective<T, Op, Algo>(comm, collective::reduce_scatter, send.data(), recv.data(), in_place, -1, op,
                              call_layout::blocks(counts, varying));
}
}  // namespace detail

/// Reduce-scatter: recv = block `rank` of (op over ranks of send), blocks of recv.size() elements.
///
/// @param send n * recv.size() elements on every rank (n = world size); never written, but for recv's
///   own range when recv is inside it (in place: the other blocks stay as they were).
/// @param recv recv.size() elements, the same on every rank. In place when recv.data() ==
///   send.data() + rank * recv.size() (NCCL's convention: the result lands in the rank's own block of
///   send, which collx::rank_block(send, comm) gives); any other overlap is an error.
/// @tparam Algo ring (commutative ops only), tree, direct, automatic, or hierarchical<Intra, Inter>
///   (inside each node, then across nodes: algo/hierarchical.hpp).
/// @throws collx::error invalid_argument (sizes, overlap, a null pointer with elements), mismatch,
///   timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
/// Order of combination and determinism as for allreduce with the same algorithm.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void reduce_scatter(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, Op op = {}) {
  const detail::count_array counts(static_cast<std::size_t>(comm.size()), recv.size());
  detail::reduce_scatter_impl<T, Op, Algo>(comm, send, recv, counts.span(), false, op);
}

/// Reduce-scatter with uneven blocks: block c has recv_counts[c] elements, packed in rank order in
/// send (block c starts at recv_counts[0] + ... + recv_counts[c-1]).
/// @param recv_counts world-size entries, identical on every rank (checked: a mismatch is an error);
///   std::size_t or any integer type, or a braced list (see block_counts)
/// @param send sum(recv_counts) elements
/// @param recv recv_counts[rank] elements; in place when it is this rank's block of send.
/// @throws collx::error invalid_argument, mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void reduce_scatter_v(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                      const block_counts& recv_counts, Op op = {}) {
  detail::reduce_scatter_impl<T, Op, Algo>(comm, send, recv, recv_counts, true, op);
}

/// Starts reduce_scatter on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request reduce_scatter_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                             Op op = {}) {
  return detail::start_async(comm, [=](communicator& c) { reduce_scatter<Algo, T, Op>(c, send, recv, op); });
}

/// Starts reduce_scatter_v on the progress thread; see allreduce_async. recv_counts is copied (it
/// may be a temporary).
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request reduce_scatter_v_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                               const block_counts& recv_counts, Op op = {}) {
  return detail::start_async(
      comm, [=, recv_counts = recv_counts.owned()](communicator& c) {
        reduce_scatter_v<Algo, T, Op>(c, send, recv, recv_counts, op);
      });
}

/// reduce_scatter on contiguous ranges (std::vector, std::array, C arrays; see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
void reduce_scatter(communicator& comm, const S& send, R&& recv, Op op = {}) {
  reduce_scatter<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv), op);
}

/// reduce_scatter_v on contiguous ranges (see output_buffer).
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
void reduce_scatter_v(communicator& comm, const S& send, R&& recv, const block_counts& recv_counts, Op op = {}) {
  reduce_scatter_v<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv),
                                                  recv_counts, op);
}

/// reduce_scatter_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
request reduce_scatter_async(communicator& comm, const S& send, R&& recv, Op op = {}) {
  return reduce_scatter_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv),
                                                             op);
}

/// reduce_scatter_v_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
request reduce_scatter_v_async(communicator& comm, const S& send, R&& recv, const block_counts& recv_counts,
                               Op op = {}) {
  return reduce_scatter_v_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send),
                                                               detail::as_span(recv), recv_counts, op);
}

/// Refused (deleted): reduce_scatter_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request reduce_scatter_async(communicator& comm, S&& send, Rest&&... rest) = delete;

/// Refused (deleted): reduce_scatter_v_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request reduce_scatter_v_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
