// The cases of docs/edge-cases.md written so that every rank checks its own results, for ranks
// that are processes (shared memory: test_shm; MPI: test_mpi) or levels of a hierarchy
// (test_hierarchical). test_edge_cases.cpp runs the same cases on thread ranks, collecting every
// rank's result in the caller's memory, which a process rank cannot do.
//
// The file's inputs and expected values, for any world size n >= 2 where the file names one: ranks
// the file does not mention hold the op's identity (0 for sum) or a value that never wins (min-loc,
// max-loc), so the file's answer stays the answer; where the answer depends on n it is computed
// in closed form, or by a sequential fold in rank order (ref::fold_left) where the file gives none.
// Left to test_edge_cases.cpp: C1 (one rank: no transport), A2's million random patterns and A5
// (arithmetic that no transport touches), B3's bad send pointer (an argument check made before any
// transport runs; it fails the communicator, so the cases after it could not run), F1-F3 and P1
// (tested per transport in test_shm, test_mpi, test_environment, test_perf_math).
#pragma once

#include "reference.hpp"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <collx/collx.hpp>

namespace edge {

using std::size_t;
using collx::bfloat16;
using collx::half;
namespace ops = collx::ops;

/// A rank or world size as an index.
inline size_t uz(int x) { return static_cast<size_t>(x); }

/// One rank's checks: a failure is printed to stderr at once, with the rank and the case.
class tally {
 public:
  /// Checks of rank `rank`.
  explicit tally(int rank) : rank_(rank) {}
  /// The case that later failures name.
  void in_case(std::string name) { case_ = std::move(name); }
  /// Counts a check; prints `what` with the rank and case when !ok.
  void check(bool ok, const std::string& what) {
    if (ok) return;
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s: %s\n", rank_, case_.c_str(), what.c_str());
  }
  /// got == want bit for bit (ref::same), naming the first difference.
  template <class T>
  void same(std::span<const T> got, std::span<const T> want, const std::string& what) {
    const size_t d = ref::first_difference(got, want);
    check(d == ref::npos, what + (d == ref::npos ? std::string()
                                  : d < got.size() && d < want.size()
                                      ? ": element " + std::to_string(d) + " is " + ref::show(got[d]) + ", want " + ref::show(want[d])
                                      : ": sizes differ"));
  }
  template <class T>
  void same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
    same(std::span<const T>(got), std::span<const T>(want), what);
  }
  /// Every element of `s` still holds ref::poisoned's pattern (nothing was written there).
  template <class T>
  void untouched(std::span<const T> s, const std::string& what) {
    size_t bad = ref::npos;
    for (size_t i = 0; i < s.size() && bad == ref::npos; ++i)
      if (!ref::is_poison(s[i])) bad = i;
    check(bad == ref::npos, what + (bad == ref::npos ? std::string() : ": element " + std::to_string(bad) + " was written"));
  }
  /// Checks that failed so far.
  int failures() const { return failures_; }

 private:
  int rank_;
  std::string case_;
  int failures_ = 0;
};

/// all_to_all and send/recv have no hierarchical form: a hierarchical run takes automatic there.
template <class A>
struct flat_of {
  using type = A;
};
template <class I, class E>
struct flat_of<collx::algo::hierarchical<I, E>> {
  using type = collx::algo::automatic;
};

/// `count` poisoned elements and one more behind them, which must stay poisoned.
template <class T>
std::vector<T> with_guard(size_t count) {
  return ref::poisoned<T>(count + 1);
}
/// The first `count` elements of v (the part a call may write; with_guard's guard follows).
template <class T>
std::span<T> first(std::vector<T>& v, size_t count) {
  return std::span<T>(v.data(), count);
}

// =============================================================================================
// Counts, chunking and tails

/// C2: float32 sum, rank r element i = (i mod 1024) + r -> n (i mod 1024) + n(n-1)/2, exact.
template <class Algo>
void c2(collx::communicator& c, tally& t, std::span<const size_t> counts) {
  t.in_case("C2 uneven split");
  const int n = c.size(), r = c.rank();
  for (const size_t count : counts) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 1024 + uz(r));
    auto out = with_guard<float>(count);
    collx::allreduce<Algo>(c, std::span<const float>(in), first(out, count));
    size_t bad = ref::npos;
    for (size_t i = 0; i < count && bad == ref::npos; ++i)
      if (out[i] != static_cast<float>(uz(n) * (i % 1024) + uz(n * (n - 1) / 2))) bad = i;
    t.check(bad == ref::npos, "count " + std::to_string(count) + ": first wrong element " + std::to_string(bad));
    t.untouched(std::span<const float>(&out[count], 1), "count " + std::to_string(count) + " guard");
  }
}

/// C3: int32 sum of r + 1 over counts {1, 2, n-1, n, n+1} -> n(n+1)/2, each call within 5 s; also
/// all-gather with 1 element per rank and reduce-scatter with recv count 1.
template <class Algo>
void c3(collx::communicator& c, tally& t) {
  t.in_case("C3 fewer elements than ranks");
  const int n = c.size(), r = c.rank();
  const std::int32_t want = n * (n + 1) / 2;
  for (const size_t count : {size_t{1}, size_t{2}, uz(n - 1), uz(n), uz(n + 1)}) {
    const std::vector<std::int32_t> in(count, r + 1);
    auto out = with_guard<std::int32_t>(count);
    const auto t0 = ref::clock::now();
    collx::allreduce<Algo>(c, std::span<const std::int32_t>(in), first(out, count));
    t.check(ref::seconds_since(t0) < 5.0, "count " + std::to_string(count) + " took 5 s or more");
    t.same(std::vector<std::int32_t>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(count)),
           std::vector<std::int32_t>(count, want), "allreduce count " + std::to_string(count));
    t.untouched(std::span<const std::int32_t>(&out[count], 1), "allreduce guard");
  }
  const std::int32_t mine = r + 1;
  auto gathered = with_guard<std::int32_t>(uz(n));
  collx::all_gather<Algo>(c, std::span<const std::int32_t>(&mine, 1), first(gathered, uz(n)));
  for (int q = 0; q < n; ++q) t.check(gathered[uz(q)] == q + 1, "all_gather slot " + std::to_string(q));
  t.untouched(std::span<const std::int32_t>(&gathered[uz(n)], 1), "all_gather guard");
  const std::vector<std::int32_t> send(uz(n), r + 1);
  auto scattered = with_guard<std::int32_t>(1);
  collx::reduce_scatter<Algo>(c, std::span<const std::int32_t>(send), first(scattered, 1));
  t.check(scattered[0] == want, "reduce_scatter recv count 1: " + std::to_string(scattered[0]));
  t.untouched(std::span<const std::int32_t>(&scattered[1], 1), "reduce_scatter guard");
}

/// C4 for one element type: every collective with 0 elements, pointers valid (into poisoned
/// memory that must stay untouched), null, or send == recv; an all_to_all_v in which the pair
/// 0 -> 1 exchanges 0 elements; then an allreduce that shows the ranks are still in step.
template <class Algo, class T, class Op>
void c4_type(collx::communicator& c, tally& t, Op op = {}) {
  using Flat = typename flat_of<Algo>::type;
  const int n = c.size(), r = c.rank();
  constexpr size_t cap = 16;
  const std::vector<T> a = ref::gen_vec<T>(r, cap, ref::flavor::general, 3), a0 = a;
  std::vector<T> b = ref::poisoned<T>(cap);
  const std::vector<size_t> zeros(uz(n), 0);
  enum { valid, null, same };
  for (const int kind : {valid, null, same}) {
    const T* s = kind == valid ? a.data() : kind == null ? nullptr : b.data();
    T* d = kind == null ? nullptr : b.data();
    const std::span<const T> S(s, size_t{0});
    const std::span<T> D(d, size_t{0});
    collx::allreduce<Algo>(c, S, D, op);
    collx::reduce_scatter<Algo>(c, S, D, op);
    collx::reduce_scatter_v<Algo>(c, S, D, std::span<const size_t>(zeros), op);
    collx::all_gather<Algo>(c, S, D);
    collx::all_gather_v<Algo>(c, S, D, std::span<const size_t>(zeros));
    collx::broadcast<Algo>(c, S, D, 0);
    collx::reduce<Algo>(c, S, D, n - 1, op);
    collx::all_to_all<Flat>(c, S, D);
    collx::all_to_all_v<Flat>(c, S, std::span<const size_t>(zeros), D, std::span<const size_t>(zeros));
    if (r == 0) collx::send(c, S, 1);
    if (r == 1) collx::recv(c, D, 0);
  }
  t.untouched(std::span<const T>(b), std::string("zero-count buffer of ") + ref::type_label<T>());
  t.check(ref::bytes_equal<T>(a, a0), "zero-count send buffer changed");
  // all_to_all_v: rank q sends rank p two elements 100q + 10p + k, but rank 0 sends rank 1 none
  std::vector<size_t> sc(uz(n), 2), rc(uz(n), 2);
  if (r == 0) sc[1] = 0;
  if (r == 1) rc[0] = 0;
  std::vector<std::int32_t> send, want;
  for (int q = 0; q < n; ++q)
    for (std::int32_t k = 0; k < std::int32_t(sc[uz(q)]); ++k) send.push_back(100 * r + 10 * q + k);
  for (int q = 0; q < n; ++q)
    if (!(q == 0 && r == 1))
      for (std::int32_t k = 0; k < 2; ++k) want.push_back(100 * q + 10 * r + k);
  auto got = with_guard<std::int32_t>(want.size());
  collx::all_to_all_v<Flat>(c, std::span<const std::int32_t>(send), std::span<const size_t>(sc), first(got, want.size()),
                            std::span<const size_t>(rc));
  t.same(std::vector<std::int32_t>(got.begin(), got.end() - 1), want, "all_to_all_v with a 0-element pair");
  t.untouched(std::span<const std::int32_t>(&got[want.size()], 1), "all_to_all_v guard");
  const std::vector<std::int32_t> x(4, r + 1);
  std::vector<std::int32_t> after = ref::poisoned<std::int32_t>(4);
  collx::allreduce<Algo>(c, std::span<const std::int32_t>(x), std::span<std::int32_t>(after));
  t.same(after, std::vector<std::int32_t>(4, n * (n + 1) / 2), "allreduce after the zero-count calls");
}

/// C4 zero elements: float32, int8 and a struct (loc16, min-loc).
template <class Algo>
void c4(collx::communicator& c, tally& t) {
  t.in_case("C4 zero elements");
  c4_type<Algo, float, ops::sum>(c, t);
  c4_type<Algo, std::int8_t, ops::sum>(c, t);
  c4_type<Algo, ref::loc16, ref::min_loc>(c, t);
}

// =============================================================================================
// Arithmetic

/// A1 for one pair: rank 0 holds x0, rank 1 x1 (others 0); sum must wrap to `want` for counts
/// {7, 8, 9, 16, 17} (vector bodies and scalar tails), in allreduce and reduce_scatter.
template <class Algo, class T>
void a1_pair(collx::communicator& c, tally& t, T x0, T x1, T want) {
  const int n = c.size(), r = c.rank();
  const T mine = r == 0 ? x0 : r == 1 ? x1 : T{0};
  const std::string what = ref::type_label<T>() + " " + ref::show(x0) + " + " + ref::show(x1);
  for (const size_t count : {7, 8, 9, 16, 17}) {
    const std::vector<T> in(count, mine);
    std::vector<T> out = ref::poisoned<T>(count);
    collx::allreduce<Algo>(c, std::span<const T>(in), std::span<T>(out));
    t.same(out, std::vector<T>(count, want), what + " allreduce count " + std::to_string(count));
    const std::vector<T> send(uz(n) * count, mine);
    std::vector<T> rs = ref::poisoned<T>(count);
    collx::reduce_scatter<Algo>(c, std::span<const T>(send), std::span<T>(rs));
    t.same(rs, std::vector<T>(count, want), what + " reduce_scatter count " + std::to_string(count));
  }
}

template <class Algo>
void a1(collx::communicator& c, tally& t) {
  t.in_case("A1 integer wrap-around");
  a1_pair<Algo, std::int16_t>(c, t, 16384, 16384, -32768);
  a1_pair<Algo, std::uint8_t>(c, t, 200, 100, 44);
  a1_pair<Algo, std::int8_t>(c, t, 100, 100, -56);
  a1_pair<Algo, std::int32_t>(c, t, 2147483647, 1, -2147483647 - 1);
}

/// Two fp16 operands (as doubles) and their correctly rounded fp16 sum.
struct fp16_pair {
  double a, b, sum;
};
/// A2's pairs, as the file lists them.
inline std::vector<fp16_pair> a2_pairs() {
  return {{65504, 65504, INFINITY},
          {65504, 16, INFINITY},
          {65504, 8, 65504},
          {-65504, 65504, 0},
          {1, std::ldexp(1.0, -11), 1},
          {1, 3 * std::ldexp(1.0, -11), 1.001953125},
          {std::ldexp(1.0, -24), std::ldexp(1.0, -24), std::ldexp(1.0, -23)},
          {2048, 1, 2048},
          {ref::to_double(ref::round_narrow<half>(0.1)), ref::to_double(ref::round_narrow<half>(0.2)), 0.2998046875}};
}

/// A2: fp16 sum of the file's pairs (rank 0 the first operand, rank 1 the second, others +0), and
/// of every finite fp16 encoding against a fixed vector; want: the exact sum rounded once.
template <class Algo>
void a2(collx::communicator& c, tally& t) {
  t.in_case("A2 fp16 rounding");
  const auto h = [](double d) { return ref::round_narrow<half>(d); };
  const int r = c.rank();
  std::vector<half> in, want;
  for (const auto& p : a2_pairs()) in.push_back(h(r == 0 ? p.a : r == 1 ? p.b : 0.0)), want.push_back(h(p.sum));
  std::vector<half> out = ref::poisoned<half>(in.size());
  collx::allreduce<Algo>(c, std::span<const half>(in), std::span<half>(out));
  t.same(out, want, "the file's pairs");

  std::vector<half> finite, fixed, mine, sum;
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits)
    if ((bits & 0x7c00u) != 0x7c00u) finite.push_back(half::from_bits(static_cast<std::uint16_t>(bits)));
  for (size_t i = 0; i < finite.size(); ++i) {
    std::uint16_t b = 0;
    for (std::uint64_t salt = 1; salt == 1 || (b & 0x7c00u) == 0x7c00u; ++salt) b = static_cast<std::uint16_t>(ref::hash(7, i, salt));
    fixed.push_back(half::from_bits(b));
    sum.push_back(h(ref::to_double(finite[i]) + ref::to_double(fixed[i])));  // exact in double
  }
  mine = r == 0 ? finite : r == 1 ? fixed : std::vector<half>(finite.size(), h(0));
  out = ref::poisoned<half>(mine.size());
  collx::allreduce<Algo>(c, std::span<const half>(mine), std::span<half>(out));
  t.same(out, sum, "every finite encoding + a fixed vector");
}

/// A3: bf16 sum, count 1, one rank holds 256 and the others 1: the exact 256 + n - 1 rounded once
/// (264 for n = 8), whichever rank holds the 256; allreduce, reduce to the first and last rank,
/// reduce_scatter with recv count 1.
template <class Algo>
void a3(collx::communicator& c, tally& t) {
  t.in_case("A3 low-precision accumulation");
  const auto b = [](double d) { return ref::round_narrow<bfloat16>(d); };
  const int n = c.size(), r = c.rank();
  const bfloat16 want = b(256.0 + n - 1);
  for (int big = 0; big < n; ++big) {
    const std::string at = "256 on rank " + std::to_string(big);
    const std::vector<bfloat16> in{b(r == big ? 256 : 1)};
    std::vector<bfloat16> out = ref::poisoned<bfloat16>(1), red = ref::poisoned<bfloat16>(2), rs = ref::poisoned<bfloat16>(1);
    collx::allreduce<Algo>(c, std::span<const bfloat16>(in), std::span<bfloat16>(out));
    t.same(out, {want}, at + ": allreduce");
    collx::reduce<Algo>(c, std::span<const bfloat16>(in), std::span<bfloat16>(&red[0], 1), 0);
    collx::reduce<Algo>(c, std::span<const bfloat16>(in), std::span<bfloat16>(&red[1], 1), n - 1);
    if (r == 0) t.check(red[0] == want, at + ": reduce to rank 0 gave " + ref::show(red[0]));
    else t.check(ref::is_poison(red[0]), at + ": reduce to rank 0 wrote a non-root's buffer");
    if (r == n - 1) t.check(red[1] == want, at + ": reduce to the last rank gave " + ref::show(red[1]));
    else t.check(ref::is_poison(red[1]), at + ": reduce to the last rank wrote a non-root's buffer");
    const std::vector<bfloat16> send(uz(n), in[0]);
    collx::reduce_scatter<Algo>(c, std::span<const bfloat16>(send), std::span<bfloat16>(rs));
    t.same(rs, {want}, at + ": reduce_scatter");
  }
}

/// A4 for one input: avg by allreduce, reduce to every root and reduce_scatter.
template <class Algo, class T>
void a4_input(collx::communicator& c, tally& t, const std::vector<T>& in, const std::vector<T>& want, const std::string& what) {
  const int n = c.size(), r = c.rank();
  std::vector<T> out = ref::poisoned<T>(in.size());
  collx::allreduce<Algo>(c, std::span<const T>(in), std::span<T>(out), ops::avg{});
  t.same(out, want, what + " allreduce");
  for (int root = 0; root < n; ++root) {
    out = ref::poisoned<T>(in.size());
    collx::reduce<Algo>(c, std::span<const T>(in), std::span<T>(out), root, ops::avg{});
    if (r == root) t.same(out, want, what + " reduce to " + std::to_string(root));
  }
  std::vector<T> send;
  for (int k = 0; k < n; ++k) send.insert(send.end(), in.begin(), in.end());
  out = ref::poisoned<T>(in.size());
  collx::reduce_scatter<Algo>(c, std::span<const T>(send), std::span<T>(out), ops::avg{});
  t.same(out, want, what + " reduce_scatter");
}

/// A4 average: the divisor is n. float32 rank r [1 + 2r, 2 + 2r, ...] -> i + n (n = 2: the file's
/// [2,3,4,5]); float32 [3(r+1), 1] -> [1.5(n+1), 1] (n = 3: [6, 1]); int32 [3,4,5,-3] and
/// [4,4,4,0] on ranks 0 and 1 (others 0): the sums [7,8,9,-3] / n truncated toward zero.
template <class Algo>
void a4(collx::communicator& c, tally& t) {
  t.in_case("A4 average");
  const int n = c.size(), r = c.rank();
  std::vector<float> f1(4), w1(4);
  for (int i = 0; i < 4; ++i) f1[uz(i)] = static_cast<float>(i + 1 + 2 * r), w1[uz(i)] = static_cast<float>(i + n);
  a4_input<Algo>(c, t, f1, w1, "float32 i + 1 + 2r");
  a4_input<Algo>(c, t, std::vector<float>{3.0f * float(r + 1), 1.0f}, std::vector<float>{1.5f * float(n + 1), 1.0f}, "float32 [3(r+1), 1]");
  const std::vector<std::int32_t> i32 = r == 0 ? std::vector<std::int32_t>{3, 4, 5, -3}
                                        : r == 1 ? std::vector<std::int32_t>{4, 4, 4, 0}
                                                 : std::vector<std::int32_t>(4, 0);
  a4_input<Algo>(c, t, i32, std::vector<std::int32_t>{7 / n, 8 / n, 9 / n, -3 / n}, "int32");
}

// =============================================================================================
// Custom types and ops

/// T1 for one struct and op: the file's values on ranks 0-2 (ranks beyond hold values that never
/// win); want: the sequential fold in rank order, and for n = 3 also the file's answer.
template <class Algo, class L, class Op>
void t1_type(collx::communicator& c, tally& t, const std::vector<L>& file_want) {
  const int n = c.size(), r = c.rank();
  const double table[3][4] = {{5, 1, 7, 2}, {5, 3, 7, 2}, {4, 3, 9, 2}};
  const double never_wins = std::is_same_v<Op, ref::max_loc> ? -30000 : 30000;
  const auto value = [&](int q, int k) {
    return ref::make_loc<L>(q < 3 ? table[q][k] : never_wins, 10 * q + k);
  };
  std::vector<L> in(4), want(4);
  for (int k = 0; k < 4; ++k) {
    in[uz(k)] = value(r, k);
    want[uz(k)] = ref::fold_left<L, Op>(n, [&](int q) { return value(q, k); });
  }
  if (n == 3) t.check(want == file_want, "the fold in rank order differs from the file's answer");
  const std::vector<L> in0 = in;
  std::vector<L> out = ref::poisoned<L>(4), red = ref::poisoned<L>(4);
  collx::allreduce<Algo>(c, std::span<const L>(in), std::span<L>(out), Op{});
  t.check(out == want, std::string(Op::name) + " allreduce");
  collx::reduce<Algo>(c, std::span<const L>(in), std::span<L>(red), n - 1, Op{});
  if (r == n - 1) t.check(red == want, std::string(Op::name) + " reduce to the last rank");
  else t.untouched(std::span<const L>(red), std::string(Op::name) + " reduce: a non-root's buffer");
  t.check(std::memcmp(in.data(), in0.data(), sizeof(L) * 4) == 0, "send buffer (padding included) changed");
}

/// T1 structs with holes: max-loc and min-loc on {int16, int32} and {double, int32}.
template <class Algo>
void t1(collx::communicator& c, tally& t) {
  t.in_case("T1 structs with holes");
  const auto file = [](std::initializer_list<std::pair<double, int>> v, auto tag) {
    std::vector<decltype(tag)> out;
    for (const auto& [val, idx] : v) out.push_back(ref::make_loc<decltype(tag)>(val, idx));
    return out;
  };
  t1_type<Algo, ref::loc16, ref::max_loc>(c, t, file({{5, 0}, {3, 11}, {9, 22}, {2, 3}}, ref::loc16{}));
  t1_type<Algo, ref::loc16, ref::min_loc>(c, t, file({{4, 20}, {1, 1}, {7, 2}, {2, 3}}, ref::loc16{}));
  t1_type<Algo, ref::loc64, ref::max_loc>(c, t, file({{5, 0}, {3, 11}, {9, 22}, {2, 3}}, ref::loc64{}));
  t1_type<Algo, ref::loc64, ref::min_loc>(c, t, file({{4, 20}, {1, 1}, {7, 2}, {2, 3}}, ref::loc64{}));
}

// =============================================================================================
// Buffer contracts

/// B1: int64 sum reduce, rank 0 [1,2,3,4], rank 1 [4,5,6,7] (others 0): in place the root gets
/// [5,7,9,11] and every other rank keeps its buffer; out of place a non-root's receive buffer
/// keeps its sentinel. Roots 0, 1 and the last rank.
template <class Algo>
void b1(collx::communicator& c, tally& t) {
  t.in_case("B1 reduce leaves non-roots alone");
  const int n = c.size(), r = c.rank();
  const std::vector<std::int64_t> mine = r == 0 ? std::vector<std::int64_t>{1, 2, 3, 4}
                                         : r == 1 ? std::vector<std::int64_t>{4, 5, 6, 7}
                                                  : std::vector<std::int64_t>(4, 0);
  const std::vector<std::int64_t> sum{5, 7, 9, 11};
  for (const int root : {0, 1, n - 1}) {
    std::vector<std::int64_t> buf = mine;
    collx::reduce<Algo>(c, std::span<std::int64_t>(buf), root);
    t.same(buf, r == root ? sum : mine, "in place, root " + std::to_string(root));
    std::vector<std::int64_t> out = ref::poisoned<std::int64_t>(4);
    collx::reduce<Algo>(c, std::span<const std::int64_t>(mine), std::span<std::int64_t>(out), root);
    if (r == root) t.same(out, sum, "out of place, root " + std::to_string(root));
    else t.untouched(std::span<const std::int64_t>(out), "out of place, root " + std::to_string(root) + ": a non-root's buffer");
  }
}

/// B2: float64 sum reduce_scatter, rank r element i = r 10^6 + i: block j element k is
/// 10^6 n(n-1)/2 + n (j recv + k); the send buffer stays bit-identical, over `iterations` calls.
template <class Algo>
void b2(collx::communicator& c, tally& t, size_t recv, int iterations) {
  t.in_case("B2 inputs are read-only");
  const int n = c.size(), r = c.rank();
  std::vector<double> send(uz(n) * recv);
  for (size_t i = 0; i < send.size(); ++i) send[i] = r * 1e6 + static_cast<double>(i);
  const std::vector<double> copy = send;
  std::vector<double> want(recv);
  for (size_t k = 0; k < recv; ++k) want[k] = 1e6 * (n * (n - 1) / 2) + double(n) * double(uz(r) * recv + k);
  for (int it = 0; it < iterations; ++it) {
    std::vector<double> out = ref::poisoned<double>(recv);
    collx::reduce_scatter<Algo>(c, std::span<const double>(send), std::span<double>(out));
    const std::string at = "recv count " + std::to_string(recv) + " iteration " + std::to_string(it);
    t.same(out, want, at);
    t.check(ref::bytes_equal<double>(send, copy), at + ": the send buffer changed");
  }
}

/// B3 in place: all_gather of [10r, 10r+1] at slot r -> [0,1,10,11,...]; float64 min allreduce in
/// place of 10, -300, -150 (others 0) -> -300.
template <class Algo>
void b3(collx::communicator& c, tally& t) {
  t.in_case("B3 in-place all-gather");
  const int n = c.size(), r = c.rank();
  std::vector<std::int32_t> buf(2 * uz(n), -1), want;
  buf[2 * uz(r)] = 10 * r, buf[2 * uz(r) + 1] = 10 * r + 1;
  for (std::int32_t q = 0; q < n; ++q) want.push_back(10 * q), want.push_back(10 * q + 1);
  collx::all_gather<Algo>(c, std::span<const std::int32_t>(&buf[2 * uz(r)], 2), std::span<std::int32_t>(buf));
  t.same(buf, want, "all_gather in place");
  const double values[] = {10, -300, -150};
  std::vector<double> m{r < 3 ? values[r] : 0.0};
  collx::allreduce<Algo>(c, std::span<double>(m), ops::min{});
  t.same(m, {-300.0}, "float64 min in place");
}

/// B4: int32 sum reduce_scatter, rank r holds [1..n](r+1): rank i gets (i+1) n(n+1)/2. Out of place
/// with a guard element behind; in place (NCCL's layout: the result at offset i count) with recv
/// count 1 and 3, every slot but the rank's own keeping its input.
template <class Algo>
void b4(collx::communicator& c, tally& t) {
  t.in_case("B4 in-place reduce-scatter");
  const int n = c.size(), r = c.rank();
  for (const size_t count : {size_t{1}, size_t{3}}) {
    std::vector<std::int32_t> in(uz(n) * count);
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::int32_t(i / count + 1) * (r + 1) + std::int32_t(i % count);
    // element i of the reduced vector: sum over q of ((i / count + 1)(q + 1) + i % count)
    const auto reduced = [&](size_t i) { return std::int32_t(i / count + 1) * (n * (n + 1) / 2) + n * std::int32_t(i % count); };
    std::vector<std::int32_t> mine(count);
    for (size_t k = 0; k < count; ++k) mine[k] = reduced(uz(r) * count + k);
    auto out = with_guard<std::int32_t>(count);
    collx::reduce_scatter<Algo>(c, std::span<const std::int32_t>(in), first(out, count));
    t.same(std::vector<std::int32_t>(out.begin(), out.end() - 1), mine, "out of place, recv count " + std::to_string(count));
    t.untouched(std::span<const std::int32_t>(&out[count], 1), "out of place guard");
    std::vector<std::int32_t> buf = in, want = in;
    for (size_t k = 0; k < count; ++k) want[uz(r) * count + k] = mine[k];
    collx::reduce_scatter<Algo>(c, std::span<const std::int32_t>(buf), std::span<std::int32_t>(&buf[uz(r) * count], count));
    t.same(buf, want, "in place, recv count " + std::to_string(count));
  }
}

/// B5: reduce_scatter_v, float32 sum, rank r element i = 100 r + i: the reduced element i is
/// 100 n(n-1)/2 + n i. Splits: [1, 2, ..., n], [n, ..., 1], one with zeros, and 73 elements split
/// [18, 19, 18, 18]-like (73 / n, the remainder to rank 1).
template <class Algo>
void b5(collx::communicator& c, tally& t) {
  t.in_case("B5 uneven reduce-scatter");
  const int n = c.size(), r = c.rank();
  std::vector<std::vector<size_t>> splits(4, std::vector<size_t>(uz(n)));
  for (int q = 0; q < n; ++q) {
    splits[0][uz(q)] = uz(q + 1);
    splits[1][uz(q)] = uz(n - q);
    splits[2][uz(q)] = q == 0 ? 0 : uz(q % 3 == 1 ? 5 : 1);  // [0, 5, 1, 1, 5, ...]
    splits[3][uz(q)] = 73 / uz(n) + (q == 1 ? 73 % uz(n) : 0);
  }
  for (const auto& counts : splits) {
    const auto at = ref::prefix(counts);
    std::vector<float> send(at[uz(n)]);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(100 * r) + static_cast<float>(i);
    std::vector<float> want;
    for (size_t i = at[uz(r)]; i < at[uz(r) + 1]; ++i) want.push_back(static_cast<float>(100 * (n * (n - 1) / 2)) + float(n) * float(i));
    auto out = with_guard<float>(want.size());
    collx::reduce_scatter_v<Algo>(c, std::span<const float>(send), first(out, want.size()), std::span<const size_t>(counts));
    std::string name = "split [";
    for (size_t q = 0; q < counts.size(); ++q) name += std::to_string(counts[q]) + (q + 1 == counts.size() ? "]" : ",");
    t.same(std::vector<float>(out.begin(), out.end() - 1), want, name);
    t.untouched(std::span<const float>(&out[want.size()], 1), name + " guard");
  }
}

/// B6 for one type and byte offset: sum of r + i over ranks at `offset` bytes into a buffer whose
/// 64 bytes before and after must stay untouched, out of place and in place.
template <class Algo, class T>
void b6_at(collx::communicator& c, tally& t, size_t offset, size_t count) {
  const int n = c.size(), r = c.rank();
  constexpr size_t pad = 64;
  constexpr unsigned char mark = 0x5A;
  std::vector<unsigned char> src(pad + offset + count * sizeof(T) + pad, mark), dst = src;
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) {
    const auto value = [i](int q) { return static_cast<T>(static_cast<float>(uz(q) + i)); };
    const T v = value(r);
    std::memcpy(&src[pad + offset + i * sizeof(T)], &v, sizeof(T));
    want[i] = ref::fold_left<T, ops::sum>(n, value);
  }
  const std::string what = ref::type_label<T>() + " count " + std::to_string(count) + " at +" + std::to_string(offset);
  const auto* sp = reinterpret_cast<const T*>(&src[pad + offset]);  // misaligned on purpose: collx copies bytes
  auto* dp = reinterpret_cast<T*>(&dst[pad + offset]);
  const auto check_pads = [&](const std::vector<unsigned char>& b, const std::string& which) {
    bool ok = true;
    for (size_t i = 0; i < pad + offset; ++i) ok = ok && b[i] == mark;
    for (size_t i = pad + offset + count * sizeof(T); i < b.size(); ++i) ok = ok && b[i] == mark;
    t.check(ok, what + ": a byte around the " + which + " buffer changed");
  };
  const auto got = [&](const std::vector<unsigned char>& b) {
    std::vector<T> v(count);
    std::memcpy(v.data(), &b[pad + offset], count * sizeof(T));
    return v;
  };
  collx::allreduce<Algo>(c, std::span<const T>(sp, count), std::span<T>(dp, count));
  t.same(got(dst), want, what + " out of place");
  check_pads(dst, "receive");
  check_pads(src, "send");
  collx::allreduce<Algo>(c, std::span<T>(reinterpret_cast<T*>(&src[pad + offset]), count));
  t.same(got(src), want, what + " in place");
  check_pads(src, "in-place");
}

/// B6 alignment: bf16 count 8 at +2 bytes, float32 at +4, +8, +12, int8 count 33 at +1.
template <class Algo>
void b6(collx::communicator& c, tally& t) {
  t.in_case("B6 alignment");
  b6_at<Algo, bfloat16>(c, t, 2, 8);
  for (const size_t offset : {4, 8, 12}) b6_at<Algo, float>(c, t, offset, 37);
  b6_at<Algo, std::int8_t>(c, t, 1, 33);
}

// =============================================================================================

/// How much of the larger inputs a run takes: the file's sizes, or smaller ones for runs that
/// repeat the cases on many world sizes and algorithms.
struct scale {
  bool c2_large = false;     ///< C2 with 10556587 elements (42 MB per rank) too
  size_t b2_recv = 32768;    ///< B2's recv count (the file: 524288 and 32768)
  int b2_iterations = 3;     ///< B2's calls (the file: 30)
};

/// Every case above, in order, on c with algorithm Algo (algo::automatic: whichever the
/// communicator's selector picks, so a selector forcing ring, tree or direct runs that one).
/// Returns this rank's failure count.
template <class Algo = collx::algo::automatic>
int every_case(collx::communicator& c, const scale& s = {}) {
  tally t(c.rank());
  std::vector<size_t> counts{1, 7, 33, 255};
  if (s.c2_large) counts.push_back(10556587);
  c2<Algo>(c, t, counts);
  c3<Algo>(c, t);
  c4<Algo>(c, t);
  a1<Algo>(c, t);
  a2<Algo>(c, t);
  a3<Algo>(c, t);
  a4<Algo>(c, t);
  t1<Algo>(c, t);
  b1<Algo>(c, t);
  b2<Algo>(c, t, s.b2_recv, s.b2_iterations);
  b3<Algo>(c, t);
  b4<Algo>(c, t);
  b5<Algo>(c, t);
  b6<Algo>(c, t);
  collx::barrier(c);  // the digest of every call above, compared between ranks
  return t.failures();
}

}  // namespace edge
