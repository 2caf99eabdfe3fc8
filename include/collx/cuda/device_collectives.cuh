/// @file cuda/device_collectives.cuh
/// collx's collectives on device memory over a gpu::device_communicator: all_reduce, reduce,
/// reduce_scatter(_v), all_gather(_v), broadcast and all_to_all(_v), for any element type and reduction
/// op (custom structs, non-commutative ops), stream-ordered, plus zero-copy forms that read
/// registered windows, and point-to-point send, recv and send_recv. For .cu files (nvcc with
/// collx::cuda's flags).
///
/// Algorithm: one-shot direct through bounded staging (the "one-shot" all-reduce of NCCL's NVLS-less
/// small-message path and of TensorRT-LLM / vLLM custom all-reduce, here for every collective and
/// any size). A call is cut into chunks that fit one staging slot (device_plan.hpp). For each chunk,
/// every rank copies what its peers need into its own slot, then the ranks meet at a barrier, then
/// each rank reads what it needs straight from its peers' slots (over NVLink/PCIe peer mappings,
/// the same GPU's memory, or shared host memory where the GPUs lack peer access: per pair with
/// workspace_memory::mixed, whose ranks also stage into host memory what such peers read; see
/// device_view) and writes its
/// output. Reductions fold the ranks in rank order 0, 1, ...,
/// n-1 in the accumulator type (fp32 for half/bfloat16), so every rank gets the same bits as the
/// host path, whatever the op (the ring forms below fold in the ring's order instead; untagged
/// calls take them only from device_communicator::ring_min_bytes on).
///
/// Synchronisation: each thread block b meets only block b of its peers (same element range on
/// every rank), through flags in the peers' workspaces. A flag word carries the chunk's epoch, a
/// sequence number that only grows (kept in device memory, so CUDA graph replays go on counting)
/// and the call's 24-bit signature. Chunk epoch e uses slot e % 2. Block b writes its range of a
/// slot for epoch e only after the barrier of epoch e - 1: within a call, the peers' block b reach
/// it only after reading that range at epoch e - 2 (a block keeps the same slot offsets in every
/// chunk, the last one clipped: chunk_block_range); at a call boundary, a peer's kernel starts only
/// after its previous kernel (every block) has ended. So two slots and one barrier per chunk
/// suffice, with no flag resets.
/// A wait that exceeds the communicator's timeout, or a flag with another signature, ends the call:
/// the block records the failure (device_communicator::check), poisons its peers' flags so they end
/// too, and every later call of this rank returns at once. A call rejected on the host (bad
/// arguments), or whose kernel fails to launch, ends the communicator the same way (reject_kernel,
/// end_for_peers), flagging the rejected call's
/// epoch with a reserved signature so that peers still finishing earlier calls are not cut short.
/// A rank whose call moves nothing (count 0) still meets its peers once with the call's signature
/// (empty_call_kernel), so that counts that differ across ranks are a mismatch, as on the host.
/// all_to_all_v's first epoch also publishes every rank's send counts in the workspace's exchange
/// rows (all_to_all_v_kernel), which fix the call's chunks on every rank.
///
/// Cost: per chunk, each rank writes its input once into staging and reads world-size slices from
/// peers. This suits latency-bound sizes; the window forms (below) skip the staging copy. Larger
/// all-reduces run two-shot (device_plan.hpp direct_form, chosen by size against the cost model's
/// crossover; by default never where every rank is on one GPU): the reduce-scatter and all-gather steps of this file, one after the other, so each
/// rank reads 2 (n - 1) / n of the vector from its peers instead of (n - 1) times it.
/// all_to_all_v exchanges the ranks' counts on the device first (all_to_all_v_kernel). The ring
/// forms (algo::ring: all_reduce, reduce_scatter, all_gather; ring_kernel, cuda/ring_plan.hpp)
/// read from one ring neighbour per channel only, so GPUs that are not all directly connected
/// move data over the rings' links alone; they need a commutative op.
/// Point-to-point calls have their own flags and staging (p2p_kernel), so they never disturb the
/// collectives' epochs.
#pragma once

#ifndef __CUDACC__  // else the first error is a missing <cuda/atomic> or an unknown __device__
#error "collx/cuda/device_collectives.cuh holds CUDA kernels: include it from a .cu file that nvcc compiles (host code of its own may use collx/cuda/device_communicator.hpp)"
#endif

#include <cuda/atomic>
#include <cuda_runtime_api.h>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include <collx/algo/automatic.hpp>
#include <collx/algo/direct.hpp>
#include <collx/algo/hierarchical.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/algo/tree.hpp>
#include <collx/block_counts.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/signature_names.hpp>
#include <collx/concepts.hpp>
#include <collx/nullable_ptr.hpp>
#include <collx/cuda/device_callable.cuh>
#include <collx/cuda/device_communicator.hpp>
#include <collx/cuda/device_plan.hpp>
#include <collx/cuda/launch_kernel.cuh>
#include <collx/cuda/reduce_kernel.cuh>  // ranges_overlap
#include <collx/cuda/ring_plan.hpp>
#include <collx/cuda/runtime.hpp>
#include <collx/cuda_types.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {
namespace device_detail {

__device__ inline std::uint64_t global_timer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ inline std::uint64_t* flags_of(const device_view& v, int owner) {
  return reinterpret_cast<std::uint64_t*>(v.workspace[owner] + v.flags_offset);
}
__device__ inline std::uint64_t* claim_of(const device_view& v) {
  return reinterpret_cast<std::uint64_t*>(v.local + v.claim_offset);
}
/// counters[0]: the epoch of the last chunk this rank finished; counters[1]: blocks done with the call.
__device__ inline unsigned long long* counters_of(const device_view& v) {
  return reinterpret_cast<unsigned long long*>(v.local + v.counters_offset);
}
/// Rank `owner`'s exchange row for block `block` of the call whose first epoch is `epoch`: one u64
/// per rank (device_plan.hpp workspace_layout).
__device__ inline std::uint64_t* exchange_of(const device_view& v, int owner, std::uint64_t epoch, unsigned block) {
  return reinterpret_cast<std::uint64_t*>(v.workspace[owner] + v.exchange_offset) +
         ((epoch & 1) * max_device_blocks + block) * max_device_world;
}
/// Rank `owner`'s staging slot for chunk epoch `epoch`, as elements of T.
template <class T>
__device__ inline T* slot_of(const device_view& v, int owner, std::uint64_t epoch) {
  return reinterpret_cast<T*>(v.workspace[owner] + v.staging_offset + (epoch & 1) * v.slot_bytes);
}

/// This rank's point-to-point counts per peer: chunks sent to it, chunks taken from it.
__device__ inline unsigned long long* p2p_sent_of(const device_view& v) {
  return reinterpret_cast<unsigned long long*>(v.local + v.p2p_sent_offset);
}
__device__ inline unsigned long long* p2p_received_of(const device_view& v) {
  return reinterpret_cast<unsigned long long*>(v.local + v.p2p_received_offset);
}
/// Rank `owner`'s point-to-point flag tables ([block][peer]): ready (senders to it write) and
/// ack (receivers from it write).
__device__ inline std::uint64_t* p2p_ready_of(const device_view& v, int owner) {
  return reinterpret_cast<std::uint64_t*>(v.workspace[owner] + v.p2p_ready_offset);
}
__device__ inline std::uint64_t* p2p_ack_of(const device_view& v, int owner) {
  return reinterpret_cast<std::uint64_t*>(v.workspace[owner] + v.p2p_ack_offset);
}
/// Rank `owner`'s point-to-point staging half for its chunk `seq`, as elements of T.
template <class T>
__device__ inline T* p2p_half_of(const device_view& v, int owner, std::uint64_t seq) {
  return reinterpret_cast<T*>(v.workspace[owner] + v.p2p_staging_offset + (seq & 1) * (v.slot_bytes / 2));
}

// Where this rank reads what peers write to it, and writes what peers read (device_view: with
// memory mixed these differ by pair).

/// The flags rank p writes to this rank ([block][p] words of this rank's flag table).
__device__ inline std::uint64_t* flags_from(const device_view& v, int p) {
  return reinterpret_cast<std::uint64_t*>(v.inbox[p] + v.flags_offset);
}
/// This rank's staging slot for chunk epoch `epoch` where rank `reader` alone reads it (the ring's
/// successor), as elements of T.
template <class T>
__device__ inline T* slot_for(const device_view& v, int reader, std::uint64_t epoch) {
  return reinterpret_cast<T*>(v.outbox[reader] + v.staging_offset + (epoch & 1) * v.slot_bytes);
}
/// This rank's point-to-point staging half for its chunk `seq` to rank `reader`, where it reads it.
template <class T>
__device__ inline T* p2p_half_for(const device_view& v, int reader, std::uint64_t seq) {
  return reinterpret_cast<T*>(v.outbox[reader] + v.p2p_staging_offset + (seq & 1) * (v.slot_bytes / 2));
}
/// The same bytes as `own` (in this rank's workspace as v.workspace[v.rank] has it) in its mirror,
/// or null without one.
template <class T>
__device__ inline T* mirror_of(const device_view& v, T* own) {
  if (!v.mirror) return nullptr;
  return reinterpret_cast<T*>(v.mirror + (reinterpret_cast<std::byte*>(own) - v.workspace[v.rank]));
}

/// Reads one T bypassing L1 (ld.global.cg): peers rewrite staging between chunks, and only L2 (or
/// the peer's memory) is coherent with their writes.
template <class T>
__device__ inline T load_cg(const T* p) {
  T out;
  if constexpr (sizeof(T) % 8 == 0 && alignof(T) >= 8) {
    unsigned long long w[sizeof(T) / 8];
    for (std::size_t i = 0; i < sizeof(T) / 8; ++i) w[i] = __ldcg(reinterpret_cast<const unsigned long long*>(p) + i);
    std::memcpy(&out, w, sizeof(T));
  } else if constexpr (sizeof(T) % 4 == 0 && alignof(T) >= 4) {
    unsigned int w[sizeof(T) / 4];
    for (std::size_t i = 0; i < sizeof(T) / 4; ++i) w[i] = __ldcg(reinterpret_cast<const unsigned int*>(p) + i);
    std::memcpy(&out, w, sizeof(T));
  } else if constexpr (sizeof(T) % 2 == 0 && alignof(T) >= 2) {
    unsigned short w[sizeof(T) / 2];
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) w[i] = __ldcg(reinterpret_cast<const unsigned short*>(p) + i);
    std::memcpy(&out, w, sizeof(T));
  } else {
    unsigned char w[sizeof(T)];
    for (std::size_t i = 0; i < sizeof(T); ++i) w[i] = __ldcg(reinterpret_cast<const unsigned char*>(p) + i);
    std::memcpy(&out, w, sizeof(T));
  }
  return out;
}

/// V consecutive elements, moved as one 16-byte access (V = device_vector_elements<T> > 1).
template <class T, std::size_t V>
struct alignas(16) vec {
  static_assert(std::is_default_constructible_v<T>,
                "collx::gpu: the device collectives hold elements (and a custom op's partial results) in registers, so the "
                "element type must be default-constructible: give it a default constructor, e.g. T() = default;");
  T e[V];
};
/// The 16-byte word a vec of T moves as: two 64-bit halves for 8-byte arithmetic elements (double,
/// int64: each element one register pair as loaded; as four 32-bit words ptxas paired them up
/// again and spilled the staged float64 all-reduce, 244 bytes of spill loads per thread against
/// 160, and it ran 1.15x slower on an H200: bench/results/h200-1gpu.md), four 32-bit words
/// otherwise (8-byte structs of 32-bit fields spilled more as two halves).
template <class T>
using vec_word = std::conditional_t<std::is_arithmetic_v<T> && sizeof(T) == 8, ulonglong2, uint4>;

template <class T, std::size_t V>
__device__ inline vec<T, V> load_vec_cg(const T* p) {
  static_assert(sizeof(vec<T, V>) == 16);
  const vec_word<T> w = __ldcg(reinterpret_cast<const vec_word<T>*>(p));
  vec<T, V> out;
  std::memcpy(&out, &w, 16);
  return out;
}
template <class T, std::size_t V>
__device__ inline vec<T, V> load_vec(const T* p) {
  const vec_word<T> w = *reinterpret_cast<const vec_word<T>*>(p);
  vec<T, V> out;
  std::memcpy(&out, &w, 16);
  return out;
}
template <class T, std::size_t V>
__device__ inline void store_vec(T* p, const vec<T, V>& x) {
  vec_word<T> w;
  std::memcpy(&w, &x, 16);
  *reinterpret_cast<vec_word<T>*>(p) = w;
}

/// Values of the claim word once this rank has failed: whether its collective flags at the peers
/// carry poison_epoch (fail()), or the rejection mark or nothing (a rejected call, a failed
/// point-to-point call, a peer's rejection seen: poison there would name this rank as the cause).
inline constexpr unsigned long long claim_poisoned = 1, claim_unpoisoned = 2;

/// Records this rank's first failure in its status (the claim word, set to `claim`, picks one
/// writer); false when another failure was recorded first.
__device__ inline bool record_failure(const device_view& v, unsigned long long claim, device_failure what, int peer,
                                      std::uint64_t epoch, std::uint64_t seen, std::uint32_t theirs, std::uint32_t mine,
                                      device_activity during = device_activity::collective, std::uint64_t expected = 0) {
  if (atomicCAS(reinterpret_cast<unsigned long long*>(claim_of(v)), 0ull, claim) != 0ull) return false;
  device_status* s = v.status;
  s->expected = expected;
  s->peer = peer;
  s->block = blockIdx.x;
  s->theirs = theirs;
  s->mine = mine;
  s->during = static_cast<std::uint32_t>(during);
  s->epoch = epoch;
  s->seen = seen;
  __threadfence_system();
  s->failure = static_cast<std::uint32_t>(what);
  __threadfence_system();
  return true;
}

/// Writes `word` as this rank's flag at every peer, for every block.
__device__ inline void flag_all_peers(const device_view& v, std::uint64_t word) {
  for (int p = 0; p < v.world; ++p) {
    if (p == v.rank) continue;
    for (unsigned b = 0; b < max_device_blocks; ++b) {
      cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> f(flags_of(v, p)[b * max_device_world + v.rank]);
      f.store(word, cuda::memory_order_release);
    }
  }
}

/// True when this rank's recorded failure poisoned its flags (claim_poisoned), not when it carries
/// the rejection mark (claim_unpoisoned) or none is recorded.
__device__ inline bool failure_poisoned(const device_view& v) {
  return cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(*claim_of(v)).load(cuda::memory_order_relaxed) ==
         claim_poisoned;
}

/// Records this rank's first failure, then poisons the flags this rank writes at every peer, for
/// every block, so the peers' waits end at once. Not when an earlier failure of this rank left the
/// peers unpoisoned on purpose (it ended on a peer's rejection mark): peers still finishing an
/// earlier call with this rank would be cut short.
__device__ inline void fail(const device_view& v, device_failure what, int peer, std::uint64_t epoch,
                            std::uint64_t seen, std::uint32_t theirs, std::uint32_t mine,
                            device_activity during = device_activity::collective) {
  if (record_failure(v, claim_poisoned, what, peer, epoch, seen, theirs, mine, during) || failure_poisoned(v))
    flag_all_peers(v, flag_word(poison_epoch, {mine}));
}

/// The barrier of chunk `epoch` for this block: thread p < world, for each rank p in `peers` (a bit
/// mask; the ring forms meet only their neighbours), tells rank p that this block's staging writes
/// for the chunk are done, then waits for rank p's same block. Returns false (the call must end)
/// when a wait failed here or anywhere on this rank.
__device__ inline bool barrier(const device_view& v, std::uint64_t epoch, device_signature sig, std::uint32_t peers = ~0u) {
  __shared__ int failed;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();  // the block's staging writes for this chunk are done
  const int p = static_cast<int>(threadIdx.x);
  if (p < v.world && ((peers >> p) & 1u)) {
    __threadfence_system();
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> out(flags_of(v, p)[blockIdx.x * max_device_world + v.rank]);
    out.store(flag_word(epoch, sig), cuda::memory_order_release);

    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> in(flags_from(v, p)[blockIdx.x * max_device_world + p]);
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> claim(*claim_of(v));
    std::uint64_t start = 0;
    for (unsigned polls = 0;; ++polls) {
      const std::uint64_t w = in.load(cuda::memory_order_acquire);
      const flag_verdict verdict = judge_flag(w, epoch, sig);
      if (verdict == flag_verdict::pass) break;
      if (verdict != flag_verdict::wait) {
        if (verdict == flag_verdict::rejected)  // every peer has the rejection already: poison nobody
          record_failure(v, claim_unpoisoned, device_failure::peer_failed, p, epoch, w, flag_signature(w).bits, sig.bits);
        else
          fail(v, verdict == flag_verdict::mismatch ? device_failure::mismatch : device_failure::peer_failed, p, epoch, w,
               flag_signature(w).bits, sig.bits);
        atomicExch(&failed, 1);
        break;
      }
      if ((polls & 255) == 255) {
        if (claim.load(cuda::memory_order_relaxed) != 0) {  // another block failed (poisoned again below)
          atomicExch(&failed, 1);
          break;
        }
        const std::uint64_t now = global_timer_ns();
        if (start == 0) start = now;
        else if (now - start > v.timeout_ns) {
          fail(v, device_failure::timeout, p, epoch, w, 0, sig.bits);
          atomicExch(&failed, 1);
          break;
        }
        __nanosleep(64);
      }
    }
  }
  __syncthreads();
  // The rank's poison may have reached a peer before this block's flag above replaced it, also at
  // a peer this block had already passed: poison again, or that peer's block, waiting at a later
  // epoch of this block's, would wait until its timeout.
  if (failed && p < v.world && p != v.rank && ((peers >> p) & 1u) && failure_poisoned(v)) {
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> out(flags_of(v, p)[blockIdx.x * max_device_world + v.rank]);
    out.store(flag_word(poison_epoch, sig), cuda::memory_order_release);
  }
  return failed == 0;
}

/// Vectors each thread keeps in flight per pass: four 16-byte loads issued before any is used, so
/// a block of 512 threads has 32 KiB of loads outstanding (memory-bound kernels need the bytes in
/// flight, not the threads).
inline constexpr unsigned device_unroll = 4;

/// Vectors each thread keeps in flight per pass where each also holds an accumulator, in the folds
/// of the staged forms (fold_ranks over the peers' slots) and the ring's steps (ring_move): two.
/// With four, ptxas spilled these kernels to local memory (sm_90: 292 bytes of spill loads in
/// the float32 ring kernel, 524 in the fp16 one, 344 in the fp16 all-reduce); on an H200 the
/// float32 ring all-reduce and reduce-scatter ran 12-14% slower with four and the staged
/// all-reduce no faster (bench/results/h200-1gpu.md, 2026-12-04 evening).
inline constexpr unsigned fold_unroll = 2;

/// Whether a fold of T with Op keeps its elements and accumulators in 32-bit registers (alignment
/// at most 4: float, int32, structs of such fields), not register pairs (double, int64).
template <class T, class Op>
inline constexpr bool fold_in_32bit_registers =
    alignof(T) <= 4 && alignof(typename detail::reduction<T, Op>::acc) <= 4;

/// Vectors in flight per pass in the zero-copy folds (fold_ranks over the peers' windows, a
/// smaller kernel): four where the loaded vectors and their accumulators fit in 128 bytes (32 of
/// the 64 registers a thread may use at 2 resident blocks of 512 threads) and live in 32-bit
/// registers (fold_in_32bit_registers), else fold_unroll: fp16/bf16 (accumulated in fp32) exceed
/// the 128 bytes, and 64-bit elements spilled with four (sm_90, float64: 148 bytes of spill loads
/// per thread; none with two). On an H200, float32, four against two: window all-reduce at 1 GiB
/// 820 against 630 GB/s with 2 ranks, 593 against 479 at 256 MiB with 4; window reduce-scatter
/// 667 against 543 (bench/results/h200-1gpu.md).
template <class T, class Op, std::size_t V>
inline constexpr unsigned zero_copy_fold_unroll =
    fold_in_32bit_registers<T, Op> && 4 * (sizeof(vec<T, V>) + V * sizeof(typename detail::reduction<T, Op>::acc)) <= 128
        ? 4
        : fold_unroll;

/// For the elements [r.begin, r.end) of a chunk, over the block's threads: f(first, n) for batches
/// of n <= Unroll vectors (vector indices first, first + blockDim.x, ...; elements
/// [i*V, i*V+V) of each), then g(j) for each element j of the tail. V == 1: g only.
template <std::size_t V, unsigned Unroll = device_unroll, class F, class G>
__device__ inline void for_each_in(block_range r, F&& f, G&& g) {
  std::size_t vend = r.begin;
  if constexpr (V > 1) {
    const std::size_t vectors = (r.end - r.begin) / V;
    vend = r.begin + vectors * V;
    const std::size_t first_vector = r.begin / V;
    for (std::size_t k = threadIdx.x; k < vectors; k += std::size_t{Unroll} * blockDim.x) {
      const std::size_t left = (vectors - k + blockDim.x - 1) / blockDim.x;
      f(first_vector + k, static_cast<unsigned>(left < Unroll ? left : Unroll));
    }
  }
  for (std::size_t j = vend + threadIdx.x; j < r.end; j += blockDim.x) g(j);
}

/// out[j] = fold over ranks q in order of source(q)[j], for j in the block's range: the reduction
/// step of all_reduce, reduce and reduce_scatter. source(q): rank q's data (a peer slot or window),
/// read bypassing L1. U: vectors in flight per thread (fold_unroll, zero_copy_fold_unroll).
template <class T, class Op, std::size_t V, unsigned U, class Source>
__device__ inline void fold_ranks(const device_view& v, Source source, block_range r, T* out, const Op& op) {
  using red = detail::reduction<T, Op>;
  using acc = typename red::acc;
  // Never taken: makes an op without a __device__ call operator a compile error here (the shared
  // host/device reduction code has nvcc's check off, so it would otherwise compile to nothing).
  if (r.begin == ~std::size_t{0}) require_device_callable<T>(op, *out);
  for_each_in<V, U>(
      r,
      [&](std::size_t first, unsigned n) {
        if constexpr (V > 1) {
          acc a[U][V];
          vec<T, V> x[U];
          const T* s0 = source(0);
#pragma unroll
          for (unsigned u = 0; u < U; ++u)
            if (u < n) x[u] = load_vec_cg<T, V>(s0 + (first + u * blockDim.x) * V);
#pragma unroll
          for (unsigned u = 0; u < U; ++u)
            if (u < n)
              for (std::size_t k = 0; k < V; ++k) a[u][k] = red::widen(x[u].e[k]);
          for (int q = 1; q < v.world; ++q) {
            const T* sq = source(q);
#pragma unroll
            for (unsigned u = 0; u < U; ++u)
              if (u < n) x[u] = load_vec_cg<T, V>(sq + (first + u * blockDim.x) * V);
#pragma unroll
            for (unsigned u = 0; u < U; ++u)
              if (u < n)
                for (std::size_t k = 0; k < V; ++k) a[u][k] = red::combine(op, a[u][k], red::widen(x[u].e[k]));
          }
#pragma unroll
          for (unsigned u = 0; u < U; ++u)
            if (u < n) {
              vec<T, V> o;
              for (std::size_t k = 0; k < V; ++k) o.e[k] = red::finalize(a[u][k], v.world);
              store_vec<T, V>(out + (first + u * blockDim.x) * V, o);
            }
        }
      },
      [&](std::size_t j) {
        acc a = red::widen(load_cg(source(0) + j));
        for (int q = 1; q < v.world; ++q) a = red::combine(op, a, red::widen(load_cg(source(q) + j)));
        out[j] = red::finalize(a, v.world);
      });
}

/// dst[j] = src[j] for j in the block's range; src is a peer's slot (L1 bypassed) when Remote.
template <class T, std::size_t V, bool Remote>
__device__ inline void copy_range(block_range r, const T* src, T* dst) {
  for_each_in<V>(
      r,
      [&](std::size_t first, unsigned n) {
        if constexpr (V > 1) {
          vec<T, V> x[device_unroll];
#pragma unroll
          for (unsigned u = 0; u < device_unroll; ++u)
            if (u < n) {
              const T* p = src + (first + u * blockDim.x) * V;
              if constexpr (Remote) x[u] = load_vec_cg<T, V>(p);
              else x[u] = load_vec<T, V>(p);
            }
#pragma unroll
          for (unsigned u = 0; u < device_unroll; ++u)
            if (u < n) store_vec<T, V>(dst + (first + u * blockDim.x) * V, x[u]);
        }
      },
      [&](std::size_t j) {
        if constexpr (Remote) dst[j] = load_cg(src + j);
        else dst[j] = src[j];
      });
}

/// copy_range into this rank's own workspace (`own`: a slot or row every peer reads), and into the
/// same bytes of its mirror when some peers read it there (device_view::mirror). A row only rank
/// d reads (reduce-scatter, all-to-all) is staged at slot_for(d) instead, where d reads it.
template <class T, std::size_t V>
__device__ inline void stage_range(const device_view& v, block_range r, const T* src, T* own) {
  copy_range<T, V, false>(r, src, own);
  if (T* m = mirror_of(v, own)) copy_range<T, V, false>(r, src, m);
}

// The collectives: stage(chunk) copies this rank's contribution into its slot; consume(chunk) reads
// the peers' slots and writes the output. Both see the chunk's first element `cb`, its epoch and the
// block's range of the chunk.

/// all_reduce (root < 0) and reduce (only `root` writes): the slot holds src[cb ...].
template <class T, class Op, std::size_t V>
struct all_reduce_step {
  const T* src;
  T* dst;
  Op op;
  int root;
  __device__ void stage(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    stage_range<T, V>(v, r, src + cb, slot_of<T>(v, v.rank, epoch));
  }
  __device__ void consume(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    if (root < 0 || root == v.rank)
      fold_ranks<T, Op, V, fold_unroll>(v, [&](int q) { return slot_of<T>(v, q, epoch); }, r, dst + cb, op);
  }
};

/// reduce_scatter: row d of the slot holds src[d * count + cb ...] (the piece of rank d's block).
template <class T, class Op, std::size_t V>
struct reduce_scatter_step {
  const T* src;
  T* dst;
  Op op;
  __device__ void stage(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int d = 0; d < v.world; ++d)
      copy_range<T, V, false>(r, src + static_cast<std::size_t>(d) * p.count + cb, slot_for<T>(v, d, epoch) + d * p.row_pitch);
  }
  __device__ void consume(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    const std::size_t row = static_cast<std::size_t>(v.rank) * p.row_pitch;
    fold_ranks<T, Op, V, fold_unroll>(v, [&](int q) { return slot_of<T>(v, q, epoch) + row; }, r, dst + cb, op);
  }
};

/// all_gather: the slot holds src[cb ...]; rank q's slot goes to dst[q * count + cb ...].
template <class T, std::size_t V>
struct all_gather_step {
  const T* src;
  T* dst;
  __device__ void stage(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    stage_range<T, V>(v, r, src + cb, slot_of<T>(v, v.rank, epoch));
  }
  __device__ void consume(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int q = 0; q < v.world; ++q)
      copy_range<T, V, true>(r, slot_of<T>(v, q, epoch), dst + static_cast<std::size_t>(q) * p.count + cb);
  }
};

/// broadcast: the root's slot holds src[cb ...]; every rank but an in-place root copies it to dst.
template <class T, std::size_t V>
struct broadcast_step {
  const T* src;
  T* dst;
  int root;
  __device__ void stage(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    if (v.rank == root) stage_range<T, V>(v, r, src + cb, slot_of<T>(v, v.rank, epoch));
  }
  __device__ void consume(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    if (v.rank != root || src != dst) copy_range<T, V, true>(r, slot_of<T>(v, root, epoch), dst + cb);
  }
};

/// all_to_all: row d of the slot holds src[d * count + cb ...] (this rank's block for rank d); rank
/// q's row `rank` goes to dst[q * count + cb ...].
template <class T, std::size_t V>
struct all_to_all_step {
  const T* src;
  T* dst;
  __device__ void stage(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int d = 0; d < v.world; ++d)
      copy_range<T, V, false>(r, src + static_cast<std::size_t>(d) * p.count + cb, slot_for<T>(v, d, epoch) + d * p.row_pitch);
  }
  __device__ void consume(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int q = 0; q < v.world; ++q)
      copy_range<T, V, true>(r, slot_of<T>(v, q, epoch) + static_cast<std::size_t>(v.rank) * p.row_pitch,
                             dst + static_cast<std::size_t>(q) * p.count + cb);
  }
};

/// all_gather_v: as all_gather_step, each rank's row as long as its own count (lay.counts[q]) and
/// landing at its offset (lay.displs[q]); the chunks run over the longest count.
template <class T, std::size_t V>
struct all_gather_v_step {
  const T* src;
  T* dst;
  v_layout lay;
  __device__ void stage(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    stage_range<T, V>(v, clip_to_row(r, cb, lay.counts[v.rank]), src + cb, slot_of<T>(v, v.rank, epoch));
  }
  __device__ void consume(const device_view& v, const chunk_plan&, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int q = 0; q < v.world; ++q)
      copy_range<T, V, true>(clip_to_row(r, cb, lay.counts[q]), slot_of<T>(v, q, epoch), dst + lay.displs[q] + cb);
  }
};

/// reduce_scatter_v: row d of the slot holds src[displs[d] + cb ...] up to counts[d] (the piece of
/// rank d's block); rank r folds row r of every slot.
template <class T, class Op, std::size_t V>
struct reduce_scatter_v_step {
  const T* src;
  T* dst;
  Op op;
  v_layout lay;
  __device__ void stage(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    for (int d = 0; d < v.world; ++d)
      copy_range<T, V, false>(clip_to_row(r, cb, lay.counts[d]), src + lay.displs[d] + cb, slot_for<T>(v, d, epoch) + d * p.row_pitch);
  }
  __device__ void consume(const device_view& v, const chunk_plan& p, std::uint64_t epoch, std::size_t cb, block_range r) const {
    const std::size_t row = static_cast<std::size_t>(v.rank) * p.row_pitch;
    fold_ranks<T, Op, V, fold_unroll>(v, [&](int q) { return slot_of<T>(v, q, epoch) + row; }, clip_to_row(r, cb, lay.counts[v.rank]),
                         dst + cb, op);
  }
};

/// Blocks of the device collectives that must fit on one multiprocessor at once (registers capped
/// to allow it): block_cap() gives each rank sharing a GPU up to 2 x SMs / ranks blocks, and every
/// one of them must be resident, since blocks wait for their peers' blocks.
inline constexpr unsigned device_blocks_per_sm = 2;

/// A call's first step, in every block: `base` = the epoch of the last chunk this rank finished
/// (the call's epochs follow it), `dead` = an earlier call of this rank failed. A dead call's
/// block 0 poisons this rank's flags again: a block of the failed call that passed its last
/// barrier after the poison went out left its own flag there instead.
__device__ inline void call_start(const device_view& v, std::uint64_t& base, int& dead) {
  if (threadIdx.x == 0) {
    base = counters_of(v)[0];
    const std::uint64_t claim =
        cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(*claim_of(v)).load(cuda::memory_order_relaxed);
    dead = claim != 0;
    if (claim == claim_poisoned && blockIdx.x == 0) flag_all_peers(v, flag_word(poison_epoch, {0}));
  }
  __syncthreads();
}

/// A call's last step, in every block: the last block to get here records `last_epoch` for the
/// next call (a kernel starts only after the previous one on its stream has ended).
__device__ inline void call_end(const device_view& v, std::uint64_t last_epoch) {
  __syncthreads();
  unsigned long long* counters = counters_of(v);
  if (threadIdx.x == 0 && atomicAdd(&counters[1], 1ull) == gridDim.x - 1) {
    counters[1] = 0;
    counters[0] = last_epoch;
  }
}

/// One launch runs every chunk of a call: stage, barrier, consume. All blocks take the call's chunk
/// epochs from counters[0], which the last block to finish advances: a kernel starts only after
/// the previous one on its stream has ended, so every block of a call sees the same epochs.
template <class Step>
__global__ void __launch_bounds__(device_threads_per_block, device_blocks_per_sm)
    collective_kernel(device_view v, chunk_plan plan, device_signature sig, Step step) {
  __shared__ std::uint64_t base;
  __shared__ int dead;
  call_start(v, base, dead);
  if (dead) return;  // an earlier call of this rank failed: the communicator is unusable
  for (std::size_t c = 0; c < plan.chunks; ++c) {
    const std::uint64_t epoch = base + c + 1;
    const block_range r = range_in_chunk(plan, c, blockIdx.x);
    step.stage(v, plan, epoch, plan.chunk_begin(c), r);
    if (!barrier(v, epoch, sig)) return;
    step.consume(v, plan, epoch, plan.chunk_begin(c), r);
  }
  call_end(v, base + plan.chunks);
}

/// all_to_all_v in one launch. Only the counts this rank sends and receives are known here, but
/// every rank must cut the call into the same chunks, so the call starts with an exchange: each
/// block publishes this rank's send counts in its own exchange row and meets its peers (epoch
/// base + 1); then every block reads every rank's counts, takes the largest as the row length
/// (the same on every rank) and checks that what each peer sends here is what recv_counts says.
/// Then chunks as collective_kernel's (epochs base + 2, ...): row d of the slot holds this rank's
/// block for rank d; rank q's row `rank` goes to recv at recv_displs[q].
/// Exchange rows alternate by the call's first epoch, so the row a block reads is written again at
/// the earliest by a later call whose first epoch is at least two higher: its writer has by then
/// passed a barrier (of this call's chunks or of a call in between) that this block reaches only
/// after reading the row. V: the access width (1 where this rank's pointers or offsets do not allow
/// 16-byte accesses).
template <class T, std::size_t V>
__global__ void __launch_bounds__(device_threads_per_block, device_blocks_per_sm)
    all_to_all_v_kernel(device_view v, a2a_layout lay, const T* src, T* dst, std::size_t chunk, device_signature sig) {
  __shared__ std::uint64_t base;
  __shared__ int dead;
  __shared__ unsigned long long longest;
  __shared__ int bad_peer;
  call_start(v, base, dead);
  if (dead) return;
  if (threadIdx.x == 0) longest = 0, bad_peer = max_device_world;
  if (threadIdx.x < static_cast<unsigned>(v.world)) {
    std::uint64_t* row = exchange_of(v, v.rank, base + 1, blockIdx.x);
    row[threadIdx.x] = lay.send_counts[threadIdx.x];
    if (std::uint64_t* m = mirror_of(v, row)) m[threadIdx.x] = lay.send_counts[threadIdx.x];
  }
  if (!barrier(v, base + 1, sig)) return;  // (its first __syncthreads also orders the init above)
  // Thread q * world + d reads what rank q sends rank d: the longest block sets the row length.
  const unsigned cells = static_cast<unsigned>(v.world * v.world);
  if (threadIdx.x < cells) {
    const int q = static_cast<int>(threadIdx.x) / v.world, d = static_cast<int>(threadIdx.x) % v.world;
    const unsigned long long c = load_cg(exchange_of(v, q, base + 1, blockIdx.x) + d);
    atomicMax(&longest, c);
    if (d == v.rank && c != lay.recv_counts[q]) atomicMin(&bad_peer, q);  // the lowest such rank is named
  }
  __syncthreads();
  if (bad_peer < v.world) {  // the peers' next barrier finds this rank's poisoned flags
    if (threadIdx.x == 0) {
      const auto clip32 = [](std::uint64_t x) { return static_cast<std::uint32_t>(x > 0xffffffffull ? 0xffffffffull : x); };
      const std::uint64_t sent = load_cg(exchange_of(v, bad_peer, base + 1, blockIdx.x) + v.rank);
      fail(v, device_failure::counts, bad_peer, base + 1, 0, clip32(sent), clip32(lay.recv_counts[bad_peer]));
    }
    return;
  }
  const std::size_t chunks = (longest + chunk - 1) / chunk;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::uint64_t epoch = base + 2 + c;
    const std::size_t cb = c * chunk, n = std::min<std::size_t>(longest, cb + chunk) - cb;
    // Ranges in the type's vector width on every rank, whatever width this rank accesses with; the
    // same slot offsets in every chunk (chunk_block_range).
    const block_range r = chunk_block_range(std::min<std::size_t>(longest, chunk), n, gridDim.x, blockIdx.x, device_vector_elements<T>);
    for (int d = 0; d < v.world; ++d)  // row d is rank d's alone: staged where it reads
      copy_range<T, V, false>(clip_to_row(r, cb, lay.send_counts[d]), src + lay.send_displs[d] + cb, slot_for<T>(v, d, epoch) + d * chunk);
    if (!barrier(v, epoch, sig)) return;
    for (int q = 0; q < v.world; ++q)
      copy_range<T, V, true>(clip_to_row(r, cb, lay.recv_counts[q]), slot_of<T>(v, q, epoch) + static_cast<std::size_t>(v.rank) * chunk,
                             dst + lay.recv_displs[q] + cb);
  }
  call_end(v, base + 1 + chunks);
}

// Zero-copy steps on registered windows: src[q] is rank q's window data (mapped here); there is no
// staging, so each has only consume(range), run between the two barriers of direct_kernel.

/// all_reduce / reduce (only `root` writes) from windows: dst[j] = fold over q of src[q][j].
template <class T, class Op, std::size_t V>
struct direct_all_reduce_step {
  const T* src[max_device_world];
  T* dst;
  Op op;
  int root;
  __device__ void consume(const device_view& v, const chunk_plan&, block_range r) const {
    if (root < 0 || root == v.rank) fold_ranks<T, Op, V, zero_copy_fold_unroll<T, Op, V>>(v, [&](int q) { return src[q]; }, r, dst, op);
  }
};

/// reduce_scatter from windows: dst[j] = fold over q of src[q][rank * count + j].
template <class T, class Op, std::size_t V>
struct direct_reduce_scatter_step {
  const T* src[max_device_world];
  T* dst;
  Op op;
  __device__ void consume(const device_view& v, const chunk_plan& p, block_range r) const {
    const std::size_t row = static_cast<std::size_t>(v.rank) * p.count;
    fold_ranks<T, Op, V, zero_copy_fold_unroll<T, Op, V>>(v, [&](int q) { return src[q] + row; }, r, dst, op);
  }
};

/// all_gather from windows: dst[q * count + j] = src[q][j].
template <class T, std::size_t V>
struct direct_all_gather_step {
  const T* src[max_device_world];
  T* dst;
  __device__ void consume(const device_view& v, const chunk_plan& p, block_range r) const {
    for (int q = 0; q < v.world; ++q) copy_range<T, V, true>(r, src[q], dst + static_cast<std::size_t>(q) * p.count);
  }
};

/// broadcast from the root's window: dst[j] = src[root][j].
template <class T, std::size_t V>
struct direct_broadcast_step {
  const T* src[max_device_world];
  T* dst;
  int root;
  __device__ void consume(const device_view&, const chunk_plan&, block_range r) const {
    copy_range<T, V, true>(r, src[root], dst);
  }
};

/// A zero-copy call: barrier (every rank's window holds its input: each rank's earlier work on its
/// stream is done), read the peers' windows straight into the output, barrier (every peer has
/// finished reading this rank's window, which the caller may overwrite after the call). Two epochs.
template <class Step>
__global__ void __launch_bounds__(device_threads_per_block, device_blocks_per_sm)
    direct_kernel(device_view v, chunk_plan plan, device_signature sig, Step step) {
  __shared__ std::uint64_t base;
  __shared__ int dead;
  call_start(v, base, dead);
  if (dead) return;
  if (!barrier(v, base + 1, sig)) return;
  step.consume(v, plan, range_of_block(plan.count, plan.blocks, blockIdx.x, plan.vector));
  if (!barrier(v, base + 2, sig)) return;
  call_end(v, base + 2);
}

/// The call of a rank that moves nothing (count 0, or v-form counts that add up to 0): block 0
/// meets its peers' block 0 once, at the call's first epoch, with the call's signature. Ranks that
/// all pass 0 advance one epoch together; a peer whose count differs fails with errc::mismatch
/// naming the count, as on the host, instead of waiting for its timeout or pairing with this
/// rank's next call. (A peer's other blocks end when its block 0 fails: they poll its claim.)
/// A template only so that every .cu file may include this header (one definition per program).
template <int = 0>
__global__ void empty_call_kernel(device_view v, device_signature sig) {
  __shared__ std::uint64_t base;
  __shared__ int dead;
  call_start(v, base, dead);
  if (dead) return;
  if (!barrier(v, base + 1, sig)) return;
  call_end(v, base + 1);
}

/// Records a rejected call as this rank's failure `what` (device_failure::rejected: bad arguments;
/// launch_failed: its kernel could not be launched) (one thread; runs after this rank's earlier calls
/// on the stream, so counters[0] is their last epoch) and writes, as this rank's flag at every peer,
/// the rejected call's first epoch with rejected_signature_bits: a peer waiting there ends at once
/// (errc::aborted) instead of at its timeout, and a peer still waiting at an earlier epoch, for
/// data this rank has already staged, passes (poison_epoch would end that valid call too). Nothing
/// is written when this rank has already failed (its flags already carry poison_epoch).
/// A template only so that every .cu file may include this header (one definition per program).
template <int = 0>
__global__ void reject_kernel(device_view v, device_failure what) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const std::uint64_t next = counters_of(v)[0] + 1;
  if (record_failure(v, claim_unpoisoned, what, -1, next, 0, 0, 0)) flag_all_peers(v, flag_word(next, {rejected_signature_bits}));
}

template <auto Kernel>
void load_kernel(int device) noexcept;

/// Registers load_kernel<Kernel> with the program's kernel registry (cuda/kernel_registry.hpp)
/// during static initialization, so that every device communicator loads the kernel when it is
/// created: instantiated by load_kernel<Kernel> itself, which every launch path calls for each
/// kernel it may launch.
template <auto Kernel>
inline const kernel_registration kernel_registered{&load_kernel<Kernel>};

/// Loads `Kernel` into the context of `device` (the current device) now, if this process has not
/// yet. Under CUDA's lazy loading (the default since CUDA 12.2: CUDA_MODULE_LOADING=LAZY) a
/// kernel's code is loaded at its first launch, and loading may synchronise the whole context:
/// it waits for every kernel running there. Where ranks share a context (ranks as threads on one
/// GPU), a peer's kernel of the same call spins until this rank's kernel runs, so a launch that
/// loads waits for a kernel that waits for it, until the peer's timeout. Two loads guard
/// against it: the device communicator loads every registered kernel when it is created
/// (kernel_registered; this covers a rank whose call launches other kernels than its peers',
/// e.g. with count 0 or on the other side of a form's threshold, and calls pipelined with a new
/// type along the way), and every call loads, before it launches, every kernel any rank may
/// launch for it (load_kernels: for code loaded after the communicator, e.g. by dlopen).
/// cudaFuncGetAttributes loads the kernel (as NCCL does for its kernels at init). A failure is
/// not reported here (a kernel that cannot load fails at its launch, which reports it) and is
/// cleared, not left for the caller's cudaGetLastError(): it may be of a width this rank does not
/// launch. The bits are per process and device: after cudaDeviceReset they are stale.
template <auto Kernel>
void load_kernel(int device) noexcept {
  (void)&kernel_registered<Kernel>;  // instantiates the registration
  static std::atomic<std::uint64_t> loaded{0};  // bit d: loaded into device d's (primary) context
  const std::uint64_t bit = device >= 0 && device < 64 ? std::uint64_t{1} << device : 0;
  if (bit != 0 && (loaded.load(std::memory_order_acquire) & bit) != 0) return;
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, Kernel) == cudaSuccess) loaded.fetch_or(bit, std::memory_order_release);
  else (void)cudaGetLastError();  // this query's own (it overwrote any error the caller left unread, as check_own)
}

/// load_kernel for each of `Kernels`, and for the kernels any rank may launch into a call it
/// waits in (a rank that moves nothing, a rank that rejects the call), on dc's device, which must
/// be current (scoped_device).
template <auto... Kernels>
void load_kernels(const device_communicator& dc) noexcept {
  (load_kernel<Kernels>(dc.device()), ...);
  load_kernel<&empty_call_kernel<>>(dc.device());
  load_kernel<&reject_kernel<>>(dc.device());
}

/// Ends the communicator for every rank because this rank gives up a call it has not enqueued
/// (`what`: rejected for its arguments, or launch_failed): reject_kernel on `stream` after this
/// rank's earlier calls, so that the peers' same call ends at once, and the failure recorded on
/// the host, so that this rank's later calls fail at check(). Any CUDA error on the way is
/// cleared (the caller throws its own). During stream capture nothing can be launched for the
/// peers (the kernel would only join the graph): the peers' graphs wait at this call until their
/// timeout. Nothing is launched either when this rank has failed already.
/// @return whether the peers were told (reject_kernel enqueued)
inline bool end_for_peers(device_communicator& dc, cudaStream_t stream, device_failure what) noexcept {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  const scoped_device restore;  // the caller's current device, whatever happens below
  bool told = false;
  if (!dc.failed() && cudaSetDevice(dc.device()) == cudaSuccess &&
      cudaStreamIsCapturing(stream, &capturing) == cudaSuccess && capturing == cudaStreamCaptureStatusNone) {
    const device_communicator::capture_state none{};  // checked just above
    if (dc.order_after_previous_call(stream, none) == cudaSuccess &&
        launch_status(&reject_kernel<>, 1, 32, stream, dc.view(), what) == cudaSuccess) {
      dc.record_call(stream, none);
      told = true;
    }
  }
  if (!told) (void)cudaGetLastError();  // the caller's error is the one to report
  dc.mark_failed(what);
  return told;
}

/// Launches kernel(args...) as `blocks` blocks of `threads` threads on `stream` (launch_kernel),
/// after dc's previous call when that went on another stream, and marks it as dc's latest call
/// (device_communicator::order_after_previous_call, record_call).
/// When the wait or the launch fails, the call ends the communicator for every rank as a rejected
/// call does (end_for_peers with device_failure::launch_failed): the peers, whose kernels for the
/// same call are out already, end at once instead of waiting for this rank until their timeout.
/// @throws collx::error (errc::cuda) naming `what` when the wait or the launch cannot be enqueued.
template <class... Params, class... Args>
void launch_in_order(device_communicator& dc, const char* what, void (*kernel)(Params...), unsigned blocks,
                     unsigned threads, cudaStream_t stream, Args&&... args) {
  const device_communicator::capture_state capture = device_communicator::capture_of(stream);
  cudaError_t status = dc.order_after_previous_call(stream, capture);
  if (status == cudaSuccess) status = launch_status(kernel, blocks, threads, stream, std::forward<Args>(args)...);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // this wait's or launch's own: the exception carries it
    // "This launch": a call of two launches (two-shot) may have its first kernel enqueued, still
    // using the buffers until the stream reaches it.
    const bool told = end_for_peers(dc, stream, device_failure::launch_failed);
    check(status, (std::string(what) + " (this launch enqueued nothing; the communicator has failed" +
                   (told ? ", and its peers end this call at once)" : "; its peers could not be told and end this call at their timeout)"))
                      .c_str());
  }
  dc.record_call(stream, capture);
}

/// Launches empty_call_kernel for a call signed `sig` (the peers' signature of the same call with
/// count 0: device_signature::make with count 0 and no layout).
inline void launch_empty_call(device_communicator& dc, const char* name, device_signature sig, cudaStream_t stream) {
  dc.check();
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  static_assert(max_device_world <= 32, "barrier() gives each peer one thread of the block");
  load_kernels<>(dc);
  launch_in_order(dc, name, &empty_call_kernel<>, 1, 32, stream, dc.view(), sig);
}

/// True when p is 16-byte aligned.
inline bool aligned16(const void* p) noexcept { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }


/// Launches one staged call. The chunks and block ranges always use the type's vector width, so
/// every rank cuts the call the same way whatever its pointers' alignment; `vector_ok` (this rank's
/// pointers allow 16-byte accesses) only picks the kernel's access width.
/// `layout`: a v-form's hash of the counts (0 otherwise), part of the signature.
template <class T, class Scalar, class Vectored>
void launch_call(device_communicator& dc, const char* name, collective coll, std::string_view op_name, int root,
                 std::size_t count, std::size_t rows, bool vector_ok, cudaStream_t stream, const Scalar& scalar,
                 const Vectored& vectored, std::uint64_t layout = 0) {
  dc.check();
  const auto sig = device_signature::make(coll, detail::type_name<T>(), sizeof(T), op_name, root, count, layout);
  constexpr std::size_t V = device_vector_elements<T>;
  const chunk_plan plan = plan_chunks(count, sizeof(T), rows, V, dc.slot_bytes(), dc.block_limit());
  if (plan.chunks == 0) return;
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  load_kernels<&collective_kernel<Scalar>, &collective_kernel<Vectored>>(dc);  // whichever a peer launches
  if (V > 1 && vector_ok)
    launch_in_order(dc, name, &collective_kernel<Vectored>, plan.blocks, device_threads_per_block, stream, dc.view(), plan, sig, vectored);
  else launch_in_order(dc, name, &collective_kernel<Scalar>, plan.blocks, device_threads_per_block, stream, dc.view(), plan, sig, scalar);
}

/// The signature layout of a call on window `w` at element `offset`: ranks that pass other windows
/// or offsets make different calls.
inline std::uint64_t window_layout(const window& w, std::size_t offset) noexcept { return (std::uint64_t{w.id} << 40) ^ offset; }

/// Launches one zero-copy call on window `w` at element `offset` (same on every rank: part of the
/// signature, with the window id).
template <class T, class Scalar, class Vectored>
void launch_direct(device_communicator& dc, const char* name, collective coll, std::string_view op_name, int root,
                   std::size_t count, const window& w, std::size_t offset, bool vector_ok, cudaStream_t stream,
                   const Scalar& scalar, const Vectored& vectored) {
  dc.check();
  const auto sig = device_signature::make(coll, detail::type_name<T>(), sizeof(T), op_name, root, count, window_layout(w, offset));
  constexpr std::size_t V = device_vector_elements<T>;
  const chunk_plan plan = plan_direct(count, V, dc.block_limit());
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  load_kernels<&direct_kernel<Scalar>, &direct_kernel<Vectored>>(dc);  // whichever a peer launches
  if (V > 1 && vector_ok)
    launch_in_order(dc, name, &direct_kernel<Vectored>, plan.blocks, device_threads_per_block, stream, dc.view(), plan, sig, vectored);
  else launch_in_order(dc, name, &direct_kernel<Scalar>, plan.blocks, device_threads_per_block, stream, dc.view(), plan, sig, scalar);
}

/// The per-rank source pointers of a window at element `offset`.
template <class T>
void window_sources(const window& w, std::size_t offset, const T* (&src)[max_device_world]) {
  for (int r = 0; r < max_device_world; ++r)
    src[r] = r < w.world ? reinterpret_cast<const T*>(w.base[static_cast<std::size_t>(r)]) + offset : nullptr;
}

/// The step of a zero-copy call with its sources filled in from the window.
template <class T, class Step>
Step with_sources(Step step, const window& win, std::size_t offset) {
  window_sources<T>(win, offset, step.src);
  return step;
}

/// Two-shot all-reduce (direct_form::two_shot): a reduce_scatter_v step folds this rank's piece
/// (two_shot_pieces) of every rank's input into the same piece of recv, then an all_gather_v step
/// in place fills the rest of recv from the peers' pieces. In place (send == recv) is safe: each
/// chunk stages every row's columns before its block writes this rank's row of those columns, and
/// later chunks read other columns. Both launches sign as all-reduces with the pieces' hash and the
/// phase, so a rank that runs one-shot against a two-shot peer fails with errc::mismatch.
/// `vector_ok`: send and recv are 16-byte aligned (the pieces start on vector boundaries).
template <class T, class Op>
void launch_two_shot_all_reduce(device_communicator& dc, const char* name, const T* send, T* recv, std::size_t count,
                                const Op& op, bool vector_ok, cudaStream_t stream) {
  constexpr std::size_t V = device_vector_elements<T>;
  const v_layout lay = two_shot_pieces(count, dc.size(), V);
  T* piece = recv + lay.displs[dc.rank()];
  const auto key = detail::op_signature_key<Op>();
  {  // both launches' kernels before the first: the second must not load while the first waits
    const scoped_device on_device(dc.device(), name);
    load_kernels<&collective_kernel<reduce_scatter_v_step<T, Op, 1>>, &collective_kernel<reduce_scatter_v_step<T, Op, V>>,
                 &collective_kernel<all_gather_v_step<T, 1>>, &collective_kernel<all_gather_v_step<T, V>>>(dc);
  }
  launch_call<T>(dc, name, collective::allreduce, key, -1, lay.longest, static_cast<std::size_t>(dc.size()), vector_ok,
                 stream, reduce_scatter_v_step<T, Op, 1>{send, piece, op, lay},
                 reduce_scatter_v_step<T, Op, V>{send, piece, op, lay}, two_shot_layout(lay, 0));
  launch_call<T>(dc, name, collective::allreduce, key, -1, lay.longest, 1, vector_ok, stream,
                 all_gather_v_step<T, 1>{piece, recv, lay}, all_gather_v_step<T, V>{piece, recv, lay}, two_shot_layout(lay, 1));
}

// ---------------------------------------------------------------------------------------------
// Ring forms (algo::ring; the plan and the order of combination are in cuda/ring_plan.hpp). Step s
// of a chunk reads the piece the ring predecessor staged at the step's epoch - 1, combines it with
// this rank's input or copies it, writes it to the output where the step completes it, stages the
// result in this rank's slot for the epoch, and meets the ring neighbours. A rank writes its slot
// for epoch e only after the barrier of epoch e - 1, which its successor (the only reader of that
// slot) passes only after reading what it staged at e - 2; the call's first barrier meets every
// rank, since a non-neighbour may still be reading this rank's slot from a direct call before.

/// The op of an all_gather ring (nothing is combined).
struct no_reduction {};

/// A load (bypassing L1: a peer's staging) and a store of W, a vec of 16 or 32 bytes, as 16-byte
/// words (the accumulator vector of a 2-byte type is 32 bytes).
template <class W>
__device__ inline W load_words_cg(const void* p) {
  static_assert(sizeof(W) % 16 == 0);
  uint4 w[sizeof(W) / 16];
  for (std::size_t i = 0; i < sizeof(W) / 16; ++i) w[i] = __ldcg(static_cast<const uint4*>(p) + i);
  W out;
  std::memcpy(&out, w, sizeof(W));
  return out;
}
template <class W>
__device__ inline void store_words(void* p, const W& x) {
  static_assert(sizeof(W) % 16 == 0);
  uint4 w[sizeof(W) / 16];
  std::memcpy(w, &x, sizeof(W));
  for (std::size_t i = 0; i < sizeof(W) / 16; ++i) static_cast<uint4*>(p)[i] = w[i];
}

/// The type a ring stages partial folds in: the op's accumulator (T itself for all_gather).
template <class T, class Op>
struct ring_types {
  using acc = typename detail::reduction<T, Op>::acc;
};
template <class T>
struct ring_types<T, no_reduction> {
  using acc = T;
};

/// One ring step over the block's range `r` of a piece: `in` = this rank's input of the piece,
/// `out` = its output, `prev` = the block's region (ring_plan::region_offset) of the predecessor's
/// slot (staged at the previous epoch), `own` = its region of this rank's slot for this step's
/// epoch; element j of the piece sits at index j - `first` of a region (ring_plan::region_first).
template <class T, class Op, std::size_t V>
__device__ inline void ring_move(const ring_step& st, block_range r, const T* in, T* out, const std::byte* prev,
                                 std::byte* own, std::size_t region_first, const Op& op, int world) {
  constexpr bool reduces = !std::is_same_v<Op, no_reduction>;
  using acc = typename ring_types<T, Op>::acc;
  const bool fold = reduces && st.read_input;  // a reduce-scatter step (all_gather's first step only copies)
  const bool write_out = st.write_output && !(st.read_input && !fold && in == out);  // in-place all_gather: already there
  const acc* prev_acc = reinterpret_cast<const acc*>(prev);
  const T* prev_t = reinterpret_cast<const T*>(prev);
  acc* own_acc = reinterpret_cast<acc*>(own);
  T* own_t = reinterpret_cast<T*>(own);
  if constexpr (reduces)  // never taken: an op without a __device__ call operator fails to compile here
    if (r.begin == ~std::size_t{0}) require_device_callable<T>(op, *out);
  // Element j's final value t, written where the step says.
  const auto emit = [&](std::size_t j, const T& t) {
    if (write_out) out[j] = t;
    if (st.stage) own_t[j - region_first] = t;
  };
  constexpr unsigned U = fold_unroll;
  for_each_in<V, U>(
      r,
      [&](std::size_t first, unsigned n) {
        if constexpr (V > 1) {
          using VT = vec<T, V>;
          using VA = vec<acc, V>;
          VT x[U];
          VA a[U];
#pragma unroll
          for (unsigned u = 0; u < U; ++u)
            if (u < n) {
              const std::size_t j = (first + u * blockDim.x) * V;
              if (st.read_input) x[u] = load_vec<T, V>(in + j);
              if (st.read_prev) {
                if (fold) a[u] = load_words_cg<VA>(prev_acc + (j - region_first));
                else x[u] = load_words_cg<VT>(prev_t + (j - region_first));
              }
            }
#pragma unroll
          for (unsigned u = 0; u < U; ++u)
            if (u < n) {
              const std::size_t j = (first + u * blockDim.x) * V;
              if constexpr (reduces) {
                using red = detail::reduction<T, Op>;
                if (fold) {
                  for (std::size_t k = 0; k < V; ++k)
                    a[u].e[k] = st.read_prev ? red::combine(op, a[u].e[k], red::widen(x[u].e[k])) : red::widen(x[u].e[k]);
                  if (st.partial) {
                    store_words(own_acc + (j - region_first), a[u]);
                    continue;
                  }
                  for (std::size_t k = 0; k < V; ++k) x[u].e[k] = red::finalize(a[u].e[k], world);
                }
              }
              if (write_out) store_vec<T, V>(out + j, x[u]);
              if (st.stage) store_vec<T, V>(own_t + (j - region_first), x[u]);
            }
        }
      },
      [&](std::size_t j) {
        if constexpr (reduces) {
          if (fold) {
            using red = detail::reduction<T, Op>;
            acc a = red::widen(in[j]);
            if (st.read_prev) a = red::combine(op, load_cg(prev_acc + (j - region_first)), a);
            if (st.partial) own_acc[j - region_first] = a;
            else emit(j, red::finalize(a, world));
            return;
          }
        }
        emit(j, st.read_prev ? load_cg(prev_t + (j - region_first)) : in[j]);
      });
}

static_assert(sizeof(device_view) + sizeof(ring_call) <= 4096 - 512,
              "ring_kernel's parameters must stay within CUDA's 4 KiB, with room for the op");
/// A ring call in one launch: each block runs its channel's (ring_call::channel_of) chunks, steps
/// 0 .. steps() each (ring_plan::step), each but the last followed by a barrier with the channel's
/// ring neighbours (every rank at the call's first epoch). Chunk c's epochs are the call's
/// whatever the channel: a channel with fewer chunks than call.chunks only meets its neighbours
/// in the chunks it lacks, so that its last read is over before any rank's next call restages
/// the slot (that read's parity may be the one the next call stages first, when steps() is odd).
/// V: the access width (1 where this rank's pointers do not allow 16-byte accesses). The plans
/// stay in parameter memory (__grid_constant__: indexed by channel, not copied per thread).
template <class T, class Op, std::size_t V>
__global__ void __launch_bounds__(device_threads_per_block, device_blocks_per_sm)
    ring_kernel(device_view v, const __grid_constant__ ring_call call, device_signature sig, const T* src, T* dst, Op op) {
  __shared__ std::uint64_t base;
  __shared__ int dead;
  call_start(v, base, dead);
  if (dead) return;
  const ring_plan& plan = call.channel[call.channel_of(blockIdx.x)];
  const unsigned block = blockIdx.x - plan.first_block, steps = plan.steps();
  const std::size_t region = plan.region_offset(block), first = plan.region_first(block);
  for (std::size_t c = 0; c < call.chunks; ++c)
    for (unsigned s = 0; s <= steps; ++s) {
      const ring_step st = plan.step(s);
      const std::uint64_t epoch = base + c * steps + s + 1;  // what this step stages (s < steps)
      if (c < plan.chunks) {
        const piece_span sp = plan.span(c, st.piece);
        ring_move<T, Op, V>(st, plan.range(sp.length, block), src + plan.input_offset(c, st.piece), dst + plan.output_offset(c, st.piece),
                            slot_of<std::byte>(v, plan.prev, epoch - 1) + region, slot_for<std::byte>(v, plan.next, epoch) + region,
                            first, op, v.world);
      }
      if (st.stage && !barrier(v, epoch, sig, ring_barrier_peers(plan, v.rank, epoch, base + 1))) return;
    }
  call_end(v, base + call.chunks * steps);
}

/// Launches one ring call of `phase` (count as ring_plan::count), signed `sig` (ring_signature). A
/// world of one has no ring: the caller runs the direct form. `vector_ok`: this rank's buffers and
/// offsets allow 16-byte accesses.
template <class T, class Op>
void launch_ring(device_communicator& dc, const char* name, ring_phase phase, device_signature sig, std::size_t count,
                 const T* send, T* recv, const Op& op, bool vector_ok, cudaStream_t stream) {
  dc.check();
  constexpr std::size_t V = device_vector_elements<T>;
  using acc = typename ring_types<T, Op>::acc;
  const ring_call call =
      plan_ring_call(phase, dc.rings(), dc.rank(), count, std::max(sizeof(T), sizeof(acc)), V, dc.slot_bytes(), dc.block_limit());
  if (call.chunks == 0) return;
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  load_kernels<&ring_kernel<T, Op, V>, &ring_kernel<T, Op, 1>>(dc);  // whichever a peer launches
  if (V > 1 && vector_ok)
    launch_in_order(dc, name, &ring_kernel<T, Op, V>, call.blocks, device_threads_per_block, stream, dc.view(), call, sig, send, recv, op);
  else launch_in_order(dc, name, &ring_kernel<T, Op, 1>, call.blocks, device_threads_per_block, stream, dc.view(), call, sig, send, recv, op);
}

// ---------------------------------------------------------------------------------------------
// Point-to-point (send, recv, send_recv). A message is cut into chunks of half a slot; block b of
// the sender and block b of the receiver move the same range of each chunk (the same offsets of a
// half in every chunk: range_in_chunk). The sender's block publishes the message's size in the
// receiver's p2p_size row, copies its range of chunk k (the pair's sequence number: p2p_sent,
// counted since the communicator began) into half k % 2 of its own p2p staging and sets its ready
// flag at the receiver to flag_word(k, signature); the receiver's block waits for it, checks the
// size on the first chunk, copies the range out of the sender's half and sets its ack flag at the
// sender. Within a message the sender refills half k % 2 only after the ack of chunk k - 2; a send
// ends only once every block's last chunk is acked, so both halves are free when the next message
// (to any peer) starts. A block never blocks on one direction: it polls its send's ack and its
// recv's ready flag in turn and moves whichever can move, so a send_recv pairs with a peer's
// recv-then-send, send-then-recv or send_recv alike. Collectives never touch the p2p staging or
// flags, so messages and collectives interleave in any order the ranks agree on.

/// One side of a point-to-point launch: a send to `peer` (src) or a recv from it (dst); peer < 0:
/// none.
template <class T>
struct p2p_part {
  const T* src = nullptr;
  T* dst = nullptr;
  int peer = -1;
  chunk_plan plan{};
  device_signature sig{};
  std::uint64_t size_word = 0;  ///< p2p_message_word(count, sizeof(T))
};

/// Ends this rank's point-to-point call with a failure and tells the peers: a rank waiting on this
/// one in a message (a pipeline a <- b <- c) or in its next collective learns of it through this
/// rank's collective flags, which get the rejection mark at this rank's next epoch (what
/// reject_kernel writes), not poison: peers still finishing earlier collectives with this rank,
/// whose data it staged already, are not cut short.
__device__ inline void p2p_fail(const device_view& v, device_failure what, int peer, std::uint64_t seq, std::uint64_t seen,
                                std::uint32_t theirs, std::uint32_t mine, device_activity during, std::uint64_t expected = 0) {
  const std::uint64_t next = counters_of(v)[0] + 1;
  if (record_failure(v, claim_unpoisoned, what, peer, seq, seen, theirs, mine, during, expected))
    flag_all_peers(v, flag_word(next, {rejected_signature_bits}));
}

/// What a block does next in p2p_kernel (bits).
enum p2p_step : int { p2p_send_chunk = 1, p2p_recv_chunk = 2, p2p_send_acked = 4, p2p_done = 8, p2p_stop = 16 };

/// Thread 0 of a p2p_kernel block: polls until the block can send its next chunk (the half it
/// refills is back: chunk k - 2 of this message acked), take its next recv chunk (the sender's
/// ready flag reached it with the same signature; on the first chunk also the same exact size),
/// learns that its send's last chunk was acked, or is done, and returns that (p2p_step bits).
/// Returns p2p_stop after p2p_fail: a size or signature mismatch, no progress for the
/// communicator's timeout, or a peer of a direction still pending that gave up (its collective
/// flags carry poison or the rejection mark; one more look at the p2p flags first, which it wrote
/// before giving up if it ever did). Also p2p_stop when another block of this rank failed.
template <class T>
__device__ int p2p_next(const device_view& v, const p2p_part<T>& send, const p2p_part<T>& recv, std::size_t send_chunks,
                        std::size_t recv_chunks, std::uint64_t sent, std::uint64_t received, std::size_t ks, std::size_t kr,
                        bool send_acked) {
  const std::size_t row = std::size_t{blockIdx.x} * max_device_world;
  const std::size_t cell_send = row + static_cast<std::size_t>(send.peer < 0 ? 0 : send.peer);
  const std::size_t cell_recv = row + static_cast<std::size_t>(recv.peer < 0 ? 0 : recv.peer);
  // The tables the peers write to this rank, where each writes them (device_view::inbox).
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> ack(
      reinterpret_cast<std::uint64_t*>(v.inbox[send.peer < 0 ? v.rank : send.peer] + v.p2p_ack_offset)[cell_send]);
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system> ready(
      reinterpret_cast<std::uint64_t*>(v.inbox[recv.peer < 0 ? v.rank : recv.peer] + v.p2p_ready_offset)[cell_recv]);
  cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device> claim(*claim_of(v));
  const bool sends = send_chunks > 0;
  std::uint64_t start = 0;
  int gone = -1;  // 0: the send's peer gave up, 1: the recv's (one more look, then fail)
  for (unsigned polls = 0;; ++polls) {
    int step = 0;
    if (ks < send_chunks && (ks < 2 || judge_p2p_flag(ack.load(cuda::memory_order_acquire), sent + ks - 1, send.sig, false) ==
                                           flag_verdict::pass))
      step |= p2p_send_chunk;
    if (sends && ks == send_chunks && !send_acked) {  // the last chunk taken: the halves are free
      const std::uint64_t w = ack.load(cuda::memory_order_acquire);
      const flag_verdict verdict = judge_p2p_flag(w, sent + send_chunks, send.sig, true);
      if (verdict == flag_verdict::mismatch) {
        p2p_fail(v, device_failure::mismatch, send.peer, sent + send_chunks, w, flag_signature(w).bits, send.sig.bits,
                 device_activity::send);
        return p2p_stop;
      }
      if (verdict == flag_verdict::pass) step |= p2p_send_acked;
    }
    if (kr < recv_chunks) {
      const std::uint64_t w = ready.load(cuda::memory_order_acquire);
      const flag_verdict verdict = judge_p2p_flag(w, received + kr + 1, recv.sig, true);
      if (verdict != flag_verdict::wait && kr == 0) {  // the message's exact size, published before this flag
        const std::uint64_t theirs =
            cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(
                reinterpret_cast<std::uint64_t*>(v.inbox[recv.peer] + v.p2p_size_offset)[cell_recv])
                .load(cuda::memory_order_relaxed);
        if (theirs != recv.size_word) {
          p2p_fail(v, device_failure::message_size, recv.peer, received + 1, theirs, 0, 0, device_activity::recv, recv.size_word);
          return p2p_stop;
        }
      }
      if (verdict == flag_verdict::mismatch) {  // the same size, another element type
        p2p_fail(v, device_failure::mismatch, recv.peer, received + kr + 1, w, flag_signature(w).bits, recv.sig.bits,
                 device_activity::recv);
        return p2p_stop;
      }
      if (verdict == flag_verdict::pass) step |= p2p_recv_chunk;
    }
    const bool send_pending = sends && !(send_acked || (step & p2p_send_acked));
    const bool recv_pending = kr < recv_chunks;
    if (step) return step | (!send_pending && !recv_pending && !(step & (p2p_send_chunk | p2p_recv_chunk)) ? p2p_done : 0);
    if (!send_pending && !recv_pending) return p2p_done;
    if (gone >= 0) {  // that peer gave up and its p2p flags said nothing more
      const bool on_recv = gone == 1;
      p2p_fail(v, device_failure::peer_failed, on_recv ? recv.peer : send.peer, on_recv ? received + kr + 1 : sent + ks, 0, 0,
               (on_recv ? recv.sig : send.sig).bits, on_recv ? device_activity::recv : device_activity::send);
      return p2p_stop;
    }
    if ((polls & 255) == 255) {
      if (claim.load(cuda::memory_order_relaxed) != 0) return p2p_stop;  // another block of this rank failed
      for (int side = 0; side < 2 && gone < 0; ++side) {  // only the peers of directions still pending
        const int peer = side == 0 ? send.peer : recv.peer;
        if (!(side == 0 ? send_pending : recv_pending)) continue;
        const std::uint64_t c = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(
                                    flags_from(v, peer)[row + static_cast<std::size_t>(peer)])
                                    .load(cuda::memory_order_acquire);
        if (flag_epoch(c) == poison_epoch || flag_signature(c).bits == rejected_signature_bits) gone = side;
      }
      if (gone >= 0) continue;
      const std::uint64_t now = global_timer_ns();
      if (start == 0) start = now;
      else if (now - start > v.timeout_ns) {
        const bool on_recv = recv_pending;
        p2p_fail(v, device_failure::timeout, on_recv ? recv.peer : send.peer,
                 on_recv ? received + kr + 1 : sent + (ks < send_chunks ? ks + 1 : send_chunks),
                 on_recv ? ready.load(cuda::memory_order_relaxed) : ack.load(cuda::memory_order_relaxed), 0,
                 (on_recv ? recv.sig : send.sig).bits, on_recv ? device_activity::recv : device_activity::send);
        return p2p_stop;
      }
      __nanosleep(64);
    }
  }
}

/// Thread 0 sets `word` (a peer's p2p flag for this rank) to flag_word(seq, sig), after the block's
/// staging reads or writes for that chunk.
__device__ inline void p2p_signal(std::uint64_t* word, std::uint64_t seq, device_signature sig) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(*word).store(flag_word(seq, sig), cuda::memory_order_release);
  }
}

/// A send, a recv, or both (send_recv) in one launch of max(send blocks, recv blocks) blocks; each
/// block moves its range of both messages as p2p_next allows. V: the access width (1 where this
/// rank's pointers do not allow 16-byte accesses; the cut is the same).
template <class T, std::size_t V>
__global__ void __launch_bounds__(device_threads_per_block, device_blocks_per_sm)
    p2p_kernel(device_view v, p2p_part<T> send, p2p_part<T> recv) {
  __shared__ std::uint64_t sent, received;
  __shared__ int dead, step;
  if (threadIdx.x == 0) {
    sent = send.peer >= 0 ? p2p_sent_of(v)[send.peer] : 0;
    received = recv.peer >= 0 ? p2p_received_of(v)[recv.peer] : 0;
    dead = cuda::atomic_ref<std::uint64_t, cuda::thread_scope_device>(*claim_of(v)).load(cuda::memory_order_relaxed) != 0;
  }
  __syncthreads();
  if (dead) return;
  const unsigned b = blockIdx.x;
  const std::size_t send_chunks = send.peer >= 0 && b < send.plan.blocks ? send.plan.chunks : 0;
  const std::size_t recv_chunks = recv.peer >= 0 && b < recv.plan.blocks ? recv.plan.chunks : 0;
  const std::size_t cell = std::size_t{b} * max_device_world + static_cast<std::size_t>(v.rank);
  if (send_chunks > 0 && threadIdx.x == 0)  // the size, before the first ready flag (its release orders it)
    cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(
        reinterpret_cast<std::uint64_t*>(v.workspace[send.peer] + v.p2p_size_offset)[cell])
        .store(send.size_word, cuda::memory_order_relaxed);
  std::size_t ks = 0, kr = 0;  // chunks sent and taken by this block, the same in every thread
  bool send_acked = false;     // the send's last chunk taken by the receiver
  for (;;) {
    if (threadIdx.x == 0) step = p2p_next(v, send, recv, send_chunks, recv_chunks, sent, received, ks, kr, send_acked);
    __syncthreads();
    const int s = step;
    if (s & p2p_stop) return;
    if (s & p2p_send_acked) send_acked = true;
    if (s & p2p_send_chunk) {
      const std::uint64_t seq = sent + ks + 1;
      copy_range<T, V, false>(range_in_chunk(send.plan, ks, b), send.src + send.plan.chunk_begin(ks), p2p_half_for<T>(v, send.peer, seq));
      p2p_signal(p2p_ready_of(v, send.peer) + cell, seq, send.sig);
      ++ks;
    }
    if (s & p2p_recv_chunk) {
      const std::uint64_t seq = received + kr + 1;
      copy_range<T, V, true>(range_in_chunk(recv.plan, kr, b), p2p_half_of<T>(v, recv.peer, seq), recv.dst + recv.plan.chunk_begin(kr));
      p2p_signal(p2p_ack_of(v, recv.peer) + cell, seq, recv.sig);
      ++kr;
    }
    __syncthreads();  // every thread has read `step` before thread 0 writes the next
    if (s & p2p_done) break;
  }
  // The last block done advances the pair counts (counters[1] counts blocks, as in call_end).
  __syncthreads();
  unsigned long long* counters = counters_of(v);
  if (threadIdx.x == 0 && atomicAdd(&counters[1], 1ull) == gridDim.x - 1) {
    counters[1] = 0;
    if (send.peer >= 0) p2p_sent_of(v)[send.peer] += send.plan.chunks;
    if (recv.peer >= 0) p2p_received_of(v)[recv.peer] += recv.plan.chunks;
  }
}

/// The plan of one side of a point-to-point call (peer -1 or count 0: none). Sender and receiver
/// plan alike from the count and type, so their blocks and chunks match.
/// @throws collx::error (errc::invalid_argument) when half a staging slot cannot hold one vector of T.
template <class T>
p2p_part<T> p2p_side(const device_communicator& dc, const T* src, T* dst, std::size_t count, int peer) {
  p2p_part<T> p;
  if (peer < 0 || count == 0) return p;
  p.src = src;
  p.dst = dst;
  p.peer = peer;
  p.plan = plan_chunks(count, sizeof(T), 1, device_vector_elements<T>, dc.slot_bytes() / 2, dc.block_limit());
  p.sig = device_signature::make(collective::send_recv, detail::type_name<T>(), sizeof(T), "", -1, count);
  p.size_word = p2p_message_word(count, sizeof(T));
  return p;
}

/// Launches a point-to-point call (nothing when neither side moves data).
template <class T>
void launch_p2p(device_communicator& dc, const char* name, const p2p_part<T>& send, const p2p_part<T>& recv, bool vector_ok,
                cudaStream_t stream) {
  dc.check();
  if (send.peer < 0 && recv.peer < 0) return;
  const unsigned blocks = std::max(send.peer >= 0 ? send.plan.blocks : 0u, recv.peer >= 0 ? recv.plan.blocks : 0u);
  constexpr std::size_t V = device_vector_elements<T>;
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  load_kernels<&p2p_kernel<T, V>, &p2p_kernel<T, 1>>(dc);  // whichever the peer launches
  if (V > 1 && vector_ok) launch_in_order(dc, name, &p2p_kernel<T, V>, blocks, device_threads_per_block, stream, dc.view(), send, recv);
  else launch_in_order(dc, name, &p2p_kernel<T, 1>, blocks, device_threads_per_block, stream, dc.view(), send, recv);
}

/// The argument checks of one call. A check that fails rejects the call as the host collectives
/// do: the communicator ends for every rank (reject_kernel on the call's stream, after this rank's
/// earlier calls), then collx::error (errc::invalid_argument) names the call and the problem.
/// Nothing of the call itself is enqueued; this rank's later calls fail at once (the failure is
/// recorded on the host too). During stream capture nothing can be launched for the peers (the
/// kernel would only join the graph): the call still throws, and the peers' graphs wait at this
/// call until their timeout.
struct call_check {
  device_communicator& dc;
  cudaStream_t stream;
  const char* name;

  /// Rejects the call with `what` (without the call's name).
  [[noreturn]] void reject(const std::string& what) const {
    end_for_peers(dc, stream, device_failure::rejected);
    COLLX_THROW(errc::invalid_argument, std::string(name) + ": " + what);
  }
  /// Enqueues the call of a rank that moves nothing (launch_empty_call), signed as its peers sign
  /// the same call with count 0.
  template <class T>
  void nothing_to_move(collective coll, std::string_view op_name, int root = -1) const {
    launch_empty_call(dc, name, device_signature::make(coll, detail::type_name<T>(), sizeof(T), op_name, root, 0), stream);
  }
  void require(bool ok, const std::string& what) const {
    if (!ok) reject(what);
  }
  /// `count` elements of T, `rows` times over (one block per rank), fit in memory (PTRDIFF_MAX
  /// bytes, as the v-forms' counts): a negative count converted to std::size_t is rejected here
  /// instead of wrapping the byte counts the overlap checks and the kernels use.
  template <class T>
  void fits(std::size_t count, std::size_t rows = 1) const {
    require(count <= static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(T) / rows,
            "count " + std::to_string(count) + (rows > 1 ? " times " + std::to_string(rows) + " ranks" : std::string()) +
                " is more than memory holds (a negative count converted to std::size_t?)");
  }
  /// all_reduce's buffers: given, and the same or apart. False when the call moves nothing.
  template <class T>
  bool all_reduce_buffers(const T* send, const T* recv, std::size_t count) const {
    if (count == 0) return false;
    fits<T>(count);
    require(send && recv, "null buffer with count " + std::to_string(count));
    require(send == recv || !ranges_overlap(send, count * sizeof(T), recv, count * sizeof(T)),
            "send and recv overlap but are not the same buffer");
    return true;
  }
  /// reduce_scatter's buffers (size() x recv_count and recv_count elements): given, and recv apart
  /// from send or this rank's block of it (in place, NCCL's layout: every block of send is read
  /// into the staging slots, or by this rank's own ring step, before the step that writes it).
  /// False when the call moves nothing.
  template <class T>
  bool reduce_scatter_buffers(const T* send, const T* recv, std::size_t recv_count) const {
    if (recv_count == 0) return false;
    const std::size_t n = static_cast<std::size_t>(dc.size());
    fits<T>(recv_count, n);
    require(send && recv, "null buffer with count " + std::to_string(recv_count));
    require(recv == send + static_cast<std::size_t>(dc.rank()) * recv_count ||
                !ranges_overlap(send, n * recv_count * sizeof(T), recv, recv_count * sizeof(T)),
            "recv overlaps send but is not this rank's block of it");
    return true;
  }
  /// all_gather's buffers (send_count and size() x send_count elements): given, and send apart
  /// from recv or this rank's block of it (in place). False when the call moves nothing.
  template <class T>
  bool all_gather_buffers(const T* send, const T* recv, std::size_t send_count) const {
    if (send_count == 0) return false;
    const std::size_t n = static_cast<std::size_t>(dc.size());
    fits<T>(send_count, n);
    require(send && recv, "null buffer with count " + std::to_string(send_count));
    require(send == recv + static_cast<std::size_t>(dc.rank()) * send_count ||
                !ranges_overlap(send, send_count * sizeof(T), recv, n * send_count * sizeof(T)),
            "send overlaps recv but is not this rank's block of it");
    return true;
  }
  /// `root` is a rank of the communicator.
  void root(int r) const {
    require(r >= 0 && r < dc.size(), "root " + std::to_string(r) + " is not a rank of this communicator of " + std::to_string(dc.size()));
  }
  /// `peer` is a rank of the communicator; another rank unless `self_ok` (a send to itself would
  /// wait for a recv queued behind it on the same stream; send_recv does both in one launch).
  void peer(int p, bool self_ok = false) const {
    require(p >= 0 && p < dc.size() && (self_ok || p != dc.rank()),
            "peer " + std::to_string(p) + " is not " + (self_ok ? "a" : "another") + " rank of this communicator of " +
                std::to_string(dc.size()) + (p == dc.rank() ? " (a send to itself: use send_recv or cudaMemcpyAsync)" : ""));
  }
  /// One side of a point-to-point call (p2p_side), or the call rejected (half a slot too small for T).
  template <class T>
  p2p_part<T> p2p(const T* src, T* dst, std::size_t count, int peer) const {
    fits<T>(count);
    return or_reject([&] { return p2p_side<T>(dc, src, dst, count, peer); });
  }
  /// The buffers of a rooted call (reduce, broadcast): at the root, send and recv both given and
  /// either the same buffer or apart; elsewhere, `needed` (the one buffer a non-root uses) given.
  void rooted_buffers(bool is_root, const void* send, const void* recv, const void* needed, std::size_t bytes) const {
    require(is_root ? send && recv : needed != nullptr, "null buffer with " + std::to_string(bytes) + " bytes");
    require(!is_root || send == recv || !ranges_overlap(send, bytes, recv, bytes), "send and recv overlap but are not the same buffer");
  }
  /// `w` is a live window of this communicator (checked before a count of 0 returns: a foreign
  /// window is a mistake whatever the count).
  void owned(const window& w) const {
    require(dc.owns(w), "the window was not registered with this communicator, or was deregistered");
  }
  /// Elements [offset, offset + need) of type T lie in every rank's window `w` (owned() first).
  template <class T>
  void in_window(const window& w, std::size_t offset, std::size_t need) const {
    for (int r = 0; r < w.world; ++r) {
      const std::size_t fits = w.bytes[static_cast<std::size_t>(r)] / sizeof(T);  // no sum or product that wraps
      require(offset <= fits && need <= fits - offset,
              std::to_string(need) + " elements from element " + std::to_string(offset) + " run past rank " +
                  std::to_string(r) + "'s window of " + std::to_string(w.bytes[static_cast<std::size_t>(r)]) + " bytes");
    }
  }
  /// An all_to_all_v's layout of this rank's counts of T.
  template <class T>
  a2a_layout a2a(const block_counts& send_counts, const block_counts& recv_counts) const {
    for (const auto& [list, counts] : {std::pair{"send_counts", &send_counts}, std::pair{"recv_counts", &recv_counts}})
      if (const std::string bad = detail::bad_counts(list, *counts, sizeof(T)); !bad.empty()) reject(bad);
    return or_reject([&] {
      return make_a2a_layout(send_counts.values().data(), send_counts.size(), recv_counts.values().data(),
                             recv_counts.size(), dc.size(), dc.rank(), sizeof(T), name);
    });
  }
  /// A v-form's layout of `counts` of T (one per rank).
  template <class T>
  v_layout layout(const block_counts& counts) const {
    if (const std::string bad = detail::bad_counts("counts", counts, sizeof(T)); !bad.empty()) reject(bad);
    return or_reject([&] { return make_v_layout(counts.values().data(), counts.size(), dc.size(), sizeof(T), name); });
  }
  /// make(), or the call rejected with make's collx::error (its text already names the call).
  template <class Make>
  auto or_reject(Make make) const -> decltype(make()) {
    try {
      return make();
    } catch (const error& e) {
      const std::string prefix = std::string(name) + ": ", what = e.what();
      reject(what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    }
  }
};

/// gpu::send (`sending`: src, to `peer`) or gpu::recv (dst, from `peer`): the checks, then one
/// direction of p2p_kernel.
template <class T>
void one_way(device_communicator& dc, const char* name, bool sending, const T* src, T* dst, std::size_t count, int peer,
             cudaStream_t stream) {
  const call_check chk{dc, stream, name};
  chk.peer(peer);
  if (count == 0) return dc.check();
  const void* buf = sending ? static_cast<const void*>(src) : dst;
  chk.require(buf != nullptr, "null buffer with count " + std::to_string(count));
  const p2p_part<T> side = chk.p2p<T>(src, dst, count, peer);
  launch_p2p<T>(dc, name, sending ? side : p2p_part<T>{}, sending ? p2p_part<T>{} : side, aligned16(buf), stream);
}

}  // namespace device_detail

/// The algorithms all_reduce, reduce_scatter and all_gather on device memory take as an optional
/// first template argument: algo::ring (ring_kernel over dc.rings()), or algo::direct and
/// algo::automatic, which are the forms without one (one-shot / two-shot direct, or the ring from
/// device_communicator::ring_min_bytes on: device_options::ring_min_bytes, COLLX_ALGO).
template <class Algo>
concept device_algorithm = std::same_as<Algo, algo::ring> || std::same_as<Algo, algo::direct> || std::same_as<Algo, algo::automatic>;

/// all_reduce with a chosen algorithm (defined, and documented, further down).
template <device_algorithm Algo, class T, class Op = ops::sum>
void all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, const Op& op = {}, cudaStream_t stream = nullptr);
/// reduce_scatter with a chosen algorithm (defined, and documented, further down).
template <device_algorithm Algo, class T, class Op = ops::sum>
void reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, const Op& op = {},
                    cudaStream_t stream = nullptr);
/// all_gather with a chosen algorithm (defined, and documented, further down).
template <device_algorithm Algo, class T>
void all_gather(device_communicator& dc, const T* send, T* recv, std::size_t send_count, cudaStream_t stream = nullptr);

/// collx's algorithms that run on host communicators only: algo::tree and algo::hierarchical<...>.
/// Naming one for a device collective is a compile error that says so (the overloads below),
/// rather than a failed overload resolution.
template <class Algo>
concept host_only_algorithm = std::same_as<Algo, algo::tree> || is_hierarchical_v<Algo>;
namespace device_detail {
/// The callable an op wraps (commutative_op's), for the checks on it.
template <class Op>
struct unwrapped_op {
  using type = Op;
};
template <class F>
struct unwrapped_op<commutative_op<F>> {
  using type = F;
};

/// 0, nullptr or a stream wrapper (a type that converts to cudaStream_t, as c10::cuda::CUDAStream
/// and rmm::cuda_stream_view do) where a reduction's op goes: the op left out and a stream in its
/// place (a cudaStream_t itself there takes the forms without an op).
template <class Op>
inline constexpr bool stream_as_op = std::is_integral_v<Op> || std::is_convertible_v<Op, cudaStream_t>;
/// A __device__-only (extended) lambda, or commutative_op of one: nvcc cannot call it in host code,
/// where the op is checked (CUDA Programming Guide, extended lambda type traits). False outside nvcc.
template <class Op>
inline constexpr bool device_only_lambda =
#if defined(__NVCC__)
    __nv_is_extended_device_lambda_closure_type(typename unwrapped_op<Op>::type);
#else
    false;
#endif

/// An op whose call operator is not const (a mutable lambda, an operator() not marked const): the
/// collectives call ops through a const reference.
template <class Op, class T>
inline constexpr bool non_const_call_op = element<T> && !collx::detail::op_call_is_const<Op, T>;
/// What check_reduction_types refuses, each with its own message: the collectives' "Op must be a
/// reduction op" assertion then stays quiet (one error, not two).
template <class T, class Op>
inline constexpr bool refused_before_the_op =
    !element<T> || stream_as_op<Op> || device_only_lambda<Op> || non_const_call_op<Op, T> ||
    collx::detail::op_narrows_elements<Op, T>;

/// The compile-time checks every reduction makes before its op's, each with its own message: the
/// element type (a type that is not trivially copyable would otherwise fail as "Op must be a
/// reduction op"), stream_as_op, device_only_lambda and non_const_call_op (which would fail the
/// same way), and op_narrows_elements (which would compile and convert silently).
template <class T, class Op>
constexpr void check_reduction_types() {
  static_assert(element<T>, "collx::gpu: the element type T of a reduction must be a trivially copyable object type "
                            "(collx/concepts.hpp)");
  static_assert(!stream_as_op<Op>,
                "collx::gpu: a reduction got a stream, 0 or nullptr where its op goes; pass the op first "
                "(collx::ops::sum{}, stream), or a cudaStream_t itself in the op's place to sum (for a stream "
                "wrapper: its cudaStream_t, e.g. stream.stream())");
  static_assert(!device_only_lambda<Op>,
                "collx::gpu: a __device__ lambda cannot be a reduction op (nvcc cannot call it in host code, where "
                "collx checks the op): write it [] __host__ __device__ (T a, T b) { ... }, or a struct with a "
                "__device__ operator()");
  static_assert(!non_const_call_op<Op, T>,
                "collx::gpu: the op's call operator must be const (collx calls it through a const reference): "
                "a mutable lambda, or an operator() not marked const, cannot be a reduction op");
  static_assert(!collx::detail::op_narrows_elements<Op, T>,
                "collx::gpu: the op's parameter or return type narrows the elements (an op taking int on float "
                "elements truncates each value: 0.75 + 0.75 = 0): give it parameters and a result that hold every "
                "element value (T or a wider type; float on half and bfloat16), and convert inside the op where "
                "that is meant");
}
/// Whether T and Op pass check_reduction_types and reduction_op. The forms without an algorithm
/// consider the ring only then, so that a bad op is one error (the direct form's), not one per
/// algorithm they could run.
template <class T, class Op>
inline constexpr bool valid_reduction = !refused_before_the_op<T, Op> && reduction_op<Op, T>;
template <class>
inline constexpr bool no_device_form = false;  // false for every Algo, so the static_asserts below fire only when used
}  // namespace device_detail
/// all_reduce with algo::tree or algo::hierarchical: does not compile (no device form).
template <host_only_algorithm Algo, class T, class Op = ops::sum>
void all_reduce(device_communicator&, const T*, T*, std::size_t, const Op& = {}, cudaStream_t = nullptr) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_reduce: algo::tree and algo::hierarchical run on host communicators only; on device "
                "memory name algo::ring, algo::direct or algo::automatic (or no algorithm)");
}
/// reduce_scatter with algo::tree or algo::hierarchical: does not compile (no device form).
template <host_only_algorithm Algo, class T, class Op = ops::sum>
void reduce_scatter(device_communicator&, const T*, T*, std::size_t, const Op& = {}, cudaStream_t = nullptr) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::reduce_scatter: algo::tree and algo::hierarchical run on host communicators only; on device "
                "memory name algo::ring, algo::direct or algo::automatic (or no algorithm)");
}
/// all_gather with algo::tree or algo::hierarchical: does not compile (no device form).
template <host_only_algorithm Algo, class T>
void all_gather(device_communicator&, const T*, T*, std::size_t, cudaStream_t = nullptr) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_gather: algo::tree and algo::hierarchical run on host communicators only; on device "
                "memory name algo::ring, algo::direct or algo::automatic (or no algorithm)");
}

/// Any of collx's algorithm tags, host or device.
template <class Algo>
concept algorithm_tag = device_algorithm<Algo> || host_only_algorithm<Algo>;
// broadcast, reduce, all_to_all and the v-forms have one device form each and take no algorithm.
// Naming one (gpu::broadcast<algo::ring>(...), as the host API allows) is a compile error that
// says so, rather than a failed deduction of T = algo::ring. These catch-alls cannot take a valid
// call: the real forms' first template parameter is the element type, never a tag.
/// broadcast with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void broadcast(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::broadcast takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// reduce with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void reduce(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::reduce takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// all_to_all with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void all_to_all(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_to_all takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// all_gather_v with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void all_gather_v(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_gather_v takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// reduce_scatter_v with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void reduce_scatter_v(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::reduce_scatter_v takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// all_to_all_v with an algorithm named: does not compile (one device form, no algorithm).
template <algorithm_tag Algo, class... Args>
void all_to_all_v(Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_to_all_v takes no algorithm: it has one device form; leave out the <algo::...>");
}
// The same with braced lists for counts (`{1, 2}`), which a pack cannot deduce: named where the
// real forms take block_counts, so the message above comes instead of "no instance matches".
/// all_gather_v with an algorithm named and braced counts: does not compile.
template <algorithm_tag Algo, class T, class... Args>
void all_gather_v(device_communicator&, const T*, T*, const block_counts&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_gather_v takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// reduce_scatter_v with an algorithm named and braced counts: does not compile.
template <algorithm_tag Algo, class T, class... Args>
void reduce_scatter_v(device_communicator&, const T*, T*, const block_counts&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::reduce_scatter_v takes no algorithm: it has one device form; leave out the <algo::...>");
}
/// all_to_all_v with an algorithm named and braced counts: does not compile.
template <algorithm_tag Algo, class T, class... Args>
void all_to_all_v(device_communicator&, const T*, const block_counts&, T*, const block_counts&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_to_all_v takes no algorithm: it has one device form; leave out the <algo::...>");
}

// The window forms read every peer's window in place (zero-copy) and take no algorithm; naming
// one would otherwise fail as "no instance matches" with every overload listed.
/// The window all_reduce with an algorithm named: does not compile.
template <algorithm_tag Algo, class... Args>
void all_reduce(device_communicator&, const window&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_reduce on a window takes no algorithm: it reads the peers' windows in place; leave out the <algo::...>");
}
/// The window reduce_scatter with an algorithm named: does not compile.
template <algorithm_tag Algo, class... Args>
void reduce_scatter(device_communicator&, const window&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::reduce_scatter on a window takes no algorithm: it reads the peers' windows in place; leave out the <algo::...>");
}
/// The window all_gather with an algorithm named: does not compile.
template <algorithm_tag Algo, class... Args>
void all_gather(device_communicator&, const window&, Args&&...) {
  static_assert(device_detail::no_device_form<Algo>,
                "collx::gpu::all_gather on a window takes no algorithm: it reads the peers' windows in place; leave out the <algo::...>");
}

namespace device_detail {
/// all_reduce's direct forms, whatever the host communicator's COLLX_ALGO says (the body of
/// gpu::all_reduce without algo::ring).
template <class T, class Op>
void direct_all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, const Op& op, cudaStream_t stream) {
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::all_reduce: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_reduce";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  if (!chk.all_reduce_buffers(send, recv, count)) return chk.nothing_to_move<T>(collective::allreduce, detail::op_signature_key<Op>());
  const bool vec = aligned16(send) && aligned16(recv);
  // Two-shot's reduce-scatter stages a row per rank: with a staging slot too small for one vector
  // per row (huge element types), every rank stays one-shot alike.
  const bool rows_fit = static_cast<std::size_t>(dc.size()) * device_vector_elements<T> * sizeof(T) <= dc.slot_bytes();
  if (rows_fit && direct_form_for(count * sizeof(T), dc.two_shot_min_bytes()) == direct_form::two_shot)
    return launch_two_shot_all_reduce<T>(dc, name, send, recv, count, op, vec, stream);
  launch_call<T>(dc, name, collective::allreduce, detail::op_signature_key<Op>(), -1, count, 1, vec, stream,
                 all_reduce_step<T, Op, 1>{send, recv, op, -1},
                 all_reduce_step<T, Op, device_vector_elements<T>>{send, recv, op, -1});
}
}  // namespace device_detail

/// All-reduce on device memory: recv[i] = op(... op(op(send_0[i], send_1[i]), send_2[i]) ..., send_{n-1}[i])
/// on every rank (rank order, so non-commutative ops and floats give the same bits everywhere).
/// Enqueued on `stream`; returns at once. In place when send == recv.
/// One-shot below dc.two_shot_min_bytes() bytes per rank, two-shot (two launches) from there on:
/// see direct_form in device_plan.hpp. Both give the same bits. From dc.ring_min_bytes(allreduce)
/// bytes on, commutative ops run all_reduce<algo::ring> instead, with the ring's bits: with the
/// default figures only where the rings read faster than the direct forms (pairs without peer
/// access, or rings using more of each GPU's links; device_options::ring_min_bytes), or at every
/// size with COLLX_ALGO=ring
/// (or allreduce:ring). all_reduce<algo::direct> keeps the rank-order bits at every size.
/// @param send,recv `count` elements in device memory of dc.device() (or memory it can access)
/// @throws collx::error (errc::invalid_argument) for null buffers with count > 0, a count (times
///         size() where blocks are per rank) past memory, or partly overlapping buffers; (errc::cuda) when the launch fails; a failure reported by an earlier call (see
///         device_communicator::check). Failures of this call show at dc.synchronize().
template <class T, class Op = ops::sum>
void all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, const Op& op = {},
                cudaStream_t stream = nullptr) {
  if constexpr (op_traits<Op>::commutative && device_detail::valid_reduction<T, Op>)
    if (dc.ring_for(collective::allreduce, call_vector_bytes(count, 1, sizeof(T))))
      return all_reduce<algo::ring, T, Op>(dc, send, recv, count, op, stream);
  device_detail::direct_all_reduce<T, Op>(dc, send, recv, count, op, stream);
}

/// Reduce on device memory: as all_reduce, but only `root` receives (recv is not touched, and may be
/// null, on the other ranks). In place at the root when send == recv.
/// A buffer that may be null on some ranks (here recv; broadcast's send; all_gather_v's send,
/// reduce_scatter_v's recv and all_to_all_v's send, when their count is 0) is a nullable_ptr:
/// its element type comes from the other buffer, so a literal nullptr compiles there, while a
/// pointer to another type (a derived class too) does not. (all_to_all_v's recv has an overload
/// of its own for a literal nullptr; with both buffers literal nullptrs, name T:
/// all_to_all_v<float>(dc, nullptr, counts, nullptr, counts).)
/// @throws as all_reduce, and errc::invalid_argument for a root outside [0, size).
template <class T, class Op = ops::sum>
void reduce(device_communicator& dc, const T* send, nullable_ptr<std::type_identity_t<T>> recv_or_null, std::size_t count,
            int root, const Op& op = {}, cudaStream_t stream = nullptr) {
  T* const recv = recv_or_null.p;
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::reduce: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::reduce";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.root(root);
  if (count == 0) return chk.nothing_to_move<T>(collective::reduce, detail::op_signature_key<Op>(), root);
  const bool is_root = dc.rank() == root;
  chk.fits<T>(count);
  chk.rooted_buffers(is_root, send, recv, send, count * sizeof(T));
  const bool vec = aligned16(send) && (!is_root || aligned16(recv));
  launch_call<T>(dc, name, collective::reduce, detail::op_signature_key<Op>(), root, count, 1, vec, stream,
                 all_reduce_step<T, Op, 1>{send, recv, op, root},
                 all_reduce_step<T, Op, device_vector_elements<T>>{send, recv, op, root});
}

namespace device_detail {
/// reduce_scatter's direct forms, whatever the host communicator's COLLX_ALGO says (the body of
/// gpu::reduce_scatter without algo::ring).
template <class T, class Op>
void direct_reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, const Op& op, cudaStream_t stream) {
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::reduce_scatter: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::reduce_scatter";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  if (!chk.reduce_scatter_buffers(send, recv, recv_count)) return chk.nothing_to_move<T>(collective::reduce_scatter, detail::op_signature_key<Op>());
  const std::size_t n = static_cast<std::size_t>(dc.size());
  const bool vec = aligned16(send) && aligned16(recv) && (recv_count * sizeof(T)) % 16 == 0;
  launch_call<T>(dc, name, collective::reduce_scatter, detail::op_signature_key<Op>(), -1, recv_count, n, vec, stream,
                 reduce_scatter_step<T, Op, 1>{send, recv, op},
                 reduce_scatter_step<T, Op, device_vector_elements<T>>{send, recv, op});
}
}  // namespace device_detail

/// Reduce-scatter on device memory: rank r receives block r of the reduction,
/// recv[i] = fold over ranks q of send_q[r * recv_count + i] (rank order).
/// @param send size() * recv_count elements; @param recv recv_count elements (device memory)
/// From dc.ring_min_bytes(reduce_scatter) bytes of send buffer on (as all_reduce), commutative
/// ops run reduce_scatter<algo::ring>.
/// In place as NCCL defines it: recv == send + rank() * recv_count (the result lands in this rank's
/// block of send); any other overlap of send and recv is rejected.
/// @throws as all_reduce.
template <class T, class Op = ops::sum>
void reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, const Op& op = {},
                    cudaStream_t stream = nullptr) {
  if constexpr (op_traits<Op>::commutative && device_detail::valid_reduction<T, Op>)
    if (dc.ring_for(collective::reduce_scatter, call_vector_bytes(recv_count, dc.size(), sizeof(T))))
      return reduce_scatter<algo::ring, T, Op>(dc, send, recv, recv_count, op, stream);
  device_detail::direct_reduce_scatter<T, Op>(dc, send, recv, recv_count, op, stream);
}

namespace device_detail {
/// all_gather's direct forms, whatever the host communicator's COLLX_ALGO says (the body of
/// gpu::all_gather without algo::ring).
template <class T>
void direct_all_gather(device_communicator& dc, const T* send, T* recv, std::size_t send_count, cudaStream_t stream) {
  static_assert(element<T>, "collx::gpu::all_gather: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_gather";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  if (!chk.all_gather_buffers(send, recv, send_count)) return chk.nothing_to_move<T>(collective::all_gather, "");
  const bool vec = aligned16(send) && aligned16(recv) && (send_count * sizeof(T)) % 16 == 0;
  launch_call<T>(dc, name, collective::all_gather, "", -1, send_count, 1, vec, stream, all_gather_step<T, 1>{send, recv},
                 all_gather_step<T, device_vector_elements<T>>{send, recv});
}
}  // namespace device_detail

/// All-gather on device memory: recv = send_0 | send_1 | ... | send_{n-1} on every rank.
/// @param send send_count elements; @param recv size() * send_count elements. In place when
///        send == recv + rank * send_count (NCCL's convention); any other overlap is an error.
/// From dc.ring_min_bytes(all_gather) bytes of receive buffer on (as all_reduce), it runs
/// all_gather<algo::ring> (the same bytes).
/// @throws as all_reduce.
template <class T>
void all_gather(device_communicator& dc, const T* send, T* recv, std::size_t send_count, cudaStream_t stream = nullptr) {
  if (dc.ring_for(collective::all_gather, call_vector_bytes(send_count, dc.size(), sizeof(T))))
    return all_gather<algo::ring, T>(dc, send, recv, send_count, stream);
  device_detail::direct_all_gather<T>(dc, send, recv, send_count, stream);
}

/// All-reduce on device memory with a chosen algorithm, e.g. `gpu::all_reduce<collx::algo::ring>(dc,
/// send, recv, count)`. algo::ring: the rings over dc.rings(), one per channel, each channel
/// carrying its part of the vector (device_options::rings; cuda/ring_plan.hpp), each rank reading
/// 2 (n - 1) / n of the vector from its ring predecessors only (3 (n - 1) / n of its bytes for
/// half/bfloat16, whose partials travel as fp32), so the bandwidth is that of the rings' slowest
/// hops rather than of every pair: for large messages where the GPUs are not all directly
/// connected (rings that follow NVLink). It needs a commutative op (checked at compile time: the
/// ring folds each piece starting at another rank); its bits are fixed for a given world size,
/// count, type, staging size and rings, and equal on every rank, but they are not the rank-order
/// fold's. algo::direct: the rank-order forms of the all_reduce above (one-shot, two-shot), whatever
/// COLLX_ALGO says; algo::automatic: the all_reduce above. One rank: every algorithm copies.
/// @throws as all_reduce.
template <device_algorithm Algo, class T, class Op>
void all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, const Op& op, cudaStream_t stream) {
  if constexpr (std::same_as<Algo, algo::automatic>) {
    all_reduce<T, Op>(dc, send, recv, count, op, stream);
  } else if constexpr (std::same_as<Algo, algo::direct>) {
    device_detail::direct_all_reduce<T, Op>(dc, send, recv, count, op, stream);
  } else {
    device_detail::check_reduction_types<T, Op>();
    static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::all_reduce: Op must be a reduction op on T (collx/concepts.hpp)");
    static_assert(op_traits<Op>::commutative,
                  "collx::gpu::all_reduce<algo::ring>: the ring folds each piece starting at another rank, so it needs a "
                  "commutative op; use the rank-order forms (no algorithm) or declare the op commutative (collx::commutative_op)");
    if (dc.size() == 1) return device_detail::direct_all_reduce<T, Op>(dc, send, recv, count, op, stream);
    constexpr const char* name = "gpu::all_reduce<algo::ring>";
    using namespace device_detail;
    const call_check chk{dc, stream, name};
    if (!chk.all_reduce_buffers(send, recv, count)) return chk.nothing_to_move<T>(collective::allreduce, detail::op_signature_key<Op>());
    // Signed apart from one-shot and from two-shot's two launches, whichever a peer runs.
    const auto key = detail::op_signature_key<Op>();
    const auto make = [&](std::size_t n, std::uint64_t layout) {
      return device_signature::make(collective::allreduce, detail::type_name<T>(), sizeof(T), key, -1, n, layout);
    };
    const v_layout pieces = two_shot_pieces(count, dc.size(), device_vector_elements<T>);
    const device_signature sig = ring_signature(
        make(count, 0), {make(pieces.longest, two_shot_layout(pieces, 0)), make(pieces.longest, two_shot_layout(pieces, 1))});
    launch_ring<T>(dc, name, ring_phase::all_reduce, sig, count, send, recv, op, aligned16(send) && aligned16(recv), stream);
  }
}

/// Reduce-scatter on device memory with a chosen algorithm: algo::ring runs the reduce-scatter half
/// of the ring (each rank reads (n - 1) / n of its input's size from its predecessor, 2 (n - 1) / n
/// of its bytes for half/bfloat16, whose partials travel as fp32; commutative
/// ops only; the order of combination of cuda/ring_plan.hpp); algo::direct the rank-order form
/// whatever COLLX_ALGO says, algo::automatic the reduce_scatter above. @throws as reduce_scatter.
template <device_algorithm Algo, class T, class Op>
void reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, const Op& op, cudaStream_t stream) {
  if constexpr (std::same_as<Algo, algo::automatic>) {
    reduce_scatter<T, Op>(dc, send, recv, recv_count, op, stream);
  } else if constexpr (std::same_as<Algo, algo::direct>) {
    device_detail::direct_reduce_scatter<T, Op>(dc, send, recv, recv_count, op, stream);
  } else {
    device_detail::check_reduction_types<T, Op>();
    static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::reduce_scatter: Op must be a reduction op on T (collx/concepts.hpp)");
    static_assert(op_traits<Op>::commutative,
                  "collx::gpu::reduce_scatter<algo::ring>: the ring folds each block starting at another rank, so it needs "
                  "a commutative op; use the rank-order form (no algorithm) or declare the op commutative (collx::commutative_op)");
    if (dc.size() == 1) return device_detail::direct_reduce_scatter<T, Op>(dc, send, recv, recv_count, op, stream);
    constexpr const char* name = "gpu::reduce_scatter<algo::ring>";
    using namespace device_detail;
    const call_check chk{dc, stream, name};
    if (!chk.reduce_scatter_buffers(send, recv, recv_count)) return chk.nothing_to_move<T>(collective::reduce_scatter, detail::op_signature_key<Op>());
    const device_signature sig = ring_signature(device_signature::make(
        collective::reduce_scatter, detail::type_name<T>(), sizeof(T), detail::op_signature_key<Op>(), -1, recv_count));
    launch_ring<T>(dc, name, ring_phase::reduce_scatter, sig, recv_count, send, recv, op,
                   aligned16(send) && aligned16(recv) && (recv_count * sizeof(T)) % 16 == 0, stream);
  }
}

/// All-gather on device memory with a chosen algorithm: algo::ring passes the blocks around the
/// ring (each rank reads (n - 1) blocks from its predecessor); algo::direct the direct form
/// whatever COLLX_ALGO says, algo::automatic the all_gather above.
/// The same bytes whatever the algorithm. @throws as all_gather.
template <device_algorithm Algo, class T>
void all_gather(device_communicator& dc, const T* send, T* recv, std::size_t send_count, cudaStream_t stream) {
  if constexpr (std::same_as<Algo, algo::automatic>) {
    all_gather<T>(dc, send, recv, send_count, stream);
  } else if constexpr (std::same_as<Algo, algo::direct>) {
    device_detail::direct_all_gather<T>(dc, send, recv, send_count, stream);
  } else {
    static_assert(element<T>, "collx::gpu::all_gather: T must be a trivially copyable object type (collx/concepts.hpp)");
    if (dc.size() == 1) return device_detail::direct_all_gather<T>(dc, send, recv, send_count, stream);
    constexpr const char* name = "gpu::all_gather<algo::ring>";
    using namespace device_detail;
    const call_check chk{dc, stream, name};
    if (!chk.all_gather_buffers(send, recv, send_count)) return chk.nothing_to_move<T>(collective::all_gather, "");
    const device_signature sig =
        ring_signature(device_signature::make(collective::all_gather, detail::type_name<T>(), sizeof(T), "", -1, send_count));
    launch_ring<T>(dc, name, ring_phase::all_gather, sig, send_count, send, recv, no_reduction{},
                   aligned16(send) && aligned16(recv) && (send_count * sizeof(T)) % 16 == 0, stream);
  }
}

/// Broadcast on device memory: every rank's recv = root's send. In place when send == recv (the
/// root's data is then not copied); send is read only at the root (may be null elsewhere).
/// @throws as all_reduce, and errc::invalid_argument for a root outside [0, size).
template <class T>
void broadcast(device_communicator& dc, nullable_ptr<const std::type_identity_t<T>> send_or_null, T* recv, std::size_t count,
               int root, cudaStream_t stream = nullptr) {
  const T* const send = send_or_null.p;
  static_assert(element<T>, "collx::gpu::broadcast: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::broadcast";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.root(root);
  if (count == 0) return chk.nothing_to_move<T>(collective::broadcast, "", root);
  const bool is_root = dc.rank() == root;
  chk.fits<T>(count);
  chk.rooted_buffers(is_root, send, recv, recv, count * sizeof(T));
  const bool vec = aligned16(recv) && (!is_root || aligned16(send));
  launch_call<T>(dc, name, collective::broadcast, "", root, count, 1, vec, stream, broadcast_step<T, 1>{send, recv, root},
                 broadcast_step<T, device_vector_elements<T>>{send, recv, root});
}

/// All-to-all on device memory: block d of rank r's send (count elements) lands in block r of rank
/// d's recv. In place (send == recv) works: a chunk stages the same columns of every block that it
/// then overwrites, and later chunks touch other columns.
/// @param send,recv size() * count elements (device memory); equal, or not overlapping
/// @throws as all_reduce.
template <class T>
void all_to_all(device_communicator& dc, const T* send, T* recv, std::size_t count, cudaStream_t stream = nullptr) {
  static_assert(element<T>, "collx::gpu::all_to_all: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_to_all";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  if (count == 0) return chk.nothing_to_move<T>(collective::all_to_all, "");
  chk.fits<T>(count, static_cast<std::size_t>(dc.size()));
  const std::size_t bytes = static_cast<std::size_t>(dc.size()) * count * sizeof(T);
  chk.require(send && recv, "null buffer with count " + std::to_string(count));
  chk.require(send == recv || !ranges_overlap(send, bytes, recv, bytes), "send and recv overlap but are not the same buffer");
  const bool vec = aligned16(send) && aligned16(recv) && (count * sizeof(T)) % 16 == 0;
  launch_call<T>(dc, name, collective::all_to_all, "", -1, count, static_cast<std::size_t>(dc.size()), vec, stream,
                 all_to_all_step<T, 1>{send, recv}, all_to_all_step<T, device_vector_elements<T>>{send, recv});
}

/// All-gather with a count per rank: recv = send_0 | send_1 | ... | send_{n-1}, rank q's block of
/// counts[q] elements starting at element counts[0] + ... + counts[q-1] (the host all_gather_v's
/// layout). In place when send == recv + that offset for this rank; any other overlap is an error.
/// @param send counts[rank()] elements (may be null when that is 0); @param recv the sum of the
///        counts; @param counts one per rank, the same on every rank (part of the call signature:
///        ranks that disagree get errc::mismatch at dc.synchronize()); std::size_t or any integer
///        type, or a braced list (block_counts)
/// @throws as all_reduce, and errc::invalid_argument when counts.size() != size() or a count is
///         negative.
template <class T>
void all_gather_v(device_communicator& dc, nullable_ptr<const std::type_identity_t<T>> send_or_null, T* recv,
                  const block_counts& counts, cudaStream_t stream = nullptr) {
  const T* const send = send_or_null.p;
  static_assert(element<T>, "collx::gpu::all_gather_v: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_gather_v";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  const v_layout lay = chk.layout<T>(counts);
  if (lay.total == 0) return chk.nothing_to_move<T>(collective::all_gather, "");
  const std::size_t mine = lay.counts[dc.rank()], at = lay.displs[dc.rank()];
  chk.require(recv && (send || mine == 0), "null buffer with " + std::to_string(lay.total) + " elements in all");
  chk.require(mine == 0 || send == recv + at || !ranges_overlap(send, mine * sizeof(T), recv, lay.total * sizeof(T)),
              "send overlaps recv but is not this rank's block of it");
  const bool vec = (mine == 0 || aligned16(send)) && aligned16(recv) && lay.offsets_aligned16(sizeof(T));
  launch_call<T>(dc, name, collective::all_gather, "", -1, lay.longest, 1, vec, stream, all_gather_v_step<T, 1>{send, recv, lay},
                 all_gather_v_step<T, device_vector_elements<T>>{send, recv, lay}, lay.hash);
}

/// Reduce-scatter with a count per rank: rank r receives counts[r] elements, recv[i] = fold over
/// ranks q (in order) of send_q[counts[0] + ... + counts[r-1] + i].
/// @param send the sum of the counts; @param recv counts[rank()] elements (may be null when that is
///        0); @param counts as all_gather_v's
/// In place: recv == send + counts[0] + ... + counts[rank() - 1] (this rank's block of send); any
/// other overlap of send and recv is rejected.
/// @throws as all_gather_v.
template <class T, class Op = ops::sum>
void reduce_scatter_v(device_communicator& dc, const T* send, nullable_ptr<std::type_identity_t<T>> recv_or_null,
                      const block_counts& counts, const Op& op = {}, cudaStream_t stream = nullptr) {
  T* const recv = recv_or_null.p;
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::reduce_scatter_v: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::reduce_scatter_v";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  const v_layout lay = chk.layout<T>(counts);
  if (lay.total == 0) return chk.nothing_to_move<T>(collective::reduce_scatter, detail::op_signature_key<Op>());
  const std::size_t mine = lay.counts[dc.rank()];
  chk.require(send && (recv || mine == 0), "null buffer with " + std::to_string(lay.total) + " elements in all");
  chk.require(mine == 0 || recv == send + lay.displs[dc.rank()] || !ranges_overlap(send, lay.total * sizeof(T), recv, mine * sizeof(T)),
              "recv overlaps send but is not this rank's block of it");
  const bool vec = aligned16(send) && (mine == 0 || aligned16(recv)) && lay.offsets_aligned16(sizeof(T));
  launch_call<T>(dc, name, collective::reduce_scatter, detail::op_signature_key<Op>(), -1, lay.longest, static_cast<std::size_t>(dc.size()),
                 vec, stream, reduce_scatter_v_step<T, Op, 1>{send, recv, op, lay},
                 reduce_scatter_v_step<T, Op, device_vector_elements<T>>{send, recv, op, lay}, lay.hash);
}

/// All-to-all with uneven blocks on device memory (the host all_to_all_v's layout; NCCL users build
/// it from grouped send/recv): this rank sends send_counts[d] elements to rank d, its blocks packed
/// in rank order in send, and receives recv_counts[q] elements from rank q, packed in rank order in
/// recv. One launch: the ranks first exchange their counts on the device (so each knows how long
/// the longest block is and the call needs no host round trip), then move the blocks in chunks.
/// @param send sum of send_counts elements; @param recv sum of recv_counts elements; not
///        overlapping (never in place); either may be null (a literal nullptr too; both literal
///        nullptrs need T named, all_to_all_v<float>(...)) when its counts are all 0
/// @param send_counts,recv_counts one per rank (any integer type: block_counts); recv_counts[q] on this rank must equal
///        send_counts[rank] on rank q, which the exchange checks: the rank whose recv count differs
///        gets errc::mismatch at dc.synchronize(), naming both counts, and its peers errc::aborted
///        (at this call when any block moves data, else at their next call)
/// Small calls cost a full chunk's blocks (every rank must launch the same number, and no rank
/// knows the others' counts before the exchange).
/// @throws collx::error (errc::invalid_argument) for lists of the wrong length, a negative count, a self count that
///         differs between the lists, null or overlapping buffers; otherwise as all_reduce.
template <class T>
void all_to_all_v(device_communicator& dc, nullable_ptr<const std::type_identity_t<T>> send_or_null,
                  const block_counts& send_counts, T* recv, const block_counts& recv_counts, cudaStream_t stream = nullptr) {
  const T* const send = send_or_null.p;
  static_assert(element<T>, "collx::gpu::all_to_all_v: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_to_all_v";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  const a2a_layout lay = chk.a2a<T>(send_counts, recv_counts);
  chk.require(send || lay.send_total == 0, "null send with " + std::to_string(lay.send_total) + " elements to send");
  chk.require(recv || lay.recv_total == 0, "null recv with " + std::to_string(lay.recv_total) + " elements to receive");
  chk.require(!ranges_overlap(send, lay.send_total * sizeof(T), recv, lay.recv_total * sizeof(T)),
              "send and recv overlap (all_to_all_v is never in place)");
  dc.check();
  // Every rank cuts the same chunks and blocks: a chunk fills the slot with one row per rank, and a
  // full chunk's vectors set the blocks (as plan_chunks does), whatever this rank's own counts.
  constexpr std::size_t V = device_vector_elements<T>;
  const std::size_t world = static_cast<std::size_t>(dc.size());
  const chunk_plan full = plan_chunks(SIZE_MAX / 2, sizeof(T), world, V, dc.slot_bytes(), dc.block_limit());
  // (full.chunk * world elements fill a slot: the kernel's row pitch is full.chunk.)
  const auto sig = device_signature::make(collective::all_to_all, detail::type_name<T>(), sizeof(T), "", -1, 0, 0x76);
  const bool vec = (lay.send_total == 0 || aligned16(send)) && (lay.recv_total == 0 || aligned16(recv)) &&
                   lay.offsets_aligned16(sizeof(T));
  const scoped_device on_device(dc.device(), name);  // and back to the caller's afterwards
  // Each rank's width follows its own displacements: ranks of one call launch either kernel.
  load_kernels<&all_to_all_v_kernel<T, V>, &all_to_all_v_kernel<T, 1>>(dc);
  if (V > 1 && vec)
    launch_in_order(dc, name, &all_to_all_v_kernel<T, V>, full.blocks, device_threads_per_block, stream, dc.view(), lay, send, recv, full.chunk, sig);
  else launch_in_order(dc, name, &all_to_all_v_kernel<T, 1>, full.blocks, device_threads_per_block, stream, dc.view(), lay, send, recv, full.chunk, sig);
}
/// all_to_all_v with a literal nullptr for recv (a rank whose recv_counts are all 0): T from send.
template <class T>
void all_to_all_v(device_communicator& dc, const T* send, const block_counts& send_counts, std::nullptr_t,
                  const block_counts& recv_counts, cudaStream_t stream = nullptr) {
  all_to_all_v<T>(dc, send, send_counts, static_cast<T*>(nullptr), recv_counts, stream);
}

// ---------------------------------------------------------------------------------------------
// Point-to-point, as ncclSend / ncclRecv: stream-ordered, matched in order per pair of ranks
// (the k-th send from rank a to rank b meets the k-th recv at b from a), and free to interleave
// with collectives in any order both ranks agree on. A send completes once its receiver has taken
// every element (the data moves through the sender's point-to-point staging, half a slot per
// chunk, two chunks in flight), so two ranks that each send to the other before receiving wait
// for each other until the timeout (errc::timeout, naming the peer): order them, or use
// send_recv. A count of 0 launches nothing; its peer must pass 0 too (else it times out). A
// receiver whose count or element size differs from the sender's fails with errc::mismatch
// naming both; the sender then fails with errc::aborted.

/// Sends `count` elements of `buf` (device memory) to rank `peer`, whose gpu::recv from this rank
/// with the same count and type takes them.
/// @throws collx::error (errc::invalid_argument) for a peer that is not another rank, a null
///         buffer with count > 0, or an element type too large for half a staging slot (the
///         communicator then ends on every rank, as for collectives);
///         (errc::cuda) when the launch fails; an earlier call's failure. At dc.synchronize():
///         errc::timeout when the peer does not post the matching call in time; errc::aborted
///         when it failed first, e.g. a receiver whose count or type differs (which itself gets
///         errc::mismatch naming both sizes).
template <class T>
void send(device_communicator& dc, const T* buf, std::size_t count, int peer, cudaStream_t stream = nullptr) {
  static_assert(element<T>, "collx::gpu::send: T must be a trivially copyable object type (collx/concepts.hpp)");
  device_detail::one_way<T>(dc, "gpu::send", true, buf, nullptr, count, peer, stream);
}

/// Receives `count` elements from rank `peer` into `buf` (device memory), from the matching
/// gpu::send. Writes exactly buf[0, count).
/// @throws as gpu::send.
template <class T>
void recv(device_communicator& dc, T* buf, std::size_t count, int peer, cudaStream_t stream = nullptr) {
  static_assert(!std::is_const_v<T>, "collx::gpu::recv: the receive buffer points to const elements");
  static_assert(element<T>, "collx::gpu::recv: T must be a trivially copyable object type (collx/concepts.hpp)");
  device_detail::one_way<T>(dc, "gpu::recv", false, nullptr, buf, count, peer, stream);
}

/// A send to `dst` and a recv from `src` in one launch, as MPI_Sendrecv: both directions progress
/// together, so it pairs with a peer's send_recv, recv-then-send or send-then-recv, and ring
/// shifts and pairwise exchanges cannot deadlock. dst and src may be this rank (a copy through the
/// staging). A side whose count is 0 moves nothing and its peer is not looked at (-1 is fine, as
/// MPI_PROC_NULL). send and recv must not overlap.
/// @throws as gpu::send (except that dst and src may be this rank), and errc::invalid_argument
///   when send and recv overlap.
template <class T>
void send_recv(device_communicator& dc, const T* send, std::size_t send_count, int dst, T* recv, std::size_t recv_count,
               int src, cudaStream_t stream = nullptr) {
  static_assert(element<T>, "collx::gpu::send_recv: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::send_recv";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  if (send_count > 0) chk.peer(dst, true);
  if (recv_count > 0) chk.peer(src, true);
  if (send_count == 0 && recv_count == 0) return dc.check();
  chk.require((send_count == 0 || send) && (recv_count == 0 || recv), "null buffer with a nonzero count");
  chk.require(!ranges_overlap(send, send_count * sizeof(T), recv, recv_count * sizeof(T)), "send and recv overlap");
  launch_p2p<T>(dc, name, chk.p2p<T>(send, nullptr, send_count, dst), chk.p2p<T>(nullptr, recv, recv_count, src),
                (send_count == 0 || aligned16(send)) && (recv_count == 0 || aligned16(recv)), stream);
}

// Zero-copy forms: the input is a registered window (device_communicator::register_window), read
// by the peers in place. Two barriers per call and no staging, whatever the size. The element
// offset into the window must be the same on every rank (part of the call signature). When some
// pair of ranks goes through host memory (device_communicator::zero_copy_windows() false: memory
// host or mixed), a window call checks its arguments the same way, then stages this
// rank's window elements as the pointer form does (one-shot), still signed with the window and
// offset.

/// All-reduce from a window: recv[i] = fold over ranks q (in order) of element send_offset + i of
/// rank q's window. recv must not overlap the elements read from this rank's window (the peers read
/// them while this rank writes: use the staged form for in place).
/// @throws collx::error (errc::invalid_argument) for a window of another communicator, elements
///         beyond a rank's window, a null recv or overlap; as all_reduce otherwise.
template <class T, class Op = ops::sum>
void all_reduce(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t count,
                const Op& op = {}, cudaStream_t stream = nullptr) {
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::all_reduce: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_reduce(window)";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.owned(send);
  if (count == 0) return chk.nothing_to_move<T>(collective::allreduce, detail::op_signature_key<Op>());
  chk.in_window<T>(send, send_offset, count);
  const T* mine = reinterpret_cast<const T*>(send.base[static_cast<std::size_t>(dc.rank())]) + send_offset;
  chk.require(recv != nullptr, "null recv with count " + std::to_string(count));
  chk.require(!ranges_overlap(mine, count * sizeof(T), recv, count * sizeof(T)), "recv overlaps the window elements it reads");
  const bool vec = send.aligned16_at<T>(send_offset) && aligned16(recv);
  if (!dc.zero_copy_windows())
    return launch_call<T>(dc, name, collective::allreduce, detail::op_signature_key<Op>(), -1, count, 1, vec, stream,
                          all_reduce_step<T, Op, 1>{mine, recv, op, -1},
                          all_reduce_step<T, Op, device_vector_elements<T>>{mine, recv, op, -1}, window_layout(send, send_offset));
  launch_direct<T>(dc, name, collective::allreduce, detail::op_signature_key<Op>(), -1, count, send, send_offset, vec, stream,
                   with_sources<T>(direct_all_reduce_step<T, Op, 1>{{}, recv, op, -1}, send, send_offset),
                   with_sources<T>(direct_all_reduce_step<T, Op, device_vector_elements<T>>{{}, recv, op, -1}, send, send_offset));
}

/// Reduce-scatter from a window: recv[i] = fold over ranks q of element send_offset + rank *
/// recv_count + i of rank q's window (each window holds size() * recv_count elements from the offset).
/// @throws as the window all_reduce.
template <class T, class Op = ops::sum>
void reduce_scatter(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t recv_count,
                    const Op& op = {}, cudaStream_t stream = nullptr) {
  device_detail::check_reduction_types<T, Op>();
  static_assert(device_detail::refused_before_the_op<T, Op> || reduction_op<Op, T>, "collx::gpu::reduce_scatter: Op must be a reduction op on T (collx/concepts.hpp)");
  constexpr const char* name = "gpu::reduce_scatter(window)";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.owned(send);
  if (recv_count == 0) return chk.nothing_to_move<T>(collective::reduce_scatter, detail::op_signature_key<Op>());
  const std::size_t n = static_cast<std::size_t>(dc.size());
  chk.require(recv_count <= SIZE_MAX / n, "recv_count " + std::to_string(recv_count) + " times the world size overflows");
  chk.in_window<T>(send, send_offset, n * recv_count);
  const T* mine = reinterpret_cast<const T*>(send.base[static_cast<std::size_t>(dc.rank())]) + send_offset;
  chk.require(recv != nullptr, "null recv with count " + std::to_string(recv_count));
  chk.require(!ranges_overlap(mine, n * recv_count * sizeof(T), recv, recv_count * sizeof(T)), "recv overlaps the window elements read");
  const bool vec = send.aligned16_at<T>(send_offset) && aligned16(recv) && (recv_count * sizeof(T)) % 16 == 0;
  if (!dc.zero_copy_windows())
    return launch_call<T>(dc, name, collective::reduce_scatter, detail::op_signature_key<Op>(), -1, recv_count, n, vec, stream,
                          reduce_scatter_step<T, Op, 1>{mine, recv, op},
                          reduce_scatter_step<T, Op, device_vector_elements<T>>{mine, recv, op}, window_layout(send, send_offset));
  launch_direct<T>(dc, name, collective::reduce_scatter, detail::op_signature_key<Op>(), -1, recv_count, send, send_offset, vec, stream,
                   with_sources<T>(direct_reduce_scatter_step<T, Op, 1>{{}, recv, op}, send, send_offset),
                   with_sources<T>(direct_reduce_scatter_step<T, Op, device_vector_elements<T>>{{}, recv, op}, send, send_offset));
}

/// All-gather from a window: block q of recv (send_count elements) = elements [send_offset,
/// send_offset + send_count) of rank q's window.
/// @throws as the window all_reduce.
template <class T>
void all_gather(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t send_count,
                cudaStream_t stream = nullptr) {
  static_assert(element<T>, "collx::gpu::all_gather: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::all_gather(window)";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.owned(send);
  if (send_count == 0) return chk.nothing_to_move<T>(collective::all_gather, "");
  const std::size_t n = static_cast<std::size_t>(dc.size());
  chk.in_window<T>(send, send_offset, send_count);
  const T* mine = reinterpret_cast<const T*>(send.base[static_cast<std::size_t>(dc.rank())]) + send_offset;
  chk.require(recv != nullptr, "null recv with count " + std::to_string(send_count));
  chk.require(!ranges_overlap(mine, send_count * sizeof(T), recv, n * send_count * sizeof(T)), "recv overlaps the window elements read");
  const bool vec = send.aligned16_at<T>(send_offset) && aligned16(recv) && (send_count * sizeof(T)) % 16 == 0;
  if (!dc.zero_copy_windows())
    return launch_call<T>(dc, name, collective::all_gather, "", -1, send_count, 1, vec, stream, all_gather_step<T, 1>{mine, recv},
                          all_gather_step<T, device_vector_elements<T>>{mine, recv}, window_layout(send, send_offset));
  launch_direct<T>(dc, name, collective::all_gather, "", -1, send_count, send, send_offset, vec, stream,
                   with_sources<T>(direct_all_gather_step<T, 1>{{}, recv}, send, send_offset),
                   with_sources<T>(direct_all_gather_step<T, device_vector_elements<T>>{{}, recv}, send, send_offset));
}

/// Broadcast from the root's window: recv = elements [send_offset, send_offset + count) of the
/// root's window, on every rank (the root too; its recv must not overlap what it serves).
/// @throws as the window all_reduce, and errc::invalid_argument for a root outside [0, size).
template <class T>
void broadcast(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t count, int root,
               cudaStream_t stream = nullptr) {
  static_assert(element<T>, "collx::gpu::broadcast: T must be a trivially copyable object type (collx/concepts.hpp)");
  constexpr const char* name = "gpu::broadcast(window)";
  using namespace device_detail;
  const call_check chk{dc, stream, name};
  chk.root(root);
  chk.owned(send);
  if (count == 0) return chk.nothing_to_move<T>(collective::broadcast, "", root);
  chk.in_window<T>(send, send_offset, count);
  chk.require(recv != nullptr, "null recv with count " + std::to_string(count));
  const T* mine = reinterpret_cast<const T*>(send.base[static_cast<std::size_t>(dc.rank())]) + send_offset;
  if (dc.rank() == root)
    chk.require(!ranges_overlap(mine, count * sizeof(T), recv, count * sizeof(T)), "the root's recv overlaps the window elements it serves");
  const bool vec = (send.address[static_cast<std::size_t>(root)] + send_offset * sizeof(T)) % 16 == 0 && aligned16(recv);
  if (!dc.zero_copy_windows())  // the staged step reads `mine` at the root only
    return launch_call<T>(dc, name, collective::broadcast, "", root, count, 1, vec, stream, broadcast_step<T, 1>{mine, recv, root},
                          broadcast_step<T, device_vector_elements<T>>{mine, recv, root}, window_layout(send, send_offset));
  launch_direct<T>(dc, name, collective::broadcast, "", root, count, send, send_offset, vec, stream,
                   with_sources<T>(direct_broadcast_step<T, 1>{{}, recv, root}, send, send_offset),
                   with_sources<T>(direct_broadcast_step<T, device_vector_elements<T>>{{}, recv, root}, send, send_offset));
}

// The reductions without an op but with a stream: `gpu::all_reduce(dc, send, recv, count, stream)`
// sums on `stream`. Without these forms the stream would be deduced as the op (Op = cudaStream_t)
// and fail the op check. As partial ordering prefers them over the forms with `const Op&`, a
// cudaStream_t in the op's place always lands here; a literal 0 or nullptr does not (pass
// ops::sum{} first, or a cudaStream_t variable).

/// all_reduce with ops::sum on `stream`: all_reduce(dc, send, recv, count, ops::sum{}, stream).
template <class T>
void all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, cudaStream_t stream) {
  all_reduce<T, ops::sum>(dc, send, recv, count, ops::sum{}, stream);
}
/// all_reduce<Algo> with ops::sum on `stream`: all_reduce<Algo>(dc, send, recv, count, ops::sum{}, stream).
template <device_algorithm Algo, class T>
void all_reduce(device_communicator& dc, const T* send, T* recv, std::size_t count, cudaStream_t stream) {
  all_reduce<Algo, T, ops::sum>(dc, send, recv, count, ops::sum{}, stream);
}
/// reduce with ops::sum on `stream`: reduce(dc, send, recv, count, root, ops::sum{}, stream).
template <class T>
void reduce(device_communicator& dc, const T* send, nullable_ptr<std::type_identity_t<T>> recv, std::size_t count, int root,
            cudaStream_t stream) {
  reduce<T, ops::sum>(dc, send, recv, count, root, ops::sum{}, stream);
}
/// reduce_scatter with ops::sum on `stream`: reduce_scatter(dc, send, recv, recv_count, ops::sum{}, stream).
template <class T>
void reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, cudaStream_t stream) {
  reduce_scatter<T, ops::sum>(dc, send, recv, recv_count, ops::sum{}, stream);
}
/// reduce_scatter<Algo> with ops::sum on `stream`: reduce_scatter<Algo>(dc, send, recv, recv_count, ops::sum{}, stream).
template <device_algorithm Algo, class T>
void reduce_scatter(device_communicator& dc, const T* send, T* recv, std::size_t recv_count, cudaStream_t stream) {
  reduce_scatter<Algo, T, ops::sum>(dc, send, recv, recv_count, ops::sum{}, stream);
}
/// reduce_scatter_v with ops::sum on `stream`: reduce_scatter_v(dc, send, recv, counts, ops::sum{}, stream).
template <class T>
void reduce_scatter_v(device_communicator& dc, const T* send, nullable_ptr<std::type_identity_t<T>> recv,
                      const block_counts& counts, cudaStream_t stream) {
  reduce_scatter_v<T, ops::sum>(dc, send, recv, counts, ops::sum{}, stream);
}
/// The window all_reduce with ops::sum on `stream`.
template <class T>
void all_reduce(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t count,
                cudaStream_t stream) {
  all_reduce<T, ops::sum>(dc, send, send_offset, recv, count, ops::sum{}, stream);
}
/// The window reduce_scatter with ops::sum on `stream`.
template <class T>
void reduce_scatter(device_communicator& dc, const window& send, std::size_t send_offset, T* recv, std::size_t recv_count,
                    cudaStream_t stream) {
  reduce_scatter<T, ops::sum>(dc, send, send_offset, recv, recv_count, ops::sum{}, stream);
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
