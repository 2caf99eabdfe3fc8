// Semantics of the built-in reduction ops (ops.hpp) and of detail::reduction (accumulator type,
// widening, combining, finalising), as documented at the top of ops.hpp.
// Integer cases are also static_asserts: a constant expression may not contain undefined
// behaviour, so they prove the wrap-around is computed without signed overflow.
#include <catch2/catch.hpp>

#include <collx/concepts.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/detail/streaming_store.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

using collx::bfloat16;
using collx::half;
namespace ops = collx::ops;
template <class T, class Op>
using red = collx::detail::reduction<T, Op>;

// ---------------------------------------------------------------------------------------------
// Integer sum/prod wrap modulo 2^bits (edge-cases.md A1), without undefined behaviour.
static_assert(ops::sum{}(std::int8_t{100}, std::int8_t{100}) == std::int8_t{-56});
static_assert(ops::sum{}(std::uint8_t{200}, std::uint8_t{100}) == std::uint8_t{44});
static_assert(ops::sum{}(std::int16_t{16384}, std::int16_t{16384}) == std::int16_t{-32768});
static_assert(ops::sum{}(std::int32_t{INT_MAX}, std::int32_t{1}) == INT_MIN);
static_assert(ops::sum{}(std::int64_t{INT64_MAX}, std::int64_t{1}) == INT64_MIN);
static_assert(ops::sum{}(std::uint32_t{UINT32_MAX}, std::uint32_t{2}) == 1u);
static_assert(ops::sum{}(std::int32_t{INT_MIN}, std::int32_t{-1}) == INT_MAX);
// uint16 * uint16 promotes to int in plain C++, and 65535 * 65535 overflows int: UB. collx must not.
static_assert(ops::prod{}(std::uint16_t{65535}, std::uint16_t{65535}) == std::uint16_t{1});
static_assert(ops::prod{}(std::int16_t{-32768}, std::int16_t{-1}) == std::int16_t{-32768});
static_assert(ops::prod{}(std::int8_t{-128}, std::int8_t{-1}) == std::int8_t{-128});
static_assert(ops::prod{}(std::int32_t{INT_MIN}, std::int32_t{-1}) == INT_MIN);
static_assert(ops::prod{}(std::int32_t{65536}, std::int32_t{65536}) == 0);
static_assert(ops::prod{}(std::uint32_t{UINT32_MAX}, std::uint32_t{UINT32_MAX}) == 1u);
static_assert(ops::prod{}(std::int64_t{INT64_MIN}, std::int64_t{-1}) == INT64_MIN);
static_assert(ops::prod{}(std::uint64_t{UINT64_MAX}, std::uint64_t{UINT64_MAX}) == 1u);
static_assert(ops::prod{}(char{100}, char{3}) == static_cast<char>(300 & 0xff));
// The result type is the element type.
static_assert(std::is_same_v<decltype(ops::sum{}(std::int8_t{}, std::int8_t{})), std::int8_t>);
static_assert(std::is_same_v<decltype(ops::prod{}(std::uint16_t{}, std::uint16_t{})), std::uint16_t>);

// Unsigned types compare as unsigned.
static_assert(ops::min{}(std::uint32_t{0xffffffffu}, std::uint32_t{1}) == 1u);
static_assert(ops::max{}(std::uint32_t{0xffffffffu}, std::uint32_t{1}) == 0xffffffffu);
static_assert(ops::min{}(std::uint8_t{200}, std::uint8_t{100}) == 100);
static_assert(ops::max{}(std::uint8_t{200}, std::uint8_t{100}) == 200);
static_assert(ops::max{}(std::uint64_t{1} << 63, std::uint64_t{1}) == std::uint64_t{1} << 63);
static_assert(ops::min{}(-1, 1) == -1 && ops::max{}(std::int8_t{-128}, std::int8_t{127}) == 127);

// Bitwise ops: integers.
static_assert(ops::band{}(0b1100, 0b1010) == 0b1000 && ops::bor{}(0b1100, 0b1010) == 0b1110 &&
              ops::bxor{}(0b1100, 0b1010) == 0b0110);
static_assert(ops::bxor{}(std::int8_t{-1}, std::int8_t{0x0f}) == std::int8_t{-16});
static_assert(ops::band{}(std::uint64_t{~0ull}, std::uint64_t{0x8000000000000001ull}) == 0x8000000000000001ull);
static_assert(std::is_same_v<decltype(ops::bor{}(std::uint8_t{}, std::uint8_t{})), std::uint8_t>);

// ---------------------------------------------------------------------------------------------
// Concepts: what an op accepts.
namespace {
struct S {
  int v;
};
struct not_trivially_copyable_op {
  std::string state;
  int operator()(int a, int b) const { return a + b; }
};
struct void_op {
  void operator()(int, int) const {}
};
struct declared_commutative {
  static constexpr bool commutative = true;
  int operator()(int a, int b) const { return a + b; }
};
struct declared_non_commutative {
  static constexpr bool commutative = false;
  static constexpr const char* name = "mine";
  int operator()(int a, int b) const { return a - b; }
};
inline constexpr auto plain_lambda = [](const S& a, const S& b) { return S{a.v + b.v}; };
}  // namespace

static_assert(!collx::reduction_op<ops::sum, S>, "sum on a struct is rejected");
static_assert(!collx::reduction_op<ops::max, S>);
static_assert(collx::reduction_op<decltype(plain_lambda), S>);
static_assert(collx::reduction_op<ops::sum, int> && collx::reduction_op<ops::sum, double>);
static_assert(collx::reduction_op<ops::sum, half> && collx::reduction_op<ops::avg, bfloat16>);
static_assert(collx::reduction_op<ops::min, half> && collx::reduction_op<ops::prod, bfloat16>);
static_assert(!collx::reduction_op<ops::sum, bool>, "bool is not arithmetic for the built-ins");
static_assert(!collx::reduction_op<not_trivially_copyable_op, int>, "ops must be trivially copyable");
static_assert(!collx::reduction_op<void_op, int>);
static_assert(!collx::reduction_op<ops::sum, const int>, "not an element");
// The usual mistakes in a user's op each fail the requirement named after it (the one a compile
// error names, with the advice on its line in concepts.hpp), and only that one; wrapped in
// commutative_op too.
namespace {
int op_calls = 0;
inline constexpr auto mutable_lambda = [n = 0](double a, double b) mutable { ++n; return a + b; };
inline constexpr auto ref_lambda = [](double& a, double& b) { return a + b; };
inline constexpr auto rvalue_lambda = [](double&& a, double&& b) { return a + b; };
inline constexpr auto by_value_lambda = [](double a, double b) { ++op_calls; return a + b; };
// Op as a call deduces it (a by-value parameter: not const).
using mutable_op = std::remove_const_t<decltype(mutable_lambda)>;
using ref_op = std::remove_const_t<decltype(ref_lambda)>;
using rvalue_op = std::remove_const_t<decltype(rvalue_lambda)>;
using by_value_op = std::remove_const_t<decltype(by_value_lambda)>;
struct owning_op {
  std::string label;
  double operator()(double a, double b) const { return a + b; }
};
template <class Op>
constexpr bool only_const_call_fails = !collx::detail::op_call_is_const<Op, double> &&
                                       collx::detail::op_takes_const_operands<Op, double> &&
                                       collx::detail::op_trivially_copyable<Op>;
template <class Op>
constexpr bool only_const_operands_fail = collx::detail::op_call_is_const<Op, double> &&
                                          !collx::detail::op_takes_const_operands<Op, double> &&
                                          collx::detail::op_trivially_copyable<Op>;
}  // namespace
static_assert(only_const_call_fails<mutable_op> && !collx::reduction_op<mutable_op, double>);
static_assert(only_const_call_fails<collx::commutative_op<mutable_op>>);
static_assert(only_const_operands_fail<ref_op> && !collx::reduction_op<ref_op, double>);
static_assert(only_const_operands_fail<collx::commutative_op<ref_op>>);
static_assert(!collx::detail::op_trivially_copyable<owning_op> && collx::detail::op_call_is_const<owning_op, double> &&
              collx::detail::op_takes_const_operands<owning_op, double> && !collx::reduction_op<owning_op, double>);
// An op on rvalues is none of those: it cannot take collx's const operands at all.
static_assert(collx::detail::op_call_is_const<rvalue_op, double> &&
              collx::detail::op_takes_const_operands<rvalue_op, double> &&
              !collx::detail::op_returns_element<rvalue_op, double>);
static_assert(collx::reduction_op<by_value_op, double> &&
              collx::reduction_op<collx::commutative_op<by_value_op>, double>);
// On half, an op taking floats is checked with float operands too: a mutable one, or one taking
// `float&`, is named as such (not as an op with no meaning on half).
namespace {
inline constexpr auto mutable_float_lambda = [n = 0](float a, float b) mutable { ++n; return a + b; };
inline constexpr auto float_ref_lambda = [](float& a, float& b) { return a + b; };
using mutable_float_op = std::remove_const_t<decltype(mutable_float_lambda)>;
using float_ref_op = std::remove_const_t<decltype(float_ref_lambda)>;
}  // namespace
static_assert(!collx::detail::op_call_is_const<mutable_float_op, half> &&
              collx::detail::op_takes_const_operands<mutable_float_op, half> && !collx::reduction_op<mutable_float_op, half>);
static_assert(collx::detail::op_call_is_const<float_ref_op, bfloat16> &&
              !collx::detail::op_takes_const_operands<float_ref_op, bfloat16> && !collx::reduction_op<float_ref_op, bfloat16>);
// Typed on half itself: `half&` operands are named, and so is a capturing mutable lambda, and a
// generic op is never tried on half operands (its `+` would be a hard error: no arithmetic).
namespace {
inline constexpr auto half_ref_lambda = [](half& a, half& b) { return half(float(a) + float(b)); };
inline constexpr auto mutable_half_lambda = [n = 0](half a, half b) mutable { ++n; return half(float(a) + float(b)); };
inline constexpr auto generic_plus = [](auto a, auto b) { return a + b; };
using half_ref_op = std::remove_const_t<decltype(half_ref_lambda)>;
using mutable_half_op = std::remove_const_t<decltype(mutable_half_lambda)>;
}  // namespace
static_assert(collx::detail::op_call_is_const<half_ref_op, half> && !collx::detail::op_takes_const_operands<half_ref_op, half>);
static_assert(!collx::detail::op_call_is_const<mutable_half_op, half> && collx::detail::op_takes_const_operands<mutable_half_op, half>);
static_assert(collx::reduction_op<std::remove_const_t<decltype(generic_plus)>, half> &&
              collx::reduction_op<std::remove_const_t<decltype(generic_plus)>, bfloat16>);

// Ops that lose element values silently are refused (detail::op_narrows_elements, a static_assert
// in every reduction): by their parameters, and by their result, a generic lambda's too.
namespace {
inline constexpr auto int_result_generic = [](auto a, auto b) { return int(a + b); };
inline constexpr auto float_result_on_double = [](double a, double b) -> float { return float(a + b); };
inline constexpr auto float_inside_generic = [](auto a, auto b) { return float(a) + float(b); };
inline constexpr auto promoting_generic = [](auto a, auto b) { return a + b; };  // int8 + int8 is an int
inline constexpr auto wider_parameters = [](double a, double b) { return a + b; };
inline constexpr auto int_parameters = [](int a, int b) { return a + b; };
inline constexpr auto float_to_int = [](float a, float b) { return static_cast<int>(a + b); };
// A mutable lambda without captures (collx calls it through its function pointer) is read too.
inline constexpr auto mutable_int_parameters = [](int a, int b) mutable -> float { return float(a + b); };
template <class L, class T>
constexpr bool narrows = collx::detail::op_narrows_elements<std::remove_const_t<L>, T>;
}  // namespace
static_assert(narrows<decltype(int_result_generic), float> && narrows<decltype(float_result_on_double), double> &&
              narrows<decltype(float_inside_generic), double> && narrows<decltype(int_parameters), float>);
static_assert(!narrows<decltype(promoting_generic), std::int8_t> && !narrows<decltype(wider_parameters), float> &&
              !narrows<decltype(float_inside_generic), float> && !narrows<decltype(int_result_generic), int>);
// At the boundary: a floating parameter whose significand holds every value of the integer
// elements loses nothing (double for int32: 53 digits for 31; long double for uint64 where it has
// 64 digits, as on x86), one digit fewer does (float for int32, 24 for 31; double for uint64).
namespace {
inline constexpr auto long_double_parameters = [](long double a, long double b) { return a + b; };
inline constexpr auto float_parameters = [](float a, float b) { return a + b; };
}  // namespace
static_assert(!narrows<decltype(wider_parameters), std::int32_t> && narrows<decltype(float_parameters), std::int32_t> &&
              narrows<decltype(wider_parameters), std::uint64_t>);
static_assert(std::numeric_limits<long double>::digits < 64 || !narrows<decltype(long_double_parameters), std::uint64_t>);
static_assert(!collx::detail::arithmetic_narrows<std::uint16_t, float> && collx::detail::arithmetic_narrows<std::uint32_t, float>);
// On narrow floats an op taking floats runs in fp32, and is checked against fp32 operands.
static_assert(!narrows<decltype(wider_parameters), half> && narrows<decltype(float_to_int), half> &&
              narrows<decltype(int_parameters), bfloat16>);
static_assert(!narrows<ops::sum, float> && !narrows<ops::max, double> && !narrows<ops::avg, half>);
static_assert(narrows<decltype(mutable_int_parameters), float> && narrows<decltype(mutable_int_parameters), half> &&
              !narrows<decltype(mutable_int_parameters), int>);

// Bitwise ops on integers only.
static_assert(collx::reduction_op<ops::band, int> && collx::reduction_op<ops::bxor, std::uint8_t> &&
              collx::reduction_op<ops::bor, std::int64_t>);
static_assert(!collx::reduction_op<ops::band, float> && !collx::reduction_op<ops::bor, double> &&
              !collx::reduction_op<ops::bxor, half> && !collx::reduction_op<ops::band, bfloat16> &&
              !collx::reduction_op<ops::bxor, bool>);

// op_traits: built-ins are commutative, user ops are not unless they say so.
static_assert(collx::op_traits<ops::sum>::commutative && collx::op_traits<ops::prod>::commutative &&
              collx::op_traits<ops::min>::commutative && collx::op_traits<ops::max>::commutative &&
              collx::op_traits<ops::avg>::commutative && collx::op_traits<ops::band>::commutative &&
              collx::op_traits<ops::bor>::commutative && collx::op_traits<ops::bxor>::commutative);
static_assert(!collx::op_traits<decltype(plain_lambda)>::commutative);
static_assert(collx::op_traits<decltype(collx::commutative_op{plain_lambda})>::commutative);
static_assert(collx::op_traits<declared_commutative>::commutative);
static_assert(!collx::op_traits<declared_non_commutative>::commutative);
static_assert(collx::reduction_op<decltype(collx::commutative_op{plain_lambda}), S>);
static_assert(std::is_trivially_copyable_v<decltype(collx::commutative_op{plain_lambda})>);
static_assert(collx::op_traits<ops::avg>::is_avg && !collx::op_traits<ops::sum>::is_avg);

// detail::reduction: accumulator types.
static_assert(std::is_same_v<red<half, ops::sum>::acc, float> && std::is_same_v<red<bfloat16, ops::max>::acc, float>);
static_assert(std::is_same_v<red<bfloat16, ops::avg>::acc, float> && std::is_same_v<red<half, ops::prod>::acc, float>);
static_assert(std::is_same_v<red<half, decltype(plain_lambda)>::acc, half>, "user ops see the element type");
static_assert(std::is_same_v<red<std::int8_t, ops::sum>::acc, std::int8_t>);
static_assert(std::is_same_v<red<float, ops::sum>::acc, float> && std::is_same_v<red<double, ops::avg>::acc, double>);
static_assert(red<half, ops::sum>::needs_finalize && red<int, ops::avg>::needs_finalize);
static_assert(!red<int, ops::sum>::needs_finalize && !red<float, ops::max>::needs_finalize);

// ---------------------------------------------------------------------------------------------

TEST_CASE("ops: names", "[ops]") {
  CHECK(std::string(collx::op_traits<ops::sum>::name) == "sum");
  CHECK(std::string(collx::op_traits<ops::avg>::name) == "avg");
  CHECK(std::string(collx::op_traits<ops::bxor>::name) == "bxor");
  CHECK(std::string(collx::op_traits<decltype(plain_lambda)>::name) == "custom");
  CHECK(std::string(collx::op_traits<declared_non_commutative>::name) == "mine");
}

TEST_CASE("ops: integer wrap-around at run time, every width (edge-cases.md A1)", "[ops]") {
  // The same as the static_asserts, but through the run-time path (UBSan watches it in the
  // sanitizer build), and exhaustively for 8-bit types against modular arithmetic.
  volatile int big = INT_MAX;
  CHECK(ops::sum{}(static_cast<int>(big), 1) == INT_MIN);
  for (int a = -128; a < 128; ++a)
    for (int b = -128; b < 128; ++b) {
      const auto s8 = ops::sum{}(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b));
      const auto p8 = ops::prod{}(static_cast<std::int8_t>(a), static_cast<std::int8_t>(b));
      const auto su = ops::sum{}(static_cast<std::uint8_t>(a), static_cast<std::uint8_t>(b));
      const auto pu = ops::prod{}(static_cast<std::uint8_t>(a), static_cast<std::uint8_t>(b));
      if (s8 != static_cast<std::int8_t>(static_cast<std::uint8_t>((a + b) & 0xff)) ||
          p8 != static_cast<std::int8_t>(static_cast<std::uint8_t>((a * b) & 0xff)) ||
          su != static_cast<std::uint8_t>((a + b) & 0xff) ||
          pu != static_cast<std::uint8_t>(static_cast<unsigned>(static_cast<std::uint8_t>(a)) *
                                          static_cast<std::uint8_t>(b) & 0xffu))
        FAIL("8-bit wrap wrong at " << a << ", " << b);
    }
  for (std::uint32_t a : {0u, 1u, 255u, 32767u, 32768u, 65535u})
    for (std::uint32_t b : {0u, 1u, 2u, 255u, 32768u, 65535u}) {
      CHECK(ops::prod{}(static_cast<std::uint16_t>(a), static_cast<std::uint16_t>(b)) ==
            static_cast<std::uint16_t>((a * b) & 0xffffu));
      CHECK(ops::prod{}(static_cast<std::int16_t>(a), static_cast<std::int16_t>(b)) ==
            static_cast<std::int16_t>(static_cast<std::uint16_t>((a * b) & 0xffffu)));
    }
  // Through detail::reduction: combine keeps T.
  using r8 = red<std::int8_t, ops::sum>;
  CHECK(r8::finalize(r8::combine({}, 100, 100), 2) == -56);
}

namespace {
template <class T>
std::uint64_t bits_of(T v) {
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(v);
  else if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(v);
  else return std::bit_cast<std::uint16_t>(v);
}

/// Folds `v` left to right with op in every order (all permutations) and returns the set of result bits.
template <class T, class Op>
std::vector<std::uint64_t> all_orders(std::vector<T> v, Op op) {
  std::vector<std::size_t> idx(v.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::vector<std::uint64_t> out;
  do {
    T acc = v[idx[0]];
    for (std::size_t i = 1; i < idx.size(); ++i) acc = op(acc, v[idx[i]]);
    out.push_back(bits_of(acc));
  } while (std::next_permutation(idx.begin(), idx.end()));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

template <class T>
void check_min_max_policy() {
  using L = std::numeric_limits<T>;
  const T qnan = L::quiet_NaN(), neg_nan = -L::quiet_NaN(), snan = L::signaling_NaN();
  T payload_nan;
  if constexpr (sizeof(T) == 4) payload_nan = std::bit_cast<T>(0x7fc12345u);
  else payload_nan = std::bit_cast<T>(0xfff0000000abcdefull);
  const std::uint64_t canonical = bits_of(qnan);
  const T others[] = {T(0), -T(0), T(1), T(-1), L::infinity(), -L::infinity(), L::max(), L::denorm_min(), qnan};
  for (T nan : {qnan, neg_nan, snan, payload_nan})
    for (T x : others) {
      INFO("NaN bits " << bits_of(nan) << " with " << double(x));
      CHECK(bits_of(ops::min{}(nan, x)) == canonical);
      CHECK(bits_of(ops::min{}(x, nan)) == canonical);
      CHECK(bits_of(ops::max{}(nan, x)) == canonical);
      CHECK(bits_of(ops::max{}(x, nan)) == canonical);
    }
  // -0 < +0, in both orders
  CHECK(bits_of(ops::min{}(T(0), -T(0))) == bits_of(-T(0)));
  CHECK(bits_of(ops::min{}(-T(0), T(0))) == bits_of(-T(0)));
  CHECK(bits_of(ops::max{}(T(0), -T(0))) == bits_of(T(0)));
  CHECK(bits_of(ops::max{}(-T(0), T(0))) == bits_of(T(0)));
  // The result does not depend on the order operands meet.
  const std::vector<T> with_nan = {T(3), -T(0), snan, T(0), -L::infinity()};
  CHECK(all_orders(with_nan, ops::min{}) == std::vector<std::uint64_t>{canonical});
  CHECK(all_orders(with_nan, ops::max{}) == std::vector<std::uint64_t>{canonical});
  const std::vector<T> zeros = {T(0), -T(0), T(0), -T(0), T(2)};
  CHECK(all_orders(zeros, ops::min{}) == std::vector<std::uint64_t>{bits_of(-T(0))});
  CHECK(all_orders(std::vector<T>{T(0), -T(0), -T(0), T(-5)}, ops::max{}) == std::vector<std::uint64_t>{bits_of(T(0))});
  CHECK(ops::min{}(T(-2), L::infinity()) == T(-2));
  CHECK(ops::max{}(-L::infinity(), L::lowest()) == L::lowest());
}
}  // namespace

TEST_CASE("ops: float min/max: NaN wins as the canonical quiet NaN, -0 < +0, order does not matter", "[ops]") {
  SECTION("float") { check_min_max_policy<float>(); }
  SECTION("double") { check_min_max_policy<double>(); }
  SECTION("half and bfloat16 (widened to fp32, rounded once)") {
    const half hnan = half::from_bits(0x7e00), hsnan = half::from_bits(0x7c01), hneg = half::from_bits(0xfe01);
    const std::uint16_t hcanon = half(std::numeric_limits<float>::quiet_NaN()).bits;
    for (half nan : {hnan, hsnan, hneg})
      for (half x : {half(0.0f), half(-0.0f), half(1.0f), half::from_bits(0x7c00), nan}) {
        CHECK(ops::min{}(nan, x).bits == hcanon);
        CHECK(ops::min{}(x, nan).bits == hcanon);
        CHECK(ops::max{}(nan, x).bits == hcanon);
        CHECK(ops::max{}(x, nan).bits == hcanon);
      }
    CHECK(ops::min{}(half(0.0f), half(-0.0f)).bits == 0x8000);
    CHECK(ops::min{}(half(-0.0f), half(0.0f)).bits == 0x8000);
    CHECK(ops::max{}(half(-0.0f), half(0.0f)).bits == 0x0000);
    CHECK(ops::max{}(half(0.0f), half(-0.0f)).bits == 0x0000);
    const bfloat16 bnan = bfloat16::from_bits(0xffc1);
    CHECK(ops::max{}(bfloat16(2.0f), bnan).bits == bfloat16(std::numeric_limits<float>::quiet_NaN()).bits);
    CHECK(ops::min{}(bfloat16(-0.0f), bfloat16(0.0f)).bits == 0x8000);
    CHECK(ops::max{}(bfloat16(-0.0f), bfloat16(0.0f)).bits == 0x0000);
    // Through detail::reduction: the accumulator is fp32 and the NaN stays canonical when rounded.
    using rh = red<half, ops::min>;
    CHECK(rh::finalize(rh::combine({}, rh::widen(half(1.0f)), rh::widen(hsnan)), 4).bits == hcanon);
    // sum's `+` keeps an operand's payload in fp32; the rounding makes it canonical (the reduction's
    // narrow_result), so every rank writes the same bits whichever operand came first.
    using rs = red<half, ops::sum>;
    CHECK(rs::finalize(rs::widen(half::from_bits(0x7e81)), 1).bits == hcanon);
    CHECK(rs::finalize(rs::combine({}, rs::widen(hneg), rs::widen(half(1.0f))), 2).bits == hcanon);
    using rb = red<bfloat16, ops::sum>;
    CHECK(rb::finalize(rb::widen(bnan), 1).bits == bfloat16(std::numeric_limits<float>::quiet_NaN()).bits);
  }
}

TEST_CASE("ops: avg divides the (wrapped) sum by the world size when finalised (edge-cases.md A4)", "[ops]") {
  SECTION("int32: C++ truncation toward zero") {
    using r = red<std::int32_t, ops::avg>;
    const std::int32_t x0[] = {3, 4, 5, -3}, x1[] = {4, 4, 4, 0}, want[] = {3, 4, 4, -1};  // sums 7, 8, 9, -3
    for (int i = 0; i < 4; ++i) {
      const std::int32_t s = r::combine({}, r::widen(x0[i]), r::widen(x1[i]));
      CHECK(s == x0[i] + x1[i]);
      CHECK(r::finalize(s, 2) == want[i]);
    }
    CHECK(r::finalize(-7, 2) == -3);
    CHECK(r::finalize(INT_MIN, 1) == INT_MIN);
    CHECK(r::finalize(r::combine({}, INT_MAX, 1), 2) == INT_MIN / 2);  // the wrapped sum is divided
  }
  SECTION("narrow and unsigned integers divide the wrapped sum") {
    using r8 = red<std::int8_t, ops::avg>;
    using u8 = red<std::uint8_t, ops::avg>;
    CHECK(r8::finalize(r8::combine({}, 100, 100), 2) == -28);  // -56 / 2
    CHECK(u8::finalize(u8::combine({}, 200, 100), 2) == 22);   // 44 / 2
    using u64 = red<std::uint64_t, ops::avg>;
    CHECK(u64::finalize(UINT64_MAX, 3) == UINT64_MAX / 3);
  }
  SECTION("float and double divide in the accumulator type") {
    using r = red<float, ops::avg>;
    const float x0[] = {1, 2, 3, 4}, x1[] = {3, 4, 5, 6}, want[] = {2, 3, 4, 5};
    for (int i = 0; i < 4; ++i) CHECK(r::finalize(r::combine({}, x0[i], x1[i]), 2) == want[i]);
    // n = 3, rank r holds [3(r+1), 1] -> [6, 1]: the divisor is n, not the count
    float a = 3, b = 1;
    for (int k = 1; k < 3; ++k) a = r::combine({}, a, 3.0f * static_cast<float>(k + 1)), b = r::combine({}, b, 1.0f);
    CHECK(r::finalize(a, 3) == 6.0f);
    CHECK(r::finalize(b, 3) == 1.0f);
    using rd = red<double, ops::avg>;
    CHECK(rd::finalize(1.0, 3) == 1.0 / 3.0);
  }
  SECTION("half and bfloat16: sum in fp32, divide, round once") {
    using rh = red<half, ops::avg>;
    // 65504 + 65504 overflows binary16 but not fp32: the average is 65504, not inf.
    CHECK(rh::finalize(rh::combine({}, rh::widen(half(65504.0f)), rh::widen(half(65504.0f))), 2).bits == half(65504.0f).bits);
    using rb = red<bfloat16, ops::avg>;
    float acc = rb::widen(bfloat16(256.0f));
    for (int i = 0; i < 7; ++i) acc = rb::combine({}, acc, rb::widen(bfloat16(1.0f)));
    CHECK(rb::finalize(acc, 8).bits == bfloat16(263.0f / 8.0f).bits);
    CHECK(static_cast<float>(rb::finalize(acc, 8)) == 33.0f);  // 32.875 rounds to 33 (bf16 step 0.25)
  }
  SECTION("non-avg ops do not divide") {
    CHECK(red<int, ops::sum>::finalize(7, 2) == 7);
    CHECK(red<float, ops::max>::finalize(7.0f, 4) == 7.0f);
  }
}

TEST_CASE("ops: bfloat16/half sums accumulate in fp32 and round once (edge-cases.md A3)", "[ops]") {
  using rb = red<bfloat16, ops::sum>;
  float acc = rb::widen(bfloat16(256.0f));
  for (int i = 0; i < 7; ++i) acc = rb::combine({}, acc, rb::widen(bfloat16(1.0f)));
  CHECK(acc == 263.0f);
  CHECK(static_cast<float>(rb::finalize(acc, 8)) == 264.0f);
  // The same chain started anywhere gives 263 exactly before the one rounding.
  for (int start = 0; start < 8; ++start) {
    float a = 0.0f;
    for (int k = 0; k < 8; ++k) a = rb::combine({}, a, rb::widen(bfloat16((start + k) % 8 == 0 ? 256.0f : 1.0f)));
    CHECK(static_cast<float>(rb::finalize(a, 8)) == 264.0f);
  }
  // Element-wise op on narrow floats (no reduction layer): one rounding per call, 256 + 1 -> 256.
  CHECK(static_cast<float>(ops::sum{}(bfloat16(256.0f), bfloat16(1.0f))) == 256.0f);
  // prod widens too: 1.0078125^2 = 1.01568603515625 -> bf16 1.015625
  CHECK(static_cast<float>(ops::prod{}(bfloat16(1.0078125f), bfloat16(1.0078125f))) == 1.015625f);
  using rh = red<half, ops::sum>;
  float h = 0;
  for (int i = 0; i < 4096; ++i) h = rh::combine({}, h, rh::widen(half(1.0f)));
  CHECK(static_cast<float>(rh::finalize(h, 1)) == 4096.0f);  // in fp16 the running sum would stick at 2048
}

TEST_CASE("ops: user ops: commutative_op forwards, reduction keeps T", "[ops]") {
  const auto minus = [](int a, int b) { return a - b; };
  const collx::commutative_op c{minus};
  CHECK(c(7, 3) == 4);
  CHECK(c(3, 7) == -4);  // declaring commutativity changes nothing about what the op computes
  using r = red<S, decltype(plain_lambda)>;
  CHECK(r::finalize(r::combine(plain_lambda, S{2}, S{5}), 3).v == 7);
  using rh = red<half, decltype(collx::commutative_op{[](const half& a, const half&) { return a; }})>;
  static_assert(std::is_same_v<rh::acc, half>);
}

// ---------------------------------------------------------------------------------------------
// detail::store_streaming (large reductions' output): the same values as plain stores, for every
// head alignment, length and element size, in place too, and nothing written outside [0, n).

namespace {
template <std::size_t N>
struct bytes_of {
  std::array<unsigned char, N> b;  // no default member initialiser: trivially copyable, not default-built
  bytes_of(unsigned seed) {
    for (std::size_t k = 0; k < N; ++k) b[k] = static_cast<unsigned char>(seed * 131 + k * 7 + 1);
  }
};

template <std::size_t N>
void check_streaming_for_size() {
  using E = bytes_of<N>;
  for (std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::max<std::size_t>(1, 64 / N) - 1})  // elements
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5}, 64 / N + 1, 1000 / N + 3, 4099 / N + 7}) {
      // A poisoned arena with room on both sides; dst starts `shift` elements after a 64-byte line.
      std::vector<unsigned char> arena((n + 200) * N + 256, 0xA5);
      unsigned char* base = arena.data() + (64 - reinterpret_cast<std::uintptr_t>(arena.data()) % 64) % 64 + 64;
      E* dst = reinterpret_cast<E*>(base + shift * N);
      INFO("element " << N << " bytes, shift " << shift << ", n " << n);
      collx::detail::store_streaming(dst, n, [](std::size_t i) { return E(static_cast<unsigned>(i)); });
      for (std::size_t i = 0; i < n; ++i) REQUIRE(std::memcmp(&dst[i], E(static_cast<unsigned>(i)).b.data(), N) == 0);
      const unsigned char* begin = reinterpret_cast<unsigned char*>(dst);
      for (const unsigned char* p = arena.data(); p < begin; ++p) REQUIRE(*p == 0xA5);
      for (const unsigned char* p = begin + n * N; p < arena.data() + arena.size(); ++p) REQUIRE(*p == 0xA5);
    }
}
}  // namespace

TEST_CASE("store_streaming writes what plain stores write, and only [0, n)", "[streaming]") {
  check_streaming_for_size<1>();
  check_streaming_for_size<4>();
  check_streaming_for_size<8>();
  check_streaming_for_size<16>();
  check_streaming_for_size<64>();
  check_streaming_for_size<12>();   // does not divide a line: plain stores
  check_streaming_for_size<128>();  // larger than a line: plain stores
}

TEST_CASE("store_streaming in place reads each element before its line is written", "[streaming]") {
  std::vector<float> v(1003);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  float* d = v.data() + 1;  // an unaligned head
  collx::detail::store_streaming(d, v.size() - 1, [&](std::size_t i) { return d[i] * 2.0f + 1.0f; });
  CHECK(v[0] == 0.0f);
  for (std::size_t i = 1; i < v.size(); ++i) REQUIRE(v[i] == static_cast<float>(i) * 0.5f * 2.0f + 1.0f);
}
