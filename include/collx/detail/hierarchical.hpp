/// @file detail/hierarchical.hpp
/// How algo::hierarchical<Intra, Inter> runs each collective on the node-local and cross-node
/// communicators of a hierarchy (see algo/hierarchical.hpp for the scheme and its numerics).
/// Included at the end of detail/dispatch.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
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

/// One hierarchical call on this rank; the layout was checked by run_hierarchical. The levels run
/// flat (their communicators have no hierarchy), `intra` inside the node and `inter` across nodes.
template <class T, class Op>
struct hierarchical_call {
  using red = reduction<T, Op>;
  using acc = typename red::acc;
  using level_op = level_op_t<Op>;
  static constexpr bool reduces = !std::is_same_v<Op, no_op>;

  communicator& world;
  hierarchy& h;
  const Op& op;
  std::optional<algorithm> intra, inter;  ///< none: algo::automatic
  const node_layout& lay = h.layout;
  const int L = lay.local_size, M = lay.node_count, l = lay.local_rank, m = lay.node_index;

  /// Elements of acc per segment of the whole communicator's scratch memory.
  std::size_t segment_elems(std::size_t elem_bytes) const {
    return std::max<std::size_t>(1, world.options().max_segment_bytes / elem_bytes);
  }
  /// What the user's output gets: the finished value (rounded once, avg divided once).
  static T finish(const acc& a, int world_size) {
    if constexpr (reduces) return red::finalize(a, world_size);
    else return a;
  }
  static acc start(const T& x) {
    if constexpr (reduces) return red::widen(x);
    else return x;
  }

  /// Runs one level's part of the call: flat, as a call of its own on that level's communicator
  /// (which users can reach through the hierarchy, so it keeps a collective's one-thread check).
  template <class E, class LOp>
  static void level(communicator& c, collective coll, const E* in, E* out, bool in_place, int root, const LOp& lop,
                    const call_layout& lay, std::optional<algorithm> a) {
    c.drain_async();
    const communicator::call_scope one_thread(c);
    run_flat<E, LOp>(c, coll, in, out, in_place, root, lop, lay, a);
  }

  void allreduce(const T* in, T* out, std::size_t count) {
    const level_op lop{};
    if constexpr (!red::needs_finalize) {
      // Straight on the user's buffers: reduce-scatter into this rank's part of out, all-reduce
      // that part across nodes, all-gather the parts back.
      run_parts(in, out, count, in == out, op);
    } else {
      // In the accumulator type, one scratch segment at a time, rounded once at the end.
      const std::size_t seg = segment_elems(sizeof(acc));
      for (std::size_t base = 0; base < count; base += seg) {
        const std::size_t len = std::min(seg, count - base);
        acc* w = reinterpret_cast<acc*>(world.scratch(len * sizeof(acc)));
        for (std::size_t i = 0; i < len; ++i) w[i] = start(in[base + i]);
        run_parts(w, w, len, true, lop);
        for (std::size_t i = 0; i < len; ++i) out[base + i] = finish(w[i], world.size());
      }
    }
  }

  /// allreduce's three steps on buffers of element type E (T or acc) with op LOp.
  template <class E, class LOp>
  void run_parts(const E* in, E* out, std::size_t count, bool in_place, const LOp& lop) {
    std::vector<std::size_t> parts(static_cast<std::size_t>(L), count / static_cast<std::size_t>(L));
    for (std::size_t i = 0; i < count % static_cast<std::size_t>(L); ++i) ++parts[i];
    const auto off = offsets_of(parts);
    E* mine = out + off[static_cast<std::size_t>(l)];
    const std::size_t my_count = parts[static_cast<std::size_t>(l)];
    level<E, LOp>(h.node, collective::reduce_scatter, in, mine, in_place, -1, lop, call_layout::blocks(parts, true),
                     intra);
    level<E, LOp>(h.cross, collective::allreduce, mine, mine, true, -1, lop, call_layout::vector(my_count), inter);
    level<E, no_op>(h.node, collective::all_gather, mine, out, true, -1, no_op{}, call_layout::blocks(parts, true),
                       intra);
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

  void reduce_scatter(const T* in, T* out, std::span<const std::size_t> counts) {
    const level_op lop{};
    const auto block_off = offsets_of(std::vector<std::size_t>(counts.begin(), counts.end()));
    const std::size_t longest = *std::max_element(counts.begin(), counts.end());
    const std::size_t per_block = std::max<std::size_t>(1, segment_elems(sizeof(acc)) / counts.size());
    for (std::size_t lo = 0; lo < longest; lo += per_block) {
      const segment_packing p = pack_segment(lay, counts, lo, per_block);
      acc* w = reinterpret_cast<acc*>(world.scratch(std::max<std::size_t>(1, p.total) * sizeof(acc)));
      for_each_packed(p, [&](int r, std::size_t pos) {
        const T* src = in + block_off[static_cast<std::size_t>(r)] + lo;
        for (std::size_t i = 0; i < p.slice[static_cast<std::size_t>(r)]; ++i) w[pos + i] = start(src[i]);
      });
      acc* group = w + p.group_off[static_cast<std::size_t>(l)];
      acc* mine = group + p.in_group_off[static_cast<std::size_t>(m)];
      level<acc, level_op>(h.node, collective::reduce_scatter, w, group, true, -1, lop,
                              call_layout::blocks(p.group, true), intra);
      level<acc, level_op>(h.cross, collective::reduce_scatter, group, mine, true, -1, lop,
                              call_layout::blocks(p.in_group, true), inter);
      const std::size_t n_mine = p.slice[static_cast<std::size_t>(world.rank())];
      for (std::size_t i = 0; i < n_mine; ++i) out[lo + i] = finish(mine[i], world.size());
    }
  }

  void all_gather(const T* in, T* out, std::span<const std::size_t> counts) {
    const auto block_off = offsets_of(std::vector<std::size_t>(counts.begin(), counts.end()));
    const std::size_t longest = *std::max_element(counts.begin(), counts.end());
    const std::size_t per_block = std::max<std::size_t>(1, segment_elems(sizeof(T)) / counts.size());
    for (std::size_t lo = 0; lo < longest; lo += per_block) {
      const segment_packing p = pack_segment(lay, counts, lo, per_block);
      T* w = reinterpret_cast<T*>(world.scratch(std::max<std::size_t>(1, p.total) * sizeof(T)));
      T* group = w + p.group_off[static_cast<std::size_t>(l)];
      T* mine = group + p.in_group_off[static_cast<std::size_t>(m)];
      const std::size_t n_mine = p.slice[static_cast<std::size_t>(world.rank())];
      if (n_mine) std::copy_n(in + lo, n_mine, mine);  // an empty block may come as a null pointer
      level<T, no_op>(h.cross, collective::all_gather, mine, group, true, -1, no_op{},
                         call_layout::blocks(p.in_group, true), inter);
      level<T, no_op>(h.node, collective::all_gather, group, w, true, -1, no_op{}, call_layout::blocks(p.group, true),
                         intra);
      for_each_packed(p, [&](int r, std::size_t pos) {
        std::copy_n(w + pos, p.slice[static_cast<std::size_t>(r)], out + block_off[static_cast<std::size_t>(r)] + lo);
      });
    }
  }

  void broadcast(const T* in, T* out, std::size_t count, int root) {
    const int root_node = node_of(root), root_local = local_of(root);
    if (l == root_local)
      level<T, no_op>(h.cross, collective::broadcast, world.rank() == root ? in : nullptr, out,
                         world.rank() == root && in == out, root_node, no_op{}, call_layout::vector(count), inter);
    level<T, no_op>(h.node, collective::broadcast, l == root_local ? out : nullptr, out, l == root_local, root_local,
                       no_op{}, call_layout::vector(count), intra);
  }

  void reduce(const T* in, T* out, std::size_t count, int root) {
    const level_op lop{};
    const int root_node = node_of(root), root_local = local_of(root);
    const std::size_t seg = segment_elems(sizeof(acc));
    for (std::size_t base = 0; base < count; base += seg) {
      const std::size_t len = std::min(seg, count - base);
      acc* w = reinterpret_cast<acc*>(world.scratch(len * sizeof(acc)));
      for (std::size_t i = 0; i < len; ++i) w[i] = start(in[base + i]);
      level<acc, level_op>(h.node, collective::reduce, w, l == root_local ? w : nullptr, l == root_local, root_local,
                              lop, call_layout::vector(len), intra);
      if (l == root_local)
        level<acc, level_op>(h.cross, collective::reduce, w, m == root_node ? w : nullptr, m == root_node,
                                root_node, lop, call_layout::vector(len), inter);
      if (world.rank() == root)
        for (std::size_t i = 0; i < len; ++i) out[base + i] = finish(w[i], world.size());
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

template <class T, class Op>
void run_hierarchical(communicator& comm, collective coll, const T* in, T* out, bool in_place, int root,
                      const Op& op, const call_layout& lay, std::optional<algorithm> intra,
                      std::optional<algorithm> inter) {
  constexpr bool reduces = !std::is_same_v<Op, no_op>;
  if (coll == collective::all_to_all || coll == collective::barrier || coll == collective::send_recv) {
    run_flat<T, Op>(comm, coll, in, out, in_place, root, op, lay, algorithm::direct);
    return;
  }
  hierarchy* h = comm.get_hierarchy();
  if (!h)
    invalid_call<T, Op>(comm, coll,
                        "algo::hierarchical needs a communicator with a hierarchy (collx::mpi::connect_hierarchical, "
                        "make_hierarchical_thread_communicators or attach_hierarchy)");
  const node_layout& l = h->layout;
  if (!l.uniform)
    invalid_call<T, Op>(comm, coll, "algo::hierarchical needs the same number of ranks on every node; this layout has " +
                                        std::to_string(l.node_count) + " nodes of different sizes");
  if (reduces && !op_traits<Op>::commutative && !l.contiguous)
    invalid_call<T, Op>(comm, coll,
                        "algo::hierarchical with a non-commutative op needs contiguous nodes (node m holding ranks "
                        "[m*L, (m+1)*L)) to combine in rank order");
  const std::uint64_t seq = comm.next_sequence();  // keeps the call count in step with flat calls
  const std::string name = call_name<T, Op>(comm, coll, seq, "hierarchical");
  // One level failing must fail the others, or ranks waiting on another node would time out.
  auto fail_levels = [&](errc code, const std::string& why) {
    comm.get_transport().fail(code, why);
    h->node.get_transport().fail(code, why);
    h->cross.get_transport().fail(code, why);
  };
  try {
    check_not_failed(comm, [&] { return name; });  // failed earlier: tell the levels too (a rank may be waiting in one)
  } catch (const error& e) {
    fail_levels(e.code(), e.what());
    throw;
  }
  hierarchical_call<T, Op> call{comm, *h, op, intra, inter};
  std::size_t total = 0;
  for (std::size_t c : lay.counts) total += c;
  try {
    // The collectives that reduce come with an op, the others with no_op (the fronts in
    // collx/*.hpp): each instantiation compiles only its own, half the hierarchical code.
    if constexpr (reduces) {
      if (coll == collective::allreduce) call.allreduce(in, out, lay.count);
      else if (coll == collective::reduce_scatter) { if (total) call.reduce_scatter(in, out, lay.counts); }
      else if (coll == collective::reduce) call.reduce(in, out, lay.count, root);
      else COLLX_THROW(errc::internal, "a collective with an op that does not reduce");
    } else {
      if (coll == collective::all_gather) { if (total) call.all_gather(in, out, lay.counts); }
      else if (coll == collective::broadcast) call.broadcast(in, out, lay.count, root);
      else COLLX_THROW(errc::internal, "a reducing collective without an op");
    }
  } catch (const error& e) {
    const std::string why = name + ": " + e.what();
    fail_levels(e.code(), why);
    COLLX_THROW(e.code(), why);
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
