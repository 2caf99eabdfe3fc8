// Every floating element type x every built-in op, rounding of fp16/bf16 at the edges, and data
// movement for every type (tests/collectives_checks.hpp; split from test_collectives.cpp).
#include <functional>

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

// A user's own 16-bit float, whose narrow_float gives widen and narrow only (no narrow_result):
// binary16 in a struct of its own, so that the reduction's own NaN test before narrow is used.
namespace {
struct user_half {
  std::uint16_t bits = 0;
  static user_half from_bits(std::uint16_t b) { return user_half{b}; }
  explicit user_half(float f) : bits(collx::detail::float_to_half_bits(f)) {}
  user_half() = default;
  explicit user_half(std::uint16_t b) : bits(b) {}
};
}  // namespace
template <>
struct collx::narrow_float<user_half> : std::true_type {
  static float widen(user_half h) noexcept { return collx::detail::half_bits_to_float(h.bits); }
  static user_half narrow(float f) noexcept { return user_half(f); }
};

// A user's 16-bit float with arithmetic and implicit conversions to and from float, as CUDA's
// __half has: a generic op on it runs in fp32 all the same, and one typed on it rounds each step.
namespace {
struct arith_half {
  std::uint16_t bits = 0;
  static arith_half from_bits(std::uint16_t b) {
    arith_half h;
    h.bits = b;
    return h;
  }
  arith_half() = default;
  arith_half(float f) : bits(collx::detail::float_to_half_bits(f)) {}  // NOLINT: implicit, as __half's
  operator float() const { return collx::detail::half_bits_to_float(bits); }  // NOLINT: implicit, as __half's
  friend arith_half operator+(arith_half a, arith_half b) { return arith_half(float(a) + float(b)); }
};
}  // namespace
template <>
struct collx::narrow_float<arith_half> : std::true_type {
  static float widen(arith_half h) noexcept { return h; }
  static arith_half narrow(float f) noexcept { return f; }
};

// Two different NaNs meeting in an fp16/bf16 sum kept the payload of whichever operand the
// compiler's `+` put first, which differed between ranks' code paths (3 thread ranks, direct:
// 7f4f, 7f4f, 7e81). A NaN result is now the canonical quiet NaN on every rank, as min/max give.
// Element i of rank r: i % 3 == 0, ranks (i / 3) % n and (i / 3 + 1) % n hold quiet NaNs with
// payloads from (r, i), signs mixed; i % 3 == 1, +inf and -inf on two ranks (sum and avg make a
// NaN, prod gives -inf); else finite values.
template <class T, class Op>
void nan_results_are_canonical(int n, std::size_t count, collx::algorithm a, std::uint16_t canonical) {
  INFO(typeid(T).name() << " " << typeid(Op).name() << " n " << n << " count " << count
                                                                 << " " << collx::algorithm_name(a));
  const std::uint16_t quiet = canonical, inf = canonical == 0x7e00 ? 0x7c00 : 0x7f80;
  auto input = [&](int r, std::size_t i) -> std::uint16_t {
    const int first = static_cast<int>(i / 3 % static_cast<std::size_t>(n)), second = (first + 1) % n;
    if (i % 3 == 0 && (r == first || r == second))
      return static_cast<std::uint16_t>(quiet | ((r + 1 + i) % 31 + 1) | (r == second && i % 2 ? 0x8000 : 0));
    if (i % 3 == 1 && (r == first || r == second)) return static_cast<std::uint16_t>(r == first ? inf : inf | 0x8000);
    return T(0.25f * static_cast<float>((r + i) % 5 + 1)).bits;
  };
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        std::vector<T> x(count);
        for (std::size_t i = 0; i < count; ++i) x[i] = T::from_bits(input(c.rank(), i));
        std::vector<T> y(count, T::from_bits(0x1234));
        collx::allreduce<collx::algo::automatic>(c, std::span<const T>(x), std::span<T>(y), Op{});
        out[static_cast<std::size_t>(c.rank())] = y;
      },
      ref::forcing(a));
  std::string first_wrong;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const bool nan = i % 3 == 0 || (i % 3 == 1 && !std::is_same_v<Op, collx::ops::prod>);
    for (int r = 0; r < n; ++r) {
      const std::uint16_t got = out[static_cast<std::size_t>(r)][i].bits;
      if (got == (nan ? canonical : out[0][i].bits)) continue;
      if (wrong++ == 0) first_wrong = "element " + std::to_string(i) + " rank " + std::to_string(r) + " got " + std::to_string(got);
    }
  }
  INFO(first_wrong);
  REQUIRE(wrong == 0);
}

TEST_CASE("fp16 / bf16: a NaN result is the canonical quiet NaN on every rank, whatever the payloads met", "[collectives][types]") {
  for (int n : {2, 3, 5})
    for (std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{97}, std::size_t{40001}})
      for (collx::algorithm a : {collx::algorithm::ring, collx::algorithm::tree, collx::algorithm::direct}) {
        nan_results_are_canonical<collx::half, collx::ops::sum>(n, count, a, 0x7e00);
        nan_results_are_canonical<collx::bfloat16, collx::ops::sum>(n, count, a, 0x7fc0);
        nan_results_are_canonical<collx::half, collx::ops::avg>(n, count, a, 0x7e00);
        nan_results_are_canonical<collx::bfloat16, collx::ops::prod>(n, count, a, 0x7fc0);
        nan_results_are_canonical<user_half, collx::ops::sum>(n, count, a, 0x7e00);
      }
}

// A user's op on fp16/bf16 that takes floats (typed `float`, or generic: collx::half has no
// arithmetic) runs in fp32 as the built-ins do: each element widened
// when read, partial results in fp32, the result rounded once. One typed on the narrow type gets
// narrow operands and rounds at every step, as it asks, and so does one that takes floats and returns
// the narrow type (its results are rounded). The inputs are integers whose sums fp32
// holds exactly, so any bracketing gives the exact sum, and the reference is that sum rounded once;
// rank 0's large values make the narrow type's step-by-step rounding differ from it (checked).
template <class T, class Op>
void user_op_runs_in_fp32(int n, std::size_t count, collx::algorithm a, Op op, bool expect_fp32) {
  INFO(typeid(T).name() << " n " << n << " count " << count << " " << collx::algorithm_name(a) << " fp32 " << expect_fp32);
  static_assert(collx::reduction_op<Op, T>);
  const bool half = !std::is_same_v<T, collx::bfloat16>;  // binary16
  const float big = half ? 2048.0f : 256.0f;  // from here the type's spacing is 2: odd partial sums round
  auto input = [&](int r, std::size_t i) {
    return r == 0 ? big + static_cast<float>(2 * ((i * 7) % 97 % (half ? 97 : 60)))
                  : static_cast<float>((static_cast<std::size_t>(r) * 5 + i) % 4 + 1);
  };
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        std::vector<T> x(count), y(count, T::from_bits(0x7bff));
        for (std::size_t i = 0; i < count; ++i) x[i] = T(input(c.rank(), i));
        collx::allreduce<collx::algo::automatic>(c, std::span<const T>(x), std::span<T>(y), op);
        out[static_cast<std::size_t>(c.rank())] = y;
      },
      ref::forcing(a));
  std::size_t wrong = 0, steps_differ = 0;
  std::string first_wrong;
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0;
    T stepwise = T(input(0, i));  // rank order, rounded at each step: what a narrow op computes (direct)
    for (int r = 0; r < n; ++r) {
      exact += input(r, i);
      if (r > 0) stepwise = T(static_cast<float>(stepwise) + input(r, i));
    }
    const T once = T(static_cast<float>(exact));
    steps_differ += stepwise.bits != once.bits;
    const std::uint16_t want = expect_fp32 ? once.bits : stepwise.bits;
    for (int r = 0; r < n; ++r)
      if (out[static_cast<std::size_t>(r)][i].bits != want && wrong++ == 0)
        first_wrong = "element " + std::to_string(i) + " rank " + std::to_string(r) + " got " +
                      std::to_string(out[static_cast<std::size_t>(r)][i].bits) + ", want " + std::to_string(want);
  }
  INFO(first_wrong);
  CHECK(wrong == 0);
  if (n > 2 && count > 50) CHECK(steps_differ * 5 > count);  // the two roundings do differ on these inputs (n 3: 24%)
}

TEST_CASE("fp16 / bf16: a user op taking floats runs in fp32 and rounds once; one taking or returning half rounds each step", "[collectives][types]") {
  const auto float_sum = [](float a, float b) { return a + b; };
  // Generic ops are tried on floats first: a deduced result would be a hard error on bfloat16
  // operands (no `+`).
  const auto generic_sum = [](auto a, auto b) { return a + b; };
  const auto half_sum = [](collx::half a, collx::half b) { return collx::half(static_cast<float>(a) + static_cast<float>(b)); };
  // On a type with arithmetic too, a generic op is tried on floats first; a typed one is not.
  const auto arith_half_sum = [](arith_half a, arith_half b) { return a + b; };
  static_assert(std::is_same_v<collx::detail::reduction<arith_half, decltype(generic_sum)>::acc, float> &&
                std::is_same_v<collx::detail::reduction<arith_half, decltype(arith_half_sum)>::acc, arith_half>);
  // Takes floats, returns the narrow type: fp32 operands, each step's result rounded, as written.
  const auto float_to_half_sum = [](float a, float b) { return collx::half(a + b); };
  const auto float_to_bf16_sum = [](float a, float b) -> collx::bfloat16 { return collx::bfloat16(a + b); };
  static_assert(collx::detail::op_runs_in_fp32<decltype(float_to_half_sum), collx::half> &&
                collx::detail::op_runs_in_fp32<decltype(float_to_bf16_sum), collx::bfloat16> &&
                !collx::reduction_op<decltype(float_to_half_sum), collx::bfloat16>);  // a half is no bfloat16
  static_assert(collx::detail::op_runs_in_fp32<decltype(float_sum), collx::half> &&
                collx::detail::op_runs_in_fp32<decltype(generic_sum), collx::bfloat16> &&
                !collx::detail::op_runs_in_fp32<decltype(half_sum), collx::half> &&
                !collx::detail::op_runs_in_fp32<decltype(float_sum), float>);
  for (int n : {2, 3, 5})
    for (std::size_t count : {std::size_t{1}, std::size_t{97}, std::size_t{40001}}) {
      for (collx::algorithm a : {collx::algorithm::tree, collx::algorithm::direct}) {
        user_op_runs_in_fp32<collx::half>(n, count, a, float_sum, true);
        user_op_runs_in_fp32<collx::bfloat16>(n, count, a, generic_sum, true);
      }
      user_op_runs_in_fp32<collx::half>(n, count, collx::algorithm::ring, collx::commutative_op{float_sum}, true);
      user_op_runs_in_fp32<collx::bfloat16>(n, count, collx::algorithm::ring, collx::commutative_op{generic_sum}, true);
      user_op_runs_in_fp32<collx::half>(n, count, collx::algorithm::tree, std::plus<>{}, true);
      user_op_runs_in_fp32<arith_half>(n, count, collx::algorithm::tree, generic_sum, true);
      user_op_runs_in_fp32<arith_half>(n, count, collx::algorithm::direct, arith_half_sum, false);
      user_op_runs_in_fp32<collx::half>(n, count, collx::algorithm::direct, half_sum, false);
      user_op_runs_in_fp32<collx::half>(n, count, collx::algorithm::direct, float_to_half_sum, false);
      user_op_runs_in_fp32<collx::bfloat16>(n, count, collx::algorithm::direct, float_to_bf16_sum, false);
    }
}

// =============================================================================================
// Counts

