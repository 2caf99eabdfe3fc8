/// @file algo/ring.hpp
/// Ring algorithms: reduce-scatter then all-gather around the ring 0 -> 1 -> ... -> n-1 -> 0 (or the
/// order in params::ring, e.g. one the topology search found), as in Patarasuk & Yuan, "Bandwidth
/// optimal all-reduce algorithms for clusters of workstations" (JPDC 2009) and NCCL's ring. Each
/// rank sends 2(n-1)/n of the data: bandwidth-optimal, n-1 latency steps per phase.
///
/// Order of combination: block c is reduced along the ring starting at the rank after c:
/// op(...op(op(x_{c+1}, x_{c+2}), x_{c+3})..., x_c), indices being ring positions mod n. That order
/// differs per block, so the ring needs a commutative op; it is fixed for a given (world size,
/// count, ring order, segment size: each segment of a call is cut into its own blocks), so results
/// are bit-identical from run to run and on every rank.
#pragma once

#include <collx/algo/schedule.hpp>

namespace collx {
inline namespace v0 {
namespace algo {
/// Ring algorithm tag (see algo/ring.hpp). Needs a commutative op.
struct ring {
  static constexpr algorithm kind = algorithm::ring;  ///< the algorithm this tag selects
};
}  // namespace algo

namespace schedule {

/// Block c of the call (p.blocks[c]: offsets and count in elements) as a region of the input, the
/// output and the scratch buffer, the three places a ring step reads or writes it.
COLLX_SCHEDULE_CONSTEXPR region in_block(const params& p, int c) {
  const block& b = p.blocks[static_cast<std::size_t>(c)];
  return {buffer::input, b.in, b.count};
}
/// See in_block.
COLLX_SCHEDULE_CONSTEXPR region out_block(const params& p, int c) {
  const block& b = p.blocks[static_cast<std::size_t>(c)];
  return {buffer::output, b.out, b.count};
}
/// See in_block.
COLLX_SCHEDULE_CONSTEXPR region tmp_block(const params& p, int c) {
  const block& b = p.blocks[static_cast<std::size_t>(c)];
  return {buffer::scratch, b.tmp, b.count};
}

/// Ring positions: the rank at position k (mod n) of the ring, and this rank's position.
struct ring_positions {
  const params& p;  ///< the call's parameters (referenced, not copied: must outlive this)
  int pos = 0;      ///< this rank's position in the ring
  /// Finds q.rank's position in q.ring (its rank when q.ring is empty, the identity ring).
  COLLX_SCHEDULE_CONSTEXPR explicit ring_positions(const params& q) : p(q), pos(q.rank) {
    if (!p.ring.empty())
      for (int k = 0; k < p.world_size; ++k)
        if (p.ring[static_cast<std::size_t>(k)] == p.rank) pos = k;
  }
  /// The rank `k` places after this one (negative: before).
  COLLX_SCHEDULE_CONSTEXPR int at(int k) const {
    const int q = mod(pos + k, p.world_size);
    return p.ring.empty() ? q : p.ring[static_cast<std::size_t>(q)];
  }
  /// The position of `rank` in the ring.
  COLLX_SCHEDULE_CONSTEXPR int position_of(int rank) const {
    if (p.ring.empty()) return rank;
    for (int k = 0; k < p.world_size; ++k)
      if (p.ring[static_cast<std::size_t>(k)] == rank) return k;
    return rank;
  }
};

/// Ring reduce-scatter phase: afterwards rank r's block r, fully reduced, is in `own_final`
/// (a region of blocks[r].count elements). Partial sums travel in scratch (accumulator type).
COLLX_SCHEDULE_CONSTEXPR void ring_reduce_scatter(builder& b, const params& p, region own_final) {
  const int n = p.world_size;
  const ring_positions ring(p);
  const int next = ring.at(1), prev = ring.at(-1);
  for (int s = 0; s + 1 < n; ++s) {
    const int sc = ring.at(-1 - s), rc = ring.at(-2 - s);
    b.send(next, s == 0 ? in_block(p, sc) : tmp_block(p, sc));
    b.recv_reduce(prev, s == 0 ? buffer::input : buffer::scratch, in_block(p, rc),
                  s + 2 == n ? own_final : tmp_block(p, rc), /*incoming_first=*/true);
    b.wait_sends();
  }
}

/// Ring all-gather phase: rank r's block r is already in output; afterwards every block is.
COLLX_SCHEDULE_CONSTEXPR void ring_all_gather(builder& b, const params& p) {
  const int n = p.world_size;
  const ring_positions ring(p);
  const int next = ring.at(1), prev = ring.at(-1);
  for (int s = 0; s + 1 < n; ++s) {
    b.send(next, out_block(p, ring.at(-s)));
    b.recv(prev, buffer::output, out_block(p, ring.at(-1 - s)));
    b.wait_sends();
  }
}

/// The ring schedule of rank p.rank (world size >= 2).
COLLX_SCHEDULE_CONSTEXPR steps build_ring(const params& p) {
  builder b;
  const int n = p.world_size, r = p.rank;
  switch (p.coll) {
    case collective::allreduce:
      ring_reduce_scatter(b, p, out_block(p, r));
      ring_all_gather(b, p);
      break;
    case collective::reduce_scatter:
      ring_reduce_scatter(b, p, out_block(p, r));
      break;
    case collective::all_gather:
      b.copy(in_block(p, r), out_block(p, r));
      ring_all_gather(b, p);
      break;
    case collective::reduce:
      // Reduce-scatter into scratch (non-roots never touch their output), then gather at the root.
      ring_reduce_scatter(b, p, tmp_block(p, r));
      if (r == p.root) {
        for (int c = 0; c < n; ++c)
          if (c != r) b.recv(c, buffer::scratch, out_block(p, c));
        b.copy(tmp_block(p, r), out_block(p, r));
      } else {
        b.send(p.root, tmp_block(p, r));
        b.wait_sends();
      }
      break;
    case collective::broadcast: {
      // Pipelined chain from the root along the ring, in p.slices slices of the whole vector.
      std::size_t total = 0;
      for (const block& blk : p.blocks) total += blk.count;
      const std::size_t in0 = p.blocks.front().in, out0 = p.blocks.front().out;
      const ring_positions ring(p);
      const int pos = mod(ring.pos - ring.position_of(p.root), n);
      const std::size_t k = p.slices ? p.slices : 1;
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t lo = chunk_begin(total, k, j), len = chunk_begin(total, k, j + 1) - lo;
        if (pos == 0) {
          b.send(ring.at(1), {buffer::input, in0 + lo, len});
          b.wait_sends();
        } else {
          b.recv(ring.at(-1), pos == 1 ? buffer::input : buffer::output, {buffer::output, out0 + lo, len});
          b.wait_sends();  // the previous slice's forward
          if (pos + 1 < n) b.send(ring.at(1), {buffer::output, out0 + lo, len});
        }
      }
      b.wait_sends();
      if (pos == 0) b.copy({buffer::input, in0, total}, {buffer::output, out0, total});
      break;
    }
    case collective::all_to_all:
      b.keep_empty = p.keep_empty;
      // Pairwise exchange: in step s, send to r+s and receive from r-s.
      b.copy(in_block(p, r), {buffer::output, p.blocks[static_cast<std::size_t>(r)].out,
                              p.blocks[static_cast<std::size_t>(r)].recv_count});
      for (int s = 1; s < n; ++s) {
        const int to = mod(r + s, n), from = mod(r - s, n);
        b.send(to, in_block(p, to));
        const block& fb = p.blocks[static_cast<std::size_t>(from)];
        b.recv(from, buffer::input, {buffer::output, fb.out, fb.recv_count});
        b.wait_sends();
      }
      break;
    case collective::barrier:
    case collective::send_recv:
      break;
  }
  return std::move(b.out);
}

}  // namespace schedule
}  // namespace v0
}  // namespace collx
