/// @file algo/build.hpp
/// make_schedule: the one entry point from (algorithm, params) to one rank's steps.
#pragma once

#include <collx/algo/direct.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/algo/tree.hpp>

namespace collx {
inline namespace v0 {
namespace schedule {

/// Dissemination barrier (Hensgen, Finkel & Manber 1988): ceil(log2 n) rounds; in round k rank r
/// signals r + 2^k and waits for r - 2^k. Messages carry no data.
COLLX_SCHEDULE_CONSTEXPR steps build_barrier(const params& p) {
  steps out;
  const int n = p.world_size, r = p.rank;
  for (int d = 1; d < n; d <<= 1) {
    out.push_back({step_kind::send, mod(r + d, n), {buffer::input, 0, 0}, {}, {}, buffer::input, true});
    out.push_back({step_kind::recv, mod(r - d, n), {}, {}, {buffer::output, 0, 0}, buffer::input, true});
    out.push_back({step_kind::wait_sends, -1, {}, {}, {}, buffer::input, true});
  }
  return out;
}

/// One rank's schedule for `a`. With one rank every collective is a copy of input to output.
/// `in_place`: input and output are the same memory (see build_direct).
COLLX_SCHEDULE_CONSTEXPR steps make_schedule(algorithm a, const params& p, bool in_place) {
  if (p.coll == collective::barrier) return build_barrier(p);
  if (p.world_size == 1) {
    builder b;
    const block& own = p.blocks.front();
    b.copy({buffer::input, own.in, own.count}, {buffer::output, own.out, own.count});
    return std::move(b.out);
  }
  switch (a) {
    case algorithm::ring: return build_ring(p);
    case algorithm::tree: return build_tree(p);
    case algorithm::direct: return build_direct(p, in_place);
  }
  return {};
}

}  // namespace schedule
}  // namespace v0
}  // namespace collx
