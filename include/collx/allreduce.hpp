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
///   (algo/hierarchical.hpp), which algo::automatic also picks when there are several nodes.
/// @param send this rank's vector (count elements; never written unless it is also `recv`)
/// @param recv the result (count elements). In place when recv.data() == send.data() (NCCL's
///   convention); any other overlap is an error.
/// @param op a reduction op (ops::sum by default, or the user's own; see reduction_op)
/// @throws collx::error invalid_argument (sizes differ, partial overlap), mismatch (ranks disagree on
///   count, type, op or algorithm), timeout, aborted.
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

}  // namespace v0
}  // namespace collx
