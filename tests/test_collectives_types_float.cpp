// Every floating element type x every built-in op, rounding of fp16/bf16 at the edges, and data
// movement for every type (tests/collectives_checks.hpp; split from test_collectives.cpp).
#include "collectives_checks.hpp"

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every floating type x every built-in op at n = 3, 5",
                   "[collectives][types]", float, double, collx::half, collx::bfloat16) {
  type_every_op<TestType>();
}

TEMPLATE_TEST_CASE("data movement (all_gather, broadcast, all_to_all): every type", "[collectives][types]",
                   std::int8_t, std::uint16_t, std::int32_t, std::uint64_t, double, collx::half, collx::bfloat16,
                   ref::loc16, ref::loc64) {
  using A = collx::algo::automatic;
  for (int n : {3, 5})
    for (size_t count : {size_t{7}, size_t{1009}})
      for (collx::algorithm a : {collx::algorithm::ring, collx::algorithm::tree, collx::algorithm::direct}) {
        INFO("forced " << collx::algorithm_name(a));
        const opts_t o = ref::forcing(a);
        check_all_gather<A, TestType>(n, std::vector<size_t>(uz(n), count), false, count % 2 == 0, o);
        check_all_gather<A, TestType>(n, random_counts(n, count, count), true, false, o);
        check_broadcast<A, TestType>(n, count, 1, false, false, o);
        check_all_to_all_uniform<A, TestType>(n, count / 3, o);
      }
}

TEST_CASE("fp16 / bf16 results in the subnormal range and past the largest finite value round once", "[collectives][types]") {
  // avg divides an exact fp32 sum by n and rounds once; prod of three small values lands in the
  // subnormal range or underflows; sums of large values overflow to inf.
  using A = collx::algo::automatic;
  for (int n : {2, 3, 5})
    for (collx::algorithm a : {collx::algorithm::ring, collx::algorithm::tree, collx::algorithm::direct}) {
      INFO("forced " << collx::algorithm_name(a));
      const opts_t o = ref::forcing(a);
      check_allreduce<A, collx::half, collx::ops::avg>(n, 4099, false, o, {}, flavor::tiny);
      check_allreduce<A, collx::bfloat16, collx::ops::avg>(n, 4099, false, o, {}, flavor::tiny);
      check_allreduce<A, collx::half, collx::ops::prod>(n, 4099, false, o, {}, flavor::tiny_prod);
      check_allreduce<A, collx::bfloat16, collx::ops::prod>(n, 4099, false, o, {}, flavor::tiny_prod);
      check_allreduce<A, collx::half, collx::ops::avg>(n, 4099, false, o, {}, flavor::near_one, 3);
    }
  // the inputs do reach the subnormal range of the results
  const auto in = ref::gen_ranks<collx::half>(3, 4099, flavor::tiny_prod);
  size_t subnormal = 0, zero = 0;
  for (size_t i = 0; i < 4099; ++i) {
    const collx::half p = ref::fold_left<collx::half, collx::ops::prod>(3, ref::column<collx::half>{&in, i});
    subnormal += (p.bits & 0x7c00u) == 0 && (p.bits & 0x3ffu) != 0;
    zero += (p.bits & 0x7fffu) == 0;
  }
  CHECK(subnormal > 1000);
  CHECK(zero > 0);
}

// =============================================================================================
// Counts

