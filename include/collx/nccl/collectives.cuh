/// @file nccl/collectives.cuh
/// Collectives and point-to-point calls on device memory across the GPUs of an NCCL communicator,
/// stream-ordered. For .cu
/// files (nvcc, with collx::nccl's flags); CMake: target collx::nccl.
///
/// Two paths, chosen at compile time:
///  - NCCL's own collectives (ncclAllReduce, ncclReduceScatter, ncclReduce; reduce_scatter_v as one
///    group of an ncclReduce per rank with a non-empty block) when NCCL has the element type and
///    the op (nccl/native.hpp: float, double, half/__half, bfloat16/__nv_bfloat16, 8/32/64-bit
///    integers with sum, prod, min, max, avg) and the algorithm is algo::automatic. all_gather and
///    broadcast move bytes (ncclAllGather / ncclBroadcast on ncclUint8), so they take this path for
///    every element type, and so do all_gather_v (one group of an ncclBroadcast per rank with a
///    non-empty block), all_to_all and all_to_all_v (one group of ncclSend/ncclRecv on ncclUint8,
///    as nccl-tests' alltoall). Results are NCCL's: its summation order, fp16/bf16 accumulated in
///    16 bits between hops (collx's host path rounds once from fp32), avg as NCCL computes it,
///    NCCL's NaN handling in min/max.
///  - collx's schedules (algo/ring.hpp, algo/tree.hpp, built by schedule::make_schedule) for any
///    other type or op (custom structs, bitwise ops, user ops, non-commutative ops), or when the
///    caller names algo::ring or algo::tree: each receive runs in one ncclGroupStart/End group with
///    the sends posted before it (nccl/plan.hpp says why that cannot deadlock for these schedules),
///    into a staging buffer of options::segment_bytes, then collx's kernels (gpu::reduce_elementwise,
///    gpu::convert) combine or convert it; copy and reduce steps are the same kernels. Results are
///    collx's: rank order for tree (non-commutative ops), fp32 partials rounded once for half and
///    bfloat16. algo::automatic picks ring for a commutative op, tree otherwise. algo::direct is
///    refused at compile time (its groups can deadlock), and so is algo::ring with a
///    non-commutative op.
///
/// CUDA graphs: NCCL's path can be captured as NCCL allows; the schedule path cannot be (its first
/// call allocates with cudaMalloc, and each call waits on the communicator's event, recorded by the
/// previous call, so that calls on different streams take turns with the scratch memory).
///
/// Counts are elements. Buffers are device memory (or memory NCCL accepts) on the communicator's
/// device; the current device must be the communicator's. No call-signature check across ranks
/// unless options::check_calls_over names a host communicator (see nccl/communicator.hpp); then
/// every call first checks over it that all ranks make the same call (run_call, below). Every
/// function throws collx::error: errc::invalid_argument for bad arguments (before anything is
/// enqueued), errc::transport or errc::cuda naming the NCCL or CUDA call that failed, and with the
/// check, errc::mismatch or a peer's refusal (nccl/call_check.hpp), with "rank r/n nccl
/// <collective><type,op,path>" in front.
#pragma once

#ifndef __CUDACC__  // else the first error is a missing <cuda/atomic> or an unknown __device__
#error "collx/nccl/collectives.cuh launches CUDA kernels: include it from a .cu file that nvcc compiles (host code of its own may use collx/nccl/communicator.hpp)"
#endif

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <collx/algo/build.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/tree.hpp>
#include <collx/algo/automatic.hpp>
#include <collx/block_counts.hpp>
#include <collx/concepts.hpp>
#include <collx/cuda/convert.cuh>
#include <collx/cuda/reduce_kernel.cuh>
#include <collx/detail/counts.hpp>
#include <collx/detail/executor.hpp>  // detail::no_op
#include <collx/detail/reduction.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>
#include <collx/nccl/call_check.hpp>
#include <collx/nccl/communicator.hpp>
#include <collx/nccl/native.hpp>
#include <collx/nccl/plan.hpp>
#include <collx/nullable_ptr.hpp>
#include <collx/ops.hpp>
#include <collx/send_recv.hpp>  // collx::no_peer

namespace collx {
inline namespace v0 {
namespace nccl {
namespace detail {

/// True when a reduction of T with Op under Algo calls NCCL's own collective.
template <class Algo, class T, class Op>
inline constexpr bool uses_native = std::is_same_v<Algo, algo::automatic> && native_reduction_v<T, Op>;

/// Compile-time checks of the algorithm for the schedule path.
template <class Algo, class Op>
constexpr void check_algorithm() {
  static_assert(std::is_same_v<Algo, algo::automatic> || std::is_same_v<Algo, algo::ring> ||
                    std::is_same_v<Algo, algo::tree>,
                "collx::nccl: the algorithm must be algo::automatic, algo::ring or algo::tree (algo::direct's "
                "NCCL groups can deadlock, see collx/nccl/plan.hpp; no hierarchical form on NCCL)");
  static_assert(!std::is_same_v<Algo, algo::ring> || op_traits<Op>::commutative,
                "collx::nccl: algo::ring needs a commutative op; use algo::tree or algo::automatic");
}

/// "allreduce<float32,sum,nccl>": the call `coll` ("allreduce", "all_gather_v") with its type, op
/// and path, as messages and the call check (nccl/call_check.hpp) name it.
template <class T, class Op>
std::string call_what(std::string_view coll, const char* path) {
  return std::string(coll) + "<" + std::string(collx::detail::type_name<T>()) + "," + op_traits<Op>::name + "," + path +
         ">";
}

/// "rank 1/4 nccl allreduce<float32,sum,nccl>", for call_what's `what`.
inline std::string call_name(const communicator& c, const std::string& what) {
  return "rank " + std::to_string(c.rank()) + "/" + std::to_string(c.size()) + " nccl " + what;
}

/// Throws errc::invalid_argument unless the current device is c's and every pointer that must
/// hold `count` > 0 elements is non-null.
inline void check_args(const communicator& c, const std::string& name, std::size_t count,
                       std::initializer_list<const void*> ptrs) {
  c.check_device(name.c_str());
  if (count == 0) return;
  for (const void* p : ptrs)
    if (!p) COLLX_THROW(errc::invalid_argument, name + ": null buffer with count " + std::to_string(count));
}

/// Throws errc::invalid_argument unless root is a rank of c.
inline void check_root(const communicator& c, const std::string& name, int root) {
  if (root < 0 || root >= c.size())
    COLLX_THROW(errc::invalid_argument, name + ": root " + std::to_string(root) + " outside [0, " +
                                            std::to_string(c.size()) + ")");
}

/// True when [a, a + an) and [b, b + bn) (bytes) share a byte.
inline bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  return gpu::ranges_overlap(a, an, b, bn);
}

/// Ends an NCCL group on every path out of a scope (a throw between ncclGroupStart and its end).
struct group_guard {
  ncclComm_t comm;
  bool open = false;
  void start() {
    check(ncclGroupStart(), "ncclGroupStart", comm);
    open = true;
  }
  void end() {
    open = false;
    check(ncclGroupEnd(), "ncclGroupEnd", comm);
  }
  ~group_guard() {
    if (open) (void)ncclGroupEnd();
  }
};

/// Carries out one rank's schedule for one segment on a stream (see the file comment).
template <class T, class Op>
struct device_executor {
  using red = collx::detail::reduction<T, Op>;
  using acc = typename red::acc;
  /// Whether scratch holds other values than the buffers (narrow floats in fp32, or avg to divide):
  /// otherwise every buffer is treated as elements, so each kernel is instantiated once.
  static constexpr bool roles = red::widened || red::needs_finalize;
  static_assert(roles || std::is_same_v<acc, T>);

  const T* in = nullptr;
  T* out = nullptr;
  acc* tmp = nullptr;
  std::byte* staging = nullptr;
  std::size_t staging_bytes = 0;
  const Op* op = nullptr;
  int world_size = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  gpu::device_limits limits{1};

  static constexpr std::size_t elem_size(schedule::buffer b) noexcept {
    return b == schedule::buffer::scratch ? sizeof(acc) : sizeof(T);
  }
  std::byte* ptr(const schedule::region& r) const noexcept {
    switch (r.buf) {
      case schedule::buffer::input: return reinterpret_cast<std::byte*>(const_cast<T*>(in + r.offset));
      case schedule::buffer::output: return reinterpret_cast<std::byte*>(out + r.offset);
      case schedule::buffer::scratch: return reinterpret_cast<std::byte*>(tmp + r.offset);
    }
    return nullptr;
  }
  /// Calls f(std::integral_constant<gpu::values, V>) with the role of buffer b.
  template <class F>
  static void with_role(schedule::buffer b, F&& f) {
    if constexpr (roles) {
      if (b == schedule::buffer::scratch) return f(std::integral_constant<gpu::values, gpu::values::partials>{});
    }
    f(std::integral_constant<gpu::values, gpu::values::elements>{});
  }
  template <gpu::values V>
  static auto typed(std::byte* p) noexcept {
    return reinterpret_cast<gpu::value_t<T, Op, V>*>(p);
  }

  void run(const schedule::steps& steps) const {
    for (const action& a : group_steps(steps)) {
      if (!a.group) {
        local(steps[a.local]);
        continue;
      }
      const schedule::step* r = a.recv >= 0 ? &steps[static_cast<std::size_t>(a.recv)] : nullptr;
      const bool direct = r && !plan_receive(*r, roles).staged;
      const std::size_t recv_bytes = r ? r->dst.count * elem_size(r->wire) : 0;
      if (r && !direct && recv_bytes > staging_bytes)
        COLLX_THROW(errc::internal, "nccl: a message of " + std::to_string(recv_bytes) +
                                        " bytes exceeds the staging buffer of " + std::to_string(staging_bytes));
      group_guard g{comm};
      g.start();
      for (std::size_t i : a.sends) {
        const schedule::step& s = steps[i];
        check(ncclSend(ptr(s.a), s.a.count * elem_size(s.a.buf), ncclUint8, s.peer, comm, stream), "ncclSend", comm);
      }
      if (r)
        check(ncclRecv(direct ? ptr(r->dst) : staging, recv_bytes, ncclUint8, r->peer, comm, stream), "ncclRecv",
              comm);
      g.end();
      if (r && !direct) after_receive(*r);
    }
  }

  /// The kernel after a receive into staging (plan_receive): convert into dst, or combine with `a`
  /// into dst, the staged value on the left when incoming_first.
  void after_receive(const schedule::step& s) const {
    const receive_plan rp = plan_receive(s, roles);
    with_role(s.wire, [&](auto w) {
      with_role(s.dst.buf, [&](auto d) {
        constexpr gpu::values W = decltype(w)::value, D = decltype(d)::value;
        if (!rp.reduce) {
          if constexpr (W != D)
            gpu::convert<T, W, D>(typed<D>(ptr(s.dst)), typed<W>(staging), s.dst.count, *op, world_size, stream);
          else
            COLLX_THROW(errc::internal, "nccl: a same-type receive went through staging");
        } else {
          with_role(s.a.buf, [&](auto x) {
            constexpr gpu::values A = decltype(x)::value;
            if (rp.staging_left)
              gpu::reduce_elementwise<T, W, A, D>(typed<D>(ptr(s.dst)), typed<W>(staging), typed<A>(ptr(s.a)),
                                                  s.dst.count, *op, world_size, stream, limits);
            else
              gpu::reduce_elementwise<T, A, W, D>(typed<D>(ptr(s.dst)), typed<A>(ptr(s.a)), typed<W>(staging),
                                                  s.dst.count, *op, world_size, stream, limits);
          });
        }
      });
    });
  }

  /// A copy or reduce step.
  void local(const schedule::step& s) const {
    with_role(s.a.buf, [&](auto x) {
      with_role(s.dst.buf, [&](auto d) {
        constexpr gpu::values A = decltype(x)::value, D = decltype(d)::value;
        if (s.kind == schedule::step_kind::copy) {
          gpu::convert<T, A, D>(typed<D>(ptr(s.dst)), typed<A>(ptr(s.a)), s.dst.count, *op, world_size, stream);
        } else {
          with_role(s.b.buf, [&](auto y) {
            constexpr gpu::values B = decltype(y)::value;
            gpu::reduce_elementwise<T, A, B, D>(typed<D>(ptr(s.dst)), typed<A>(ptr(s.a)), typed<B>(ptr(s.b)),
                                                s.dst.count, *op, world_size, stream, limits);
          });
        }
      });
    });
  }
};

/// Runs a reduction (allreduce, reduce_scatter, reduce) with collx's schedule `alg` (see the file
/// comment). `count`: vector length, or per-rank block for reduce_scatter.
template <class T, class Op>
void run_schedule(communicator& c, collective coll, algorithm alg, const T* in, T* out, bool in_place, int root,
                  std::size_t count, const Op& op, cudaStream_t stream) {
  using acc = typename collx::detail::reduction<T, Op>::acc;
  const std::size_t seg_elems = std::max<std::size_t>(1, c.opts().segment_bytes / sizeof(acc));
  const std::vector<segment> segments = plan_segments(coll, alg, c.size(), c.rank(), root, count, seg_elems);
  for (const segment& s : segments)  // the ring's reduce_scatter takes at least one element per rank
    if (s.scratch_elems * sizeof(acc) > c.opts().segment_bytes)
      COLLX_THROW(errc::invalid_argument, "options::segment_bytes " + std::to_string(c.opts().segment_bytes) +
                                              " cannot hold " + std::to_string(s.scratch_elems) + " values of " +
                                              std::to_string(sizeof(acc)) + " bytes (one per rank); raise it");
  const auto [scratch, staging] = c.schedule_memory();
  // Calls on other streams finish with the scratch and staging memory first.
  gpu::check(cudaStreamWaitEvent(stream, c.schedule_event(), 0), "cudaStreamWaitEvent");
  device_executor<T, Op> x;
  x.in = in;
  x.out = out;
  x.tmp = static_cast<acc*>(scratch);
  x.staging = static_cast<std::byte*>(staging);
  x.staging_bytes = c.opts().segment_bytes;
  x.op = &op;
  x.world_size = c.size();
  x.comm = c.get();
  x.stream = stream;
  x.limits = c.limits();
  for (const segment& s : segments) x.run(schedule::make_schedule(alg, s.params, in_place));
  gpu::check(cudaEventRecord(c.schedule_event(), stream), "cudaEventRecord");
}

/// The path's name in messages.
template <class Algo, class T, class Op>
constexpr const char* path_name() {
  if constexpr (uses_native<Algo, T, Op>) return "nccl";
  else if constexpr (std::is_same_v<Algo, algo::tree> || !op_traits<Op>::commutative) return "tree";
  else return "ring";
}

template <class Algo, class Op>
constexpr algorithm schedule_algo() {
  if constexpr (std::is_same_v<Algo, algo::tree>) return algorithm::tree;
  else if constexpr (std::is_same_v<Algo, algo::ring>) return algorithm::ring;
  else return schedule_algorithm(op_traits<Op>::commutative);
}

/// Runs `f` and puts `name` in front of any collx::error it throws.
template <class F>
void named(const std::string& name, F&& f) {
  try {
    f();
  } catch (const error& e) {
    COLLX_THROW(e.code(), name + ": " + e.what());
  }
}

/// A call as the ranks compare it under options::check_calls_over (nccl/call_check.hpp): its
/// root (-1: none), count in elements, a v-form's counts (which must be the same on every rank),
/// and all_to_all_v's lists, whose pairs are checked across ranks. (Point-to-point calls do not
/// come here: a check between the two ends of each pair cannot tell the ranks further along a
/// chain of sends that one pair failed, and a rank's send_recv may pair with its peer's separate
/// send and recv, which per-call host exchanges would pair up wrongly.)
struct call_shape {
  std::uint64_t op_hash = 0;  ///< collx::detail::op_signature_hash<Op>() of a reduction, else 0
  int root = -1;
  std::size_t count = 0;
  std::span<const std::size_t> counts{};
  std::span<const std::size_t> send_counts{}, recv_counts{};
};

/// Runs one call named `name` (call_name of `what`): `checks`, this rank's argument checks, which
/// throw collx::error; then, with options::check_calls_over, the check that every rank makes the
/// same call, in which a rank whose checks threw takes part with its refusal before it throws its
/// own error (so that the others throw too instead of waiting in NCCL); then `enqueue`, with
/// `name` put in front of its errors. Errors of the host communicator get `name` in front.
template <class Checks, class Enqueue>
void run_call(communicator& c, const std::string& name, const std::string& what, const call_shape& shape,
              Checks&& checks, Enqueue&& enqueue) {
  collx::communicator* const host = c.opts().check_calls_over;
  if (!host) {
    checks();
    named(name, enqueue);
    return;
  }
  const std::uint64_t number = c.next_call_number();
  // What must agree besides `what`: the op's own type (two unnamed user ops read alike), the NCCL
  // communicator, and segment_bytes (the schedule path's segments and groups follow it).
  std::uint64_t identity = shape.op_hash;
  for (std::uint64_t x : {c.identity(), std::uint64_t{c.opts().segment_bytes}})
    identity = identity * 0x9e3779b97f4a7c15ull ^ x;
  const call_signature sig = make_signature(number, what, shape.root, shape.count, shape.counts, identity);
  const auto over_host = [&](auto&& f) {
    try {
      f();
    } catch (const error& e) {
      if (std::string_view(e.what()).starts_with(name)) throw;
      COLLX_THROW(e.code(), name + ": checking the call over the host communicator: " + e.what());
    }
  };
  const auto refuse = [&](errc code, std::string_view why) {
    try {
      check_same_call(*host, refused(sig, code, why), name);
    } catch (const error&) {  // this rank's own error says more than the exchange's
    }
  };
  try {
    checks();
  } catch (const error& e) {
    std::string_view why = e.what();
    if (why.starts_with(name + ": ")) why.remove_prefix(name.size() + 2);
    refuse(e.code(), why);
    throw;
  } catch (...) {  // not collx's (std::bad_alloc, ...): the others still learn that this rank stopped
    refuse(errc::internal, "its argument checks threw an exception that is not a collx::error");
    throw;
  }
  over_host([&] { check_same_call(*host, sig, name, shape.counts); });
  if (!shape.send_counts.empty())
    over_host([&] { check_all_to_all_counts(*host, shape.send_counts, shape.recv_counts, name); });
  named(name, enqueue);
}

}  // namespace detail

/// recv[i] = op over ranks of send[i], i in [0, count), on every rank. In place when send == recv.
/// @pre send and recv hold count elements on device(); they do not overlap unless equal.
/// @throws collx::error (errc::invalid_argument) for a null buffer, overlap, or the wrong current
///         device; (errc::transport / errc::cuda) when an NCCL or CUDA call fails; with
///         options::check_calls_over, errc::mismatch when the ranks' calls differ, a peer's
///         refusal (its code), and the host communicator's errors (errc::timeout for a rank that
///         never calls), on every rank before anything is enqueued.
template <class Algo = algo::automatic, element T, class Op>
  requires reduction_op<Op, T>
void allreduce(communicator& c, const T* send, T* recv, std::size_t count, const Op& op, cudaStream_t stream) {
  detail::check_algorithm<Algo, Op>();
  const std::string what = detail::call_what<T, Op>("allreduce", detail::path_name<Algo, T, Op>());
  const std::string name = detail::call_name(c, what);
  const bool in_place = static_cast<const void*>(send) == static_cast<const void*>(recv);
  detail::run_call(
      c, name, what, {.op_hash = collx::detail::op_signature_hash<Op>(), .count = count},
      [&] {
        detail::check_args(c, name, count, {send, recv});
        if (!in_place && detail::overlap(send, count * sizeof(T), recv, count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument, name + ": send and recv overlap (in place needs send == recv)");
      },
      [&] {
        if (count == 0) return;
        if constexpr (detail::uses_native<Algo, T, Op>)
          check(ncclAllReduce(send, recv, count, to_nccl(element_type_v<T>), to_nccl(red_op_v<Op>), c.get(), stream),
                "ncclAllReduce", c.get());
        else
          detail::run_schedule(c, collective::allreduce, detail::schedule_algo<Algo, Op>(), send, recv, in_place, 0,
                               count, op, stream);
      });
}

/// Rank r's recv[i] = op over ranks of send[r * recv_count + i], i in [0, recv_count). send holds
/// size() * recv_count elements. In place when recv == send + rank() * recv_count.
/// @pre device buffers on device(); no other overlap.
/// @throws collx::error as allreduce.
template <class Algo = algo::automatic, element T, class Op>
  requires reduction_op<Op, T>
void reduce_scatter(communicator& c, const T* send, T* recv, std::size_t recv_count, const Op& op,
                    cudaStream_t stream) {
  detail::check_algorithm<Algo, Op>();
  const std::string what = detail::call_what<T, Op>("reduce_scatter", detail::path_name<Algo, T, Op>());
  const std::string name = detail::call_name(c, what);
  const std::size_t n = static_cast<std::size_t>(c.size());
  const bool in_place = recv_count && send + static_cast<std::size_t>(c.rank()) * recv_count == recv;
  detail::run_call(
      c, name, what, {.op_hash = collx::detail::op_signature_hash<Op>(), .count = recv_count},
      [&] {
        detail::check_args(c, name, recv_count, {send, recv});
        if (!in_place && detail::overlap(send, n * recv_count * sizeof(T), recv, recv_count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument,
                      name + ": send and recv overlap (in place: recv == send + rank * recv_count)");
        // The schedules read every block of the input while writing the own block.
        if (!detail::uses_native<Algo, T, Op> && in_place)
          COLLX_THROW(errc::invalid_argument, name + ": in-place reduce_scatter runs on NCCL's path only (types "
                                                     "and ops NCCL has, algo::automatic); pass a separate recv buffer");
      },
      [&] {
        if (recv_count == 0) return;
        if constexpr (detail::uses_native<Algo, T, Op>)
          check(ncclReduceScatter(send, recv, recv_count, to_nccl(element_type_v<T>), to_nccl(red_op_v<Op>), c.get(),
                                  stream),
                "ncclReduceScatter", c.get());
        else
          detail::run_schedule(c, collective::reduce_scatter, detail::schedule_algo<Algo, Op>(), send, recv, false, 0,
                               recv_count, op, stream);
      });
}

/// At `root`: recv[i] = op over ranks of send[i], i in [0, count); other ranks' recv is not used
/// (may be null; a literal nullptr compiles: recv is a nullable_ptr, its type send's). In place at the root when
/// send == recv.
/// Root before op, as collx::reduce and gpu::reduce take them (ncclReduce takes op first).
/// @pre root in [0, size()); device buffers on device().
/// @throws collx::error as allreduce, and (errc::invalid_argument) for a bad root.
template <class Algo = algo::automatic, element T, class Op>
  requires reduction_op<Op, T>
void reduce(communicator& c, const T* send, nullable_ptr<std::type_identity_t<T>> recv_or_null, std::size_t count,
            int root, const Op& op, cudaStream_t stream) {
  T* const recv = recv_or_null.p;
  detail::check_algorithm<Algo, Op>();
  const std::string what = detail::call_what<T, Op>("reduce", detail::path_name<Algo, T, Op>());
  const std::string name = detail::call_name(c, what);
  const bool is_root = c.rank() == root;
  const bool in_place = is_root && static_cast<const void*>(send) == static_cast<const void*>(recv);
  detail::run_call(
      c, name, what, {.op_hash = collx::detail::op_signature_hash<Op>(), .root = root, .count = count},
      [&] {
        detail::check_root(c, name, root);
        detail::check_args(c, name, count, {send, is_root ? static_cast<const void*>(recv) : send});
        if (is_root && !in_place && detail::overlap(send, count * sizeof(T), recv, count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument, name + ": send and recv overlap (in place needs send == recv)");
      },
      [&] {
        if (count == 0) return;
        if constexpr (detail::uses_native<Algo, T, Op>)
          check(ncclReduce(send, recv, count, to_nccl(element_type_v<T>), to_nccl(red_op_v<Op>), root, c.get(),
                           stream),
                "ncclReduce", c.get());
        else
          detail::run_schedule(c, collective::reduce, detail::schedule_algo<Algo, Op>(), send, recv, in_place, root,
                               count, op, stream);
      });
}

/// recv[r * send_count + i] = rank r's send[i], i in [0, send_count), on every rank, for any element
/// type (NCCL moves bytes: ncclAllGather on ncclUint8). In place when send == recv + rank() * send_count.
/// @pre recv holds size() * send_count elements on device().
/// @throws collx::error as allreduce.
template <element T>
void all_gather(communicator& c, const T* send, T* recv, std::size_t send_count, cudaStream_t stream) {
  const std::string what = detail::call_what<T, collx::detail::no_op>("all_gather", "nccl");
  const std::string name = detail::call_name(c, what);
  const std::size_t n = static_cast<std::size_t>(c.size());
  detail::run_call(
      c, name, what, {.count = send_count},
      [&] {
        detail::check_args(c, name, send_count, {send, recv});
        const bool in_place = send == recv + static_cast<std::size_t>(c.rank()) * send_count;
        if (!in_place && detail::overlap(send, send_count * sizeof(T), recv, n * send_count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument,
                      name + ": send and recv overlap (in place: send == recv + rank * send_count)");
      },
      [&] {
        if (send_count == 0) return;
        check(ncclAllGather(send, recv, send_count * sizeof(T), ncclUint8, c.get(), stream), "ncclAllGather",
              c.get());
      });
}

/// recv[i] = root's send[i], i in [0, count), on every rank, for any element type (ncclBroadcast on
/// ncclUint8). send is read at the root only (may be null elsewhere, a literal nullptr too: send is a
/// nullable_ptr, its type recv's); in place when send == recv.
/// @pre root in [0, size()); device buffers on device().
/// @throws collx::error as reduce.
template <element T>
void broadcast(communicator& c, nullable_ptr<const std::type_identity_t<T>> send_or_null, T* recv, std::size_t count,
               int root, cudaStream_t stream) {
  const T* const send = send_or_null.p;
  const std::string what = detail::call_what<T, collx::detail::no_op>("broadcast", "nccl");
  const std::string name = detail::call_name(c, what);
  const bool is_root = c.rank() == root;
  detail::run_call(
      c, name, what, {.root = root, .count = count},
      [&] {
        detail::check_root(c, name, root);
        detail::check_args(c, name, count, {recv, is_root ? static_cast<const void*>(send) : recv});
        if (is_root && static_cast<const void*>(send) != static_cast<const void*>(recv) &&
            detail::overlap(send, count * sizeof(T), recv, count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument, name + ": send and recv overlap (in place needs send == recv)");
      },
      [&] {
        if (count == 0) return;
        check(ncclBroadcast(send, recv, count * sizeof(T), ncclUint8, root, c.get(), stream), "ncclBroadcast",
              c.get());
      });
}

namespace detail {
/// A v-form's counts on this rank, in elements: all of them, their sum, and this rank's block (its
/// offset and length).
struct v_layout {
  std::vector<std::size_t> counts;
  std::size_t total = 0, at = 0, mine = 0;
};

/// The v_layout of `counts`, checked (one per rank, none negative, a sum that fits in memory).
template <class T>
v_layout checked_layout(const communicator& c, const std::string& name, const block_counts& counts) {
  if (counts.size() != static_cast<std::size_t>(c.size()))
    COLLX_THROW(errc::invalid_argument, name + ": counts has " + std::to_string(counts.size()) + " entries for " +
                                            std::to_string(c.size()) + " ranks (one per rank)");
  if (!collx::detail::counts_are_sound(counts, sizeof(T)))
    COLLX_THROW(errc::invalid_argument, name + ": " + collx::detail::bad_counts("counts", counts, sizeof(T)));
  const std::span<const std::size_t> v = counts.values();
  v_layout lay{{v.begin(), v.end()}};
  const auto me = static_cast<std::size_t>(c.rank());
  for (std::size_t q = 0; q < v.size(); ++q) {
    lay.total += v[q];
    if (q < me) lay.at += v[q];
  }
  lay.mine = v[me];
  return lay;
}

/// A v-form's buffers: `whole` (named whole_name) holds lay.total elements of T and `block`
/// (block_name) this rank's lay.mine. Throws errc::invalid_argument for a null one with elements,
/// or for block overlapping whole other than as this rank's block of it; returns whether it is
/// that (in place).
template <class T>
bool check_v_buffers(const std::string& name, const v_layout& lay, const T* whole, const char* whole_name,
                     const T* block, const char* block_name) {
  if ((lay.total && !whole) || (lay.mine && !block))
    COLLX_THROW(errc::invalid_argument, name + ": null " + (lay.total && !whole ? whole_name : block_name) + " with " +
                                            std::to_string(lay.total && !whole ? lay.total : lay.mine) +
                                            " elements to move");
  const bool in_place = block == whole + lay.at;
  if (!in_place && overlap(block, lay.mine * sizeof(T), whole, lay.total * sizeof(T)))
    COLLX_THROW(errc::invalid_argument, name + ": " + block_name + " overlaps " + whole_name +
                                            " but is not this rank's block of it (in place: " + block_name + " == " +
                                            whole_name + " + counts[0] + ... + counts[rank - 1])");
  return in_place;
}
}  // namespace detail

/// All-gather with a count per rank: recv = rank 0's block | rank 1's | ... on every rank, rank q's
/// counts[q] elements starting at element counts[0] + ... + counts[q-1] (the layout of the host
/// all_gather_v and of gpu::all_gather_v), for any element type. NCCL has no all-gather-v: this is
/// one group of an ncclBroadcast on ncclUint8 from each rank whose block is not empty
/// (nccl/plan.hpp: rooted_blocks). In place when send == recv + this rank's offset.
/// @param send counts[rank()] elements (may be null, a literal nullptr too, when that is 0)
/// @param recv the sum of the counts (may be null when that is 0)
/// @param counts one per rank (block_counts: std::size_t or any integer type, or a braced list),
///        the same on every rank. Checked across ranks only with options::check_calls_over (see
///        nccl/communicator.hpp): without it, ranks that disagree wait in NCCL until its timeout or
///        abort().
/// @pre send and recv are device memory on device() (or memory NCCL accepts); stream on device().
/// @throws collx::error (errc::invalid_argument) for counts of the wrong length, a negative count,
///         a sum past memory, a null buffer with elements to move, or send overlapping recv other
///         than in place; otherwise as all_gather.
template <element T>
void all_gather_v(communicator& c, nullable_ptr<const std::type_identity_t<T>> send_or_null, T* recv,
                  const block_counts& counts, cudaStream_t stream) {
  const T* const send = send_or_null.p;
  const std::string what = detail::call_what<T, collx::detail::no_op>("all_gather_v", "nccl");
  const std::string name = detail::call_name(c, what);
  detail::v_layout lay;
  detail::run_call(
      c, name, what, {.counts = counts.values()},
      [&] {
        c.check_device(name.c_str());
        lay = detail::checked_layout<T>(c, name, counts);
        detail::check_v_buffers<T>(name, lay, recv, "recv", send, "send");
      },
      [&] {
        if (lay.total == 0) return;
        auto* out = reinterpret_cast<unsigned char*>(recv);
        detail::group_guard g{c.get()};
        g.start();
        for (const rooted_block& b : rooted_blocks(lay.counts, sizeof(T))) {
          // Off the root, NCCL reads no send buffer; the block's place in recv stands in for it.
          const void* from = b.root == c.rank() ? static_cast<const void*>(send) : out + b.offset;
          check(ncclBroadcast(from, out + b.offset, b.bytes, ncclUint8, b.root, c.get(), stream), "ncclBroadcast",
                c.get());
        }
        g.end();
      });
}

/// Reduce-scatter with a count per rank: rank r's recv[i] = op over ranks of send[counts[0] + ... +
/// counts[r-1] + i], i in [0, counts[r]) (the layout of the host reduce_scatter_v and of
/// gpu::reduce_scatter_v). NCCL has no reduce-scatter-v. On NCCL's path (its types and ops, under
/// algo::automatic) this is one group of an ncclReduce to each rank whose block is not empty
/// (nccl/plan.hpp: rooted_blocks), with NCCL's numerics. On collx's schedule path (other types
/// and ops, or algo::ring / algo::tree named) it is one collx reduce (the schedule path of
/// nccl::reduce) to each such rank in turn, in rank order: collx's numerics, and slower than one
/// reduce-scatter of the same bytes (each block travels its own reduce).
/// In place when recv == send + this rank's offset; any other overlap is refused.
/// @param send the sum of the counts (may be null when that is 0)
/// @param recv counts[rank()] elements (may be null, a literal nullptr too, when that is 0)
/// @param counts as all_gather_v's (the same on every rank)
/// @param op the reduction (NCCL's own where native_reduction_v<T, Op>, else collx's kernels)
/// @pre send and recv are device memory on device() (or memory NCCL accepts); stream on device().
/// @throws collx::error as all_gather_v (recv overlapping send other than in place), and as
///         allreduce.
template <class Algo = algo::automatic, element T, class Op>
  requires reduction_op<Op, T>
void reduce_scatter_v(communicator& c, const T* send, nullable_ptr<std::type_identity_t<T>> recv_or_null,
                      const block_counts& counts, const Op& op, cudaStream_t stream) {
  T* const recv = recv_or_null.p;
  detail::check_algorithm<Algo, Op>();
  const std::string what = detail::call_what<T, Op>("reduce_scatter_v", detail::path_name<Algo, T, Op>());
  const std::string name = detail::call_name(c, what);
  detail::v_layout lay;
  bool in_place = false;
  detail::run_call(
      c, name, what, {.op_hash = collx::detail::op_signature_hash<Op>(), .counts = counts.values()},
      [&] {
        c.check_device(name.c_str());
        lay = detail::checked_layout<T>(c, name, counts);
        in_place = detail::check_v_buffers<T>(name, lay, send, "send", recv, "recv");
      },
      [&] {
        if (lay.total == 0) return;
        const std::vector<rooted_block> blocks = rooted_blocks(lay.counts, sizeof(T));
        if constexpr (detail::uses_native<Algo, T, Op>) {
          detail::group_guard g{c.get()};
          g.start();
          for (const rooted_block& b : blocks)
            check(ncclReduce(send + b.offset / sizeof(T), b.root == c.rank() ? recv : nullptr, b.bytes / sizeof(T),
                             to_nccl(element_type_v<T>), to_nccl(red_op_v<Op>), b.root, c.get(), stream),
                  "ncclReduce", c.get());
          g.end();
        } else {
          for (const rooted_block& b : blocks) {
            const bool root = b.root == c.rank();
            detail::run_schedule(c, collective::reduce, detail::schedule_algo<Algo, Op>(), send + b.offset / sizeof(T),
                                 root ? recv : nullptr, root && in_place, b.root, b.bytes / sizeof(T), op, stream);
          }
        }
      });
}

namespace detail {
/// Posts one rank's all-to-all exchanges (nccl/plan.hpp: all_to_all_exchanges) as one NCCL group.
inline void post_exchanges(communicator& c, const void* send, void* recv, const std::vector<peer_exchange>& plan,
                           cudaStream_t stream) {
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  group_guard g{c.get()};
  g.start();
  for (const peer_exchange& x : plan) {
    if (x.send_bytes)
      check(ncclSend(in + x.send_offset, x.send_bytes, ncclUint8, x.peer, c.get(), stream), "ncclSend", c.get());
    if (x.recv_bytes)
      check(ncclRecv(out + x.recv_offset, x.recv_bytes, ncclUint8, x.peer, c.get(), stream), "ncclRecv", c.get());
  }
  g.end();
}
}  // namespace detail

/// All-to-all: block d of this rank's send (count elements) lands in block rank() of rank d's recv,
/// for any element type (bytes: one group of ncclSend/ncclRecv on ncclUint8, as nccl-tests'
/// alltoall; NCCL has no all-to-all call). count is one destination's block, as gpu::all_to_all's
/// and nccl-tests' (the host collx::all_to_all takes the whole buffer). Never in place: NCCL moves
/// the blocks concurrently.
/// @pre send and recv hold size() * count elements on device(); they do not overlap.
/// @throws collx::error (errc::invalid_argument) for a null buffer, overlap, a count whose bytes
///         overflow, or the wrong current device; (errc::transport / errc::cuda) when an NCCL or
///         CUDA call fails. Ranks that disagree on count are told only with
///         options::check_calls_over (errc::mismatch, see nccl/communicator.hpp); without it NCCL
///         waits until its own timeout or abort().
template <element T>
void all_to_all(communicator& c, const T* send, T* recv, std::size_t count, cudaStream_t stream) {
  const std::string what = detail::call_what<T, collx::detail::no_op>("all_to_all", "nccl");
  const std::string name = detail::call_name(c, what);
  const std::size_t n = static_cast<std::size_t>(c.size());
  detail::run_call(
      c, name, what, {.count = count},
      [&] {
        detail::check_args(c, name, count, {send, recv});
        if (count > PTRDIFF_MAX / sizeof(T) / n)
          COLLX_THROW(errc::invalid_argument, name + ": count " + std::to_string(count) + " x " + std::to_string(n) +
                                                  " ranks is more than memory holds");
        if (detail::overlap(send, n * count * sizeof(T), recv, n * count * sizeof(T)))
          COLLX_THROW(errc::invalid_argument,
                      name + ": send and recv overlap (all_to_all over NCCL is never in place)");
      },
      [&] {
        if (count == 0) return;
        const std::vector<std::size_t> counts(n, count);
        detail::post_exchanges(c, send, recv, all_to_all_exchanges(c.rank(), counts, counts, sizeof(T)), stream);
      });
}

/// All-to-all with uneven blocks, the host all_to_all_v's layout: this rank sends send_counts[d]
/// elements to rank d, its blocks packed in rank order in send, and receives recv_counts[q] from
/// rank q, packed in rank order in recv; any element type (bytes, as all_to_all). The counts are
/// host values: where only the senders know them, exchange them first over the host communicator
/// (collx::all_to_all of one count per rank), or with nccl::all_to_all on device memory, then copy
/// them to the host and synchronise the stream.
/// @param send sum of send_counts elements; @param recv sum of recv_counts elements; either may be
///        null (a literal nullptr too) when its counts are all 0; never overlapping
/// @param send_counts,recv_counts one per rank (any integer type: block_counts); recv_counts[q] here
///        must equal send_counts[rank()] on rank q. Checked across ranks only with
///        options::check_calls_over (every rank throws errc::mismatch, the rank that found it
///        naming the pair); without it a disagreement waits in NCCL until its timeout or abort().
/// @throws collx::error (errc::invalid_argument) for lists of the wrong length, a negative count,
///         sums past memory, send_counts[rank()] != recv_counts[rank()], null or overlapping
///         buffers; otherwise as all_to_all.
template <element T>
void all_to_all_v(communicator& c, nullable_ptr<const std::type_identity_t<T>> send_or_null,
                  const block_counts& send_counts, T* recv, const block_counts& recv_counts, cudaStream_t stream) {
  const T* const send = send_or_null.p;
  const std::string what = detail::call_what<T, collx::detail::no_op>("all_to_all_v", "nccl");
  const std::string name = detail::call_name(c, what);
  const std::size_t n = static_cast<std::size_t>(c.size()), me = static_cast<std::size_t>(c.rank());
  std::size_t send_total = 0, recv_total = 0;
  detail::run_call(
      c, name, what, {.send_counts = send_counts.values(), .recv_counts = recv_counts.values()},
      [&] {
        c.check_device(name.c_str());
        if (send_counts.size() != n || recv_counts.size() != n)
          COLLX_THROW(errc::invalid_argument, name + ": send_counts has " + std::to_string(send_counts.size()) +
                                                  " and recv_counts " + std::to_string(recv_counts.size()) +
                                                  " entries for " + std::to_string(n) +
                                                  " ranks (both need one per rank)");
        for (const auto& [list, counts] :
             {std::pair{"send_counts", &send_counts}, std::pair{"recv_counts", &recv_counts}})
          if (!collx::detail::counts_are_sound(*counts, sizeof(T)))
            COLLX_THROW(errc::invalid_argument, name + ": " + collx::detail::bad_counts(list, *counts, sizeof(T)));
        if (send_counts[me] != recv_counts[me])
          COLLX_THROW(errc::invalid_argument, name + ": this rank sends itself " + std::to_string(send_counts[me]) +
                                                  " elements (send_counts[" + std::to_string(me) + "]) but receives " +
                                                  std::to_string(recv_counts[me]) + " from itself (recv_counts[" +
                                                  std::to_string(me) + "]); they must be equal");
        for (std::size_t q = 0; q < n; ++q) send_total += send_counts[q], recv_total += recv_counts[q];
        if ((send_total && !send) || (recv_total && !recv))
          COLLX_THROW(errc::invalid_argument, name + ": null " + (send_total && !send ? "send" : "recv") + " with " +
                                                  std::to_string(send_total && !send ? send_total : recv_total) +
                                                  " elements to move");
        if (detail::overlap(send, send_total * sizeof(T), recv, recv_total * sizeof(T)))
          COLLX_THROW(errc::invalid_argument, name + ": send and recv overlap (all_to_all_v is never in place)");
      },
      [&] {
        if (send_total == 0 && recv_total == 0) return;
        const std::span<const std::size_t> sc = send_counts.values(), rc = recv_counts.values();
        detail::post_exchanges(c, send, recv,
                               all_to_all_exchanges(c.rank(), std::vector<std::size_t>(sc.begin(), sc.end()),
                                                    std::vector<std::size_t>(rc.begin(), rc.end()), sizeof(T)),
                               stream);
      });
}
/// all_to_all_v with a literal nullptr for recv (a rank whose recv_counts are all 0): T from send.
template <element T>
void all_to_all_v(communicator& c, const T* send, const block_counts& send_counts, std::nullptr_t,
                  const block_counts& recv_counts, cudaStream_t stream) {
  all_to_all_v<T>(c, send, send_counts, static_cast<T*>(nullptr), recv_counts, stream);
}

// ---------------------------------------------------------------------------------------------
// Point-to-point, as ncclSend / ncclRecv (see nccl::send for the rules).

namespace detail {
/// Throws errc::invalid_argument unless `peer` (the `role`, "destination" or "source") is
/// collx::no_peer or a rank of c other than this one (`self_ok`: or this one).
inline void check_peer(const communicator& c, const std::string& name, const char* role, int peer, bool self_ok) {
  if (peer == collx::no_peer || (peer >= 0 && peer < c.size() && (self_ok || peer != c.rank()))) return;
  COLLX_THROW(errc::invalid_argument, name + ": " + role + " " + std::to_string(peer) +
                                          (peer == c.rank() ? " is this rank (a rank sends itself nothing but "
                                                              "through send_recv to and from itself)"
                                                            : " is not a rank of 0.." + std::to_string(c.size() - 1) +
                                                                  " nor collx::no_peer"));
}
/// Throws errc::invalid_argument when `count` elements of T are more bytes than memory holds, or
/// `p` is null with count > 0 (`buffer` names it).
template <class T>
void check_buffer(const std::string& name, const char* buffer, const void* p, std::size_t count) {
  if (count > PTRDIFF_MAX / sizeof(T))
    COLLX_THROW(errc::invalid_argument, name + ": " + buffer + " count " + std::to_string(count) +
                                            " is more than memory holds");
  if (count && !p)
    COLLX_THROW(errc::invalid_argument, name + ": null " + buffer + " with count " + std::to_string(count));
}
/// "rank 0/4 nccl send<float32,none,nccl> to 1": a point-to-point call's name in messages.
template <class T>
std::string p2p_name(const communicator& c, const char* call, const std::string& peers) {
  return call_name(c, call_what<T, collx::detail::no_op>(call, "nccl")) + " " + peers;
}

/// nccl::send (B const: buf is sent to peer) or nccl::recv (buf is received from peer).
template <class T, class B>
void one_way(communicator& c, B* buf, std::size_t count, int peer, cudaStream_t stream) {
  constexpr bool sending = std::is_const_v<B>;
  const std::string name =
      p2p_name<T>(c, sending ? "send" : "recv", (sending ? "to " : "from ") + collx::detail::peer_text(peer));
  c.check_device(name.c_str());
  check_peer(c, name, sending ? "destination" : "source", peer, false);
  if (peer == collx::no_peer) return;
  check_buffer<T>(name, "buf", buf, count);
  if (count == 0) return;
  named(name, [&] {
    const std::size_t bytes = count * sizeof(T);
    if constexpr (sending) check(ncclSend(buf, bytes, ncclUint8, peer, c.get(), stream), "ncclSend", c.get());
    else check(ncclRecv(buf, bytes, ncclUint8, peer, c.get(), stream), "ncclRecv", c.get());
  });
}
}  // namespace detail

/// Sends `count` elements of `buf` to rank `peer` (ncclSend on bytes: any element type), matched
/// by peer's nccl::recv or send_recv from this rank with the same count and type, as NCCL's
/// point-to-point: stream-ordered, matched in order per pair of ranks (the k-th send from rank a
/// to rank b meets the k-th recv at b from a). The send may wait on its stream until the matching
/// receive runs, so two ranks that each send to the other before receiving, on one stream each,
/// wait for each other for ever (NCCL's rule): use send_recv (one group), order the calls, or put
/// them in one ncclGroupStart/End of your own. A count of 0 posts nothing; its peer must pass 0
/// too. peer collx::no_peer: nothing is sent (as MPI_PROC_NULL). Point-to-point calls are not
/// checked across ranks, even with options::check_calls_over (a count or type that differs from
/// the receiver's is NCCL's undefined behaviour).
/// @pre buf holds count elements on device().
/// @throws collx::error (errc::invalid_argument) for a peer that is this rank or not a rank (nor
///         collx::no_peer), a null buf with count > 0, a count past memory, the wrong current
///         device; (errc::transport / errc::cuda) when NCCL or CUDA fails.
template <element T>
void send(communicator& c, const T* buf, std::size_t count, int peer, cudaStream_t stream) {
  detail::one_way<T>(c, buf, count, peer, stream);
}

/// Receives `count` elements from rank `peer` into `buf` (ncclRecv), from peer's matching
/// nccl::send or send_recv with the same count and type (send's rules: order, count 0, no_peer,
/// not checked). Writes exactly buf[0, count).
/// @pre buf holds count elements on device().
/// @throws collx::error as send.
template <element T>
void recv(communicator& c, T* buf, std::size_t count, int peer, cudaStream_t stream) {
  detail::one_way<T>(c, buf, count, peer, stream);
}

/// A send of `send_count` elements of `send` to `dst` and a receive of `recv_count` elements from
/// `src` into `recv` in one NCCL group, as MPI_Sendrecv: both progress together, so ring shifts
/// and halo exchanges in which every rank calls send_recv cannot deadlock. Its messages are those
/// of send and recv (each pairs with the peer's send, recv or send_recv). dst and src may both be
/// this rank (recv gets a copy of send; the counts then equal); one alone may not. Either may be
/// collx::no_peer (that side skipped: the edges of a halo exchange that does not wrap around).
/// @pre send holds send_count and recv recv_count elements on device(); they do not overlap.
/// @throws collx::error as send, and errc::invalid_argument for overlapping buffers, only one of
///         dst and src this rank, or, both being this rank, counts that differ.
template <element T>
void send_recv(communicator& c, const T* send, std::size_t send_count, int dst, T* recv, std::size_t recv_count,
               int src, cudaStream_t stream) {
  const std::string name = detail::p2p_name<T>(c, "send_recv", "to " + collx::detail::peer_text(dst) + " from " +
                                                                   collx::detail::peer_text(src));
  const bool sends = dst != collx::no_peer, receives = src != collx::no_peer;
  c.check_device(name.c_str());
  detail::check_peer(c, name, "destination", dst, true);
  detail::check_peer(c, name, "source", src, true);
  if ((dst == c.rank()) != (src == c.rank()))
    COLLX_THROW(errc::invalid_argument, name + ": only one of destination and source is this rank (a rank sends "
                                               "itself nothing; both: a copy)");
  if (dst == c.rank() && send_count != recv_count)
    COLLX_THROW(errc::invalid_argument, name + ": a copy to this rank needs equal counts (send " +
                                            std::to_string(send_count) + ", recv " + std::to_string(recv_count) + ")");
  if (sends) detail::check_buffer<T>(name, "send", send, send_count);
  if (receives) detail::check_buffer<T>(name, "recv", recv, recv_count);
  if (sends && receives && detail::overlap(send, send_count * sizeof(T), recv, recv_count * sizeof(T)))
    COLLX_THROW(errc::invalid_argument, name + ": send and recv overlap (send_recv has no in-place form)");
  const bool out = sends && send_count > 0, in = receives && recv_count > 0;
  if (!out && !in) return;
  detail::named(name, [&] {
    detail::group_guard g{c.get()};
    g.start();
    if (out) check(ncclSend(send, send_count * sizeof(T), ncclUint8, dst, c.get(), stream), "ncclSend", c.get());
    if (in) check(ncclRecv(recv, recv_count * sizeof(T), ncclUint8, src, c.get(), stream), "ncclRecv", c.get());
    g.end();
  });
}

}  // namespace nccl
}  // namespace v0
}  // namespace collx
