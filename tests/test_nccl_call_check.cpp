// The NCCL path's check that all ranks make the same call (collx/nccl/call_check.hpp, used by
// nccl::options::check_calls_over): plain C++ over a host communicator, run here on thread ranks
// without NCCL or a GPU. Every disagreement must end in an error on every rank (none may be left
// waiting), naming the rank that differs and how; agreeing calls pass; a refusing rank's reason
// reaches the others; a rank that never calls gives the others the host's timeout; and the host
// communicator stays usable after a mismatch the check found (only its own failures fail it).
#include <catch2/catch.hpp>

#include <collx/nccl/call_check.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "reference.hpp"
#include "timed_call.hpp"

namespace nccl = collx::nccl;
using collx::errc;

namespace {

std::size_t uz(int x) { return static_cast<std::size_t>(x); }

/// Runs fn on n thread ranks, each rank's collx::error recorded; then, on every rank, a host
/// allreduce that must still work (unless `host_fails`), and its result checked.
std::vector<outcome> run(int n, const std::function<void(collx::communicator&)>& fn, bool host_fails = false,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::vector<outcome> out(uz(n));
  std::vector<int> after(uz(n), -1);
  collx::communicator_options o = ref::test_options();
  o.timeout = timeout;
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        out[uz(c.rank())] = timed_call([&] { fn(c); });
        if (host_fails) return;
        int one[1] = {1};
        collx::allreduce(c, std::span<int>(one));
        after[uz(c.rank())] = one[0];
      },
      o);
  if (!host_fails)
    for (int r = 0; r < n; ++r) CHECK(after[uz(r)] == n);  // the host communicator still works
  return out;
}

std::string describe_all(const std::vector<outcome>& v) {
  std::string s;
  for (std::size_t r = 0; r < v.size(); ++r)
    s += "\n  rank " + std::to_string(r) + ": " + (v[r].code ? std::to_string(static_cast<int>(*v[r].code)) + " " + v[r].what : "no error");
  return s;
}

std::string name_of(const collx::communicator& c) { return "rank " + std::to_string(c.rank()) + " call"; }

}  // namespace

TEST_CASE("nccl call check: signatures and their descriptions", "[nccl]") {
  const nccl::call_signature a = nccl::make_signature(3, "allreduce<float32,sum,nccl>", -1, 100);
  CHECK(nccl::describe(a) == "allreduce<float32,sum,nccl> count 100");
  CHECK(nccl::describe(nccl::make_signature(1, "broadcast<int32,none,nccl>", 2, 7)) == "broadcast<int32,none,nccl> count 7 root 2");
  const std::vector<std::size_t> counts{3, 0, 5};
  CHECK(nccl::describe(nccl::make_signature(1, "all_gather_v<float32,none,nccl>", -1, 0, counts)) ==
        "all_gather_v<float32,none,nccl> (v-form counts)");
  // A name longer than the field is cut, NUL-terminated.
  const std::string longer(100, 'x');
  CHECK(nccl::describe(nccl::make_signature(1, longer, -1, 1)) == std::string(63, 'x') + " count 1");
  // The key holds the whole name and the identity, which the text cannot show.
  CHECK(nccl::make_signature(1, longer + "a", -1, 1).key != nccl::make_signature(1, longer + "b", -1, 1).key);
  CHECK(nccl::make_signature(1, "allreduce<float32,custom,tree>", -1, 1, {}, 1).key !=
        nccl::make_signature(1, "allreduce<float32,custom,tree>", -1, 1, {}, 2).key);
  CHECK(nccl::make_signature(1, "allreduce<float32,sum,nccl>", -1, 1, {}, 7).key ==
        nccl::make_signature(9, "allreduce<float32,sum,nccl>", -1, 1, {}, 7).key);  // the call number is not in it
  CHECK(sizeof(nccl::call_signature) == 240);  // docs/mpi.md quotes the bytes a rank exchanges
  const nccl::call_signature r = nccl::refused(a, errc::invalid_argument, std::string(300, 'y'));
  CHECK(r.refused == static_cast<int>(errc::invalid_argument));
  CHECK(std::string(r.reason) == std::string(sizeof r.reason - 1, 'y'));
}

TEST_CASE("nccl call check: agreeing calls pass, every disagreement fails every rank", "[nccl][threads]") {
  SECTION("the same calls, repeated") {
    const auto v = run(3, [](collx::communicator& c) {
      const std::vector<std::size_t> counts{4, 0, 9};
      for (std::uint64_t k = 1; k <= 20; ++k) {
        nccl::check_same_call(c, nccl::make_signature(k, "allreduce<float32,sum,nccl>", -1, 1000), name_of(c));
        nccl::check_same_call(c, nccl::make_signature(k, "all_gather_v<float32,none,nccl>", -1, 0, counts), name_of(c), counts);
      }
    });
    INFO(describe_all(v));
    for (const outcome& o : v) CHECK(!o.code);
  }
  SECTION("one rank of four calls another type, op, root or count: all four fail, naming it") {
    struct variant {
      const char* what;
      int root;
      std::size_t count;
      const char* says;  // in the odd rank's description
    };
    for (const variant& x : {variant{"allreduce<float64,sum,nccl>", -1, 100, "float64"}, variant{"allreduce<float32,max,nccl>", -1, 100, "max"},
                             variant{"allreduce<float32,sum,nccl>", 1, 100, "root 1"}, variant{"allreduce<float32,sum,nccl>", -1, 99, "count 99"}}) {
      INFO(x.says);
      const auto v = run(4, [&](collx::communicator& c) {
        const bool odd = c.rank() == 2;
        nccl::check_same_call(c, nccl::make_signature(1, odd ? x.what : "allreduce<float32,sum,nccl>", odd ? x.root : -1, odd ? x.count : 100),
                              name_of(c));
      });
      INFO(describe_all(v));
      for (int r = 0; r < 4; ++r) {
        const outcome& o = v[uz(r)];
        REQUIRE(o.code == errc::mismatch);
        CHECK(o.what.find("checked call #1") != std::string::npos);
        CHECK(o.what.find(x.says) != std::string::npos);  // both calls are described
        CHECK(o.what.find(r == 2 ? "rank 0 calls" : "rank 2 calls") != std::string::npos);
        CHECK(o.seconds < 10);
      }
    }
  }
  SECTION("calls that read alike but differ past the text or in identity: all fail, saying so") {
    // A user type's name past the 63 characters shown, and two unnamed user ops of one name.
    const std::string base = "reduce_scatter_v<mylib::quant::block_scaled<__nv_bfloat16, 32>,custom,";
    for (int variant = 0; variant < 2; ++variant) {
      INFO("variant " << variant);
      const auto v = run(3, [&](collx::communicator& c) {
        const bool odd = c.rank() == 1;
        const auto sig = variant == 0 ? nccl::make_signature(1, base + (odd ? "tree>" : "ring>"), -1, 10)
                                      : nccl::make_signature(1, "allreduce<float32,custom,tree>", -1, 10, {}, odd ? 11 : 12);
        nccl::check_same_call(c, sig, name_of(c));
      });
      INFO(describe_all(v));
      for (const outcome& o : v) {
        REQUIRE(o.code == errc::mismatch);
        CHECK(o.what.find("alike in words") != std::string::npos);
      }
    }
  }
  SECTION("v-form counts that differ: every rank names an entry that differs") {
    const auto v = run(3, [](collx::communicator& c) {
      std::vector<std::size_t> counts{4, 0, 9};
      if (c.rank() == 1) counts[2] = 8;
      nccl::check_same_call(c, nccl::make_signature(5, "reduce_scatter_v<int32,sum,nccl>", -1, 0, counts), name_of(c), counts);
    });
    INFO(describe_all(v));
    for (int r = 0; r < 3; ++r) {
      const outcome& o = v[uz(r)];
      REQUIRE(o.code == errc::mismatch);
      CHECK(o.what.find("checked call #5") != std::string::npos);
      CHECK(o.what.find(r == 1 ? "rank 0's counts[2] is 9, this rank's 8" : "rank 1's counts[2] is 8, this rank's 9") != std::string::npos);
    }
  }
  SECTION("a rank that refuses its arguments: the others throw its code and reason, it throws nothing here") {
    const auto v = run(3, [](collx::communicator& c) {
      nccl::call_signature s = nccl::make_signature(1, "broadcast<float32,none,nccl>", 0, 16);
      if (c.rank() == 1) s = nccl::refused(s, errc::invalid_argument, "null buffer with count 16");
      nccl::check_same_call(c, s, name_of(c));
    });
    INFO(describe_all(v));
    CHECK(!v[1].code);  // nccl::detail::run_call then throws the rank's own error
    for (int r : {0, 2}) {
      REQUIRE(v[uz(r)].code == errc::invalid_argument);
      CHECK(v[uz(r)].what.find("rank 1 refused its call: null buffer with count 16") != std::string::npos);
    }
  }
  SECTION("a rank that makes a host collective meanwhile: every rank throws, naming the check") {
    const auto v = run(
        2,
        [](collx::communicator& c) {
          if (c.rank() == 0) {
            nccl::check_same_call(c, nccl::make_signature(1, "allreduce<float32,sum,nccl>", -1, 8), name_of(c));
          } else {
            int x[1] = {1};
            collx::allreduce(c, std::span<int>(x));
          }
        },
        true);
    INFO(describe_all(v));
    std::string all;
    for (const outcome& o : v) {
      REQUIRE(o.code == errc::mismatch);
      all += o.what + "\n";
    }
    CHECK(all.find("called a collx::nccl call's check") != std::string::npos);
    CHECK(v[1].what.find("call_signature") == std::string::npos);  // the other rank is told the user's call
  }
  SECTION("a rank that never makes the call: the others get the host communicator's timeout") {
    // Rank 2 stays (a rank that returns and closes its communicator is named at once instead).
    const auto v = run(
        3,
        [](collx::communicator& c) {
          if (c.rank() != 2) nccl::check_same_call(c, nccl::make_signature(1, "allreduce<float32,sum,nccl>", -1, 8), name_of(c));
          else std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        },
        true, std::chrono::milliseconds(500));
    INFO(describe_all(v));
    for (int r : {0, 1}) {
      REQUIRE(v[uz(r)].code == errc::timeout);
      CHECK(v[uz(r)].seconds < 10);
    }
  }
}

TEST_CASE("nccl call check: all_to_all_v pairs", "[nccl][threads]") {
  // Rank q sends rank d (q + 2 d) % 4 elements; recv_counts are built from that on every rank, so
  // they agree, except where a case changes one entry on one rank.
  for (int n : {1, 2, 4}) {
    INFO("n = " << n);
    auto sent = [](int q, int d) { return static_cast<std::size_t>((q + 2 * d) % 4); };
    for (int bad_rank : {-1, n - 1}) {
      const auto v = run(n, [&](collx::communicator& c) {
        std::vector<std::size_t> sc(uz(n)), rc(uz(n));
        for (int q = 0; q < n; ++q) sc[uz(q)] = sent(c.rank(), q), rc[uz(q)] = sent(q, c.rank());
        if (c.rank() == bad_rank) ++rc[0];
        nccl::check_all_to_all_counts(c, sc, rc, name_of(c));
      });
      INFO(describe_all(v) << "\nbad rank " << bad_rank);
      for (int r = 0; r < n; ++r) {
        const outcome& o = v[uz(r)];
        if (bad_rank < 0) {
          CHECK(!o.code);
          continue;
        }
        REQUIRE(o.code == errc::mismatch);
        if (r == bad_rank)
          CHECK(o.what.find("rank 0 sends this rank " + std::to_string(sent(0, r)) + " elements (its send_counts[" +
                            std::to_string(r) + "]) but recv_counts[0] here is " + std::to_string(sent(0, r) + 1)) != std::string::npos);
        else
          CHECK(o.what.find("rank " + std::to_string(bad_rank) + "'s recv_counts disagree") != std::string::npos);
      }
    }
  }
}
