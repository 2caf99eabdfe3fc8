// collx's error contract over the threads transport: bad arguments are errc::invalid_argument
// before any byte moves; ranks that disagree get errc::mismatch on every rank with the differing
// field named; messages name rank, world size and call; a failed communicator fails every later
// call at once; collx::error is a std::error_code of category "collx".
#include <catch2/catch.hpp>

#include "reference.hpp"
#include "timed_call.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <chrono>
#include <thread>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace {

using collx::errc;
using std::size_t;
using opts_t = collx::communicator_options;

inline size_t uz(int x) { return static_cast<size_t>(x); }

/// A named bad call, for the tables of cases below.
struct named_call {
  const char* name;
  std::function<void(collx::communicator&)> call;
};

/// A named bad call on a rank's buffer of E (pre-filled by the case's test).
template <class E>
struct buffer_case {
  const char* name;
  std::function<void(collx::communicator&, std::vector<E>&)> call;
};

/// Runs fn(comm) on n ranks; every rank records the collx::error it gets (run_ranks must not see
/// it); a rank without one records no code.
std::vector<outcome> run_expecting(int n, const std::function<void(collx::communicator&)>& fn,
                                   const opts_t& o = ref::test_options()) {
  std::vector<outcome> out(uz(n));
  ref::run_ranks(
      n,
      [&](collx::communicator& c) {
        const outcome got = timed_call([&] { fn(c); });
        if (got.code) out[uz(c.rank())] = got;
      },
      o);
  return out;
}

std::string describe(const std::vector<outcome>& v) {
  std::string s;
  for (size_t r = 0; r < v.size(); ++r)
    s += "\n  rank " + std::to_string(r) + ": " +
         (v[r].code ? std::to_string(static_cast<int>(*v[r].code)) + " " + v[r].what : std::string("no error"));
  return s;
}

/// Every rank got `code`.
void require_all(const std::vector<outcome>& v, errc code) {
  INFO(describe(v));
  for (const auto& o : v) REQUIRE(o.code == code);
}

/// Every rank got `code` and its message contains `text`.
void require_all(const std::vector<outcome>& v, errc code, const std::string& text) {
  require_all(v, code);
  INFO(describe(v));
  for (const auto& o : v) REQUIRE(o.what.find(text) != std::string::npos);
}

std::vector<std::pair<std::string, opts_t>> forced_algorithms() {
  return {{"ring", ref::forcing(collx::algorithm::ring)},
          {"tree", ref::forcing(collx::algorithm::tree)},
          {"direct", ref::forcing(collx::algorithm::direct)}};
}

}  // namespace

// =============================================================================================
// invalid_argument

TEST_CASE("bad root: invalid_argument on every rank before any byte moves", "[errors][invalid]") {
  for (const auto& fa : forced_algorithms()) {
    const opts_t& o = fa.second;
    for (int n : {1, 2, 3, 5})
      for (int root : {-1, n, n + 7}) {
        INFO(fa.first << " n=" << n << " root " << root);
        std::vector<std::vector<float>> bc(uz(n)), rd(uz(n));
        auto v = run_expecting(
            n,
            [&](collx::communicator& c) {
              const size_t r = uz(c.rank());
              bc[r] = ref::poisoned<float>(8);
              rd[r] = ref::poisoned<float>(8);
              const auto send = ref::gen_vec<float>(c.rank(), 8, ref::flavor::general);
              collx::broadcast(c, std::span<const float>(send), std::span<float>(bc[r]), root);
            },
            o);
        require_all(v, errc::invalid_argument, "root " + std::to_string(root));
        // reduce on a communicator of its own: after broadcast failed one, any call would throw
        // that failure, whether reduce checks its root or not.
        auto w = run_expecting(
            n,
            [&](collx::communicator& c) {
              const size_t r = uz(c.rank());
              rd[r] = ref::poisoned<float>(8);
              const auto send = ref::gen_vec<float>(c.rank(), 8, ref::flavor::general);
              collx::reduce(c, std::span<const float>(send), std::span<float>(rd[r]), root);
            },
            o);
        require_all(w, errc::invalid_argument, "root " + std::to_string(root));
        for (int r = 0; r < n; ++r) {
          REQUIRE(ref::bytes_equal<float>(bc[uz(r)], ref::poisoned<float>(8)));  // untouched
          REQUIRE(ref::bytes_equal<float>(rd[uz(r)], ref::poisoned<float>(8)));
        }
      }
  }
  SECTION("one rank alone with a bad root: it gets invalid_argument, the others an error, not a hang") {
    // Rank 2 may complete the broadcast (it needs only rank 0's data); the root, which waits for
    // rank 1, fails, and every rank's next call fails.
    const int n = 3;
    auto v = run_expecting(n, [&](collx::communicator& c) {
      std::vector<float> buf(8, 1.f);
      collx::broadcast(c, std::span<float>(buf), c.rank() == 1 ? 3 : 0);
      collx::barrier(c);
    });
    INFO(describe(v));
    REQUIRE(v[1].code == errc::invalid_argument);
    for (const auto& o : v) REQUIRE(o.code.has_value());
  }
  SECTION("send/recv to itself or outside the world") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<float> x(4);
      collx::send(c, std::span<const float>(x), c.rank() == 0 ? 0 : 2);
    });
    require_all(v, errc::invalid_argument, "not another rank");
    v = run_expecting(2, [](collx::communicator& c) {
      std::vector<float> x(4);
      collx::recv(c, std::span<float>(x), -1);
    });
    require_all(v, errc::invalid_argument);
  }
  SECTION("send_recv: a bad peer, one side this rank, overlapping buffers, a copy of another count") {
    using bad_call = std::function<void(collx::communicator&, std::vector<float>&)>;
    const std::pair<bad_call, std::string> cases[] = {
        {[](collx::communicator& c, std::vector<float>& x) {
           collx::send_recv(c, std::span<const float>(x.data(), 4), c.rank() + 1, std::span<float>(x.data() + 4, 4), 1 - c.rank());
         },
         "destination rank 2 is not a rank"},  // rank 1's destination; rank 0's is fine
        {[](collx::communicator& c, std::vector<float>& x) {
           collx::send_recv(c, std::span<const float>(x.data(), 4), 1 - c.rank(), std::span<float>(x.data() + 4, 4), -1);
         },
         "source rank -1 is not a rank"},
        {[](collx::communicator& c, std::vector<float>& x) {
           collx::send_recv(c, std::span<const float>(x.data(), 4), c.rank(), std::span<float>(x.data() + 4, 4), 1 - c.rank());
         },
         "only one of destination and source is this rank"},
        {[](collx::communicator& c, std::vector<float>& x) {
           collx::send_recv(c, std::span<const float>(x.data(), 4), 1 - c.rank(), std::span<float>(x.data() + 3, 4), 1 - c.rank());
         },
         "send and recv overlap"},
        {[](collx::communicator& c, std::vector<float>& x) {
           collx::send_recv(c, std::span<const float>(x.data(), 4), c.rank(), std::span<float>(x.data() + 4, 3), c.rank());
         },
         "a copy to this rank needs send and recv of one type and count (send 4 float32 elements, recv 3 float32 elements)"},
        {[](collx::communicator& c, std::vector<float>&) {
           collx::send_recv(c, std::span<const float>(static_cast<const float*>(nullptr), 2), 1 - c.rank(),
                           std::span<float>(), collx::no_peer);
         },
         "send is a null pointer with 2 elements"},
    };
    for (const auto& bad : cases) {
      const bad_call& call = bad.first;  // (clang 14 lambdas cannot capture structured bindings)
      const std::string& text = bad.second;
      INFO(text);
      std::vector<std::vector<float>> bufs(2, ref::poisoned<float>(8));
      auto v = run_expecting(2, [&](collx::communicator& c) { call(c, bufs[uz(c.rank())]); });
      require_all(v, errc::invalid_argument);
      bool named = false;
      for (const auto& o : v) named = named || o.what.find(text) != std::string::npos;
      REQUIRE(named);
      for (const auto& b : bufs)
        for (const float& f : b) REQUIRE(ref::is_poison(f));  // nothing written by a rejected call
    }
  }
  SECTION("send_recv: a count the peer does not expect is a mismatch on both ranks, no_peer named so") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<float> out(5, 1.f), in(6);
      if (c.rank() == 0) collx::send_recv(c, std::span<const float>(out), 1, std::span<float>(), collx::no_peer);
      else collx::send_recv(c, std::span<const float>(), collx::no_peer, std::span<float>(in), 0);
    });
    require_all(v, errc::mismatch);
    INFO(describe(v));
    REQUIRE(v[0].what.rfind("rank 0/2 send_recv<float32, float32> to 1 from no_peer: ", 0) == 0);
    REQUIRE(v[1].what.rfind("rank 1/2 send_recv<float32, float32> to no_peer from 0: ", 0) == 0);
  }
  SECTION("a world of no ranks") {
    REQUIRE_THROWS_AS(collx::make_thread_communicators(0), collx::error);
    try {
      collx::make_thread_communicators(-3);
    } catch (const collx::error& e) {
      REQUIRE(e.code() == errc::invalid_argument);
    }
  }
}

TEST_CASE("overlapping buffers that are not the exact in-place alias: invalid_argument, nothing written",
          "[errors][invalid]") {
  const int n = 3;
  constexpr size_t k = 4;  // elements per block
  // Each case gets one buffer of 4 n k elements per rank (pre-filled) and calls a collective with
  // send and recv carved from it so that they overlap wrongly.
  using I = std::int32_t;
  const std::vector<buffer_case<I>> cases{
      {"allreduce recv = send + 1",
       [](collx::communicator& c, std::vector<I>& b) {
         collx::allreduce(c, std::span<const I>(b.data(), k), std::span<I>(b.data() + 1, k));
       }},
      {"allreduce recv = send - 3",
       [](collx::communicator& c, std::vector<I>& b) {
         collx::allreduce(c, std::span<const I>(b.data() + 3, k), std::span<I>(b.data(), k));
       }},
      {"reduce_scatter recv inside send, not the own block",
       [](collx::communicator& c, std::vector<I>& b) {
         const size_t r = uz(c.rank());
         collx::reduce_scatter(c, std::span<const I>(b.data(), n * k), std::span<I>(b.data() + r * k + 1, k));
       }},
      {"reduce_scatter recv = another rank's block",
       [](collx::communicator& c, std::vector<I>& b) {
         const size_t r = uz((c.rank() + 1) % n);
         collx::reduce_scatter(c, std::span<const I>(b.data(), n * k), std::span<I>(b.data() + r * k, k));
       }},
      {"reduce_scatter_v recv overlapping the end of send",
       [](collx::communicator& c, std::vector<I>& b) {
         const std::vector<size_t> counts{k, k, k};
         collx::reduce_scatter_v(c, std::span<const I>(b.data(), n * k), std::span<I>(b.data() + n * k - 1, counts[uz(c.rank())]),
                                 std::span<const size_t>(counts));
       }},
      {"all_gather send inside recv, not the own slot",
       [](collx::communicator& c, std::vector<I>& b) {
         const size_t r = uz(c.rank());
         collx::all_gather(c, std::span<const I>(b.data() + r * k + 2, k), std::span<I>(b.data(), n * k));
       }},
      {"all_gather_v send = the previous rank's slot",
       [](collx::communicator& c, std::vector<I>& b) {
         const std::vector<size_t> counts{k, k, k};
         const size_t r = uz((c.rank() + n - 1) % n);
         collx::all_gather_v(c, std::span<const I>(b.data() + r * k, k), std::span<I>(b.data(), n * k),
                             std::span<const size_t>(counts));
       }},
      {"broadcast at the root: recv = send + 2",
       [](collx::communicator& c, std::vector<I>& b) {
         collx::broadcast(c, std::span<const I>(b.data(), k), std::span<I>(b.data() + 2, k), c.rank());
       }},
      {"reduce at the root: recv = send + 1",
       [](collx::communicator& c, std::vector<I>& b) {
         collx::reduce(c, std::span<const I>(b.data(), k), std::span<I>(b.data() + 1, k), c.rank());
       }},
      {"all_to_all send == recv (never in place)",
       [](collx::communicator& c, std::vector<I>& b) {
         collx::all_to_all(c, std::span<const I>(b.data(), n * k), std::span<I>(b.data(), n * k));
       }},
      {"all_to_all_v recv overlapping send",
       [](collx::communicator& c, std::vector<I>& b) {
         const std::vector<size_t> counts{k, k, k};
         collx::all_to_all_v(c, std::span<const I>(b.data(), n * k), std::span<const size_t>(counts),
                             std::span<I>(b.data() + k, n * k), std::span<const size_t>(counts));
       }},
  };
  for (const auto& fa : forced_algorithms())
    for (const auto& oc : cases) {
      INFO(fa.first << ": " << oc.name);
      std::vector<std::vector<I>> buf(uz(n));
      for (int r = 0; r < n; ++r) buf[uz(r)] = ref::gen_vec<I>(r, 4 * n * k, ref::flavor::general);
      const auto before = buf;
      // (broadcast/reduce: every rank names itself the root, so every rank checks its own overlap)
      auto v = run_expecting(
          n, [&](collx::communicator& c) { oc.call(c, buf[uz(c.rank())]); }, fa.second);
      require_all(v, errc::invalid_argument, "overlap");
      for (size_t r = 0; r < v.size(); ++r) REQUIRE(buf[r] == before[r]);
    }
}

TEST_CASE("buffers sharing a single byte overlap; buffers that only touch do not", "[errors][invalid]") {
  // With 1-byte elements the smallest overlap is one byte: an off-by-one in the overlap test
  // passes every case above (4-byte elements share at least 4 bytes).
  const int n = 3;
  constexpr size_t k = 5;
  using B = std::uint8_t;
  const std::vector<buffer_case<B>> cases{
      {"allreduce recv starts at send's last byte",
       [](collx::communicator& c, std::vector<B>& b) {
         collx::allreduce(c, std::span<const B>(b.data(), k), std::span<B>(b.data() + k - 1, k), collx::ops::bxor{});
       }},
      {"allreduce send starts at recv's last byte",
       [](collx::communicator& c, std::vector<B>& b) {
         collx::allreduce(c, std::span<const B>(b.data() + k - 1, k), std::span<B>(b.data(), k), collx::ops::bxor{});
       }},
      {"all_gather recv ends at send's first byte",
       [](collx::communicator& c, std::vector<B>& b) {
         collx::all_gather(c, std::span<const B>(b.data() + n * k - 1, k), std::span<B>(b.data(), n * k));
       }},
      {"broadcast at the root: recv starts at send's last byte",
       [](collx::communicator& c, std::vector<B>& b) {
         collx::broadcast(c, std::span<const B>(b.data(), k), std::span<B>(b.data() + k - 1, k), c.rank());
       }},
      {"reduce at the root: recv starts at send's last byte",
       [](collx::communicator& c, std::vector<B>& b) {
         collx::reduce(c, std::span<const B>(b.data(), k), std::span<B>(b.data() + k - 1, k), c.rank(),
                       collx::ops::bxor{});
       }},
  };
  for (const auto& oc : cases) {
    INFO(oc.name);
    std::vector<std::vector<B>> buf(uz(n));
    for (int r = 0; r < n; ++r) buf[uz(r)] = ref::gen_vec<B>(r, 4 * n * k, ref::flavor::general);
    const auto before = buf;
    auto v = run_expecting(n, [&](collx::communicator& c) { oc.call(c, buf[uz(c.rank())]); });
    require_all(v, errc::invalid_argument, "overlap");
    for (size_t r = 0; r < v.size(); ++r) REQUIRE(buf[r] == before[r]);
  }
  // Touching, not overlapping, in either order: send [0, k) and recv [k, 2k) of one buffer is
  // legal, and so is send [k, 2k) with recv [0, k).
  for (const bool send_first : {true, false}) {
    INFO("send " << (send_first ? "before" : "after") << " recv");
    const std::size_t send_at = send_first ? 0 : k, recv_at = send_first ? k : 0;
    std::vector<std::vector<B>> buf(uz(n));
    for (int r = 0; r < n; ++r) buf[uz(r)] = ref::gen_vec<B>(r, 2 * k, ref::flavor::general);
    const auto before = buf;
    ref::run_ranks(n, [&](collx::communicator& c) {
      std::vector<B>& b = buf[uz(c.rank())];
      collx::allreduce(c, std::span<const B>(b.data() + send_at, k), std::span<B>(b.data() + recv_at, k), collx::ops::bxor{});
    });
    for (size_t i = 0; i < k; ++i) {
      B expect = 0;
      for (int r = 0; r < n; ++r) expect = static_cast<B>(expect ^ before[uz(r)][send_at + i]);
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r << " element " << i);
        REQUIRE(buf[uz(r)][recv_at + i] == expect);
        REQUIRE(buf[uz(r)][send_at + i] == before[uz(r)][send_at + i]);
      }
    }
  }
  // The test itself, at its edges: one byte shared either way overlaps, touching does not.
  const char bytes[16] = {};
  CHECK_FALSE(collx::detail::overlap(bytes, 8, bytes + 8, 8));
  CHECK_FALSE(collx::detail::overlap(bytes + 8, 8, bytes, 8));
  CHECK(collx::detail::overlap(bytes, 8, bytes + 7, 8));
  CHECK(collx::detail::overlap(bytes + 7, 8, bytes, 8));
  CHECK_FALSE(collx::detail::overlap(bytes, 0, bytes, 8));
}

TEST_CASE("the history digest changes with every field of a call's signature", "[errors][mismatch]") {
  // Ranks whose records of a finished call differ (a root that only sent, say) learn it at their
  // next message from this digest alone: a field left out of it passes such a disagreement.
  collx::call_signature base;
  base.seq = 7;
  base.count = 100;
  base.type_hash = 0x1234;
  base.op_hash = 0x5678;
  base.layout_hash = 0x9abc;
  base.type_size = 4;
  base.root = 1;
  base.coll = collx::collective::broadcast;
  base.algo = 2;
  base.varying = 0;
  const std::uint64_t d = collx::history_digest(42, base);
  std::vector<std::pair<const char*, collx::call_signature>> changed;
  auto with = [&](const char* name, auto edit) {
    collx::call_signature s = base;
    edit(s);
    changed.emplace_back(name, s);
  };
  with("seq", [](auto& s) { s.seq = 8; });
  with("count", [](auto& s) { s.count = 101; });
  with("type_hash", [](auto& s) { s.type_hash = 0x1235; });
  with("op_hash", [](auto& s) { s.op_hash = 0x5679; });
  with("layout_hash", [](auto& s) { s.layout_hash = 0x9abd; });
  with("type_size", [](auto& s) { s.type_size = 8; });
  with("root", [](auto& s) { s.root = 2; });
  with("root -1", [](auto& s) { s.root = -1; });
  with("coll", [](auto& s) { s.coll = collx::collective::reduce; });
  with("algo", [](auto& s) { s.algo = 1; });
  with("varying", [](auto& s) { s.varying = 1; });
  for (const auto& [name, s] : changed) {
    INFO(name);
    CHECK(collx::history_digest(42, s) != d);
  }
  CHECK(collx::history_digest(43, base) != d);  // the calls before it
  CHECK(collx::history_digest(42, base) == d);
}

TEST_CASE("a null buffer with elements: invalid_argument on every rank, not a crash", "[errors][invalid]") {
  // std::span<T>(nullptr, n) is the caller's bug, but the library would read or write address 0.
  const int n = 3;
  constexpr size_t k = 4;
  using I = std::int32_t;
  const std::vector<buffer_case<I>> cases{
      {"allreduce send", [](collx::communicator& c, std::vector<I>& b) {
         collx::allreduce(c, std::span<const I>(static_cast<const I*>(nullptr), k), std::span<I>(b.data(), k));
       }},
      {"allreduce in place", [](collx::communicator& c, std::vector<I>&) {
         collx::allreduce(c, std::span<I>(static_cast<I*>(nullptr), k));
       }},
      {"reduce_scatter recv", [](collx::communicator& c, std::vector<I>& b) {
         collx::reduce_scatter(c, std::span<const I>(b.data(), n * k), std::span<I>(static_cast<I*>(nullptr), k));
       }},
      {"all_gather_v send", [](collx::communicator& c, std::vector<I>& b) {
         const std::vector<size_t> counts{k, k, k};
         collx::all_gather_v(c, std::span<const I>(static_cast<const I*>(nullptr), k), std::span<I>(b.data(), n * k),
                             std::span<const size_t>(counts));
       }},
      {"broadcast recv", [](collx::communicator& c, std::vector<I>&) {
         collx::broadcast(c, std::span<I>(static_cast<I*>(nullptr), k), 0);
       }},
      {"reduce send", [](collx::communicator& c, std::vector<I>& b) {
         collx::reduce(c, std::span<const I>(static_cast<const I*>(nullptr), k), std::span<I>(b.data(), k), 0);
       }},
      {"all_to_all recv", [](collx::communicator& c, std::vector<I>& b) {
         collx::all_to_all(c, std::span<const I>(b.data(), n * k), std::span<I>(static_cast<I*>(nullptr), n * k));
       }},
  };
  for (const auto& nc : cases) {
    INFO(nc.name);
    std::vector<std::vector<I>> buf(uz(n));
    for (int r = 0; r < n; ++r) buf[uz(r)] = ref::gen_vec<I>(r, 4 * n * k, ref::flavor::general);
    const auto before = buf;
    auto v = run_expecting(n, [&](collx::communicator& c) { nc.call(c, buf[uz(c.rank())]); });
    require_all(v, errc::invalid_argument, "null pointer with");
    for (size_t r = 0; r < v.size(); ++r) REQUIRE(buf[r] == before[r]);
  }
  // Send/recv: the rank that passed it; its peer learns it from the communicator.
  auto v = run_expecting(2, [](collx::communicator& c) {
    std::vector<float> x(4);
    if (c.rank() == 0) collx::send(c, std::span<const float>(static_cast<const float*>(nullptr), 4), 1);
    else collx::recv(c, std::span<float>(x), 0);
  });
  INFO(describe(v));
  REQUIRE(v[0].code == errc::invalid_argument);
  REQUIRE(v[1].code.has_value());
  // An empty span may be null: count 0 moves nothing.
  auto ok = run_expecting(n, [](collx::communicator& c) { collx::allreduce(c, std::span<I>(static_cast<I*>(nullptr), 0)); });
  for (const auto& o : ok) REQUIRE_FALSE(o.code.has_value());
}

TEST_CASE("size mismatches within a call: invalid_argument on every rank", "[errors][invalid]") {
  const int n = 3;
  using F = float;
  const std::vector<named_call> cases{
      {"allreduce send 8, recv 7",
       [](collx::communicator& c) {
         std::vector<F> s(8), r(7);
         collx::allreduce(c, std::span<const F>(s), std::span<F>(r));
       }},
      {"reduce_scatter send != n * recv",
       [](collx::communicator& c) {
         std::vector<F> s(3 * 4 + 1), r(4);
         collx::reduce_scatter(c, std::span<const F>(s), std::span<F>(r));
       }},
      {"reduce_scatter_v counts of the wrong length",
       [](collx::communicator& c) {
         std::vector<F> s(6), r(2);
         const std::vector<size_t> counts{2, 2, 2, 0};
         collx::reduce_scatter_v(c, std::span<const F>(s), std::span<F>(r), std::span<const size_t>(counts));
       }},
      {"reduce_scatter_v recv != own count",
       [](collx::communicator& c) {
         std::vector<F> s(6), r(3);
         const std::vector<size_t> counts{1, 2, 3};
         collx::reduce_scatter_v(c, std::span<const F>(s), std::span<F>(r.data(), 3 - (c.rank() == 2)),
                                 std::span<const size_t>(counts));
       }},
      {"all_gather recv != n * send",
       [](collx::communicator& c) {
         std::vector<F> s(4), r(11);
         collx::all_gather(c, std::span<const F>(s), std::span<F>(r));
       }},
      {"all_gather_v send != own count",
       [](collx::communicator& c) {
         std::vector<F> s(5), r(6);
         const std::vector<size_t> counts{2, 2, 2};
         collx::all_gather_v(c, std::span<const F>(s), std::span<F>(r), std::span<const size_t>(counts));
       }},
      {"broadcast at the root send 4, recv 5",
       [](collx::communicator& c) {
         std::vector<F> s(4), r(5);
         collx::broadcast(c, std::span<const F>(s), std::span<F>(r), c.rank());
       }},
      {"reduce at the root send 4, recv 3",
       [](collx::communicator& c) {
         std::vector<F> s(4), r(3);
         collx::reduce(c, std::span<const F>(s), std::span<F>(r), c.rank());
       }},
      {"all_to_all send not a multiple of n",
       [](collx::communicator& c) {
         std::vector<F> s(7), r(7);
         collx::all_to_all(c, std::span<const F>(s), std::span<F>(r));
       }},
      {"all_to_all recv != send",
       [](collx::communicator& c) {
         std::vector<F> s(6), r(9);
         collx::all_to_all(c, std::span<const F>(s), std::span<F>(r));
       }},
      {"all_to_all_v send shorter than send_counts",
       [](collx::communicator& c) {
         std::vector<F> s(5), r(6);
         const std::vector<size_t> counts{2, 2, 2};
         collx::all_to_all_v(c, std::span<const F>(s), std::span<const size_t>(counts), std::span<F>(r),
                             std::span<const size_t>(counts));
       }},
      {"all_to_all_v self count differs",
       [](collx::communicator& c) {
         std::vector<F> s(6), r(7);
         std::vector<size_t> sc{2, 2, 2}, rc{2, 2, 2};
         rc[uz(c.rank())] = 3;
         collx::all_to_all_v(c, std::span<const F>(s), std::span<const size_t>(sc), std::span<F>(r),
                             std::span<const size_t>(rc));
       }},
  };
  for (const auto& sc : cases) {
    INFO(sc.name);
    // Each message names the call as the user wrote it: the case name's first word ("all_gather_v",
    // not "all_gather"), followed by its template arguments.
    const std::string call = std::string(sc.name).substr(0, std::string(sc.name).find(' '));
    require_all(run_expecting(n, sc.call), errc::invalid_argument, " " + call + "<");
  }
  SECTION("all_to_all_v counts of the wrong length: which list, how long, how long it must be") {
    const auto v = run_expecting(n, [](collx::communicator& c) {
      std::vector<F> s(4), r(6);
      const std::vector<size_t> sc{2, 2}, rc{2, 2, 2};
      collx::all_to_all_v(c, std::span<const F>(s), std::span<const size_t>(sc), std::span<F>(r),
                          std::span<const size_t>(rc));
    });
    require_all(v, errc::invalid_argument, "send_counts has 2 and recv_counts 3 entries for 3 ranks (both need one per rank)");
  }
}

TEST_CASE("all_to_all_v: a rank whose own send and receive counts differ is told both", "[errors][invalid]") {
  const auto v = run_expecting(3, [](collx::communicator& c) {
    std::vector<float> s(6), r(7);
    std::vector<size_t> sc{2, 2, 2}, rc{2, 2, 2};
    rc[uz(c.rank())] = 3;
    collx::all_to_all_v(c, std::span<const float>(s), std::span<const size_t>(sc), std::span<float>(r),
                        std::span<const size_t>(rc));
  });
  for (int r = 0; r < 3; ++r) {
    const std::string k = std::to_string(r);
    INFO(v[uz(r)].what);
    CHECK(v[uz(r)].what.find("sends itself 2 elements (send_counts[" + k + "]) but receives 3 from itself (recv_counts[" +
                             k + "])") != std::string::npos);
  }
}

TEST_CASE("communicator_options out of range: invalid_argument from the constructor, as the variables", "[errors][invalid]") {
  // A timeout of 0 ms (or below) failed the first call with "timed out after -5 ms"; a segment of 0
  // bytes ran every reduction one element at a time, thousands of times slower, never timing out.
  for (const auto ms : {0, -5}) {
    opts_t o;
    o.timeout = std::chrono::milliseconds(ms);
    REQUIRE_THROWS_WITH(collx::make_thread_communicators(2, o), Catch::Contains("communicator_options::timeout is " + std::to_string(ms) + " ms"));
  }
  for (const size_t bytes : {size_t{0}, size_t{63}}) {
    opts_t o;
    o.max_segment_bytes = bytes;
    REQUIRE_THROWS_WITH(collx::make_thread_communicators(2, o), Catch::Contains("max_segment_bytes is " + std::to_string(bytes)));
  }
  opts_t least;
  least.timeout = std::chrono::milliseconds(1);
  least.max_segment_bytes = 64;
  CHECK_NOTHROW(collx::make_thread_communicators(2, least));
}

TEST_CASE("v-form counts that add up past memory: invalid_argument, nothing written outside recv", "[errors][invalid]") {
  // (std::size_t)-1 from a negative int wrapped the sum to a small number that passed the size
  // checks: ranks wrote recv[-1] or read send[-1]. Rank 0 starts late, so the others check alone.
  const int n = 3;
  using F = float;
  constexpr size_t guard = 8;
  struct counts_case {
    const char* name;
    bool every_rank;  ///< the bad counts are on every rank (else on rank 1 only)
    std::function<void(collx::communicator&, std::span<F> recv)> call;
  };
  const size_t wraps = SIZE_MAX, past_bytes = size_t{1} << 62;  // the sum wraps; the bytes pass PTRDIFF_MAX
  const std::vector<counts_case> cases{
      {"all_gather_v", true,
       [&](collx::communicator& c, std::span<F> recv) {
         const std::vector<size_t> counts{wraps, 1, 1};
         std::vector<F> send(1, 1.f);
         collx::all_gather_v(c, std::span<const F>(send.data(), c.rank() == 0 ? 0 : 1), recv.first(1), counts);
       }},
      {"all_gather_v", true,
       [&](collx::communicator& c, std::span<F> recv) {
         const std::vector<size_t> counts{past_bytes, 0, 0};
         collx::all_gather_v(c, std::span<const F>(), recv.first(0), counts);
       }},
      {"reduce_scatter_v", true,
       [&](collx::communicator& c, std::span<F> recv) {
         const std::vector<size_t> counts{1, wraps, 1};
         std::vector<F> send(1, 1.f);
         collx::reduce_scatter_v(c, std::span<const F>(send), recv.first(c.rank() == 1 ? 0 : 1), counts);
       }},
      {"all_to_all_v", false,
       [&](collx::communicator& c, std::span<F> recv) {
         const std::vector<size_t> ones{1, 1, 1}, bad{wraps, 1, 2};
         std::vector<F> send(3, 1.f);
         collx::all_to_all_v(c, std::span<const F>(send), c.rank() == 1 ? bad : ones, recv.first(3), ones);
       }},
  };
  for (const auto& cc : cases) {
    INFO(cc.name);
    std::vector<std::vector<F>> bufs(uz(n), std::vector<F>(guard + 3 + guard, -7.f));
    const auto v = run_expecting(n, [&](collx::communicator& c) {
      if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cc.call(c, std::span<F>(bufs[uz(c.rank())]).subspan(guard, 3));
    });
    INFO(describe(v));
    for (int r = 0; r < n; ++r) {
      REQUIRE(v[uz(r)].code.has_value());
      if (cc.every_rank || r == 1) {
        CHECK(v[uz(r)].code == errc::invalid_argument);
        CHECK(v[uz(r)].what.find("more than memory holds") != std::string::npos);
      }
      for (size_t i = 0; i < guard; ++i) {
        CHECK(bufs[uz(r)][i] == -7.f);
        CHECK(bufs[uz(r)][guard + 3 + i] == -7.f);
      }
    }
  }
}

// =============================================================================================
// mismatch

namespace {
/// n = 2 ranks making different calls: both must get errc::mismatch naming `field`.
/// ... and every rank's message also names each of `values` (the two ranks' types or ops).
void require_mismatch(const std::function<void(collx::communicator&)>& rank0,
                      const std::function<void(collx::communicator&)>& rank1, const std::string& field,
                      const opts_t& o = ref::test_options(), const std::vector<std::string>& values = {}) {
  auto v = run_expecting(
      2, [&](collx::communicator& c) { c.rank() == 0 ? rank0(c) : rank1(c); }, o);
  require_all(v, errc::mismatch, field);
  for (const std::string& value : values) require_all(v, errc::mismatch, value);
}

// Two user ops without a `name` (before, both were "custom" in the signature and met unnoticed).
struct add_custom {
  float operator()(float a, float b) const { return a + b; }
};
struct larger_custom {
  float operator()(float a, float b) const { return a < b ? b : a; }
};
// Two ops that share a name, and a user op that calls itself "sum" (before, the name alone was
// compared: ranks reduced with different ops and got different results without an error).
struct named_add {
  static constexpr const char* name = "myop";
  float operator()(float a, float b) const { return a + b; }
};
struct named_mul {
  static constexpr const char* name = "myop";
  float operator()(float a, float b) const { return a * b; }
};
struct named_sum_subtracting {
  static constexpr const char* name = "sum";
  float operator()(float a, float b) const { return a - b; }
};

template <class T>
std::function<void(collx::communicator&)> allreduce_of(size_t count) {
  return [count](collx::communicator& c) {
    std::vector<T> x(count, T{});
    collx::allreduce(c, std::span<T>(x));
  };
}
}  // namespace

TEST_CASE("ranks that disagree: mismatch on every rank, the differing field named", "[errors][mismatch]") {
  for (const auto& fa : forced_algorithms()) {
    INFO("forced " << fa.first);
    const opts_t& o = fa.second;
    SECTION("element type of the same size: float32 vs int32 (" + fa.first + ")") {
      require_mismatch(allreduce_of<float>(16), allreduce_of<std::int32_t>(16), "element type differs", o,
                       {"float32 (4-byte)", "int32 (4-byte)"});
    }
    SECTION("element type of another size: float32 vs float64 (" + fa.first + ")") {
      require_mismatch(allreduce_of<float>(16), allreduce_of<double>(16), "element type differs", o,
                       {"float32 (4-byte)", "float64 (8-byte)"});
    }
    SECTION("element type over the same bytes: 200 float32 vs 100 float64, named as the type (" + fa.first + ")") {
      require_mismatch(allreduce_of<float>(200), allreduce_of<double>(100), "element type differs", o,
                       {"float32 (4-byte)", "float64 (8-byte)", "; count differs: rank "});
    }
    SECTION("op: sum vs max (" + fa.first + ")") {
      require_mismatch(
          allreduce_of<float>(16),
          [](collx::communicator& c) {
            std::vector<float> x(16);
            collx::allreduce(c, std::span<float>(x), collx::ops::max{});
          },
          "reduction op differs", o, {"with max", "with sum"});
    }
    SECTION("op: two user ops without names (" + fa.first + ")") {
      auto with = [](auto op) {
        return [op](collx::communicator& c) {
          std::vector<float> x(16);
          collx::allreduce(c, std::span<float>(x), op);
        };
      };
      require_mismatch(with(add_custom{}), with(larger_custom{}), "reduction op differs", o, {"add_custom", "larger_custom"});
    }
    SECTION("op: two op types that share a name (" + fa.first + ")") {
      auto with = [](auto op) {
        return [op](collx::communicator& c) {
          std::vector<float> x(16);
          collx::allreduce(c, std::span<float>(x), op);
        };
      };
      require_mismatch(with(named_add{}), with(named_mul{}), "reduction op differs", o, {"two op types of that name"});
      require_mismatch(with(collx::ops::sum{}), with(named_sum_subtracting{}), "reduction op differs", o);
    }
    SECTION("op: two user lambdas with the same parameters (" + fa.first + ")") {
      // g++ spells both types "C_A_T_C_H...()::<lambda(float, float)>": the signature must not rely on that.
      const auto add = [](float a, float b) { return a + b; };
      const auto larger = [](float a, float b) { return a < b ? b : a; };
      auto with = [](auto op) {
        return [op](collx::communicator& c) {
          std::vector<float> x(16);
          collx::allreduce(c, std::span<float>(x), op);
        };
      };
      require_mismatch(with(add), with(larger), "reduction op differs", o);
    }
    SECTION("collective: allreduce vs broadcast (" + fa.first + ")") {
      require_mismatch(
          allreduce_of<float>(16),
          [](collx::communicator& c) {
            std::vector<float> x(16);
            collx::broadcast(c, std::span<float>(x), 1);
          },
          "collective differs", o);
    }
    SECTION("count: 16 vs 17 (" + fa.first + ")") {
      require_mismatch(allreduce_of<float>(16), allreduce_of<float>(17), "count differs", o);
    }
    if (fa.first != "tree")  // all_to_all has none
      SECTION("all_to_all count: named per block, as the send count / world size (" + fa.first + ")") {
        auto a2a = [](size_t block) {
          return [block](collx::communicator& c) {
            std::vector<float> s(block * uz(c.size())), r(s.size());
            collx::all_to_all(c, std::span<const float>(s), std::span<float>(r));
          };
        };
        require_mismatch(a2a(3), a2a(4), "count per block (the send count / world size) differs", o);
      }
    SECTION("all_gather count: named per rank (" + fa.first + ")") {
      auto ag = [](size_t block) {
        return [block](collx::communicator& c) {
          std::vector<float> s(block), r(block * uz(c.size()));
          collx::all_gather(c, std::span<const float>(s), std::span<float>(r));
        };
      };
      require_mismatch(ag(3), ag(4), "count per rank (the send count;", o);
    }
    SECTION("reduce_scatter_v counts: same total, different split (" + fa.first + ")") {
      auto rs = [](std::vector<size_t> counts) {
        return [counts](collx::communicator& c) {
          std::vector<float> s(6), r(counts[uz(c.rank())]);
          collx::reduce_scatter_v(c, std::span<const float>(s), std::span<float>(r), std::span<const size_t>(counts));
        };
      };
      auto v = run_expecting(2, [&](collx::communicator& c) { c.rank() == 0 ? rs({2, 4})(c) : rs({3, 3})(c); }, o);
      require_all(v, errc::mismatch, "per-rank counts differ");
      // The signature holds only a hash of the counts: each rank names its own.
      CHECK_THAT(v[0].what, Catch::Matchers::Contains("rank 0's counts [2, 4]"));
      CHECK_THAT(v[1].what, Catch::Matchers::Contains("rank 1's counts [3, 3]"));
    }
  }
  SECTION("algorithm: explicit ring vs explicit direct") {
    require_mismatch(
        [](collx::communicator& c) {
          std::vector<float> x(64);
          collx::allreduce<collx::algo::ring>(c, std::span<float>(x));
        },
        [](collx::communicator& c) {
          std::vector<float> x(64);
          collx::allreduce<collx::algo::direct>(c, std::span<float>(x));
        },
        "algorithm differs");
  }
  SECTION("algorithm: explicit tree vs automatic forced to direct") {
    require_mismatch(
        [](collx::communicator& c) {
          std::vector<float> x(64);
          collx::allreduce<collx::algo::tree>(c, std::span<float>(x));
        },
        [](collx::communicator& c) {
          std::vector<float> x(64);
          collx::allreduce(c, std::span<float>(x));
        },
        "algorithm differs", ref::forcing(collx::algorithm::direct));
  }
  SECTION("a rank skipped a call: sequence differs") {
    // Rank 1's zero-count call #2 posts its signature and returns; rank 0, at its #2, meets
    // either that signature (count 0 against 8) or, if rank 1 is already on, its #3, and then
    // rank 1's published record of #2. Either way the count is named, from either side.
    const auto v = run_expecting(
        2,
        [](collx::communicator& c) {
          std::vector<float> x(8), y(8);
          collx::allreduce(c, std::span<float>(x));
          if (c.rank() == 1) collx::allreduce(c, std::span<float>(y.data(), 0));  // a zero-count call others did not make
          collx::allreduce(c, std::span<float>(x));
        },
        ref::test_options());
    require_all(v, errc::mismatch);
    INFO(describe(v));
    for (const auto& o : v)
      CHECK((o.what.find("count differs: rank 1 has 0, rank 0 has 8") != std::string::npos ||
             o.what.find("count differs: rank 0 has 8, rank 1 has 0") != std::string::npos));
  }
  SECTION("send/recv count and type") {
    require_mismatch(
        [](collx::communicator& c) {
          std::vector<float> x(8);
          collx::send(c, std::span<const float>(x), 1);
        },
        [](collx::communicator& c) {
          std::vector<float> x(9);
          collx::recv(c, std::span<float>(x), 0);
        },
        "count differs");
    require_mismatch(
        [](collx::communicator& c) {
          std::vector<float> x(8);
          collx::send(c, std::span<const float>(x), 1);
        },
        [](collx::communicator& c) {
          std::vector<std::int32_t> x(8);
          collx::recv(c, std::span<std::int32_t>(x), 0);
        },
        "element type differs");
  }
  SECTION("one rank of four disagrees: every rank errors; ranks that agree read no freed buffer") {
    // Ranks 0, 2, 3 agree, so their messages match and are read in place, while rank 0 meets rank 1,
    // fails, and its caller frees its buffer: under ASan, a peer still reading it would be reported
    // (a race, rarely hit here; the all_to_all_v case below hits it every time without the fix).
    for (const auto& fa : forced_algorithms()) {
      INFO("forced " << fa.first);
      for (int round = 0; round < 3; ++round) {
        auto v = run_expecting(
            4,
            [](collx::communicator& c) {
              std::vector<float> x(c.rank() == 1 ? 100 : 1 << 20, 1.f);
              collx::allreduce(c, std::span<float>(x));
            },
            fa.second);
        INFO(describe(v));
        for (const auto& oc : v) REQUIRE(oc.code.has_value());
      }
    }
  }
  SECTION("all_to_all_v: a pair disagrees on its count, also when one side says 0") {
    for (size_t says : {size_t{3}, size_t{0}}) {
      INFO("rank 1 expects " << says << " elements from rank 0, which sends 2");
      auto a2a = [says](collx::communicator& c) {
        std::vector<size_t> sc{2, 2}, rc{2, 2};
        if (c.rank() == 1) rc[0] = says;
        std::vector<float> s(4), r(rc[0] + rc[1]);
        collx::all_to_all_v(c, std::span<const float>(s), std::span<const size_t>(sc), std::span<float>(r),
                            std::span<const size_t>(rc));
      };
      for (const auto& fa : forced_algorithms()) {
        if (fa.first == "tree") continue;  // all_to_all has none (automatic turns it into direct anyway)
        INFO("forced " << fa.first);
        auto v = run_expecting(2, a2a, fa.second);
        INFO(describe(v));
        bool named = false;
        for (const auto& oc : v) {
          REQUIRE(oc.code == errc::mismatch);
          CHECK(oc.what.find("COLLX_SEGMENT_BYTES") == std::string::npos);  // the counts, not the segment size
          named = named || oc.what.find("rank 0's send_counts[1] is 2 but rank 1's recv_counts[0] is 3") != std::string::npos;
        }
        if (says == 3) CHECK(named);
      }
    }
  }
  SECTION("broadcast roots differ: a mismatch naming the root on every rank, long before the deadline") {
    // Both ranks think they are the root: each sends and waits for its send to be consumed, so no
    // message is ever received and compared; the waiting ranks compare their announced calls.
    opts_t o = ref::test_options();
    o.timeout = std::chrono::seconds(30);
    auto v = run_expecting(
        2,
        [](collx::communicator& c) {
          std::vector<float> x(8);
          collx::broadcast(c, std::span<float>(x), c.rank());
        },
        o);
    INFO(describe(v));
    for (std::size_t r = 0; r < v.size(); ++r) {
      const outcome& oc = v[r];
      REQUIRE(oc.code == errc::mismatch);
      REQUIRE(oc.what.find("root differs") != std::string::npos);
      REQUIRE(oc.seconds < 5);
      // The rank that found it reads it as its own, not as "rank R failed" (its peers' wording).
      CHECK(oc.what.find("rank " + std::to_string(r) + " failed") == std::string::npos);
    }
  }
}

// =============================================================================================
// Messages, failure state, error codes

TEST_CASE("a rank with count 0 returns at once and goes on: the rank waiting for it gets a mismatch, not a timeout",
          "[errors][mismatch]") {
  // Rank 1 has nothing to move: each call returns as soon as it is announced, so by the time rank
  // 0 looks, rank 1 has announced later calls. Its record of the first call must still be there
  // for rank 0 to compare (before, only the latest call was, and rank 0 waited for the timeout).
  opts_t o = ref::test_options();
  o.timeout = std::chrono::seconds(30);
  const auto v = run_expecting(
      2,
      [](collx::communicator& c) {
        std::vector<float> x(c.rank() == 1 ? 0 : 64, 1.0f);
        for (int k = 0; k < 3; ++k) collx::allreduce(c, std::span<float>(x));
      },
      o);
  INFO(describe(v));
  REQUIRE(v[0].code == errc::mismatch);
  REQUIRE(v[0].what.find("count differs") != std::string::npos);
  REQUIRE(v[0].seconds < 10);
}

TEST_CASE("a rank with count 0 that goes on past the published history still ends its peer's wait with a mismatch",
          "[errors][mismatch]") {
  // Rank 1 moves nothing in 12 calls (more than the 8 records it keeps published), then stays away
  // (3 s) before a call that would send rank 0 something: rank 0, waiting in call #1 for a message
  // (allreduce) or for its message to be read (broadcast root), used to wait until that later
  // message, or its timeout if none came. Rank 0 calls once rank 1 has made its 12 calls: earlier,
  // rank 1's record of call #1 is still published and names the field instead ("count differs").
  opts_t o = ref::test_options();
  o.timeout = std::chrono::seconds(30);
  for (const bool root_waits_for_reader : {false, true}) {
    INFO((root_waits_for_reader ? "broadcast: rank 0 waits for its message to be read" : "allreduce: rank 0 waits for a message"));
    std::atomic<bool> rank1_went_on{false};
    const auto v = run_expecting(
        2,
        [&](collx::communicator& c) {
          std::vector<float> x(c.rank() == 1 ? 0 : 1000, 1.0f);
          if (c.rank() == 0)
            for (int waited = 0; !rank1_went_on && waited < 1000; ++waited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          for (int k = 0; k < (c.rank() == 1 ? 12 : 1); ++k)
            if (root_waits_for_reader) collx::broadcast(c, std::span<float>(x), 0);
            else collx::allreduce(c, std::span<float>(x));
          if (c.rank() == 1) {
            rank1_went_on = true;
            std::this_thread::sleep_for(std::chrono::seconds(3));
            collx::barrier(c);
          }
        },
        o);
    INFO(describe(v));
    REQUIRE(v[0].code == errc::mismatch);
    CHECK(v[0].what.find(root_waits_for_reader ? "rank 1 finished call #1 without reading the message rank 0 sent it and went on to call #12"
                                               : "rank 1 finished call #1 without sending rank 0 the message it waits for and went on to call #12") !=
          std::string::npos);
    CHECK(v[0].seconds < 2);  // not at rank 1's barrier (3 s), nor at the timeout
    CHECK(v[1].code == errc::mismatch);  // its barrier finds the failure
  }
}

TEST_CASE("a rank that makes collective calls before a send, which its peer receives first, is not a mismatch",
          "[errors][p2p]") {
  // Rank 1 makes 10 count-0 calls and then sends; rank 0 receives first and makes the calls after.
  // Point-to-point calls are not numbered: rank 0, waiting in a recv, must not take rank 1's later
  // calls for a disagreement on its last collective call.
  const auto v = run_expecting(2, [](collx::communicator& c) {
    std::vector<float> none, x(16, static_cast<float>(c.rank() + 1));
    collx::allreduce(c, std::span<float>(x));  // a call both finish: rank 0's last before its recv
    if (c.rank() == 1) {
      for (int k = 0; k < 10; ++k) collx::allreduce(c, std::span<float>(none));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 waits in its recv meanwhile
      collx::send(c, std::span<const float>(x), 0);
    } else {
      collx::recv(c, std::span<float>(x), 1);
      for (int k = 0; k < 10; ++k) collx::allreduce(c, std::span<float>(none));
    }
    collx::barrier(c);
  });
  INFO(describe(v));
  CHECK(!v[0].code);
  CHECK(!v[1].code);
}

TEST_CASE("a communicator moved on one rank only keeps agreeing with its peers", "[errors][mismatch]") {
  // Each call carries a digest of the earlier ones: a move must carry it along with the call count,
  // or the moved rank's next message would read as an earlier call that differs.
  auto comms = collx::make_thread_communicators(2, ref::test_options());
  std::vector<std::string> errors(2);
  std::vector<float> sums(2, 0.0f);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      try {
        std::vector<float> x(5, static_cast<float>(r + 1));
        collx::allreduce(comms[static_cast<size_t>(r)], std::span<float>(x));
        collx::communicator moved_once(std::move(comms[static_cast<size_t>(r)]));  // both: a fresh object
        collx::communicator target = std::move(collx::make_thread_communicators(1)[0]);  // rank 1: into a used one
        collx::barrier(target);
        collx::communicator& c = r == 1 ? (target = std::move(moved_once)) : moved_once;
        collx::allreduce(c, std::span<float>(x));
        sums[static_cast<size_t>(r)] = x[4];
      } catch (const collx::error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(errors[static_cast<size_t>(r)].empty());
    CHECK(sums[static_cast<size_t>(r)] == 6.0f);  // (1 + 2) * 2
  }
}

TEST_CASE("a communicator moved from: every use is invalid_argument, not a crash; it can be destroyed or assigned to",
          "[errors][invalid]") {
  auto comms = collx::make_thread_communicators(1, ref::test_options());
  collx::communicator moved_to(std::move(comms[0]));
  collx::communicator& gone = comms[0];
  REQUIRE_THROWS_WITH(gone.rank(), Catch::Contains("used after it was moved from"));
  REQUIRE_THROWS_AS(gone.size(), collx::error);
  std::vector<float> x(3, 1.0f);
  try {
    collx::allreduce(gone, std::span<float>(x));
    FAIL("allreduce on a moved-from communicator returned");
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::invalid_argument);
  }
  REQUIRE_THROWS_AS(collx::barrier(gone), collx::error);
  gone.abort();  // nothing to abort: no effect
  CHECK(x[2] == 1.0f);
  gone = std::move(moved_to);  // assigned to, it works again
  collx::allreduce(gone, std::span<float>(x));
  CHECK(x[2] == 1.0f);
  CHECK(gone.rank() == 0);
}

TEST_CASE("run_threads: a rank that moved its communicator out and then throws: its exception comes out, peers fail at once",
          "[errors][failed]") {
  // The handler used to ask the moved-from communicator for its rank: std::terminate. `keep`:
  // the communicator is moved somewhere that outlives the throw (nothing tells the peers on its way
  // out), else into a local that unwinding destroys.
  for (const bool keep : {false, true}) {
    INFO((keep ? "kept past the throw" : "moved into a local"));
    collx::communicator_options o;
    o.timeout = std::chrono::seconds(30);
    std::optional<collx::communicator> kept;
    std::vector<std::string> errors(3);
    const auto t0 = std::chrono::steady_clock::now();
    std::string thrown;
    try {
      collx::run_threads(
          3,
          [&](collx::communicator& comm) {
            const int r = comm.rank();
            if (r == 1) {
              if (keep) kept.emplace(std::move(comm));
              else collx::communicator mine(std::move(comm));
              throw std::runtime_error("rank 1's own error");
            }
            try {
              std::vector<float> x(100, 1.0f);
              collx::allreduce(comm, std::span<float>(x));
            } catch (const collx::error& e) {
              errors[static_cast<std::size_t>(r)] = e.what();
            }
          },
          o);
    } catch (const std::runtime_error& e) {
      thrown = e.what();
    }
    CHECK(thrown == "rank 1's own error");
    for (const int r : {0, 2}) {
      INFO("rank " << r << ": " << errors[static_cast<std::size_t>(r)]);
      CHECK(errors[static_cast<std::size_t>(r)].find("rank 1") != std::string::npos);
    }
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 30 s timeout
  }
}

TEST_CASE("run_threads: a rank that moves its communicator out and destroys it tells its peers at once", "[errors][failed]") {
  // run_threads keeps a handle on each rank's transport to fail it if fn throws: a weak one, or the
  // transport would outlive the communicator fn destroyed and its peers wait until fn returns.
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(30);
  std::string error;
  double seconds = 0;
  collx::run_threads(
      2,
      [&](collx::communicator& c) {
        if (c.rank() == 1) {
          { collx::communicator mine = std::move(c); }
          std::this_thread::sleep_for(std::chrono::seconds(3));
          return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
          std::vector<float> x(8, 1.0f);
          collx::allreduce(c, std::span<float>(x));
        } catch (const collx::error& e) {
          error = e.what();
        }
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      o);
  INFO(error);
  CHECK(error.find("rank 1 closed its communicator") != std::string::npos);
  CHECK(seconds < 2);  // not when rank 1's fn returns (3 s)
}

TEST_CASE("threads: a rank that destroys its communicator fails the peers that wait for it, at once", "[errors][failed]") {
  // Before, they waited for their timeout (shm already said "closed its communicator").
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(30);
  auto comms = collx::make_thread_communicators(3, o);
  std::vector<outcome> outcomes(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      if (r == 2) {
        collx::communicator leaving(std::move(comms[2]));
        return;  // destroyed here, without a call
      }
      outcomes[uz(r)] = timed_call([&] {
        std::vector<float> x(100, 1.0f);
        collx::allreduce(comms[uz(r)], std::span<float>(x));
      });
    });
  for (auto& t : ts) t.join();
  check_failed_soon(outcomes, 2, "rank 2 closed its communicator", 10);
  // A rank that leaves right after its last call does not fail a peer still finishing that call
  // (its wait_sends may see the departure before the consumption it waits for).
  std::atomic<int> failures{0};
  std::string first;
  std::mutex m;
  for (int round = 0; round < 2000; ++round) {
    auto pair = collx::make_thread_communicators(3, o);
    std::vector<std::thread> rs;
    for (int r = 0; r < 3; ++r)
      rs.emplace_back([&, r] {
        try {
          collx::communicator mine(std::move(pair[uz(r)]));
          std::vector<float> x(7, static_cast<float>(r));
          collx::allreduce<collx::algo::direct>(mine, std::span<float>(x));
        } catch (const collx::error& e) {
          if (failures++ == 0) {
            std::lock_guard<std::mutex> lock(m);
            first = e.what();
          }
        }
      });
    for (auto& t : rs) t.join();
  }
  INFO(first);
  CHECK(failures.load() == 0);
}

TEST_CASE("ranks with different ring orders: mismatch that names the ring order", "[errors][mismatch]") {
  auto world = std::make_shared<collx::detail::transport_impl::thread_world>(3);
  std::vector<collx::communicator> comms;
  for (int r = 0; r < 3; ++r) {
    collx::communicator_options o = ref::test_options();
    o.ring_order = r == 2 ? std::vector<int>{0, 2, 1} : std::vector<int>{0, 1, 2};
    comms.emplace_back(std::make_shared<collx::detail::transport_impl::threads_transport>(world, r), o);
  }
  std::vector<std::string> errors(3);
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r)
    ts.emplace_back([&, r] {
      try {
        std::vector<float> x(30, 1.0f);
        collx::allreduce<collx::algo::ring>(comms[uz(r)], std::span<float>(x));
      } catch (const collx::error& e) {
        errors[uz(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  bool named = false;
  for (const auto& e : errors) named = named || e.find("ring_order") != std::string::npos;
  for (const auto& e : errors) INFO(e);
  CHECK(named);
}

namespace {
thread_local bool refuse_here = false;  // set on one rank's thread: its op (or selector) throws there only
struct refusing_sum {
  static constexpr bool commutative = true;
  float operator()(float a, float b) const {
    if (refuse_here) throw std::runtime_error("the op refused");
    return a + b;
  }
};
}  // namespace

TEST_CASE("a user op or selector that throws something else than collx::error fails the communicator at once",
          "[errors][failed]") {
  // Before, the thrower left the call with its communicator usable and its peers waited for their
  // timeout (between threads reading its freed buffer meanwhile, as ASan showed).
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(30);
  for (const bool in_selector : {false, true}) {
    INFO((in_selector ? "selector" : "op") << " throws");
    collx::communicator_options oo = o;
    if (in_selector)
      oo.selector = [](const collx::selection_query&) {
        if (refuse_here) throw std::runtime_error("the selector refused");
        return collx::algorithm::direct;
      };
    auto comms = collx::make_thread_communicators(3, oo);
    std::vector<std::string> errors(3);
    std::vector<double> seconds(3, 0.0);
    std::vector<bool> std_error(3, false);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] {
        refuse_here = r == 1;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          auto x = std::make_unique<std::vector<float>>(5000, 1.0f);
          collx::allreduce(comms[uz(r)], std::span<float>(*x), refusing_sum{});
        } catch (const collx::error& e) {
          errors[uz(r)] = e.what();
        } catch (const std::runtime_error& e) {  // the thrower's own exception goes through unchanged
          errors[uz(r)] = e.what();
          std_error[uz(r)] = true;
        }
        seconds[uz(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        try {
          collx::barrier(comms[uz(r)]);
          errors[uz(r)] += " / the communicator still worked";
        } catch (const collx::error&) {
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r << " after " << seconds[uz(r)] << " s: " << errors[uz(r)]);
      CHECK(errors[uz(r)].find("refused") != std::string::npos);
      CHECK(errors[uz(r)].find("still worked") == std::string::npos);
      CHECK(std_error[uz(r)] == (r == 1));
      CHECK(seconds[uz(r)] < 10);
    }
  }
  // A selector's answer that is no algorithm: invalid_argument, not a call that does nothing.
  collx::communicator_options bad = o;
  bad.selector = [](const collx::selection_query&) { return static_cast<collx::algorithm>(3); };
  std::vector<float> y(4, 1.0f);
  REQUIRE_THROWS_WITH(collx::run_threads(2, [&](collx::communicator& c) {
                        std::vector<float> z(y);
                        collx::allreduce(c, std::span<float>(z));
                      }, bad),
                      Catch::Contains("selector returned algorithm 3") && Catch::Contains("/2 allreduce: communicator_options::selector"));
}

namespace {
thread_local collx::communicator* calling_back = nullptr;  // the communicator an op or selector calls
// A sum whose code makes a barrier on the communicator it runs on (calling_back).
struct calling_sum {
  float operator()(float a, float b) const {
    if (calling_back) collx::barrier(*calling_back);
    return a + b;
  }
};
}  // namespace

TEST_CASE("a call made from a reduction op or selector on the communicator running it: invalid_argument on every rank",
          "[errors][invalid]") {
  // Before, the op's barrier went out between the running all-reduce's messages: a mismatch
  // ("call sequence differs ... a rank skipped or added a call"), or a wait, depending on timing.
  for (const bool in_selector : {false, true}) {
    INFO((in_selector ? "selector" : "op") << " calls a barrier");
    collx::communicator_options o;
    o.timeout = std::chrono::seconds(30);
    if (in_selector)
      o.selector = [](const collx::selection_query&) {
        if (calling_back) collx::barrier(*calling_back);
        return collx::algorithm::direct;
      };
    auto comms = collx::make_thread_communicators(3, o);
    std::vector<outcome> outcomes(3);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] {
        calling_back = &comms[uz(r)];
        outcomes[uz(r)] = timed_call([&] {
          std::vector<float> x(5000, 1.0f);
          if (in_selector) collx::allreduce(comms[uz(r)], std::span<float>(x));
          else collx::allreduce(comms[uz(r)], std::span<float>(x), calling_sum{});
        });
        calling_back = nullptr;
      });
    for (auto& t : ts) t.join();
    check_failed_soon(outcomes, 3, "a call on this communicator was made inside its own allreduce, which is still running", 10);
  }
}

TEST_CASE("abort() or fail() inside a reduction op ends the call on threads, not in a hang", "[errors][abort]") {
  // Two ranks each inside their op, each reading the other's message in place, both aborting: the
  // abort waited for the peer's read of this rank's message to end, the peer's for this one's, for
  // ever (not even the timeout ended it): 2 to 4 ranks hung in 2 to 5 runs of 5. So did an async
  // call started and waited for in the op: wait() throws (it would wait for itself), and the
  // request, dropped unfinished by that exception, fails the communicator from inside the read.
  // abort_late: each rank's op first waits 50 ms (every rank is inside its read of a peer's
  // message by then), then aborts, and the fold goes on: its look for a failure between pieces
  // (thrown from inside the read) waited out the peers' reads of this rank's message, each rank
  // for the other, for ever (a fold of 2^16 ints: several pieces).
  enum class in_op { abort, fail, start_async, abort_late };
  for (const in_op what : {in_op::abort, in_op::fail, in_op::start_async, in_op::abort_late})
    for (int n : {2, 3, 4})
      for (int round = 0; round < 5; ++round) {
        INFO(n << " ranks, round " << round << ", the op "
                << (what == in_op::abort        ? "aborts"
                    : what == in_op::fail       ? "fails"
                    : what == in_op::abort_late ? "aborts after 50 ms"
                                                : "waits for an async call"));
        collx::communicator_options o;
        o.timeout = std::chrono::seconds(30);
        auto comms = collx::make_thread_communicators(n, o);
        std::vector<outcome> first(uz(n)), next(uz(n));
        std::vector<std::thread> ts;
        for (int r = 0; r < n; ++r)
          ts.emplace_back([&, r] {
            collx::communicator* c = &comms[uz(r)];
            const std::size_t count = what == in_op::abort_late ? std::size_t{1} << 16 : 4;
            std::vector<int> w(count, r + 1), out(count), y(1);  // y outlives the queued async call
            bool waited = false;
            first[uz(r)] = timed_call([&] {
              collx::allreduce<collx::algo::direct>(*c, std::span<const int>(w), std::span<int>(out), [c, what, &y, &waited](int a, int b) {
                if (what == in_op::abort_late && !waited) waited = true, std::this_thread::sleep_for(std::chrono::milliseconds(50));
                if (what == in_op::abort || what == in_op::abort_late) c->abort();
                if (what == in_op::fail) c->fail(collx::errc::aborted, "the op gave up");
                if (what == in_op::start_async) collx::allreduce_async(*c, std::span<int>(y)).wait();
                return a + b;
              });
            });
            next[uz(r)] = timed_call([&] { collx::barrier(*c); });
          });
        for (auto& t : ts) t.join();
        for (int r = 0; r < n; ++r) {
          INFO("rank " << r << ": " << first[uz(r)].what << " (" << first[uz(r)].seconds << " s); then: " << next[uz(r)].what);
          CHECK(first[uz(r)].seconds < 10);
          if (what == in_op::start_async) CHECK(first[uz(r)].code.has_value());
          CHECK(next[uz(r)].code.has_value());  // the communicator failed: the next call fails at once
          CHECK(next[uz(r)].seconds < 10);
        }
      }
}

TEST_CASE("abort() from an op fails the aborting rank's own call, though the fold was its call's last step",
          "[errors][abort]") {
  // A direct reduce to rank 0: rank 0 reads its peers' vectors in place and folds them, and its op
  // aborts at its first element. Rank 0 went on folding the whole vector and, with nothing left to
  // wait for, returned normally with the sum, as if its call had been done before the abort. The
  // fold now looks for a failure every 8 KiB.
  for (int n : {2, 3}) {
    INFO(n << " ranks");
    collx::communicator_options o;
    o.timeout = std::chrono::seconds(30);
    auto comms = collx::make_thread_communicators(n, o);
    std::vector<outcome> first(uz(n));
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        collx::communicator* c = &comms[uz(r)];
        std::vector<long long> w(4000, r + 1), out(r == 0 ? 4000 : 0, -1);  // 32 KB
        bool aborted = false;
        first[uz(r)] = timed_call([&] {
          collx::reduce<collx::algo::direct>(*c, std::span<const long long>(w), std::span<long long>(out), 0,
                                             [c, r, &aborted](long long a, long long b) {
                                               if (r == 0 && !aborted) aborted = true, c->abort();
                                               return a + b;
                                             });
        });
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << first[uz(r)].what << " (" << first[uz(r)].seconds << " s)");
      CHECK(first[uz(r)].code == collx::errc::aborted);  // the senders' too: rank 0 had not read them all
      CHECK(first[uz(r)].seconds < 10);
    }
  }
}

TEST_CASE("a failed call on another communicator made from an op waits out its peers' reads", "[errors][abort]") {
  // Each rank's op on world A runs one direct all-reduce on world B; rank 0's op on B throws, and
  // rank 1's reads rank 0's B message slowly. Rank 0's B call must not return (and free its send
  // buffer) while rank 1 still reads it: a first fix of the hang above skipped that wait for any
  // failure inside a read on this thread (A's), and rank 0 left B while rank 1 read on.
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(30);
  auto a = collx::make_thread_communicators(2, o), b = collx::make_thread_communicators(2, o);
  std::atomic<bool> left_b{false}, read_after_left{false};
  std::vector<outcome> outs(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r)
    ts.emplace_back([&, r] {
      collx::communicator *ca = &a[uz(r)], *cb = &b[uz(r)];
      bool first_a = true, first_b = true;
      auto op_b = [&, r](int p, int q) {
        if (r == 0) throw std::runtime_error("rank 0's op on B gives up");
        if (first_b) {  // rank 1 reads rank 0's message (wb) in place, slowly
          first_b = false;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          if (left_b.load()) read_after_left = true;
        }
        return p + q;
      };
      auto op_a = [&, r](int x, int y) {
        if (first_a) {
          first_a = false;
          std::vector<int> wb(64, r + 1), ob(64);
          try {
            collx::allreduce<collx::algo::direct>(*cb, std::span<const int>(wb), std::span<int>(ob), op_b);
          } catch (...) {
            if (r == 0) left_b = true;  // rank 0's wb is freed as this leaves the op
            throw;
          }
        }
        return x + y;
      };
      std::vector<int> wa(4, r + 1), oa(4);
      try {
        outs[uz(r)] = timed_call([&] { collx::allreduce<collx::algo::direct>(*ca, std::span<const int>(wa), std::span<int>(oa), op_a); });
      } catch (const std::runtime_error& e) {  // rank 0's own exception passes through both calls unchanged
        outs[uz(r)].what = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << outs[uz(r)].what);
    CHECK(!outs[uz(r)].what.empty());
    CHECK(outs[uz(r)].seconds < 10);
  }
  CHECK_FALSE(read_after_left.load());  // rank 1 was still reading rank 0's buffer when rank 0 left B
}

TEST_CASE("error messages name rank, world size and the call", "[errors][messages]") {
  SECTION("mismatch on the first call") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<float> x(c.rank() == 0 ? 8 : 9);
      collx::allreduce<collx::algo::ring>(c, std::span<float>(x));
    });
    INFO(describe(v));
    REQUIRE(v[0].what.rfind("rank 0/2 allreduce#1<float32,sum,ring>: ", 0) == 0);
    REQUIRE(v[1].what.rfind("rank 1/2 allreduce#1<float32,sum,ring>: ", 0) == 0);
  }
  SECTION("the call's sequence number, op and type") {
    auto v = run_expecting(3, [](collx::communicator& c) {
      std::vector<double> x(5);
      collx::allreduce<collx::algo::direct>(c, std::span<double>(x));
      collx::barrier(c);
      std::vector<double> y(c.rank() == 1 ? 6 : 5);
      collx::reduce<collx::algo::tree>(c, std::span<double>(y), 0, collx::ops::max{});
    });
    INFO(describe(v));
    for (int r = 0; r < 3; ++r)
      REQUIRE(v[uz(r)].what.rfind("rank " + std::to_string(r) + "/3 reduce#3<float64,max,tree>: ", 0) == 0);
  }
  SECTION("invalid arguments name rank, world size, collective, type and op") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<std::int16_t> s(4), r(5);
      collx::allreduce(c, std::span<const std::int16_t>(s), std::span<std::int16_t>(r), collx::ops::bxor{});
    });
    INFO(describe(v));
    for (int r = 0; r < 2; ++r) {
      REQUIRE(v[uz(r)].what.rfind("rank " + std::to_string(r) + "/2 allreduce", 0) == 0);
      REQUIRE(v[uz(r)].what.find("<int16,bxor") != std::string::npos);
    }
  }
  SECTION("timeouts name the call, and where the late peer is") {
    // Rank 1 never makes the second call (and stays, so that rank 0 times out rather than sees it
    // leave); with `first`, it made the first. Before, between threads, the message read "the peer
    // is late, stuck, or called something else", whatever the peer did.
    for (const bool first : {false, true}) {
      opts_t o = ref::test_options();
      o.timeout = std::chrono::milliseconds(200);
      auto v = run_expecting(
          2,
          [first](collx::communicator& c) {
            std::vector<std::int64_t> x(7);
            if (first) collx::allreduce<collx::algo::ring>(c, std::span<std::int64_t>(x));
            if (c.rank() == 1) {
              std::this_thread::sleep_for(std::chrono::milliseconds(600));
              return;
            }
            collx::allreduce<collx::algo::direct>(c, std::span<std::int64_t>(x), collx::ops::max{});
          },
          o);
      INFO(describe(v));
      REQUIRE(v[0].code == errc::timeout);
      REQUIRE(v[0].what.rfind(first ? "rank 0/2 allreduce#2<int64,max,direct>: " : "rank 0/2 allreduce#1<int64,max,direct>: ", 0) == 0);
      REQUIRE(v[0].what.find("timed out") != std::string::npos);
      REQUIRE(v[0].what.find(first ? "(rank 1 is still in or after its allreduce #1 (7 elements of an 8-byte type, ring), "
                                     "before this call: it is late, stuck, or waiting on another communicator)"
                                   : "(rank 1 has made no collective call on this communicator yet, and blocks on nothing "
                                     "here: it is late, stuck, or waiting on another communicator)") != std::string::npos);
    }
  }
  SECTION("a rank that reads another's timeout adds what it had itself waited for") {
    // A chain: rank 0 receives from rank 2, which (500 ms later) receives from rank 1, which is busy
    // elsewhere. Rank 0 times out first naming rank 2; rank 2's message must name rank 1 too.
    opts_t o = ref::test_options();
    o.timeout = std::chrono::milliseconds(1500);
    auto v = run_expecting(
        3,
        [](collx::communicator& c) {
          std::vector<float> x(4);
          if (c.rank() == 0) collx::recv(c, std::span<float>(x), 2);
          if (c.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(2500));
            collx::recv(c, std::span<float>(x), 0);
          }
          if (c.rank() == 2) {
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            collx::recv(c, std::span<float>(x), 1);
          }
        },
        o);
    INFO(describe(v));
    for (const auto& e : v) REQUIRE(e.code == errc::timeout);
    REQUIRE(v[0].what.find("waiting for a message from rank 2 (rank 2 has made no collective call on this "
                           "communicator yet; it waits for a message from rank 1)") != std::string::npos);
    REQUIRE(v[0].what.find("had itself waited") == std::string::npos);  // its own timeout says it all
    REQUIRE(v[2].what.find("rank 0 failed: timed out") != std::string::npos);
    REQUIRE(v[2].what.find("; rank 2 had itself waited ") != std::string::npos);
    REQUIRE(v[2].what.find(" ms for a message from rank 1") != std::string::npos);
  }
  SECTION("send and recv name themselves, not send_recv") {
    auto v = run_expecting(3, [](collx::communicator& c) {
      std::vector<float> x(4);
      if (c.rank() == 0) collx::send(c, std::span<const float>(x), 3);
      if (c.rank() == 1) collx::recv(c, std::span<float>(static_cast<float*>(nullptr), 4), 0);
      if (c.rank() == 2) collx::barrier(c);
    });
    INFO(describe(v));
    REQUIRE(v[0].what.rfind("rank 0/3 send<float32>: destination rank 3 is not another rank", 0) == 0);
    REQUIRE(v[1].what.find("send_recv") == std::string::npos);
    REQUIRE(v[2].code.has_value());
  }
  SECTION("between threads, two ranks that both send first fail at once: a deadlock") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<float> x(4);
      collx::send(c, std::span<const float>(x), 1 - c.rank());
      collx::recv(c, std::span<float>(x), 1 - c.rank());
    });
    INFO(describe(v));
    for (const auto& r : v) {
      REQUIRE(r.code == errc::mismatch);
      CHECK(r.seconds < 10);  // not at the timeout (60 s)
      CHECK(r.what.find("deadlock: rank ") != std::string::npos);
      CHECK(r.what.find("rank 0 in a point-to-point call waits for rank 1 to receive its messages") != std::string::npos);
      CHECK(r.what.find("rank 1 in a point-to-point call waits for rank 0 to receive its messages") != std::string::npos);
      CHECK(r.what.find("use send_recv") != std::string::npos);
    }
  }
}

TEST_CASE("between threads, a send whose destination does not receive in time says why it waited", "[errors]") {
  opts_t o = ref::test_options();
  o.timeout = std::chrono::milliseconds(300);
  auto v = run_expecting(
      2,
      [](collx::communicator& c) {
        std::vector<float> x(4);
        if (c.rank() == 0) collx::send(c, x, 1);
        if (c.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(1));  // busy: no wait to find a cycle in
          collx::recv(c, x, 0);
        }
      },
      o);
  INFO(describe(v));
  REQUIRE(v[0].code == errc::timeout);
  CHECK(v[0].what.find("the destination did not receive it in time: it is busy, or waits on another communicator") !=
        std::string::npos);
  CHECK(v[1].code.has_value());  // its recv finds the communicator failed
}

TEST_CASE("between threads, a cycle of waits fails at once with each rank's wait named", "[errors][deadlock]") {
  SECTION("a ring shift in which every rank sends first") {
    for (int n : {3, 5}) {
      auto v = run_expecting(n, [n](collx::communicator& c) {
        std::vector<int> x(3, c.rank()), y(3);
        collx::send(c, x, (c.rank() + 1) % n);
        collx::recv(c, y, (c.rank() + n - 1) % n);
      });
      INFO(n << " ranks" << describe(v));
      for (const auto& r : v) {
        REQUIRE(r.code == errc::mismatch);
        CHECK(r.seconds < 10);
        for (int q = 0; q < n; ++q)
          CHECK(r.what.find("rank " + std::to_string(q) + " in a point-to-point call waits for rank " +
                            std::to_string((q + 1) % n) + " to receive its messages") != std::string::npos);
      }
    }
  }
  SECTION("ranks that all receive first: no advice about sends") {
    auto v = run_expecting(3, [](collx::communicator& c) {
      std::vector<int> x(3, c.rank());
      collx::recv(c, x, (c.rank() + 2) % 3);
      collx::send(c, x, (c.rank() + 1) % 3);
    });
    INFO(describe(v));
    for (const auto& r : v) {
      REQUIRE(r.code == errc::mismatch);
      CHECK(r.what.find("rank 1 in a point-to-point call waits for a message from rank 0") != std::string::npos);
      CHECK(r.what.find("use send_recv") == std::string::npos);
    }
  }
  SECTION("a send against a collective's send: rank 0 sends to rank 1, the root of a broadcast") {
    auto v = run_expecting(2, [](collx::communicator& c) {
      std::vector<double> x(5, 1.0);
      if (c.rank() == 0) collx::send(c, x, 1);
      else collx::broadcast(c, x, 1);
    });
    INFO(describe(v));
    for (const auto& r : v) {
      REQUIRE(r.code == errc::mismatch);
      CHECK(r.seconds < 10);
      CHECK(r.what.find("rank 1 in broadcast #1 waits for rank 0 to receive its messages") != std::string::npos);
    }
  }
  SECTION("a rank waiting on a deadlocked cycle it is not part of learns of it from the cycle's ranks") {
    auto v = run_expecting(4, [](collx::communicator& c) {
      std::vector<int> x(2, c.rank());
      if (c.rank() == 3) {
        collx::recv(c, x, 0);  // waits on rank 0, which never gets to send
        return;
      }
      collx::send(c, x, (c.rank() + 1) % 3);
      collx::recv(c, x, (c.rank() + 2) % 3);
    });
    INFO(describe(v));
    for (const auto& r : v) {
      REQUIRE(r.code == errc::mismatch);
      CHECK(r.seconds < 10);
      CHECK(r.what.find("deadlock: ") != std::string::npos);
    }
    CHECK(v[3].what.find("rank 3 in") == std::string::npos);  // not in the cycle
  }
}

TEST_CASE("after a failure every later call fails at once", "[errors][failed]") {
  auto later_calls = [](collx::communicator& c, std::vector<outcome>& later) {
    const std::function<void()> calls[] = {
        [&] {
          std::vector<float> x(8);
          collx::allreduce(c, std::span<float>(x));
        },
        [&] { collx::barrier(c); },
        [&] {
          std::vector<float> x(8);
          collx::broadcast(c, std::span<float>(x), 0);
        },
        [&] {
          std::vector<float> x(8 * uz(c.size())), y(8 * uz(c.size()));
          collx::all_to_all(c, std::span<const float>(x), std::span<float>(y));
        },
        [&] {
          std::vector<float> x(8);
          if (c.rank() == 0) collx::send(c, std::span<const float>(x), 1);
          else collx::recv(c, std::span<float>(x), 0);
        },
    };
    for (const auto& call : calls) {
      const auto t = ref::clock::now();
      outcome o;
      try {
        call();
      } catch (const collx::error& e) {
        o = {e.code(), e.what(), 0};
      }
      o.seconds = ref::seconds_since(t);
      later.push_back(o);
    }
  };
  const std::vector<named_call> failures{
      {"mismatch",
       [](collx::communicator& c) {
         std::vector<float> x(c.rank() == 0 ? 8 : 16);
         collx::allreduce(c, std::span<float>(x));
       }},
      {"invalid argument on one rank",
       [](collx::communicator& c) {
         std::vector<float> x(8), y(c.rank() == 0 ? 7 : 8);
         collx::allreduce(c, std::span<const float>(x), std::span<float>(y));
       }},
      {"abort", [](collx::communicator& c) {
         if (c.rank() == 1) c.abort();
         collx::barrier(c);
       }}};
  for (const auto& f : failures) {
    INFO("first failure: " << f.name);
    std::vector<std::vector<outcome>> later(2);
    std::vector<int> failed(2, 0);  // not vector<bool>: ranks write their own element concurrently
    ref::run_ranks(2, [&](collx::communicator& c) {
      try {
        f.call(c);
      } catch (const collx::error&) {
        failed[uz(c.rank())] = 1;
      }
      later_calls(c, later[uz(c.rank())]);
    });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      REQUIRE(failed[uz(r)] == 1);
      for (const auto& o : later[uz(r)]) {
        INFO(o.what);
        REQUIRE(o.code.has_value());
        CHECK(o.seconds < 0.5);
        // Says that the failure is an old one, not this call's own.
        CHECK(o.what.find("had already failed when this call began") != std::string::npos);
      }
    }
  }
}

TEST_CASE("two threads calling into one communicator at once: invalid_argument, the running call unharmed",
          "[errors][threads]") {
  std::atomic<int> inside{0}, release{0};
  std::vector<outcome> second(2);
  std::vector<int> received(2, 0);
  ref::run_ranks(2, [&](collx::communicator& c) {
    if (c.rank() == 0) {
      // Thread A waits inside a recv until rank 1 sends; meanwhile this thread calls allreduce.
      std::vector<int> in(100, -1);
      std::thread a([&] {
        inside = 1;
        collx::recv(c, std::span<int>(in), 1);
      });
      while (!inside) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // A is in its wait by now
      try {
        std::vector<float> x(8);
        collx::allreduce(c, std::span<float>(x));
      } catch (const collx::error& e) {
        second[0] = {e.code(), e.what(), 0};
      }
      release = 1;
      a.join();
      received[0] = in[99];
    } else {
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::vector<int> out(100, 7);
      collx::send(c, std::span<const int>(out), 0);
    }
  });
  INFO(second[0].what);
  REQUIRE(second[0].code == errc::invalid_argument);
  CHECK(second[0].what.find("two threads") != std::string::npos);
  CHECK(received[0] == 7);
}

TEST_CASE("collx::error: std::runtime_error with a std::error_code of category \"collx\"", "[errors][code]") {
  auto v = run_expecting(2, [](collx::communicator& c) {
    std::vector<float> x(c.rank() == 0 ? 1 : 2);
    collx::allreduce(c, std::span<float>(x));
  });
  REQUIRE(v[0].code == errc::mismatch);
  try {
    std::vector<float> x(1);
    auto comms = collx::make_thread_communicators(1);
    collx::broadcast(comms[0], std::span<float>(x), 5);
    FAIL("no error");
  } catch (const std::runtime_error& re) {
    const auto* e = dynamic_cast<const collx::error*>(&re);
    REQUIRE(e != nullptr);
    const std::error_code ec = e->error_code();
    REQUIRE(std::string(ec.category().name()) == "collx");
    REQUIRE(ec.value() == static_cast<int>(errc::invalid_argument));
    REQUIRE(ec == errc::invalid_argument);
    REQUIRE(ec != errc::mismatch);
    REQUIRE(&ec.category() == &collx::error_category());
  }
  for (errc c : {errc::invalid_argument, errc::mismatch, errc::timeout, errc::aborted, errc::transport, errc::cuda,
                 errc::system, errc::internal}) {
    const std::error_code ec = c;  // is_error_code_enum
    REQUIRE(std::string(ec.category().name()) == "collx");
    REQUIRE_FALSE(ec.message().empty());
    REQUIRE(ec.message() != "unknown collx error");
    REQUIRE(static_cast<bool>(ec));
  }
}

TEST_CASE("a thread rank that returns while its peers still call: they fail at once, naming it", "[errors][departed]") {
  // run_threads destroys a rank's communicator when its function returns; before, the peers
  // waited for their whole timeout (60 s here) and then blamed a rank that is "late or stuck".
  for (int round = 0; round < 20; ++round) {
    const auto v = run_expecting(3, [](collx::communicator& c) {
      if (c.rank() == 2) return;
      std::vector<float> x(64, 1.0f);
      collx::allreduce(c, std::span<float>(x));
    });
    INFO(describe(v));
    REQUIRE(!v[2].code);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(v[uz(r)].code == errc::transport);
      CHECK(v[uz(r)].what.find("rank 2 closed its communicator") != std::string::npos);
      CHECK(v[uz(r)].seconds < 10);
    }
  }
}

TEST_CASE("run_threads: a rank whose thread cannot start is collx::error, not std::terminate", "[errors][threads]") {
  if (ref::thread_sanitized) {
    SUCCEED("skipped under TSan: its runtime does not support threads started in a forked child");
    return;
  }
  // A child limited to a few threads (RLIMIT_NPROC, which binds only a user other than root: as
  // root the child becomes nobody) runs 8 thread ranks: the rank threads already started must end
  // and run_threads throw errc::system naming the limit. It used to std::terminate (joinable
  // std::threads destroyed while the exception left).
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(77);
    const rlimit few{4, 4};
    if (::setrlimit(RLIMIT_NPROC, &few) != 0) ::_exit(77);
    try {
      collx::run_threads(8, [](collx::communicator& c) {
        std::vector<int> v(4, c.rank());
        collx::allreduce(c, std::span<int>(v));
      });
      ::_exit(78);  // every thread started: the limit did not bind (another user's processes?)
    } catch (const collx::error& e) {
      const std::string m = e.what();
      ::_exit(e.code() == errc::system && m.find("cannot start the thread of rank") != std::string::npos &&
                      m.find("RLIMIT_NPROC") != std::string::npos
                  ? 0
                  : 2);
    } catch (...) {
      ::_exit(3);
    }
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  INFO("child status " << st);
  REQUIRE(WIFEXITED(st));  // not SIGABRT from std::terminate
  if (WEXITSTATUS(st) == 77 || WEXITSTATUS(st) == 78) {
    SUCCEED("skipped: the child's thread limit did not bind (root could not become nobody, or every thread started)");
    return;
  }
  CHECK(WEXITSTATUS(st) == 0);
}
