/// @file bench/collx_perf_backend.hpp
/// collx-perf's backend for the shared harness (perf_common.hpp): one call of each collective through
/// collx, barrier, and the reductions of timings and error counts. The sweep is instantiated once
/// per element type in its own translation unit (CMake generates collx_perf_<type>.cpp), so that the
/// build runs in parallel.
#pragma once

#include <collx/collx.hpp>
#include <collx/transport/shm.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "collx_perf_types.hpp"
#include "perf_common.hpp"

namespace collx_perf_backend {

namespace cp = collx_perf;

inline collx::collective to_collx(cp::coll c) {
  switch (c) {
    case cp::coll::allreduce: return collx::collective::allreduce;
    case cp::coll::reduce_scatter: return collx::collective::reduce_scatter;
    case cp::coll::all_gather: return collx::collective::all_gather;
    case cp::coll::broadcast: return collx::collective::broadcast;
    case cp::coll::reduce: return collx::collective::reduce;
    case cp::coll::all_to_all: return collx::collective::all_to_all;
    case cp::coll::sendrecv: return collx::collective::send_recv;
  }
  return collx::collective::allreduce;
}

// Every call goes through algo::automatic: the algorithm is the communicator's choice, which --algo
// fixes through communicator_options::algorithm_overrides (what COLLX_ALGO=ring does). Inside the
// library an explicit tag and a forced choice run the same code (detail::run_collective resolves
// either to one concrete algorithm), and one instantiation per (type, op) instead of four keeps
// collx-perf's build time (CI builds it twice) in check.
using Algo = collx::algo::automatic;

// One call of a reducing collective with element type T and op Op.
template <class T, class Op>
void call_reducing(collx::communicator& comm, const cp::call_args<T>& a) {
  const cp::call_counts& k = a.k;
  switch (a.c) {
    case cp::coll::allreduce:
      collx::allreduce<Algo, T, Op>(comm, std::span<const T>(a.send, k.send_count), std::span<T>(a.recv, k.recv_count));
      break;
    case cp::coll::reduce_scatter:
      collx::reduce_scatter<Algo, T, Op>(comm, std::span<const T>(a.send, k.send_count),
                                         std::span<T>(a.recv, k.recv_count));
      break;
    case cp::coll::reduce:
      collx::reduce<Algo, T, Op>(comm, std::span<const T>(a.send, k.send_count), std::span<T>(a.recv, k.recv_count),
                                 a.root);
      break;
    default:
      throw std::logic_error("not a reducing collective");
  }
}

// One call of a collective that moves data without an op.
template <class T>
void call_moving(collx::communicator& comm, const cp::call_args<T>& a) {
  const cp::call_counts& k = a.k;
  switch (a.c) {
    case cp::coll::all_gather:
      collx::all_gather<Algo, T>(comm, std::span<const T>(a.send, k.send_count), std::span<T>(a.recv, k.recv_count));
      break;
    case cp::coll::broadcast:
      collx::broadcast<Algo, T>(comm, std::span<const T>(a.send, k.send_count), std::span<T>(a.recv, k.recv_count),
                                a.root);
      break;
    case cp::coll::all_to_all:
      collx::all_to_all<Algo, T>(comm, std::span<const T>(a.send, k.send_count), std::span<T>(a.recv, k.recv_count));
      break;
    default:
      throw std::logic_error("not a data-movement collective");
  }
}

// Point-to-point exchange around a ring: rank r sends to r+1 and receives from r-1, both in flight
// at once (collx::send_recv, as the MPI peer's MPI_Sendrecv).
template <class T>
void call_sendrecv(collx::communicator& comm, const cp::call_args<T>& a) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  collx::send_recv(comm, std::span<const T>(a.send, a.k.send_count), next, std::span<T>(a.recv, a.k.recv_count), prev);
}

// -n calls, blocking or started back to back on the communicator's progress thread (-z 0).
template <class T, class F>
void run_calls(collx::communicator& comm, const cp::call_args<T>& a, int calls, bool blocking, F f) {
  if (blocking) {
    for (int i = 0; i < calls; ++i) f(comm, a);
    return;
  }
  std::vector<collx::request> reqs;
  reqs.reserve(static_cast<std::size_t>(calls));
  for (int i = 0; i < calls; ++i) reqs.push_back(comm.submit_async([&comm, a, f] { f(comm, a); }));
  for (auto& q : reqs) q.wait();
}

template <class T>
void run_op(collx::communicator& comm, const cp::call_args<T>& a, int calls, bool blocking) {
  if (a.c == cp::coll::sendrecv) return run_calls(comm, a, calls, blocking, call_sendrecv<T>);
  if (!cp::reduces(a.c)) return run_calls(comm, a, calls, blocking, call_moving<T>);
  switch (a.op) {
    case cp::redop::sum: return run_calls(comm, a, calls, blocking, call_reducing<T, collx::ops::sum>);
    case cp::redop::prod: return run_calls(comm, a, calls, blocking, call_reducing<T, collx::ops::prod>);
    case cp::redop::max: return run_calls(comm, a, calls, blocking, call_reducing<T, collx::ops::max>);
    case cp::redop::min: return run_calls(comm, a, calls, blocking, call_reducing<T, collx::ops::min>);
    case cp::redop::avg: return run_calls(comm, a, calls, blocking, call_reducing<T, collx::ops::avg>);
  }
}

struct collx_backend {
  collx::communicator& comm;

  int rank() const { return comm.rank(); }
  int size() const { return comm.size(); }
  void barrier() { collx::barrier(comm); }

  double combine_time(double s, int mode) {
    double v = s;
    switch (mode) {
      case 0: return s;  // rank 0's (only rank 0 reports)
      case 2: collx::allreduce<collx::algo::direct>(comm, std::span<double>(&v, 1), collx::ops::min{}); return v;
      case 3: collx::allreduce<collx::algo::direct>(comm, std::span<double>(&v, 1), collx::ops::max{}); return v;
      default: collx::allreduce<collx::algo::direct>(comm, std::span<double>(&v, 1), collx::ops::avg{}); return v;
    }
  }

  std::uint64_t sum_over_ranks(std::uint64_t x) {
    collx::allreduce<collx::algo::direct>(comm, std::span<std::uint64_t>(&x, 1));
    return x;
  }

  template <class T>
  void run(const cp::call_args<T>& a, int calls, bool blocking) {
    run_op<T>(comm, a, calls, blocking);
  }

  /// -R 1: memory every rank maps (collx::shm_buffer), which peers read in place. Collective.
  template <class T>
  std::shared_ptr<T> registered_buffer(std::size_t count) {
    if (!dynamic_cast<collx::detail::transport_impl::shm_transport*>(&comm.get_transport()))
      throw std::runtime_error("-R 1 needs --transport shm (collx::shm_buffer)");
    auto b = std::make_shared<collx::shm_buffer<T>>(comm, count);
    return std::shared_ptr<T>(b, b->data());  // keeps the shm_buffer alive
  }

  template <class T>
  const T* result_of(const cp::call_args<T>& a) const {
    return a.recv;
  }

  /// The algorithm collx runs for this call: algo::automatic resolved exactly as the library
  /// resolves it (communicator::select with the query detail/dispatch.hpp builds; --algo is an
  /// override inside select).
  std::string algorithm_for(cp::coll c, const cp::call_counts& k, std::size_t type_size) const {
    if (c == cp::coll::sendrecv) return "p2p";
    collx::selection_query q;
    q.coll = to_collx(c);
    q.world_size = comm.size();
    q.bytes = static_cast<std::size_t>(cp::algbw_bytes(c, k.param_count, type_size, comm.size()));
    q.commutative = true;  // every op collx-perf offers is commutative
    if (collx::detail::automatic_goes_hierarchical<collx::ops::sum>(comm, q.coll)) return "hierarchical";
    return std::string(collx::algorithm_name(comm.select(q)));
  }
};

/// The sweep of perf_common.hpp over collx, for element type T.
template <class T>
void sweep_collx(collx_backend& be, const cp::options& o, cp::reporter& rep) {
  cp::sweep<T>(be, o, rep);
}

// Instantiated in collx_perf_<type>.cpp, one per type of COLLX_PERF_TYPES (bench/CMakeLists.txt,
// which writes collx_perf_types.hpp).
#define COLLX_PERF_EXTERN(T) extern template void sweep_collx<T>(collx_backend&, const cp::options&, cp::reporter&);
COLLX_PERF_BUILT_TYPES(COLLX_PERF_EXTERN)
#undef COLLX_PERF_EXTERN

/// Whether collx-perf was built for element type T (COLLX_PERF_TYPES).
template <class T>
constexpr bool built_for() {
  bool yes = false;
#define COLLX_PERF_IS(U) yes = yes || std::is_same_v<T, U>;
  COLLX_PERF_BUILT_TYPES(COLLX_PERF_IS)
#undef COLLX_PERF_IS
  return yes;
}

}  // namespace collx_perf_backend
