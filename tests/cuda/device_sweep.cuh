// The reference sweep of collx's device collectives (collx/cuda/device_collectives.cuh), run by one
// rank: test_cuda_device.cu runs ranks as threads of one process, test_cuda_device_procs.cu as
// processes (CUDA IPC). Every rank computes every rank's input (a function of rank, index and
// call), so it can build the expected output itself: a sequential fold in rank order with the host
// path's arithmetic (collx::detail::reduction), compared byte for byte. Outputs start poisoned and
// sit between guard elements that must come back unchanged; offset 1 makes every pointer
// misaligned (the scalar path), offset 0 aligned (16-byte vectors where the counts allow).
// Returns what went wrong, one line each, so callers on other threads can report it.
#pragma once

#include <collx/cuda/device_collectives.cuh>
#include <collx/detail/reduction.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <stdexcept>
#include <vector>

#include "custom_types.cuh"

namespace collx_cuda_test {

inline constexpr std::size_t sweep_guard = 64;          // guard elements on each side of an output
inline constexpr unsigned char sweep_poison = 0xA5;

/// The value rank r contributes at index i of call `call`: distinct per rank, index and call.
template <class T>
T sweep_value(int r, std::size_t i, int call) {
  const std::uint64_t k = (static_cast<std::uint64_t>(r) * 1000003u + i * 7919u + static_cast<std::uint64_t>(call) * 104729u) % 2003u;
  if constexpr (std::is_same_v<T, float>) return static_cast<float>(k) * 0.371f - 300.0f;
  else if constexpr (std::is_same_v<T, double>) return static_cast<double>(k) * 0.3710000001 - 300.0 + r * 1e-9;
  else if constexpr (std::is_same_v<T, collx::half>) return collx::half(static_cast<float>(k % 401) * 0.25f - 50.0f);
  else if constexpr (std::is_same_v<T, affine>) return affine{static_cast<std::uint32_t>(2 * k + 1), static_cast<std::uint32_t>(k * 31 + r)};
  else if constexpr (std::is_same_v<T, triple>) return triple{static_cast<std::int32_t>(k) - 1000, static_cast<std::uint32_t>(k * 2654435761u), static_cast<std::int32_t>(k % 977) - r};
  else static_assert(sizeof(T) == 0, "no sweep_value for this type");
}

/// What a rank's host thread is doing and since when (steady clock, ns): with ranks as threads on
/// one GPU, a thread blocked in a call that waits for the whole device never enqueues the kernel
/// its peers' kernels wait for, and the call times out; the thread tests' watchdog names it.
struct host_phase {
  std::atomic<const char*> what{"starting"};
  std::atomic<std::int64_t> since_ns{0};
};
inline thread_local host_phase* current_phase = nullptr;
inline std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
/// The phase between the marked steps: the rank's own host code, or enqueueing a collective.
inline constexpr const char* host_work = "host work or enqueueing a call";
/// Marks the calling rank's thread as doing `what` (nothing outside the thread tests).
inline void phase(const char* what) {
  if (!current_phase) return;
  current_phase->what.store(what);
  current_phase->since_ns.store(steady_ns());
}

/// A device buffer of `count` elements at `offset` elements past an aligned start, with guards.
/// Everything is ordered on the rank's stream (cudaMallocAsync, async copies, cudaFreeAsync): with
/// several ranks on one GPU, a call that synchronises the device (cudaFree, cudaMemset on the
/// legacy stream) would wait for a peer's kernel that waits for this rank's next call.
template <class T>
struct sweep_buffer {
  std::size_t count, offset;
  cudaStream_t stream;
  unsigned char* base = nullptr;
  sweep_buffer(std::size_t n, std::size_t off, cudaStream_t s) : count(n), offset(off), stream(s) {
    phase("sweep_buffer: cudaMallocAsync");
    if (cudaMallocAsync(reinterpret_cast<void**>(&base), bytes(), stream) != cudaSuccess)
      throw std::runtime_error("cudaMallocAsync failed");
    poison();
  }
  ~sweep_buffer() {
    phase("sweep_buffer: cudaFreeAsync + cudaStreamSynchronize");
    cudaFreeAsync(base, stream);
    cudaStreamSynchronize(stream);
    phase(host_work);
  }
  sweep_buffer(const sweep_buffer&) = delete;
  sweep_buffer& operator=(const sweep_buffer&) = delete;
  std::size_t bytes() const { return (sweep_guard * 2 + offset + count) * sizeof(T); }
  T* data() const { return reinterpret_cast<T*>(base) + sweep_guard + offset; }
  void poison() {
    phase("sweep_buffer: poison (cudaMemsetAsync + cudaStreamSynchronize)");
    cudaMemsetAsync(base, sweep_poison, bytes(), stream);
    cudaStreamSynchronize(stream);
    phase(host_work);
  }
  /// Writes v at element `at` of the buffer.
  void set(const std::vector<T>& v, std::size_t at = 0) {
    phase("sweep_buffer: set (cudaMemcpyAsync to the device + cudaStreamSynchronize)");
    cudaMemcpyAsync(data() + at, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream);
    cudaStreamSynchronize(stream);
    phase(host_work);
  }
  /// "" or what differs: the elements against `want`, the guards and offset against the poison.
  std::string compare(const std::vector<T>& want, const std::string& what) const {
    std::vector<unsigned char> all(bytes());
    phase("sweep_buffer: compare (cudaMemcpyAsync to the host + cudaStreamSynchronize)");
    cudaMemcpyAsync(all.data(), base, bytes(), cudaMemcpyDeviceToHost, stream);
    const bool copied = cudaStreamSynchronize(stream) == cudaSuccess;
    phase(host_work);
    if (!copied) return what + ": copying the result back failed";
    const std::size_t lo = (sweep_guard + offset) * sizeof(T), hi = lo + count * sizeof(T);
    for (std::size_t b = 0; b < all.size(); ++b)
      if ((b < lo || b >= hi) && all[b] != sweep_poison)
        return what + ": byte " + std::to_string(b) + " outside the buffer was written";
    for (std::size_t i = 0; i < want.size(); ++i)
      if (std::memcmp(all.data() + lo + i * sizeof(T), &want[i], sizeof(T)) != 0)
        return what + ": element " + std::to_string(i) + " of " + std::to_string(want.size()) + " differs";
    return "";
  }
};

/// fold over ranks 0..n-1 of in_q[i], as the host path computes it.
template <class T, class Op>
std::vector<T> sweep_fold(int n, std::size_t count, std::size_t first, int call, const Op& op) {
  using red = collx::detail::reduction<T, Op>;
  std::vector<T> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    auto a = red::widen(sweep_value<T>(0, first + i, call));
    for (int q = 1; q < n; ++q) a = red::combine(op, a, red::widen(sweep_value<T>(q, first + i, call)));
    out[i] = red::finalize(a, n);
  }
  return out;
}

template <class T>
std::vector<T> sweep_input(int r, std::size_t count, int call) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = sweep_value<T>(r, i, call);
  return v;
}

/// Checks one CUDA result and the communicator after a call; "" or the problem.
inline std::string sweep_sync(collx::gpu::device_communicator& dc, cudaStream_t s, const std::string& what) {
  phase("sweep_sync: dc.synchronize (waiting for its calls)");
  try {
    dc.synchronize(s);
  } catch (const std::exception& e) {
    phase(host_work);
    return what + ": " + e.what();
  }
  phase(host_work);
  return "";
}

/// all_reduce (out of place, in place), reduce, reduce_scatter on T with Op, count elements per rank
/// (per block for reduce_scatter), offset 0 or 1. Appends problems to `out`.
template <class T, class Op>
void sweep_reductions(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t count, std::size_t offset,
                      int call, const Op& op, std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const std::string tag = std::string(collx::detail::type_name<T>()) + " count " + std::to_string(count) + " offset " +
                          std::to_string(offset) + " rank " + std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  const auto mine = sweep_input<T>(me, count, call);
  const auto want = sweep_fold<T>(n, count, 0, call, op);
  {  // out of place
    sweep_buffer<T> in(count, offset, s), res(count, offset, s);
    in.set(mine);
    gpu::all_reduce(dc, in.data(), res.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "all_reduce"));
    note(res.compare(want, tag + "all_reduce"));
    note(in.compare(mine, tag + "all_reduce input"));
  }
  {  // in place
    sweep_buffer<T> buf(count, offset, s);
    buf.set(mine);
    gpu::all_reduce(dc, buf.data(), buf.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "in-place all_reduce"));
    note(buf.compare(want, tag + "in-place all_reduce"));
  }
  {  // reduce: only the root's output is written
    const int root = static_cast<int>(count % static_cast<std::size_t>(n));
    sweep_buffer<T> in(count, offset, s), res(count, offset, s);
    in.set(mine);
    gpu::reduce(dc, in.data(), res.data(), count, root, op, s);
    note(sweep_sync(dc, s, tag + "reduce"));
    if (me == root) note(res.compare(want, tag + "reduce at the root"));
    else {
      std::vector<T> untouched(count);
      std::memset(static_cast<void*>(untouched.data()), sweep_poison, count * sizeof(T));
      note(res.compare(untouched, tag + "reduce off the root (must stay untouched)"));
    }
  }
  {  // reduce_scatter: rank me gets block me of the fold of n * count elements
    std::vector<T> all(static_cast<std::size_t>(n) * count);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = sweep_value<T>(me, i, call + 1);
    sweep_buffer<T> in(all.size(), offset, s), res(count, offset, s);
    in.set(all);
    gpu::reduce_scatter(dc, in.data(), res.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "reduce_scatter"));
    note(res.compare(sweep_fold<T>(n, count, static_cast<std::size_t>(me) * count, call + 1, op), tag + "reduce_scatter"));
  }
}

/// Point-to-point on T: a ring shift with send_recv (each rank sends to rank + 1 and receives from
/// rank - 1, count elements, buffers at `offset`), then a message from every rank to every other
/// with send and recv in an order that cannot deadlock (the lower rank sends first), then a
/// broadcast and one more message after them (collectives and messages interleave). Input and
/// output checked; outputs start poisoned between guards.
template <class T>
void sweep_send_recv(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t count, std::size_t offset, int call,
                     std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const std::string tag = std::string(collx::detail::type_name<T>()) + " count " + std::to_string(count) + " offset " +
                          std::to_string(offset) + " rank " + std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  {
    const int dst = (me + 1) % n, src = (me + n - 1) % n;
    const auto mine = sweep_input<T>(me, count, call);
    sweep_buffer<T> in(count, offset, s), res(count, offset, s);
    in.set(mine);
    gpu::send_recv(dc, in.data(), count, dst, res.data(), count, src, s);
    note(sweep_sync(dc, s, tag + "send_recv ring"));
    note(res.compare(sweep_input<T>(src, count, call), tag + "send_recv ring from rank " + std::to_string(src)));
    note(in.compare(mine, tag + "send_recv ring input"));
  }
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      if (me != a && me != b) continue;
      const int other = me == a ? b : a;
      const std::size_t len = count + static_cast<std::size_t>(a);  // a different length per pair
      const auto mine = sweep_input<T>(me, len, call + 1 + b);
      sweep_buffer<T> in(len, offset, s), res(len, offset, s);
      in.set(mine);
      if (me == a) {
        gpu::send(dc, in.data(), len, other, s);
        gpu::recv(dc, res.data(), len, other, s);
      } else {
        gpu::recv(dc, res.data(), len, other, s);
        gpu::send(dc, in.data(), len, other, s);
      }
      note(sweep_sync(dc, s, tag + "send/recv with rank " + std::to_string(other)));
      note(res.compare(sweep_input<T>(other, len, call + 1 + b), tag + "recv from rank " + std::to_string(other)));
    }
  {  // a collective after the messages, then one more message: neither sees the other's flags or staging
    const int root = n - 1;
    sweep_buffer<T> in(count, offset, s), res(count, offset, s), msg(count, offset, s);
    in.set(sweep_input<T>(me, count, call + 2 * n));
    gpu::broadcast(dc, in.data(), res.data(), count, root, s);
    if (me == 0) gpu::send(dc, in.data(), count, root, s);
    if (me == root) gpu::recv(dc, msg.data(), count, 0, s);
    note(sweep_sync(dc, s, tag + "broadcast and a message after the messages"));
    note(res.compare(sweep_input<T>(root, count, call + 2 * n), tag + "broadcast after the messages"));
    if (me == root) note(msg.compare(sweep_input<T>(0, count, call + 2 * n), tag + "message after the broadcast"));
  }
}

/// all_gather, broadcast and all_to_all, each out of place and in place, on T.
template <class T>
void sweep_copies(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t count, std::size_t offset, int call,
                  std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const std::size_t un = static_cast<std::size_t>(n);
  const std::string tag = std::string(collx::detail::type_name<T>()) + " count " + std::to_string(count) + " offset " +
                          std::to_string(offset) + " rank " + std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  std::vector<T> gathered;
  for (int q = 0; q < n; ++q) {
    const auto part = sweep_input<T>(q, count, call);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  const auto mine = sweep_input<T>(me, count, call);
  {
    sweep_buffer<T> in(count, offset, s), res(un * count, offset, s);
    in.set(mine);
    gpu::all_gather(dc, in.data(), res.data(), count, s);
    note(sweep_sync(dc, s, tag + "all_gather"));
    note(res.compare(gathered, tag + "all_gather"));
  }
  {
    sweep_buffer<T> buf(un * count, offset, s);
    buf.set(mine, static_cast<std::size_t>(me) * count);
    gpu::all_gather(dc, buf.data() + static_cast<std::size_t>(me) * count, buf.data(), count, s);
    note(sweep_sync(dc, s, tag + "in-place all_gather"));
    note(buf.compare(gathered, tag + "in-place all_gather"));
  }
  const int root = static_cast<int>((count + 1) % un);
  const auto theirs = sweep_input<T>(root, count, call);
  {
    sweep_buffer<T> in(count, offset, s), res(count, offset, s);
    if (me == root) in.set(theirs);
    // Off the root, send may be a literal nullptr (send's type follows recv's).
    if (me == root) gpu::broadcast(dc, in.data(), res.data(), count, root, s);
    else gpu::broadcast(dc, nullptr, res.data(), count, root, s);
    note(sweep_sync(dc, s, tag + "broadcast"));
    note(res.compare(theirs, tag + "broadcast"));
  }
  {
    sweep_buffer<T> buf(count, offset, s);
    if (me == root) buf.set(theirs);
    gpu::broadcast(dc, buf.data(), buf.data(), count, root, s);
    note(sweep_sync(dc, s, tag + "in-place broadcast"));
    note(buf.compare(theirs, tag + "in-place broadcast"));
  }
  // all_to_all: block q of the result is block `me` of rank q's send.
  std::vector<T> sent(un * count), got(un * count);
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = sweep_value<T>(me, i, call + 2);
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < count; ++i)
      got[static_cast<std::size_t>(q) * count + i] = sweep_value<T>(q, static_cast<std::size_t>(me) * count + i, call + 2);
  for (bool in_place : {false, true}) {
    sweep_buffer<T> in(un * count, offset, s), res(un * count, offset, s);
    in.set(sent);
    sweep_buffer<T>& out_buf = in_place ? in : res;
    gpu::all_to_all(dc, in.data(), out_buf.data(), count, s);
    const std::string what = tag + (in_place ? "in-place all_to_all" : "all_to_all");
    note(sweep_sync(dc, s, what));
    note(out_buf.compare(got, what));
  }
}

/// Per-rank counts of a v-form sweep around `base`: `aligned` keeps every block a multiple of 16
/// bytes (16-byte accesses where the pointers allow), else odd lengths and a rank with none.
template <class T>
std::vector<std::size_t> sweep_v_counts(int n, std::size_t base, bool aligned) {
  std::vector<std::size_t> c(static_cast<std::size_t>(n));
  const std::size_t per16 = 16 % sizeof(T) == 0 ? 16 / sizeof(T) : 16;
  for (int q = 0; q < n; ++q) {
    const std::size_t uq = static_cast<std::size_t>(q);
    c[uq] = aligned ? (base / per16 + uq) * per16 : (q == 1 ? 0 : base + 3 * uq + uq % 2);
  }
  return c;
}

/// all_gather_v (out of place and in place) and reduce_scatter_v with Op on T, counts from
/// sweep_v_counts, offset 0 or 1. Appends problems to `out`.
template <class T, class Op>
void sweep_v_forms(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t base, bool aligned, std::size_t offset,
                   int call, const Op& op, std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const auto counts = sweep_v_counts<T>(n, base, aligned);
  std::vector<std::size_t> displs(counts.size());
  std::size_t total = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) displs[q] = total, total += counts[q];
  const std::size_t mine = counts[static_cast<std::size_t>(me)], at = displs[static_cast<std::size_t>(me)];
  const std::string tag = std::string(collx::detail::type_name<T>()) + " v-form base " + std::to_string(base) +
                          (aligned ? " aligned" : " odd") + " offset " + std::to_string(offset) + " rank " +
                          std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  std::vector<T> gathered;
  for (int q = 0; q < n; ++q) {
    const auto part = sweep_input<T>(q, counts[static_cast<std::size_t>(q)], call);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  const auto own = sweep_input<T>(me, mine, call);
  {
    sweep_buffer<T> in(mine, offset, s), res(total, offset, s);
    in.set(own);
    // A rank of count 0 may pass a literal nullptr (unaligned counts: rank 1).
    if (mine == 0) gpu::all_gather_v(dc, nullptr, res.data(), std::span<const std::size_t>(counts), s);
    else gpu::all_gather_v(dc, in.data(), res.data(), std::span<const std::size_t>(counts), s);
    note(sweep_sync(dc, s, tag + "all_gather_v"));
    note(res.compare(gathered, tag + "all_gather_v"));
  }
  {
    sweep_buffer<T> buf(total, offset, s);
    buf.set(own, at);
    const std::vector<int> int_counts(counts.begin(), counts.end());  // as an MPI code keeps them (block_counts copies)
    gpu::all_gather_v(dc, buf.data() + at, buf.data(), int_counts, s);
    note(sweep_sync(dc, s, tag + "in-place all_gather_v"));
    note(buf.compare(gathered, tag + "in-place all_gather_v"));
  }
  {
    const auto all = sweep_input<T>(me, total, call + 1);  // rank me's whole input
    const auto want = sweep_fold<T>(n, mine, at, call + 1, op);  // block me of the fold
    sweep_buffer<T> in(total, offset, s), res(mine, offset, s);
    in.set(all);
    if (mine == 0) gpu::reduce_scatter_v(dc, in.data(), nullptr, std::span<const std::size_t>(counts), op, s);
    else gpu::reduce_scatter_v(dc, in.data(), res.data(), std::span<const std::size_t>(counts), op, s);
    note(sweep_sync(dc, s, tag + "reduce_scatter_v"));
    note(res.compare(want, tag + "reduce_scatter_v"));
    note(in.compare(all, tag + "reduce_scatter_v input"));
  }
}

/// The elements rank q sends rank d in the all_to_all_v sweep: zeros, single elements, and blocks
/// longer than `base` (which the tests set past one staging chunk), different for every pair.
/// `aligned`: multiples of 16 bytes, so every block offset allows 16-byte accesses.
template <class T>
std::size_t sweep_a2a_count(int q, int d, std::size_t base, bool aligned) {
  const std::size_t k = static_cast<std::size_t>((q * 7 + d * 3) % 5);
  const std::size_t c = k == 0 ? 0 : k == 1 ? 1 : base + k * 13 + static_cast<std::size_t>(q + d);
  const std::size_t per16 = 16 % sizeof(T) == 0 ? 16 / sizeof(T) : 16;
  return aligned ? (c + per16 - 1) / per16 * per16 : c;
}

/// all_to_all_v on T with counts from sweep_a2a_count, buffers at `offset`: element i of rank q's
/// block for rank d is sweep_value(q, displacement of that block + i). Appends problems to `out`.
template <class T>
void sweep_all_to_all_v(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t base, bool aligned,
                        std::size_t offset, int call, std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const std::string tag = std::string(collx::detail::type_name<T>()) + " all_to_all_v base " + std::to_string(base) +
                          (aligned ? " aligned" : " odd") + " offset " + std::to_string(offset) + " rank " +
                          std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  std::vector<std::size_t> send_counts, recv_counts;
  for (int d = 0; d < n; ++d) send_counts.push_back(sweep_a2a_count<T>(me, d, base, aligned));
  for (int q = 0; q < n; ++q) recv_counts.push_back(sweep_a2a_count<T>(q, me, base, aligned));
  // Where rank q's block for me starts in rank q's send buffer.
  auto send_displ = [&](int q, int d) {
    std::size_t at = 0;
    for (int k = 0; k < d; ++k) at += sweep_a2a_count<T>(q, k, base, aligned);
    return at;
  };
  std::size_t send_total = 0;
  for (std::size_t c : send_counts) send_total += c;
  const auto mine = sweep_input<T>(me, send_total, call);
  std::vector<T> want;
  for (int q = 0; q < n; ++q) {
    const std::size_t from = send_displ(q, me);
    for (std::size_t i = 0; i < recv_counts[static_cast<std::size_t>(q)]; ++i) want.push_back(sweep_value<T>(q, from + i, call));
  }
  sweep_buffer<T> in(send_total, offset, s), res(want.size(), offset, s);
  in.set(mine);
  gpu::all_to_all_v(dc, in.data(), std::span<const std::size_t>(send_counts), res.data(), std::span<const std::size_t>(recv_counts), s);
  note(sweep_sync(dc, s, tag + "all_to_all_v"));
  note(res.compare(want, tag + "all_to_all_v"));
  note(in.compare(mine, tag + "all_to_all_v input"));
}

/// The zero-copy forms on a registered window: all_reduce, reduce_scatter, all_gather and broadcast
/// at element offsets 0 and 1 of every rank's window (whose element i holds sweep_value(rank, i)).
/// The same allocation is registered twice (offset windows); `ipc` says whether the peers are other
/// processes, whose mappings the window cache must share between the two and release at the end.
template <class T, class Op>
void sweep_windows(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t count, int call, const Op& op, bool ipc,
                   std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  const int n = dc.size(), me = dc.rank();
  const std::size_t un = static_cast<std::size_t>(n), total = un * count + 8;
  const std::string tag = std::string(collx::detail::type_name<T>()) + " window count " + std::to_string(count) + " rank " +
                          std::to_string(me) + ": ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  T* mem = nullptr;  // cudaMalloc, not a stream-ordered pool: CUDA IPC cannot export pool memory
  if (cudaMalloc(&mem, (total + 4) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  const auto values = sweep_input<T>(me, total, call);
  cudaMemcpyAsync(mem + 4, values.data(), total * sizeof(T), cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
  gpu::window w = dc.register_window(mem + 4, total * sizeof(T));
  gpu::window whole = dc.register_window(mem, (total + 4) * sizeof(T));  // the same allocation again
  if (ipc && dc.mapped_window_allocations() != un - 1)
    out.push_back(tag + "window cache maps " + std::to_string(dc.mapped_window_allocations()) + " allocations, not one per peer");
  for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
    const std::string at = tag + "offset " + std::to_string(offset) + " ";
    {
      sweep_buffer<T> res(count, 0, s);
      gpu::all_reduce(dc, w, offset, res.data(), count, op, s);
      note(sweep_sync(dc, s, at + "all_reduce"));
      note(res.compare(sweep_fold<T>(n, count, offset, call, op), at + "all_reduce"));
    }
    {  // through the other window: element offset + 4 of `whole` is element offset of `w`
      sweep_buffer<T> res(count, 0, s);
      gpu::reduce_scatter(dc, whole, offset + 4, res.data(), count, op, s);
      note(sweep_sync(dc, s, at + "reduce_scatter"));
      note(res.compare(sweep_fold<T>(n, count, offset + static_cast<std::size_t>(me) * count, call, op), at + "reduce_scatter"));
    }
    {
      std::vector<T> want;
      for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < count; ++i) want.push_back(sweep_value<T>(q, offset + i, call));
      sweep_buffer<T> res(un * count, 1, s);  // misaligned recv: the rank's own access width, the same cut
      gpu::all_gather(dc, w, offset, res.data(), count, s);
      note(sweep_sync(dc, s, at + "all_gather"));
      note(res.compare(want, at + "all_gather"));
    }
    {
      const int root = static_cast<int>((count + offset) % un);
      std::vector<T> want(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = sweep_value<T>(root, offset + i, call);
      sweep_buffer<T> res(count, 0, s);
      gpu::broadcast(dc, w, offset, res.data(), count, root, s);
      note(sweep_sync(dc, s, at + "broadcast"));
      note(res.compare(want, at + "broadcast"));
    }
  }
  dc.deregister_window(whole);
  if (ipc && dc.mapped_window_allocations() != un - 1)
    out.push_back(tag + "the cache dropped a mapping another window still uses");
  dc.deregister_window(w);
  if (dc.mapped_window_allocations() != 0)
    out.push_back(tag + std::to_string(dc.mapped_window_allocations()) + " window mappings left after deregistering");
  cudaFree(mem);
  collx::barrier(dc.host());  // nobody launches again while a peer's cudaFree waits for the device
}

}  // namespace collx_cuda_test

namespace collx_cuda_test {

/// The ring's fold (cuda/ring_plan.hpp) of elements [first, first + count) of the ranks' inputs
/// of call `call`: element i of the call lies in the piece of some ring position k of some channel
/// (gpu::owner_of), and is folded along that channel's ring from position k + 1 in the
/// accumulator type. `phase` all_reduce: i indexes the vector (first = 0); reduce_scatter: the
/// n x count input, the block of rank `rank` (first = rank * count).
template <class T, class Op>
std::vector<T> sweep_ring_fold(const collx::gpu::device_communicator& dc, collx::gpu::ring_phase phase, std::size_t count,
                               std::size_t first, int call, const Op& op) {
  namespace gpu = collx::gpu;
  using red = collx::detail::reduction<T, Op>;
  const int n = dc.size();
  const gpu::ring_call plan = gpu::plan_ring_call(phase, dc.rings(), dc.rank(), count, std::max(sizeof(T), sizeof(typename red::acc)),
                                                  gpu::device_vector_elements<T>, dc.slot_bytes(), dc.block_limit());
  std::vector<T> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = first + i;  // where the element lies in the buffer the spans describe
    const gpu::ring_piece_owner o = gpu::owner_of(plan, at);
    if (o.channel < 0) throw std::logic_error("sweep_ring_fold: element " + std::to_string(at) + " lies in no piece");
    const gpu::ring_order& ring = plan.channel[o.channel].ring;
    auto a = red::widen(sweep_value<T>(ring.at(o.position + 1), at, call));
    for (int m = 2; m <= n; ++m) a = red::combine(op, a, red::widen(sweep_value<T>(ring.at(o.position + m), at, call)));
    out[i] = red::finalize(a, n);
  }
  return out;
}

/// The ring forms (algo::ring) on T with commutative Op: all_reduce out of place and in place,
/// reduce_scatter, all_gather out of place and in place, each against its reference (the ring's
/// fold; the concatenation), with a direct all_reduce between them (ring and direct calls share
/// the staging slots, which the ring's first barrier guards). Appends problems to `out`.
template <class T, class Op>
void sweep_ring(collx::gpu::device_communicator& dc, cudaStream_t s, std::size_t count, std::size_t offset, int call,
                const Op& op, std::vector<std::string>& out) {
  namespace gpu = collx::gpu;
  using collx::algo::ring;
  const int n = dc.size(), me = dc.rank();
  const std::string tag = std::string(collx::detail::type_name<T>()) + " count " + std::to_string(count) + " offset " +
                          std::to_string(offset) + " rank " + std::to_string(me) + " ring: ";
  auto note = [&](std::string p) { if (!p.empty()) out.push_back(std::move(p)); };
  const auto mine = sweep_input<T>(me, count, call);
  const auto want = n == 1 ? sweep_fold<T>(n, count, 0, call, op) : sweep_ring_fold<T>(dc, gpu::ring_phase::all_reduce, count, 0, call, op);
  {
    sweep_buffer<T> in(count, offset, s), res(count, offset, s);
    in.set(mine);
    gpu::all_reduce<ring>(dc, in.data(), res.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "all_reduce"));
    note(res.compare(want, tag + "all_reduce"));
    note(in.compare(mine, tag + "all_reduce input"));
    gpu::all_reduce(dc, in.data(), res.data(), count, op, s);  // direct, between ring calls
    note(sweep_sync(dc, s, tag + "direct all_reduce after a ring"));
    note(res.compare(sweep_fold<T>(n, count, 0, call, op), tag + "direct all_reduce after a ring"));
  }
  {
    sweep_buffer<T> buf(count, offset, s);
    buf.set(mine);
    gpu::all_reduce<ring>(dc, buf.data(), buf.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "in-place all_reduce"));
    note(buf.compare(want, tag + "in-place all_reduce"));
  }
  {
    std::vector<T> all(static_cast<std::size_t>(n) * count);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = sweep_value<T>(me, i, call + 1);
    sweep_buffer<T> in(all.size(), offset, s), res(count, offset, s);
    in.set(all);
    gpu::reduce_scatter<ring>(dc, in.data(), res.data(), count, op, s);
    note(sweep_sync(dc, s, tag + "reduce_scatter"));
    const std::size_t first = static_cast<std::size_t>(me) * count;
    note(res.compare(n == 1 ? sweep_fold<T>(n, count, first, call + 1, op)
                            : sweep_ring_fold<T>(dc, gpu::ring_phase::reduce_scatter, count, first, call + 1, op),
                     tag + "reduce_scatter"));
    note(in.compare(all, tag + "reduce_scatter input"));
  }
  {
    std::vector<T> want_all;
    for (int q = 0; q < n; ++q) {
      const auto v = sweep_input<T>(q, count, call + 2);
      want_all.insert(want_all.end(), v.begin(), v.end());
    }
    const auto own = sweep_input<T>(me, count, call + 2);
    sweep_buffer<T> in(count, offset, s), res(want_all.size(), offset, s);
    in.set(own);
    gpu::all_gather<ring>(dc, in.data(), res.data(), count, s);
    note(sweep_sync(dc, s, tag + "all_gather"));
    note(res.compare(want_all, tag + "all_gather"));
    sweep_buffer<T> buf(want_all.size(), offset, s);  // in place: this rank's block already in recv
    buf.set(own, static_cast<std::size_t>(me) * count);
    gpu::all_gather<ring>(dc, buf.data() + static_cast<std::size_t>(me) * count, buf.data(), count, s);
    note(sweep_sync(dc, s, tag + "in-place all_gather"));
    note(buf.compare(want_all, tag + "in-place all_gather"));
  }
}

}  // namespace collx_cuda_test
