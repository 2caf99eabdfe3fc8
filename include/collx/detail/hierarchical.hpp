/// @file detail/hierarchical.hpp
/// How algo::hierarchical<Intra, Inter> runs each collective on the node-local and cross-node
/// communicators of a hierarchy (see algo/hierarchical.hpp for the scheme and its numerics).
/// Included at the end of detail/dispatch.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <collx/detail/dispatch.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// The op the levels combine with: avg sums and divides once at the end.
template <class Op>
using level_op_t = std::conditional_t<op_traits<Op>::is_avg, ops::sum, Op>;

/// The level op made from the user's op: the op itself (ops may carry state), or sum for avg.
template <class Op>
level_op_t<Op> level_op(const Op& op) {
  if constexpr (op_traits<Op>::is_avg) return ops::sum{};
  else return op;
}

/// Prefix sums: offsets[i] = counts[0] + ... + counts[i - 1].
inline std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> o(counts.size() + 1, 0);
  for (std::size_t i = 0; i < counts.size(); ++i) o[i + 1] = o[i] + counts[i];
  return o;
}

/// Per segment, every rank's block is cut to the same slice [lo, lo + per_block); the slices are
/// packed grouped by local rank, then by node: group l' = blocks of ranks (0, l'), (1, l'), ...
struct segment_packing {
  std::vector<std::size_t> slice;       ///< slice[r]: elements of rank r's block in this segment
  std::vector<std::size_t> group;       ///< group[l']: elements of local-rank group l'
  std::vector<std::size_t> group_off;   ///< offsets of the groups
  std::vector<std::size_t> in_group;    ///< in_group[m']: elements of node m' in this rank's group
  std::vector<std::size_t> in_group_off;  ///< offsets of those elements in the group
  std::size_t total = 0;                  ///< elements of the whole packed segment
};

/// The packing of the segment at `lo` for this rank of `lay` (not a template: it does not depend
/// on the element type, and every (type, op) of a collective reaches it).
inline segment_packing pack_segment(const node_layout& lay, std::span<const std::size_t> counts, std::size_t lo,
                                    std::size_t per_block) {
  const int L = lay.local_size, M = lay.node_count, l = lay.local_rank;
  segment_packing p;
  p.slice.resize(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r) p.slice[r] = counts[r] > lo ? std::min(per_block, counts[r] - lo) : 0;
  p.group.assign(static_cast<std::size_t>(L), 0);
  for (int gl = 0; gl < L; ++gl)
    for (int gm = 0; gm < M; ++gm) p.group[static_cast<std::size_t>(gl)] += p.slice[static_cast<std::size_t>(lay.world_rank(gm, gl))];
  p.group_off = offsets_of(p.group);
  p.total = p.group_off.back();
  for (int gm = 0; gm < M; ++gm) p.in_group.push_back(p.slice[static_cast<std::size_t>(lay.world_rank(gm, l))]);
  p.in_group_off = offsets_of(p.in_group);
  return p;
}

/// A level call's own error `what` ("rank 1/2 allreduce#3<...>: ...", in the level's rank numbers)
/// with the level and this rank's world rank named: "cross-node communicator rank 1/2 (world rank
/// 3) allreduce#3<...>: ...". Any other text (a failure taken over from another level or the whole
/// communicator, which numbers world ranks) is returned as it is.
inline std::string named_by_level(communicator& c, std::string what) {
  const transport& t = c.get_transport();
  const std::string own = "rank " + std::to_string(c.rank()) + "/" + std::to_string(c.size()) + " ";
  const auto r = static_cast<std::size_t>(c.rank());
  if (t.level().empty() || what.rfind(own, 0) != 0 || r >= t.level_world_ranks().size()) return what;
  return t.level() + " " + own + "(world rank " + std::to_string(t.level_world_ranks()[r]) + ") " + what.substr(own.size());
}

/// Runs one level's part of a hierarchical call: flat, as a call of its own on that level's
/// communicator (which users can reach through the hierarchy, so it keeps a collective's
/// one-thread check). Its errors name the level (named_by_level).
template <class E, class LOp>
void run_level(communicator& c, collective coll, const void* in, void* out, bool in_place, int root, const LOp& lop,
               const call_layout& lay, std::optional<algorithm> a) {
  c.drain_async();
  const communicator::call_scope one_thread(c);
  const communicator::running_scope running(c, coll);  // the op's code may not call on the level meanwhile
  try {
    run_flat<E, LOp>(c, coll, static_cast<const E*>(in), static_cast<E*>(out), in_place, root, lop, lay, a);
  } catch (const error& e) {
    COLLX_THROW(e.code(), named_by_level(c, e.what()));
  }
}

/// What a hierarchical call needs of its element type T and op Op, as plain values and pointers
/// (like typed_call for flat calls), so that hierarchical_call compiles once per translation unit:
/// it was a template on (T, Op) and most of the code each automatic (type, op) pair instantiated.
/// Partial results cross the levels in the accumulator type `acc` (reduction<T, Op>::acc).
struct hierarchical_types {
  std::size_t value_size = 0;  ///< sizeof(T)
  std::size_t acc_size = 0;    ///< sizeof(acc) (== value_size without an op)
  bool reduces = false;        ///< Op is not no_op
  bool commutative = false;    ///< op_traits<Op>::commutative
  /// Values must be widened into acc and finished (red::needs_finalize: narrow floats, avg), so
  /// all-reduce runs in scratch memory instead of on the user's buffers.
  bool widens = false;
  std::string_view type_name, op_name;  ///< for messages (op_name empty: no op)
  std::uint64_t type_hash = 0, op_hash = 0;  ///< the world call signature's (0: no op)
  const void* op = nullptr;             ///< the user's op
  /// Runs one level's part on a level communicator (run_level): buffers, layout, algorithm (none:
  /// automatic) and the user's op where the level reduces.
  using level_fn = void (*)(communicator&, collective, const void* in, void* out, bool in_place, int root,
                            const call_layout&, std::optional<algorithm>, const void* op);
  level_fn reduce_acc = nullptr;     ///< run_level on acc with the level op (the user's op; sum for avg)
  level_fn move_acc = nullptr;       ///< run_level on acc without an op
  level_fn move_values = nullptr;    ///< run_level on T without an op
  /// run_level on T with the user's op (none where Op is no_op): the whole call on one level, for
  /// a single node.
  level_fn run_values = nullptr;
  /// dst[i] = widen(src[i]) (T -> acc) for i < n.
  void (*start)(const void* src, void* dst, std::size_t n) = nullptr;
  /// dst[i] = finalize(src[i]) (acc -> T: rounded once, avg divided once) for i < n.
  void (*finish)(const void* src, void* dst, std::size_t n, int world_size) = nullptr;
};

/// hierarchical_types for T and Op (`op` must outlive the call).
template <class T, class Op>
hierarchical_types hierarchical_types_of(const Op& op) {
  using red = reduction<T, Op>;
  using acc = typename red::acc;
  hierarchical_types t;
  t.value_size = sizeof(T);
  t.acc_size = sizeof(acc);
  t.type_name = type_name<T>();
  t.type_hash = type_signature_hash<T>;
  (void)names_recorded<T, Op>;  // so that mismatch messages can name them
  t.op = &op;
  t.move_values = [](communicator& c, collective coll, const void* in, void* out, bool in_place, int root,
                     const call_layout& lay, std::optional<algorithm> a, const void*) {
    run_level<T, no_op>(c, coll, in, out, in_place, root, no_op{}, lay, a);
  };
  t.run_values = [](communicator& c, collective coll, const void* in, void* out, bool in_place, int root,
                    const call_layout& lay, std::optional<algorithm> a, const void* f) {
    run_level<T, Op>(c, coll, in, out, in_place, root, *static_cast<const Op*>(f), lay, a);
  };
  if constexpr (!std::is_same_v<Op, no_op>) {
    t.reduces = true;
    t.commutative = op_traits<Op>::commutative;
    t.widens = red::needs_finalize;
    t.op_name = op_traits<Op>::name;
    t.op_hash = op_signature_hash<Op>();
    t.reduce_acc = [](communicator& c, collective coll, const void* in, void* out, bool in_place, int root,
                      const call_layout& lay, std::optional<algorithm> a, const void* f) {
      run_level<acc, level_op_t<Op>>(c, coll, in, out, in_place, root, level_op(*static_cast<const Op*>(f)), lay, a);
    };
    t.move_acc = [](communicator& c, collective coll, const void* in, void* out, bool in_place, int root,
                    const call_layout& lay, std::optional<algorithm> a, const void*) {
      run_level<acc, no_op>(c, coll, in, out, in_place, root, no_op{}, lay, a);
    };
    t.start = [](const void* src, void* dst, std::size_t n) {
      const T* s = static_cast<const T*>(src);
      acc* d = static_cast<acc*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = red::widen(s[i]);
    };
    t.finish = [](const void* src, void* dst, std::size_t n, int world_size) {
      const acc* s = static_cast<const acc*>(src);
      T* d = static_cast<T*>(dst);
      for (std::size_t i = 0; i < n; ++i) d[i] = red::finalize(s[i], world_size);
    };
  }
  return t;
}

/// One hierarchical call on this rank; the layout was checked by run_hierarchical. The levels run
/// flat (their communicators have no hierarchy), `intra` inside the node and `inter` across nodes.
/// Buffers are bytes: T (value_size) for the user's, acc (acc_size) for scratch.
struct hierarchical_call {
  communicator& world;
  hierarchy& h;
  const hierarchical_types& t;
  std::optional<algorithm> intra, inter;  ///< none: algo::automatic
  const node_layout& lay = h.layout;
  const int L = lay.local_size, M = lay.node_count, l = lay.local_rank, m = lay.node_index;

  /// Elements per segment of the whole communicator's scratch memory.
  std::size_t segment_elems(std::size_t elem_bytes) const {
    return std::max<std::size_t>(1, world.options().max_segment_bytes / elem_bytes);
  }
  /// The world communicator's scratch memory, at least `bytes` (and 1) bytes.
  std::byte* scratch(std::size_t bytes) const { return static_cast<std::byte*>(world.scratch(std::max<std::size_t>(1, bytes))); }
  /// Element `elems` of `size` bytes each from p.
  static const std::byte* at(const void* p, std::size_t elems, std::size_t size) {
    return static_cast<const std::byte*>(p) + elems * size;
  }
  /// Element `elems` of `size` bytes each from p.
  static std::byte* at(void* p, std::size_t elems, std::size_t size) { return static_cast<std::byte*>(p) + elems * size; }

  void allreduce(const void* in, void* out, std::size_t count) {
    if (!t.widens) {
      // Straight on the user's buffers (acc is T): reduce-scatter into this rank's part of out,
      // all-reduce that part across nodes, all-gather the parts back.
      run_parts(in, out, count, in == out);
    } else {
      // In the accumulator type, one scratch segment at a time, rounded once at the end.
      const std::size_t seg = segment_elems(t.acc_size);
      for (std::size_t base = 0; base < count; base += seg) {
        const std::size_t len = std::min(seg, count - base);
        std::byte* w = scratch(len * t.acc_size);
        t.start(at(in, base, t.value_size), w, len);
        run_parts(w, w, len, true);
        t.finish(w, at(out, base, t.value_size), len, world.size());
      }
    }
  }

  /// allreduce's three steps on buffers of acc.
  void run_parts(const void* in, void* out, std::size_t count, bool in_place) {
    std::vector<std::size_t> parts(static_cast<std::size_t>(L), count / static_cast<std::size_t>(L));
    for (std::size_t i = 0; i < count % static_cast<std::size_t>(L); ++i) ++parts[i];
    const auto off = offsets_of(parts);
    std::byte* mine = at(out, off[static_cast<std::size_t>(l)], t.acc_size);
    const std::size_t my_count = parts[static_cast<std::size_t>(l)];
    t.reduce_acc(h.node, collective::reduce_scatter, in, mine, in_place, -1, call_layout::blocks(parts, true), intra, t.op);
    t.reduce_acc(h.cross, collective::allreduce, mine, mine, true, -1, call_layout::vector(my_count), inter, t.op);
    t.move_acc(h.node, collective::all_gather, mine, out, true, -1, call_layout::blocks(parts, true), intra, nullptr);
  }

  /// Calls f(world rank, position in the packed buffer) for every rank, in packing order.
  template <class F>
  void for_each_packed(const segment_packing& p, F&& f) const {
    std::size_t pos = 0;
    for (int gl = 0; gl < L; ++gl)
      for (int gm = 0; gm < M; ++gm) {
        const int r = lay.world_rank(gm, gl);
        f(r, pos);
        pos += p.slice[static_cast<std::size_t>(r)];
      }
  }

  void reduce_scatter(const void* in, void* out, std::span<const std::size_t> counts) {
    const auto block_off = offsets_of(std::vector<std::size_t>(counts.begin(), counts.end()));
    const std::size_t longest = *std::max_element(counts.begin(), counts.end());
    const std::size_t per_block = std::max<std::size_t>(1, segment_elems(t.acc_size) / counts.size());
    for (std::size_t lo = 0; lo < longest; lo += per_block) {
      const segment_packing p = pack_segment(lay, counts, lo, per_block);
      std::byte* w = scratch(p.total * t.acc_size);
      for_each_packed(p, [&](int r, std::size_t pos) {
        const std::size_t k = p.slice[static_cast<std::size_t>(r)];
        if (k) t.start(at(in, block_off[static_cast<std::size_t>(r)] + lo, t.value_size), at(w, pos, t.acc_size), k);
      });
      std::byte* group = at(w, p.group_off[static_cast<std::size_t>(l)], t.acc_size);
      std::byte* mine = at(group, p.in_group_off[static_cast<std::size_t>(m)], t.acc_size);
      t.reduce_acc(h.node, collective::reduce_scatter, w, group, true, -1, call_layout::blocks(p.group, true), intra,
                   t.op);
      t.reduce_acc(h.cross, collective::reduce_scatter, group, mine, true, -1, call_layout::blocks(p.in_group, true),
                   inter, t.op);
      const std::size_t n_mine = p.slice[static_cast<std::size_t>(world.rank())];
      if (n_mine) t.finish(mine, at(out, lo, t.value_size), n_mine, world.size());  // an empty block: maybe null
    }
  }

  void all_gather(const void* in, void* out, std::span<const std::size_t> counts) {
    const std::size_t vs = t.value_size;
    const auto block_off = offsets_of(std::vector<std::size_t>(counts.begin(), counts.end()));
    const std::size_t longest = *std::max_element(counts.begin(), counts.end());
    const std::size_t per_block = std::max<std::size_t>(1, segment_elems(vs) / counts.size());
    for (std::size_t lo = 0; lo < longest; lo += per_block) {
      const segment_packing p = pack_segment(lay, counts, lo, per_block);
      std::byte* w = scratch(p.total * vs);
      std::byte* group = at(w, p.group_off[static_cast<std::size_t>(l)], vs);
      std::byte* mine = at(group, p.in_group_off[static_cast<std::size_t>(m)], vs);
      const std::size_t n_mine = p.slice[static_cast<std::size_t>(world.rank())];
      if (n_mine) std::memcpy(mine, at(in, lo, vs), n_mine * vs);  // an empty block may come as a null pointer
      t.move_values(h.cross, collective::all_gather, mine, group, true, -1, call_layout::blocks(p.in_group, true), inter,
                    nullptr);
      t.move_values(h.node, collective::all_gather, group, w, true, -1, call_layout::blocks(p.group, true), intra,
                    nullptr);
      for_each_packed(p, [&](int r, std::size_t pos) {
        const std::size_t k = p.slice[static_cast<std::size_t>(r)];
        if (k) std::memcpy(at(out, block_off[static_cast<std::size_t>(r)] + lo, vs), at(w, pos, vs), k * vs);
      });
    }
  }

  void broadcast(const void* in, void* out, std::size_t count, int root) {
    const int root_node = node_of(root), root_local = local_of(root);
    if (l == root_local)
      t.move_values(h.cross, collective::broadcast, world.rank() == root ? in : nullptr, out,
                    world.rank() == root && in == out, root_node, call_layout::vector(count), inter, nullptr);
    t.move_values(h.node, collective::broadcast, l == root_local ? out : nullptr, out, l == root_local, root_local,
                  call_layout::vector(count), intra, nullptr);
  }

  void reduce(const void* in, void* out, std::size_t count, int root) {
    const int root_node = node_of(root), root_local = local_of(root);
    const std::size_t seg = segment_elems(t.acc_size);
    for (std::size_t base = 0; base < count; base += seg) {
      const std::size_t len = std::min(seg, count - base);
      std::byte* w = scratch(len * t.acc_size);
      t.start(at(in, base, t.value_size), w, len);
      t.reduce_acc(h.node, collective::reduce, w, l == root_local ? w : nullptr, l == root_local, root_local,
                   call_layout::vector(len), intra, t.op);
      if (l == root_local)
        t.reduce_acc(h.cross, collective::reduce, w, m == root_node ? w : nullptr, m == root_node, root_node,
                     call_layout::vector(len), inter, t.op);
      if (world.rank() == root) t.finish(w, at(out, base, t.value_size), len, world.size());
    }
  }

  int node_of(int rank) const {
    for (int gm = 0; gm < M; ++gm)
      for (int gl = 0; gl < L; ++gl)
        if (lay.world_rank(gm, gl) == rank) return gm;
    return 0;
  }
  int local_of(int rank) const {
    for (int gm = 0; gm < M; ++gm)
      for (int gl = 0; gl < L; ++gl)
        if (lay.world_rank(gm, gl) == rank) return gl;
    return 0;
  }
};

/// Which world ranks the ranks of this rank's level communicators are, for errors the levels
/// raise (they number ranks within the level): "(rank 2's node communicator: its ranks 0, 1 are
/// world ranks 2, 3; its cross-node communicator: its ranks 0, 1 are world ranks 0, 2)".
inline std::string level_ranks_legend(int world_rank, const node_layout& l) {
  return "(rank " + std::to_string(world_rank) + "'s node communicator: " +
         level_ranks_text(l.ranks.at(static_cast<std::size_t>(l.node_index))) + "; its cross-node communicator: " +
         level_ranks_text(l.cross_ranks(l.local_rank)) + ")";
}

/// run_hierarchical's body on hierarchical_types (all_to_all, barrier and send/recv excepted).
inline void run_hierarchical_untyped(communicator& comm, collective coll, const void* in, void* out, bool in_place,
                                     int root, const call_layout& lay, std::optional<algorithm> intra,
                                     std::optional<algorithm> inter, const hierarchical_types& t) {
  hierarchy* h = comm.get_hierarchy();
  if (!h)
    invalid_call(comm, coll, t.type_name, t.op_name,
                 "algo::hierarchical needs a communicator with a hierarchy (collx::mpi::connect_hierarchical, "
                 "make_hierarchical_thread_communicators or attach_hierarchy)", lay.varying);
  const node_layout& l = h->layout;
  if (!l.uniform)
    invalid_call(comm, coll, t.type_name, t.op_name,
                 "algo::hierarchical needs the same number of ranks on every node; this layout has " +
                     std::to_string(l.node_count) + " nodes of different sizes", lay.varying);
  if (t.reduces && !t.commutative && !l.contiguous)
    invalid_call(comm, coll, t.type_name, t.op_name,
                 "algo::hierarchical with a non-commutative op needs contiguous nodes (node m holding ranks "
                 "[m*L, (m+1)*L)) to combine in rank order", lay.varying);
  call_signature sig = layout_signature(coll, lay, root, t.value_size, t.type_hash, t.op_hash);
  sig.algo = hierarchical_signature_algo;
  comm.record_call(sig);  // keeps the call count and history in step with flat calls
  const std::string name = call_name(comm, coll, sig.seq, t.type_name, t.op_name, "hierarchical", lay.varying);
  // One level failing must fail the others (communicator::fail), or ranks waiting on another node
  // would time out.
  try {
    check_not_failed(comm, [&] { return name; });  // failed earlier: tell the levels too (a rank may be waiting in one)
  } catch (const error& e) {
    comm.fail(e.code(), e.what());
    throw;
  }
  try {
    // Published on the world communicator as a flat call's is: ranks that disagree on the call as
    // a whole (a root, or one rank calling flat) may never meet in a level call, and the world's
    // next call, or a peer waiting in one now, compares the records.
    comm.get_transport().announce(sig);
    // A rank with nothing to move may make no level call at all (reduce, a widening all-reduce,
    // the v-forms): over MPI its peers, waiting on a level for its data, would never learn that it
    // disagreed (count 0 against their count), so it sends them its record, as a flat call does.
    if (elements_moved(coll, lay) == 0) comm.get_transport().moves_nothing(sig);
  } catch (const error& e) {  // this call's own failure (a peer's query differs): named as the call
    const std::string what = name + ": " + e.what();
    comm.fail(e.code(), what);
    COLLX_THROW(e.code(), what);
  }
  hierarchical_call call{comm, *h, t, intra, inter};
  std::size_t total = 0;
  for (std::size_t c : lay.counts) total += c;
  const std::size_t moved = elements_moved(coll, lay);
  // COLLX_DEBUG=trace; its level calls log their own
  const call_trace trace([&] { return name + comm.log_where(); }, moved, moved * t.value_size);
  try {
    // The collectives that reduce come with an op, the others without (the fronts in collx/*.hpp).
    // One node holds every rank, in world order: the call runs whole on its communicator (shared
    // memory under connect_hierarchical, where the world's transport is MPI), with `intra`.
    if (l.node_count == 1) t.run_values(h->node, coll, in, out, in_place, root, lay, intra, t.op);
    else if (t.reduces && coll == collective::allreduce) call.allreduce(in, out, lay.count);
    else if (t.reduces && coll == collective::reduce_scatter) { if (total) call.reduce_scatter(in, out, lay.counts); }
    else if (t.reduces && coll == collective::reduce) call.reduce(in, out, lay.count, root);
    else if (!t.reduces && coll == collective::all_gather) { if (total) call.all_gather(in, out, lay.counts); }
    else if (!t.reduces && coll == collective::broadcast) call.broadcast(in, out, lay.count, root);
    else COLLX_THROW(errc::internal, "no hierarchical form of this collective with this op");
  } catch (const error& e) {
    // The first failure the whole communicator knows, so that every rank reports the same one: a
    // level's own (in the level's rank numbers: with the legend) unless the world failed first
    // (its records disagree, another rank's level failed, abort): that text names world ranks.
    // The world's records are compared once more before the level's failure is taken: a level
    // may see a disagreement of the whole call first, as a mismatch of its own (a rank that
    // finished its part of a broadcast whose root differs went on to its next call, which a
    // level call of a rank still in the broadcast compared with its own), and the records name
    // the cause.
    errc code = e.code();
    std::string world_why;
    transport& world_transport = comm.get_transport();
    bool world_failed = world_transport.failure(code, world_why);
    if (!world_failed) {
      // A level's mismatch may be the whole call's disagreement seen first: the records get a
      // moment (MPI: up to 500 ms, ending at a peer's notice) to name it.
      const bool differ = e.code() == errc::mismatch ? world_transport.compare_records_now(std::chrono::milliseconds(500))
                                                     : world_transport.records_disagree();
      world_failed = differ && world_transport.failure(code, world_why);
    }
    if (!world_failed) {
      code = e.code();
      world_why = e.what() + (" " + level_ranks_legend(comm.rank(), l));
      comm.fail(code, world_why);
      (void)world_transport.failure(code, world_why);  // another rank's, if it failed the world first
    } else {
      // The world failed (another rank's notice reached this rank): the levels learn it from this
      // rank too, or a peer still waiting on a level for this rank, whose own notice has not come
      // yet, would see only this rank leave ("closed its communicator") and report that instead.
      comm.fail(code, world_why);
    }
    COLLX_THROW(code, name + ": " + as_seen_by(comm.rank(), std::move(world_why)));
  } catch (...) {  // a user's op threw something else: its level failed; fail the whole communicator too
    fail_for_escaping(comm, name);
    throw;
  }
}

/// Runs a call with algo::hierarchical (declared in detail/dispatch.hpp): all_to_all, barrier and
/// send/recv run algo::direct on the whole communicator; the others run on the levels.
template <class T, class Op>
void run_hierarchical(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root,
                      const Op& op, const call_layout& lay, std::optional<algorithm> intra,
                      std::optional<algorithm> inter) {
  if (coll == collective::all_to_all || coll == collective::barrier || coll == collective::send_recv) {
    run_flat<T, Op>(comm, coll, in, out, in_place, root, op, lay, algorithm::direct);
    return;
  }
  run_hierarchical_untyped(comm, coll, in, out, in_place, root, lay, intra, inter, hierarchical_types_of<T, Op>(op));
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
