// Every collective against the sequential reference of tests/reference.hpp, over the threads
// transport. The axes (world size, count, type, op, algorithm, in place) are sampled, not crossed:
// each TEST_CASE sweeps one or two axes in full with the others at representative values.
//
// Every call: outputs are poisoned first, each recv buffer has one extra (poisoned) element that
// must survive, every send buffer is compared with a copy afterwards, results are compared bit for
// bit wherever the order of combination is fixed (integers, min/max, narrow floats with exact
// inputs, algo::tree and algo::direct with their own order), and within a tolerance for ring's
// floating sums. algo::automatic results are checked against the algorithm the communicator says it
// resolved to.
#include <catch2/catch.hpp>

#include "reference.hpp"

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using collx::collective;
using ref::algo_id;
using ref::flavor;
using std::size_t;
using sum = collx::ops::sum;

using opts_t = collx::communicator_options;

template <class T>
std::vector<T> with_guard(std::vector<T> v) {  // appends one poisoned element
  v.emplace_back();
  ref::poison(std::span<T>(&v.back(), 1));
  return v;
}

inline size_t uz(int x) { return static_cast<size_t>(x); }

template <class Algo, class T, class Op>
std::string label(const char* coll, int n, bool in_place) {
  return std::string(coll) + "<" + ref::algo_label(ref::id_of<Algo>()) + "> " + ref::type_label<T>() + " " +
         ref::op_name<Op>() + " n=" + std::to_string(n) + (in_place ? " in place" : " out of place");
}

// Checks one rank's reduced elements got[0, count) against in[*][offset + j]; REQUIREs on the first
// mismatch. Instantiated once per (T, Op), whatever the collective and algorithm.
template <class T, class Op>
void require_reduced(const T* got, size_t count, const std::vector<std::vector<T>>& in, size_t offset,
                     collx::algorithm alg, int rank, const Op& op) {
  const std::string why = ref::check_reduced_range<T, Op>(got, count, in, offset, alg, op);
  INFO("rank " << rank << ": " << why);
  REQUIRE(why.empty());
}

// ---------------------------------------------------------------------------------------------
// allreduce

template <class Algo, class T, class Op = sum>
void check_allreduce(int n, size_t count, bool in_place, const opts_t& o = ref::test_options(), Op op = {},
                     flavor fl = ref::default_flavor<T, Op>(), std::uint64_t salt = 1) {
  INFO((label<Algo, T, Op>("allreduce", n, in_place)) << " count=" << count);
  const auto in = ref::gen_ranks<T>(n, count, fl, salt);
  auto send = in;
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(in_place ? in[uz(r)] : ref::poisoned<T>(count));
  std::vector<collx::algorithm> alg(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        alg[r] = ref::resolved<Algo>(c, collective::allreduce, count * sizeof(T), collx::op_traits<Op>::commutative);
        std::span<T> recv(out[r].data(), count);
        if (in_place) collx::allreduce<Algo>(c, recv, op);
        else collx::allreduce<Algo>(c, std::span<const T>(send[r]), recv, op);
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::is_poison(out[uz(r)][count]));  // one element past recv survives
    if (!in_place) REQUIRE(ref::bytes_equal<T>(send[uz(r)], in[uz(r)]));
    require_reduced<T, Op>(out[uz(r)].data(), count, in, 0, alg[uz(r)], r, op);
    // every rank holds the same bits
    REQUIRE(ref::first_difference<T>(std::span<const T>(out[uz(r)]), std::span<const T>(out[0])) == ref::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// reduce_scatter and reduce_scatter_v

template <class Algo, class T, class Op = sum>
void check_reduce_scatter(int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                          const opts_t& o = ref::test_options(), Op op = {}, flavor fl = ref::default_flavor<T, Op>(),
                          std::uint64_t salt = 2) {
  const auto pre = ref::prefix(counts);
  const size_t total = pre.back();
  INFO((label<Algo, T, Op>(varying ? "reduce_scatter_v" : "reduce_scatter", n, in_place)) << " total=" << total);
  const auto in = ref::gen_ranks<T>(n, total, fl, salt);
  auto buf = in;  // the send buffers (in place: the result lands in the rank's own block)
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(ref::poisoned<T>(counts[uz(r)]));
  std::vector<collx::algorithm> alg(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        alg[r] = ref::resolved<Algo>(c, collective::reduce_scatter, total * sizeof(T), collx::op_traits<Op>::commutative);
        std::span<T> recv = in_place ? std::span<T>(buf[r].data() + pre[r], counts[r]) : std::span<T>(out[r].data(), counts[r]);
        std::span<const T> send(buf[r]);
        if (varying) collx::reduce_scatter_v<Algo>(c, send, recv, std::span<const size_t>(counts), op);
        else collx::reduce_scatter<Algo>(c, send, recv, op);
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    const size_t off = pre[uz(r)], cnt = counts[uz(r)];
    if (in_place) {  // every block but the rank's own keeps its values
      REQUIRE(ref::bytes_equal<T>(std::span<const T>(buf[uz(r)].data(), off), std::span<const T>(in[uz(r)].data(), off)));
      REQUIRE(ref::bytes_equal<T>(std::span<const T>(buf[uz(r)].data() + off + cnt, total - off - cnt),
                                  std::span<const T>(in[uz(r)].data() + off + cnt, total - off - cnt)));
    } else {
      REQUIRE(ref::bytes_equal<T>(buf[uz(r)], in[uz(r)]));
      REQUIRE(ref::is_poison(out[uz(r)][cnt]));
    }
    const T* got = in_place ? buf[uz(r)].data() + off : out[uz(r)].data();
    require_reduced<T, Op>(got, cnt, in, off, alg[uz(r)], r, op);
  }
}

template <class Algo, class T, class Op = sum>
void check_reduce_scatter_uniform(int n, size_t recv_count, bool in_place, const opts_t& o = ref::test_options(),
                                  Op op = {}, flavor fl = ref::default_flavor<T, Op>()) {
  check_reduce_scatter<Algo, T, Op>(n, std::vector<size_t>(uz(n), recv_count), false, in_place, o, op, fl);
}

// ---------------------------------------------------------------------------------------------
// all_gather and all_gather_v

template <class Algo, class T>
void check_all_gather(int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                      const opts_t& o = ref::test_options(), std::uint64_t salt = 3) {
  const auto pre = ref::prefix(counts);
  const size_t total = pre.back();
  INFO((label<Algo, T, collx::detail::no_op>(varying ? "all_gather_v" : "all_gather", n, in_place)) << " total=" << total);
  std::vector<std::vector<T>> in(uz(n)), out(uz(n));
  for (int r = 0; r < n; ++r) {
    in[uz(r)] = ref::gen_vec<T>(r, counts[uz(r)], flavor::general, salt);
    out[uz(r)] = with_guard(ref::poisoned<T>(total));
    if (in_place) std::copy(in[uz(r)].begin(), in[uz(r)].end(), out[uz(r)].begin() + static_cast<std::ptrdiff_t>(pre[uz(r)]));
  }
  auto send = in;
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        std::span<const T> s = in_place ? std::span<const T>(out[r].data() + pre[r], counts[r]) : std::span<const T>(send[r]);
        std::span<T> recv(out[r].data(), total);
        if (varying) collx::all_gather_v<Algo>(c, s, recv, std::span<const size_t>(counts));
        else collx::all_gather<Algo>(c, s, recv);
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::is_poison(out[uz(r)][total]));
    if (!in_place) REQUIRE(ref::bytes_equal<T>(send[uz(r)], in[uz(r)]));
    for (int q = 0; q < n; ++q) {
      INFO("block of rank " << q);
      REQUIRE(ref::first_difference<T>(std::span<const T>(out[uz(r)].data() + pre[uz(q)], counts[uz(q)]),
                                       std::span<const T>(in[uz(q)])) == ref::npos);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// broadcast

template <class Algo, class T>
void check_broadcast(int n, size_t count, int root, bool in_place, bool empty_send_elsewhere = false,
                     const opts_t& o = ref::test_options(), std::uint64_t salt = 4) {
  INFO((label<Algo, T, collx::detail::no_op>("broadcast", n, in_place)) << " count=" << count << " root=" << root);
  const auto in = ref::gen_ranks<T>(n, count, flavor::general, salt);
  auto send = in;
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(in_place && r == root ? in[uz(r)] : ref::poisoned<T>(count));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const int r = c.rank();
        std::span<T> recv(out[uz(r)].data(), count);
        if (in_place && r == root) collx::broadcast<Algo>(c, recv, root);
        else if (r != root && empty_send_elsewhere) collx::broadcast<Algo>(c, std::span<const T>(), recv, root);
        else collx::broadcast<Algo>(c, std::span<const T>(send[uz(r)]), recv, root);
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::is_poison(out[uz(r)][count]));
    REQUIRE(ref::bytes_equal<T>(send[uz(r)], in[uz(r)]));
    REQUIRE(ref::first_difference<T>(std::span<const T>(out[uz(r)].data(), count), std::span<const T>(in[uz(root)])) ==
            ref::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// reduce

template <class Algo, class T, class Op = sum>
void check_reduce(int n, size_t count, int root, bool in_place, bool empty_recv_elsewhere = false,
                  const opts_t& o = ref::test_options(), Op op = {}, flavor fl = ref::default_flavor<T, Op>(),
                  std::uint64_t salt = 5) {
  INFO((label<Algo, T, Op>("reduce", n, in_place)) << " count=" << count << " root=" << root);
  const auto in = ref::gen_ranks<T>(n, count, fl, salt);
  std::vector<std::vector<T>> buf(uz(n)), out(uz(n));
  for (int r = 0; r < n; ++r) {
    buf[uz(r)] = with_guard(in[uz(r)]);
    out[uz(r)] = with_guard(ref::poisoned<T>(count));
  }
  std::vector<collx::algorithm> alg(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const int r = c.rank();
        alg[uz(r)] = ref::resolved<Algo>(c, collective::reduce, count * sizeof(T), collx::op_traits<Op>::commutative);
        if (in_place) {
          collx::reduce<Algo>(c, std::span<T>(buf[uz(r)].data(), count), root, op);
        } else {
          std::span<T> recv(out[uz(r)].data(), r != root && empty_recv_elsewhere ? 0 : count);
          collx::reduce<Algo>(c, std::span<const T>(buf[uz(r)].data(), count), recv, root, op);
        }
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::is_poison(buf[uz(r)][count]));
    REQUIRE(ref::is_poison(out[uz(r)][count]));
    if (r != root) {
      // a non-root's buffers are untouched: its send (in place too) and its recv
      REQUIRE(ref::bytes_equal<T>(std::span<const T>(buf[uz(r)].data(), count), in[uz(r)]));
      REQUIRE(ref::bytes_equal<T>(std::span<const T>(out[uz(r)]), ref::poisoned<T>(count + 1)));
      continue;
    }
    if (!in_place) REQUIRE(ref::bytes_equal<T>(std::span<const T>(buf[uz(r)].data(), count), in[uz(r)]));
    const T* got = in_place ? buf[uz(r)].data() : out[uz(r)].data();
    require_reduced<T, Op>(got, count, in, 0, alg[uz(r)], r, op);
  }
}

// ---------------------------------------------------------------------------------------------
// all_to_all and all_to_all_v

// sc[r][c]: elements rank r sends to rank c (rank c receives sc[r][c] from r).
template <class Algo, class T>
void check_all_to_all(int n, const std::vector<std::vector<size_t>>& sc, bool varying,
                      const opts_t& o = ref::test_options(), std::uint64_t salt = 6) {
  INFO((label<Algo, T, collx::detail::no_op>(varying ? "all_to_all_v" : "all_to_all", n, false)));
  std::vector<std::vector<size_t>> rc(uz(n), std::vector<size_t>(uz(n))), sp(uz(n)), rp(uz(n));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) rc[uz(r)][uz(c)] = sc[uz(c)][uz(r)];
  std::vector<std::vector<T>> in(uz(n)), out(uz(n));
  for (int r = 0; r < n; ++r) {
    sp[uz(r)] = ref::prefix(sc[uz(r)]);
    rp[uz(r)] = ref::prefix(rc[uz(r)]);
    in[uz(r)] = ref::gen_vec<T>(r, sp[uz(r)].back(), flavor::general, salt);
    out[uz(r)] = with_guard(ref::poisoned<T>(rp[uz(r)].back()));
  }
  auto send = in;
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        std::span<T> recv(out[r].data(), rp[r].back());
        if (varying)
          collx::all_to_all_v<Algo>(c, std::span<const T>(send[r]), std::span<const size_t>(sc[r]), recv,
                                    std::span<const size_t>(rc[r]));
        else
          collx::all_to_all<Algo>(c, std::span<const T>(send[r]), recv);
      },
      o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::is_poison(out[uz(r)][rp[uz(r)].back()]));
    REQUIRE(ref::bytes_equal<T>(send[uz(r)], in[uz(r)]));
    for (int c = 0; c < n; ++c) {
      INFO("block from rank " << c);
      REQUIRE(ref::first_difference<T>(std::span<const T>(out[uz(r)].data() + rp[uz(r)][uz(c)], rc[uz(r)][uz(c)]),
                                       std::span<const T>(in[uz(c)].data() + sp[uz(c)][uz(r)], sc[uz(c)][uz(r)])) ==
              ref::npos);
    }
  }
}

template <class Algo, class T>
void check_all_to_all_uniform(int n, size_t k, const opts_t& o = ref::test_options()) {
  check_all_to_all<Algo, T>(n, std::vector<std::vector<size_t>>(uz(n), std::vector<size_t>(uz(n), k)), false, o);
}

// Pseudo-random counts in [0, max] (zeros included), world-size entries.
std::vector<size_t> random_counts(int n, size_t max, std::uint64_t salt) {
  std::vector<size_t> c(uz(n));
  for (int r = 0; r < n; ++r) c[uz(r)] = ref::hash(r, 0, salt) % (max + 1);
  return c;
}
std::vector<std::vector<size_t>> random_matrix(int n, size_t max, std::uint64_t salt) {
  std::vector<std::vector<size_t>> m(uz(n));
  for (int r = 0; r < n; ++r) m[uz(r)] = random_counts(n, max, salt * 131 + uz(r));
  return m;
}

// Counts of the sweeps: 0, 1, n-1, n, n+1 and the given extras.
std::vector<size_t> counts_for(int n, std::initializer_list<size_t> extra) {
  std::vector<size_t> c{0, 1, uz(n - 1), uz(n), uz(n + 1)};
  c.insert(c.end(), extra);
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

constexpr int world_sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};

// Runs f(tag) for the algorithm tags that make sense for Op (and for all_to_all: no tree).
template <class Op, bool NoTree = false, class F>
void for_each_algo(F&& f) {
  for (algo_id a : ref::all_algos) {
    if (a == algo_id::ring && !collx::op_traits<Op>::commutative) continue;
    if (a == algo_id::tree && NoTree) continue;
    INFO("algorithm " << ref::algo_label(a));
    ref::with_algo<Op, NoTree>(a, f);
  }
}

}  // namespace

// =============================================================================================
// World sizes x algorithms

TEST_CASE("allreduce: every world size x algorithm, float32 sum, in place and out of place", "[collectives][allreduce]") {
  for (int n : world_sizes)
    for (size_t count : counts_for(n, {13, 257}))
      for (bool ip : {false, true})
        for_each_algo<sum>([&](auto tag) { check_allreduce<decltype(tag), float>(n, count, ip); });
}

TEST_CASE("reduce_scatter and reduce_scatter_v: every world size x algorithm, float32 sum", "[collectives][reduce_scatter]") {
  for (int n : world_sizes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}})
      for (bool ip : {false, true})
        for_each_algo<sum>([&](auto tag) { check_reduce_scatter_uniform<decltype(tag), float>(n, count, ip); });
    for (std::uint64_t salt : {1u, 2u})
      for (bool ip : {false, true})
        for_each_algo<sum>([&](auto tag) {
          check_reduce_scatter<decltype(tag), float>(n, random_counts(n, 9, salt), true, ip);
        });
  }
}

TEST_CASE("all_gather and all_gather_v: every world size x algorithm", "[collectives][all_gather]") {
  for (int n : world_sizes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}})
      for (bool ip : {false, true})
        for_each_algo<sum>([&](auto tag) {
          check_all_gather<decltype(tag), float>(n, std::vector<size_t>(uz(n), count), false, ip);
        });
    for (std::uint64_t salt : {3u, 4u})
      for (bool ip : {false, true})
        for_each_algo<sum>([&](auto tag) { check_all_gather<decltype(tag), float>(n, random_counts(n, 9, salt), true, ip); });
  }
}

TEST_CASE("broadcast: every world size x algorithm x root", "[collectives][broadcast]") {
  for (int n : world_sizes)
    for (int root : {0, n / 2, n - 1})
      for (size_t count : {size_t{0}, size_t{1}, uz(n + 1), size_t{257}})
        for_each_algo<sum>([&](auto tag) {
          using A = decltype(tag);
          check_broadcast<A, float>(n, count, root, false);
          check_broadcast<A, float>(n, count, root, true, /*empty_send_elsewhere=*/true);
        });
}

TEST_CASE("reduce: every world size x algorithm x root, float32 sum", "[collectives][reduce]") {
  for (int n : world_sizes)
    for (int root : {0, n / 2, n - 1})
      for (size_t count : {size_t{0}, size_t{1}, uz(n + 1), size_t{257}})
        for_each_algo<sum>([&](auto tag) {
          using A = decltype(tag);
          check_reduce<A, float>(n, count, root, false);
          check_reduce<A, float>(n, count, root, false, /*empty_recv_elsewhere=*/true);
          check_reduce<A, float>(n, count, root, true);
        });
}

TEST_CASE("all_to_all and all_to_all_v: every world size x algorithm", "[collectives][all_to_all]") {
  for (int n : world_sizes) {
    for (size_t k : {size_t{0}, size_t{1}, size_t{13}})
      for_each_algo<sum, true>([&](auto tag) { check_all_to_all_uniform<decltype(tag), float>(n, k); });
    for (std::uint64_t salt : {5u, 6u})
      for_each_algo<sum, true>([&](auto tag) { check_all_to_all<decltype(tag), float>(n, random_matrix(n, 7, salt), true); });
  }
}

TEST_CASE("barrier: no rank leaves before every rank entered, every world size", "[collectives][barrier]") {
  for (int n : world_sizes) {
    INFO("n=" << n);
    constexpr int rounds = 20;
    std::vector<std::atomic<int>> arrived(rounds);
    std::atomic<int> early{0};
    ref::run_ranks(n, [&](collx::communicator& c) {
      for (int k = 0; k < rounds; ++k) {
        if (c.rank() == k % n) std::this_thread::sleep_for(std::chrono::microseconds(200));  // a late rank
        arrived[uz(k)].fetch_add(1);
        collx::barrier(c);
        if (arrived[uz(k)].load() != n) early.fetch_add(1);
      }
    });
    REQUIRE(early.load() == 0);
  }
}

TEST_CASE("send/recv: every world size, ordered messages, zero-length, several types", "[collectives][send_recv]") {
  for (int n : world_sizes) {
    if (n < 2) continue;
    INFO("n=" << n);
    // Rank 0 sends three messages (sizes 5, 0, 1009) to every other rank, which answers with one.
    std::vector<std::vector<float>> got(uz(n));
    std::vector<std::vector<ref::loc16>> answers(uz(n));
    std::vector<std::vector<float>> ring_got(uz(n));
    ref::run_ranks(n, [&](collx::communicator& c) {
      const int r = c.rank();
      if (r == 0) {
        for (int p = 1; p < n; ++p)
          for (size_t len : {size_t{5}, size_t{0}, size_t{1009}}) {
            const auto msg = ref::gen_vec<float>(p, len, flavor::general, len);
            collx::send(c, std::span<const float>(msg), p);
          }
        for (int p = 1; p < n; ++p) {
          std::vector<ref::loc16> a = ref::poisoned<ref::loc16>(3);
          collx::recv<ref::loc16>(c, a, p);
          answers[uz(p)] = a;
        }
      } else {
        for (size_t len : {size_t{5}, size_t{0}, size_t{1009}}) {
          auto buf = ref::poisoned<float>(len);
          collx::recv<float>(c, buf, 0);
          got[uz(r)].insert(got[uz(r)].end(), buf.begin(), buf.end());
        }
        const auto answer = ref::gen_vec<ref::loc16>(r, 3, flavor::general, 9);
        collx::send(c, std::span<const ref::loc16>(answer), 0);
      }
      // A ring shift: even ranks send first, odd ranks receive first (send is synchronous).
      const auto mine = ref::gen_vec<float>(r, 64, flavor::general, 10);
      auto in = ref::poisoned<float>(64);
      if (r % 2 == 0) {
        collx::send(c, std::span<const float>(mine), (r + 1) % n);
        collx::recv<float>(c, in, (r + n - 1) % n);
      } else {
        collx::recv<float>(c, in, (r + n - 1) % n);
        collx::send(c, std::span<const float>(mine), (r + 1) % n);
      }
      ring_got[uz(r)] = in;
    });
    for (int p = 1; p < n; ++p) {
      INFO("rank " << p);
      std::vector<float> want;
      for (size_t len : {size_t{5}, size_t{0}, size_t{1009}}) {
        const auto m = ref::gen_vec<float>(p, len, flavor::general, len);
        want.insert(want.end(), m.begin(), m.end());
      }
      REQUIRE(ref::first_difference<float>(got[uz(p)], want) == ref::npos);
      REQUIRE(ref::first_difference<ref::loc16>(answers[uz(p)], ref::gen_vec<ref::loc16>(p, 3, flavor::general, 9)) ==
              ref::npos);
    }
    for (int r = 0; r < n; ++r)
      REQUIRE(ref::first_difference<float>(ring_got[uz(r)], ref::gen_vec<float>((r + n - 1) % n, 64, flavor::general, 10)) ==
              ref::npos);
  }
}

// =============================================================================================
// Types x ops (algo::automatic with a selector forcing each algorithm: one instantiation per
// (type, op), every algorithm at run time)

namespace {

// One run per (type, op, algorithm): allreduce out of place and in place, reduce_scatter (in place
// for even counts) and reduce; lean on purpose, since it is instantiated for every (type, op).
template <class T, class Op>
void type_op_case(int n, size_t count, collx::algorithm forced) {
  INFO(ref::type_label<T>() << " " << ref::op_name<Op>() << " n=" << n << " count=" << count);
  const auto in = ref::gen_ranks<T>(n, count * uz(n), ref::default_flavor<T, Op>(), count);
  const size_t blk = count, total = count * uz(n);
  const bool rs_in_place = count % 2 == 0;
  std::vector<std::vector<T>> send = in, ar(uz(n)), ip = in, rs(uz(n)), rd(uz(n));
  std::vector<collx::algorithm> alg(uz(n));
  for (int r = 0; r < n; ++r) {
    ar[uz(r)] = with_guard(ref::poisoned<T>(total));
    ip[uz(r)].push_back(ar[uz(r)].back());
    rs[uz(r)] = rs_in_place ? in[uz(r)] : with_guard(ref::poisoned<T>(blk));
    rd[uz(r)] = with_guard(ref::poisoned<T>(total));
  }
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        alg[r] = c.select({collective::allreduce, n, total * sizeof(T), collx::op_traits<Op>::commutative});
        collx::allreduce(c, std::span<const T>(send[r]), std::span<T>(ar[r].data(), total), Op{});
        collx::allreduce(c, std::span<T>(ip[r].data(), total), Op{});
        const std::span<T> rs_recv = rs_in_place ? std::span<T>(rs[r].data() + r * blk, blk) : std::span<T>(rs[r].data(), blk);
        collx::reduce_scatter(c, std::span<const T>(rs_in_place ? rs[r] : send[r]), rs_recv, Op{});
        collx::reduce(c, std::span<const T>(send[r]), std::span<T>(rd[r].data(), total), n - 1, Op{});
      },
      ref::forcing(forced));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(ref::bytes_equal<T>(send[uz(r)], in[uz(r)]));
    REQUIRE(ref::is_poison(ar[uz(r)][total]));
    REQUIRE(ref::is_poison(ip[uz(r)][total]));
    REQUIRE(ref::is_poison(rd[uz(r)][total]));
    require_reduced<T, Op>(ar[uz(r)].data(), total, in, 0, alg[uz(r)], r, Op{});
    require_reduced<T, Op>(ip[uz(r)].data(), total, in, 0, alg[uz(r)], r, Op{});
    require_reduced<T, Op>(rs[uz(r)].data() + (rs_in_place ? uz(r) * blk : 0), blk, in, uz(r) * blk, alg[uz(r)], r, Op{});
    if (rs_in_place)
      for (int q = 0; q < n; ++q)
        if (q != r)
          REQUIRE(ref::bytes_equal<T>(std::span<const T>(rs[uz(r)].data() + uz(q) * blk, blk),
                                      std::span<const T>(in[uz(r)].data() + uz(q) * blk, blk)));
    if (!rs_in_place) REQUIRE(ref::is_poison(rs[uz(r)][blk]));
    if (r == n - 1) require_reduced<T, Op>(rd[uz(r)].data(), total, in, 0, alg[uz(r)], r, Op{});
    else REQUIRE(ref::bytes_equal<T>(std::span<const T>(rd[uz(r)]), ref::poisoned<T>(total + 1)));
  }
}

template <class T, class... Ops>
void type_all_ops() {
  for (int n : {3, 5})
    for (size_t count : {size_t{3}, size_t{211}})  // per-rank blocks; vectors of n * count
      for (collx::algorithm a : {collx::algorithm::ring, collx::algorithm::tree, collx::algorithm::direct}) {
        INFO("forced " << collx::algorithm_name(a));
        (type_op_case<T, Ops>(n, count, a), ...);
      }
}

template <class T>
void type_every_op() {
  namespace o = collx::ops;
  if constexpr (ref::is_int<T>)
    type_all_ops<T, o::sum, o::prod, o::min, o::max, o::avg, o::band, o::bor, o::bxor>();
  else
    type_all_ops<T, o::sum, o::prod, o::min, o::max, o::avg>();
}

}  // namespace

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every type x every built-in op at n = 3, 5",
                   "[collectives][types]", std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t,
                   std::uint32_t, std::int64_t, std::uint64_t, float, double, collx::half, collx::bfloat16) {
  type_every_op<TestType>();
}

TEMPLATE_TEST_CASE("data movement (all_gather, broadcast, all_to_all): every type", "[collectives][types]",
                   std::int8_t, std::uint16_t, std::int32_t, std::uint64_t, double, collx::half,
                   collx::bfloat16, ref::loc16, ref::loc64) {
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

TEST_CASE("every count at n = 4, 7: every collective x algorithm", "[collectives][counts]") {
  for (int n : {4, 7})
    for (size_t count : counts_for(n, {13, 1009, 255, 257, 65537})) {
      INFO("count " << count);
      for_each_algo<sum>([&](auto tag) {
        using A = decltype(tag);
        check_allreduce<A, float>(n, count, count % 2 == 0);
        check_allreduce<A, std::int32_t>(n, count, count % 2 == 1);
        check_reduce_scatter_uniform<A, float>(n, count, count % 2 == 1);
        check_reduce_scatter<A, std::int32_t>(n, random_counts(n, count, 7), true, count % 2 == 0);
        check_all_gather<A, std::int32_t>(n, std::vector<size_t>(uz(n), count), false, count % 2 == 0);
        check_broadcast<A, float>(n, count, 2, count % 2 == 0);
        check_reduce<A, float>(n, count, 3, count % 2 == 0);
      });
      for_each_algo<sum, true>([&](auto tag) {
        check_all_to_all_uniform<decltype(tag), std::int32_t>(n, count);
        check_all_to_all<decltype(tag), std::int32_t>(n, random_matrix(n, count, 11), true);
      });
    }
}

TEST_CASE("every count with 4 KiB and tiny segments (many segments per call)", "[collectives][counts][segments]") {
  for (size_t seg : {size_t{4096}, size_t{24}}) {
    opts_t o = ref::test_options();
    o.max_segment_bytes = seg;
    INFO("max_segment_bytes " << seg);
    for (int n : {3, 4})
      for (size_t count : counts_for(n, {13, 1009, 4097})) {
        INFO("count " << count);
        for_each_algo<sum>([&](auto tag) {
          using A = decltype(tag);
          check_allreduce<A, float>(n, count, count % 2 == 0, o);
          check_allreduce<A, collx::bfloat16>(n, count, count % 2 == 1, o);
          check_reduce_scatter_uniform<A, float>(n, count, count % 2 == 1, o);
          check_reduce_scatter<A, double>(n, random_counts(n, count, 3), true, count % 2 == 0, o);
          check_reduce<A, float>(n, count, 1, count % 2 == 1, false, o);
          check_broadcast<A, float>(n, count, 2, false, false, o);
        });
      }
  }
}

TEST_CASE("about 10^6 elements (1000003) at n = 2, 4", "[collectives][counts][large]") {
  constexpr size_t big = 1000003;
  for (int n : {2, 4})
    for_each_algo<sum>([&](auto tag) {
      using A = decltype(tag);
      check_allreduce<A, float>(n, big, false);
      check_allreduce<A, std::int64_t>(n, big, true);
      check_reduce_scatter_uniform<A, float>(n, big / uz(n), false);
      check_reduce<A, float>(n, big, n - 1, true);
      check_broadcast<A, std::int32_t>(n, big, 0, false);
    });
}

// =============================================================================================
// Custom ops

TEST_CASE("custom op: min-loc / max-loc on a padded (value, index) struct, every algorithm", "[collectives][custom]") {
  for (int n : {1, 2, 3, 5, 8, 16})
    for (size_t count : {size_t{1}, size_t{13}, size_t{1009}})
      for_each_algo<ref::min_loc>([&](auto tag) {
        using A = decltype(tag);
        check_allreduce<A, ref::loc16>(n, count, count == 13, ref::test_options(), ref::min_loc{});
        check_allreduce<A, ref::loc64>(n, count, count != 13, ref::test_options(), ref::max_loc{});
        check_reduce_scatter_uniform<A, ref::loc16>(n, count, false, ref::test_options(), ref::min_loc{});
        check_reduce<A, ref::loc16>(n, count, n / 2, false, false, ref::test_options(), ref::min_loc{});
      });
}

TEST_CASE("custom op: Welford merge (not declared commutative) in rank order: tree, direct, automatic",
          "[collectives][custom]") {
  static_assert(!collx::op_traits<ref::welford_merge>::commutative);
  for (int n : {2, 3, 5, 8, 16})
    for (size_t count : {size_t{1}, size_t{33}, size_t{1009}})
      for_each_algo<ref::welford_merge>([&](auto tag) {  // ring is skipped: not commutative
        using A = decltype(tag);
        check_allreduce<A, ref::welford>(n, count, count == 33, ref::test_options(), ref::welford_merge{});
        check_reduce_scatter_uniform<A, ref::welford>(n, count, count != 33, ref::test_options(), ref::welford_merge{});
        check_reduce<A, ref::welford>(n, count, n - 1, false, false, ref::test_options(), ref::welford_merge{});
      });
  // automatic never picks ring for it, even when the selector asks for ring
  std::vector<collx::algorithm> chosen(4);
  ref::run_ranks(
      4, [&](collx::communicator& c) { chosen[uz(c.rank())] = c.select({collective::allreduce, 4, 1 << 30, false}); },
      ref::forcing(collx::algorithm::ring));
  for (collx::algorithm a : chosen) CHECK(a != collx::algorithm::ring);
  check_allreduce<collx::algo::automatic, ref::welford>(4, 100, false, ref::forcing(collx::algorithm::ring),
                                                         ref::welford_merge{});
}

TEST_CASE("custom op: non-commutative 2x2 matrix product gives the rank-order product (tree, direct)",
          "[collectives][custom]") {
  for (int n : {2, 3, 4, 5, 7, 8, 9, 16})
    for (size_t count : {size_t{1}, size_t{17}, size_t{1009}})
      for (algo_id a : {algo_id::tree, algo_id::direct}) {
        INFO("algorithm " << ref::algo_label(a));
        ref::with_algo<ref::mat_mul>(a, [&](auto tag) {
          using A = decltype(tag);
          check_allreduce<A, ref::mat2>(n, count, count == 17, ref::test_options(), ref::mat_mul{});
          check_reduce_scatter_uniform<A, ref::mat2>(n, count, count == 1, ref::test_options(), ref::mat_mul{});
          check_reduce<A, ref::mat2>(n, count, (n + 1) / 2, count == 1009, false, ref::test_options(), ref::mat_mul{});
        });
      }
  // The reference really is order-sensitive: the product in reverse rank order differs.
  const auto in = ref::gen_ranks<ref::mat2>(3, 1, flavor::general, 1);
  const ref::mat2 fwd = ref::fold_left<ref::mat2, ref::mat_mul>(3, [&](int q) { return in[uz(q)][0]; });
  const ref::mat2 rev = ref::fold_left<ref::mat2, ref::mat_mul>(3, [&](int q) { return in[uz(2 - q)][0]; });
  REQUIRE_FALSE(fwd == rev);
}

// =============================================================================================
// Reproducibility

namespace {

// Runs allreduce<Algo> of the given inputs and returns every rank's result.
template <class Algo, class T>
std::vector<std::vector<T>> allreduce_results(const std::vector<std::vector<T>>& in, const opts_t& o,
                                              size_t split = 0) {
  const int n = static_cast<int>(in.size());
  std::vector<std::vector<T>> out(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        const size_t count = in[r].size();
        out[r] = ref::poisoned<T>(count);
        if (split == 0) {
          collx::allreduce<Algo>(c, std::span<const T>(in[r]), std::span<T>(out[r]));
        } else {  // two separate calls over [0, split) and [split, count)
          collx::allreduce<Algo>(c, std::span<const T>(in[r].data(), split), std::span<T>(out[r].data(), split));
          collx::allreduce<Algo>(c, std::span<const T>(in[r].data() + split, count - split),
                                 std::span<T>(out[r].data() + split, count - split));
        }
      },
      o);
  return out;
}

template <class T>
bool all_same(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t r = 0; r < a.size(); ++r)
    if (ref::first_difference<T>(a[r], b[r]) != ref::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("direct equals the sequential rank-order fold bit for bit: fused vs split calls, one-shot vs two-shot, "
          "segments",
          "[collectives][reproducible]") {
  using D = collx::algo::direct;
  opts_t small = ref::test_options();
  small.max_segment_bytes = 4096;
  // m = 10000 floats: the halves go one-shot (40 KB), the fused call two-shot (80 KB).
  // m = 1100000: the fused call (8.8 MB) is cut into two segments by the default 8 MiB scratch
  // bound, at a boundary that is not the split point; the separate calls are not cut.
  for (int n : {2, 3, 5, 8})
    for (size_t m : {size_t{10000}, size_t{1100000}}) {
      if (m > 10000 && (n == 3 || n == 8)) continue;  // run time
      INFO("n=" << n << " m=" << m);
      const auto in = ref::gen_ranks<float>(n, 2 * m, flavor::general, 77);
      std::vector<float> want(2 * m);
      for (size_t i = 0; i < 2 * m; ++i)
        want[i] = ref::fold_left<float, sum>(n, [&](int q) { return in[uz(q)][i]; });
      const auto fused = allreduce_results<D, float>(in, ref::test_options());
      const auto split = allreduce_results<D, float>(in, ref::test_options(), m);
      const auto segmented = allreduce_results<D, float>(in, small);
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        REQUIRE(ref::first_difference<float>(fused[uz(r)], want) == ref::npos);
        REQUIRE(ref::first_difference<float>(split[uz(r)], want) == ref::npos);
        REQUIRE(ref::first_difference<float>(segmented[uz(r)], want) == ref::npos);
      }
      // The inputs make order matter: the reverse-order fold differs somewhere.
      size_t differs = 0;
      for (size_t i = 0; i < 2 * m; ++i)
        differs += !ref::same(want[i], ref::fold_left<float, sum>(n, [&](int q) { return in[uz(n - 1 - q)][i]; }));
      if (n > 2) CHECK(differs > 0);
    }
  // The same for double and through reduce / reduce_scatter with tiny segments.
  for (int n : {3, 6}) {
    opts_t tiny = ref::test_options();
    tiny.max_segment_bytes = 40;
    check_reduce<D, double>(n, 5000, 1, false, false, tiny);
    check_reduce_scatter_uniform<D, double>(n, 777, true, tiny);
    check_allreduce<D, double>(n, 5000, true, tiny);
    check_allreduce<collx::algo::tree, double>(n, 5000, false, tiny);
  }
}

TEST_CASE("ring is bit-identical run to run and on every rank", "[collectives][reproducible]") {
  using R = collx::algo::ring;
  opts_t small = ref::test_options();
  small.max_segment_bytes = 4096;
  for (int n : {2, 3, 5, 7, 16})
    for (size_t count : {size_t{1}, size_t{1009}, size_t{65537}})
      for (const opts_t* o : {static_cast<const opts_t*>(&small), static_cast<const opts_t*>(nullptr)}) {
        INFO("n=" << n << " count=" << count << (o ? " 4 KiB segments" : ""));
        const opts_t opt = o ? *o : ref::test_options();
        const auto in = ref::gen_ranks<float>(n, count, flavor::general, 99);
        const auto a = allreduce_results<R, float>(in, opt);
        const auto b = allreduce_results<R, float>(in, opt);
        REQUIRE(all_same(a, b));
        for (int r = 1; r < n; ++r) REQUIRE(ref::first_difference<float>(a[uz(r)], a[0]) == ref::npos);
        const auto hb = allreduce_results<R, collx::bfloat16>(ref::gen_ranks<collx::bfloat16>(n, count, flavor::near_one, 5), opt);
        for (int r = 1; r < n; ++r) REQUIRE(ref::first_difference<collx::bfloat16>(hb[uz(r)], hb[0]) == ref::npos);
      }
}

// =============================================================================================
// Buffer contracts (beyond the checks every call above already makes)

TEST_CASE("buffer contracts: send never written, non-root recv untouched, extra element kept", "[collectives][buffers]") {
  // Every check_* above already: poisons outputs, keeps one extra poisoned element past recv,
  // compares send buffers with a copy, and (reduce) requires non-roots' recv and in-place buffers
  // to be untouched. Here: the same with an empty recv on non-roots, and every algorithm at once.
  for (int n : {2, 3, 4, 8})
    for_each_algo<sum>([&](auto tag) {
      using A = decltype(tag);
      for (int root = 0; root < n; ++root) {
        check_reduce<A, std::int64_t>(n, 33, root, false, true);
        check_reduce<A, std::int64_t>(n, 33, root, false, false);
        check_reduce<A, std::int64_t>(n, 33, root, true);
      }
    });
}
