/// @file algo/direct.hpp
/// Direct algorithms: every rank exchanges with every peer in one round. For reductions each
/// element is folded strictly left to right in rank order, op(...op(op(x_0, x_1), x_2)..., x_{n-1}),
/// whatever the count, chunking or message size, so the result equals the sequential rank-order fold
/// bit for bit: collx's reproducible mode, and the one for non-commutative ops.
///
/// allreduce comes one-shot (each rank folds the whole vector from all peers: one latency step,
/// (n-1) x the data read per rank; best for small messages) or two-shot (each rank folds its own
/// block, then all-gathers the blocks: 2 latency steps, 2(n-1)/n of the data; for large messages),
/// the scheme of NCCL's and TensorRT-LLM's one-shot/two-shot all-reduce kernels. Both give the same
/// bits.
#pragma once

#include <collx/algo/ring.hpp>
#include <collx/algo/schedule.hpp>

namespace collx {
inline namespace v0 {
namespace algo {
/// Direct (one round, rank-ordered) algorithm tag (see algo/direct.hpp). Bitwise reproducible.
struct direct {
  static constexpr algorithm kind = algorithm::direct;  ///< the algorithm this tag selects
};
}  // namespace algo

namespace schedule {

/// Folds x_0 .. x_{n-1} of one block in rank order: the rank's own contribution is `own` (input),
/// peer j's arrives from j (sent from its input). Partial results go to `tmp`; the last combine
/// writes `final_dst`.
COLLX_SCHEDULE_CONSTEXPR void direct_fold(builder& b, const params& p, region own, region tmp, region final_dst) {
  const int n = p.world_size, r = p.rank;
  region cur = own;  // valid once j >= 1: the partial result so far
  for (int j = 0; j < n; ++j) {
    const region dst = j + 1 == n ? final_dst : tmp;
    if (j == 0) {
      if (r == 1) {
        // op(x_0, x_1) straight off the wire, incoming first: rank 1 need not copy x_0 first (at
        // n = 2 that copy was a third of its memory traffic).
        const region first = n == 2 ? final_dst : tmp;
        b.recv_reduce(0, buffer::input, own, first, /*incoming_first=*/true);
        cur = first;
        ++j;  // x_1 is folded in
      } else if (r != 0) {
        b.recv(0, buffer::input, tmp), cur = tmp;
      }
      continue;
    }
    if (j == r) b.reduce(cur, own, dst);
    else b.recv_reduce(j, buffer::input, cur, dst, /*incoming_first=*/false);
    cur = dst;
  }
}

/// The direct schedule of rank p.rank (world size >= 2). `in_place` tells whether input and output
/// are the same memory (one-shot allreduce then folds into scratch first, because peers are still
/// reading the input).
COLLX_SCHEDULE_CONSTEXPR steps build_direct(const params& p, bool in_place) {
  builder b;
  const int n = p.world_size, r = p.rank;
  const region in = whole(p, buffer::input), tmp = whole(p, buffer::scratch), out = whole(p, buffer::output);
  switch (p.coll) {
    case collective::allreduce:
      if (p.one_shot) {
        for (int j = 0; j < n; ++j)
          if (j != r) b.send(j, in);
        direct_fold(b, p, in, tmp, in_place ? tmp : out);
        b.wait_sends();
        if (in_place) b.copy(tmp, out);
      } else {
        for (int j = 0; j < n; ++j)
          if (j != r) b.send(j, in_block(p, j));
        direct_fold(b, p, in_block(p, r), tmp_block(p, r), out_block(p, r));
        b.wait_sends();
        for (int j = 0; j < n; ++j)
          if (j != r) b.send(j, out_block(p, r));
        for (int j = 0; j < n; ++j)
          if (j != r) b.recv(j, buffer::output, out_block(p, j));
        b.wait_sends();
      }
      break;
    case collective::reduce_scatter:
      for (int j = 0; j < n; ++j)
        if (j != r) b.send(j, in_block(p, j));
      direct_fold(b, p, in_block(p, r), tmp_block(p, r), out_block(p, r));
      b.wait_sends();
      break;
    case collective::reduce:
      if (r == p.root) {
        direct_fold(b, p, in, tmp, out);
      } else {
        b.send(p.root, in);
        b.wait_sends();
      }
      break;
    case collective::all_gather:
      // Sends first, the own block's copy after: the peers wait for the sends, not for the copy.
      for (int j = 0; j < n; ++j)
        if (j != r) b.send(j, in_block(p, r));
      b.copy(in_block(p, r), out_block(p, r));
      for (int j = 0; j < n; ++j)
        if (j != r) b.recv(j, buffer::input, out_block(p, j));
      b.wait_sends();
      break;
    case collective::broadcast:
      if (r == p.root) {
        for (int j = 0; j < n; ++j)
          if (j != r) b.send(j, in);
        b.copy(in, out);
        b.wait_sends();
      } else {
        b.recv(p.root, buffer::input, out);
      }
      break;
    case collective::all_to_all: {
      b.keep_empty = p.keep_empty;
      const block& own = p.blocks[static_cast<std::size_t>(r)];
      for (int j = 0; j < n; ++j)  // sends first, as all_gather's
        if (j != r) b.send(j, in_block(p, j));
      b.copy(in_block(p, r), {buffer::output, own.out, own.recv_count});
      for (int j = 0; j < n; ++j) {
        const block& fb = p.blocks[static_cast<std::size_t>(j)];
        if (j != r) b.recv(j, buffer::input, {buffer::output, fb.out, fb.recv_count});
      }
      b.wait_sends();
      break;
    }
    case collective::barrier:
    case collective::send_recv:
      break;
  }
  return std::move(b.out);
}

}  // namespace schedule
}  // namespace v0
}  // namespace collx
