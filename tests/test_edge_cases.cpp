// The cases of docs/edge-cases.md that the host and the threads transport can run,
// one TEST_CASE per case id, with the expected values the file gives. F2, F3 (shared-memory
// transport, environment) and P1 (benchmark arithmetic) are tested elsewhere.
//
// "Every algorithm": a call through algo::automatic whose communicator selector forces ring, tree
// or direct runs the very code an explicit algo:: tag runs (run_collective with that algorithm),
// so most cases loop over the forced algorithm at run time (one instantiation per type and op)
// and also run plain algo::automatic.
#include <catch2/catch.hpp>

#include "edge_cases_per_rank.hpp"
#include "reference.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using collx::algorithm;
using collx::bfloat16;
using collx::half;
using std::size_t;
using opts_t = collx::communicator_options;
namespace ops = collx::ops;

inline size_t uz(int x) { return static_cast<size_t>(x); }

/// One of "every algorithm": its name and the options that select it.
struct algo_opts {
  std::string name;
  opts_t o;
};

/// The option sets of "every algorithm": each one forced, and automatic's own choice.
std::vector<algo_opts> every_algorithm(const opts_t& base = ref::test_options()) {
  return {{"ring", ref::forcing(algorithm::ring, base)},
          {"tree", ref::forcing(algorithm::tree, base)},
          {"direct", ref::forcing(algorithm::direct, base)},
          {"automatic", base}};
}

template <class T>
std::vector<T> fill(size_t count, T v) {
  return std::vector<T>(count, v);
}

template <class T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// Out-of-place allreduce of in[r] on n ranks with options o; returns each rank's result.
template <class T, class Op = ops::sum>
std::vector<std::vector<T>> allreduce_all(const std::vector<std::vector<T>>& in, const opts_t& o, Op op = {}) {
  const int n = static_cast<int>(in.size());
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = ref::poisoned<T>(in[uz(r)].size());
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        collx::allreduce(c, std::span<const T>(in[r]), std::span<T>(out[r]), op);
      },
      o);
  return out;
}

/// Every rank's result equals want[i] (bitwise) for every i.
template <class T>
void require_all(const std::vector<std::vector<T>>& got, const std::vector<T>& want) {
  for (size_t r = 0; r < got.size(); ++r) {
    const size_t i = ref::first_difference<T>(got[r], want);
    INFO("rank " << r << " element " << i << ": got "
                 << (i < got[r].size() ? ref::show(got[r][i]) : std::string("-")) << ", want "
                 << (i < want.size() ? ref::show(want[i]) : std::string("-")));
    REQUIRE(i == ref::npos);
  }
}

}  // namespace

// =============================================================================================
// Counts, chunking and tails

namespace {
template <class T, class Op>
void c1_case(size_t count, const opts_t& o) {
  INFO(ref::type_label<T>() << " " << ref::op_name<Op>() << " count " << count);
  // Any bit pattern at all (NaNs, infinities, subnormals): with one rank the output is the input.
  std::vector<T> in(count);
  for (size_t i = 0; i < count; ++i) {
    const std::uint64_t h = ref::hash(0, i, 101);
    std::memcpy(static_cast<void*>(&in[i]), &h, sizeof(T));
  }
  std::vector<T> out = ref::poisoned<T>(count);  // 0xFF bytes: a NaN bit pattern
  ref::run_ranks(1, [&](collx::communicator& c) { collx::allreduce(c, std::span<const T>(in), std::span<T>(out), Op{}); }, o);
  REQUIRE(bytes_of(out) == bytes_of(in));
}
}  // namespace

TEST_CASE("C1 single rank: every op on bf16 and float32, out of place over a NaN pattern, output == input bit for bit",
          "[edge][C1]") {
  for (const size_t count : {1, 7, 8, 9, 255, 256, 257, 263, 264, 265, 520, 1048584})
    for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
      INFO("algorithm " << ao.name);
      c1_case<bfloat16, ops::sum>(count, o);
      c1_case<bfloat16, ops::prod>(count, o);
      c1_case<bfloat16, ops::min>(count, o);
      c1_case<bfloat16, ops::max>(count, o);
      c1_case<bfloat16, ops::avg>(count, o);
      c1_case<float, ops::sum>(count, o);
      c1_case<float, ops::prod>(count, o);
      c1_case<float, ops::min>(count, o);
      c1_case<float, ops::max>(count, o);
      c1_case<float, ops::avg>(count, o);
    }
}

TEST_CASE("C2 uneven split: float32 sum, rank r element i = (i mod 1024) + r, exact n(i mod 1024) + n(n-1)/2",
          "[edge][C2]") {
  auto run = [](int n, size_t count, const opts_t& o) {
    INFO("n=" << n << " count=" << count);
    std::vector<std::vector<float>> in(uz(n));
    for (int r = 0; r < n; ++r) {
      in[uz(r)].resize(count);
      for (size_t i = 0; i < count; ++i) in[uz(r)][i] = static_cast<float>(i % 1024 + uz(r));
    }
    const auto out = allreduce_all(in, o);
    for (int r = 0; r < n; ++r) {
      size_t bad = ref::npos;
      for (size_t i = 0; i < count && bad == ref::npos; ++i)
        if (out[uz(r)][i] != static_cast<float>(uz(n) * (i % 1024) + uz(n * (n - 1) / 2))) bad = i;
      INFO("rank " << r << " first wrong element " << bad);
      REQUIRE(bad == ref::npos);
    }
  };
  for (int n : {3, 5, 6, 7, 8})
    for (size_t count : {1, 7, 33, 255})
      for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
        INFO("algorithm " << ao.name);
        run(n, count, o);
      }
  // 10556587 elements (42 MB per rank): n = 3, every algorithm.
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    run(3, 10556587, o);
  }
}

TEST_CASE("C3 fewer elements than ranks: int32 sum, rank r holds r+1 -> n(n+1)/2, promptly, every algorithm",
          "[edge][C3]") {
  opts_t base = ref::test_options();
  base.timeout = std::chrono::seconds(10);  // "promptly": a stuck call fails within 10 s
  for (int n : {3, 4, 8})
    for (const auto& ao : every_algorithm(base)) {
    const opts_t& o = ao.o;
      INFO("n=" << n << " algorithm " << ao.name);
      const std::int32_t want = n * (n + 1) / 2;
      for (size_t count : {size_t{1}, size_t{2}, uz(n - 1), uz(n), uz(n + 1)}) {
        INFO("count " << count);
        std::vector<std::vector<std::int32_t>> in(uz(n));
        for (int r = 0; r < n; ++r) in[uz(r)] = fill<std::int32_t>(count, r + 1);
        const auto t0 = ref::clock::now();
        require_all(allreduce_all(in, o), fill<std::int32_t>(count, want));
        CHECK(ref::seconds_since(t0) < 5.0);
      }
      // all-gather with 1 element per rank, reduce-scatter with recv count 1
      std::vector<std::vector<std::int32_t>> gathered(uz(n)), scattered(uz(n));
      ref::run_ranks(
          n,
          [&](collx::communicator& c) {
            const int r = c.rank();
            const std::int32_t mine = r + 1;
            gathered[uz(r)] = ref::poisoned<std::int32_t>(uz(n));
            collx::all_gather(c, std::span<const std::int32_t>(&mine, 1), std::span<std::int32_t>(gathered[uz(r)]));
            const auto send = fill<std::int32_t>(uz(n), r + 1);
            scattered[uz(r)] = ref::poisoned<std::int32_t>(1);
            collx::reduce_scatter(c, std::span<const std::int32_t>(send), std::span<std::int32_t>(scattered[uz(r)]));
          },
          o);
      std::vector<std::int32_t> ranks1(uz(n));
      for (int r = 0; r < n; ++r) ranks1[uz(r)] = r + 1;
      require_all(gathered, ranks1);
      require_all(scattered, fill<std::int32_t>(1, want));
    }
}

namespace {
// C4: every collective with zero elements, pointers valid (into a poisoned buffer that must stay
// untouched), null, or send == recv; then an allreduce that proves the ranks are still in step.
template <class T, class Op>
void c4_case(int n, const opts_t& o, Op op = {}) {
  INFO(ref::type_label<T>() << " n=" << n);
  constexpr size_t cap = 16;
  std::vector<std::vector<T>> a(uz(n)), b(uz(n));  // valid memory behind the zero-length spans
  for (int r = 0; r < n; ++r) a[uz(r)] = ref::gen_vec<T>(r, cap, ref::flavor::general, 3), b[uz(r)] = ref::poisoned<T>(cap);
  const auto a0 = a, b0 = b;
  std::vector<std::vector<std::int32_t>> after(uz(n)), pair_out(uz(n));
  const std::vector<size_t> zeros(uz(n), 0);
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        enum { valid, null, same };
        for (int kind : {valid, null, same}) {
          const T* s = kind == valid ? a[r].data() : kind == null ? nullptr : b[r].data();
          T* d = kind == null ? nullptr : b[r].data();
          std::span<const T> S(s, size_t{0});
          std::span<T> D(d, size_t{0});
          collx::allreduce(c, S, D, op);
          collx::reduce_scatter(c, S, D, op);
          collx::reduce_scatter_v(c, S, D, std::span<const size_t>(zeros), op);
          collx::all_gather(c, S, D);
          collx::all_gather_v(c, S, D, std::span<const size_t>(zeros));
          collx::broadcast(c, S, D, 0);
          collx::reduce(c, S, D, n - 1, op);
          collx::all_to_all(c, S, D);
          collx::all_to_all_v(c, S, std::span<const size_t>(zeros), D, std::span<const size_t>(zeros));
          if (r < 2) {  // a zero-length message between ranks 0 and 1
            if (r == 0) collx::send(c, S, 1);
            else collx::recv(c, D, 0);
          }
        }
        // all_to_all_v where one pair (0 -> 1) exchanges 0 elements and the others 2
        std::vector<size_t> sc(uz(n), 2), rc(uz(n), 2);
        if (r == 0) sc[1] = 0;
        if (r == 1) rc[0] = 0;
        std::vector<std::int32_t> send;
        for (int q = 0; q < n; ++q)
          for (size_t k = 0; k < sc[uz(q)]; ++k) send.push_back(static_cast<std::int32_t>(100 * r + 10 * uz(q) + k));
        pair_out[r] = ref::poisoned<std::int32_t>(2 * uz(n) - (r == 1 ? 2 : 0));
        collx::all_to_all_v(c, std::span<const std::int32_t>(send), std::span<const size_t>(sc),
                            std::span<std::int32_t>(pair_out[r]), std::span<const size_t>(rc));
        // still in step
        const auto x = fill<std::int32_t>(4, static_cast<std::int32_t>(r) + 1);
        after[r] = ref::poisoned<std::int32_t>(4);
        collx::allreduce(c, std::span<const std::int32_t>(x), std::span<std::int32_t>(after[r]));
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(bytes_of(a[uz(r)]) == bytes_of(a0[uz(r)]));  // no byte touched
    REQUIRE(bytes_of(b[uz(r)]) == bytes_of(b0[uz(r)]));
    std::vector<std::int32_t> want;
    for (int q = 0; q < n; ++q)
      if (!(q == 0 && r == 1))
        for (std::int32_t k = 0; k < 2; ++k) want.push_back(100 * q + 10 * r + k);
    REQUIRE(pair_out[uz(r)] == want);
  }
  require_all(after, fill<std::int32_t>(4, n * (n + 1) / 2));
}
}  // namespace

TEST_CASE("C4 zero elements: every collective, valid / null / send == recv pointers, then still in step", "[edge][C4]") {
  for (int n : {2, 4})
    for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
      INFO("algorithm " << ao.name);
      c4_case<float, ops::sum>(n, o);
      c4_case<std::int8_t, ops::sum>(n, o);
      c4_case<ref::loc16, ref::min_loc>(n, o);
    }
}

// =============================================================================================
// Arithmetic

namespace {
template <class T>
void a1_case(T x0, T x1, T want, const opts_t& o) {
  INFO(ref::type_label<T>() << " " << ref::show(x0) << " + " << ref::show(x1));
  for (size_t count : {7, 8, 9, 16, 17}) {
    INFO("count " << count);
    require_all(allreduce_all<T>({fill(count, x0), fill(count, x1)}, o), fill(count, want));
    // reduce_scatter: blocks of `count` elements
    std::vector<std::vector<T>> rs(2);
    ref::run_ranks(
        2,
        [&](collx::communicator& c) {
          const auto send = fill(2 * count, c.rank() == 0 ? x0 : x1);
          rs[uz(c.rank())] = ref::poisoned<T>(count);
          collx::reduce_scatter(c, std::span<const T>(send), std::span<T>(rs[uz(c.rank())]));
        },
        o);
    require_all(rs, fill(count, want));
  }
}
}  // namespace

TEST_CASE("A1 integer wrap-around: n = 2 sum wraps modulo 2^bits for every count and algorithm", "[edge][A1]") {
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    a1_case<std::int16_t>(16384, 16384, -32768, o);
    a1_case<std::uint8_t>(200, 100, 44, o);
    a1_case<std::int8_t>(100, 100, -56, o);
    a1_case<std::int32_t>(2147483647, 1, -2147483647 - 1, o);
  }
}

namespace {
// The correctly rounded fp16 sum of two fp16 values (exact in double, rounded once here).
half fp16_sum(half a, half b) { return ref::round_narrow<half>(ref::to_double(a) + ref::to_double(b)); }
}  // namespace

TEST_CASE("A2 fp16 rounding: n = 2 fp16 sum pairs, every finite encoding, a million random patterns", "[edge][A2]") {
  const auto h = [](double d) { return ref::round_narrow<half>(d); };
  std::vector<half> x0, x1, want;
  for (const auto& p : edge::a2_pairs()) {
    x0.push_back(h(p.a)), x1.push_back(h(p.b)), want.push_back(h(p.sum));
    REQUIRE(ref::to_double(h(p.a)) == p.a);  // the operands are fp16 values as written
  }
  // the listed answers are the correctly rounded ones
  for (size_t i = 0; i < x0.size(); ++i) REQUIRE(fp16_sum(x0[i], x1[i]) == want[i]);
  REQUIRE(want[3].bits == 0x0000);  // -65504 + 65504 is +0

  // Every finite fp16 encoding (rank 0) against a fixed pseudo-random finite vector (rank 1).
  std::vector<half> all_finite, fixed;
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits)
    if ((bits & 0x7c00u) != 0x7c00u) all_finite.push_back(half::from_bits(static_cast<std::uint16_t>(bits)));
  REQUIRE(all_finite.size() == 63488);
  for (size_t i = 0; i < all_finite.size(); ++i) {
    std::uint16_t b = 0;
    for (std::uint64_t salt = 1; salt == 1 || (b & 0x7c00u) == 0x7c00u; ++salt)
      b = static_cast<std::uint16_t>(ref::hash(7, i, salt));
    fixed.push_back(half::from_bits(b));
  }
  std::vector<half> want_finite(all_finite.size());
  for (size_t i = 0; i < all_finite.size(); ++i) want_finite[i] = fp16_sum(all_finite[i], fixed[i]);
  // A million random bit patterns (NaNs included: any NaN is right when the exact sum is NaN).
  constexpr size_t million = 1000000;
  std::vector<half> r0(million), r1(million);
  for (size_t i = 0; i < million; ++i) {
    const std::uint64_t v = ref::hash(0, i, 2024);
    r0[i] = half::from_bits(static_cast<std::uint16_t>(v)), r1[i] = half::from_bits(static_cast<std::uint16_t>(v >> 16));
  }

  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    require_all(allreduce_all<half>({x0, x1}, o), want);
    require_all(allreduce_all<half>({all_finite, fixed}, o), want_finite);
    const auto got = allreduce_all<half>({r0, r1}, o);
    for (int r = 0; r < 2; ++r) {
      size_t bad = ref::npos;
      for (size_t i = 0; i < million && bad == ref::npos; ++i) {
        const double exact = ref::to_double(r0[i]) + ref::to_double(r1[i]);
        const half g = got[uz(r)][i];
        const bool ok = std::isnan(exact) ? std::isnan(ref::to_double(g)) : g == ref::round_narrow<half>(exact);
        if (!ok) bad = i;
      }
      INFO("rank " << r << " first wrong random pair " << bad
                   << (bad == ref::npos ? std::string()
                                        : ": " + ref::show(r0[bad]) + " + " + ref::show(r1[bad]) + " gave " +
                                              ref::show(got[uz(r)][bad])));
      REQUIRE(bad == ref::npos);
    }
  }
}

TEST_CASE("A3 low-precision accumulation: n = 8 bf16 sum of 256 + 7 x 1 is 264 on every rank, every algorithm",
          "[edge][A3]") {
  // collx widens bf16 to fp32 when first read, keeps every partial (also those sent between ranks)
  // in fp32, and rounds once when writing the output (ops.hpp): 263 exactly, rounded once -> 264.
  const auto b = [](double d) { return ref::round_narrow<bfloat16>(d); };
  REQUIRE(ref::to_double(b(263)) == 264);
  {  // rounding each partial to bf16 would give 256 (256 + 1 -> 257 -> 256 by ties-to-even, 7 times)
    double chain = 256;
    for (int i = 0; i < 7; ++i) chain = ref::to_double(b(chain + 1));
    REQUIRE(chain == 256);
  }
  const int n = 8;
  for (int big = 0; big < n; ++big)  // the 256 on every rank in turn: any chain start
    for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
      INFO("256 on rank " << big << ", algorithm " << ao.name);
      std::vector<std::vector<bfloat16>> in(uz(n));
      for (int r = 0; r < n; ++r) in[uz(r)] = {b(r == big ? 256 : 1)};
      require_all(allreduce_all(in, o), {b(264)});
      // reduce to root 0 and root 7, reduce_scatter with recv count 1
      std::vector<std::vector<bfloat16>> red(uz(n)), rs(uz(n));
      ref::run_ranks(
          n,
          [&](collx::communicator& c) {
            const size_t r = uz(c.rank());
            red[r] = ref::poisoned<bfloat16>(2);
            collx::reduce(c, std::span<const bfloat16>(in[r]), std::span<bfloat16>(&red[r][0], 1), 0);
            collx::reduce(c, std::span<const bfloat16>(in[r]), std::span<bfloat16>(&red[r][1], 1), 7);
            const std::vector<bfloat16> send(uz(n), in[r][0]);
            rs[r] = ref::poisoned<bfloat16>(1);
            collx::reduce_scatter(c, std::span<const bfloat16>(send), std::span<bfloat16>(rs[r]));
          },
          o);
      REQUIRE(red[0][0] == b(264));
      REQUIRE(red[7][1] == b(264));
      require_all(rs, {b(264)});
    }
}

TEST_CASE("A4 average: divisor is n (floats exact, int32 truncates), allreduce / reduce / reduce_scatter", "[edge][A4]") {
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    auto check = [&o](auto tag, int n, const auto& in, const auto& want) {
      using T = decltype(tag);
      const size_t count = want.size();
      // allreduce
      require_all(allreduce_all<T, ops::avg>(in, o), want);
      // reduce to every root
      for (int root = 0; root < n; ++root) {
        std::vector<std::vector<T>> out(uz(n));
        ref::run_ranks(
            n,
            [&](collx::communicator& c) {
              const size_t r = uz(c.rank());
              out[r] = ref::poisoned<T>(count);
              collx::reduce(c, std::span<const T>(in[r]), std::span<T>(out[r]), root, ops::avg{});
            },
            o);
        INFO("reduce to " << root);
        REQUIRE(out[uz(root)] == want);
      }
      // reduce_scatter: each rank sends n copies of its vector and gets the whole average back
      std::vector<std::vector<T>> rs(uz(n));
      ref::run_ranks(
          n,
          [&](collx::communicator& c) {
            const size_t r = uz(c.rank());
            std::vector<T> send;
            for (int k = 0; k < n; ++k) send.insert(send.end(), in[r].begin(), in[r].end());
            rs[r] = ref::poisoned<T>(count);
            collx::reduce_scatter(c, std::span<const T>(send), std::span<T>(rs[r]), ops::avg{});
          },
          o);
      require_all(rs, want);
    };
    check(float{}, 2, std::vector<std::vector<float>>{{1, 2, 3, 4}, {3, 4, 5, 6}}, std::vector<float>{2, 3, 4, 5});
    check(std::int32_t{}, 2, std::vector<std::vector<std::int32_t>>{{3, 4, 5, -3}, {4, 4, 4, 0}},
          std::vector<std::int32_t>{3, 4, 4, -1});
    check(float{}, 3, std::vector<std::vector<float>>{{3, 1}, {6, 1}, {9, 1}}, std::vector<float>{6, 1});
  }
}

TEST_CASE("A5 reproducibility: n = 4 bf16 sum of R copies of a row, repeats bit-identical; direct row 0 independent "
          "of R and of fused vs split calls",
          "[edge][A5]") {
  constexpr int n = 4;
  constexpr size_t row = 5120;
  // One fixed pseudo-random row per rank, magnitudes 2^-20 .. 2^20 so that fp32 sums round (the
  // order of combination matters).
  std::vector<std::vector<bfloat16>> rows(uz(n));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < row; ++i) {
      const std::uint64_t h = ref::hash(r, i, 55);
      const std::uint16_t bits =
          static_cast<std::uint16_t>((h & 0x8000u) | ((127u + (h >> 16) % 41u - 20u) << 7) | ((h >> 32) & 0x7fu));
      rows[uz(r)].push_back(bfloat16::from_bits(bits));
    }
  struct algo_case {
    const char* name;
    opts_t o;
    bool rank_ordered;
  };
  const algo_case algos[] = {{"ring", ref::forcing(algorithm::ring), false},
                             {"tree", ref::forcing(algorithm::tree), true},
                             {"direct", ref::forcing(algorithm::direct), true},
                             {"automatic", ref::test_options(), false}};
  for (const auto& a : algos) {
    INFO("algorithm " << a.name);
    std::optional<std::vector<bfloat16>> row0;  // rank-ordered algorithms: row 0 of the result
    for (size_t R : {1, 2, 4, 1664, 2048}) {
      // 100 repeats up to R = 4; the 8.5M- and 10.5M-element buffers repeat 8 times (run time;
      // 2 under the sanitizers).
      const int repeats = R <= 4 ? 100 : ref::sanitized ? 2 : 8;
      INFO("R=" << R << " repeats " << repeats);
      const size_t count = R * row;
      std::vector<std::vector<bfloat16>> first(uz(n));
      std::atomic<int> differing{0};
      ref::run_ranks(
          n,
          [&](collx::communicator& c) {
            const size_t r = uz(c.rank());
            std::vector<bfloat16> send;
            send.reserve(count);
            for (size_t k = 0; k < R; ++k) send.insert(send.end(), rows[r].begin(), rows[r].end());
            std::vector<bfloat16> out(count);
            for (int rep = 0; rep < repeats; ++rep) {
              ref::poison(std::span<bfloat16>(out));
              collx::allreduce(c, std::span<const bfloat16>(send), std::span<bfloat16>(out));
              if (rep == 0) first[r] = out;
              else if (std::memcmp(out.data(), first[r].data(), count * sizeof(bfloat16)) != 0) differing.fetch_add(1);
            }
          },
          a.o);
      REQUIRE(differing.load() == 0);
      for (int r = 1; r < n; ++r) REQUIRE(bytes_of(first[uz(r)]) == bytes_of(first[0]));
      if (a.rank_ordered) {
        const std::vector<bfloat16> r0(first[0].begin(), first[0].begin() + row);
        if (!row0) row0 = r0;
        REQUIRE(bytes_of(r0) == bytes_of(*row0));
        // and every copy of the row in the buffer is the same
        for (size_t k = 1; k < R; ++k)
          REQUIRE(std::memcmp(first[0].data() + k * row, r0.data(), row * sizeof(bfloat16)) == 0);
      }
    }
    if (a.rank_ordered) {
      // one fused call over 2 rows versus two separate calls over one row each
      std::vector<std::vector<bfloat16>> fused(uz(n)), split(uz(n));
      ref::run_ranks(
          n,
          [&](collx::communicator& c) {
            const size_t r = uz(c.rank());
            std::vector<bfloat16> send(rows[r]);
            send.insert(send.end(), rows[r].begin(), rows[r].end());
            fused[r].resize(2 * row), split[r].resize(2 * row);
            collx::allreduce(c, std::span<const bfloat16>(send), std::span<bfloat16>(fused[r]));
            collx::allreduce(c, std::span<const bfloat16>(send.data(), row), std::span<bfloat16>(split[r].data(), row));
            collx::allreduce(c, std::span<const bfloat16>(send.data() + row, row),
                             std::span<bfloat16>(split[r].data() + row, row));
          },
          a.o);
      for (int r = 0; r < n; ++r) {
        REQUIRE(bytes_of(fused[uz(r)]) == bytes_of(split[uz(r)]));
        REQUIRE(std::memcmp(fused[uz(r)].data(), row0->data(), row * sizeof(bfloat16)) == 0);
      }
    }
  }
  // The row really is order-sensitive: the rank-order fold and the reverse fold differ somewhere.
  size_t differ = 0;
  for (size_t i = 0; i < row; ++i) {
    float fwd = 0, rev = 0;
    for (int r = 0; r < n; ++r) fwd += static_cast<float>(ref::to_double(rows[uz(r)][i]));
    for (int r = n - 1; r >= 0; --r) rev += static_cast<float>(ref::to_double(rows[uz(r)][i]));
    differ += ref::round_narrow<bfloat16>(fwd) != ref::round_narrow<bfloat16>(rev);
  }
  CHECK(differ > 0);
}

// =============================================================================================
// Custom types and ops

namespace {
template <class L, class Op>
void t1_case(const std::vector<L>& want, const opts_t& o) {
  const int n = 3;
  const std::int16_t v[3][4] = {{5, 1, 7, 2}, {5, 3, 7, 2}, {4, 3, 9, 2}};
  std::vector<std::vector<L>> in(uz(n));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 4; ++i) in[uz(r)].push_back(ref::make_loc<L>(v[r][i], 10 * r + i));
  const auto in0 = in;
  std::vector<std::vector<L>> out(uz(n)), red(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        out[r] = ref::poisoned<L>(4);  // exactly count elements: ASan sees any access past them
        collx::allreduce(c, std::span<const L>(in[r]), std::span<L>(out[r]), Op{});
        red[r] = ref::poisoned<L>(4);
        collx::reduce(c, std::span<const L>(in[r]), std::span<L>(red[r]), 2, Op{});
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(bytes_of(in[uz(r)]) == bytes_of(in0[uz(r)]));  // padding included
    REQUIRE(out[uz(r)] == want);
  }
  REQUIRE(red[2] == want);
  REQUIRE(bytes_of(red[0]) == bytes_of(ref::poisoned<L>(4)));
}
}  // namespace

TEST_CASE("T1 structs with holes: max-loc and min-loc on {int16, int32} and {double, int32}, n = 3", "[edge][T1]") {
  using ref::loc16;
  using ref::loc64;
  const auto L16 = [](std::vector<std::pair<int, int>> p) {
    std::vector<loc16> v;
    for (auto [a, b] : p) v.push_back(ref::make_loc<loc16>(a, b));
    return v;
  };
  const auto L64 = [](std::vector<std::pair<int, int>> p) {
    std::vector<loc64> v;
    for (auto [a, b] : p) v.push_back(ref::make_loc<loc64>(a, b));
    return v;
  };
  const std::vector<std::pair<int, int>> max_want{{5, 0}, {3, 11}, {9, 22}, {2, 3}};
  const std::vector<std::pair<int, int>> min_want{{4, 20}, {1, 1}, {7, 2}, {2, 3}};
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    t1_case<loc16, ref::max_loc>(L16(max_want), o);
    t1_case<loc16, ref::min_loc>(L16(min_want), o);
    t1_case<loc64, ref::max_loc>(L64(max_want), o);
    t1_case<loc64, ref::min_loc>(L64(min_want), o);
  }
}

namespace {
/// An element without a default constructor (the element concept does not ask for one).
struct no_default {
  explicit no_default(double x) : v(x) {}
  double v;
};
struct add_no_default {
  static constexpr bool commutative = true;
  static constexpr const char* name = "add_no_default";
  no_default operator()(const no_default& a, const no_default& b) const { return no_default(a.v + b.v); }
};
}  // namespace

TEST_CASE("T3 an element type without a default constructor reduces on every algorithm", "[edge][T3]") {
  for (const auto& ao : every_algorithm()) {
    INFO("algorithm " << ao.name);
    std::atomic<int> wrong{0};
    ref::run_ranks(
        3,
        [&](collx::communicator& c) {
          std::vector<no_default> x;
          for (size_t i = 0; i < 37; ++i) x.emplace_back(100.0 * c.rank() + static_cast<double>(i));
          collx::allreduce(c, std::span<no_default>(x), add_no_default{});
          for (size_t i = 0; i < x.size(); ++i) wrong += x[i].v != 300.0 + 3.0 * static_cast<double>(i);
        },
        ao.o);
    CHECK(wrong == 0);
  }
}

TEST_CASE("T2 over-aligned elements (alignas 32, 128) reach the op aligned on every algorithm", "[edge][T2]") {
  // Scratch memory was 64-byte aligned: an alignas(128) accumulator sat off its alignment there.
  for (const auto& ao : every_algorithm()) {
    INFO("algorithm " << ao.name);
    ref::misaligned_operands = 0;
    std::atomic<long> wrong{0};
    ref::run_ranks(
        3, [&](collx::communicator& c) { wrong += ref::over_aligned_errors<32>(c) + ref::over_aligned_errors<128>(c); },
        ao.o);
    CHECK(wrong == 0);
    CHECK(ref::misaligned_operands == 0);
  }
}

// =============================================================================================
// Buffer contracts

TEST_CASE("B1 reduce leaves non-roots alone: n = 2 int64 sum, in place and out of place", "[edge][B1]") {
  for (const auto& ao : every_algorithm())
    for (int root : {0, 1}) {
      INFO("algorithm " << ao.name << " root " << root);
      const opts_t& o = ao.o;
      const std::vector<std::vector<std::int64_t>> in{{1, 2, 3, 4}, {4, 5, 6, 7}};
      std::vector<std::vector<std::int64_t>> buf = in, out(2);
      ref::run_ranks(
          2,
          [&](collx::communicator& c) {
            const size_t r = uz(c.rank());
            collx::reduce(c, std::span<std::int64_t>(buf[r]), root);  // in place
            out[r] = ref::poisoned<std::int64_t>(4);
            collx::reduce(c, std::span<const std::int64_t>(in[r]), std::span<std::int64_t>(out[r]), root);
          },
          o);
      const std::vector<std::int64_t> sum{5, 7, 9, 11};
      REQUIRE(buf[uz(root)] == sum);
      REQUIRE(buf[uz(1 - root)] == in[uz(1 - root)]);
      REQUIRE(out[uz(root)] == sum);
      REQUIRE(bytes_of(out[uz(1 - root)]) == bytes_of(ref::poisoned<std::int64_t>(4)));  // keeps its sentinel
    }
}

TEST_CASE("B2 inputs are read-only: float64 sum reduce_scatter, send buffers bit-identical, 30 iterations identical",
          "[edge][B2]") {
  for (size_t count : {size_t{524288}, size_t{32768}})
    for (int n : {2, 3, 4})
      for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
        INFO("recv count " << count << " n=" << n << " algorithm " << ao.name);
        const int iterations = ref::sanitized && count > 32768 ? 4 : 30;  // sanitizers: run time
        std::atomic<int> bad_send{0}, bad_result{0}, not_identical{0};
        ref::run_ranks(
            n,
            [&](collx::communicator& c) {
              const int r = c.rank();
              std::vector<double> send(uz(n) * count);
              for (size_t i = 0; i < send.size(); ++i) send[i] = r * 1e6 + static_cast<double>(i);
              const std::vector<double> copy = send;
              std::vector<double> out(count), first;
              for (int it = 0; it < iterations; ++it) {
                ref::poison(std::span<double>(out));
                collx::reduce_scatter(c, std::span<const double>(send), std::span<double>(out));
                if (std::memcmp(send.data(), copy.data(), send.size() * sizeof(double)) != 0) bad_send.fetch_add(1);
                if (it == 0) {
                  first = out;
                  for (size_t j = 0; j < count; ++j) {
                    // sum over q of (q 1e6 + r count + j)
                    const double want = 1e6 * (n * (n - 1) / 2) + n * static_cast<double>(uz(r) * count + j);
                    if (out[j] != want) {
                      bad_result.fetch_add(1);
                      break;
                    }
                  }
                  if (n == 2 && out[count - 1] != (r == 0 ? 1000000.0 : 2048576.0) + 2.0 * static_cast<double>(count - 1) &&
                      count == 524288)
                    bad_result.fetch_add(1);
                } else if (std::memcmp(out.data(), first.data(), count * sizeof(double)) != 0) {
                  not_identical.fetch_add(1);
                }
              }
            },
            o);
        REQUIRE(bad_send.load() == 0);
        REQUIRE(bad_result.load() == 0);
        REQUIRE(not_identical.load() == 0);
      }
}

TEST_CASE("B3 in-place all-gather and all-reduce; a send pointer inside recv but not the own slot is an error",
          "[edge][B3]") {
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    const int n = 4;
    std::vector<std::vector<std::int32_t>> buf(uz(n));
    ref::run_ranks(
        n,
        [&](collx::communicator& c) {
          const int r = c.rank();
          buf[uz(r)].assign(8, -1);
          buf[uz(r)][uz(2 * r)] = 10 * r, buf[uz(r)][uz(2 * r + 1)] = 10 * r + 1;
          collx::all_gather(c, std::span<const std::int32_t>(buf[uz(r)].data() + 2 * r, 2),
                            std::span<std::int32_t>(buf[uz(r)]));
        },
        o);
    require_all(buf, {0, 1, 10, 11, 20, 21, 30, 31});

    // rank 2 passes a send that overlaps recv at the wrong offset: invalid_argument there, an error
    // (not a hang, not garbage) on every rank
    std::vector<int> codes(uz(n), 0);
    std::vector<std::vector<std::int32_t>> bad(uz(n));
    ref::run_ranks(
        n,
        [&](collx::communicator& c) {
          const int r = c.rank();
          bad[uz(r)].assign(8, -1);
          const std::int32_t* s = r == 2 ? bad[uz(r)].data() + 1 : bad[uz(r)].data() + 2 * r;
          try {
            collx::all_gather(c, std::span<const std::int32_t>(s, 2), std::span<std::int32_t>(bad[uz(r)]));
          } catch (const collx::error& e) {
            codes[uz(r)] = static_cast<int>(e.code());
          }
        },
        o);
    REQUIRE(codes[2] == static_cast<int>(collx::errc::invalid_argument));
    for (int r = 0; r < n; ++r) REQUIRE(codes[uz(r)] != 0);
    REQUIRE(bad[2] == std::vector<std::int32_t>(8, -1));  // nothing written before the error

    // in-place float64 min all-reduce
    std::vector<std::vector<double>> m{{10}, {-300}, {-150}};
    ref::run_ranks(3, [&](collx::communicator& c) { collx::allreduce(c, std::span<double>(m[uz(c.rank())]), ops::min{}); }, o);
    require_all(m, {-300.0});
  }
}

TEST_CASE("B4 in-place reduce-scatter (NCCL layout: result at offset rank * count), guards", "[edge][B4]") {
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    const int n = 4;
    auto input = [](int r) {
      return std::vector<std::int32_t>{1 * (r + 1), 2 * (r + 1), 3 * (r + 1), 4 * (r + 1)};
    };
    std::vector<std::vector<std::int32_t>> oop(uz(n)), ip(uz(n));
    ref::run_ranks(
        n,
        [&](collx::communicator& c) {
          const int r = c.rank();
          const auto send = input(r);
          oop[uz(r)] = ref::poisoned<std::int32_t>(2);  // one element longer than needed
          collx::reduce_scatter(c, std::span<const std::int32_t>(send), std::span<std::int32_t>(oop[uz(r)].data(), 1));
          ip[uz(r)] = input(r);
          collx::reduce_scatter(c, std::span<const std::int32_t>(ip[uz(r)]),
                                std::span<std::int32_t>(ip[uz(r)].data() + r, 1));
        },
        o);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      REQUIRE(oop[uz(r)][0] == 10 * (r + 1));
      REQUIRE(ref::is_poison(oop[uz(r)][1]));
      auto want = input(r);
      want[uz(r)] = 10 * (r + 1);
      REQUIRE(ip[uz(r)] == want);
    }
    REQUIRE(ip[1] == std::vector<std::int32_t>{2, 20, 6, 8});

    // recv count 3, in place: every slot but the rank's own keeps its (sentinel) value
    std::vector<std::vector<std::int32_t>> ip3(uz(n));
    ref::run_ranks(
        n,
        [&](collx::communicator& c) {
          const int r = c.rank();
          ip3[uz(r)].resize(12);
          for (int i = 0; i < 12; ++i) ip3[uz(r)][uz(i)] = 1000 * (r + 1) + i;
          collx::reduce_scatter(c, std::span<const std::int32_t>(ip3[uz(r)]),
                                std::span<std::int32_t>(ip3[uz(r)].data() + 3 * r, 3));
        },
        o);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 12; ++i) {
        INFO("rank " << r << " slot " << i);
        const bool own = i / 3 == r;
        REQUIRE(ip3[uz(r)][uz(i)] == (own ? 10000 + 4 * i : 1000 * (r + 1) + i));
      }
  }
}

TEST_CASE("B5 uneven reduce-scatter (reduce_scatter_v), float32 sum", "[edge][B5]") {
  auto run = [](int n, std::vector<size_t> counts, const opts_t& o) {
    INFO("n=" << n << " counts " << Catch::Detail::stringify(counts));
    const auto pre = ref::prefix(counts);
    std::vector<std::vector<float>> out(uz(n));
    ref::run_ranks(
        n,
        [&](collx::communicator& c) {
          const int r = c.rank();
          std::vector<float> send(pre.back());
          for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(100 * r + static_cast<int>(i));
          out[uz(r)] = ref::poisoned<float>(counts[uz(r)] + 1);
          collx::reduce_scatter_v(c, std::span<const float>(send), std::span<float>(out[uz(r)].data(), counts[uz(r)]),
                                  std::span<const size_t>(counts));
        },
        o);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      std::vector<float> want;
      for (size_t j = 0; j < counts[uz(r)]; ++j)
        want.push_back(static_cast<float>(100 * n * (n - 1) / 2 + n * static_cast<int>(pre[uz(r)] + j)));
      REQUIRE(std::vector<float>(out[uz(r)].begin(), out[uz(r)].end() - 1) == want);
      REQUIRE(ref::is_poison(out[uz(r)].back()));
    }
    return out;
  };
  for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
    INFO("algorithm " << ao.name);
    const auto out = run(3, {1, 2, 3}, o);
    REQUIRE(out[0][0] == 300.f);
    REQUIRE((out[1][0] == 303.f && out[1][1] == 306.f));
    REQUIRE((out[2][0] == 309.f && out[2][1] == 312.f && out[2][2] == 315.f));
    run(3, {3, 2, 1}, o);
    run(3, {0, 5, 1}, o);
    const auto out4 = run(4, {18, 19, 18, 18}, o);  // element i = 600 + 4i
    REQUIRE(out4[3][17] == 600.f + 4 * 72);
  }
}

namespace {
// A page-aligned arena whose last page before `tail` bytes is followed by a PROT_NONE guard page.
struct guarded {
  std::byte* base = nullptr;
  size_t size = 0, page = 0;
  explicit guarded(size_t pages) {
    page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    size = pages * page;
    void* p = ::mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    base = static_cast<std::byte*>(p);
    REQUIRE(::mprotect(base + size, page, PROT_NONE) == 0);
    std::memset(base, 0xA5, size);
  }
  ~guarded() { ::munmap(base, size + page); }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;
  std::byte* end() const { return base + size; }  // the guard page starts here
};

// n = 2 allreduce sum of count elements placed at byte offset `off` of an arena (or ending exactly
// at the guard page when off < 0); rank r element i = r + i -> 2i + 1. Every byte around the
// buffers must keep its 0xA5.
template <class T>
void b6_case(size_t count, long off, bool in_place, const opts_t& o) {
  INFO(ref::type_label<T>() << " count " << count << " offset " << off << (in_place ? " in place" : ""));
  guarded send_arena[2] = {guarded(2), guarded(2)}, recv_arena[2] = {guarded(2), guarded(2)};
  T* send[2];
  T* recv[2];
  for (int r = 0; r < 2; ++r) {
    auto place = [&](guarded& g) -> T* {
      return reinterpret_cast<T*>(off < 0 ? g.end() - count * sizeof(T) : g.base + off);
    };
    send[r] = place(send_arena[r]);
    recv[r] = in_place ? send[r] : place(recv_arena[r]);
    for (size_t i = 0; i < count; ++i) {
      const T v = static_cast<T>(static_cast<float>(r + static_cast<int>(i)));
      std::memcpy(reinterpret_cast<std::byte*>(send[r]) + i * sizeof(T), &v, sizeof(T));
    }
  }
  ref::run_ranks(
      2,
      [&](collx::communicator& c) {
        const int r = c.rank();
        collx::allreduce(c, std::span<const T>(send[r], count), std::span<T>(recv[r], count));
      },
      o);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    for (size_t i = 0; i < count; ++i) {
      T g;
      std::memcpy(&g, reinterpret_cast<const std::byte*>(recv[r]) + i * sizeof(T), sizeof(T));
      const T want = static_cast<T>(static_cast<float>(2 * i + 1));
      INFO("element " << i);
      REQUIRE(ref::same(g, want));
      if (!in_place) {
        T s;
        std::memcpy(&s, reinterpret_cast<const std::byte*>(send[r]) + i * sizeof(T), sizeof(T));
        REQUIRE(ref::same(s, static_cast<T>(static_cast<float>(r + static_cast<int>(i)))));
      }
    }
    auto untouched_outside = [&](const guarded& g, const T* p) {
      const auto* lo = reinterpret_cast<const std::byte*>(p);
      const auto* hi = lo + count * sizeof(T);
      for (const std::byte* q = g.base; q < g.end(); ++q)
        if ((q < lo || q >= hi) && *q != std::byte{0xA5}) return false;
      return true;
    };
    REQUIRE(untouched_outside(send_arena[r], send[r]));
    if (!in_place) REQUIRE(untouched_outside(recv_arena[r], recv[r]));
  }
}
}  // namespace

TEST_CASE("B6 alignment and over-read: odd offsets, and buffers ending at a PROT_NONE guard page", "[edge][B6]") {
  for (const auto& ao : every_algorithm())
    for (bool ip : {false, true}) {
      INFO("algorithm " << ao.name);
      const opts_t& o = ao.o;
      b6_case<bfloat16>(8, 2, ip, o);
      for (long off : {4, 8, 12}) b6_case<float>(37, off, ip, o);
      b6_case<std::int8_t>(33, 1, ip, o);
      b6_case<std::int32_t>(1, -1, ip, o);  // last byte ends the page; the next page faults
      b6_case<float>(37, -1, ip, o);
      b6_case<bfloat16>(8, -1, ip, o);
    }
}

// =============================================================================================
// Failure

TEST_CASE("F1 timeout, abort, and count mismatch (threads transport)", "[edge][F1]") {
  using namespace std::chrono;
  SECTION("timeout: rank 0 calls, rank 1 never does") {
    opts_t o = ref::test_options();
    o.timeout = seconds(2);
    auto comms = collx::make_thread_communicators(2, o);
    std::atomic<bool> release{false};
    std::optional<collx::errc> code0, later0, code1;
    std::string what0;
    double waited = 0, later_s = 1e9, rank1_s = 1e9;
    std::thread rank1([&] {
      while (!release.load()) std::this_thread::sleep_for(milliseconds(5));  // "sleeps", but only until released
      std::vector<float> x(1024, 1.f);
      const auto t = ref::clock::now();
      try {
        collx::allreduce(comms[1], std::span<float>(x));
      } catch (const collx::error& e) {
        code1 = e.code();
      }
      rank1_s = ref::seconds_since(t);
    });
    {
      std::vector<float> x(1024, 1.f);
      const auto t = ref::clock::now();
      try {
        collx::allreduce(comms[0], std::span<float>(x));
      } catch (const collx::error& e) {
        code0 = e.code();
        what0 = e.what();
      }
      waited = ref::seconds_since(t);
      const auto t2 = ref::clock::now();
      try {
        collx::allreduce(comms[0], std::span<float>(x));
      } catch (const collx::error& e) {
        later0 = e.code();
      }
      later_s = ref::seconds_since(t2);
    }
    release = true;
    rank1.join();
    INFO(what0);
    REQUIRE(code0 == collx::errc::timeout);
    CHECK(waited >= 1.9);
    CHECK(waited <= 4.0);  // within about twice the timeout
    CHECK(what0.find("rank 0/2 allreduce#1") != std::string::npos);
    REQUIRE(later0.has_value());  // every later call fails at once
    CHECK(later_s < 0.5);
    REQUIRE(code1.has_value());  // and so does the late rank's
    CHECK(rank1_s < 0.5);
  }
  SECTION("abort from another thread wakes the waiter within about 1 s; later calls fail at once") {
    for (int who : {0, 1}) {  // abort through the waiting rank's communicator, or its peer's
      INFO("abort() called on rank " << who << "'s communicator");
      opts_t o = ref::test_options();
      o.timeout = seconds(30);
      auto comms = collx::make_thread_communicators(2, o);
      std::atomic<bool> release{false};
      std::optional<collx::errc> code0, later0, code1;
      double after_abort = 1e9, later_s = 1e9, rank1_s = 1e9;
      ref::clock::time_point aborted_at;
      std::thread rank1([&] {
        while (!release.load()) std::this_thread::sleep_for(milliseconds(5));
        std::vector<float> x(1024, 1.f);
        const auto t = ref::clock::now();
        try {
          collx::allreduce(comms[1], std::span<float>(x));
        } catch (const collx::error& e) {
          code1 = e.code();
        }
        rank1_s = ref::seconds_since(t);
      });
      std::thread aborter([&] {
        std::this_thread::sleep_for(milliseconds(300));
        aborted_at = ref::clock::now();
        comms[uz(who)].abort();
      });
      std::vector<float> x(1024, 1.f);
      try {
        collx::allreduce(comms[0], std::span<float>(x));
      } catch (const collx::error& e) {
        code0 = e.code();
      }
      aborter.join();
      after_abort = ref::seconds_since(aborted_at);
      const auto t2 = ref::clock::now();
      try {
        collx::barrier(comms[0]);
      } catch (const collx::error& e) {
        later0 = e.code();
      }
      later_s = ref::seconds_since(t2);
      release = true;
      rank1.join();
      REQUIRE(code0 == collx::errc::aborted);
      CHECK(after_abort < 1.0);
      REQUIRE(later0 == collx::errc::aborted);
      CHECK(later_s < 0.5);
      REQUIRE(code1 == collx::errc::aborted);
      CHECK(rank1_s < 0.5);
    }
  }
  SECTION("rank 0 count 2048 against rank 1 count 1024: mismatch on both ranks, naming the count") {
    for (const auto& ao : every_algorithm()) {
    const opts_t& o = ao.o;
      INFO("algorithm " << ao.name);
      std::vector<std::optional<collx::errc>> code(2);
      std::vector<std::string> what(2);
      ref::run_ranks(
          2,
          [&](collx::communicator& c) {
            const int r = c.rank();
            std::vector<float> x(r == 0 ? 2048 : 1024, 1.f);
            try {
              collx::allreduce(c, std::span<float>(x));
            } catch (const collx::error& e) {
              code[uz(r)] = e.code();
              what[uz(r)] = e.what();
            }
          },
          o);
      for (int r = 0; r < 2; ++r) {
        INFO("rank " << r << ": " << what[uz(r)]);
        REQUIRE(code[uz(r)] == collx::errc::mismatch);
        REQUIRE(what[uz(r)].find("count") != std::string::npos);
        REQUIRE(what[uz(r)].find("2048") != std::string::npos);
        REQUIRE(what[uz(r)].find("1024") != std::string::npos);
      }
    }
  }
}
