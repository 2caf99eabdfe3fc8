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
/// Failures: a rank whose call fails (a timeout, a dead peer, abort) may return while its peers
/// still fold, and its caller may then rewrite its input and output. So a folding rank polls the
/// job's failure between pieces and stops (transport::failed_now); every rank checks for a failure
/// after its fold, before it trusts what it read (a result folded from a rewritten input would
/// otherwise be returned as a success); and a rank whose call fails waits until no peer is still
/// folding before it returns (transport::wait_shared_writers), so no peer writes into its output
/// after its call returned.
#pragma once

#include <algorithm>
#include <atomic>
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

/// out[j] = ins[0][at + j] op ins[1][at + j] op ... in rank order, j < k, into raw storage `out`;
/// `a` is raw storage for k accumulators (used for more than 2 ranks).
template <class T, class Op>
void fold_span(const std::vector<const std::byte*>& ins, std::size_t at, std::size_t k, T* out,
               typename reduction<T, Op>::acc* a, const Op& op) {
  using red = reduction<T, Op>;
  using acc = typename red::acc;
  const int n = static_cast<int>(ins.size());
  const T* s0 = reinterpret_cast<const T*>(ins[0]) + at;
  if (n == 2) {  // one pass (the common case of two ranks per node): 2x faster in cache than three
    const T* s1 = reinterpret_cast<const T*>(ins[1]) + at;
    for (std::size_t j = 0; j < k; ++j) new (out + j) T(red::finalize(red::combine(op, red::widen(s0[j]), red::widen(s1[j])), 2));
    return;
  }
  for (std::size_t j = 0; j < k; ++j) new (a + j) acc(red::widen(s0[j]));
  for (int q = 1; q < n; ++q) {
    const T* sq = reinterpret_cast<const T*>(ins[static_cast<std::size_t>(q)]) + at;
    for (std::size_t j = 0; j < k; ++j) a[j] = red::combine(op, a[j], red::widen(sq[j]));
  }
  for (std::size_t j = 0; j < k; ++j) new (out + j) T(red::finalize(a[j], n));
}

/// Lines folded together before they are stored: a batch of 8 lines (512 bytes) is folded into a
/// stack buffer, then streamed into each output in turn. One line at a time (stored into every
/// output before the next is folded) reached 6.3-6.9 GB/s busbw on a 64-128 MiB float all-reduce
/// out of place (2 processes on the 2-core VM of bench/results); batches of 4-16 lines 8-11 GB/s,
/// 8 lines 8.2-10.1 over 4 interleaved rounds: a run of lines into one output at a time keeps the
/// write-combining buffers filling one stream instead of alternating between the outputs.
inline constexpr std::size_t shared_fold_batch_bytes = 512;

/// Folds elements [lo, hi) over the ranks' inputs in rank order (algo::direct's bits) and stores
/// the results into every output a batch of lines (shared_fold_batch_bytes) at a time, streamed
/// where stream[q] says so (floating-point sums only: see shared_fold). Reading and writing
/// at once keeps loads and stores in flight together: with streamed outputs, 1.3x faster than
/// folding an 8 KiB piece and then streaming it out in a two-thread microbenchmark. Returns
/// false, doing nothing, where lines do not fit: an element size that does not divide 64 bytes,
/// or streamed outputs that are not equally misaligned.
template <class T, class Op>
bool fold_block_by_lines(const std::vector<const std::byte*>& ins, const std::vector<std::byte*>& outs,
                         const std::vector<unsigned char>& stream, std::size_t lo, std::size_t hi, const Op& op,
                         const transport& tp) {
  if constexpr (sizeof(T) > 64 || 64 % sizeof(T) != 0) {
    return false;
  } else {
    using acc = typename reduction<T, Op>::acc;
    constexpr std::size_t per_line = 64 / sizeof(T), per_batch = shared_fold_batch_bytes / sizeof(T);
    const int n = static_cast<int>(ins.size());
    // Elements before the first line boundary of the streamed outputs (all must agree).
    std::size_t head = 0;
    bool first = true, any_stream = false;
    for (int q = 0; q < n; ++q) {
      if (!stream[static_cast<std::size_t>(q)]) continue;
      const auto addr = reinterpret_cast<std::uintptr_t>(outs[static_cast<std::size_t>(q)] + lo * sizeof(T));
      if (addr % sizeof(T) != 0) return false;
      const std::size_t h = (64 - addr % 64) % 64 / sizeof(T);
      if (!first && h != head) return false;
      head = h, first = false, any_stream = true;
    }
    head = std::min(head, hi - lo);

    alignas(64) unsigned char batch_bytes[shared_fold_batch_bytes];
    T* const batch = reinterpret_cast<T*>(batch_bytes);
    alignas(acc) unsigned char acc_bytes[per_batch * sizeof(acc)];
    acc* const a = reinterpret_cast<acc*>(acc_bytes);
    // Stores `batch` into every output at [at, at + k): whole lines streamed where asked (`at` is
    // then on a line boundary of the streamed outputs), the rest plain.
    const auto store = [&](std::size_t at, std::size_t k, bool whole_lines) {
      for (int q = 0; q < n; ++q) {
        std::byte* d = outs[static_cast<std::size_t>(q)] + at * sizeof(T);
        if (whole_lines && stream[static_cast<std::size_t>(q)])
          for (std::size_t l = 0; l < k / per_line; ++l) stream_line(d + 64 * l, batch_bytes + 64 * l);
        else
          std::memcpy(d, batch_bytes, k * sizeof(T));
      }
    };
    std::size_t at = lo;
    if (tp.failed_now()) return true;  // nothing written: the caller raises the failure
    if (head) {  // head < per_line
      fold_span(ins, at, head, batch, a, op);
      store(at, head, false);
      at += head;
    }
    bool stopped = false;
    for (unsigned b = 1; hi - at >= per_line; ++b) {  // whole lines, a batch at a time
      const std::size_t k = std::min(per_batch, (hi - at) / per_line * per_line);
      fold_span(ins, at, k, batch, a, op);
      store(at, k, true);
      at += k;
      if (b % 16 == 0 && tp.failed_now()) {  // every 8 KiB
        stopped = true;
        break;
      }
    }
    if (at < hi && !stopped) {
      fold_span(ins, at, hi - at, batch, a, op);
      store(at, hi - at, false);
    }
    if (any_stream) stream_fence();  // before the peers are told this rank stopped writing
    return true;
  }
}

/// fold_block_by_lines for any element type: folds a piece that stays in L1/L2, then stores it to
/// every output. In place, each rank reads and writes only its own block, so reading all of a
/// piece before writing it is enough.
template <class T, class Op>
void fold_block_by_pieces(const std::vector<const std::byte*>& ins, const std::vector<std::byte*>& outs,
                          const std::vector<unsigned char>& stream, std::size_t lo, std::size_t hi, const Op& op,
                          const transport& tp) {
  using acc = typename reduction<T, Op>::acc;
  const int n = static_cast<int>(ins.size());
  constexpr std::size_t piece = std::max<std::size_t>(1, 8192 / sizeof(acc));
  const raw_array<acc> a_store(piece);  // raw: element types need not be default-constructible
  const raw_array<T> result_store(piece);
  acc* const a = a_store.p;
  T* const result = result_store.p;
  for (std::size_t base = lo; base < hi && !tp.failed_now(); base += piece) {
    const std::size_t len = std::min(piece, hi - base);
    fold_span(ins, base, len, result, a, op);
    for (int q = 0; q < n; ++q) {
      std::byte* d = outs[static_cast<std::size_t>(q)] + base * sizeof(T);
      if (stream[static_cast<std::size_t>(q)])
        store_streaming(reinterpret_cast<T*>(d), len, [&](std::size_t i) { return result[i]; });
      else
        std::memcpy(d, static_cast<const void*>(result), len * sizeof(T));
    }
  }
}

/// All ranks' buffers of an all-reduce on shared buffers (inputs and outputs, bytes) past which
/// its outputs stream: four times communicator_options::streaming_min_bytes, which makes it the
/// last-level cache by default (saturating: a huge threshold means never).
inline std::size_t shared_stream_footprint_bytes(std::size_t streaming_min_bytes) noexcept {
  constexpr std::size_t max = ~std::size_t{0};
  return streaming_min_bytes > max / 4 ? max : 4 * streaming_min_bytes;
}

/// The typed half of shared_allreduce: folds elements [lo, hi) of the ranks' inputs in rank order
/// into every output (shared_fold<T, Op>), stopping early once tp.failed_now().
using shared_fold_fn = void (*)(const void* op, const std::vector<const std::byte*>& ins,
                                const std::vector<std::byte*>& outs, const std::vector<unsigned char>& stream,
                                std::size_t lo, std::size_t hi, const transport& tp);

/// shared_fold_fn for T and Op: by lines where something streams (floating-point sums only), else
/// by pieces.
template <class T, class Op>
void shared_fold(const void* op, const std::vector<const std::byte*>& ins, const std::vector<std::byte*>& outs,
                 const std::vector<unsigned char>& stream, std::size_t lo, std::size_t hi, const transport& tp) {
  const Op& f = *static_cast<const Op*>(op);
  // Lines where something streams; in cache, pieces copied out with memcpy are 1.3-1.45x faster
  // (1 MiB, 2 processes), and past it in place they match lines. And lines only for floating-point
  // sums (gradients: the all-reduce that runs past the cache): every other (type, op) compiles one
  // fold, not two, in every program that instantiates allreduce<T, Op>.
  constexpr bool by_lines = std::is_same_v<Op, ops::sum> && (std::is_floating_point_v<T> || is_narrow_float_v<T>);
  bool folded = false;
  if constexpr (by_lines)
    folded = std::find(stream.begin(), stream.end(), 1) != stream.end() && fold_block_by_lines<T, Op>(ins, outs, stream, lo, hi, f, tp);
  if (!folded) fold_block_by_pieces<T, Op>(ins, outs, stream, lo, hi, f, tp);
}

/// shared_allreduce once this rank has sent its claim (`claims[me]`): receives the peers' claims;
/// if every buffer is shared, folds this rank's block into every output and ends with the end
/// barrier (true), else returns false.
inline bool shared_allreduce_after_claims(transport& tp, const call_signature& sig, const void* in, const void* out,
                                          std::size_t count, std::size_t elem_size, shared_fold_fn fold,
                                          const void* op, std::size_t stream_footprint_bytes,
                                          std::vector<shared_claim>& claims) {
  const int n = tp.size(), me = tp.rank();
  const std::size_t bytes = count * elem_size;
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    std::byte* dst = reinterpret_cast<std::byte*>(&claims[static_cast<std::size_t>(q)]);
    auto copy = [dst](const std::byte* s, std::size_t off, std::size_t len) { std::memcpy(dst + off, s, len); };
    tp.recv(q, sizeof(shared_claim), sizeof(shared_claim), sig, consumer_ref(copy, dst));
  }
  tp.wait_sends();

  // Every rank sees the same claims, so every rank decides the same way.
  std::vector<const std::byte*> ins(static_cast<std::size_t>(n));
  std::vector<std::byte*> outs(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const shared_claim& c = claims[static_cast<std::size_t>(q)];
    if (!c.shared) return false;
    ins[static_cast<std::size_t>(q)] =
        static_cast<const std::byte*>(tp.shared_address(q, static_cast<std::uint32_t>(c.in_id), c.in_offset, bytes));
    outs[static_cast<std::size_t>(q)] =
        static_cast<std::byte*>(tp.shared_address(q, static_cast<std::uint32_t>(c.out_id), c.out_offset, bytes));
    if (!ins[static_cast<std::size_t>(q)] || !outs[static_cast<std::size_t>(q)]) return false;
  }

  std::size_t lo = 0, hi = 0;
  shared_block(count, elem_size, n, me, lo, hi);

  // Stream the results past the cache only into outputs that are not also their rank's input, and
  // only when the buffers of all ranks together exceed the cache (stream_footprint_bytes, by
  // default): otherwise the next reader (a peer, or this rank's next call in place) finds them
  // there. In place, this rank has just read the very lines it writes, so plain stores cost no extra read and beat streaming: a 64-128 MiB
  // float all-reduce in place went from 8.5-9.1 to 12.7-13.4 GB/s busbw with them (2 processes on
  // the 2-core VM of bench/results, 5 interleaved rounds).
  const std::size_t footprint = static_cast<std::size_t>(n) * bytes * (in == out ? 1 : 2);
  const bool big = footprint > stream_footprint_bytes;
  std::vector<unsigned char> stream(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const shared_claim& c = claims[static_cast<std::size_t>(q)];
    stream[static_cast<std::size_t>(q)] = big && !(c.in_id == c.out_id && c.in_offset == c.out_offset);
  }
  {
    struct writing {  // told to the peers until the fold ends, also when the user's op throws
      transport& t;
      explicit writing(transport& x) : t(x) { t.shared_writes(true); }
      ~writing() { t.shared_writes(false); }
    } const guard(tp);
    fold(op, ins, outs, stream, lo, hi, tp);
  }
  // A peer whose call failed while this rank read its input may have rewritten it since (its
  // failure is published before its call returns): what this rank folded cannot be trusted then.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  tp.check();

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

/// Runs the all-reduce of `count` elements of `elem_size` bytes on shared buffers if every rank's
/// buffers are shared (returns true), else only exchanges the claims and returns false (then the
/// caller runs the message-based schedule). Every rank must call it for the same call (same sig).
/// `in == out` is in place. Outputs stream when every rank's buffers together exceed
/// `stream_footprint_bytes` (shared_stream_footprint_bytes). Not a template: only `fold` (shared_fold<T, Op>) knows the types.
inline bool shared_allreduce(transport& tp, const call_signature& sig, const void* in, void* out, std::size_t count,
                             std::size_t elem_size, shared_fold_fn fold, const void* op,
                             std::size_t stream_footprint_bytes) {
  const int n = tp.size(), me = tp.rank();
  const std::size_t bytes = count * elem_size;
  std::vector<shared_claim> claims(static_cast<std::size_t>(n));
  shared_claim& mine = claims[static_cast<std::size_t>(me)];
  std::uint32_t in_id = 0, out_id = 0;
  if (tp.locate_shared(in, bytes, in_id, mine.in_offset) && tp.locate_shared(out, bytes, out_id, mine.out_offset)) {
    mine.shared = 1;
    mine.in_id = in_id;
    mine.out_id = out_id;
  }
  const shared_claim sent = mine;  // a copy: the receives write into `claims`
  for (int q = 0; q < n; ++q)
    if (q != me) tp.post_send(q, &sent, sizeof sent, sizeof sent, sig);
  // From here a peer that has every claim may be folding into this rank's output: a failure
  // returns only once none is.
  try {
    return shared_allreduce_after_claims(tp, sig, in, out, count, elem_size, fold, op, stream_footprint_bytes, claims);
  } catch (...) {
    tp.wait_shared_writers();
    throw;
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
