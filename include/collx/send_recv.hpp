/// @file send_recv.hpp
/// Point-to-point send and recv between two ranks (pipeline-parallel stages).
#pragma once

#include <cstring>
#include <span>
#include <string>

#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/dispatch.hpp>
#include <collx/detail/type_name.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
template <class T>
call_signature p2p_signature(std::size_t count) {
  call_signature sig;  // seq stays 0: point-to-point messages are ordered per pair, not per call
  sig.coll = collective::send_recv;
  sig.count = count;
  sig.type_size = sizeof(T);
  sig.type_hash = type_signature_hash<T>;
  (void)names_recorded<T, no_op>;
  return sig;
}
/// "rank R/N send<T>" or "... recv<T>": the call as the user wrote it.
template <class T>
std::string p2p_name(const communicator& comm, const char* call) {
  return "rank " + std::to_string(comm.rank()) + "/" + std::to_string(comm.size()) + " " + call + "<" +
         std::string(type_name<T>()) + ">";
}
/// The arguments of a send or recv (`call`) to or from `peer` (`role`: "destination" or
/// "source"): another rank of the communicator, and `data` not null with elements. Else
/// reject_call: errc::invalid_argument, and the communicator failed for every rank.
template <class T>
void check_p2p_arguments(communicator& comm, const char* call, const char* role, int peer, const void* data,
                         std::size_t count) {
  std::string what;
  if (peer < 0 || peer >= comm.size() || peer == comm.rank())
    what = std::string(role) + " rank " + std::to_string(peer) + " is not another rank of this communicator (world size " +
           std::to_string(comm.size()) + ")";
  else if (data == nullptr && count != 0)
    what = "data is a null pointer with " + std::to_string(count) + " elements";
  if (!what.empty()) reject_call(comm, p2p_name<T>(comm, call) + ": " + what);
}
}  // namespace detail

/// Sends `data` (a span of T or const T) to rank `dest` and returns once `data` may be reused:
///  - threads: once dest has received it (synchronous, like MPI_Ssend);
///  - shared memory: once all of it is copied into the pair's staging ring (eager, like MPI_Send:
///    dest may not have called recv yet). The ring holds 8 messages or COLLX_SHM_BYTES_PER_PEER
///    bytes, so a send waits for dest when the ring is full (a larger message, or many unreceived
///    ones). Messages that dest reads in place wait for dest instead: data in a collx::shm_buffer,
///    and, where single copy is on (COLLX_CMA), messages of 64 KiB and more;
///  - MPI: once MPI has the data (like MPI_Send).
/// Code must not rely on a send returning early: a ring shift in which every rank sends first can
/// deadlock: order the calls (even ranks send first, odd ranks receive first). send_async does not
/// help there: async calls run one at a time in call order (see send_async).
/// Messages between two ranks arrive in the order sent. The receiver must call recv with the same
/// count and type (checked: recv throws errc::mismatch; a sender that already returned gets the
/// failure from its next call on the communicator).
/// @throws collx::error invalid_argument (bad dest), mismatch, timeout, aborted.
template <class U>
  requires element<std::remove_const_t<U>>
void send(communicator& comm, std::span<U> data, int dest) {
  using T = std::remove_const_t<U>;
  detail::check_p2p_arguments<T>(comm, "send", "destination", dest, data.data(), data.size());
  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  transport& t = comm.get_transport();
  const call_signature sig = detail::p2p_signature<T>(data.size());
  auto name = [&] { return detail::p2p_name<T>(comm, "send") + " to " + std::to_string(dest); };
  detail::check_not_failed(comm, name);
  try {
    t.post_send(dest, data.data(), data.size_bytes(), sizeof(T), sig);
    t.wait_sends();
  } catch (const error& e) {
    const bool synchronous = e.code() == errc::timeout && t.name() == "threads";
    const std::string what = name() + ": " + e.what();
    comm.fail(e.code(), what);  // the receiver learns why now (as a collective cut short; kept only if first)
    COLLX_THROW(e.code(), what +
                              (synchronous ? " (between threads a send returns only once received: two ranks that both send "
                                             "first wait for each other; order the calls: even ranks send first, odd ranks receive first)"
                                           : ""));
  }
}

/// Receives data.size() elements from rank `src` into `data`.
/// @throws collx::error invalid_argument (bad src), mismatch (count or type differs), timeout, aborted.
template <element T>
void recv(communicator& comm, std::span<T> data, int src) {
  detail::check_p2p_arguments<T>(comm, "recv", "source", src, data.data(), data.size());
  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  transport& t = comm.get_transport();
  const call_signature sig = detail::p2p_signature<T>(data.size());
  std::byte* d = reinterpret_cast<std::byte*>(data.data());
  auto consume = [&](const std::byte* s, std::size_t off, std::size_t len) { std::memcpy(d + off, s, len); };
  auto name = [&] { return detail::p2p_name<T>(comm, "recv") + " from " + std::to_string(src); };
  detail::check_not_failed(comm, name);
  try {
    t.recv(src, data.size_bytes(), sizeof(T), sig, consumer_ref(consume, d));
  } catch (const error& e) {
    const std::string what = name() + ": " + e.what();
    comm.fail(e.code(), what);  // as send
    COLLX_THROW(e.code(), what);
  }
}

/// Starts send on the progress thread; see allreduce_async. Unlike MPI_Isend it is not posted
/// apart from the communicator's other calls: async calls run one at a time in call order, so a
/// send_async that waits for its receiver (as every send between threads does) holds back the
/// recv_async after it, and a ring shift of send_async then recv_async waits as the blocking one does.
template <class U>
  requires element<std::remove_const_t<U>>
request send_async(communicator& comm, std::span<U> data, int dest) {
  return detail::start_async(comm, [=](communicator& c) { send(c, data, dest); });
}

/// Starts recv on the progress thread (after the communicator's earlier async calls, as send_async);
/// data is valid once the request completed.
template <element T>
request recv_async(communicator& comm, std::span<T> data, int src) {
  return detail::start_async(comm, [=](communicator& c) { recv<T>(c, data, src); });
}

}  // namespace v0
}  // namespace collx
