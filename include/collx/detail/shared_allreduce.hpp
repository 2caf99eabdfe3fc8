/// @file detail/shared_allreduce.hpp
/// All-reduce on buffers every rank maps (collx::shm_buffer): each rank folds its block of the
/// vector straight from every rank's input and writes the result into every rank's output, so each
/// byte is read once and written once per rank (2 S bytes per rank for an S-byte vector). The
/// message-based direct all-reduce reads its peers' inputs in place too, but then copies the
/// reduced blocks out of the peers' outputs again (2.5 S per rank).
///
/// Protocol, on top of the transport's ordinary messages (so signatures, mismatch detection,
/// timeouts and dead peers work as for any call):
///  1. every rank sends every peer where its input and output lie (shared buffer id and offset,
///     or "not shared"); this is also the start barrier: a rank that sent has its input ready and
///     its output free;
///  2. if every rank's input and output are shared (all ranks see the same claims, so all decide
///     alike), rank r folds elements [lo_r, hi_r) over ranks 0..n-1 in rank order (the bits of
///     algo::direct) and stores them into every rank's output; else the caller runs the
///     message-based schedule instead;
///  3. every rank sends every peer an empty message and waits for theirs: no rank returns while
///     a peer still writes into its output.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include <collx/detail/reduction.hpp>
#include <collx/detail/streaming_store.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// Smallest all-reduce (bytes) that takes the shared-buffer path: below it the two extra message
/// rounds cost more than the copy they save.
inline constexpr std::size_t shared_allreduce_min_bytes = 256 * 1024;

/// Uninitialised storage for `n` objects of U (trivially copyable, not necessarily
/// default-constructible), aligned for U.
template <class U>
struct raw_array {
  explicit raw_array(std::size_t n)
      : p(static_cast<U*>(::operator new(std::max<std::size_t>(n, 1) * sizeof(U), std::align_val_t{alignof(U)}))) {}
  ~raw_array() { ::operator delete(p, std::align_val_t{alignof(U)}); }
  raw_array(const raw_array&) = delete;
  raw_array& operator=(const raw_array&) = delete;
  U* p;
};

/// Where one rank's input and output lie (step 1 of the protocol).
struct shared_claim {
  std::uint64_t shared = 0;  ///< 1: both lie in shared buffers
  std::uint64_t in_id = 0, in_offset = 0, out_id = 0, out_offset = 0;
};

/// Elements [lo, hi) of rank r's block: the vector cut into n nearly equal blocks whose bounds are
/// multiples of a 64-byte line where the element size allows (no two ranks write one line).
inline void shared_block(std::size_t count, std::size_t elem_size, int n, int r, std::size_t& lo, std::size_t& hi) {
  const std::size_t unit = elem_size <= 64 && 64 % elem_size == 0 ? 64 / elem_size : 1;
  const std::size_t units = (count + unit - 1) / unit, un = static_cast<std::size_t>(n), ur = static_cast<std::size_t>(r);
  lo = std::min(count, units * ur / un * unit);
  hi = std::min(count, units * (ur + 1) / un * unit);
}

/// Runs the all-reduce of `count` elements on shared buffers if every rank's buffers are shared
/// (returns true), else only exchanges the claims and returns false (then the caller runs the
/// message-based schedule). Every rank must call it for the same call (same sig). `in == out` is
/// in place.
template <class T, class Op>
bool shared_allreduce(transport& tp, const call_signature& sig, const T* in, T* out, std::size_t count, const Op& op) {
  using red = reduction<T, Op>;
  using acc = typename red::acc;
  const int n = tp.size(), me = tp.rank();
  const std::size_t bytes = count * sizeof(T);
  std::vector<shared_claim> claims(static_cast<std::size_t>(n));
  shared_claim& mine = claims[static_cast<std::size_t>(me)];
  std::uint32_t in_id = 0, out_id = 0;
  if (tp.locate_shared(in, bytes, in_id, mine.in_offset) && tp.locate_shared(out, bytes, out_id, mine.out_offset)) {
    mine.shared = 1;
    mine.in_id = in_id;
    mine.out_id = out_id;
  }
  const shared_claim sent = mine;  // a copy: the receives below write into `claims`
  for (int q = 0; q < n; ++q)
    if (q != me) tp.post_send(q, &sent, sizeof sent, sizeof sent, sig);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    std::byte* dst = reinterpret_cast<std::byte*>(&claims[static_cast<std::size_t>(q)]);
    auto copy = [dst](const std::byte* s, std::size_t off, std::size_t len) { std::memcpy(dst + off, s, len); };
    tp.recv(q, sizeof(shared_claim), sizeof(shared_claim), sig, consumer_ref(copy, dst));
  }
  tp.wait_sends();

  // Every rank sees the same claims, so every rank decides the same way.
  std::vector<const T*> ins(static_cast<std::size_t>(n));
  std::vector<T*> outs(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const shared_claim& c = claims[static_cast<std::size_t>(q)];
    if (!c.shared) return false;
    ins[static_cast<std::size_t>(q)] =
        reinterpret_cast<const T*>(tp.shared_address(q, static_cast<std::uint32_t>(c.in_id), c.in_offset, bytes));
    outs[static_cast<std::size_t>(q)] =
        reinterpret_cast<T*>(tp.shared_address(q, static_cast<std::uint32_t>(c.out_id), c.out_offset, bytes));
    if (!ins[static_cast<std::size_t>(q)] || !outs[static_cast<std::size_t>(q)]) return false;
  }

  std::size_t lo = 0, hi = 0;
  shared_block(count, sizeof(T), n, me, lo, hi);
  // Fold a piece that stays in L1/L2, then store it to every output. In place, each rank reads
  // and writes only its own block, so reading all of a piece before writing it is enough.
  constexpr std::size_t piece = std::max<std::size_t>(1, 8192 / sizeof(acc));
  const raw_array<acc> a_store(piece);  // raw: element types need not be default-constructible
  const raw_array<T> result_store(piece);
  acc* const a = a_store.p;
  T* const result = result_store.p;
  // Stream the results past the cache only when the buffers of all ranks together exceed it:
  // otherwise the next reader (a peer, or this rank's next call in place) finds them there.
  const std::size_t footprint = static_cast<std::size_t>(n) * bytes * (in == out ? 1 : 2);
  const bool stream = footprint > last_level_cache_bytes();
  for (std::size_t base = lo; base < hi; base += piece) {
    const std::size_t len = std::min(piece, hi - base);
    if (n == 2) {  // one pass (the common case of two ranks per node)
      const T* s0 = ins[0] + base;
      const T* s1 = ins[1] + base;
      for (std::size_t i = 0; i < len; ++i) result[i] = red::finalize(red::combine(op, red::widen(s0[i]), red::widen(s1[i])), n);
    } else {
      const T* s0 = ins[0] + base;
      for (std::size_t i = 0; i < len; ++i) a[i] = red::widen(s0[i]);
      for (int q = 1; q < n; ++q) {
        const T* sq = ins[static_cast<std::size_t>(q)] + base;
        for (std::size_t i = 0; i < len; ++i) a[i] = red::combine(op, a[i], red::widen(sq[i]));
      }
      for (std::size_t i = 0; i < len; ++i) result[i] = red::finalize(a[i], n);
    }
    for (int q = 0; q < n; ++q) {
      T* d = outs[static_cast<std::size_t>(q)] + base;
      if (stream) store_streaming(d, len, [&](std::size_t i) { return result[i]; });
      else std::memcpy(static_cast<void*>(d), result, len * sizeof(T));
    }
  }

  // End barrier: every peer has finished writing into this rank's output.
  for (int q = 0; q < n; ++q)
    if (q != me) tp.post_send(q, nullptr, 0, 1, sig);
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    auto none = [](const std::byte*, std::size_t, std::size_t) {};
    tp.recv(q, 0, 1, sig, consumer_ref(none));
  }
  tp.wait_sends();
  return true;
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
