// Test helpers shared by test_collectives.cpp, test_edge_cases.cpp and test_errors.cpp:
//  - an independent sequential reference for every collective's result (it never calls collx's
//    detail::reduction or collx::ops: folds, rounding, NaN policy and integer wrap are written here),
//  - deterministic per-rank, per-index input generators for every element type,
//  - a poison helper (outputs are filled with a sentinel pattern before a call),
//  - element comparison and printing, a run-time algorithm switch, and a rank runner.
//
// Reference semantics (what collx documents in ops.hpp and algo/*.hpp):
//  - a reduction folds rank 0, 1, ..., n-1 left to right: op(...op(op(x0, x1), x2)..., x_{n-1})
//    (algo::direct); algo::tree brackets the same rank order binomially (fold_tree);
//  - fp16/bf16 under built-in ops accumulate in fp32 and are rounded once, to nearest even, at the
//    end (rounding implemented here from the IEEE definition, not with collx's converters);
//  - integer sum/prod wrap (computed in unsigned arithmetic), avg divides the wrapped sum by n with
//    C++ truncation; floats divide in the accumulator type;
//  - floating min/max: a NaN operand gives the canonical quiet NaN, -0 orders below +0.
#pragma once

#include <collx/collx.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace ref {

using std::size_t;

// =============================================================================================
// Custom element types and ops used by the tests

/// (value, index) with a 2-byte hole after v (bytes 2-3): min-loc / max-loc element.
struct loc16 {
  std::int16_t v;
  std::int32_t idx;
  friend bool operator==(const loc16& a, const loc16& b) { return a.v == b.v && a.idx == b.idx; }
};
static_assert(sizeof(loc16) == 8 && offsetof(loc16, idx) == 4);

/// (value, index) with 4 tail padding bytes.
struct loc64 {
  double v;
  std::int32_t idx;
  friend bool operator==(const loc64& a, const loc64& b) {
    return std::bit_cast<std::uint64_t>(a.v) == std::bit_cast<std::uint64_t>(b.v) && a.idx == b.idx;
  }
};
static_assert(sizeof(loc64) == 16);

/// Builds a loc with its padding bytes set to 0xAB (so padding is never all zeros by accident).
template <class L>
L make_loc(double v, std::int32_t idx) {
  L l;
  std::memset(static_cast<void*>(&l), 0xAB, sizeof l);
  l.v = static_cast<decltype(l.v)>(v);
  l.idx = idx;
  return l;
}

/// Smaller v wins; ties go to the smaller idx. Commutative (a total order).
struct min_loc {
  static constexpr bool commutative = true;
  static constexpr const char* name = "min_loc";
  template <class L>
  L operator()(const L& a, const L& b) const {
    if (a.v < b.v) return a;
    if (b.v < a.v) return b;
    return a.idx <= b.idx ? a : b;
  }
};

/// Larger v wins; ties go to the smaller idx. Commutative.
struct max_loc {
  static constexpr bool commutative = true;
  static constexpr const char* name = "max_loc";
  template <class L>
  L operator()(const L& a, const L& b) const {
    if (a.v > b.v) return a;
    if (b.v > a.v) return b;
    return a.idx <= b.idx ? a : b;
  }
};

/// An over-aligned element (alignas(A), as an AVX vector of A bytes): A / 8 doubles.
template <std::size_t A>
struct alignas(A) over_aligned {
  double v[A / 8];
  friend bool operator==(const over_aligned& a, const over_aligned& b) {
    for (std::size_t i = 0; i < A / 8; ++i)
      if (a.v[i] != b.v[i]) return false;
    return true;
  }
};

/// Operands handed to add_aligned at an address off their alignment (process-wide count): aligned
/// vector loads of such an operand fault (SIGSEGV), so collx must never pass one.
inline std::atomic<long> misaligned_operands{0};

/// Element-wise sum of over_aligned values that counts operands it gets misaligned.
struct add_aligned {
  static constexpr bool commutative = true;
  static constexpr const char* name = "add_aligned";
  template <class V>
  V operator()(const V& a, const V& b) const {
    for (const V* p : {&a, &b}) {
      std::uintptr_t addr = reinterpret_cast<std::uintptr_t>(p);
      asm volatile("" : "+r"(addr));  // the compiler may assume a V* aligned and drop the test otherwise
      if (addr % alignof(V) != 0) misaligned_operands.fetch_add(1, std::memory_order_relaxed);
    }
    V out;
    for (std::size_t i = 0; i < std::size(a.v); ++i) out.v[i] = a.v[i] + b.v[i];
    return out;
  }
};

/// allreduce, reduce_scatter and reduce of over_aligned<A> with add_aligned on `c`, Algo, at counts
/// 1 to 100 (rank r element i part k = 1000 r + 10 i + k, exact in double): the number of wrong
/// elements. Operands passed misaligned add to misaligned_operands (the caller resets and reads it).
template <std::size_t A, class Algo = collx::algo::automatic>
long over_aligned_errors(collx::communicator& c) {
  using V = over_aligned<A>;
  const int n = c.size();
  const auto value = [](int r, std::size_t i) {
    V v;
    for (std::size_t k = 0; k < A / 8; ++k) v.v[k] = 1000.0 * r + 10.0 * static_cast<double>(i) + static_cast<double>(k);
    return v;
  };
  const auto sum = [&](std::size_t i) {
    V v;
    for (std::size_t k = 0; k < A / 8; ++k)
      v.v[k] = 1000.0 * n * (n - 1) / 2 + n * (10.0 * static_cast<double>(i) + static_cast<double>(k));
    return v;
  };
  long wrong = 0;
  for (std::size_t count : {1, 2, 3, 5, 17, 100}) {
    std::vector<V> in(count * static_cast<std::size_t>(n)), out(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i);
    collx::allreduce<Algo>(c, std::span<const V>(in), std::span<V>(out), add_aligned{});
    for (std::size_t i = 0; i < in.size(); ++i) wrong += !(out[i] == sum(i));
    std::vector<V> block(count);
    collx::reduce_scatter<Algo>(c, std::span<const V>(in), std::span<V>(block), add_aligned{});
    for (std::size_t i = 0; i < count; ++i) wrong += !(block[i] == sum(static_cast<std::size_t>(c.rank()) * count + i));
    collx::reduce<Algo>(c, std::span<const V>(in), std::span<V>(out), n - 1, add_aligned{});
    if (c.rank() == n - 1)
      for (std::size_t i = 0; i < in.size(); ++i) wrong += !(out[i] == sum(i));
  }
  return wrong;
}

/// Running statistics (Chan et al. parallel Welford): count, mean, sum of squared deviations.
struct welford {
  double count, mean, m2;
  friend bool operator==(const welford& a, const welford& b) {
    return std::memcmp(&a, &b, sizeof a) == 0;  // bitwise: no padding in three doubles
  }
};
/// Merges two partial statistics. Mathematically commutative, but not bit for bit, and not
/// declared commutative: collx must combine it in rank order (never ring).
struct welford_merge {
  static constexpr const char* name = "welford_merge";
  welford operator()(const welford& a, const welford& b) const {
    const double n = a.count + b.count;
    if (n == 0) return {0, 0, 0};
    const double d = b.mean - a.mean;
    return {n, a.mean + d * (b.count / n), a.m2 + b.m2 + d * d * (a.count * b.count / n)};
  }
};

/// 2x2 matrix of integers modulo 2^32, row major [a b; c d].
struct mat2 {
  std::uint32_t a, b, c, d;
  friend bool operator==(const mat2&, const mat2&) = default;
};
/// Matrix product: associative (exactly, modulo 2^32) and NOT commutative.
struct mat_mul {
  static constexpr const char* name = "mat_mul";
  mat2 operator()(const mat2& x, const mat2& y) const {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
};

// =============================================================================================
// Narrow floats, from the IEEE definitions (independent of collx/numeric.hpp's converters)

template <class T>
inline constexpr bool is_half = std::is_same_v<T, collx::half>;
template <class T>
inline constexpr bool is_bf16 = std::is_same_v<T, collx::bfloat16>;
template <class T>
inline constexpr bool is_narrow = is_half<T> || is_bf16<T>;
template <class T>
inline constexpr bool is_float = std::is_floating_point_v<T>;
template <class T>
inline constexpr bool is_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;

/// Format of a narrow float: precision p (bits, with the hidden one), exponent range, field widths.
struct narrow_format {
  int p, emin, emax, mant_bits, bias;
};
inline constexpr narrow_format half_format{11, -14, 15, 10, 15};
inline constexpr narrow_format bf16_format{8, -126, 127, 7, 127};

/// Exact value of an encoding (NaN for NaN encodings).
inline double decode(std::uint16_t bits, const narrow_format& f) {
  const bool neg = bits & 0x8000u;
  const int exp_field = (bits >> f.mant_bits) & ((1 << (15 - f.mant_bits)) - 1);
  const int exp_max = (1 << (15 - f.mant_bits)) - 1;
  const std::uint32_t mant = bits & ((1u << f.mant_bits) - 1u);
  double v;
  if (exp_field == exp_max) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp_field == 0) v = std::ldexp(static_cast<double>(mant), f.emin - f.mant_bits);
  else v = std::ldexp(static_cast<double>(mant | (1u << f.mant_bits)), exp_field - f.bias - f.mant_bits);
  return neg ? -v : v;
}

/// x rounded to the format, to nearest, ties to even; |x| past the largest finite value by half an
/// ulp or more becomes inf; NaN becomes the canonical quiet NaN (0x7e00 / 0x7fc0).
inline std::uint16_t round_to(double x, const narrow_format& f) {
  const int exp_max = (1 << (15 - f.mant_bits)) - 1;
  if (std::isnan(x)) return static_cast<std::uint16_t>((exp_max << f.mant_bits) | (1u << (f.mant_bits - 1)));
  const std::uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double ax = std::fabs(x);
  const std::uint16_t inf = static_cast<std::uint16_t>(sign | (exp_max << f.mant_bits));
  if (std::isinf(ax)) return inf;
  if (ax == 0) return sign;
  const int e = std::max(std::ilogb(ax), f.emin);             // binade (or the subnormal range)
  const double quantum = std::ldexp(1.0, e - (f.p - 1));      // ulp there
  const double r = std::nearbyint(ax / quantum) * quantum;    // default mode: to nearest, ties even
  if (r >= std::ldexp(1.0, f.emax + 1)) return inf;
  if (r == 0) return sign;
  const int re = std::ilogb(r);
  if (re < f.emin)  // subnormal
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::ldexp(r, f.mant_bits - f.emin)));
  const std::uint32_t m = static_cast<std::uint32_t>(std::ldexp(r, f.mant_bits - re)) - (1u << f.mant_bits);
  return static_cast<std::uint16_t>(sign | ((re + f.bias) << f.mant_bits) | m);
}

template <class T>
constexpr const narrow_format& format_of() {
  if constexpr (is_half<T>) return half_format;
  else return bf16_format;
}
/// Exact value of a narrow float.
template <class T>
double to_double(T x) {
  return decode(x.bits, format_of<T>());
}
/// The narrow float nearest to x (ties to even).
template <class T>
T round_narrow(double x) {
  return T::from_bits(round_to(x, format_of<T>()));
}

// =============================================================================================
// Reference reduction

enum class op_kind { sum, prod, min, max, avg, band, bor, bxor, custom };

template <class Op>
constexpr op_kind kind_of() {
  namespace o = collx::ops;
  if constexpr (std::is_same_v<Op, o::sum>) return op_kind::sum;
  else if constexpr (std::is_same_v<Op, o::prod>) return op_kind::prod;
  else if constexpr (std::is_same_v<Op, o::min>) return op_kind::min;
  else if constexpr (std::is_same_v<Op, o::max>) return op_kind::max;
  else if constexpr (std::is_same_v<Op, o::avg>) return op_kind::avg;
  else if constexpr (std::is_same_v<Op, o::band>) return op_kind::band;
  else if constexpr (std::is_same_v<Op, o::bor>) return op_kind::bor;
  else if constexpr (std::is_same_v<Op, o::bxor>) return op_kind::bxor;
  else return op_kind::custom;
}

template <class Op>
constexpr const char* op_name() {
  switch (kind_of<Op>()) {
    case op_kind::sum: return "sum";
    case op_kind::prod: return "prod";
    case op_kind::min: return "min";
    case op_kind::max: return "max";
    case op_kind::avg: return "avg";
    case op_kind::band: return "band";
    case op_kind::bor: return "bor";
    case op_kind::bxor: return "bxor";
    case op_kind::custom: break;
  }
  if constexpr (requires { Op::name; }) return Op::name;
  else return "custom";
}

template <class Op>
inline constexpr bool builtin_arith = kind_of<Op>() == op_kind::sum || kind_of<Op>() == op_kind::prod ||
                                      kind_of<Op>() == op_kind::min || kind_of<Op>() == op_kind::max ||
                                      kind_of<Op>() == op_kind::avg;

/// The reference accumulator: fp32 for narrow floats under built-in arithmetic ops, else T.
template <class T, class Op>
using acc_t = std::conditional_t<is_narrow<T> && builtin_arith<Op>, float, T>;

template <class F>
F float_min(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a < b) return a;
  if (b < a) return b;
  return std::signbit(a) ? a : b;  // equal: -0 below +0
}
template <class F>
F float_max(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a > b) return a;
  if (b > a) return b;
  return std::signbit(a) ? b : a;
}

template <class T, class Op>
acc_t<T, Op> widen(const T& x) {
  if constexpr (std::is_same_v<acc_t<T, Op>, float> && is_narrow<T>) return static_cast<float>(to_double(x));
  else return x;
}

template <class T, class Op>
acc_t<T, Op> combine(const Op& op, const acc_t<T, Op>& a, const acc_t<T, Op>& b) {
  using A = acc_t<T, Op>;
  constexpr op_kind k = kind_of<Op>();
  if constexpr (k == op_kind::custom) {
    return static_cast<A>(op(a, b));
  } else if constexpr (is_int<A>) {
    using U = std::make_unsigned_t<A>;
    const std::uint64_t x = static_cast<U>(a), y = static_cast<U>(b);
    if constexpr (k == op_kind::sum || k == op_kind::avg) return static_cast<A>(static_cast<U>(x + y));
    else if constexpr (k == op_kind::prod) return static_cast<A>(static_cast<U>(x * y));
    else if constexpr (k == op_kind::min) return a < b ? a : b;
    else if constexpr (k == op_kind::max) return a < b ? b : a;
    else if constexpr (k == op_kind::band) return static_cast<A>(x & y);
    else if constexpr (k == op_kind::bor) return static_cast<A>(x | y);
    else return static_cast<A>(x ^ y);
  } else {
    static_assert(is_float<A>, "built-in op on a type it does not take");
    if constexpr (k == op_kind::sum || k == op_kind::avg) return a + b;
    else if constexpr (k == op_kind::prod) return a * b;
    else if constexpr (k == op_kind::min) return float_min(a, b);
    else return float_max(a, b);
  }
}

template <class T, class Op>
T finalize(acc_t<T, Op> v, int n) {
  using A = acc_t<T, Op>;
  if constexpr (kind_of<Op>() == op_kind::avg) {
    if constexpr (is_int<A> && std::is_signed_v<A>) v = static_cast<A>(static_cast<long long>(v) / n);  // truncation
    else if constexpr (is_int<A>) v = static_cast<A>(static_cast<unsigned long long>(v) / static_cast<unsigned>(n));
    else v = v / static_cast<A>(n);
  }
  if constexpr (is_narrow<T> && std::is_same_v<A, float>) return round_narrow<T>(static_cast<double>(v));
  else return v;
}

/// Left-to-right rank-order fold of get(0..n-1): algo::direct's order.
template <class T, class Op, class Get>
T fold_left(int n, Get get, const Op& op = {}) {
  acc_t<T, Op> a = widen<T, Op>(get(0));
  for (int r = 1; r < n; ++r) a = combine<T, Op>(op, a, widen<T, Op>(get(r)));
  return finalize<T, Op>(a, n);
}

/// Binomial rank-order fold (algo::tree, see algo/tree.hpp): in round `mask` the partial of ranks
/// [r, r + mask) absorbs the partial of [r + mask, r + 2 mask) on its right.
template <class T, class Op, class Get>
T fold_tree(int n, Get get, const Op& op = {}) {
  std::vector<acc_t<T, Op>> a;
  a.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) a.push_back(widen<T, Op>(get(r)));
  for (int mask = 1; mask < n; mask <<= 1)
    for (int r = 0; r + mask < n; r += 2 * mask)
      a[static_cast<size_t>(r)] = combine<T, Op>(op, a[static_cast<size_t>(r)], a[static_cast<size_t>(r + mask)]);
  return finalize<T, Op>(a[0], n);
}

/// True where the result depends on the order in which operands meet (floating sum/prod/avg,
/// Welford): there ring is compared within a tolerance, tree and direct with their own order.
template <class T, class Op>
inline constexpr bool order_sensitive =
    (is_float<T> && (kind_of<Op>() == op_kind::sum || kind_of<Op>() == op_kind::prod ||
                     kind_of<Op>() == op_kind::avg)) ||
    std::is_same_v<T, welford>;

// =============================================================================================
// Element comparison and printing

/// Bitwise equality for types without padding (floats included: -0 != +0, a NaN equals its own
/// bits); field-wise (operator==) for structs with padding, whose padding bytes are unspecified.
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T> || std::has_unique_object_representations_v<T>)
    return std::memcmp(&a, &b, sizeof(T)) == 0;
  else
    return a == b;
}

template <class T>
std::string show(const T& x) {
  char buf[160];
  if constexpr (is_int<T>) {
    if constexpr (std::is_signed_v<T>) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x));
    else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(x));
  } else if constexpr (std::is_same_v<T, float>) {
    std::snprintf(buf, sizeof buf, "%.9g (0x%08x)", static_cast<double>(x), std::bit_cast<std::uint32_t>(x));
  } else if constexpr (std::is_same_v<T, double>) {
    std::snprintf(buf, sizeof buf, "%.17g (0x%016llx)", x,
                  static_cast<unsigned long long>(std::bit_cast<std::uint64_t>(x)));
  } else if constexpr (is_narrow<T>) {
    std::snprintf(buf, sizeof buf, "%.9g (0x%04x)", to_double(x), static_cast<unsigned>(x.bits));
  } else if constexpr (std::is_same_v<T, loc16> || std::is_same_v<T, loc64>) {
    std::snprintf(buf, sizeof buf, "(%.17g, %d)", static_cast<double>(x.v), static_cast<int>(x.idx));
  } else if constexpr (std::is_same_v<T, welford>) {
    std::snprintf(buf, sizeof buf, "{n %.17g, mean %.17g, m2 %.17g}", x.count, x.mean, x.m2);
  } else if constexpr (std::is_same_v<T, mat2>) {
    std::snprintf(buf, sizeof buf, "[%u %u; %u %u]", x.a, x.b, x.c, x.d);
  } else {
    std::snprintf(buf, sizeof buf, "<%zu bytes>", sizeof(T));
  }
  return buf;
}

/// Short type names for messages.
template <class T>
std::string type_label() {
  if constexpr (std::is_same_v<T, loc16>) return "loc16";
  else if constexpr (std::is_same_v<T, loc64>) return "loc64";
  else if constexpr (std::is_same_v<T, welford>) return "welford";
  else if constexpr (std::is_same_v<T, mat2>) return "mat2";
  else return std::string(collx::detail::type_name<T>());
}

/// Index of the first element where got and want differ (same()), or npos.
template <class T>
size_t first_difference(std::span<const T> got, std::span<const T> want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!same(got[i], want[i])) return i;
  return static_cast<size_t>(-1);
}
inline constexpr size_t npos = static_cast<size_t>(-1);

/// Byte-wise equality of two buffers (what "untouched" means).
template <class T>
bool bytes_equal(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// =============================================================================================
// Input generators: deterministic, distinct per (rank, index, salt)

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline std::uint64_t hash(int rank, size_t i, std::uint64_t salt) {
  return mix(mix(salt * 0x632be59bd9b4e019ull + static_cast<std::uint64_t>(rank)) ^ (static_cast<std::uint64_t>(i) * 0xd6e8feb86659fd93ull));
}

/// What kind of values a test wants.
enum class flavor {
  general,  ///< ints: any bit pattern; floats: random full mantissa, magnitudes 2^-3 .. 2^7, both signs
  exact,    ///< floats: small dyadic values (m * 2^e, |m| < 256, |e| <= 4) whose sums stay exact in fp32
  prod,     ///< ints: odd values; floats: +-1 mostly, sometimes +-2 or +-0.5 (products stay exact)
  near_one, ///< floats: random mantissa in [0.5, 2) (for inexact products); ints: as prod
  special,  ///< like general, plus NaN, +-0, +-inf and ties (for min/max)
  dense,    ///< ints: about 7 of 8 bits set (for band)
  tiny,     ///< narrow floats: m * 2^e around the subnormal range (sums and averages round there)
  tiny_prod,///< narrow floats: +-(1 + k/8) 2^e such that products of 3 land in the subnormal range
};

template <class T>
T gen(int rank, size_t i, flavor f, std::uint64_t salt = 1) {
  const std::uint64_t h = hash(rank, i, salt), h2 = mix(h);
  if constexpr (is_int<T>) {
    using U = std::make_unsigned_t<T>;
    std::uint64_t v = h;
    if (f == flavor::prod || f == flavor::near_one) v |= 1u;
    if (f == flavor::dense) v = h | h2 | mix(h2);
    if (f == flavor::special && h2 % 4 == 0) v = (h2 >> 8) % 3;  // ties and small values
    return static_cast<T>(static_cast<U>(v));
  } else if constexpr (is_float<T> || is_narrow<T>) {
    using F = std::conditional_t<is_float<T>, T, float>;
    auto make = [](double d) -> T {
      if constexpr (is_float<T>) return static_cast<T>(d);
      else return round_narrow<T>(d);
    };
    const double sign = (h2 & 1) ? -1.0 : 1.0;
    if (f == flavor::special) {
      switch (h2 % 11) {
        case 0:
          if constexpr (is_narrow<T>) return round_narrow<T>(std::numeric_limits<double>::quiet_NaN());
          else return std::numeric_limits<T>::quiet_NaN();
        case 1: return make(0.0);
        case 2: return make(-0.0);
        case 3: return make(sign * std::numeric_limits<double>::infinity());
        case 4: return make(sign * static_cast<double>((h >> 5) % 3));  // ties
        default: break;
      }
    }
    if constexpr (is_narrow<T>) {
      const int emin = format_of<T>().emin;  // smallest normal exponent: -14 / -126
      if (f == flavor::tiny) {
        const double m = static_cast<double>(static_cast<int>(h % 511) - 255);
        return make(std::ldexp(m, emin - 18 + static_cast<int>((h >> 12) % 15)));
      }
      if (f == flavor::tiny_prod) {
        const double m = 1.0 + static_cast<double>((h >> 3) % 8) / 8.0;
        return make(sign * std::ldexp(m, emin / 3 - 5 + static_cast<int>((h >> 12) % 5)));
      }
    }
    if (f == flavor::exact || (is_narrow<T> && f != flavor::near_one && f != flavor::prod)) {
      const double m = static_cast<double>(static_cast<int>(h % 511) - 255);
      const int e = static_cast<int>((h >> 12) % 9) - 4;
      return make(std::ldexp(m, e));
    }
    if (f == flavor::prod) {
      const int k = static_cast<int>((h >> 3) % 8);
      return make(sign * (k == 0 ? 2.0 : k == 1 ? 0.5 : 1.0));
    }
    const int mant_bits = is_float<T> ? std::numeric_limits<F>::digits - 1 : 7;
    const double u = static_cast<double>(h >> (64 - mant_bits)) / std::ldexp(1.0, mant_bits);  // [0, 1)
    if (f == flavor::near_one) return make(std::ldexp(1.0 + u, (h2 >> 1) & 1 ? -1 : 0));
    return make(sign * std::ldexp(1.0 + u, static_cast<int>((h2 >> 1) % 11) - 3));
  } else if constexpr (std::is_same_v<T, loc16>) {
    return make_loc<loc16>(static_cast<double>(static_cast<int>(h % 7) - 3), static_cast<std::int32_t>(h2 % 100000));
  } else if constexpr (std::is_same_v<T, loc64>) {
    return make_loc<loc64>(static_cast<double>(static_cast<int>(h % 7) - 3) * 0.25, static_cast<std::int32_t>(h2 % 100000));
  } else if constexpr (std::is_same_v<T, welford>) {
    const double cnt = static_cast<double>(1 + h % 9);
    const double mean = std::ldexp(static_cast<double>(h2 >> 11), -53) * 100.0 - 50.0;
    const double m2 = std::ldexp(static_cast<double>(mix(h2) >> 11), -53) * 10.0 * (cnt - 1);
    return {cnt, mean, m2};
  } else if constexpr (std::is_same_v<T, mat2>) {
    return {static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32), static_cast<std::uint32_t>(h2),
            static_cast<std::uint32_t>(h2 >> 32)};
  } else {
    static_assert(sizeof(T) == 0, "no generator for this type");
  }
}

/// The values a test uses by default for (T, Op).
template <class T, class Op>
constexpr flavor default_flavor() {
  constexpr op_kind k = kind_of<Op>();
  if constexpr (is_int<T>) {
    if (k == op_kind::prod) return flavor::prod;
    if (k == op_kind::band) return flavor::dense;
    if (k == op_kind::min || k == op_kind::max) return flavor::special;
    return flavor::general;
  } else if constexpr (is_float<T> || is_narrow<T>) {
    if (k == op_kind::prod) return is_narrow<T> ? flavor::prod : flavor::near_one;
    if (k == op_kind::min || k == op_kind::max) return flavor::special;
    return is_narrow<T> ? flavor::exact : flavor::general;
  } else {
    return flavor::general;
  }
}

template <class T>
std::vector<T> gen_vec(int rank, size_t count, flavor f, std::uint64_t salt = 1) {
  std::vector<T> v;
  v.reserve(count);
  for (size_t i = 0; i < count; ++i) v.push_back(gen<T>(rank, i, f, salt));
  return v;
}

/// One vector per rank.
template <class T>
std::vector<std::vector<T>> gen_ranks(int n, size_t count, flavor f, std::uint64_t salt = 1) {
  std::vector<std::vector<T>> v;
  for (int r = 0; r < n; ++r) v.push_back(gen_vec<T>(r, count, f, salt));
  return v;
}

// =============================================================================================
// Poison: outputs are filled with a sentinel pattern before each call

/// 0xFF bytes (a NaN with a full payload) for floating types, 0xA5 bytes otherwise.
template <class T>
constexpr unsigned char poison_byte() {
  return (is_float<T> || is_narrow<T>) ? 0xFF : 0xA5;
}
template <class T>
void poison(std::span<T> s) {
  if (!s.empty()) std::memset(static_cast<void*>(s.data()), poison_byte<T>(), s.size_bytes());
}
template <class T>
std::vector<T> poisoned(size_t count) {
  std::vector<T> v(count);
  poison(std::span<T>(v));
  return v;
}
/// True if every byte of x still holds the poison pattern.
template <class T>
bool is_poison(const T& x) {
  const auto* p = reinterpret_cast<const unsigned char*>(&x);
  return std::all_of(p, p + sizeof(T), [](unsigned char c) { return c == poison_byte<T>(); });
}

// =============================================================================================
// Tolerance check for order-sensitive floating results (ring)

/// |got - exact| <= 2 n eps sum|x| (sum/avg: the classic bound (n-1) u sum|x|, with margin), or a
/// relative 2 n eps for prod; exact computed in long double.
template <class T, class Op, class Get>
bool within_tolerance(const T& got, int n, Get get) {
  constexpr op_kind k = kind_of<Op>();
  long double exact = k == op_kind::prod ? 1.0L : 0.0L, mag = 0.0L;
  for (int r = 0; r < n; ++r) {
    const long double x = static_cast<long double>(get(r));
    if (k == op_kind::prod) exact *= x;
    else exact += x, mag += std::fabs(x);
  }
  if (k == op_kind::avg) exact /= n, mag /= n;
  if (k == op_kind::prod) mag = std::fabs(exact);
  const long double eps = std::numeric_limits<T>::epsilon();
  const long double tol = 2.0L * n * eps * mag + std::numeric_limits<T>::denorm_min();
  const long double g = static_cast<long double>(got);
  if (std::isnan(g) || std::isnan(exact)) return std::isnan(g) && std::isnan(exact);
  if (std::isinf(exact) || std::isinf(g)) return g == exact;
  return std::fabs(g - exact) <= tol;
}

/// Checks one reduced element against the reference for the algorithm that produced it:
/// exact types/ops and direct/tree are compared bit for bit with their fold; ring within tolerance.
/// Returns "" when it matches, else a description.
template <class T, class Op, class Get>
std::string check_reduced(const T& got, collx::algorithm alg, int n, Get get, const Op& op = {}) {
  T want{};
  if constexpr (order_sensitive<T, Op>) {
    if (n > 1 && alg == collx::algorithm::ring) {
      if constexpr (is_float<T>) {
        if (within_tolerance<T, Op>(got, n, get)) return {};
        return "got " + show(got) + ", not within tolerance of the exact " + show(fold_left<T, Op>(n, get, op));
      } else {
        return "ring is not allowed for a non-commutative op";
      }
    }
    want = alg == collx::algorithm::tree ? fold_tree<T, Op>(n, get, op) : fold_left<T, Op>(n, get, op);
  } else {
    want = fold_left<T, Op>(n, get, op);
  }
  if (same(got, want)) return {};
  return "got " + show(got) + ", want " + show(want);
}

/// get(q) = in[q][index]: the operands of one reduced element (a concrete type, so that the folds
/// are instantiated once per (T, Op)).
template <class T>
struct column {
  const std::vector<std::vector<T>>* in;
  size_t index;
  const T& operator()(int q) const { return (*in)[static_cast<size_t>(q)][index]; }
};

/// Checks got[0, count) of one rank against the reduction of in[*][offset, offset + count): the first
/// mismatch as a message, or "".
template <class T, class Op>
std::string check_reduced_range(const T* got, size_t count, const std::vector<std::vector<T>>& in, size_t offset,
                                collx::algorithm alg, const Op& op = {}) {
  const int n = static_cast<int>(in.size());
  for (size_t j = 0; j < count; ++j) {
    std::string why = check_reduced<T, Op>(got[j], alg, n, column<T>{&in, offset + j}, op);
    if (!why.empty()) return "element " + std::to_string(j) + " (algorithm " + std::string(collx::algorithm_name(alg)) + "): " + why;
  }
  return {};
}

// =============================================================================================
// Running ranks; run-time algorithm choice

/// Options for tests: a 60 s timeout (a hang fails instead of waiting 300 s) unless COLLX_TIMEOUT
/// says otherwise. The checks ask the communicator which algorithm algo::automatic ran (resolved()),
/// so they hold whatever the environment selects.
inline collx::communicator_options test_options() {
  collx::communicator_options o;
  if (!std::getenv("COLLX_TIMEOUT")) o.timeout = std::chrono::seconds(60);
  return o;
}

/// Runs fn(communicator&) on n thread ranks (collx::run_threads) with test_options() by default.
/// (Type-erased, so run_threads is instantiated once per test file.)
inline void run_ranks(int n, const std::function<void(collx::communicator&)>& fn,
                      const collx::communicator_options& o = test_options()) {
  collx::run_threads(n, fn, o);
}

/// The algorithm tags, as run-time values.
enum class algo_id { ring, tree, direct, automatic };
inline constexpr algo_id all_algos[] = {algo_id::ring, algo_id::tree, algo_id::direct, algo_id::automatic};

inline const char* algo_label(algo_id a) {
  switch (a) {
    case algo_id::ring: return "ring";
    case algo_id::tree: return "tree";
    case algo_id::direct: return "direct";
    case algo_id::automatic: return "automatic";
  }
  return "?";
}

template <class Algo>
constexpr algo_id id_of() {
  if constexpr (std::is_same_v<Algo, collx::algo::ring>) return algo_id::ring;
  else if constexpr (std::is_same_v<Algo, collx::algo::tree>) return algo_id::tree;
  else if constexpr (std::is_same_v<Algo, collx::algo::direct>) return algo_id::direct;
  else return algo_id::automatic;
}

/// Calls f(tag) with the algorithm tag for a; ring is never instantiated for a non-commutative op
/// (collx rejects that at compile time), nor tree when NoTree (all_to_all has none).
template <class Op, bool NoTree = false, class F>
void with_algo(algo_id a, F&& f) {
  switch (a) {
    case algo_id::ring:
      if constexpr (collx::op_traits<Op>::commutative) f(collx::algo::ring{});
      return;
    case algo_id::tree:
      if constexpr (!NoTree) f(collx::algo::tree{});
      return;
    case algo_id::direct: f(collx::algo::direct{}); return;
    case algo_id::automatic: f(collx::algo::automatic{}); return;
  }
}

/// The concrete algorithm a call with tag Algo runs on this communicator.
template <class Algo>
collx::algorithm resolved(const collx::communicator& c, collx::collective coll, size_t bytes, bool commutative) {
  if constexpr (std::is_same_v<Algo, collx::algo::automatic>) return c.select({coll, c.size(), bytes, commutative});
  else return Algo::kind;
}

/// Options whose selector makes algo::automatic run `a` (one instantiation, any algorithm).
inline collx::communicator_options forcing(collx::algorithm a, collx::communicator_options o = test_options()) {
  o.selector = [a](const collx::selection_query&) { return a; };
  return o;
}

/// Prefix offsets of a count vector (size n + 1).
inline std::vector<size_t> prefix(const std::vector<size_t>& counts) {
  std::vector<size_t> p(counts.size() + 1, 0);
  for (size_t c = 0; c < counts.size(); ++c) p[c + 1] = p[c] + counts[c];
  return p;
}

// Which sanitizer this build has: g++ defines __SANITIZE_*__, clang answers __has_feature (which
// g++ 12 lacks, and cannot be named in an #if where it is not defined).
#if defined(__has_feature)
#define COLLX_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define COLLX_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || COLLX_TEST_HAS_FEATURE(thread_sanitizer)
#define COLLX_TEST_TSAN 1
#else
#define COLLX_TEST_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__) || COLLX_TEST_HAS_FEATURE(address_sanitizer)
#define COLLX_TEST_ASAN 1
#else
#define COLLX_TEST_ASAN 0
#endif

/// True in sanitizer builds (ASan, TSan), which run 5-20x slower: the largest repeat counts shrink.
inline constexpr bool sanitized = COLLX_TEST_ASAN || COLLX_TEST_TSAN;
/// True under TSan, whose runtime does not support threads started in a forked child.
inline constexpr bool thread_sanitized = COLLX_TEST_TSAN;

using clock = std::chrono::steady_clock;
inline double seconds_since(clock::time_point t0) {
  return std::chrono::duration<double>(clock::now() - t0).count();
}

/// One rank's checks, for ranks that check their own results (processes cannot report into the
/// caller's memory): a failure is printed to stderr at once with the rank.
struct rank_tally {
  int rank = 0;
  int failed = 0;
  void check(bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
  }
};

}  // namespace ref
