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
#include "collectives_checks.hpp"
#include "p2p_checks.hpp"

#include <collx/detail/streaming_store.hpp>

#include <algorithm>
#include <complex>
#include <cstring>
#include <mutex>


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

TEST_CASE("all_to_all_v under a selector that chooses by bytes: every rank is asked the same", "[collectives][all_to_all]") {
  // Each rank's query held its own send total, which differs in all_to_all_v: a selector choosing
  // ring from 64 bytes made rank 1 (64 bytes) run ring and rank 0 (8 bytes) direct, and the call
  // failed with "algorithm differs" though the selector answered alike for alike queries.
  collx::communicator_options o = ref::test_options();
  std::vector<std::size_t> asked;  // the bytes of every all_to_all query, any rank
  std::mutex mu;
  o.selector = [&](const collx::selection_query& q) {
    if (q.coll == collective::all_to_all) {
      const std::lock_guard<std::mutex> lock(mu);
      asked.push_back(q.bytes);
    }
    return q.bytes >= 64 ? collx::algorithm::ring : collx::algorithm::direct;
  };
  auto all_asked = [&](std::size_t bytes) {
    const bool same = !asked.empty() && std::all_of(asked.begin(), asked.end(), [&](std::size_t b) { return b == bytes; });
    asked.clear();
    return same;
  };
  check_all_to_all<collx::algo::automatic, float>(2, {{1, 1}, {1, 15}}, true, o);
  CHECK(all_asked(0));  // all_to_all_v: no total the ranks share
  check_all_to_all<collx::algo::automatic, float>(3, random_matrix(3, 40, 9), true, o);
  CHECK(all_asked(0));
  check_all_to_all_uniform<collx::algo::automatic, float>(3, 13, o);
  CHECK(all_asked(3 * 13 * sizeof(float)));  // all_to_all: what each rank sends, the same on every rank
}


TEST_CASE("all_to_all_v whose counts only the senders know: exchanged first with all_to_all, as MPI codes call "
          "MPI_Alltoall before MPI_Alltoallv (a mixture-of-experts dispatch)",
          "[collectives][all_to_all]") {
  // What the README and all_to_all_v's docstring tell users to do. Counts held as std::size_t and as
  // int (MPI's), zeros included; each value names its sender, receiver and index.
  auto sent_count = [](int src, int dst) { return static_cast<int>(ref::hash(src, uz(dst), 77) % 6); };
  auto value = [](int src, int dst, int i) { return std::int64_t{src} << 40 | std::int64_t{dst} << 20 | i; };
  for (int n : {1, 2, 3, 5})
    for (bool int_counts : {false, true}) {
      INFO("n = " << n << (int_counts ? ", int counts" : ", size_t counts"));
      std::vector<std::vector<std::int64_t>> got(uz(n));
      ref::run_ranks(n, [&](collx::communicator& c) {
        const int me = c.rank();
        std::vector<std::int64_t> send;
        std::vector<std::size_t> send_counts(uz(n));
        for (int dst = 0; dst < n; ++dst) {
          send_counts[uz(dst)] = uz(sent_count(me, dst));
          for (int i = 0; i < sent_count(me, dst); ++i) send.push_back(value(me, dst, i));
        }
        auto exchange_then_send = [&](const auto& counts) {
          std::remove_cvref_t<decltype(counts)> recv_counts(uz(n), 12345);  // poisoned
          collx::all_to_all(c, counts, recv_counts);
          std::size_t total = 0;
          for (auto k : recv_counts) total += uz(static_cast<int>(k));
          std::vector<std::int64_t> recv(total, -1);
          collx::all_to_all_v(c, send, counts, recv, recv_counts);
          got[uz(me)] = std::move(recv);
        };
        if (int_counts)
          exchange_then_send(std::vector<int>(send_counts.begin(), send_counts.end()));
        else
          exchange_then_send(send_counts);
      });
      for (int r = 0; r < n; ++r) {  // independent reference: what each sender's counts say rank r gets
        std::vector<std::int64_t> want;
        for (int src = 0; src < n; ++src)
          for (int i = 0; i < sent_count(src, r); ++i) want.push_back(value(src, r, i));
        INFO("rank " << r);
        CHECK(got[uz(r)] == want);
      }
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

TEST_CASE("send_recv: ring shifts both ways, halo edges, a world of one, with send/recv and async (p2p_checks.hpp)",
          "[collectives][send_recv]") {
  for (int n : world_sizes) {
    INFO("n=" << n);
    std::atomic<int> failed{0};
    ref::run_ranks(n, [&](collx::communicator& c) { failed += p2p_checks::run(c, 5000); });
    REQUIRE(failed.load() == 0);
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
      // A ring shift: even ranks send first, odd ranks receive first (send may be synchronous).
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
  for (size_t seg : {size_t{4096}, size_t{64}}) {  // 64: the smallest allowed
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

TEST_CASE("reductions written with streaming stores (communicator_options::streaming_min_bytes) equal the reference",
          "[collectives][counts][streaming]") {
  // The executor streams a reduction's output from streaming_min_bytes of result on: by default a
  // quarter of the last-level cache (8 MiB of 32 MiB), lowered here so that the streamed path runs
  // at sizes any machine affords: at the threshold, with odd tails, and past it.
  REQUIRE(collx::communicator_options{}.streaming_min_bytes == collx::detail::last_level_cache_bytes() / 4);
  opts_t o = ref::test_options();
  o.streaming_min_bytes = 4096;
  for (size_t count : {size_t{1024}, size_t{1027}, size_t{40009}}) {
    INFO("count " << count);
    for_each_algo<sum>([&](auto tag) {
      using A = decltype(tag);
      check_allreduce<A, float>(3, count, false, o);
      check_allreduce<A, float>(2, count + 1, true, o);
      check_allreduce<A, collx::bfloat16>(3, count, false, o);  // finalised (rounded) on the way out
      check_reduce<A, float>(3, count, 1, false, false, o);
    });
    for_each_algo<ref::min_loc>([&](auto tag) {  // an 8-byte struct with a hole: eight per streamed line
      check_allreduce<decltype(tag), ref::loc16>(3, count / 2 + 3, false, o, ref::min_loc{});
    });
  }
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

namespace {
// Complex values whose sums and products stay exact in float (parts -2..2, so a product of 16 is at
// most 8^8 = 2^24 in magnitude), distinct per rank and index, so that every algorithm must give the
// rank-order fold's values (zero parts aside: their sign depends on the order).
template <class C>
C exact_complex(int rank, size_t i) {
  const std::uint64_t h = ref::hash(rank, i, 7);
  using F = typename C::value_type;
  return {static_cast<F>(static_cast<int>(h % 5) - 2), static_cast<F>(static_cast<int>((h >> 8) % 5) - 2)};
}

// allreduce of complex C with Op over n ranks, every algorithm, against the rank-order fold;
// `general` uses full-mantissa parts and checks direct only (bit for bit).
template <class C, class Op>
void check_complex_allreduce(int n, size_t count, bool general) {
  std::vector<std::vector<C>> in(uz(n), std::vector<C>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      in[uz(r)][i] = general ? C(ref::gen<typename C::value_type>(r, i, flavor::general),
                                 ref::gen<typename C::value_type>(r, i, flavor::general, 2))
                             : exact_complex<C>(r, i);
  std::vector<C> want(count);
  for (size_t i = 0; i < count; ++i) {
    C acc = in[0][i];
    for (int r = 1; r < n; ++r) acc = std::is_same_v<Op, collx::ops::prod> ? acc * in[uz(r)][i] : acc + in[uz(r)][i];
    if constexpr (std::is_same_v<Op, collx::ops::avg>) acc /= static_cast<typename C::value_type>(n);
    want[i] = acc;
  }
  for_each_algo<Op>([&](auto tag) {
    using A = decltype(tag);
    if (general && !std::is_same_v<A, collx::algo::direct>) return;
    std::vector<std::vector<C>> out(uz(n));
    ref::run_ranks(n, [&](collx::communicator& c) {
      const size_t r = uz(c.rank());
      out[r] = ref::poisoned<C>(count);
      collx::allreduce<A>(c, std::span<const C>(in[r]), std::span<C>(out[r]), Op{});
    });
    // direct is the fold bit for bit; other orders may differ in the sign of a zero part
    const bool bitwise = std::is_same_v<A, collx::algo::direct>;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << " " << ref::op_name<Op>() << " complex<" << ref::type_label<typename C::value_type>() << ">");
      if (bitwise) REQUIRE(std::memcmp(out[uz(r)].data(), want.data(), count * sizeof(C)) == 0);
      else REQUIRE(out[uz(r)] == want);
    }
  });
}
}  // namespace

TEST_CASE("std::complex sum, prod and avg (as MPI's complex types): every algorithm equals the rank-order fold",
          "[collectives][complex]") {
  static_assert(!collx::reduction_op<collx::ops::min, std::complex<float>>);  // complex has no order
  for (int n : {1, 2, 3, 5, 8, 16})
    for (size_t count : {size_t{1}, size_t{13}, size_t{1009}}) {
      INFO("n=" << n << " count=" << count);
      check_complex_allreduce<std::complex<float>, collx::ops::sum>(n, count, false);
      check_complex_allreduce<std::complex<float>, collx::ops::prod>(n, count, false);
      check_complex_allreduce<std::complex<double>, collx::ops::avg>(n, count, false);
      check_complex_allreduce<std::complex<double>, collx::ops::sum>(n, count, true);
      check_complex_allreduce<std::complex<double>, collx::ops::prod>(n, count, true);
      check_complex_allreduce<std::complex<double>, collx::ops::avg>(n, count, true);
    }
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
    tiny.max_segment_bytes = 64;  // the smallest allowed: 8 doubles
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

TEST_CASE("communicator_options::ring_order: algo::ring follows it; a bad order is rejected", "[collectives][ring_order]") {
  for (int n : {3, 5, 8}) {
    std::vector<int> order(uz(n));
    for (int i = 0; i < n; ++i) order[uz(i)] = (i * (n == 5 ? 3 : 5) + 1) % n;  // a permutation
    opts_t o = ref::test_options();
    o.ring_order = order;
    for (size_t count : {size_t{1}, size_t{97}}) {
      check_allreduce<collx::algo::ring, std::int32_t>(n, count, false, o);
      check_allreduce<collx::algo::ring, float>(n, count, true, o);
      check_reduce_scatter_uniform<collx::algo::ring, std::int64_t>(n, count, false, o);
      check_all_gather<collx::algo::ring, std::int16_t>(n, std::vector<size_t>(uz(n), count), false, false, o);
      for (int root : {0, n - 1}) {
        check_broadcast<collx::algo::ring, double>(n, count, root, false, false, o);
        check_reduce<collx::algo::ring, std::uint32_t>(n, count, root, false, false, o);
      }
    }
  }
  for (const std::vector<int>& bad : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 1}, std::vector<int>{0, 3, 1}}) {
    opts_t o;
    o.ring_order = bad;
    REQUIRE_THROWS_WITH(collx::make_thread_communicators(3, o), Catch::Contains("ring_order"));
  }
}
