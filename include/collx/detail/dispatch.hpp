/// @file detail/dispatch.hpp
/// The middle layer of every collective: resolves the algorithm, builds the call signature, cuts the
/// call into segments that fit the scratch bound, builds each segment's schedule and runs it, and
/// names rank, world size and call in every error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/algo/build.hpp>
#include <collx/algo/hierarchical.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/debug_log.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/executor.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/detail/shared_allreduce.hpp>
#include <collx/detail/signature_names.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>
#include <collx/node_layout.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// How a call's data is laid out (elements).
struct call_layout {
  std::size_t count = 0;                     ///< vector collectives: the vector's length
  std::span<const std::size_t> counts;       ///< reduce_scatter / all_gather: every rank's block size
  std::span<const std::size_t> send_counts;  ///< all_to_all: elements this rank sends to each peer
  std::span<const std::size_t> recv_counts;  ///< all_to_all: elements this rank receives from each peer
  bool varying = false;                      ///< a v-form (counts are the user's, not uniform)

  static call_layout vector(std::size_t count) {
    call_layout l;
    l.count = count;
    return l;
  }
  static call_layout blocks(std::span<const std::size_t> counts, bool varying) {
    call_layout l;
    l.counts = counts;
    l.varying = varying;
    return l;
  }
  static call_layout pairs(std::span<const std::size_t> send, std::span<const std::size_t> recv, bool varying) {
    call_layout l;
    l.send_counts = send;
    l.recv_counts = recv;
    l.varying = varying;
    return l;
  }
};

/// A v-form's per-rank counts as this rank passed them, for mismatch messages: "counts [3, 0, 7]"
/// (at most 16 listed, then "... (n in all)").
inline std::string describe_counts(std::span<const std::size_t> counts) {
  std::string s = "counts [";
  for (std::size_t i = 0; i < counts.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(counts[i]);
  if (counts.size() > 16) s += ", ... (" + std::to_string(counts.size()) + " in all)";
  return s + "]";
}

/// "rank 3/8 allreduce#42<float32,sum,ring>" (without "#42" when seq is 0: a call rejected before
/// it got a sequence number; without the op when `op` is empty; "all_gather_v" etc. when `varying`,
/// the v-form with a count per rank). Not a template: every (type, op) of every collective names its
/// calls, and one copy of this per pair cost compile time.
inline std::string call_name(const communicator& comm, collective c, std::uint64_t seq, std::string_view type,
                             std::string_view op, std::string_view algo, bool varying = false) {
  std::string s = "rank " + std::to_string(comm.rank()) + "/" + std::to_string(comm.size()) + " " +
                  std::string(collective_name(c)) + (varying ? "_v" : "") +
                  (seq ? "#" + std::to_string(seq) : std::string()) + "<" +
                  std::string(type);
  if (!op.empty()) s += "," + std::string(op);
  if (!algo.empty()) s += "," + std::string(algo);
  return s + ">";
}

/// call_name for element type T and op Op (no_op: none).
template <class T, class Op>
std::string call_name(const communicator& comm, collective c, std::uint64_t seq, std::string_view algo) {
  std::string_view op;
  if constexpr (!std::is_same_v<Op, no_op>) op = op_traits<Op>::name;
  return call_name(comm, c, seq, type_name<T>(), op, algo);
}

/// Throws if the communicator failed in an earlier call, saying so (with that failure's code and
/// text), so that the old error does not read as this call's own. `what` names this call.
/// `what()` names the call; it is built only on failure (a string per call costs small messages).
template <class What>
void check_not_failed(communicator& comm, What&& what) {
  transport& t = comm.get_transport();  // (a moved-from communicator throws its own error here)
  try {
    t.check();
  } catch (const error& e) {
    const std::string why = std::string(what()) +
                            ": the communicator had already failed when this call began and cannot be used any more "
                            "(every rank's later calls fail at once); the first failure: " + e.what();
    comm.log_failure(e.code(), why);  // COLLX_DEBUG=warn: a rank may learn of the failure only here
    COLLX_THROW(e.code(), why);
  }
}

/// Called in a catch block of a call that an exception cuts short: fails the communicator with the
/// exception's text (a std::exception that is not a collx::error, e.g. from a user's op or
/// selector, as errc::aborted), so that the peers, left in the call, learn why now instead of at
/// their timeout. `call` names the call. A no-op when the communicator failed already.
inline void fail_for_escaping(communicator& comm, const std::string& call) {
  try {
    throw;
  } catch (const error& e) {
    comm.fail(e.code(), call + ": " + e.what());
  } catch (const std::exception& e) {
    comm.fail(errc::aborted, call + ": " + e.what());
  } catch (...) {
    comm.fail(errc::aborted, call + ": an exception that is not a std::exception");
  }
}

/// Raises errc::invalid_argument with `msg` (which names the call) before any byte moves, and
/// fails the communicator so that the other ranks get an error too instead of waiting for this one.
[[noreturn]] inline void reject_call(communicator& comm, const std::string& msg) {
  comm.fail(errc::invalid_argument, "invalid arguments: " + msg);  // the peers read "rank R failed: invalid arguments: ..."
  COLLX_THROW(errc::invalid_argument, msg);
}

/// reject_call for this call (element type and op named `type` and `op`). `varying`: the call is
/// the collective's v-form (named so).
[[noreturn]] inline void invalid_call(communicator& comm, collective c, std::string_view type, std::string_view op,
                                      const std::string& what, bool varying = false) {
  reject_call(comm, call_name(comm, c, 0, type, op, "", varying) + ": " + what);
}

/// invalid_call for element type T and op Op (no_op: none).
template <class T, class Op>
[[noreturn]] void invalid_call(communicator& comm, collective c, const std::string& what, bool varying = false) {
  std::string_view op;
  if constexpr (!std::is_same_v<Op, no_op>) op = op_traits<Op>::name;
  invalid_call(comm, c, type_name<T>(), op, what, varying);
}

/// Rejects a buffer of `count` elements at a null address (a std::span(nullptr, n) the caller
/// built): it would be read or written at address 0. `name` names it in the message.
template <class T, class Op>
void require_address(communicator& comm, collective c, const char* name, const void* data, std::size_t count,
                     bool varying = false) {
  if (data == nullptr && count != 0)
    invalid_call<T, Op>(comm, c, std::string(name) + " is a null pointer with " + std::to_string(count) + " elements",
                        varying);
}

/// True if byte ranges [a, a + an) and [b, b + bn) share a byte.
inline bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  if (!an || !bn) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + bn && pb < pa + an;
}

inline std::uint64_t hash_counts(std::span<const std::size_t> c) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t v : c)
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}

/// Elements of this rank's call: the vector, the sum of the counts (reduce_scatter, all_gather
/// and their v-forms), or what this rank sends (all_to_all).
inline std::size_t elements_moved(collective coll, const call_layout& lay) {
  std::size_t total = lay.count;
  if (!lay.counts.empty()) total = std::accumulate(lay.counts.begin(), lay.counts.end(), std::size_t{0});
  if (coll == collective::all_to_all) total = std::accumulate(lay.send_counts.begin(), lay.send_counts.end(), std::size_t{0});
  return total;
}

/// A call's signature but for its algorithm and what communicator::record_call sets: the count all ranks agree on (the
/// vector, the per-rank block, the total for a v-form, 0 for all_to_all_v, whose counts differ
/// per pair), the element type and op (hashes; op 0: none), the root, and the v-form's counts.
inline call_signature layout_signature(collective coll, const call_layout& lay, int root, std::size_t value_size,
                                       std::uint64_t type_hash, std::uint64_t op_hash) {
  call_signature sig;
  sig.coll = coll;
  sig.count = lay.count;
  if (!lay.counts.empty()) sig.count = lay.varying ? elements_moved(coll, lay) : lay.counts.front();
  if (coll == collective::all_to_all) sig.count = lay.varying ? 0 : lay.send_counts.front();
  sig.type_size = static_cast<std::uint32_t>(value_size);
  sig.type_hash = type_hash;
  sig.op_hash = op_hash;
  sig.root = root;
  sig.varying = lay.varying ? 1 : 0;
  sig.layout_hash = lay.varying && coll != collective::all_to_all ? hash_counts(lay.counts) : 0;
  return sig;
}

/// Starts fn(comm) on comm's progress thread (see communicator::submit_async).
template <class F>
request start_async(communicator& comm, F fn) {
  communicator* c = &comm;  // stays valid: moving or destroying comm first drains its queue
  return comm.submit_async([c, fn]() mutable { fn(*c); });
}

/// Compile-time checks shared by every front.
template <class Algo, class Op>
constexpr void static_check_algorithm() {
  if constexpr (is_hierarchical_v<Algo>) {
    static_assert(!is_hierarchical_v<typename Algo::intra> && !is_hierarchical_v<typename Algo::inter>,
                  "collx: algo::hierarchical<Intra, Inter> takes flat algorithms (ring, tree, direct, automatic)");
    static_check_algorithm<typename Algo::intra, Op>();
    static_check_algorithm<typename Algo::inter, Op>();
  } else {
    static_assert(std::is_same_v<Algo, algo::automatic> || std::is_same_v<Algo, algo::ring> ||
                      std::is_same_v<Algo, algo::tree> || std::is_same_v<Algo, algo::direct>,
                  "collx: the algorithm must be algo::ring, algo::tree, algo::direct, algo::automatic or "
                  "algo::hierarchical<Intra, Inter>");
    if constexpr (!std::is_same_v<Op, no_op>)
      static_assert(!std::is_same_v<Algo, algo::ring> || op_traits<Op>::commutative,
                    "collx: algo::ring combines each block in a rotated rank order, so it needs a commutative op. "
                    "Use algo::tree or algo::direct (both combine in rank order), or declare the op commutative "
                    "with collx::commutative_op{...} or 'static constexpr bool commutative = true;'.");
  }
}

/// A flat algorithm tag's algorithm, or none for algo::automatic (the communicator's selector).
template <class Algo>
constexpr std::optional<algorithm> flat_algorithm() {
  if constexpr (std::is_same_v<Algo, algo::automatic>) return std::nullopt;
  else return Algo::kind;
}

/// Runs a call with algo::hierarchical: `intra` inside each node, `inter` across nodes (none:
/// algo::automatic); detail/hierarchical.hpp. Run-time algorithms, so that every
/// hierarchical<Intra, Inter> and algo::automatic share one instantiation per (T, Op).
template <class T, class Op>
void run_hierarchical(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root,
                      const Op& op, const call_layout& lay, std::optional<algorithm> intra,
                      std::optional<algorithm> inter);

/// Whether algo::automatic runs this call hierarchically: a hierarchy whose nodes hold several
/// ranks each is attached (one node too: its communicator then runs the whole call, on shared
/// memory under connect_hierarchical rather than over the world's MPI), the layout suits the op,
/// and COLLX_ALGO does not force a flat algorithm for the collective.
template <class Op>
bool automatic_goes_hierarchical(const communicator& comm, collective coll) {
  const hierarchy* h = comm.get_hierarchy();
  return h && automatic_runs_on_levels(h->layout, comm.options(), coll,
                                       op_traits<Op>::commutative || std::is_same_v<Op, no_op>);
}

template <class T, class Op>
void run_flat(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root, const Op& op,
              const call_layout& lay, std::optional<algorithm> fixed);

/// Runs one collective call on this rank. `in`/`out` are the user's buffers (either may be null
/// where the collective does not use it on this rank).
template <class T, class Op, class Algo>
void run_collective(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root,
                    const Op& op, const call_layout& lay) {
  static_assert(!op_narrows_elements<Op, T>,
                "collx: the op's parameter or return type narrows the elements (an op taking int on float elements "
                "truncates each value: 0.75 + 0.75 = 0): give it parameters and a result that hold every element "
                "value (T or a wider type; float on half and bfloat16), and convert inside the op where that is meant");
  comm.drain_async();  // calls run in the order made: earlier *_async ones first
  const communicator::call_scope one_thread(comm);
  const communicator::running_scope running(comm, coll);  // the op's code may not call on comm meanwhile
  if constexpr (is_hierarchical_v<Algo>) {
    run_hierarchical<T, Op>(comm, coll, in, out, in_place, root, op, lay, flat_algorithm<typename Algo::intra>(),
                            flat_algorithm<typename Algo::inter>());
  } else if constexpr (std::is_same_v<Algo, algo::automatic>) {
    if (automatic_goes_hierarchical<Op>(comm, coll))
      run_hierarchical<T, Op>(comm, coll, in, out, in_place, root, op, lay, std::nullopt, std::nullopt);
    else
      run_flat<T, Op>(comm, coll, in, out, in_place, root, op, lay, std::nullopt);
  } else {
    run_flat<T, Op>(comm, coll, in, out, in_place, root, op, lay, Algo::kind);
  }
}

/// What run_flat needs of a call's element type T and op Op, as plain values and pointers, so that
/// the body (signature, selection, segmentation, errors) compiles once per translation unit
/// instead of once per (T, Op): that body was a third of the code each new (type, op) pair
/// instantiated.
struct typed_call {
  std::size_t value_size = 0;  ///< sizeof(T)
  std::size_t acc_size = 0;    ///< sizeof the accumulator (reduction<T, Op>::acc; T without an op)
  bool reduces = false;        ///< Op is not no_op
  bool commutative = false;    ///< op_traits<Op>::commutative
  std::uint64_t type_hash = 0, op_hash = 0;  ///< the call signature's (0: no op)
  std::string_view type_name, op_name;       ///< for messages (op_name empty: no op)
  const void* in = nullptr;                  ///< the user's input (T)
  void* out = nullptr;                       ///< the user's output (T)
  exec_view view;                            ///< the typed kernels; base[] set per segment
  bool* stream_output = nullptr;             ///< the exec_context's flag (exec_context::stream_output)
  shared_fold_fn shared_fold = nullptr;  ///< shared_fold<T, Op>; null where Op does not reduce
  const void* op = nullptr;              ///< the user's op, for shared_fold
};

/// run_flat's body on a typed_call.
inline void run_flat_untyped(communicator& comm, collective coll, bool in_place, int root, const call_layout& lay,
                             std::optional<algorithm> fixed, typed_call& tc) {
  const bool reduces = tc.reduces;
  transport& tp = comm.get_transport();
  const int n = comm.size(), r = comm.rank();

  // The bytes the selector sees: the same on every rank, for the ranks to choose alike (an
  // all_to_all_v rank's own sends are not: 0 there).
  const std::size_t total = elements_moved(coll, lay);
  const bool own_total = coll == collective::all_to_all && lay.varying;
  selection_query q{coll, n, own_total ? 0 : total * tc.value_size, tc.commutative || !reduces};
  algorithm alg = algorithm::direct;
  try {
    alg = fixed ? *fixed : comm.select_in_call(q);
  } catch (...) {  // the user's selector threw: the peers are in the call already
    fail_for_escaping(comm, call_name(comm, coll, 0, tc.type_name, tc.op_name, "", lay.varying));
    throw;
  }

  call_signature sig = layout_signature(coll, lay, root, tc.value_size, tc.type_hash, tc.op_hash);
  sig.algo = static_cast<std::uint8_t>(alg);
  if (alg == algorithm::ring && !comm.options().ring_order.empty()) {  // ranks must agree on the ring
    const std::vector<std::size_t> ring(comm.options().ring_order.begin(), comm.options().ring_order.end());
    sig.layout_hash ^= hash_counts(ring) * 31;
  }
  comm.record_call(sig);

  auto name = [&] { return call_name(comm, coll, sig.seq, tc.type_name, tc.op_name, algorithm_name(alg), lay.varying); };
  check_not_failed(comm, name);
  const call_trace trace([&] { return name() + comm.log_where(); }, total, total * tc.value_size);  // COLLX_DEBUG=trace
  try {
    tp.announce(sig);  // may find a peer's query for this call that differs: named as the call's own failure
    if (total == 0 && coll != collective::all_to_all && coll != collective::barrier) {  // all ranks know
      tp.moves_nothing(sig);  // ... unless one disagrees: tell those that cannot see announcements
      return;
    }

    // Every field is set: the cached parameters keep the last call's values (and vectors).
    schedule::params& p = comm.schedules().params();
    p.coll = coll;
    p.world_size = n;
    p.rank = r;
    p.root = root < 0 ? 0 : root;
    p.one_shot = true;
    p.slices = 1;
    p.keep_empty = false;
    p.ring = comm.options().ring_order;
    const auto un = static_cast<std::size_t>(n);
    p.blocks.resize(un);
    *tc.stream_output = reduces && total * tc.value_size >= comm.options().streaming_min_bytes;
    const std::size_t seg_elems = std::max<std::size_t>(1, comm.options().max_segment_bytes / tc.acc_size);

    auto run_segment = [&](std::size_t scratch_elems) {
      tc.view.base[static_cast<std::size_t>(schedule::buffer::scratch)] =
          reduces && scratch_elems ? static_cast<const std::byte*>(comm.scratch(scratch_elems * tc.acc_size)) : nullptr;
      execute(tp, sig, comm.schedules().steps(alg, in_place), tc.view);
    };
    // Per-rank block offsets: prefix sums of the counts.
    count_array prefix(lay.counts.empty() ? 0 : lay.counts.size() + 1);
    if (!lay.counts.empty()) {
      for (std::size_t c = 0; c < lay.counts.size(); ++c) prefix[c + 1] = prefix[c] + lay.counts[c];
    }

    switch (coll) {
      case collective::allreduce:
      case collective::reduce:
      case collective::broadcast: {
        // Shared buffers (collx::shm_buffer): fold and write in place.
        if (tc.shared_fold && coll == collective::allreduce && alg == algorithm::direct && n > 1 &&
            total * tc.value_size >= shared_allreduce_min_bytes && tp.has_shared() &&
            shared_allreduce(tp, sig, tc.in, tc.out, total, tc.value_size, tc.shared_fold, tc.op,
                             shared_stream_footprint_bytes(comm.options().streaming_min_bytes)))
          break;
        const std::size_t step = reduces ? seg_elems : total;
        for (std::size_t base = 0; base < total; base += step) {
          const std::size_t len = std::min(step, total - base);
          schedule::vector_blocks_into(p.blocks, len, n);
          for (auto& b : p.blocks) b.in += base, b.out += base;
          p.one_shot = cost_model::direct_allreduce_one_shot({coll, n, len * tc.value_size, true});
          p.slices = std::clamp<std::size_t>(len * tc.value_size / (64 * 1024), 1, 256);
          run_segment(len);
        }
        break;
      }
      case collective::reduce_scatter:
        if (alg == algorithm::tree) {
          // Contiguous segments of the whole input (the tree reduces whole vectors).
          for (std::size_t lo = 0; lo < total; lo += seg_elems) {
            const std::size_t hi = std::min(total, lo + seg_elems);
            for (std::size_t c = 0; c < un; ++c) {
              const std::size_t s = std::clamp(prefix[c], lo, hi), e = std::clamp(prefix[c + 1], lo, hi);
              p.blocks[c] = {s, s - std::min(s, prefix[c]), s - lo, e - s, e - s};
            }
            run_segment(hi - lo);
          }
        } else {
          // The same slice of every block, so that every rank works in every segment.
          const std::size_t per_block = std::max<std::size_t>(1, seg_elems / un);
          const std::size_t longest = *std::max_element(lay.counts.begin(), lay.counts.end());
          for (std::size_t lo = 0; lo < longest; lo += per_block) {
            std::size_t t = 0;
            for (std::size_t c = 0; c < un; ++c) {
              const std::size_t cnt = lay.counts[c], s = std::min(cnt, lo), e = std::min(cnt, lo + per_block);
              p.blocks[c] = {prefix[c] + s, s, t, e - s, e - s};
              t += e - s;
            }
            run_segment(t);
          }
        }
        break;
      case collective::all_gather:
        for (std::size_t c = 0; c < un; ++c) p.blocks[c] = {0, prefix[c], 0, lay.counts[c], lay.counts[c]};
        run_segment(0);
        break;
      case collective::all_to_all: {
        std::size_t sp = 0, rp = 0;
        for (std::size_t c = 0; c < un; ++c) {
          p.blocks[c] = {sp, rp, 0, lay.send_counts[c], lay.recv_counts[c]};
          sp += lay.send_counts[c];
          rp += lay.recv_counts[c];
        }
        p.keep_empty = lay.varying;
        run_segment(0);
        break;
      }
      case collective::barrier:
      case collective::send_recv:
        run_segment(0);
        break;
    }
  } catch (const error& e) {
    // Cut short, this call leaves its peers in it: fail the communicator so that they learn why
    // now, not at their timeout (a no-op when a transport error already failed it, as most do).
    std::string what = name() + ": " + e.what();
    // The signature holds only a hash of the counts (reduce_scatter_v, all_gather_v): name this
    // rank's, for the user to compare.
    if (lay.varying && std::string_view(e.what()).find("per-rank counts differ") != std::string_view::npos)
      what += "; rank " + std::to_string(r) + "'s " + describe_counts(lay.counts);
    comm.fail(e.code(), what);
    COLLX_THROW(e.code(), what);
  } catch (...) {  // a user's op threw something else: fail as well, and let it through as it is
    fail_for_escaping(comm, name());
    throw;
  }
}

/// run_collective without a hierarchy: `fixed` is the algorithm the call's tag names, or none for
/// algo::automatic (then comm.select decides). Not a template on the tag, so that ring, tree,
/// direct and automatic calls on one (T, Op) share one instantiation: four copies of the call's
/// body were most of the compile time of a program that tries several algorithms (the tests).
template <class T, class Op>
void run_flat(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root, const Op& op,
              const call_layout& lay, std::optional<algorithm> fixed) {
  using acc = typename reduction<T, Op>::acc;
  constexpr bool reduces = !std::is_same_v<Op, no_op>;
  exec_context<T, Op> cx;
  cx.in = in;
  cx.out = out;
  cx.op = &op;
  cx.world_size = comm.size();
  typed_call tc;
  tc.value_size = sizeof(T);
  tc.acc_size = sizeof(acc);
  tc.reduces = reduces;
  tc.commutative = op_traits<Op>::commutative;
  tc.type_hash = type_signature_hash<T>;
  tc.op_hash = reduces ? op_signature_hash<Op>() : 0;
  (void)names_recorded<T, Op>;  // so that mismatch messages can name them
  tc.type_name = type_name<T>();
  if constexpr (reduces) {
    tc.op_name = op_traits<Op>::name;
    tc.shared_fold = &shared_fold<T, Op>;
  }
  tc.in = in;
  tc.out = out;
  tc.view = view_of(cx);
  tc.stream_output = &cx.stream_output;
  tc.op = &op;
  run_flat_untyped(comm, coll, in_place, root, lay, fixed, tc);
}

}  // namespace detail
}  // namespace v0
}  // namespace collx

#include <collx/detail/hierarchical.hpp>  // run_hierarchical's definition
