/// @file allreduce.hpp
/// collx::allreduce: every rank ends with op folded over all ranks' vectors, element by element.
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
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {

/// All-reduce: recv[i] = op over ranks r of send_r[i], on every rank.
///
/// Every rank calls it with the same count (send.size()), element type, op and algorithm.
/// Combination order and rounding: see algo/ring.hpp, algo/tree.hpp, algo/direct.hpp and ops.hpp;
/// for a given (algorithm, world size, count, type, op) the result is bit-identical on every rank and
/// every run (algo::ring: for a given ring order and segment size too, see algo/ring.hpp);
/// algo::direct equals the sequential rank-order fold bit for bit.
/// @tparam Algo algo::ring (commutative ops only, checked at compile time), algo::tree,
///   algo::direct, or algo::automatic (default; chosen per call by the communicator's selector);
///   algo::hierarchical<Intra, Inter> runs two levels on a communicator with a hierarchy attached
///   (algo/hierarchical.hpp), which algo::automatic also picks when the nodes hold several ranks
///   each (one node too: the node communicator then runs the whole call).
/// @param send this rank's vector (count elements; never written unless it is also `recv`)
/// @param recv the result (count elements). In place when recv.data() == send.data() (NCCL's
///   convention); any other overlap is an error.
/// @param op a reduction op (ops::sum by default, or the user's own; see reduction_op)
/// @throws collx::error invalid_argument (sizes differ, partial overlap, a null pointer with
///   elements), mismatch (ranks disagree on count, type, op or algorithm), timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void allreduce(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, Op op = {}) {
  detail::static_check_algorithm<Algo, Op>();
  detail::require_address<T, Op>(comm, collective::allreduce, "send", send.data(), send.size());
  detail::require_address<T, Op>(comm, collective::allreduce, "recv", recv.data(), recv.size());
  const bool in_place = static_cast<const void*>(send.data()) == recv.data() && send.size() == recv.size();
  if (send.size() != recv.size())
    detail::invalid_call<T, Op>(comm, collective::allreduce,
                                "send has " + std::to_string(send.size()) + " elements but recv has " +
                                    std::to_string(recv.size()) + "; they must be equal");
  if (!in_place && detail::overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    detail::invalid_call<T, Op>(comm, collective::allreduce,
                                "send and recv overlap without being the same buffer (in place)");
  detail::run_collective<T, Op, Algo>(comm, collective::allreduce, send.data(), recv.data(), in_place, -1, op,
                                      detail::call_layout::vector(send.size()));
}

/// In-place all-reduce: buf becomes op over all ranks' buf. Same rules as the two-buffer form.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void allreduce(communicator& comm, std::span<T> buf, Op op = {}) {
  allreduce<Algo, T, Op>(comm, std::span<const T>(buf), buf, op);
}

/// Starts allreduce on the communicator's progress thread and returns at once; the request's wait()
/// returns when it finished (and rethrows its error). Buffers must stay alive until then.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                        Op op = {}) {
  return detail::start_async(comm, [=](communicator& c) { allreduce<Algo, T, Op>(c, send, recv, op); });
}

/// In-place allreduce_async.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request allreduce_async(communicator& comm, std::span<T> buf, Op op = {}) {
  return detail::start_async(comm, [=](communicator& c) { allreduce<Algo, T, Op>(c, buf, op); });
}

/// allreduce on contiguous ranges (std::vector, std::array, C arrays; see output_buffer): the same
/// call on span views of send and recv, which keep their sizes.
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
void allreduce(communicator& comm, const S& send, R&& recv, Op op = {}) {
  allreduce<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv), op);
}

/// In-place allreduce on a contiguous range (std::vector, ...; see output_buffer).
template <class Algo = algo::automatic, output_buffer R, class Op = ops::sum>
  requires reduction_op_on<Op, R>
void allreduce(communicator& comm, R&& buf, Op op = {}) {
  allreduce<Algo, buffer_element_t<R>, Op>(comm, detail::as_span(buf), op);
}

/// allreduce_async on contiguous ranges (see output_buffer); they must stay alive, and keep their
/// size and storage, until the request completed.
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
request allreduce_async(communicator& comm, const S& send, R&& recv, Op op = {}) {
  return allreduce_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv), op);
}

/// In-place allreduce_async on a contiguous range (see output_buffer and the out-of-place form).
template <class Algo = algo::automatic, output_buffer R, class Op = ops::sum>
  requires reduction_op_on<Op, R>
request allreduce_async(communicator& comm, R&& buf, Op op = {}) {
  return allreduce_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_span(buf), op);
}

/// Refused (deleted): allreduce_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request allreduce_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
