// collx::half and collx::bfloat16: exact widening, round trips of every encoding, and float -> narrow
// rounding checked against an independent reference (a sorted table of every finite value of the
// format, nearest wins, ties to the even encoding, one step past the largest finite value is inf).
// Also the fp16 arithmetic cases of docs/edge-cases.md A2 (fp32 sum, then one rounding).
#include <catch2/catch.hpp>

#include <collx/detail/reduction.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using collx::bfloat16;
using collx::half;

namespace {

// Conversions are constexpr.
static_assert(half(1.0f).bits == 0x3c00 && half(-2.0f).bits == 0xc000 && half(65504.0f).bits == 0x7bff);
static_assert(half(65520.0f).bits == 0x7c00 && half(5.9604644775390625e-8f).bits == 0x0001);
static_assert(static_cast<float>(half::from_bits(0x3555)) == 0.333251953125f);
static_assert(bfloat16(1.0f).bits == 0x3f80 && static_cast<float>(bfloat16::from_bits(0x4049)) == 3.140625f);
static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<bfloat16>);
static_assert(collx::is_narrow_float_v<half> && collx::is_narrow_float_v<const bfloat16> && !collx::is_narrow_float_v<float>);

std::string hex(std::uint32_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

/// Independent decoding of binary16 (no bit tricks shared with collx): (-1)^s * m * 2^(e-25).
double decode_half(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else v = std::ldexp(static_cast<double>(m + 1024), e - 25);
  return s ? -v : v;
}

/// Independent decoding of bfloat16: (-1)^s * m * 2^(e-134).
double decode_bf16(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
  double v;
  if (e == 255) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -133);
  else v = std::ldexp(static_cast<double>(m + 128), e - 134);
  return s ? -v : v;
}

/// A correctly rounded reference for a 16-bit format: the sorted list of every non-negative finite
/// value (encodings 0 .. max_finite, which are increasing), plus the value one step above the largest
/// (2^(emax+1), encoded as inf) so that "ties to even" at the top sends exactly the midpoint and
/// above to inf.
struct reference {
  std::vector<double> value;
  std::vector<std::uint16_t> bits;
  std::uint16_t inf = 0, sign = 0x8000;

  reference(double (*decode)(std::uint16_t), std::uint16_t max_finite, std::uint16_t inf_bits, double beyond) {
    for (std::uint32_t b = 0; b <= max_finite; ++b) {
      value.push_back(decode(static_cast<std::uint16_t>(b)));
      bits.push_back(static_cast<std::uint16_t>(b));
    }
    REQUIRE(std::is_sorted(value.begin(), value.end()));
    REQUIRE(std::adjacent_find(value.begin(), value.end()) == value.end());
    value.push_back(beyond);
    bits.push_back(inf_bits);
    inf = inf_bits;
  }

  /// x (any double, exact) rounded to nearest, ties to even; NaN -> any NaN (checked by the caller).
  std::uint16_t round(double x) const {
    const std::uint16_t s = std::signbit(x) ? sign : 0;
    const double a = std::fabs(x);
    if (std::isinf(a) || a >= value.back()) return static_cast<std::uint16_t>(s | inf);
    // lo: largest table value <= a
    const auto it = std::upper_bound(value.begin(), value.end(), a);
    const std::size_t lo = static_cast<std::size_t>(it - value.begin()) - 1;
    if (value[lo] == a) return static_cast<std::uint16_t>(s | bits[lo]);
    const double dlo = a - value[lo], dhi = value[lo + 1] - a;  // exact: a and the table are close in scale
    std::size_t pick;
    if (dlo < dhi) pick = lo;
    else if (dhi < dlo) pick = lo + 1;
    else pick = (bits[lo] & 1) == 0 ? lo : lo + 1;
    return static_cast<std::uint16_t>(s | bits[pick]);
  }
};

const reference& half_ref() {
  static const reference r(decode_half, 0x7bff, 0x7c00, 65536.0);
  return r;
}
const reference& bf16_ref() {
  static const reference r(decode_bf16, 0x7f7f, 0x7f80, std::ldexp(1.0, 128));
  return r;
}

bool half_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool bf16_is_nan(std::uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/// Checks that collx rounds float f as the reference does (NaN: a NaN of the same sign).
template <class Narrow>
bool rounds_right(float f, const reference& ref, bool (*is_nan)(std::uint16_t), std::string& why) {
  const std::uint16_t got = Narrow(f).bits;
  if (std::isnan(f)) {
    if (is_nan(got) && (got >> 15) == (std::bit_cast<std::uint32_t>(f) >> 31)) return true;
    why = "NaN " + hex(std::bit_cast<std::uint32_t>(f)) + " -> " + hex(got);
    return false;
  }
  const std::uint16_t want = ref.round(static_cast<double>(f));
  if (got == want) return true;
  std::ostringstream o;
  o.precision(17);
  o << f << " (" << hex(std::bit_cast<std::uint32_t>(f)) << ") -> " << hex(got) << ", expected " << hex(want);
  why = o.str();
  return false;
}

/// Counts failures, reports the first few.
struct failures {
  int n = 0;
  void add(const std::string& why) {
    if (++n <= 5) FAIL_CHECK(why);
  }
};

}  // namespace

TEST_CASE("numeric: the references are right where it is known", "[numeric]") {
  const reference& h = half_ref();
  CHECK(h.round(1.0) == 0x3c00);
  CHECK(h.round(65504.0) == 0x7bff);
  CHECK(h.round(65519.99) == 0x7bff);
  CHECK(h.round(65520.0) == 0x7c00);
  CHECK(h.round(-1e9) == 0xfc00);
  CHECK(h.round(std::ldexp(1.0, -25)) == 0x0000);                          // tie between 0 and 2^-24: even (0)
  CHECK(h.round(std::ldexp(3.0, -25)) == 0x0002);                          // tie between 1 and 2 units: even (2)
  CHECK(h.round(std::ldexp(1.0, -25) + std::ldexp(1.0, -40)) == 0x0001);  // just above the tie
  CHECK(h.round(-0.0) == 0x8000);
  CHECK(h.round(1.0 + std::ldexp(1.0, -11)) == 0x3c00);                    // tie: even
  CHECK(h.round(1.0 + std::ldexp(3.0, -11)) == 0x3c02);
  const reference& b = bf16_ref();
  CHECK(b.round(1.0) == 0x3f80);
  CHECK(b.round(1.0 + std::ldexp(1.0, -8)) == 0x3f80);  // tie: even
  CHECK(b.round(1.0 + std::ldexp(3.0, -8)) == 0x3f82);
  CHECK(b.round(263.0) == 0x4384);  // 264
  CHECK(decode_bf16(0x4384) == 264.0);
  CHECK(b.round(static_cast<double>(std::numeric_limits<float>::max())) == 0x7f80);
}

TEST_CASE("numeric: every half encoding widens exactly and round-trips", "[numeric]") {
  failures f;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const std::uint16_t h = static_cast<std::uint16_t>(b);
    const float w = static_cast<float>(half::from_bits(h));
    const double want = decode_half(h);
    if (half_is_nan(h)) {
      if (!std::isnan(w) || std::signbit(w) != bool(h >> 15)) f.add("NaN " + hex(h) + " widens to a non-NaN or flips sign");
      const std::uint16_t back = half(w).bits;
      if (!half_is_nan(back) || (back & 0x8000) != (h & 0x8000)) f.add("NaN " + hex(h) + " comes back as " + hex(back));
      if ((h & 0x200) && back != h) f.add("quiet NaN " + hex(h) + " comes back as " + hex(back) + " (payload lost)");
      continue;
    }
    if (static_cast<double>(w) != want || std::signbit(w) != bool(h >> 15))
      f.add(hex(h) + " widens to " + std::to_string(w) + ", expected " + std::to_string(want));
    if (half(w).bits != h) f.add(hex(h) + " -> float -> " + hex(half(w).bits));
    if (collx::narrow_float<half>::narrow(collx::narrow_float<half>::widen(half::from_bits(h))).bits != h)
      f.add(hex(h) + ": narrow_float<half> widen/narrow is not the identity");
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: every bfloat16 encoding widens exactly and round-trips", "[numeric]") {
  failures f;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const std::uint16_t h = static_cast<std::uint16_t>(b);
    const float w = static_cast<float>(bfloat16::from_bits(h));
    if (bf16_is_nan(h)) {
      const std::uint16_t back = bfloat16(w).bits;
      if (!std::isnan(w) || !bf16_is_nan(back) || (back & 0x8000) != (h & 0x8000))
        f.add("NaN " + hex(h) + " comes back as " + hex(back));
      if ((h & 0x40) && back != h) f.add("quiet NaN " + hex(h) + " comes back as " + hex(back) + " (payload lost)");
      continue;
    }
    if (static_cast<double>(w) != decode_bf16(h) || std::signbit(w) != bool(h >> 15)) f.add(hex(h) + " widens wrongly");
    if (bfloat16(w).bits != h) f.add(hex(h) + " -> float -> " + hex(bfloat16(w).bits));
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: float -> half rounds correctly at every midpoint and its neighbours", "[numeric]") {
  // Between every pair of adjacent finite halves (and between 65504 and "65536"): the exact
  // midpoint (a float: halves have 11 significant bits) and the floats just below and above it.
  const reference& ref = half_ref();
  failures f;
  std::string why;
  for (std::size_t i = 0; i + 1 < ref.value.size(); ++i) {
    const float mid = static_cast<float>((ref.value[i] + ref.value[i + 1]) / 2);
    REQUIRE(static_cast<double>(mid) == (ref.value[i] + ref.value[i + 1]) / 2);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f), static_cast<float>(ref.value[i])})
      for (float s : {x, -x})
        if (!rounds_right<half>(s, ref, half_is_nan, why)) f.add(why);
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: float -> bfloat16 rounds correctly at every midpoint and its neighbours", "[numeric]") {
  const reference& ref = bf16_ref();
  failures f;
  std::string why;
  for (std::size_t i = 0; i + 1 < ref.value.size(); ++i) {
    const double m = (ref.value[i] + ref.value[i + 1]) / 2;
    if (m > std::numeric_limits<float>::max()) continue;  // above FLT_MAX: no float there
    const float mid = static_cast<float>(m);
    REQUIRE(static_cast<double>(mid) == m);
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, std::numeric_limits<float>::infinity()),
                    static_cast<float>(ref.value[i])})
      for (float s : {x, -x})
        if (!rounds_right<bfloat16>(s, ref, bf16_is_nan, why)) f.add(why);
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: float -> half/bfloat16 on a million random float bit patterns", "[numeric]") {
  std::mt19937 gen(20240611u);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::uniform_int_distribution<int> exp_half(100, 145);  // float exponents around binary16's range
  failures f;
  std::string why;
  for (int i = 0; i < 1000000; ++i) {
    const float any = std::bit_cast<float>(bits(gen));
    if (!rounds_right<half>(any, half_ref(), half_is_nan, why)) f.add(why);
    if (!rounds_right<bfloat16>(any, bf16_ref(), bf16_is_nan, why)) f.add(why);
    // Most random patterns are far outside binary16's range; also draw ones inside it.
    const std::uint32_t near = (bits(gen) & 0x807fffffu) | static_cast<std::uint32_t>(exp_half(gen)) << 23;
    if (!rounds_right<half>(std::bit_cast<float>(near), half_ref(), half_is_nan, why)) f.add(why);
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: fp32 sum of two halves, rounded once, for every finite half against a fixed vector", "[numeric]") {
  // collx adds narrow floats in fp32 and rounds once. Halves have 11-bit significands, so the fp32
  // sum rounded to binary16 equals the exact sum rounded to binary16 (24 >= 2*11 + 2: no double
  // rounding error), which the reference computes in double (exact: spans <= 40 bits).
  const float fixed[] = {0.0f,     -0.0f,       1.0f,         -1.0f,           0.5f,        3.0f,     1000.0f,
                         -2048.0f, 65504.0f,    -65504.0f,    16.0f,           8.0f,        0.1f,     0.2998046875f,
                         0x1p-24f, -0x1p-24f,   0x1p-14f,     0x1p-11f,        3 * 0x1p-11f, 0x1.ffcp-15f, 1.5e-5f,
                         -3.14159f, 12345.0f,   0x1.004p+0f,  -0x1.ffcp+15f};
  const reference& ref = half_ref();
  const collx::ops::sum op;
  using red = collx::detail::reduction<half, collx::ops::sum>;
  static_assert(std::is_same_v<red::acc, float>);
  failures f;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const half a = half::from_bits(static_cast<std::uint16_t>(b));
    if ((b & 0x7c00) == 0x7c00) continue;  // inf/NaN
    for (float fb : fixed) {
      const half x(fb);  // the operand as a half (0.1 -> fp16(0.1))
      const double exact = decode_half(a.bits) + decode_half(x.bits);
      std::uint16_t want = ref.round(exact);
      if (exact == 0) want = (std::signbit(decode_half(a.bits)) && std::signbit(decode_half(x.bits))) ? 0x8000 : 0;
      const half got = op(a, x);
      const half via_red = red::finalize(red::combine(op, red::widen(a), red::widen(x)), 2);
      if (got.bits != want || via_red.bits != want)
        f.add(hex(a.bits) + " + " + hex(x.bits) + " = " + hex(got.bits) + " / " + hex(via_red.bits) + ", expected " +
              hex(want));
    }
  }
  CHECK(f.n == 0);
}

TEST_CASE("numeric: fp16 sum edge cases (edge-cases.md A2)", "[numeric]") {
  // Expected values: the fp32 sum, rounded once to binary16.
  struct pair_case {
    float a, b, want;
    const char* what;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float fp16_01 = static_cast<float>(half(0.1f)), fp16_02 = static_cast<float>(half(0.2f));
  const pair_case cases[] = {
      {65504.0f, 65504.0f, inf, "65504 + 65504 -> inf"},
      {65504.0f, 16.0f, inf, "65504 + 16 = 65520: the midpoint to 65536, ties to even -> inf"},
      {65504.0f, 8.0f, 65504.0f, "65504 + 8 -> 65504"},
      {-65504.0f, 65504.0f, 0.0f, "-65504 + 65504 -> +0"},
      {1.0f, 0x1p-11f, 1.0f, "1 + 2^-11: tie, even -> 1"},
      {1.0f, 3 * 0x1p-11f, 1.001953125f, "1 + 3*2^-11: tie, even -> 1 + 2^-9"},
      {0x1p-24f, 0x1p-24f, 0x1p-23f, "2^-24 + 2^-24 -> 2^-23 (subnormals)"},
      {2048.0f, 1.0f, 2048.0f, "2048 + 1: tie, even -> 2048"},
      {fp16_01, fp16_02, 0.2998046875f, "fp16(0.1) + fp16(0.2) -> 0.2998046875"},
  };
  CHECK(fp16_01 == 0.0999755859375f);
  CHECK(fp16_02 == 0.199951171875f);
  const collx::ops::sum op;
  for (const pair_case& c : cases) {
    INFO(c.what);
    REQUIRE(half(c.a).bits == half_ref().round(c.a));  // the operands are halves
    REQUIRE(static_cast<float>(half(c.a)) == c.a);
    REQUIRE(static_cast<float>(half(c.b)) == c.b);
    for (bool swap : {false, true}) {
      const half x(swap ? c.b : c.a), y(swap ? c.a : c.b);
      const half got = op(x, y);
      CHECK(got.bits == half(c.want).bits);
      CHECK(static_cast<float>(got) == c.want);
      CHECK(got.bits == half_ref().round(static_cast<double>(c.a) + static_cast<double>(c.b)));
      CHECK_FALSE(std::signbit(static_cast<float>(got)));
    }
  }
}

TEST_CASE("numeric: bfloat16 sum accumulates in fp32 and rounds once (edge-cases.md A3)", "[numeric]") {
  using red = collx::detail::reduction<bfloat16, collx::ops::sum>;
  const collx::ops::sum op;
  float acc = red::widen(bfloat16(256.0f));
  for (int i = 0; i < 7; ++i) acc = red::combine(op, acc, red::widen(bfloat16(1.0f)));
  CHECK(acc == 263.0f);
  CHECK(red::finalize(acc, 8).bits == bfloat16(264.0f).bits);
  // Rounding each partial sum would give 256 (256 + 1 = 257 -> 256, a tie to even, seven times).
  bfloat16 narrow(256.0f);
  for (int i = 0; i < 7; ++i) narrow = op(narrow, bfloat16(1.0f));
  CHECK(static_cast<float>(narrow) == 256.0f);
}
