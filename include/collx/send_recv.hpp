/// @file send_recv.hpp
/// Point-to-point send and recv between two ranks (pipeline-parallel stages), and send_recv, both
/// at once (ring shifts, halo exchanges).
#pragma once

#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <type_traits>

#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/dispatch.hpp>
#include <collx/detail/type_name.hpp>

namespace collx {
inline namespace v0 {

/// A peer rank that means "nobody", as MPI_PROC_NULL: a send to it or a recv from it moves nothing
/// (recv leaves its data untouched, and neither looks at the data) once the communicator's earlier
/// async calls have finished (a failed communicator still throws); send_recv skips that side. For
/// the edges of a halo exchange that does not wrap around. Far from any rank arithmetic (rank - 1
/// at rank 0 stays an error). Named "no_peer" in error messages.
inline constexpr int no_peer = std::numeric_limits<int>::min();

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
/// A peer as error messages name it: its rank, or "no_peer".
inline std::string peer_text(int peer) { return peer == no_peer ? std::string("no_peer") : std::to_string(peer); }
/// "rank R/N send<T>" or "... recv<T>": the call as the user wrote it.
template <class T>
std::string p2p_name(const communicator& comm, const char* call) {
  return "rank " + std::to_string(comm.rank()) + "/" + std::to_string(comm.size()) + " " + call + "<" +
         std::string(type_name<T>()) + ">";
}
/// What is wrong with `peer` as the `role` ("destination" or "source") of a point-to-point call:
/// empty when it is another rank of the communicator, no_peer, or (`self_allowed`) this rank.
inline std::string p2p_peer_problem(const communicator& comm, const char* role, int peer, bool self_allowed) {
  if (peer == no_peer || (peer >= 0 && peer < comm.size() && (self_allowed || peer != comm.rank()))) return {};
  return std::string(role) + " rank " + std::to_string(peer) + " is not " + (self_allowed ? "a" : "another") +
         " rank of this communicator (world size " + std::to_string(comm.size()) + ")";
}
/// The arguments of a send or recv (`call`) to or from `peer` (`role`: "destination" or
/// "source"): another rank of the communicator or no_peer, and `data` not null with elements
/// (unless the peer is no_peer, as MPI ignores MPI_PROC_NULL's buffer). Else reject_call:
/// errc::invalid_argument, and the communicator failed for every rank.
template <class T>
void check_p2p_arguments(communicator& comm, const char* call, const char* role, int peer, const void* data,
                         std::size_t count) {
  std::string what = p2p_peer_problem(comm, role, peer, false);
  if (what.empty() && peer != no_peer && data == nullptr && count != 0)
    what = "data is a null pointer with " + std::to_string(count) + " elements";
  if (!what.empty()) reject_call(comm, p2p_name<T>(comm, call) + ": " + what);
}
/// A point-to-point call (`call`: its name) cut short by `e`: fails the communicator for every rank
/// with "call: why", so the peers learn why now (kept only if first, as for a collective cut
/// short), and throws it with `hint` appended (this rank's reader only).
[[noreturn]] inline void p2p_failed(communicator& comm, const std::string& call, const error& e,
                                    const std::string& hint = {}) {
  const std::string what = call + ": " + e.what();
  comm.fail(e.code(), what);
  COLLX_THROW(e.code(), what + hint);
}
}  // namespace detail

/// Sends `data` (a span of T or const T) to rank `dest` (or to no_peer: moves nothing) and
/// returns once `data` may be reused:
///  - threads: once dest has received it (synchronous, like MPI_Ssend);
///  - shared memory: once all of it is copied into the pair's staging ring (eager, like MPI_Send:
///    dest may not have called recv yet). The ring holds 8 messages or COLLX_SHM_BYTES_PER_PEER
///    bytes, so a send waits for dest when the ring is full (a larger message, or many unreceived
///    ones). Messages that dest reads in place wait for dest instead: data in a collx::shm_buffer,
///    and, where single copy is on (COLLX_CMA), messages of 64 KiB and more;
///  - MPI: once MPI has the data (like MPI_Send).
/// Code must not rely on a send returning early: a ring shift in which every rank sends first can
/// deadlock: use send_recv, or order the calls (even ranks send first, odd ranks receive first).
/// Between threads and over shared memory a deadlock (a cycle of ranks of this communicator each
/// waiting for the next) fails every rank of it at once with errc::mismatch; MPI, and cycles
/// through two communicators, wait until the timeout.
/// send_async does not help there: async calls run one at a time in call order (see send_async).
/// Messages between two ranks arrive in the order sent. The receiver must call recv with the same
/// count and type (checked: recv throws errc::mismatch; a sender that already returned gets the
/// failure from its next call on the communicator).
/// @throws collx::error invalid_argument (dest not another rank of the communicator or no_peer,
///   or a null pointer with elements), mismatch, timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <class U>
  requires element<std::remove_const_t<U>>
void send(communicator& comm, std::span<U> data, int dest) {
  using T = std::remove_const_t<U>;
  detail::check_p2p_arguments<T>(comm, "send", "destination", dest, data.data(), data.size());
  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  transport& t = comm.get_transport();
  const call_signature sig = detail::p2p_signature<T>(data.size());
  auto name = [&] { return detail::p2p_name<T>(comm, "send") + " to " + detail::peer_text(dest); };
  detail::check_not_failed(comm, name);
  // COLLX_DEBUG=trace
  const detail::call_trace trace([&] { return name() + comm.log_where(); }, data.size(), data.size_bytes());
  if (dest == no_peer) return;
  try {
    t.post_send(dest, data.data(), data.size_bytes(), sizeof(T), sig);
    t.wait_sends();
  } catch (const error& e) {
    const bool synchronous = e.code() == errc::timeout && t.name() == "threads";
    detail::p2p_failed(comm, name(), e,
                       synchronous ? " (between threads a send returns only once received, and the destination did not "
                                     "receive it in time: it is busy, or waits on another communicator; ranks of this "
                                     "communicator that wait for each other fail at once as a deadlock instead)"
                                   : "");
  } catch (...) {  // not collx's (no memory, say): the peers must not wait for this rank
    detail::fail_for_escaping(comm, name());
    throw;
  }
}

/// Receives data.size() elements from rank `src` into `data` (from no_peer: moves nothing, `data`
/// untouched).
/// @throws collx::error invalid_argument (src not another rank of the communicator or no_peer, or a
///   null pointer with elements), mismatch (count or type differs), timeout, aborted, transport (a peer died or closed its communicator). Every
///   error fails comm for every rank, and a later call on it throws the first failure's code at once
///   (see communicator).
template <element T>
void recv(communicator& comm, std::span<T> data, int src) {
  detail::check_p2p_arguments<T>(comm, "recv", "source", src, data.data(), data.size());
  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  transport& t = comm.get_transport();
  const call_signature sig = detail::p2p_signature<T>(data.size());
  std::byte* d = reinterpret_cast<std::byte*>(data.data());
  auto consume = [&](const std::byte* s, std::size_t off, std::size_t len) { std::memcpy(d + off, s, len); };
  auto name = [&] { return detail::p2p_name<T>(comm, "recv") + " from " + detail::peer_text(src); };
  detail::check_not_failed(comm, name);
  // COLLX_DEBUG=trace
  const detail::call_trace trace([&] { return name() + comm.log_where(); }, data.size(), data.size_bytes());
  if (src == no_peer) return;
  try {
    t.recv(src, data.size_bytes(), sizeof(T), sig, consumer_ref(consume, d));
  } catch (const error& e) {
    detail::p2p_failed(comm, name(), e);
  } catch (...) {
    detail::fail_for_escaping(comm, name());
    throw;
  }
}

/// Sends `send` to rank `dest` and receives `recv.size()` elements from rank `src` in one call, as
/// MPI_Sendrecv: the send is posted before the receive waits and both progress together, so a ring
/// shift or a halo exchange in which every rank calls send_recv cannot deadlock, whatever the
/// message size and transport (send then recv can: see send). Returns once `recv` holds src's
/// message and `send` may be reused.
/// Either side may be no_peer (skipped: the edges of a halo exchange that does not wrap around).
/// `dest` and `src` may both be this rank: `recv` gets a copy of `send` (a ring shift over one
/// rank); one of them alone may not (a rank sends itself no messages).
/// The messages are those of send and recv: the one to dest is received by dest's recv or send_recv
/// with the same count and type, the one from src is sent by src's send or send_recv, and they keep
/// their order with the pair's other messages.
/// @param send what goes to dest (a span of T or const T; any element type, not necessarily recv's)
/// @param recv exactly recv.size() elements of src's message; may not share a byte with `send`
///   (MPI_Sendrecv has no in-place form either).
/// @throws collx::error invalid_argument (dest or src not a rank of the communicator or no_peer,
///   only one of them this rank, a null pointer with elements, overlapping buffers, and, both being
///   this rank, types or counts that differ; the communicator is failed for every rank), mismatch
///   (src's message differs in count or type), timeout, aborted, transport.
template <class U, element T>
  requires element<std::remove_const_t<U>>
void send_recv(communicator& comm, std::span<U> send, int dest, std::span<T> recv, int src) {
  using S = std::remove_const_t<U>;
  const int me = comm.rank();
  auto name = [&] {
    return "rank " + std::to_string(me) + "/" + std::to_string(comm.size()) + " send_recv<" +
           std::string(detail::type_name<S>()) + ", " + std::string(detail::type_name<T>()) + "> to " +
           detail::peer_text(dest) + " from " + detail::peer_text(src);
  };
  const bool sends = dest != no_peer, receives = src != no_peer;
  std::string what = detail::p2p_peer_problem(comm, "destination", dest, true);
  if (what.empty()) what = detail::p2p_peer_problem(comm, "source", src, true);
  if (what.empty() && (dest == me) != (src == me))
    what = "only one of destination and source is this rank (a rank sends itself no messages; both: a copy)";
  if (what.empty() && sends && send.data() == nullptr && !send.empty())
    what = "send is a null pointer with " + std::to_string(send.size()) + " elements";
  if (what.empty() && receives && recv.data() == nullptr && !recv.empty())
    what = "recv is a null pointer with " + std::to_string(recv.size()) + " elements";
  if (what.empty() && sends && receives && detail::overlap(send.data(), send.size_bytes(), recv.data(), recv.size_bytes()))
    what = "send and recv overlap (send_recv has no in-place form)";
  if (what.empty() && dest == me && (!std::is_same_v<S, T> || send.size() != recv.size()))
    what = "a copy to this rank needs send and recv of one type and count (send " + std::to_string(send.size()) + " " +
           std::string(detail::type_name<S>()) + " elements, recv " + std::to_string(recv.size()) + " " +
           std::string(detail::type_name<T>()) + " elements)";  // the types too: the counts may well agree
  if (!what.empty()) detail::reject_call(comm, name() + ": " + what);

  comm.drain_async();
  const communicator::call_scope one_thread(comm);
  transport& t = comm.get_transport();
  detail::check_not_failed(comm, name);
  // COLLX_DEBUG=trace: the elements received (and the bytes both ways)
  const std::size_t moved = (sends ? send.size_bytes() : 0) + (receives ? recv.size_bytes() : 0);
  const detail::call_trace trace([&] { return name() + comm.log_where(); }, recv.size(), moved);
  if (dest == me) {
    if (!recv.empty()) std::memcpy(static_cast<void*>(recv.data()), send.data(), recv.size_bytes());
    return;
  }
  std::byte* d = reinterpret_cast<std::byte*>(recv.data());
  auto consume = [&](const std::byte* s, std::size_t off, std::size_t len) { std::memcpy(d + off, s, len); };
  try {
    if (sends) t.post_send(dest, send.data(), send.size_bytes(), sizeof(S), detail::p2p_signature<S>(send.size()));
    if (receives) t.recv(src, recv.size_bytes(), sizeof(T), detail::p2p_signature<T>(recv.size()), consumer_ref(consume, d));
    if (sends) t.wait_sends();
  } catch (const error& e) {
    detail::p2p_failed(comm, name(), e);
  } catch (...) {
    detail::fail_for_escaping(comm, name());
    throw;
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

/// Starts send_recv on the progress thread (after the communicator's earlier async calls, as
/// send_async); recv is valid and send reusable once the request completed.
template <class U, element T>
  requires element<std::remove_const_t<U>>
request send_recv_async(communicator& comm, std::span<U> send, int dest, std::span<T> recv, int src) {
  return detail::start_async(comm, [=](communicator& c) { send_recv(c, send, dest, recv, src); });
}

/// send from a contiguous range (std::vector, std::array, C arrays; see contiguous_buffer).
template <input_buffer S>
  requires(!detail::is_dynamic_span<S>)
void send(communicator& comm, const S& data, int dest) {
  send(comm, detail::as_const_span(data), dest);
}

/// recv into a contiguous range (std::vector, ...; see output_buffer): exactly its size() elements.
template <output_buffer R>
void recv(communicator& comm, R&& data, int src) {
  recv(comm, detail::as_span(data), src);
}

/// send_recv on contiguous ranges (see contiguous_buffer and output_buffer); send's element type
/// may differ from recv's, as in the span form.
template <output_buffer R, input_buffer S>
void send_recv(communicator& comm, const S& send, int dest, R&& recv, int src) {
  send_recv(comm, detail::as_const_span(send), dest, detail::as_span(recv), src);
}

/// send_recv from a contiguous range into a span (the other mix of the two forms).
template <input_buffer S, element T>
  requires(!detail::is_dynamic_span<S>)
void send_recv(communicator& comm, const S& send, int dest, std::span<T> recv, int src) {
  send_recv(comm, detail::as_const_span(send), dest, recv, src);
}

/// send_async from a contiguous range (see contiguous_buffer); it must stay alive until the request
/// completed.
template <input_buffer S>
  requires(!detail::is_dynamic_span<S>)
request send_async(communicator& comm, const S& data, int dest) {
  return send_async(comm, detail::as_const_span(data), dest);
}

/// recv_async into a contiguous range (see output_buffer and send_async).
template <output_buffer R>
request recv_async(communicator& comm, R&& data, int src) {
  return recv_async(comm, detail::as_span(data), src);
}

/// send_recv_async on contiguous ranges (see send_recv and send_async).
template <output_buffer R, input_buffer S>
request send_recv_async(communicator& comm, const S& send, int dest, R&& recv, int src) {
  return send_recv_async(comm, detail::as_const_span(send), dest, detail::as_span(recv), src);
}

/// send_recv_async from a contiguous range into a span (see send_recv_async).
template <input_buffer S, element T>
  requires(!detail::is_dynamic_span<S>)
request send_recv_async(communicator& comm, const S& send, int dest, std::span<T> recv, int src) {
  return send_recv_async(comm, detail::as_const_span(send), dest, recv, src);
}

/// Refused (deleted): send_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request send_async(communicator& comm, S&& send, Rest&&... rest) = delete;

/// Refused (deleted): send_recv_async with a temporary container as its first buffer, which the call
/// reads after it returns, when the temporary is gone. Pass an lvalue, or a view. Named: whatever
/// template arguments the call names (algorithm, element type, op), so that naming the element type
/// cannot bind the temporary to the std::span form instead.
template <class... Named, temporary_buffer S, class... Rest>
request send_recv_async(communicator& comm, S&& send, Rest&&... rest) = delete;

}  // namespace v0
}  // namespace collx
