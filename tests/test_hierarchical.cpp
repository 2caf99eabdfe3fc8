// algo::hierarchical over threads grouped into "nodes" (make_hierarchical_thread_communicators):
// every collective against the sequential rank-order reference of tests/reference.hpp, with
// layouts that are contiguous, interleaved and uneven, segmenting forced by a small scratch bound,
// in place and out of place. Values are chosen so that the order of combination cannot change the
// exact result (integers, small dyadic floats), except for the non-commutative matrix product,
// whose result proves the rank order on contiguous nodes. Also: the layout errors, node_layout,
// failure propagation between the levels, and algo::automatic choosing hierarchical.
#include <catch2/catch.hpp>

#include "edge_cases_per_rank.hpp"
#include "reference.hpp"
#include "timed_call.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <regex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <collx/hierarchy.hpp>
#include <collx/split.hpp>
#include <collx/transport/threads.hpp>

namespace {

using std::size_t;

std::vector<std::string> ids_of(std::initializer_list<const char*> l) { return {l.begin(), l.end()}; }

// Node layouts: contiguous 2x2 and 3x2, interleaved 2x3 (ranks a b a b a b).
const std::vector<std::vector<std::string>>& layouts() {
  static const std::vector<std::vector<std::string>> l{
      ids_of({"n0", "n0", "n1", "n1"}),
      ids_of({"x", "x", "y", "y", "z", "z"}),
      ids_of({"a", "b", "a", "b", "a", "b"}),
      ids_of({"one", "one", "one"}),  // a single node: the node communicator runs each call whole
  };
  return l;
}

collx::communicator_options small_segments() {
  collx::communicator_options o;
  o.max_segment_bytes = 96;  // forces several segments at the counts below
  o.timeout = std::chrono::seconds(60);
  return o;
}

template <class T, class Op>
T fold(const std::vector<std::vector<T>>& in, size_t i, const Op& op) {
  return ref::fold_left<T, Op>(static_cast<int>(in.size()), [&](int r) { return in[static_cast<size_t>(r)][i]; }, op);
}

// Catch2's assertions are not thread-safe: ranks record what they found wrong, one string per
// rank, and the test thread asserts after joining (expect_clean).
struct findings {
  explicit findings(size_t n) : per_rank(n) {}
  std::vector<std::string> per_rank;
  void expect(int rank, bool ok, const std::string& what) {
    if (!ok) per_rank[static_cast<size_t>(rank)] += what + "; ";
  }
  template <class T>
  void expect_same(int rank, std::span<const T> got, std::span<const T> want, const std::string& what) {
    const size_t d = ref::first_difference(got, want);
    if (d != ref::npos)
      expect(rank, false, what + ": first difference at " + std::to_string(d) +
                              (d < got.size() && d < want.size() ? ": got " + ref::show(got[d]) + ", want " + ref::show(want[d]) : ""));
  }
  void expect_clean() const {
    for (size_t r = 0; r < per_rank.size(); ++r) {
      INFO("rank " << r << ": " << per_rank[r]);
      REQUIRE(per_rank[r].empty());
    }
  }
};

template <class T, class Op, class Algo>
void check_allreduce(const std::vector<std::string>& ids, size_t count, bool in_place, ref::flavor fl, const Op& op = {}) {
  const int n = static_cast<int>(ids.size());
  const auto in = ref::gen_ranks<T>(n, count, fl, 11);
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = fold<T, Op>(in, i, op);
  auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
  findings f(ids.size());
  collx::run_threads(comms, [&](collx::communicator& c) {
    const auto& mine = in[static_cast<size_t>(c.rank())];
    std::vector<T> buf = in_place ? mine : ref::poisoned<T>(count + 1);
    if (in_place) buf.emplace_back(), ref::poison(std::span<T>(&buf.back(), 1));
    const std::vector<T> guard(buf.end() - 1, buf.end());
    if (in_place) collx::allreduce<Algo, T, Op>(c, std::span<T>(buf.data(), count), op);
    else collx::allreduce<Algo, T, Op>(c, std::span<const T>(mine), std::span<T>(buf.data(), count), op);
    f.expect_same<T>(c.rank(), std::span<const T>(buf.data(), count), want, "allreduce");
    f.expect(c.rank(), ref::bytes_equal<T>(std::span<const T>(buf.end() - 1, buf.end()), guard), "guard overwritten");
  });
  f.expect_clean();
}

TEST_CASE("edge cases (docs/edge-cases.md) through algo::hierarchical and automatic on every layout", "[hierarchical][edge]") {
  // Each rank checks its own results (edge_cases_per_rank.hpp) and prints what it found wrong.
  for (const auto& ids : layouts()) {
    INFO("layout of " << ids.size() << " ranks, rank 1 on node " << ids[1]);
    auto comms = collx::make_hierarchical_thread_communicators(ids, ref::test_options());
    std::atomic<int> failed{0};
    collx::run_threads(comms, [&](collx::communicator& c) {
      failed += edge::every_case<collx::algo::hierarchical<>>(c);
      failed += edge::every_case<collx::algo::automatic>(c);
    });
    REQUIRE(failed == 0);
  }
}

TEST_CASE("node_layout from node ids", "[hierarchical]") {
  const auto ids = ids_of({"b", "a", "b", "a", "c", "c"});
  const auto l = collx::node_layout::from_ids(ids, 3);
  CHECK(l.node_count == 3);
  CHECK(l.node_index == 1);  // nodes numbered by their lowest rank: b=0, a=1, c=2
  CHECK(l.local_rank == 1);
  CHECK(l.local_size == 2);
  CHECK(l.uniform);
  CHECK_FALSE(l.contiguous);
  CHECK(l.world_rank(2, 1) == 5);
  CHECK(l.cross_ranks(0) == std::vector<int>{0, 1, 4});
  const auto c = collx::node_layout::from_ids(ids_of({"p", "p", "q", "q"}), 2);
  CHECK(c.contiguous);
  const auto u = collx::node_layout::from_ids(ids_of({"p", "p", "p", "q"}), 3);
  CHECK_FALSE(u.uniform);
  CHECK(u.cross_ranks(1) == std::vector<int>{1});
  CHECK_THROWS_AS(collx::node_layout::from_ids(ids_of({"p", ""}), 0), collx::error);
  CHECK_THROWS_AS(collx::node_layout::from_ids(ids_of({"p"}), 1), collx::error);
}

TEST_CASE("hierarchical allreduce: types, ops, layouts, counts, in place", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::ring, collx::algo::tree>;
  using D = collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>;
  for (const auto& ids : layouts())
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{1001}})
      for (bool in_place : {false, true}) {
        INFO("nodes " << ids.size() << " ranks, count " << count << (in_place ? " in place" : ""));
        check_allreduce<std::int32_t, collx::ops::sum, H>(ids, count, in_place, ref::flavor::general);
        check_allreduce<float, collx::ops::sum, D>(ids, count, in_place, ref::flavor::exact);
        check_allreduce<collx::half, collx::ops::sum, H>(ids, count, in_place, ref::flavor::exact);
        check_allreduce<std::int64_t, collx::ops::avg, D>(ids, count, in_place, ref::flavor::general);
        check_allreduce<collx::bfloat16, collx::ops::avg, H>(ids, count, in_place, ref::flavor::exact);
        check_allreduce<double, collx::ops::min, collx::algo::hierarchical<>>(ids, count, in_place, ref::flavor::special);
      }
}

TEST_CASE("hierarchical allreduce with a non-commutative op folds in rank order on contiguous nodes", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::tree, collx::algo::direct>;
  for (size_t count : {size_t{1}, size_t{33}, size_t{500}}) {
    check_allreduce<ref::mat2, ref::mat_mul, H>(layouts()[0], count, false, ref::flavor::general);
    check_allreduce<ref::mat2, ref::mat_mul, H>(layouts()[1], count, true, ref::flavor::general);
  }
}

template <class T, class Op, class Algo>
void check_reduce_scatter(const std::vector<std::string>& ids, const std::vector<size_t>& counts, bool varying,
                          bool in_place, const Op& op = {}) {
  const int n = static_cast<int>(ids.size());
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  std::vector<size_t> off(counts.size() + 1);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  const auto in = ref::gen_ranks<T>(n, total, ref::flavor::general, 23);
  auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
  findings f(ids.size());
  collx::run_threads(comms, [&](collx::communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    std::vector<T> send = in[r];
    std::vector<T> out = ref::poisoned<T>(counts[r] + 1);
    std::span<T> recv = in_place ? std::span<T>(send.data() + off[r], counts[r]) : std::span<T>(out.data(), counts[r]);
    if (varying) collx::reduce_scatter_v<Algo, T, Op>(c, std::span<const T>(send), recv, counts, op);
    else collx::reduce_scatter<Algo, T, Op>(c, std::span<const T>(send), recv, op);
    std::vector<T> want(counts[r]);
    for (size_t i = 0; i < counts[r]; ++i) want[i] = fold<T, Op>(in, off[r] + i, op);
    f.expect_same<T>(c.rank(), std::span<const T>(recv.data(), recv.size()), want, "reduce_scatter");
    if (!in_place) f.expect(c.rank(), ref::bytes_equal<T>(std::span<const T>(send), in[r]), "send written");
    else
      f.expect(c.rank(), ref::bytes_equal<T>(std::span<const T>(send.data(), off[r]), std::span<const T>(in[r].data(), off[r])),
               "send outside the rank's block written");
  });
  f.expect_clean();
}

TEST_CASE("hierarchical reduce_scatter and reduce_scatter_v", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::ring, collx::algo::direct>;
  for (const auto& ids : layouts()) {
    const size_t n = ids.size();
    for (size_t block : {size_t{1}, size_t{5}, size_t{64}})
      for (bool in_place : {false, true}) {
        check_reduce_scatter<std::uint32_t, collx::ops::sum, H>(ids, std::vector<size_t>(n, block), false, in_place);
        check_reduce_scatter<std::int32_t, collx::ops::avg, collx::algo::hierarchical<>>(ids, std::vector<size_t>(n, block),
                                                                                          false, in_place);
      }
    std::vector<size_t> uneven(n);
    for (size_t r = 0; r < n; ++r) uneven[r] = (r * 7) % 5;  // zeros included
    check_reduce_scatter<std::int64_t, collx::ops::bxor, H>(ids, uneven, true, false);
    check_reduce_scatter<std::int64_t, collx::ops::max, H>(ids, uneven, true, true);
  }
  using T = collx::algo::hierarchical<collx::algo::tree, collx::algo::tree>;
  check_reduce_scatter<ref::mat2, ref::mat_mul, T>(layouts()[1], {3, 0, 2, 9, 1, 4}, true, false);
}

template <class T, class Algo>
void check_all_gather(const std::vector<std::string>& ids, const std::vector<size_t>& counts, bool varying, bool in_place) {
  const int n = static_cast<int>(ids.size());
  std::vector<size_t> off(counts.size() + 1);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  std::vector<std::vector<T>> in;
  for (int r = 0; r < n; ++r) in.push_back(ref::gen_vec<T>(r, counts[static_cast<size_t>(r)], ref::flavor::general, 5));
  auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
  findings f(ids.size());
  collx::run_threads(comms, [&](collx::communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    std::vector<T> out = ref::poisoned<T>(off.back() + 1);
    std::span<T> recv(out.data(), off.back());
    std::vector<T> own = in[r];
    std::span<const T> send(own);
    if (in_place) {
      std::copy(own.begin(), own.end(), out.begin() + static_cast<std::ptrdiff_t>(off[r]));
      send = std::span<const T>(out.data() + off[r], counts[r]);
    }
    if (varying) collx::all_gather_v<Algo, T>(c, send, recv, counts);
    else collx::all_gather<Algo, T>(c, send, recv);
    std::vector<T> want;
    for (const auto& v : in) want.insert(want.end(), v.begin(), v.end());
    f.expect_same<T>(c.rank(), std::span<const T>(recv.data(), recv.size()), want, "all_gather");
    f.expect(c.rank(), ref::bytes_equal<T>(std::span<const T>(out.end() - 1, out.end()), std::span<const T>(ref::poisoned<T>(1))),
             "guard overwritten");
  });
  f.expect_clean();
}

TEST_CASE("hierarchical all_gather and all_gather_v", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::ring, collx::algo::ring>;
  for (const auto& ids : layouts()) {
    const size_t n = ids.size();
    for (size_t block : {size_t{1}, size_t{3}, size_t{50}})
      for (bool in_place : {false, true}) {
        check_all_gather<std::int16_t, H>(ids, std::vector<size_t>(n, block), false, in_place);
        check_all_gather<double, collx::algo::hierarchical<>>(ids, std::vector<size_t>(n, block), false, in_place);
      }
    std::vector<size_t> uneven(n);
    for (size_t r = 0; r < n; ++r) uneven[r] = (r * 5 + 2) % 7;
    check_all_gather<ref::loc64, H>(ids, uneven, true, false);
    check_all_gather<ref::loc64, H>(ids, uneven, true, true);
  }
}

TEST_CASE("hierarchical broadcast and reduce from every root", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::tree, collx::algo::ring>;
  for (const auto& ids : layouts()) {
    const int n = static_cast<int>(ids.size());
    for (int root = 0; root < n; ++root)
      for (size_t count : {size_t{0}, size_t{9}, size_t{300}}) {
        INFO("root " << root << " count " << count << " ranks " << n);
        const auto in = ref::gen_ranks<std::int32_t>(n, count, ref::flavor::general, 77);
        std::vector<std::int32_t> want(count);
        for (size_t i = 0; i < count; ++i) want[i] = fold<std::int32_t, collx::ops::sum>(in, i, {});
        auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
        findings f(ids.size());
        collx::run_threads(comms, [&](collx::communicator& c) {
          const size_t r = static_cast<size_t>(c.rank());
          std::vector<std::int32_t> b = c.rank() == root ? in[r] : ref::poisoned<std::int32_t>(count);
          collx::broadcast<H, std::int32_t>(c, std::span<std::int32_t>(b), root);
          f.expect_same<std::int32_t>(c.rank(), b, in[static_cast<size_t>(root)], "broadcast");
          std::vector<std::int32_t> out = ref::poisoned<std::int32_t>(count);
          collx::reduce<H, std::int32_t>(c, std::span<const std::int32_t>(in[r]), std::span<std::int32_t>(out), root);
          if (c.rank() == root) f.expect_same<std::int32_t>(c.rank(), out, want, "reduce at the root");
          else f.expect(c.rank(), ref::bytes_equal<std::int32_t>(out, ref::poisoned<std::int32_t>(count)), "reduce wrote off the root");
        });
        f.expect_clean();
      }
  }
  // Rank order for a non-commutative op, root in the second node.
  const auto& ids = layouts()[1];
  const auto in = ref::gen_ranks<ref::mat2>(6, 40, ref::flavor::general, 3);
  auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
  findings f(ids.size());
  collx::run_threads(comms, [&](collx::communicator& c) {
    std::vector<ref::mat2> out = ref::poisoned<ref::mat2>(40);
    collx::reduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::tree>, ref::mat2, ref::mat_mul>(
        c, std::span<const ref::mat2>(in[static_cast<size_t>(c.rank())]), std::span<ref::mat2>(out), 3);
    if (c.rank() == 3)
      for (size_t i = 0; i < 40; ++i) f.expect(3, out[i] == fold<ref::mat2, ref::mat_mul>(in, i, {}), "mat_mul reduce");
  });
  f.expect_clean();
}

// An op with state and no default constructor: a sum modulo `mod` (a power of two, so that the
// wrap-around of uint32 addition keeps it associative). The levels must combine with the caller's
// object: a default-made copy would not compile, and one with other state would give other sums.
struct mod_sum {
  explicit mod_sum(std::uint32_t m) : mod(m) {}
  std::uint32_t mod;
  static constexpr bool commutative = true;
  std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const { return (a + b) % mod; }
};

TEST_CASE("hierarchical reductions combine with the caller's op object (an op with state)", "[hierarchical]") {
  using H = collx::algo::hierarchical<collx::algo::ring, collx::algo::tree>;
  const mod_sum op(1u << 20);
  for (const auto& ids : layouts()) {
    const int n = static_cast<int>(ids.size());
    INFO(n << " ranks");
    // The inputs are large enough for the modulus to matter (else this test could not fail).
    const auto in = ref::gen_ranks<std::uint32_t>(n, 101, ref::flavor::general, 11);
    bool differs = false;
    for (size_t i = 0; i < 101; ++i) differs = differs || fold<std::uint32_t, mod_sum>(in, i, op) != fold<std::uint32_t, collx::ops::sum>(in, i, {});
    REQUIRE(differs);
    check_allreduce<std::uint32_t, mod_sum, H>(ids, 101, false, ref::flavor::general, op);
    check_allreduce<std::uint32_t, mod_sum, collx::algo::hierarchical<>>(ids, 101, true, ref::flavor::general, op);
    check_reduce_scatter<std::uint32_t, mod_sum, H>(ids, std::vector<size_t>(static_cast<size_t>(n), 17), false, false, op);
    auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
    findings f(ids.size());
    collx::run_threads(comms, [&](collx::communicator& c) {
      std::vector<std::uint32_t> out = ref::poisoned<std::uint32_t>(101);
      collx::reduce<H, std::uint32_t, mod_sum>(c, std::span<const std::uint32_t>(in[static_cast<size_t>(c.rank())]),
                                               std::span<std::uint32_t>(out), n - 1, op);
      if (c.rank() == n - 1)
        for (size_t i = 0; i < 101; ++i) f.expect(c.rank(), out[i] == fold<std::uint32_t, mod_sum>(in, i, op), "reduce");
    });
    f.expect_clean();
  }
}

TEST_CASE("hierarchical all_to_all and barrier run on the whole communicator", "[hierarchical]") {
  const auto& ids = layouts()[2];
  auto comms = collx::make_hierarchical_thread_communicators(ids, small_segments());
  findings f(ids.size());
  collx::run_threads(comms, [&](collx::communicator& c) {
    const int n = c.size();
    std::vector<int> send(static_cast<size_t>(n) * 3), recv(send.size(), -1);
    for (size_t i = 0; i < send.size(); ++i) send[i] = c.rank() * 1000 + static_cast<int>(i);
    collx::all_to_all<collx::algo::hierarchical<>, int>(c, std::span<const int>(send), std::span<int>(recv));
    for (int p = 0; p < n; ++p)
      for (int k = 0; k < 3; ++k)
        f.expect(c.rank(), recv[static_cast<size_t>(p * 3 + k)] == p * 1000 + c.rank() * 3 + k, "all_to_all");
    collx::barrier(c);
  });
  f.expect_clean();
}

TEST_CASE("algo::automatic goes hierarchical when several nodes hold several ranks", "[hierarchical]") {
  auto comms = collx::make_hierarchical_thread_communicators(layouts()[0], small_segments());
  findings f(4);
  collx::run_threads(comms, [&](collx::communicator& c) {
    const auto seq_node = c.get_hierarchy()->node.calls_made();
    std::vector<float> v(10, 1.0f);
    collx::allreduce(c, std::span<float>(v));
    f.expect(c.rank(), v[9] == 4.0f, "sum");
    // The node communicator ran the reduce-scatter and the all-gather.
    f.expect(c.rank(), c.get_hierarchy()->node.calls_made() == seq_node + 2, "not hierarchical");
  });
  f.expect_clean();
  // Forced flat by COLLX_ALGO-style overrides: the node communicator stays idle.
  auto opt = small_segments();
  opt.algorithm_overrides = collx::env::parse_algorithms("COLLX_ALGO", "ring");
  auto flat = collx::make_hierarchical_thread_communicators(layouts()[0], opt);
  findings g(4);
  collx::run_threads(flat, [&](collx::communicator& c) {
    const auto seq_node = c.get_hierarchy()->node.calls_made();
    std::vector<float> v(10, 1.0f);
    collx::allreduce(c, std::span<float>(v));
    g.expect(c.rank(), v[9] == 4.0f, "sum");
    g.expect(c.rank(), c.get_hierarchy()->node.calls_made() == seq_node, "not flat");
  });
  g.expect_clean();
  // A single node (connect_hierarchical on one machine): each call runs whole on the node
  // communicator, one call there (not the world's transport, which is MPI under
  // connect_hierarchical), with the explicit algorithm's Intra too.
  auto one = collx::make_hierarchical_thread_communicators(ids_of({"m", "m", "m"}), small_segments());
  findings h(3);
  collx::run_threads(one, [&](collx::communicator& c) {
    const auto seq_node = c.get_hierarchy()->node.calls_made();
    std::vector<float> v(10, static_cast<float>(c.rank() + 1));
    collx::allreduce(c, std::span<float>(v));
    h.expect(c.rank(), v[0] == 6.0f && v[9] == 6.0f, "sum");
    h.expect(c.rank(), c.get_hierarchy()->node.calls_made() == seq_node + 1, "automatic: not one call on the node");
    const auto mat_of = [](std::uint32_t r) { return ref::mat2{1, r + 1, r, 1}; };  // no two commute
    std::vector<ref::mat2> m(3, mat_of(static_cast<std::uint32_t>(c.rank())));
    collx::allreduce<collx::algo::hierarchical<collx::algo::tree, collx::algo::direct>, ref::mat2, ref::mat_mul>(
        c, std::span<ref::mat2>(m));
    const ref::mat2 want = ref::mat_mul{}(ref::mat_mul{}(mat_of(0), mat_of(1)), mat_of(2));
    h.expect(c.rank(), m[0] == want && m[2] == want, "non-commutative fold in rank order");
    h.expect(c.rank(), c.get_hierarchy()->node.calls_made() == seq_node + 2, "hierarchical: not one call on the node");
  });
  h.expect_clean();
}

TEST_CASE("hierarchical layout errors are reported, not hung", "[hierarchical][errors]") {
  // Uneven nodes.
  auto uneven = collx::make_hierarchical_thread_communicators(ids_of({"p", "p", "p", "q"}), small_segments());
  REQUIRE_THROWS_WITH(collx::run_threads(uneven,
                                         [](collx::communicator& c) {
                                           std::vector<int> v(4, 1);
                                           collx::allreduce<collx::algo::hierarchical<>>(c, std::span<int>(v));
                                         }),
                      Catch::Contains("same number of ranks on every node"));
  // A non-commutative op on interleaved nodes.
  auto inter = collx::make_hierarchical_thread_communicators(layouts()[2], small_segments());
  REQUIRE_THROWS_WITH(collx::run_threads(inter,
                                         [](collx::communicator& c) {
                                           std::vector<ref::mat2> v(4, ref::mat2{1, 0, 0, 1});
                                           collx::allreduce<collx::algo::hierarchical<collx::algo::tree, collx::algo::tree>,
                                                            ref::mat2, ref::mat_mul>(c, std::span<ref::mat2>(v));
                                         }),
                      Catch::Contains("contiguous nodes"));
  // No hierarchy attached.
  REQUIRE_THROWS_WITH(collx::run_threads(2,
                                         [](collx::communicator& c) {
                                           std::vector<int> v(4, 1);
                                           collx::allreduce<collx::algo::hierarchical<>>(c, std::span<int>(v));
                                         }),
                      Catch::Contains("needs a communicator with a hierarchy"));
}

// attach_hierarchy on levels a user built with collx::split: thread ranks on the nodes `ids` name
// (by default 4 ranks, n0 = {0, 1} and n1 = {2, 3}). `node_color(r)` groups the node
// communicators (keyed by the layout's local rank), `cross_color(r)` the cross-node ones (default:
// the local rank), `adjust(r, layout)` may change a rank's layout. Each rank then runs a
// hierarchical all-reduce of a non-commutative op; returns every rank's error (code, text) or
// result.
struct attach_outcome {
  bool attached = false;  // attach_hierarchy returned
  collx::errc code{};
  std::string what;
  ref::mat2 result{};
};
template <class NodeColor, class Adjust>
std::vector<attach_outcome> attach_by_hand(NodeColor node_color, Adjust adjust,
                                           const std::vector<std::string>& ids = ids_of({"n0", "n0", "n1", "n1"}),
                                           const std::function<int(int)>& cross_color = {}) {
  std::vector<attach_outcome> out(ids.size());
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(30);
  auto world = collx::make_thread_communicators(static_cast<int>(ids.size()), opt);
  collx::run_threads(world, [&](collx::communicator& c) {
    const int r = c.rank();
    attach_outcome& o = out[static_cast<size_t>(r)];
    try {
      collx::node_layout lay = collx::node_layout::from_ids(ids, r);
      auto node = collx::split(c, node_color(r), lay.local_rank);
      auto cross = collx::split(c, cross_color ? cross_color(r) : lay.local_rank, lay.node_index);
      adjust(r, lay);
      collx::attach_hierarchy(c, std::move(lay), std::move(*node), std::move(*cross));
      o.attached = true;
      std::vector<ref::mat2> v{ref::mat2{1u + static_cast<std::uint32_t>(r), 2, 3u * static_cast<std::uint32_t>(r), 5}};
      collx::allreduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>, ref::mat2, ref::mat_mul>(
          c, std::span<ref::mat2>(v));
      o.result = v[0];
    } catch (const collx::error& e) {
      o.code = e.code();
      o.what = e.what();
    }
  });
  return out;
}

TEST_CASE("attach_hierarchy checks levels built by hand against the layout, on every rank", "[hierarchical][errors]") {
  const auto t0 = std::chrono::steady_clock::now();
  SECTION("levels that match the layout fold in rank order") {
    const auto got = attach_by_hand([](int r) { return r / 2; }, [](int, collx::node_layout&) {});
    ref::mat2 want{1, 2, 0, 5};
    for (std::uint32_t r = 1; r < 4; ++r) want = ref::mat_mul{}(want, ref::mat2{1 + r, 2, 3 * r, 5});
    for (const attach_outcome& o : got) {
      INFO(o.what);
      CHECK(o.what.empty());
      CHECK(o.result == want);
    }
  }
  SECTION("node communicators of the right sizes but the wrong ranks are refused") {
    // {0, 3} and {2, 1}: every rank's local rank and node size are the layout's, its members are not.
    const auto got = attach_by_hand([](int r) { return r == 0 || r == 3 ? 0 : 1; }, [](int, collx::node_layout&) {});
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("rank " << r << ": " << got[r].what);
      CHECK(got[r].code == collx::errc::invalid_argument);
      // Every rank's own level is wrong here: each names its own finding.
      CHECK_THAT(got[r].what, Catch::Matchers::StartsWith("rank " + std::to_string(r) +
                                                          ": attach_hierarchy: the node communicator holds world ranks"));
    }
    CHECK_THAT(got[0].what, Catch::Matchers::Contains("holds world ranks [0, 3] but the layout says [0, 1]"));
  }
  SECTION("a layout whose flags do not follow from its ranks is refused, on every rank") {
    // Ids n0, n1, n0, n1 (interleaved nodes) with `contiguous` set by hand on every rank: the
    // levels match, but a non-commutative op would combine out of rank order.
    const auto got = attach_by_hand([](int r) { return r % 2; }, [](int r, collx::node_layout& l) {
      l = collx::node_layout::from_ids(ids_of({"n0", "n1", "n0", "n1"}), r);
      l.contiguous = true;
    });
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("rank " << r << ": " << got[r].what);
      CHECK(got[r].code == collx::errc::invalid_argument);
      CHECK_THAT(got[r].what, Catch::Matchers::Contains("its contiguous is true, its ranks give false"));
    }
  }
  SECTION("levels that fail on some ranks only: every rank throws, none attaches") {
    // 2 nodes x 3 ranks would need cross groups {0, 3}, {1, 4}, {2, 5}; here {0, 4} and {1, 3}
    // are wrong, {2, 5} right: ranks 2 and 5 pass both of their checks, and must throw too.
    const auto got = attach_by_hand(
        [](int r) { return r / 3; }, [](int, collx::node_layout&) {}, ids_of({"a", "a", "a", "b", "b", "b"}),
        [](int r) { return r == 0 || r == 4 ? 0 : r == 1 || r == 3 ? 1 : 2; });
    for (size_t r = 0; r < got.size(); ++r) {
      INFO("rank " << r << ": " << got[r].what);
      CHECK(!got[r].attached);
      CHECK(got[r].code == collx::errc::invalid_argument);
      CHECK_THAT(got[r].what, Catch::Matchers::Contains("the cross-node communicator holds world ranks"));
    }
  }
  SECTION("a layout of another rank is refused before any exchange") {
    const auto got = attach_by_hand([](int r) { return r / 2; }, [](int r, collx::node_layout& l) {
      if (r == 1) l = collx::node_layout::from_ids(ids_of({"n0", "n0", "n1", "n1"}), 0);
    });
    INFO(got[1].what);
    CHECK(got[1].code == collx::errc::invalid_argument);
    CHECK_THAT(got[1].what, Catch::Matchers::Contains("the layout does not describe world rank 1 of 4"));
    for (const attach_outcome& o : got) CHECK_THAT(o.what, Catch::Matchers::Contains("does not describe world rank 1"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));  // no wait for the 30 s timeout
}

TEST_CASE("attach_hierarchy is one call on world: an async call started meanwhile runs after it",
          "[hierarchical][async]") {
  // Rank 0's main thread attaches while its peers are late; meanwhile its second thread starts an
  // allreduce_async on world. attach_hierarchy is an all_gather on each level, then one on world:
  // an async call that ran between them would meet its peers' attach all_gather (a mismatch).
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(20);
  const auto ids = ids_of({"n0", "n0", "n1", "n1"});
  auto world = collx::make_thread_communicators(4, opt);
  std::vector<std::string> errors(4);
  std::vector<double> sums(4, -1.0);
  collx::run_threads(world, [&](collx::communicator& c) {
    const int r = c.rank();
    std::vector<double> v(1000, r + 1.0);
    try {
      collx::node_layout lay = collx::node_layout::from_ids(ids, r);
      auto node = collx::split(c, lay.node_index, lay.local_rank);
      auto cross = collx::split(c, lay.local_rank, lay.node_index);
      if (r == 0) {
        std::atomic<bool> entering{false};
        collx::request q;
        std::jthread starter([&] {  // joined on the way out, also when attach throws
          while (!entering) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // attach waits for its peers by now
          q = collx::allreduce_async(c, std::span<double>(v));
        });
        entering = true;
        collx::attach_hierarchy(c, std::move(lay), std::move(*node), std::move(*cross));
        starter.join();
        q.wait();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        collx::attach_hierarchy(c, std::move(lay), std::move(*node), std::move(*cross));
        collx::allreduce(c, std::span<double>(v));
      }
      sums[static_cast<size_t>(r)] = v.back();
    } catch (const collx::error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
    CHECK(sums[static_cast<size_t>(r)] == 10.0);
  }
}

TEST_CASE("attach_hierarchy again replaces the levels: later hierarchical calls run on the new ones",
          "[hierarchical]") {
  // Nodes {0, 1} and {2, 3}, then {0, 2} and {1, 3}: the levels of the first are released, and the
  // whole communicator (which watches its levels) stays healthy.
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(20);
  auto world = collx::make_thread_communicators(4, opt);
  std::vector<std::string> errors(4);
  std::vector<std::vector<int>> node_ranks(4);
  std::vector<std::vector<double>> sums(4);
  collx::run_threads(world, [&](collx::communicator& c) {
    const int r = c.rank();
    try {
      for (const auto& ids : {ids_of({"n0", "n0", "n1", "n1"}), ids_of({"a", "b", "a", "b"})}) {
        collx::node_layout lay = collx::node_layout::from_ids(ids, r);
        auto node = collx::split(c, lay.node_index, lay.local_rank);
        auto cross = collx::split(c, lay.local_rank, lay.node_index);
        collx::attach_hierarchy(c, std::move(lay), std::move(*node), std::move(*cross));
        const collx::hierarchy* h = c.get_hierarchy();
        node_ranks[static_cast<size_t>(r)] = h->layout.ranks[static_cast<size_t>(h->layout.node_index)];
        std::vector<double> v(1001, r + 1.0);
        collx::allreduce<collx::algo::hierarchical<>>(c, std::span<double>(v));
        sums[static_cast<size_t>(r)].push_back(v.back());
      }
      std::vector<double> flat(7, 1.0);
      collx::allreduce<collx::algo::ring>(c, std::span<double>(flat));
      sums[static_cast<size_t>(r)].push_back(flat.back());
    } catch (const collx::error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
    CHECK(node_ranks[static_cast<size_t>(r)] == std::vector<int>{r % 2, r % 2 + 2});  // the second layout's node
    CHECK(sums[static_cast<size_t>(r)] == std::vector<double>{10.0, 10.0, 4.0});
  }
}

namespace {
thread_local collx::communicator* level_to_call = nullptr;  // set on one rank: its op makes a barrier there, once
struct sum_calling_level {
  float operator()(float a, float b) const {
    if (collx::communicator* c = std::exchange(level_to_call, nullptr)) collx::barrier(*c);
    return a + b;
  }
};
}  // namespace

TEST_CASE("an op calling the level communicator that runs it: invalid_argument on every rank", "[hierarchical][errors]") {
  // Rank 0's op, run by the node level's reduce-scatter, makes a barrier on that node
  // communicator (reachable through get_hierarchy()): its messages would come between the level
  // call's (before: "call sequence differs", or a wait for the timeout).
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(20);
  auto comms = collx::make_hierarchical_thread_communicators(ids_of({"a", "a", "b", "b"}), opt);
  std::vector<outcome> outcomes(4);
  std::vector<std::thread> ts;
  for (int r = 0; r < 4; ++r)
    ts.emplace_back([&, r] {
      collx::communicator& c = comms[static_cast<size_t>(r)];
      if (r == 0) level_to_call = &c.get_hierarchy()->node;
      outcomes[static_cast<size_t>(r)] = timed_call([&] {
        std::vector<float> x(5000, 1.0f);
        collx::allreduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(c, std::span<float>(x),
                                                                                              sum_calling_level{});
      });
      level_to_call = nullptr;
    });
  for (auto& t : ts) t.join();
  check_failed_soon(outcomes, 4, "a call on this communicator was made inside its own", 10);
}

TEST_CASE("a mismatch on one node reaches the ranks of the other node", "[hierarchical][errors]") {
  auto opt = small_segments();
  opt.timeout = std::chrono::seconds(20);
  auto comms = collx::make_hierarchical_thread_communicators(layouts()[0], opt);
  std::atomic<int> mismatches{0}, others{0}, unexplained{0};
  std::mutex m;
  std::vector<std::string> unexplained_whys;
  std::vector<collx::errc> codes(4, collx::errc::internal);
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, comm = &c] {
      // Rank 1 passes a different count: node 0 sees the mismatch; node 1 must learn of it through
      // the cross-node communicator rather than time out.
      std::vector<int> v(comm->rank() == 1 ? 50 : 40, 1);
      try {
        collx::allreduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(*comm, std::span<int>(v));
      } catch (const collx::error& e) {
        codes[static_cast<size_t>(comm->rank())] = e.code();
        (e.code() == collx::errc::mismatch ? mismatches : others)++;
        // The levels number ranks within themselves: the message says which world ranks they are,
        // unless the whole communicator's records showed the difference first (world ranks: rank 1
        // is the one with 50; in a level's numbering on the cross-node level it is rank 0).
        const std::string why = e.what();
        if (why.find("node communicator: its ranks 0, 1 are world ranks") == std::string::npos &&
            why.find("rank 1 has 50") == std::string::npos) {
          ++unexplained;
          std::lock_guard<std::mutex> lock(m);
          unexplained_whys.push_back(why);
        }
      }
    });
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(codes[static_cast<size_t>(r)] != collx::errc::internal);   // every rank failed
    CHECK(codes[static_cast<size_t>(r)] != collx::errc::timeout);    // and none by timing out
  }
  CHECK(mismatches.load() >= 2);
  std::string all;
  for (const auto& w : unexplained_whys) all += w + "\n";
  INFO(all);
  CHECK(unexplained.load() == 0);
}

TEST_CASE("a level's own failure names the level, the rank on it and its world rank", "[hierarchical][errors]") {
  // World rank 1 never calls: rank 0 times out on the node level (waiting for rank 1), and that
  // level's message, in the level's numbering ("rank 0/2 reduce_scatter_v#1<...>: ... waiting for a
  // message from rank 1"), reaches every rank. It must say which level and which world rank
  // ("node communicator rank 0/2 (world rank 0) ..."), not read as a call of the whole communicator.
  collx::communicator_options opt;
  opt.timeout = std::chrono::milliseconds(500);
  auto comms = collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"}, opt);
  std::vector<std::string> whys(4);
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, comm = &c] {
      const int r = comm->rank();
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        return;
      }
      std::vector<float> v(64, 1.0f);
      try {
        collx::allreduce<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(*comm, std::span<float>(v));
      } catch (const collx::error& e) {
        whys[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  // Whose wait times out first: rank 0's on its node (for rank 1), or rank 2's or 3's across nodes
  // (for rank 0 or rank 1): each names its level, its rank there and its world rank.
  const std::regex level_named("(node communicator rank 0/2 \\(world rank 0\\)|cross-node communicator rank 1/2 "
                               "\\(world rank [23]\\)) [a-z_]+#[0-9]+<");
  // The rank waited for is named with its world rank too: world rank 1 on the node (its rank 1
  // there), world rank 0 or 1 across nodes (rank 0 there).
  const std::regex waited_named("waiting for [a-z ]+ (rank 1 \\(world rank 1\\)|rank 0 \\(world rank [01]\\)) \\(");
  for (int r : {0, 2, 3}) {
    const std::string& why = whys[static_cast<std::size_t>(r)];
    INFO("rank " << r << ": " << why);
    CHECK(std::regex_search(why, level_named));
    CHECK(std::regex_search(why, waited_named));
  }
}

TEST_CASE("a level's failure passed on to the whole communicator names world ranks", "[hierarchical][errors]") {
  // World rank 3 (node n1's rank 1) passes count 0, the others 64. Rank 3 moves nothing, finishes
  // its part and goes on to a flat barrier, where its wait finds its node's records disagree: the
  // node communicator's failure, in its numbering ("rank 1 has 0"), reaches the whole
  // communicator from there. World rank 1 used to read it as its own failure ("count differs:
  // rank 0 has 64, rank 1 has 0", though it passed 64) and rank 3 as rank 1's.
  for (int round = 0; round < 5; ++round) {
    auto opt = small_segments();
    opt.timeout = std::chrono::seconds(20);
    auto comms = collx::make_hierarchical_thread_communicators(layouts()[0], opt);
    std::vector<std::string> whys(4);
    std::vector<std::thread> threads;
    for (auto& c : comms)
      threads.emplace_back([&, comm = &c] {
        const int r = comm->rank();
        std::vector<float> v(r == 3 ? 0 : 64, 1.0f);
        try {
          collx::allreduce<collx::algo::hierarchical<collx::algo::ring, collx::algo::tree>>(*comm, std::span<float>(v));
          collx::barrier(*comm);
        } catch (const collx::error& e) {
          whys[static_cast<std::size_t>(r)] = e.what();
        }
      });
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& t : threads) t.join();
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    for (int r = 0; r < 4; ++r) {
      const std::string& why = whys[static_cast<std::size_t>(r)];
      INFO("round " << round << ", rank " << r << ": " << why);
      CHECK_FALSE(why.empty());
      // Rank 3 named in world ranks, or a level's rank with its world rank or the level's legend
      // (its node: world ranks 2, 3; its cross-node communicator: world ranks 1, 3).
      CHECK((why.find("rank 3 has 0") != std::string::npos || why.find("world rank 3") != std::string::npos ||
             why.find("are world ranks 2, 3") != std::string::npos || why.find("are world ranks 1, 3") != std::string::npos));
    }
  }
}

TEST_CASE("a call one rank rejects reaches ranks waiting on another level", "[hierarchical][errors]") {
  // Rank 0 passes a root outside the communicator: it rejects the call before any level runs, which
  // fails the whole communicator. The other ranks are already inside the hierarchical broadcast,
  // waiting on the node or cross-node level for rank 0: they must learn of it there, not time out.
  auto opt = small_segments();
  opt.timeout = std::chrono::seconds(20);
  auto comms = collx::make_hierarchical_thread_communicators(layouts()[0], opt);
  std::vector<collx::errc> codes(4, collx::errc::internal);
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, comm = &c] {
      std::vector<int> v(40, comm->rank());
      try {
        collx::broadcast<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(*comm, std::span<int>(v),
                                                                                              comm->rank() == 0 ? 7 : 0);
      } catch (const collx::error& e) {
        codes[static_cast<size_t>(comm->rank())] = e.code();
      }
    });
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  CHECK(codes[0] == collx::errc::invalid_argument);
  for (int r = 1; r < 4; ++r) {  // the communicator's failure, as in a flat call rank 0 rejected
    INFO("rank " << r);
    CHECK(codes[static_cast<size_t>(r)] == collx::errc::invalid_argument);
  }
}

TEST_CASE("ranks that disagree on a hierarchical call's root learn it at once, whatever they call next",
          "[hierarchical][errors]") {
  // A root that differs sends ranks into different level calls that may never meet (each cross-node
  // root only sends), so no level sees the difference: the world communicator's records do. Before
  // they were kept, the threads below waited out the timeout, and over MPI the call returned with
  // different data on different ranks and nothing failed.
  struct disagreement {
    const char* name;
    int (*root_of)(int rank);
    int late_rank;  // starts its broadcast 300 ms after the others (-1: none)
  };
  const disagreement cases[] = {
      {"one rank of node 0 names another root", [](int r) { return r == 1 ? 1 : 0; }, -1},
      {"node 1 names a root on node 1, node 0 one on node 0", [](int r) { return r >= 2 ? 3 : 0; }, -1},
      // Ranks 0, 2 and 3 finish their parts first (rank 3 goes on to its next call's cross-node
      // level) before rank 1 announces its root: its cross-node level sees rank 3's next call
      // before the world's records are compared (what ASan's timing once made of the first case).
      {"one rank of node 0 names another root and comes late", [](int r) { return r == 1 ? 1 : 0; }, 1},
  };
  const char* nexts[] = {"a flat barrier", "a hierarchical allreduce", "a flat broadcast", "nothing"};
  for (const auto& c : cases)
    for (int next = 0; next < 4; ++next) {
      DYNAMIC_SECTION(c.name << ", then " << nexts[next]) {
        auto opt = small_segments();
        opt.timeout = std::chrono::seconds(20);
        auto comms = collx::make_hierarchical_thread_communicators(layouts()[0], opt);
        std::vector<collx::errc> codes(4, collx::errc::internal);
        std::vector<std::string> whys(4);
        std::vector<std::thread> threads;
        for (auto& cm : comms)
          threads.emplace_back([&, comm = &cm] {
            const int r = comm->rank();
            std::vector<int> v(40, r);
            if (r == c.late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(300));
            try {
              collx::broadcast<collx::algo::hierarchical<collx::algo::direct, collx::algo::direct>>(*comm, std::span<int>(v),
                                                                                                    c.root_of(r));
              std::vector<float> f(10, 1.0f);
              if (next == 0) collx::barrier(*comm);
              if (next == 1) collx::allreduce<collx::algo::hierarchical<>>(*comm, std::span<float>(f));
              if (next == 2) collx::broadcast<collx::algo::direct>(*comm, std::span<float>(f), 0);
              if (next == 3) return;
            } catch (const collx::error& e) {
              codes[static_cast<size_t>(r)] = e.code();
              whys[static_cast<size_t>(r)] = e.what();
            }
          });
        const auto t0 = std::chrono::steady_clock::now();
        for (auto& t : threads) t.join();
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 20 s timeout
        bool named = false;
        for (int r = 0; r < 4; ++r) {
          INFO("rank " << r << ": " << whys[static_cast<size_t>(r)]);
          // With nothing after, a rank whose level calls all completed may return: a rank still
          // waiting must fail with the mismatch, not by timing out.
          if (next == 3 && codes[static_cast<size_t>(r)] == collx::errc::internal) continue;
          CHECK(codes[static_cast<size_t>(r)] == collx::errc::mismatch);
          const std::string& why = whys[static_cast<size_t>(r)];
          named = named || why.find("root differs") != std::string::npos;
          // The world's records found it: one rank failed, in world ranks. A level that passed the
          // failure on must not claim it ("rank 0 failed: rank 1 failed: root differs" on world
          // rank 2, rank 0 of its node), nor add its legend to world ranks.
          CHECK_FALSE(std::regex_search(why, std::regex("failed: rank [0-9]+ failed:")));
          CHECK(why.find("node communicator:") == std::string::npos);
        }
        CHECK(named);
      }
    }
}

}  // namespace

TEST_CASE("hierarchy levels: a failure taken over from the whole communicator keeps naming its rank", "[hierarchical][errors]") {
  // World rank 1 fails; world rank 3 is rank 1 of its cross-node communicator. The level's text
  // numbers ranks of the whole communicator: reading it, rank 3 must not take "rank 1 failed" for
  // its own level rank's failure and drop it.
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(20);
  auto comms = collx::make_hierarchical_thread_communicators({"a", "a", "b", "b"}, o);
  std::string seen_by_3;
  try {
    collx::run_threads(comms, [&](collx::communicator& c) {
      if (c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 3 is waiting by then
        throw std::runtime_error("boom in rank 1");
      }
      if (c.rank() != 3) return;
      REQUIRE(c.get_hierarchy()->cross.rank() == 1);
      std::vector<float> x(4, 1.0f);
      try {
        collx::allreduce(c.get_hierarchy()->cross, std::span<float>(x));
      } catch (const collx::error& e) {
        seen_by_3 = e.what();
      }
    });
  } catch (const std::runtime_error&) {
  }
  INFO(seen_by_3);
  CHECK(seen_by_3.find("rank 1 failed: boom in rank 1") != std::string::npos);
}
