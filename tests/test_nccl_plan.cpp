// Host-side logic of collx::nccl (collx/nccl/native.hpp, collx/nccl/plan.hpp): plain C++, no NCCL,
// CUDA or GPU needed. Which (type, op) pairs NCCL reduces itself; how a schedule becomes NCCL groups,
// checked by simulating every rank's groups under "a send completes only while its receive is
// posted"; and how a call is cut into segments that bound device memory, checked by coverage.
#include <catch2/catch.hpp>

#include <collx/nccl/native.hpp>
#include <collx/nccl/plan.hpp>

#include <cstddef>
#include <cstdint>
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
