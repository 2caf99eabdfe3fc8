// Host-side logic of collx::nccl (collx/nccl/native.hpp, collx/nccl/plan.hpp): plain C++, no NCCL,
// CUDA or GPU needed. Which (type, op) pairs NCCL reduces itself; how a schedule becomes NCCL groups,
// checked by simulating every rank's groups under "a send completes only while its receive is
// posted"; how a call is cut into segments that bound device memory, checked by coverage; and the
// device executor's data flow (groups, segments, plan_receive) run on host memory against folds.
#include <catch2/catch.hpp>

#include <collx/nccl/native.hpp>
#include <collx/nccl/plan.hpp>
#include <collx/detail/executor.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

namespace nccl = collx::nccl;
namespace sch = collx::schedule;
using collx::algorithm;
using collx::collective;

namespace {
struct pair16 {
  std::int16_t a, b;
};
struct custom_sum {
  static constexpr bool commutative = true;
  int operator()(int x, int y) const { return x + y; }
};

// Every rank's schedule for one segment of a call.
std::vector<sch::steps> all_ranks(collective coll, algorithm alg, int n, int root, std::size_t count,
                                  std::size_t seg, std::size_t which_segment) {
  std::vector<sch::steps> out;
  for (int r = 0; r < n; ++r) {
    const auto segs = nccl::plan_segments(coll, alg, n, r, root, count, seg);
    REQUIRE(which_segment < segs.size());
    out.push_back(sch::make_schedule(alg, segs[which_segment].params, false));
  }
  return out;
}
}  // namespace

TEST_CASE("NCCL types and ops: which pairs NCCL reduces itself", "[nccl]") {
  using nccl::data_type;
  STATIC_REQUIRE(nccl::element_type_v<float> == data_type::float32);
  STATIC_REQUIRE(nccl::element_type_v<double> == data_type::float64);
  STATIC_REQUIRE(nccl::element_type_v<collx::half> == data_type::float16);
  STATIC_REQUIRE(nccl::element_type_v<collx::bfloat16> == data_type::bfloat16);
  STATIC_REQUIRE(nccl::element_type_v<std::int8_t> == data_type::int8);
  STATIC_REQUIRE(nccl::element_type_v<std::uint8_t> == data_type::uint8);
  STATIC_REQUIRE(nccl::element_type_v<std::int32_t> == data_type::int32);
  STATIC_REQUIRE(nccl::element_type_v<std::uint32_t> == data_type::uint32);
  STATIC_REQUIRE(nccl::element_type_v<std::int64_t> == data_type::int64);
  STATIC_REQUIRE(nccl::element_type_v<std::uint64_t> == data_type::uint64);
  STATIC_REQUIRE(nccl::element_type_v<long long> == data_type::int64);
  STATIC_REQUIRE(nccl::element_type_v<unsigned long long> == data_type::uint64);
  STATIC_REQUIRE(nccl::element_type_v<const int> == data_type::int32);
  STATIC_REQUIRE(nccl::element_type_v<char> ==
                 (std::is_signed_v<char> ? data_type::int8 : data_type::uint8));
  // NCCL has no 2-byte integers, no bool, no structs.
  STATIC_REQUIRE(nccl::element_type_v<std::int16_t> == data_type::none);
  STATIC_REQUIRE(nccl::element_type_v<std::uint16_t> == data_type::none);
  STATIC_REQUIRE(nccl::element_type_v<bool> == data_type::none);
  STATIC_REQUIRE(nccl::element_type_v<char32_t> == data_type::none);
  STATIC_REQUIRE(nccl::element_type_v<pair16> == data_type::none);

  using nccl::red_op;
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::sum> == red_op::sum);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::prod> == red_op::prod);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::min> == red_op::min);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::max> == red_op::max);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::avg> == red_op::avg);  // avg derives from sum: not mapped to sum
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::band> == red_op::none);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::bor> == red_op::none);
  STATIC_REQUIRE(nccl::red_op_v<collx::ops::bxor> == red_op::none);
  STATIC_REQUIRE(collx::op_traits<custom_sum>::commutative);  // commutative, still not NCCL's
  STATIC_REQUIRE(nccl::red_op_v<custom_sum> == red_op::none);
  STATIC_REQUIRE(nccl::red_op_v<collx::commutative_op<collx::ops::sum>> == red_op::none);

  STATIC_REQUIRE(nccl::native_reduction_v<float, collx::ops::sum>);
  STATIC_REQUIRE(nccl::native_reduction_v<collx::bfloat16, collx::ops::avg>);
  STATIC_REQUIRE(nccl::native_reduction_v<std::uint64_t, collx::ops::min>);
  STATIC_REQUIRE_FALSE(nccl::native_reduction_v<std::int16_t, collx::ops::sum>);
  STATIC_REQUIRE_FALSE(nccl::native_reduction_v<std::int32_t, collx::ops::bxor>);
  STATIC_REQUIRE_FALSE(nccl::native_reduction_v<int, custom_sum>);
  STATIC_REQUIRE_FALSE(nccl::native_reduction_v<pair16, collx::ops::sum>);
}

TEST_CASE("NCCL groups: each receive goes with the sends posted before it", "[nccl]") {
  using K = sch::step_kind;
  using B = sch::buffer;
  const sch::region r0{B::input, 0, 4}, r1{B::scratch, 0, 4}, r2{B::output, 0, 4};
  const sch::steps s = {
      {K::send, 1, r0, {}, {}, B::input, true},           // 0
      {K::send, 2, r0, {}, {}, B::input, true},           // 1
      {K::recv_reduce, 3, r0, {}, r1, B::input, true},    // 2: closes {0, 1, 2}
      {K::recv, 3, {}, {}, r2, B::scratch, true},         // 3: a group of its own
      {K::send, 1, r1, {}, {}, B::input, true},           // 4
      {K::copy, -1, r1, {}, r2, B::input, true},          // 5: flushes {4}, then a local step
      {K::send, 2, r2, {}, {}, B::input, true},           // 6
      {K::wait_sends, -1, {}, {}, {}, B::input, true},    // 7: flushes {6}
      {K::reduce, -1, r0, r1, r2, B::input, true},        // 8
      {K::send, 2, r2, {}, {}, B::input, true},           // 9: flushed at the end
  };
  const std::vector<nccl::action> want = {
      {true, {0, 1}, 2, 0}, {true, {}, 3, 0}, {true, {4}, -1, 0}, {false, {}, -1, 5},
      {true, {6}, -1, 0},   {false, {}, -1, 8}, {true, {9}, -1, 0},
  };
  CHECK(nccl::group_steps(s) == want);
  CHECK(nccl::group_steps({}).empty());
}

TEST_CASE("NCCL groups: the simulation finds deadlocks, size mismatches and races", "[nccl]") {
  using K = sch::step_kind;
  using B = sch::buffer;
  const sch::region x{B::input, 0, 4}, y{B::output, 0, 4};
  const sch::step send1{K::send, 1, x, {}, {}, B::input, true}, send0{K::send, 0, x, {}, {}, B::input, true};
  const sch::step recv1{K::recv, 1, {}, {}, y, B::input, true}, recv0{K::recv, 0, {}, {}, y, B::input, true};
  const sch::step wait{K::wait_sends, -1, {}, {}, {}, B::input, true};
  // Exchange with the send waited for before the receive: each rank's send is a group alone.
  CHECK(nccl::find_group_deadlock({{send1, wait, recv1}, {send0, wait, recv0}}).starts_with("deadlock"));
  // The same exchange without the wait: one group per rank, no deadlock.
  CHECK(nccl::find_group_deadlock({{send1, recv1, wait}, {send0, recv0, wait}}).empty());
  // Ordered the other way on one side: rank 1 receives first, then sends.
  CHECK(nccl::find_group_deadlock({{send1, wait, recv1}, {recv0, send0, wait}}).empty());
  // Counts that differ.
  sch::step short_recv = recv0;
  short_recv.dst.count = 3;
  CHECK(nccl::find_group_deadlock({{send1, wait}, {short_recv}}).find("count") != std::string::npos);
  // A receive into the region its own group sends.
  const sch::step send_y{K::send, 1, y, {}, {}, B::input, true};
  const sch::step send_y0{K::send, 0, y, {}, {}, B::input, true};
  CHECK(nccl::find_group_deadlock({{send_y, recv1, wait}, {send_y0, recv0, wait}}).find("writes") !=
        std::string::npos);
}

TEST_CASE("NCCL groups: ring and tree reductions complete for 2 to 9 ranks; direct does not", "[nccl]") {
  for (algorithm alg : {algorithm::ring, algorithm::tree})
    for (collective coll : {collective::allreduce, collective::reduce_scatter, collective::reduce})
      for (int n = 2; n <= 9; ++n)
        for (int root = 0; root < (coll == collective::reduce ? n : 1); ++root)
          for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{37}}) {
            INFO(collx::algorithm_name(alg) << " " << collx::collective_name(coll) << " n=" << n
                                            << " root=" << root << " count=" << count);
            const std::size_t segs = nccl::plan_segments(coll, alg, n, 0, root, count, 16).size();
            for (std::size_t k = 0; k < segs; ++k)
              CHECK(nccl::find_group_deadlock(all_ranks(coll, alg, n, root, count, 16, k)) == "");
          }
  // Why the NCCL path refuses algo::direct: its one-shot allreduce sends to every peer, then receives
  // in rank order; with NCCL groups that is a cycle from 3 ranks on.
  for (int n = 3; n <= 5; ++n) {
    std::vector<sch::steps> ranks;
    for (int r = 0; r < n; ++r) {
      sch::params p;
      p.coll = collective::allreduce;
      p.world_size = n;
      p.rank = r;
      p.blocks = sch::vector_blocks(10, n);
      ranks.push_back(sch::make_schedule(algorithm::direct, p, false));
    }
    CHECK(nccl::find_group_deadlock(ranks).starts_with("deadlock"));
  }
  CHECK_THROWS_WITH(nccl::plan_segments(collective::allreduce, algorithm::direct, 2, 0, 0, 4, 4),
                    Catch::Contains("direct"));
}

TEST_CASE("NCCL segments: bounded, and every element reduced exactly once", "[nccl]") {
  CHECK(nccl::schedule_algorithm(true) == algorithm::ring);
  CHECK(nccl::schedule_algorithm(false) == algorithm::tree);
  for (algorithm alg : {algorithm::ring, algorithm::tree})
    for (collective coll : {collective::allreduce, collective::reduce_scatter, collective::reduce})
      for (int n : {1, 2, 3, 7})
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{6}, std::size_t{23}, std::size_t{100}})
          for (std::size_t seg : {std::size_t{1}, std::size_t{4}, std::size_t{7}, std::size_t{1000}}) {
            INFO(collx::algorithm_name(alg) << " " << collx::collective_name(coll) << " n=" << n
                                            << " count=" << count << " seg=" << seg);
            const bool rs = coll == collective::reduce_scatter;
            const std::size_t total = rs ? count * static_cast<std::size_t>(n) : count;
            for (int r = 0; r < n; ++r) {
              std::vector<int> in_seen(total, 0), out_seen(rs ? count : total, 0);
              for (const nccl::segment& s : nccl::plan_segments(coll, alg, n, r, n - 1, count, seg)) {
                // Scratch bounded by the segment size (the ring's reduce_scatter rounds its share per
                // block down, but at least one element per block).
                CHECK(s.scratch_elems <= std::max(seg, static_cast<std::size_t>(n)));
                CHECK(s.scratch_elems > 0);
                CHECK(s.params.blocks.size() == static_cast<std::size_t>(n));
                std::size_t tmp_end = 0;
                for (std::size_t c = 0; c < s.params.blocks.size(); ++c) {
                  const collx::schedule::block& b = s.params.blocks[c];
                  CHECK(b.count == b.recv_count);
                  for (std::size_t i = 0; i < b.count; ++i) ++in_seen.at(b.in + i);
                  if (!rs) {
                    CHECK(b.out == b.in);
                    for (std::size_t i = 0; i < b.count; ++i) ++out_seen.at(b.out + i);
                  } else if (c == static_cast<std::size_t>(r)) {
                    if (b.count) CHECK(b.in == c * count + b.out);
                    for (std::size_t i = 0; i < b.count; ++i) ++out_seen.at(b.out + i);
                  }
                  tmp_end = std::max(tmp_end, b.tmp + b.count);
                }
                CHECK(tmp_end <= s.scratch_elems);
              }
              CHECK(std::count(in_seen.begin(), in_seen.end(), 1) == static_cast<std::ptrdiff_t>(in_seen.size()));
              CHECK(std::count(out_seen.begin(), out_seen.end(), 1) == static_cast<std::ptrdiff_t>(out_seen.size()));
            }
          }
  CHECK_THROWS_WITH(nccl::plan_segments(collective::broadcast, algorithm::ring, 2, 0, 0, 4, 4),
                    Catch::Contains("not a reduction"));
  CHECK_THROWS(nccl::plan_segments(collective::allreduce, algorithm::ring, 2, 2, 0, 4, 4));
  CHECK_THROWS(nccl::plan_segments(collective::reduce, algorithm::ring, 2, 0, -1, 4, 4));
  CHECK_THROWS(nccl::plan_segments(collective::allreduce, algorithm::ring, 2, 0, 0, 4, 0));
}

// ---------------------------------------------------------------------------------------------
// The NCCL executor's data flow, run on the CPU: every rank's segments, grouped (group_steps),
// transfers carried out when both ends' groups are running (sends read, direct receives write at
// that moment), staged receives converted or combined after their group (plan_receive) with the
// host executor's arithmetic (detail::exec_context), local steps when reached. The results must be
// the reduction of every rank's input; a wrong grouping, segment or receive plan shows here.

namespace {

// Composition of affine maps modulo 2^32: associative, not commutative.
struct affine {
  std::uint32_t mul, add;
  friend bool operator==(const affine&, const affine&) = default;
};
struct then_op {
  affine operator()(const affine& f, const affine& g) const { return {f.mul * g.mul, f.add * g.mul + g.add}; }
};

template <class T, class Op>
struct rank_state {
  using cx_t = collx::detail::exec_context<T, Op>;
  using acc = typename cx_t::acc;
  std::vector<acc> tmp;
  std::vector<std::byte> staging;
  cx_t cx;
  std::vector<nccl::action> prog;
  sch::steps steps;
  std::size_t pos = 0;
};

// Runs one call on every rank; in[r] is rank r's input, out[r] its output (in[r] itself in place).
template <class T, class Op>
void emulate(collective coll, algorithm alg, int n, int root, std::size_t count, std::size_t seg_elems, bool in_place,
             const Op& op, std::vector<std::vector<T>>& in, std::vector<std::vector<T>>& out) {
  using st = rank_state<T, Op>;
  using red = collx::detail::reduction<T, Op>;
  constexpr bool roles = red::widened || red::needs_finalize;
  const auto segs0 = nccl::plan_segments(coll, alg, n, 0, root, count, seg_elems);
  for (std::size_t k = 0; k < segs0.size(); ++k) {
    std::vector<st> ranks(static_cast<std::size_t>(n));
    for (int r = 0; r < n; ++r) {
      st& s = ranks[static_cast<std::size_t>(r)];
      const nccl::segment seg = nccl::plan_segments(coll, alg, n, r, root, count, seg_elems).at(k);
      s.tmp.assign(seg.scratch_elems, typename st::acc{});
      s.staging.assign(seg_elems * sizeof(typename st::acc), std::byte{0xEE});
      s.cx.in = in[static_cast<std::size_t>(r)].data();
      s.cx.out = in_place ? in[static_cast<std::size_t>(r)].data() : out[static_cast<std::size_t>(r)].data();
      s.cx.tmp = s.tmp.data();
      s.cx.op = &op;
      s.cx.world_size = n;
      s.steps = sch::make_schedule(alg, seg.params, in_place);
      s.prog = nccl::group_steps(s.steps);
    }
    // done[r][i]: transfer step i of rank r has happened.
    std::vector<std::vector<char>> done(static_cast<std::size_t>(n));
    std::vector<std::vector<std::size_t>> ordinal(static_cast<std::size_t>(n));  // k-th message per direction
    for (int r = 0; r < n; ++r) {
      st& s = ranks[static_cast<std::size_t>(r)];
      done[r].assign(s.steps.size(), 0);
      ordinal[r].assign(s.steps.size(), 0);
      std::vector<std::size_t> sent(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < s.steps.size(); ++i) {
        const sch::step& x = s.steps[i];
        if (x.kind == sch::step_kind::send) ordinal[r][i] = sent[static_cast<std::size_t>(x.peer)]++;
        if (x.kind == sch::step_kind::recv || x.kind == sch::step_kind::recv_reduce)
          ordinal[r][i] = got[static_cast<std::size_t>(x.peer)]++;
      }
    }
    using C = typename st::cx_t;
    const auto scratch = [](sch::buffer b) { return b == sch::buffer::scratch; };
    // The executor's typed kernels (detail::exec_view), as the NCCL path runs them.
    auto local = [&](st& s, const sch::step& x) {
      const collx::detail::exec_view v = collx::detail::view_of(s.cx);
      if (x.kind == sch::step_kind::copy)
        v.convert(v.cx, scratch(x.a.buf), scratch(x.dst.buf), v.cptr(x.a), v.ptr(x.dst), x.dst.count);
      else
        v.combine(v.cx, scratch(x.a.buf), scratch(x.b.buf), scratch(x.dst.buf), v.cptr(x.a), v.cptr(x.b), v.ptr(x.dst),
                  x.dst.count, false);
    };
    auto after_receive = [&](st& s, const sch::step& x) {
      const nccl::receive_plan rp = nccl::plan_receive(x, roles);
      if (!rp.staged) return;
      const collx::detail::exec_view v = collx::detail::view_of(s.cx);
      if (!rp.reduce)
        v.convert(v.cx, scratch(x.wire), scratch(x.dst.buf), s.staging.data(), v.ptr(x.dst), x.dst.count);
      else
        v.combine(v.cx, scratch(x.a.buf), scratch(x.wire), scratch(x.dst.buf), v.cptr(x.a), s.staging.data(), v.ptr(x.dst),
                  x.dst.count, rp.staging_left);
    };
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < n; ++r) {
        st& s = ranks[static_cast<std::size_t>(r)];
        while (s.pos < s.prog.size() && !s.prog[s.pos].group) {
          local(s, s.steps[s.prog[s.pos].local]);
          ++s.pos;
          progress = true;
        }
      }
      // Match the sends of every running group with the running receives.
      for (int r = 0; r < n; ++r) {
        st& s = ranks[static_cast<std::size_t>(r)];
        if (s.pos >= s.prog.size()) continue;
        for (std::size_t i : s.prog[s.pos].sends) {
          if (done[r][i]) continue;
          const sch::step& x = s.steps[i];
          st& p = ranks[static_cast<std::size_t>(x.peer)];
          if (p.pos >= p.prog.size() || !p.prog[p.pos].group || p.prog[p.pos].recv < 0) continue;
          const auto j = static_cast<std::size_t>(p.prog[p.pos].recv);
          const sch::step& y = p.steps[j];
          if (y.peer != r || ordinal[x.peer][j] != ordinal[r][i]) continue;
          const std::size_t bytes = x.a.count * C::elem_size(x.a.buf);
          REQUIRE(bytes == y.dst.count * C::elem_size(y.wire));
          const bool staged = nccl::plan_receive(y, roles).staged;
          if (staged) REQUIRE(bytes <= p.staging.size());
          if (bytes)
            std::memcpy(staged ? p.staging.data() : collx::detail::view_of(p.cx).ptr(y.dst),
                        collx::detail::view_of(s.cx).cptr(x.a), bytes);
          done[r][i] = done[x.peer][j] = 1;
          progress = true;
        }
      }
      for (int r = 0; r < n; ++r) {
        st& s = ranks[static_cast<std::size_t>(r)];
        if (s.pos >= s.prog.size() || !s.prog[s.pos].group) continue;
        const nccl::action& a = s.prog[s.pos];
        bool all = a.recv < 0 || done[r][static_cast<std::size_t>(a.recv)];
        for (std::size_t i : a.sends) all = all && done[r][i];
        if (!all) continue;
        if (a.recv >= 0) after_receive(s, s.steps[static_cast<std::size_t>(a.recv)]);
        ++s.pos;
        progress = true;
      }
    }
    for (int r = 0; r < n; ++r) REQUIRE(ranks[static_cast<std::size_t>(r)].pos == ranks[static_cast<std::size_t>(r)].prog.size());
  }
}

template <class T>
T value(int rank, std::size_t i) {
  const std::uint32_t h = static_cast<std::uint32_t>((rank + 1) * 2654435761u) ^ static_cast<std::uint32_t>(i * 40503u);
  if constexpr (std::is_same_v<T, affine>) return {h | 1u, h >> 7};
  else if constexpr (std::is_same_v<T, collx::half>) return collx::half(static_cast<float>(h % 64) / 4);
  else return static_cast<T>(h);
}

// Every collective of emulate() against the rank-order fold want(n, get) for each element.
template <class T, class Op, class Want>
void check_emulated(algorithm alg, const Op& op, Want want) {
  for (collective coll : {collective::allreduce, collective::reduce_scatter, collective::reduce})
    for (int n : {1, 2, 3, 4, 5, 8})
      for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{40}})
        for (std::size_t seg : {std::size_t{8}, std::size_t{1000}})
          for (bool in_place : {false, true}) {
            if (in_place && coll != collective::allreduce) continue;  // the schedule path's in-place form
            const int root = coll == collective::reduce ? n / 2 : 0;
            INFO(collx::algorithm_name(alg) << " " << collx::collective_name(coll) << " n=" << n << " count=" << count
                                            << " seg=" << seg << " in_place=" << in_place);
            const std::size_t len = coll == collective::reduce_scatter ? count * static_cast<std::size_t>(n) : count;
            const std::size_t out_len = coll == collective::reduce_scatter ? count : len;
            std::vector<std::vector<T>> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
            for (int r = 0; r < n; ++r) {
              for (std::size_t i = 0; i < len; ++i) in[r].push_back(value<T>(r, i));
              out[r].assign(len, value<T>(99, 0));  // poison
            }
            emulate<T, Op>(coll, alg, n, root, count, seg, in_place, op, in, out);
            for (int r = 0; r < n; ++r) {
              if (coll == collective::reduce && r != root) continue;
              const std::vector<T>& got = in_place ? in[r] : out[r];
              const std::size_t base = coll == collective::reduce_scatter ? static_cast<std::size_t>(r) * count : 0;
              std::size_t wrong = 0;
              for (std::size_t j = 0; j < out_len; ++j)
                wrong += !(got[j] == want(n, [&](int q) { return value<T>(q, base + j); }));
              CHECK(wrong == 0);
            }
          }
}

}  // namespace

TEST_CASE("NCCL executor data flow on the CPU: groups, segments, staged receives", "[nccl]") {
  // Commutative integer sum on the ring (roles: none, every receive direct or combined).
  check_emulated<std::uint32_t>(algorithm::ring, collx::ops::sum{}, [](int n, auto get) {
    std::uint32_t a = 0;
    for (int q = 0; q < n; ++q) a += get(q);
    return a;
  });
  // Non-commutative op on the tree, in rank order.
  check_emulated<affine>(algorithm::tree, then_op{}, [](int n, auto get) {
    affine a = get(0);
    for (int q = 1; q < n; ++q) a = then_op{}(a, get(q));
    return a;
  });
  // half sum on both: fp32 partials in scratch (roles), widened and finalised by staged receives;
  // small multiples of 1/4, so any order is exact.
  for (algorithm alg : {algorithm::ring, algorithm::tree})
    check_emulated<collx::half>(alg, collx::ops::sum{}, [](int n, auto get) {
      float a = 0;
      for (int q = 0; q < n; ++q) a += static_cast<float>(get(q));
      return collx::half(a);
    });
  // int16 avg (no NCCL type): scratch holds undivided sums (roles through avg's division).
  check_emulated<std::int16_t>(algorithm::ring, collx::ops::avg{}, [](int n, auto get) {
    std::uint16_t a = 0;
    for (int q = 0; q < n; ++q) a = static_cast<std::uint16_t>(a + static_cast<std::uint16_t>(get(q)));
    return static_cast<std::int16_t>(static_cast<std::int16_t>(a) / n);
  });

  using K = sch::step_kind;
  using B = sch::buffer;
  const sch::step widen{K::recv, 1, {}, {}, {B::scratch, 0, 4}, B::input, true};
  CHECK(nccl::plan_receive(widen, true) == nccl::receive_plan{true, false, false});
  CHECK(nccl::plan_receive(widen, false) == nccl::receive_plan{false, false, false});
  const sch::step same{K::recv, 1, {}, {}, {B::output, 0, 4}, B::input, true};
  CHECK(nccl::plan_receive(same, true) == nccl::receive_plan{false, false, false});
  const sch::step rr{K::recv_reduce, 1, {B::input, 0, 4}, {}, {B::scratch, 0, 4}, B::input, false};
  CHECK(nccl::plan_receive(rr, false) == nccl::receive_plan{true, true, false});
}

TEST_CASE("NCCL all-to-all: each rank's one group moves every block to its place, zeros and self included", "[nccl]") {
  // Every rank's exchanges (all_to_all_exchanges) carried out on host memory as NCCL would match
  // them: rank a's send to b meets b's receive from a, which must agree on the bytes. The reference
  // is the counts matrix itself: rank r's block from q is q's block for r.
  for (int n = 1; n <= 6; ++n)
    for (std::size_t elem : {std::size_t{1}, std::size_t{4}, std::size_t{12}}) {
      INFO("n = " << n << ", element bytes " << elem);
      const auto un = static_cast<std::size_t>(n);
      auto mix = [](std::uint64_t x) {  // splitmix64's finaliser: distinct values per (src, dst, i)
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
      };
      auto cnt = [&](std::size_t src, std::size_t dst) { return mix(src * 1000 + dst * 10 + elem + 1) % 5; };
      auto byte = [&](std::size_t src, std::size_t dst, std::size_t i) {
        return static_cast<unsigned char>(mix((src * 64 + dst) << 32 | i));
      };
      std::vector<std::vector<nccl::peer_exchange>> plan(un);
      std::vector<std::vector<unsigned char>> send(un), recv(un);
      for (std::size_t r = 0; r < un; ++r) {
        std::vector<std::size_t> sc(un), rc(un);
        for (std::size_t q = 0; q < un; ++q) sc[q] = cnt(r, q), rc[q] = cnt(q, r);
        plan[r] = nccl::all_to_all_exchanges(static_cast<int>(r), sc, rc, elem);
        REQUIRE(plan[r].size() == un);
        for (std::size_t q = 0; q < un; ++q) {
          CHECK(plan[r][q].peer == static_cast<int>((r + q) % un));  // starting with itself, then upwards
          for (std::size_t i = 0; i < sc[q] * elem; ++i) send[r].push_back(byte(r, q, i));
        }
        std::size_t total = 0;
        for (std::size_t q = 0; q < un; ++q) total += rc[q] * elem;
        recv[r].assign(total, 0xab);  // poison
      }
      for (std::size_t a = 0; a < un; ++a)
        for (const auto& x : plan[a]) {
          const auto b = static_cast<std::size_t>(x.peer);
          const auto match = std::find_if(plan[b].begin(), plan[b].end(), [&](const auto& y) { return y.peer == static_cast<int>(a); });
          REQUIRE(match != plan[b].end());
          REQUIRE(match->recv_bytes == x.send_bytes);  // the two ends of one ncclSend/ncclRecv pair
          REQUIRE(x.send_offset + x.send_bytes <= send[a].size());
          REQUIRE(match->recv_offset + match->recv_bytes <= recv[b].size());
          if (x.send_bytes) std::memcpy(recv[b].data() + match->recv_offset, send[a].data() + x.send_offset, x.send_bytes);
        }
      for (std::size_t r = 0; r < un; ++r) {
        std::vector<unsigned char> want;
        for (std::size_t q = 0; q < un; ++q)
          for (std::size_t i = 0; i < cnt(q, r) * elem; ++i) want.push_back(byte(q, r, i));
        INFO("rank " << r);
        CHECK(recv[r] == want);
      }
    }
  CHECK_THROWS_AS(nccl::all_to_all_exchanges(0, {1, 2}, {1}, 4), collx::error);  // lists of different lengths
  CHECK_THROWS_AS(nccl::all_to_all_exchanges(2, {1, 2}, {1, 2}, 4), collx::error);  // rank outside the lists
}

TEST_CASE("NCCL v-forms: one broadcast or reduce per non-empty block, the same list on every rank", "[nccl]") {
  // all_gather_v and reduce_scatter_v over NCCL post rooted_blocks(counts) as one group of
  // ncclBroadcast / ncclReduce. Carried out here on host memory, each broadcast copying its root's
  // block to every rank and each reduce summing every rank's block at its root, against
  // references computed from the counts alone: the packed layout, zeros left out, in place.
  auto mix = [](std::uint64_t x) {  // splitmix64's finaliser: distinct values per (rank, index)
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  auto value = [&](std::size_t rank, std::size_t i) { return static_cast<std::uint32_t>(mix(rank << 32 | i)); };
  for (int n = 1; n <= 6; ++n)
    for (int pattern = 0; pattern < 3; ++pattern) {
      const auto un = static_cast<std::size_t>(n);
      std::vector<std::size_t> counts(un);
      for (std::size_t q = 0; q < un; ++q)  // uneven; pattern 1 empties every other block, 2 all but the last
        counts[q] = pattern == 2 && q + 1 < un ? 0 : pattern == 1 && q % 2 ? 0 : mix(q * 7 + un + 1) % 9 + 1;
      INFO("n = " << n << ", pattern " << pattern);
      std::vector<std::size_t> displ(un, 0);
      for (std::size_t q = 1; q < un; ++q) displ[q] = displ[q - 1] + counts[q - 1];
      const std::size_t total = displ[un - 1] + counts[un - 1];

      const std::vector<nccl::rooted_block> blocks = nccl::rooted_blocks(counts, sizeof(std::uint32_t));
      std::size_t next = 0;  // rank order, no empty block, together covering the buffer once
      for (const auto& b : blocks) {
        const auto q = static_cast<std::size_t>(b.root);
        CHECK(b.bytes == counts[q] * 4);
        CHECK(b.offset == displ[q] * 4);
        CHECK(b.bytes > 0);
        CHECK(b.root >= static_cast<int>(next));
        next = q + 1;
      }
      const std::vector<nccl::rooted_block> wide = nccl::rooted_blocks(counts, 12);  // bytes scale with the element
      REQUIRE(wide.size() == blocks.size());
      for (std::size_t i = 0; i < wide.size(); ++i) {
        const auto q = static_cast<std::size_t>(blocks[i].root);
        CHECK(wide[i] == nccl::rooted_block{blocks[i].root, displ[q] * 12, counts[q] * 12});
      }

      // all_gather_v, out of place and in place (send is the rank's block of its own recv).
      for (bool in_place : {false, true}) {
        std::vector<std::vector<std::uint32_t>> send(un), recv(un, std::vector<std::uint32_t>(total, 0xabababab));
        for (std::size_t r = 0; r < un; ++r)
          for (std::size_t i = 0; i < counts[r]; ++i) {
            send[r].push_back(value(r, i));
            if (in_place) recv[r][displ[r] + i] = value(r, i);
          }
        for (const auto& b : blocks)
          for (std::size_t r = 0; r < un; ++r) {
            const auto q = static_cast<std::size_t>(b.root);
            const std::uint32_t* from = in_place ? recv[q].data() + b.offset / 4 : send[q].data();
            std::memmove(recv[r].data() + b.offset / 4, from, b.bytes);
          }
        for (std::size_t r = 0; r < un; ++r) {
          std::vector<std::uint32_t> want;
          for (std::size_t q = 0; q < un; ++q)
            for (std::size_t i = 0; i < counts[q]; ++i) want.push_back(value(q, i));
          INFO("all_gather_v rank " << r << (in_place ? " in place" : ""));
          CHECK(recv[r] == want);
        }
      }

      // reduce_scatter_v: rank r gets the sum over ranks of their elements displ[r] + i.
      std::vector<std::vector<std::uint32_t>> send(un, std::vector<std::uint32_t>(total)), recv(un);
      for (std::size_t r = 0; r < un; ++r) {
        for (std::size_t i = 0; i < total; ++i) send[r][i] = value(r, 1000 + i);
        recv[r].assign(counts[r], 0xabababab);
      }
      for (const auto& b : blocks) {
        const auto root = static_cast<std::size_t>(b.root);
        for (std::size_t i = 0; i < b.bytes / 4; ++i) {
          std::uint32_t sum = 0;
          for (std::size_t q = 0; q < un; ++q) sum += send[q][b.offset / 4 + i];
          recv[root][i] = sum;
        }
      }
      for (std::size_t r = 0; r < un; ++r)
        for (std::size_t i = 0; i < counts[r]; ++i) {
          std::uint32_t want = 0;
          for (std::size_t q = 0; q < un; ++q) want += value(q, 1000 + displ[r] + i);
          INFO("reduce_scatter_v rank " << r << " element " << i);
          CHECK(recv[r][i] == want);
        }
    }
  CHECK(nccl::rooted_blocks({0, 0, 0}, 4).empty());
}
