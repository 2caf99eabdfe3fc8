// Custom reductions an HPC code writes, each reduced across ranks with collx::allreduce and
// compared with a sequential reference:
//
//   1. Welford mean/variance: each rank streams its samples into (count, mean, M2); the states are
//      merged with Chan et al.'s pairwise formula. Not declared commutative (the rounding depends on
//      the order), and reduced with algo::direct, so the result is bit-for-bit the sequential merge
//      of the ranks' states in rank order. The naive (count, sum, sum of squares) all-reduce is shown
//      next to it: with a large offset, E[x^2] - E[x]^2 cancels catastrophically.
//   2. min-loc / max-loc on (value, index) structs, MPI_MINLOC/MPI_MAXLOC semantics (ties go to the
//      smaller index). The op is declared commutative (`static constexpr bool commutative = true`),
//      so even algo::ring may use it; the result is exact whatever the order.
//   3. A compensated sum: float-float ("double-float") accumulation built on Knuth's TwoSum, as a
//      (hi, lo) struct, reduced with its own op. On data built to defeat a float sum (a large value
//      plus many small ones; a cancellation of +-1e20 around small values) the naive float
//      all-reduce loses the small values while the compensated sum is exact.
//   4. A non-commutative op: 2x2 matrix product over Z/2^64 (exact and associative, so every
//      bracketing gives the same bits), reduced with algo::tree and algo::direct: both give the
//      rank-order product M_0 M_1 ... M_{n-1}; the reversed product differs. algo::ring is rejected
//      at compile time for such an op (build with -DCOLLX_EXAMPLE_RING_WITH_NONCOMMUTATIVE_OP to see
//      the static_assert; ctest checks that it fires).
//   5. bf16 gradients with user ops: a generic lambda (`[](auto a, auto b) { return a + b; }`) on
//      collx::bfloat16 gets fp32 operands, as ops::sum does: fp32 partial sums, rounded once, equal
//      to the exact sum rounded once. An op typed on bfloat16 rounds at every step, as it asks, and
//      loses the small gradients next to a large one. A global max |g| (as loss scaling or gradient
//      clipping needs) with a generic op is exact (with one rank no op runs: the output is the input).
//
// Every rank builds every rank's data from a fixed seed, so each rank can compute the sequential
// references itself. Usage: reductions [--ranks N] [--count K]   (or collx-run -n N reductions)
#include "common.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace ex = collx_examples;

namespace {

// ---------------------------------------------------------------------------------------------
// 1. Welford

struct moments {
  double n = 0, mean = 0, m2 = 0;  // count, mean, sum of squared deviations from the mean
  void add(double x) {             // Welford's streaming update
    n += 1;
    const double d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  double variance() const { return n > 1 ? m2 / (n - 1) : 0.0; }
};

// Chan, Golub & LeVeque's merge of two partial states (the parallel form of Welford's update).
struct welford_merge {
  static constexpr const char* name = "welford";
  moments operator()(const moments& a, const moments& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * (b.n / n))};
  }
};

// Channel k of rank r: an uneven number of samples, offset + N(0, sigma_k) (sum of 4 uniforms).
constexpr int channels = 3;
constexpr double offsets[channels] = {0.0, 1.0e4, 1.0e9};
constexpr double sigmas[channels] = {1.0, 0.5, 2.0};
std::vector<double> welford_data(int rank, int k) {
  ex::rng g(1000u + 17u * static_cast<unsigned>(rank) + static_cast<unsigned>(k));
  const std::size_t n = 2000 + 311 * static_cast<std::size_t>(rank);
  std::vector<double> v(n);
  for (auto& x : v) {
    const double u = (static_cast<double>(g.uniform() + g.uniform() + g.uniform() + g.uniform()) - 2.0) * std::sqrt(3.0);
    x = offsets[k] + sigmas[k] * u;
  }
  return v;
}

int welford_part(collx::communicator& comm, ex::checker& check) {
  const int n = comm.size(), r = comm.rank();
  std::vector<moments> mine(channels), all(channels);
  std::vector<double> naive(3 * channels);  // per channel: count, sum, sum of squares
  for (int k = 0; k < channels; ++k) {
    for (double x : welford_data(r, k)) {
      mine[static_cast<std::size_t>(k)].add(x);
      naive[static_cast<std::size_t>(3 * k)] += 1;
      naive[static_cast<std::size_t>(3 * k + 1)] += x;
      naive[static_cast<std::size_t>(3 * k + 2)] += x * x;
    }
  }
  collx::allreduce<collx::algo::direct>(comm, std::span<const moments>(mine), std::span<moments>(all), welford_merge{});
  collx::allreduce(comm, std::span<double>(naive));

  if (r == 0) std::printf("\n1. Welford mean/variance merge (algo::direct, %d ranks, uneven sample counts)\n", n);
  for (int k = 0; k < channels; ++k) {
    const std::size_t ks = static_cast<std::size_t>(k);
    // References: the sequential merge of the ranks' states in rank order (the same bits expected),
    // and a two-pass computation over all samples in long double (the true values, to ~1e-16).
    moments fold;
    long double s = 0, cnt = 0;
    std::vector<std::vector<double>> data;
    for (int q = 0; q < n; ++q) {
      data.push_back(welford_data(q, k));
      moments m;
      for (double x : data.back()) m.add(x), s += static_cast<long double>(x), cnt += 1;
      fold = welford_merge{}(fold, m);
    }
    const long double mean = s / cnt;
    long double ss = 0;
    for (const auto& d : data)
      for (double x : d) ss += (static_cast<long double>(x) - mean) * (static_cast<long double>(x) - mean);
    const double true_var = static_cast<double>(ss / (cnt - 1));
    const double nv_mean = naive[3 * ks + 1] / naive[3 * ks];
    const double nv_var = (naive[3 * ks + 2] - naive[3 * ks] * nv_mean * nv_mean) / (naive[3 * ks] - 1);
    const moments& got = all[ks];
    const bool same = ex::same_bits(std::span<const moments>(&got, 1), std::span<const moments>(&fold, 1));
    if (r == 0) {
      std::printf("   offset %-6g n %6.0f  collx mean %.10g var %.10g | rank-order fold mean %.10g var %.10g (%s)\n",
                  offsets[k], got.n, got.mean, got.variance(), fold.mean, fold.variance(), same ? "bit-identical" : "DIFFERENT");
      std::printf("   %-13s two-pass reference var %.10g; naive sum/sum-of-squares all-reduce var %.10g (rel. error %.1e)\n", "",
                  true_var, nv_var, std::fabs(nv_var - true_var) / true_var);
    }
    check(same, "Welford: collx result differs from the rank-order fold");
    check(std::fabs(got.mean - static_cast<double>(mean)) <= 1e-12 * std::fabs(static_cast<double>(mean)) + 1e-12,
          "Welford: mean off the two-pass reference");
    // The inputs themselves carry ~ulp(offset) of noise relative to sigma (1e-7 at offset 1e9), so
    // any one-pass method lands ~1e-8 off; the naive formula is off by orders of magnitude more.
    check(std::fabs(got.variance() - true_var) <= 1e-6 * true_var, "Welford: variance off the two-pass reference");
    if (offsets[k] >= 1e9)
      check(std::fabs(nv_var - true_var) > 1e-3 * true_var, "the naive formula was expected to cancel catastrophically");
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// 2. min-loc / max-loc

struct value_index {
  float value;
  std::int64_t index;
};
struct minloc {
  static constexpr bool commutative = true;  // a total order with a tie-break: order-independent
  static constexpr const char* name = "minloc";
  value_index operator()(const value_index& a, const value_index& b) const {
    if (b.value < a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
};
struct maxloc {
  static constexpr bool commutative = true;
  static constexpr const char* name = "maxloc";
  value_index operator()(const value_index& a, const value_index& b) const {
    if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
    return a;
  }
};

int minmaxloc_part(collx::communicator& comm, ex::checker& check, std::size_t series) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t length = 10007;  // global array per series, split unevenly over the ranks
  // Value of series s at global index i: few distinct values, so the extreme occurs many times
  // (on several ranks) and the tie-break decides.
  auto value = [](std::size_t s, std::size_t i) {
    ex::rng g(0x5eed0000u + s * 1000003u + i);
    return static_cast<float>(static_cast<int>(g.below(41)) - 20) * 0.25f;
  };
  const ex::block mine = ex::split(length, n, r);
  std::vector<value_index> lo(series), hi(series);
  for (std::size_t s = 0; s < series; ++s) {
    value_index a{std::numeric_limits<float>::infinity(), -1}, b{-std::numeric_limits<float>::infinity(), -1};
    for (std::size_t i = mine.first; i < mine.first + mine.size; ++i) {
      const value_index v{value(s, i), static_cast<std::int64_t>(i)};
      a = minloc{}(a, v);
      b = maxloc{}(b, v);
    }
    lo[s] = a;
    hi[s] = b;
  }
  collx::allreduce<collx::algo::ring>(comm, std::span<value_index>(lo), minloc{});  // commutative: ring allowed
  collx::allreduce(comm, std::span<value_index>(hi), maxloc{});                      // algo::automatic
  if (r == 0) std::printf("\n2. min-loc / max-loc over %zu series of %zu values (ring / automatic)\n", series, length);
  int wrong = 0;
  for (std::size_t s = 0; s < series; ++s) {
    // Sequential reference: first index of the minimum and of the maximum.
    value_index a{value(s, 0), 0}, b = a;
    for (std::size_t i = 1; i < length; ++i) {
      const float v = value(s, i);
      if (v < a.value) a = {v, static_cast<std::int64_t>(i)};
      if (v > b.value) b = {v, static_cast<std::int64_t>(i)};
    }
    const bool ok = lo[s].value == a.value && lo[s].index == a.index && hi[s].value == b.value && hi[s].index == b.index;
    wrong += !ok;
    if (r == 0 && s < 3)
      std::printf("   series %zu: collx min %g at %" PRId64 ", max %g at %" PRId64 " | sequential min %g at %" PRId64
                  ", max %g at %" PRId64 "\n",
                  s, double(lo[s].value), lo[s].index, double(hi[s].value), hi[s].index, double(a.value), a.index,
                  double(b.value), b.index);
  }
  if (r == 0) std::printf("   %zu of %zu series match the sequential scan\n", series - static_cast<std::size_t>(wrong), series);
  check(wrong == 0, "min-loc/max-loc differ from the sequential scan");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// 3. Compensated (float-float) sum

struct float2 {
  float hi, lo;  // the value is hi + lo, |lo| <= ulp(hi) / 2
};
// Knuth's TwoSum: s + e == a + b exactly.
inline void two_sum(float a, float b, float& s, float& e) {
  s = a + b;
  const float bb = s - a;
  e = (a - (s - bb)) + (b - bb);
}
struct compensated_sum {
  static constexpr bool commutative = true;  // TwoSum is symmetric in its operands
  static constexpr const char* name = "float2_sum";
  float2 operator()(const float2& a, const float2& b) const {
    float s, e;
    two_sum(a.hi, b.hi, s, e);
    e += a.lo + b.lo;
    const float hi = s + e;
    return {hi, e - (hi - s)};
  }
};

// Case c of rank r (ranks = n), `m` values each.
std::vector<float> sum_case(int c, int r, int n, std::size_t m) {
  std::vector<float> v;
  ex::rng g(777u + 31u * static_cast<unsigned>(c) + static_cast<unsigned>(r));
  switch (c) {
    case 0:  // 2^24 on rank 0, then ones: 2^24 + 1 rounds back to 2^24 in float
      if (r == 0) v.push_back(16777216.0f);
      v.resize(v.size() + m, 1.0f);
      break;
    case 1:  // +1e20 first on rank 0, -1e20 last on the last rank, halves in between
      if (r == 0) v.push_back(1e20f);
      for (std::size_t i = 0; i < m; ++i) v.push_back(0.5f * static_cast<float>(1 + g.below(8)));
      if (r == n - 1) v.push_back(-1e20f);
      break;
    default:  // integers of mixed magnitude, 2^0 .. 2^36, random signs: the exact sum fits an int64
      for (std::size_t i = 0; i < m; ++i) {
        const float mant = static_cast<float>(g.below(1u << 24));
        v.push_back((g.below(2) ? -1.0f : 1.0f) * std::ldexp(mant, static_cast<int>(g.below(13))));
      }
      break;
  }
  return v;
}

int compensated_part(collx::communicator& comm, ex::checker& check) {
  const int n = comm.size(), r = comm.rank();
  constexpr int cases = 3;
  const std::size_t m = 1000;
  std::vector<float> naive(cases, 0.0f);
  std::vector<float2> comp(cases, float2{0.0f, 0.0f});
  for (int c = 0; c < cases; ++c)
    for (float x : sum_case(c, r, n, m)) {
      naive[static_cast<std::size_t>(c)] += x;
      comp[static_cast<std::size_t>(c)] = compensated_sum{}(comp[static_cast<std::size_t>(c)], float2{x, 0.0f});
    }
  collx::allreduce<collx::algo::direct>(comm, std::span<float>(naive));
  collx::allreduce(comm, std::span<float2>(comp), compensated_sum{});
  if (r == 0) std::printf("\n3. Compensated (float-float, TwoSum) sum vs naive float sum, %zu values per rank\n", m);
  const char* names[cases] = {"2^24 + ones", "+1e20, halves, -1e20", "mixed 2^0..2^36"};
  for (int c = 0; c < cases; ++c) {
    // Exact reference: every value is a multiple of 0.5 below 2^62, so twice the sum is an exact int64
    // (cases 0 and 2; for case 1 the +-1e20 cancel and are left out).
    long long twice = 0;
    for (int q = 0; q < n; ++q)
      for (float x : sum_case(c, q, n, m))
        if (std::fabs(x) < 1e19f) twice += static_cast<long long>(2.0 * static_cast<double>(x));
    const double exact = static_cast<double>(twice) / 2.0;  // exact: |sum| < 2^52 here
    const std::size_t cs = static_cast<std::size_t>(c);
    const double got = static_cast<double>(comp[cs].hi) + static_cast<double>(comp[cs].lo);
    const double naive_err = static_cast<double>(naive[cs]) - exact, comp_err = got - exact;
    if (r == 0)
      std::printf("   %-22s exact %.17g  compensated %.17g (error %g)  naive float %.9g (error %g)\n", names[c], exact, got,
                  comp_err, static_cast<double>(naive[cs]), naive_err);
    if (c < 2) {
      check(comp_err == 0, std::string("compensated sum is not exact for ") + names[c]);
      check(naive_err != 0, std::string("the naive float sum was expected to lose precision for ") + names[c]);
    } else {
      check(std::fabs(comp_err) * 1e3 < std::fabs(naive_err) || comp_err == 0,
            "compensated sum not much better than the naive sum on mixed magnitudes");
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// 4. Non-commutative: 2x2 matrix product over Z/2^64

struct mat2 {
  std::uint64_t a, b, c, d;  // [[a, b], [c, d]]
  bool operator==(const mat2&) const = default;
};
struct matmul {  // no `commutative` member: collx combines in rank order
  static constexpr const char* name = "matmul2x2";
  mat2 operator()(const mat2& x, const mat2& y) const {
    return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
  }
};

// [[1, x], [0, 1]] [[1, 0], [y, 1]] with x, y in +-1..3: determinant 1, so every product of them is
// invertible too and never collapses to zero (random entries in -2..2 gave singular matrices whose
// products were 0 in either order at 128 ranks), and two such matrices rarely commute.
mat2 matrix_of(int rank, std::size_t i) {
  ex::rng g(99u + 1000003u * static_cast<unsigned>(rank) + i);
  auto e = [&] {  // -3..-1, 1..3, mod 2^64
    const auto v = static_cast<std::int64_t>(g.below(6)) - 3;
    return static_cast<std::uint64_t>(v >= 0 ? v + 1 : v);
  };
  const std::uint64_t x = e(), y = e();
  return {1 + x * y, x, y, 1};
}

int matrix_part(collx::communicator& comm, ex::checker& check, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  std::vector<mat2> mine(count), by_tree(count), by_direct(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = matrix_of(r, i);
  collx::allreduce<collx::algo::tree>(comm, std::span<const mat2>(mine), std::span<mat2>(by_tree), matmul{});
  collx::allreduce<collx::algo::direct>(comm, std::span<const mat2>(mine), std::span<mat2>(by_direct), matmul{});
#ifdef COLLX_EXAMPLE_RING_WITH_NONCOMMUTATIVE_OP
  // Does not compile: algo::ring combines each block in a rotated rank order.
  collx::allreduce<collx::algo::ring>(comm, std::span<mat2>(mine), matmul{});
#endif
  std::size_t tree_ok = 0, direct_ok = 0, reversed_differs = 0;
  for (std::size_t i = 0; i < count; ++i) {
    mat2 fwd = matrix_of(0, i), rev = matrix_of(n - 1, i);
    for (int q = 1; q < n; ++q) fwd = matmul{}(fwd, matrix_of(q, i));
    for (int q = n - 2; q >= 0; --q) rev = matmul{}(rev, matrix_of(q, i));
    tree_ok += by_tree[i] == fwd;
    direct_ok += by_direct[i] == fwd;
    reversed_differs += !(rev == fwd);
    if (r == 0 && i == 0) {
      auto s = [](std::uint64_t v) { return static_cast<long long>(v); };  // print signed: -1, not 2^64 - 1
      std::printf("\n4. Non-commutative 2x2 matrix product (Z/2^64), %zu matrices per rank\n", count);
      std::printf("   element 0: tree [[%lld %lld] [%lld %lld]], direct [[%lld %lld] [%lld %lld]]\n", s(by_tree[0].a),
                  s(by_tree[0].b), s(by_tree[0].c), s(by_tree[0].d), s(by_direct[0].a), s(by_direct[0].b),
                  s(by_direct[0].c), s(by_direct[0].d));
      std::printf("   sequential M_0 M_1 ... M_%d [[%lld %lld] [%lld %lld]]; reversed order [[%lld %lld] [%lld %lld]]\n",
                  n - 1, s(fwd.a), s(fwd.b), s(fwd.c), s(fwd.d), s(rev.a), s(rev.b), s(rev.c), s(rev.d));
    }
  }
  if (r == 0)
    std::printf("   rank-order product matched: tree %zu/%zu, direct %zu/%zu; reversed product differs in %zu/%zu\n", tree_ok,
                count, direct_ok, count, reversed_differs, count);
  check(tree_ok == count, "tree's matrix product differs from the rank-order product");
  check(direct_ok == count, "direct's matrix product differs from the rank-order product");
  if (n > 1) check(reversed_differs > count / 2, "the reversed products should mostly differ (is the op non-commutative?)");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// 5. bf16 gradients: user ops in fp32 or in bf16

// Rank r's gradient i: a large value on rank 0 (256, 512 or 768: bf16's spacing there is 2 or 4),
// small integers elsewhere, signs mixed; every partial sum is an integer fp32 holds exactly.
float gradient(int r, std::size_t i) {
  if (r == 0) return static_cast<float>(256 * (1 + i % 3)) * (i % 5 == 0 ? -1.0f : 1.0f);
  return static_cast<float>(1 + (static_cast<std::size_t>(r) + i) % 3) * ((static_cast<std::size_t>(r) + i) % 7 == 0 ? -1.0f : 1.0f);
}

int bf16_part(collx::communicator& comm, ex::checker& check, std::size_t count) {
  using bf16 = collx::bfloat16;
  const int n = comm.size(), r = comm.rank();
  std::vector<bf16> mine(count), generic_sum(count), builtin_sum(count), stepwise_sum(count), max_abs(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = bf16(gradient(r, i));
  const std::span<const bf16> in(mine);
  // collx::bfloat16 has no arithmetic: `auto` is float here, and the op runs in fp32.
  collx::allreduce(comm, in, std::span<bf16>(generic_sum), [](auto a, auto b) { return a + b; });
  collx::allreduce(comm, in, std::span<bf16>(builtin_sum), collx::ops::sum{});
  collx::allreduce<collx::algo::direct>(comm, in, std::span<bf16>(stepwise_sum),
                                        [](bf16 a, bf16 b) { return bf16(static_cast<float>(a) + static_cast<float>(b)); });
  collx::allreduce(comm, in, std::span<bf16>(max_abs), [](auto a, auto b) { return std::max(std::fabs(a), std::fabs(b)); });
  std::size_t generic_ok = 0, builtin_same = 0, stepwise_ok = 0, stepwise_lost = 0, max_ok = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0, largest = 0;
    bf16 step = bf16(gradient(0, i));  // direct's order: rank 0, 1, ..., rounded each step
    for (int q = 0; q < n; ++q) {
      const float g = static_cast<float>(bf16(gradient(q, i)));
      exact += static_cast<double>(g);
      largest = std::max(largest, std::fabs(static_cast<double>(g)));
      if (q > 0) step = bf16(static_cast<float>(step) + g);
    }
    const bf16 once(static_cast<float>(exact));
    generic_ok += generic_sum[i] == once;
    builtin_same += builtin_sum[i] == generic_sum[i];
    stepwise_ok += stepwise_sum[i] == step;
    stepwise_lost += !(step == once);
    // One rank applies no op: its output is its input, sign and all.
    max_ok += max_abs[i] == (n == 1 ? mine[i] : bf16(static_cast<float>(largest)));
  }
  if (r == 0) {
    std::printf("\n5. bf16 gradients with user ops, %zu per rank\n", count);
    std::printf("   [](auto a, auto b) { return a + b; }: exact sum rounded once on %zu/%zu, same bits as ops::sum on %zu/%zu\n",
                generic_ok, count, builtin_same, count);
    std::printf("   op typed on bfloat16 (direct): the rank-order fold rounded each step on %zu/%zu; it differs from the\n"
                "   exact sum on %zu/%zu (small gradients lost next to a large one)\n",
                stepwise_ok, count, stepwise_lost, count);
    std::printf("   max |g| with a generic op: exact on %zu/%zu\n", max_ok, count);
  }
  check(generic_ok == count, "the generic op's bf16 sum is not the exact sum rounded once");
  check(builtin_same == count, "the generic op and ops::sum differ on bf16");
  check(stepwise_ok == count, "the bf16-typed op's sum is not the rank-order fold rounded each step");
  check(max_ok == count, "max |g| differs from the sequential maximum");
  if (n > 2) check(stepwise_lost > 0, "rounding each step was expected to lose some small gradients");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--count K]");
  const int ranks = opt.get_ranks();
  // --count 0 would leave the matrix part nothing to compare (its checks need at least one).
  const auto count = static_cast<std::size_t>(opt.get_int("--count", 512, 1, 1 << 20));
  opt.reject_unknown();
  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    ex::checker check{comm.rank(), 0};
    const auto t0 = std::chrono::steady_clock::now();
    if (comm.rank() == 0) std::printf("reductions: %d ranks\n", comm.size());
    welford_part(comm, check);
    minmaxloc_part(comm, check, count);
    compensated_part(comm, check);
    matrix_part(comm, check, count);
    bf16_part(comm, check, count);
    const int failures = check.total(comm);
    if (comm.rank() == 0) std::printf("\n%s (%.3f s)\n", failures ? "FAILED" : "OK: every result equals its sequential reference", ex::seconds_since(t0));
    return failures ? 1 : 0;
  });
}
