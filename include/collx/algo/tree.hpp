/// @file algo/tree.hpp
/// Binomial-tree algorithms that keep rank order, so they serve non-commutative ops.
///
/// Reduction: in round k (mask = 2^k), rank r with bit k set sends its partial result, which covers
/// ranks [r, min(r + 2^k, n)), to rank r - 2^k, which appends it on the right: acc = op(acc, incoming).
/// Rank 0 ends with ((x_0 op x_1) op (x_2 op x_3)) op ... : every rank's contribution once, in rank
/// order, with a bracketing fixed by the world size alone. Broadcast is the binomial tree rooted at
/// the root. ceil(log2 n) latency steps each way; each step moves the whole vector, so the tree is
/// the latency choice for small messages. The binomial reduce and broadcast and their costs are those
/// of Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
/// IJHPCA 19(1), 2005.
///
/// Why binomial and not NCCL's double binary tree (Sanders, Speck & Traeff, "Two-tree algorithms for
/// full bandwidth broadcast, reduction and scan", Parallel Computing 2009): the double binary tree
/// halves the bandwidth cost but its trees are not in-order, so it cannot combine non-commutative ops
/// in rank order; collx's bandwidth choice is the ring or two-shot direct instead.
#pragma once

#include <collx/algo/ring.hpp>
#include <collx/algo/schedule.hpp>

namespace collx {
inline namespace v0 {
namespace algo {
/// Rank-ordered binomial tree tag (see algo/tree.hpp). Serves non-commutative ops.
struct tree {
  static constexpr algorithm kind = algorithm::tree;  ///< the algorithm this tag selects
};
}  // namespace algo

namespace schedule {

/// Rank-ordered binomial reduction of the whole vector to rank 0; rank 0 writes the result to
/// `final_dst`. `in` and `tmp` cover the whole vector in input and scratch.
COLLX_SCHEDULE_CONSTEXPR void tree_reduce_to_zero(builder& b, const params& p, region in, region tmp, region final_dst) {
  const int n = p.world_size, r = p.rank;
  bool have_partial = false;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (r & mask) {
      b.send(r - mask, have_partial ? tmp : in);
      b.wait_sends();
      return;
    }
    const int child = r + mask;
    if (child < n) {
      const bool child_has_partial = mask > 1 && child + 1 < n;
      const bool last = r == 0 && 2 * static_cast<long long>(mask) >= n;
      b.recv_reduce(child, child_has_partial ? buffer::scratch : buffer::input, have_partial ? tmp : in,
                    last ? final_dst : tmp, /*incoming_first=*/false);
      have_partial = true;
    }
  }
}

/// Binomial broadcast of `dst` (a region of output) from `root`; the root sends from `root_src`.
COLLX_SCHEDULE_CONSTEXPR void tree_broadcast(builder& b, const params& p, int root, region root_src, region dst) {
  const int n = p.world_size, v = mod(p.rank - root, n);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      const int parent = v - mask;
      b.recv(mod(parent + root, n), parent == 0 ? root_src.buf : buffer::output, dst);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) b.send(mod(v + mask + root, n), v == 0 ? root_src : dst);
  b.wait_sends();
}

/// The tree schedule of rank p.rank (world size >= 2).
COLLX_SCHEDULE_CONSTEXPR steps build_tree(const params& p) {
  builder b;
  const int n = p.world_size, r = p.rank;
  const region in = whole(p, buffer::input), tmp = whole(p, buffer::scratch), out = whole(p, buffer::output);
  switch (p.coll) {
    case collective::allreduce:
      tree_reduce_to_zero(b, p, in, tmp, out);
      tree_broadcast(b, p, 0, out, out);
      break;
    case collective::reduce:
      if (p.root == 0) {
        tree_reduce_to_zero(b, p, in, tmp, out);
      } else {
        // Rank 0 must not touch its output: it holds the result in scratch and passes it on.
        tree_reduce_to_zero(b, p, in, tmp, tmp);
        if (r == 0) {
          b.send(p.root, tmp);
          b.wait_sends();
        } else if (r == p.root) {
          b.recv(0, buffer::scratch, out);
        }
      }
      break;
    case collective::reduce_scatter:
      // Reduce everything to rank 0, which scatters the blocks.
      tree_reduce_to_zero(b, p, in, tmp, tmp);
      if (r == 0) {
        for (int c = 1; c < n; ++c) b.send(c, tmp_block(p, c));
        b.copy(tmp_block(p, 0), out_block(p, 0));
        b.wait_sends();
      } else {
        b.recv(0, buffer::scratch, out_block(p, r));
      }
      break;
    case collective::all_gather: {
      // Binomial gather to rank 0 (blocks are contiguous in rank order), then broadcast.
      b.copy(in_block(p, r), out_block(p, r));
      auto range = [&](int lo, int hi) {
        const std::size_t off = p.blocks[static_cast<std::size_t>(lo)].out;
        std::size_t cnt = 0;
        for (int c = lo; c < hi && c < n; ++c) cnt += p.blocks[static_cast<std::size_t>(c)].count;
        return region{buffer::output, off, cnt};
      };
      for (int mask = 1; mask < n; mask <<= 1) {
        if (r & mask) {
          b.send(r - mask, range(r, r + mask));
          b.wait_sends();
          break;
        }
        if (r + mask < n) b.recv(r + mask, buffer::output, range(r + mask, r + 2 * mask));
      }
      tree_broadcast(b, p, 0, out, out);
      break;
    }
    case collective::broadcast:
      tree_broadcast(b, p, p.root, in, out);
      if (r == p.root) b.copy(in, out);
      break;
    case collective::all_to_all:
    case collective::barrier:
    case collective::send_recv:
      break;
  }
  return std::move(b.out);
}

}  // namespace schedule
}  // namespace v0
}  // namespace collx
