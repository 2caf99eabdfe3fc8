/// @file reduce.hpp
/// collx::reduce: op over all ranks' vectors, delivered to the root only.
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

/// Reduce: on the root, recv[i] = op over ranks of send_r[i]. Non-roots' recv is never touched.
/// @param send send.size() elements on every rank, the same count everywhere; never written unless it
///   is the root's recv.
/// @param recv on the root send.size() elements (in place when recv.data() == send.data()); ignored
///   on other ranks (may be empty).
/// @param root in [0, world size); checked before any byte moves.
/// @tparam Algo ring (commutative ops only), tree (rank order, to rank 0 then to the root), direct
///   (the root folds in rank order: bitwise reproducible), automatic, or hierarchical<Intra, Inter>
///   (inside each node, then across nodes: algo/hierarchical.hpp).
/// @throws collx::error invalid_argument, mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void reduce(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, int root, Op op = {}) {
  detail::static_check_algorithm<Algo, Op>();
  if (root < 0 || root >= comm.size())
    detail::invalid_call<T, Op>(comm, collective::reduce,
                                "root " + std::to_string(root) + " is not a rank of this communicator (world size " +
                                    std::to_string(comm.size()) + ")");
  const bool is_root = comm.rank() == root;
  detail::require_address<T, Op>(comm, collective::reduce, "send", send.data(), send.size());
  if (is_root) detail::require_address<T, Op>(comm, collective::reduce, "recv", recv.data(), recv.size());
  const bool in_place = is_root && static_cast<const void*>(send.data()) == recv.data();
  if (is_root && send.size() != recv.size())
    detail::invalid_call<T, Op>(comm, collective::reduce,
                                "at the root send has " + std::to_string(send.size()) + " elements and recv " +
                                    std::to_string(recv.size()) + "; they must be equal");
  if (is_root && !in_place && detail::overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    detail::invalid_call<T, Op>(comm, collective::reduce, "send and recv overlap without being the same buffer");
  detail::run_collective<T, Op, Algo>(comm, collective::reduce, send.data(), is_root ? recv.data() : nullptr,
                                      in_place, root, op, detail::call_layout::vector(send.size()));
}

/// In-place reduce: on the root buf becomes the result; elsewhere buf is only read.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
void reduce(communicator& comm, std::span<T> buf, int root, Op op = {}) {
  reduce<Algo, T, Op>(comm, std::span<const T>(buf), buf, root, op);
}

/// Starts reduce on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request reduce_async(communicator& comm, std::type_identity_t<std::span<const T>> send, std::span<T> recv, int root,
                     Op op = {}) {
  return detail::start_async(comm, [=](communicator& c) { reduce<Algo, T, Op>(c, send, recv, root, op); });
}

/// Starts an in-place reduce on the progress thread; see allreduce_async.
template <class Algo = algo::automatic, element T, class Op = ops::sum>
  requires reduction_op<Op, T>
request reduce_async(communicator& comm, std::span<T> buf, int root, Op op = {}) {
  return detail::start_async(comm, [=](communicator& c) { reduce<Algo, T, Op>(c, buf, root, op); });
}

/// reduce on contiguous ranges (std::vector, std::array, C arrays; see output_buffer). recv is
/// written on the root only; elsewhere it may be empty.
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
void reduce(communicator& comm, const S& send, R&& recv, int root, Op op = {}) {
  reduce<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv), root, op);
}

/// reduce from a contiguous range into a span: non-roots may pass `{}` as recv.
template <class Algo = algo::automatic, input_buffer S, class Op = ops::sum>
  requires(!detail::is_dynamic_span<S>) && reduction_op_on<Op, S>
void reduce(communicator& comm, const S& send, std::span<buffer_element_t<S>> recv, int root, Op op = {}) {
  reduce<Algo, buffer_element_t<S>, Op>(comm, detail::as_const_span(send), recv, root, op);
}

/// In-place reduce on a contiguous range (std::vector, ...; see output_buffer).
template <class Algo = algo::automatic, output_buffer R, class Op = ops::sum>
  requires reduction_op_on<Op, R>
void reduce(communicator& comm, R&& buf, int root, Op op = {}) {
  reduce<Algo, buffer_element_t<R>, Op>(comm, detail::as_span(buf), root, op);
}

/// reduce_async on contiguous ranges (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, input_buffer S, class Op = ops::sum>
  requires same_elements<S, R> && reduction_op_on<Op, R>
request reduce_async(communicator& comm, const S& send, R&& recv, int root, Op op = {}) {
  return reduce_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_const_span(send), detail::as_span(recv), root,
                                                     op);
}

/// In-place reduce_async on a contiguous range (see output_buffer and allreduce_async).
template <class Algo = algo::automatic, output_buffer R, class Op = ops::sum>
  requires reduction_op_on<Op, R>
request reduce_async(communicator& comm, R&& buf, int root, Op op = {}) {
  return reduce_async<Algo, buffer_element_t<R>, Op>(comm, detail::as_span(buf), root, op);
}

/// Refused (deleted): reduce_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request reduce_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
