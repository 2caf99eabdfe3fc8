// Shared by tests/test_collectives*.cpp: checks of every collective against the sequential
// reference of tests/reference.hpp (see test_collectives.cpp for what every check verifies).
// Split across several test files so that a parallel build compiles them side by side.
#pragma once

#include <catch2/catch.hpp>

#include "reference.hpp"

#include <atomic>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
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

[[maybe_unused]] inline size_t uz(int x) { return static_cast<size_t>(x); }

template <class T, class Op>
std::string label(const char* coll, algo_id a, int n, bool in_place) {
  return std::string(coll) + "<" + ref::algo_label(a) + "> " + ref::type_label<T>() + " " + ref::op_name<Op>() +
         " n=" + std::to_string(n) + (in_place ? " in place" : " out of place");
}

// The check_* below take the algorithm as a template tag, as the collectives do, but their bodies
// (reference, poisoning, comparisons) are compiled once per (type, op) and take the algorithm as
// a value: only the collective's call is compiled per tag (on_algo). Compiling the tests is most
// of CI's time; one body per (type, op) instead of four makes test_collectives' code 17% smaller.

// Runs f(tag) on one rank for the tag of `a`; a combination with_algo skips (ring for a
// non-commutative op, tree for all_to_all) fails the test instead of passing without a call.
template <class Op, bool NoTree = false, class F>
void on_algo(algo_id a, F&& f) {
  bool called = false;
  ref::with_algo<Op, NoTree>(a, [&](auto tag) {
    called = true;
    f(tag);
  });
  if (!called) throw std::logic_error(std::string("test bug: algorithm ") + ref::algo_label(a) + " does not apply here");
}

// The tag -> value step of each check_* wrapper; refuses what the collectives refuse to compile.
template <class Algo, class Op, bool NoTree = false>
constexpr algo_id checked_id() {
  static_assert(std::is_same_v<Algo, collx::algo::ring> || std::is_same_v<Algo, collx::algo::tree> ||
                    std::is_same_v<Algo, collx::algo::direct> || std::is_same_v<Algo, collx::algo::automatic>,
                "check_* runs ring, tree, direct or automatic (ref::id_of maps any other tag to automatic)");
  static_assert(!std::is_same_v<Algo, collx::algo::ring> || collx::op_traits<Op>::commutative,
                "algo::ring needs a commutative op");
  static_assert(!NoTree || !std::is_same_v<Algo, collx::algo::tree>, "no algo::tree here");
  return ref::id_of<Algo>();
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

template <class T, class Op>
void check_allreduce_as(algo_id a, int n, size_t count, bool in_place, const opts_t& o, Op op, flavor fl,
                        std::uint64_t salt) {
  INFO((label<T, Op>("allreduce", a, n, in_place)) << " count=" << count);
  const auto in = ref::gen_ranks<T>(n, count, fl, salt);
  auto send = in;
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(in_place ? in[uz(r)] : ref::poisoned<T>(count));
  std::vector<collx::algorithm> alg(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        std::span<T> recv(out[r].data(), count);
        on_algo<Op>(a, [&](auto tag) {
          using Algo = decltype(tag);
          alg[r] = ref::resolved<Algo>(c, collective::allreduce, count * sizeof(T), collx::op_traits<Op>::commutative);
          if (in_place) collx::allreduce<Algo>(c, recv, op);
          else collx::allreduce<Algo>(c, std::span<const T>(send[r]), recv, op);
        });
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

template <class Algo, class T, class Op = sum>
void check_allreduce(int n, size_t count, bool in_place, const opts_t& o = ref::test_options(), Op op = {},
                     flavor fl = ref::default_flavor<T, Op>(), std::uint64_t salt = 1) {
  check_allreduce_as<T, Op>(checked_id<Algo, Op>(), n, count, in_place, o, op, fl, salt);
}

// ---------------------------------------------------------------------------------------------
// reduce_scatter and reduce_scatter_v

template <class T, class Op>
void check_reduce_scatter_as(algo_id a, int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                             const opts_t& o, Op op, flavor fl, std::uint64_t salt) {
  const auto pre = ref::prefix(counts);
  const size_t total = pre.back();
  INFO((label<T, Op>(varying ? "reduce_scatter_v" : "reduce_scatter", a, n, in_place)) << " total=" << total);
  const auto in = ref::gen_ranks<T>(n, total, fl, salt);
  auto buf = in;  // the send buffers (in place: the result lands in the rank's own block)
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(ref::poisoned<T>(counts[uz(r)]));
  std::vector<collx::algorithm> alg(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const size_t r = uz(c.rank());
        std::span<T> recv = in_place ? std::span<T>(buf[r].data() + pre[r], counts[r]) : std::span<T>(out[r].data(), counts[r]);
        std::span<const T> send(buf[r]);
        on_algo<Op>(a, [&](auto tag) {
          using Algo = decltype(tag);
          alg[r] = ref::resolved<Algo>(c, collective::reduce_scatter, total * sizeof(T), collx::op_traits<Op>::commutative);
          if (varying) collx::reduce_scatter_v<Algo>(c, send, recv, std::span<const size_t>(counts), op);
          else collx::reduce_scatter<Algo>(c, send, recv, op);
        });
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
void check_reduce_scatter(int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                          const opts_t& o = ref::test_options(), Op op = {}, flavor fl = ref::default_flavor<T, Op>(),
                          std::uint64_t salt = 2) {
  check_reduce_scatter_as<T, Op>(checked_id<Algo, Op>(), n, counts, varying, in_place, o, op, fl, salt);
}

template <class Algo, class T, class Op = sum>
void check_reduce_scatter_uniform(int n, size_t recv_count, bool in_place, const opts_t& o = ref::test_options(),
                                  Op op = {}, flavor fl = ref::default_flavor<T, Op>()) {
  check_reduce_scatter<Algo, T, Op>(n, std::vector<size_t>(uz(n), recv_count), false, in_place, o, op, fl);
}

// ---------------------------------------------------------------------------------------------
// all_gather and all_gather_v

template <class T>
void check_all_gather_as(algo_id a, int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                         const opts_t& o, std::uint64_t salt) {
  const auto pre = ref::prefix(counts);
  const size_t total = pre.back();
  INFO((label<T, collx::detail::no_op>(varying ? "all_gather_v" : "all_gather", a, n, in_place)) << " total=" << total);
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
        on_algo<sum>(a, [&](auto tag) {
          using Algo = decltype(tag);
          if (varying) collx::all_gather_v<Algo>(c, s, recv, std::span<const size_t>(counts));
          else collx::all_gather<Algo>(c, s, recv);
        });
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

template <class Algo, class T>
void check_all_gather(int n, const std::vector<size_t>& counts, bool varying, bool in_place,
                      const opts_t& o = ref::test_options(), std::uint64_t salt = 3) {
  check_all_gather_as<T>(checked_id<Algo, sum>(), n, counts, varying, in_place, o, salt);
}

// ---------------------------------------------------------------------------------------------
// broadcast

template <class T>
void check_broadcast_as(algo_id a, int n, size_t count, int root, bool in_place, bool empty_send_elsewhere,
                        const opts_t& o, std::uint64_t salt) {
  INFO((label<T, collx::detail::no_op>("broadcast", a, n, in_place)) << " count=" << count << " root=" << root);
  const auto in = ref::gen_ranks<T>(n, count, flavor::general, salt);
  auto send = in;
  std::vector<std::vector<T>> out(uz(n));
  for (int r = 0; r < n; ++r) out[uz(r)] = with_guard(in_place && r == root ? in[uz(r)] : ref::poisoned<T>(count));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const int r = c.rank();
        std::span<T> recv(out[uz(r)].data(), count);
        on_algo<sum>(a, [&](auto tag) {
          using Algo = decltype(tag);
          if (in_place && r == root) collx::broadcast<Algo>(c, recv, root);
          else if (r != root && empty_send_elsewhere) collx::broadcast<Algo>(c, std::span<const T>(), recv, root);
          else collx::broadcast<Algo>(c, std::span<const T>(send[uz(r)]), recv, root);
        });
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

template <class Algo, class T>
void check_broadcast(int n, size_t count, int root, bool in_place, bool empty_send_elsewhere = false,
                     const opts_t& o = ref::test_options(), std::uint64_t salt = 4) {
  check_broadcast_as<T>(checked_id<Algo, sum>(), n, count, root, in_place, empty_send_elsewhere, o, salt);
}

// ---------------------------------------------------------------------------------------------
// reduce

template <class T, class Op>
void check_reduce_as(algo_id a, int n, size_t count, int root, bool in_place, bool empty_recv_elsewhere,
                     const opts_t& o, Op op, flavor fl, std::uint64_t salt) {
  INFO((label<T, Op>("reduce", a, n, in_place)) << " count=" << count << " root=" << root);
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
        on_algo<Op>(a, [&](auto tag) {
          using Algo = decltype(tag);
          alg[uz(r)] = ref::resolved<Algo>(c, collective::reduce, count * sizeof(T), collx::op_traits<Op>::commutative);
          if (in_place) {
            collx::reduce<Algo>(c, std::span<T>(buf[uz(r)].data(), count), root, op);
          } else {
            std::span<T> recv(out[uz(r)].data(), r != root && empty_recv_elsewhere ? 0 : count);
            collx::reduce<Algo>(c, std::span<const T>(buf[uz(r)].data(), count), recv, root, op);
          }
        });
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

template <class Algo, class T, class Op = sum>
void check_reduce(int n, size_t count, int root, bool in_place, bool empty_recv_elsewhere = false,
                  const opts_t& o = ref::test_options(), Op op = {}, flavor fl = ref::default_flavor<T, Op>(),
                  std::uint64_t salt = 5) {
  check_reduce_as<T, Op>(checked_id<Algo, Op>(), n, count, root, in_place, empty_recv_elsewhere, o, op, fl, salt);
}

// ---------------------------------------------------------------------------------------------
// all_to_all and all_to_all_v

// sc[r][c]: elements rank r sends to rank c (rank c receives sc[r][c] from r).
template <class T>
void check_all_to_all_as(algo_id a, int n, const std::vector<std::vector<size_t>>& sc, bool varying, const opts_t& o,
                         std::uint64_t salt) {
  INFO((label<T, collx::detail::no_op>(varying ? "all_to_all_v" : "all_to_all", a, n, false)));
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
        on_algo<sum, /*NoTree=*/true>(a, [&](auto tag) {
          using Algo = decltype(tag);
          if (varying)
            collx::all_to_all_v<Algo>(c, std::span<const T>(send[r]), std::span<const size_t>(sc[r]), recv,
                                      std::span<const size_t>(rc[r]));
          else
            collx::all_to_all<Algo>(c, std::span<const T>(send[r]), recv);
        });
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
void check_all_to_all(int n, const std::vector<std::vector<size_t>>& sc, bool varying,
                      const opts_t& o = ref::test_options(), std::uint64_t salt = 6) {
  check_all_to_all_as<T>(checked_id<Algo, sum, /*NoTree=*/true>(), n, sc, varying, o, salt);
}

template <class Algo, class T>
void check_all_to_all_uniform(int n, size_t k, const opts_t& o = ref::test_options()) {
  check_all_to_all<Algo, T>(n, std::vector<std::vector<size_t>>(uz(n), std::vector<size_t>(uz(n), k)), false, o);
}

// Pseudo-random counts in [0, max] (zeros included), world-size entries.
[[maybe_unused]] std::vector<size_t> random_counts(int n, size_t max, std::uint64_t salt) {
  std::vector<size_t> c(uz(n));
  for (int r = 0; r < n; ++r) c[uz(r)] = ref::hash(r, 0, salt) % (max + 1);
  return c;
}
[[maybe_unused]] std::vector<std::vector<size_t>> random_matrix(int n, size_t max, std::uint64_t salt) {
  std::vector<std::vector<size_t>> m(uz(n));
  for (int r = 0; r < n; ++r) m[uz(r)] = random_counts(n, max, salt * 131 + uz(r));
  return m;
}

// Counts of the sweeps: 0, 1, n-1, n, n+1 and the given extras.
[[maybe_unused]] std::vector<size_t> counts_for(int n, std::initializer_list<size_t> extra) {
  std::vector<size_t> c{0, 1, uz(n - 1), uz(n), uz(n + 1)};
  c.insert(c.end(), extra);
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

[[maybe_unused]] constexpr int world_sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};

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
