/// @file nccl/plan.hpp
/// How collx runs one of its schedules over NCCL point-to-point calls, as plain data: which
/// algorithm, how a call is cut into segments that bound the device scratch and staging memory,
/// and how a rank's steps become NCCL groups; the one group of an all-to-all's sends and receives
/// (all_to_all_exchanges); and the rooted calls of the v-forms (rooted_blocks). Plain C++ (no NCCL
/// or CUDA headers), unit-tested without a GPU by test_nccl_plan; nccl/collectives.cuh carries
/// the plan out on a stream.
///
/// Why groups: collx's execution model (algo/schedule.hpp) lets a `send` stay pending until the
/// next `wait_sends`, while NCCL's ncclSend may wait until the peer's matching ncclRecv runs, and
/// calls on one stream run one after another. Two ranks that send to each other, then receive, would
/// each wait in their send. So the executor puts each receive in one ncclGroupStart/End group with
/// the sends posted since the previous receive: NCCL then progresses them together. A `wait_sends`,
/// or a local step (copy, reduce), closes the sends posted so far into a group of their own.
/// That is sound for the ring and tree schedules (test_nccl_plan simulates every rank's groups with
/// "a send completes only once its receive is posted" for 2 to 9 ranks and every root); it is not
/// for algo::direct, whose ranks send to everybody before receiving in rank order (the simulation
/// finds the cycle at 3 ranks), so the NCCL path refuses algo::direct.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <collx/algo/build.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace nccl {

/// One thing a rank does on its stream: an NCCL group (some sends and at most one receive, then
/// the receive's conversion or reduction kernel) or a local step (a copy or reduce kernel).
struct action {
  bool group = true;               ///< an NCCL group (true) or a local step (false)
  std::vector<std::size_t> sends;  ///< group: indices of its send steps, in schedule order
  std::ptrdiff_t recv = -1;        ///< group: index of its recv / recv_reduce step, or -1
  std::size_t local = 0;           ///< local step: its index
  /// Field-wise equality (for tests).
  friend bool operator==(const action&, const action&) = default;
};

/// Groups one rank's schedule into actions (see the file comment): sends accumulate; a recv or
/// recv_reduce closes a group with them; a wait_sends, a copy or a reduce closes the pending sends
/// into a group of their own (a copy or reduce then follows as a local action); so does the end.
/// wait_sends itself becomes nothing: the stream runs the next action after the group completes.
inline std::vector<action> group_steps(const schedule::steps& steps) {
  std::vector<action> out;
  std::vector<std::size_t> pending;
  auto flush = [&] {
    if (pending.empty()) return;
    out.push_back({true, std::move(pending), -1, 0});
    pending.clear();
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    switch (steps[i].kind) {
      case schedule::step_kind::send: pending.push_back(i); break;
      case schedule::step_kind::recv:
      case schedule::step_kind::recv_reduce:
        out.push_back({true, std::move(pending), static_cast<std::ptrdiff_t>(i), 0});
        pending.clear();
        break;
      case schedule::step_kind::wait_sends: flush(); break;
      case schedule::step_kind::copy:
      case schedule::step_kind::reduce:
        flush();
        out.push_back({false, {}, -1, i});
        break;
    }
  }
  flush();
  return out;
}

/// How the executor carries out a receive step (recv or recv_reduce) of a group.
struct receive_plan {
  bool staged = false;        ///< into the staging buffer, then a kernel; else straight into dst
  bool reduce = false;        ///< recv_reduce: dst = op(left, right), the staged value one operand
  bool staging_left = false;  ///< reduce: the staged value is the left operand (incoming_first)
  /// Field-wise equality (for tests).
  friend constexpr bool operator==(const receive_plan&, const receive_plan&) = default;
};

/// The receive plan of step `s`. `roles`: scratch holds other values than the user's buffers
/// (narrow floats as fp32 partials, or avg still to divide); without roles every buffer holds T.
/// A recv whose wire and destination hold the same kind of value lands in dst directly (ncclRecv
/// into the user's or the scratch buffer); one that converts (widen, or finalise) is staged and
/// then converted; a recv_reduce is always staged and then combined with `a` into dst.
constexpr receive_plan plan_receive(const schedule::step& s, bool roles) noexcept {
  if (s.kind == schedule::step_kind::recv_reduce) return {true, true, s.incoming_first};
  const bool same = !roles || ((s.wire == schedule::buffer::scratch) == (s.dst.buf == schedule::buffer::scratch));
  return {!same, false, false};
}

/// Simulates every rank's grouped schedule under NCCL's strictest point-to-point semantics: a
/// transfer completes only while the sender's and the receiver's groups are both running, a group
/// completes when all its transfers have, and a rank starts its next group only then. Returns ""
/// when every rank finishes, else what is stuck (a deadlock), a transfer whose ends disagree on
/// its element count or wire type, or a group whose plain receive overwrites what one of its sends
/// reads (they run concurrently). `per_rank[r]` is rank r's schedule.
inline std::string find_group_deadlock(const std::vector<schedule::steps>& per_rank) {
  const int n = static_cast<int>(per_rank.size());
  struct op {
    int rank, peer;
    std::size_t ordinal;  // k-th message of this direction
    bool send;
    const schedule::step* s;
    bool done = false;
  };
  std::vector<std::vector<action>> prog(per_rank.size());
  std::vector<std::vector<std::vector<op>>> ops(per_rank.size());  // [rank][action] -> its transfers
  for (int r = 0; r < n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    prog[ur] = group_steps(per_rank[ur]);
    std::vector<std::size_t> sent(per_rank.size()), recvd(per_rank.size());
    for (const action& a : prog[ur]) {
      std::vector<op> v;
      if (a.group) {
        for (std::size_t i : a.sends) {
          const schedule::step& s = per_rank[ur][i];
          v.push_back({r, s.peer, sent[static_cast<std::size_t>(s.peer)]++, true, &s});
        }
        if (a.recv >= 0) {
          const schedule::step& s = per_rank[ur][static_cast<std::size_t>(a.recv)];
          v.push_back({r, s.peer, recvd[static_cast<std::size_t>(s.peer)]++, false, &s});
        }
      }
      // A plain recv lands in its destination while the group's sends still read theirs.
      if (a.group && a.recv >= 0) {
        const schedule::step& rs = per_rank[ur][static_cast<std::size_t>(a.recv)];
        for (std::size_t i : a.sends) {
          const schedule::region& x = per_rank[ur][i].a;
          if (rs.kind == schedule::step_kind::recv && x.buf == rs.dst.buf && x.count && rs.dst.count &&
              x.offset < rs.dst.offset + rs.dst.count && rs.dst.offset < x.offset + x.count)
            return "rank " + std::to_string(r) + ": a receive writes what a send of its group reads";
        }
      }
      ops[ur].push_back(std::move(v));
    }
  }
  std::vector<std::size_t> pos(per_rank.size(), 0);
  auto current = [&](int r) -> std::vector<op>* {
    const auto ur = static_cast<std::size_t>(r);
    return pos[ur] < ops[ur].size() ? &ops[ur][pos[ur]] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      std::vector<op>* g = current(r);
      if (!g) continue;
      for (op& o : *g) {
        if (o.done) continue;
        std::vector<op>* h = o.peer >= 0 && o.peer < n ? current(o.peer) : nullptr;
        if (!h) continue;
        for (op& m : *h) {
          if (m.done || m.peer != r || m.send == o.send || m.ordinal != o.ordinal) continue;
          const op& snd = o.send ? o : m;
          const op& rcv = o.send ? m : o;
          if (snd.s->a.count != rcv.s->dst.count || snd.s->a.buf != rcv.s->wire)
            return "rank " + std::to_string(snd.rank) + " sends message #" + std::to_string(snd.ordinal) +
                   " to rank " + std::to_string(rcv.rank) + " with another count or wire type than it receives";
          o.done = m.done = true;
          progress = true;
        }
      }
    }
    for (int r = 0; r < n; ++r)
      while (std::vector<op>* g = current(r)) {
        if (!std::all_of(g->begin(), g->end(), [](const op& o) { return o.done; })) break;
        ++pos[static_cast<std::size_t>(r)];
        progress = true;
      }
  }
  std::string stuck;
  for (std::size_t r = 0; r < pos.size(); ++r)
    if (pos[r] < ops[r].size())
      stuck += (stuck.empty() ? "" : ", ") + ("rank " + std::to_string(r) + " in action " + std::to_string(pos[r]) +
                                               " of " + std::to_string(ops[r].size()));
  return stuck.empty() ? std::string() : "deadlock: " + stuck;
}

/// The collx algorithm a reduction runs on the NCCL schedule path: ring for a commutative op
/// (bandwidth-optimal), tree for a non-commutative one (it combines in rank order).
constexpr algorithm schedule_algorithm(bool commutative) noexcept {
  return commutative ? algorithm::ring : algorithm::tree;
}

/// One segment of a call: the schedule parameters of this rank and the scratch elements
/// (accumulator type) it needs. Every message of the segment is at most `scratch_elems` elements.
struct segment {
  schedule::params params;        ///< this rank's schedule parameters for the segment
  std::size_t scratch_elems = 0;  ///< scratch (accumulator) elements its schedule uses
};

/// Cuts a reduction into segments of at most `segment_elems` accumulator elements, as
/// detail::run_collective does for the host transports, so device scratch and staging stay bounded
/// by `segment_elems` accumulator values each. `count`: the vector length for allreduce and reduce,
/// the per-rank block length for reduce_scatter (every rank's block the same). Every rank computes
/// the same segments from the same arguments. Empty for count 0.
/// @throws collx::error (errc::invalid_argument) for another collective, world_size < 1, a rank or
///         root outside [0, world_size), segment_elems 0, or algorithm::direct.
inline std::vector<segment> plan_segments(collective coll, algorithm alg, int world_size, int rank, int root,
                                          std::size_t count, std::size_t segment_elems) {
  if (coll != collective::allreduce && coll != collective::reduce && coll != collective::reduce_scatter)
    COLLX_THROW(errc::invalid_argument, "nccl::plan_segments: " + std::string(collective_name(coll)) +
                                            " is not a reduction (NCCL moves it itself)");
  if (world_size < 1 || rank < 0 || rank >= world_size || root < 0 || root >= world_size)
    COLLX_THROW(errc::invalid_argument, "nccl::plan_segments: rank " + std::to_string(rank) + " or root " +
                                            std::to_string(root) + " outside world size " +
                                            std::to_string(world_size));
  if (segment_elems == 0) COLLX_THROW(errc::invalid_argument, "nccl::plan_segments: segment_elems is 0");
  if (alg == algorithm::direct)
    COLLX_THROW(errc::invalid_argument,
                "nccl::plan_segments: algo::direct can deadlock on NCCL point-to-point groups (see nccl/plan.hpp)");
  const auto n = static_cast<std::size_t>(world_size);
  std::vector<segment> out;
  schedule::params p;
  p.coll = coll;
  p.world_size = world_size;
  p.rank = rank;
  p.root = root;
  if (coll == collective::reduce_scatter) {
    const std::size_t total = count * n;
    if (alg == algorithm::tree) {
      // Contiguous segments of the whole input (the tree reduces whole vectors).
      for (std::size_t lo = 0; lo < total; lo += segment_elems) {
        const std::size_t hi = std::min(total, lo + segment_elems);
        p.blocks.assign(n, {});
        for (std::size_t c = 0; c < n; ++c) {
          const std::size_t s = std::clamp(c * count, lo, hi), e = std::clamp((c + 1) * count, lo, hi);
          p.blocks[c] = {s, s - std::min(s, c * count), s - lo, e - s, e - s};
        }
        out.push_back({p, hi - lo});
      }
    } else {
      // The same slice of every block, so that every rank works in every segment.
      const std::size_t per_block = std::max<std::size_t>(1, segment_elems / n);
      for (std::size_t lo = 0; lo < count; lo += per_block) {
        const std::size_t len = std::min(per_block, count - lo);
        p.blocks.assign(n, {});
        for (std::size_t c = 0; c < n; ++c) p.blocks[c] = {c * count + lo, lo, c * len, len, len};
        out.push_back({p, len * n});
      }
    }
    return out;
  }
  for (std::size_t base = 0; base < count; base += segment_elems) {
    const std::size_t len = std::min(segment_elems, count - base);
    p.blocks = schedule::vector_blocks(len, world_size);
    for (auto& b : p.blocks) b.in += base, b.out += base;
    out.push_back({p, len});
  }
  return out;
}

/// One peer's share of an all-to-all over NCCL, in bytes: what this rank sends it (from
/// `send_offset` of the send buffer) and receives from it (at `recv_offset` of the recv buffer).
struct peer_exchange {
  int peer = 0;
  std::size_t send_offset = 0, send_bytes = 0, recv_offset = 0, recv_bytes = 0;
  /// Field-wise equality (for tests).
  friend bool operator==(const peer_exchange&, const peer_exchange&) = default;
};

/// The exchanges of one rank's all_to_all_v over NCCL, which nccl/collectives.cuh posts as one
/// ncclGroupStart/End group of an ncclSend and an ncclRecv per peer (the rank itself included; a
/// side of 0 bytes is not posted), as nccl-tests' alltoall does: one group, so NCCL progresses
/// every transfer together and no order of peers can deadlock. Blocks lie packed in rank order
/// (the host all_to_all_v's layout). Peers in order rank, rank + 1, ... (mod n), so that the ranks
/// do not all start on the same peer. Counts in elements of `element_bytes`, checked by the caller
/// (one per rank, sums that fit in memory).
inline std::vector<peer_exchange> all_to_all_exchanges(int rank, const std::vector<std::size_t>& send_counts,
                                                       const std::vector<std::size_t>& recv_counts,
                                                       std::size_t element_bytes) {
  const std::size_t n = send_counts.size();
  if (n == 0 || recv_counts.size() != n || rank < 0 || static_cast<std::size_t>(rank) >= n)
    COLLX_THROW(errc::invalid_argument, "nccl::all_to_all_exchanges: one count per rank in each list, and a rank among them");
  std::vector<std::size_t> send_at(n, 0), recv_at(n, 0);
  for (std::size_t q = 1; q < n; ++q) {
    send_at[q] = send_at[q - 1] + send_counts[q - 1] * element_bytes;
    recv_at[q] = recv_at[q - 1] + recv_counts[q - 1] * element_bytes;
  }
  std::vector<peer_exchange> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t q = (static_cast<std::size_t>(rank) + i) % n;
    out.push_back({static_cast<int>(q), send_at[q], send_counts[q] * element_bytes, recv_at[q], recv_counts[q] * element_bytes});
  }
  return out;
}

/// One rank's block of a v-form collective over NCCL, in bytes: the rank whose block it is (the
/// root of its broadcast or reduce), where the block starts in the packed buffer, its length.
struct rooted_block {
  int root = 0;
  std::size_t offset = 0, bytes = 0;
  /// Field-wise equality (for tests).
  friend bool operator==(const rooted_block&, const rooted_block&) = default;
};

/// The rooted collectives that carry out all_gather_v and reduce_scatter_v over NCCL, which has
/// neither: one ncclBroadcast from each rank of its block (all_gather_v), or one ncclReduce to each
/// rank of its block (reduce_scatter_v), all in one ncclGroupStart/End group (NCCL's user guide,
/// "Group Calls: Aggregated Operations"). Blocks lie packed in rank order (the host v-forms'
/// layout). Every rank must post a group's collectives in the same order, so this is the same list
/// on every rank for the same counts: rank order, blocks of 0 bytes left out. Counts in elements of
/// `element_bytes`, checked by the caller (one per rank, a sum that fits in memory).
inline std::vector<rooted_block> rooted_blocks(const std::vector<std::size_t>& counts, std::size_t element_bytes) {
  std::vector<rooted_block> out;
  std::size_t at = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    const std::size_t bytes = counts[q] * element_bytes;
    if (bytes) out.push_back({static_cast<int>(q), at, bytes});
    at += bytes;
  }
  return out;
}

}  // namespace nccl
}  // namespace v0
}  // namespace collx
