// collx::split: the checks of split_checks.hpp over threads and over processes (shared memory),
// and its errors: a bad color, ranks that do not all split, a moved-from communicator.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <collx/collx.hpp>
#include <collx/launch.hpp>
#include <collx/transport/shm.hpp>

#include "split_checks.hpp"
#include "timed_call.hpp"

using namespace std::chrono_literals;

// A user's type with the name and layout of split's own exchange entry (collx::detail::split_entry),
// in the global namespace: g++ spelled collx's without its namespace, so both had one signature
// hash and an all_gather of this one passed for the exchange.
struct split_entry {
  std::int64_t color;
  std::int64_t key;
};

namespace {

TEST_CASE("split over threads: groups by color, ordered by key, independent of the parent", "[split]") {
  for (int n : {1, 2, 3, 4, 7}) {
    INFO(n << " ranks");
    std::atomic<int> failed{0};
    collx::run_threads(n, [&](collx::communicator& c) { failed += split_checks::run(c); });
    CHECK(failed.load() == 0);
  }
}

TEST_CASE("split keeps the parent's order among ranks with equal keys, in worlds too large for insertion sort",
          "[split]") {
  // libstdc++'s std::sort is an insertion sort (stable) up to 16 elements: only a larger world
  // tells a stable sort of (key, parent rank) from an unstable one.
  for (int n : {24, 33}) {
    INFO(n << " ranks");
    std::vector<int> wrong(static_cast<std::size_t>(n), 0);
    collx::run_threads(n, [&](collx::communicator& c) {
      const int r = c.rank();
      auto& w = wrong[static_cast<std::size_t>(r)];
      // Equal keys: the group's order is the parent's.
      if (const auto g = collx::split(c, r % 2, 0); !g || g->rank() != r / 2) ++w;
      // Keys with ties: ordered by (key, parent rank).
      const auto g = collx::split(c, 0, r % 3);
      int before = 0;  // ranks ordered ahead of r
      for (int q = 0; q < n; ++q) before += (q % 3 < r % 3) || (q % 3 == r % 3 && q < r);
      if (!g || g->rank() != before) ++w;
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(wrong[static_cast<std::size_t>(r)] == 0);
    }
  }
}

TEST_CASE("split over processes: each group connects a segment of its own", "[split][shm]") {
  for (int n : {2, 3, 5}) {
    INFO(n << " processes");
    const auto res = collx::run_processes(n, [](collx::communicator& c) { return split_checks::run(c) == 0 ? 0 : 1; });
    for (const auto& e : res) {
      INFO("rank " << e.rank << " exit " << e.exit_code << " signal " << e.term_signal);
      CHECK(e.ok());
    }
  }
}

// Runs fn on 4 thread ranks with a 20 s timeout; returns each rank's error (errc::internal and ""
// where it threw none) and checks that they ended well before the timeout.
template <class F>
std::vector<std::pair<collx::errc, std::string>> errors_of(F fn) {
  collx::communicator_options opt;
  opt.timeout = 20s;
  auto comms = collx::make_thread_communicators(4, opt);
  std::vector<std::pair<collx::errc, std::string>> out(4, {collx::errc::internal, ""});
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, comm = &c] {
      try {
        fn(*comm);
      } catch (const collx::error& e) {
        out[static_cast<std::size_t>(comm->rank())] = {e.code(), e.what()};
      }
    });
  for (auto& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // not the 20 s timeout
  return out;
}

// Checks that every rank got errc::mismatch, none with `never` in its message; returns the
// messages, one per line.
std::string mismatch_on_every_rank(const std::vector<std::pair<collx::errc, std::string>>& errs, const char* never) {
  std::string all;
  for (std::size_t r = 0; r < errs.size(); ++r) {
    const auto& [code, why] = errs[r];
    INFO("rank " << r << ": " << why);
    CHECK(code == collx::errc::mismatch);
    CHECK_THAT(why, !Catch::Contains(never));
    all += why + "\n";
  }
  return all;
}

TEST_CASE("split's errors reach every rank at once", "[split][errors]") {
  SECTION("a negative color other than no_color") {
    const auto errs = errors_of([](collx::communicator& c) { (void)collx::split(c, c.rank() == 2 ? -3 : 0, 0); });
    CHECK(errs[2].first == collx::errc::invalid_argument);
    CHECK_THAT(errs[2].second, Catch::Contains("rank 2: collx::split: color -3 is negative") && Catch::Contains("no_color"));
    for (int r : {0, 1, 3}) {
      INFO("rank " << r << ": " << errs[static_cast<std::size_t>(r)].second);
      CHECK(errs[static_cast<std::size_t>(r)].first == collx::errc::invalid_argument);
      CHECK_THAT(errs[static_cast<std::size_t>(r)].second, Catch::Contains("rank 2 failed: invalid arguments"));
    }
  }
  SECTION("a rank that calls a collective where the others split") {
    const auto errs = errors_of([](collx::communicator& c) {
      if (c.rank() == 1) {  // the shape of split's exchange, an all_gather of two int64 per rank
        const std::int64_t mine[2] = {0, 0};
        std::vector<std::int64_t> all(8);
        collx::all_gather<collx::algo::direct>(c, std::span<const std::int64_t>(mine), std::span<std::int64_t>(all));
      } else {
        (void)collx::split(c, 0, 0);
      }
    });
    bool named = false;
    for (int r = 0; r < 4; ++r) {
      const auto& [code, why] = errs[static_cast<std::size_t>(r)];
      INFO("rank " << r << ": " << why);
      CHECK(code == collx::errc::mismatch);
      if (r != 1) CHECK_THAT(why, Catch::StartsWith("collx::split (collective"));
      named = named || why.find(" differs: ") != std::string::npos;
    }
    INFO(errs[0].second << "\n" << errs[1].second);
    CHECK(named);
  }
  SECTION("a user's all_gather of a type named like split's entry is not split's exchange") {
    const auto errs = errors_of([](collx::communicator& c) {
      if (c.rank() == 1) {
        const ::split_entry mine[1] = {{0, 0}};
        std::vector<::split_entry> all(4);
        collx::all_gather<collx::algo::direct>(c, std::span<const ::split_entry>(mine), std::span<::split_entry>(all));
      } else {
        (void)collx::split(c, 0, 0);
      }
    });
    const std::string all = mismatch_on_every_rank(errs, "rank 1 called collx::split");
    INFO(all);
    CHECK_THAT(all, Catch::Contains("rank 1 called all_gather"));
  }
  SECTION("a rank that all-reduces where the others split is told they called collx::split") {
    const auto errs = errors_of([](collx::communicator& c) {
      if (c.rank() == 1) {
        std::vector<std::int64_t> v(2, 1);
        collx::allreduce(c, std::span<std::int64_t>(v));
      } else {
        (void)collx::split(c, 0, 0);
      }
    });
    const std::string all = mismatch_on_every_rank(errs, "called all_gather");  // split's exchange is not the user's call
    INFO(all);
    CHECK_THAT(all, Catch::Contains("called collx::split") && Catch::Contains("called allreduce"));
  }
  SECTION("a failure in a group names the group and which ranks of the parent its ranks are") {
    // Groups by parity, keys reversed: group 1 is parent ranks 3, 1 (group ranks 0, 1). Its rank
    // 0 passes a bad root; rank 1 must read whose failure it is in the parent's numbering too.
    // Group 0 is parent ranks 2, 0; a group of it, keys reversed again, is parent ranks 0, 2: its
    // legend goes back to the first parent's ranks.
    const auto errs = errors_of([](collx::communicator& c) {
      auto group = collx::split(c, c.rank() % 2, -c.rank());
      std::vector<int> v(3, c.rank());
      if (c.rank() % 2 == 0) {
        auto inner = collx::split(*group, 0, -group->rank());
        collx::broadcast(*inner, std::span<int>(v), inner->rank() == 0 ? 7 : 0);
      } else {
        collx::broadcast(*group, std::span<int>(v), group->rank() == 0 ? 5 : 0);
      }
    });
    INFO(errs[1].second);
    CHECK(errs[3].first == collx::errc::invalid_argument);
    CHECK(errs[1].first == collx::errc::invalid_argument);
    CHECK_THAT(errs[1].second, Catch::Contains("split group (color 1) rank 0 (world rank 3) failed: invalid arguments") &&
                                   Catch::Contains("(split group (color 1): its ranks 0, 1 are world ranks 3, 1)"));
    INFO(errs[2].second);
    CHECK(errs[0].first == collx::errc::invalid_argument);
    CHECK(errs[2].first == collx::errc::invalid_argument);
    CHECK_THAT(errs[2].second, Catch::Contains("split group (color 0) rank 0 (world rank 0) failed: invalid arguments") &&
                                   Catch::Contains("(split group (color 0): its ranks 0, 1 are world ranks 0, 2)"));
  }
  SECTION("a moved-from communicator") {
    auto comms = collx::make_thread_communicators(1);
    collx::communicator moved = std::move(comms[0]);
    CHECK_THROWS_MATCHES((void)collx::split(comms[0], 0, 0), collx::error,
                         Catch::Predicate<collx::error>([](const collx::error& e) { return e.code() == collx::errc::invalid_argument; }));
    CHECK(collx::split(moved, 0, 0).has_value());
  }
}

// A transport whose group start fails as a shared-memory start does when a member dies: its text
// numbers the group's ranks. Everything else goes to `inner`, a thread transport. The start fails
// once every rank has reached it, so that no rank is still in split's exchange when comm fails.
// A transport that passes every call to another (a rank's thread transport), for tests to change
// one call of it.
class forwarding_transport : public collx::transport {
 public:
  explicit forwarding_transport(collx::transport& inner) : inner_(inner) {}
  int rank() const noexcept override { return inner_.rank(); }
  int size() const noexcept override { return inner_.size(); }
  std::string_view name() const noexcept override { return inner_.name(); }
  void post_send(int peer, const void* data, std::size_t bytes, std::size_t granularity,
                 const collx::call_signature& sig) override {
    inner_.post_send(peer, data, bytes, granularity, sig);
  }
  void recv(int peer, std::size_t bytes, std::size_t granularity, const collx::call_signature& sig,
            collx::consumer_ref consume) override {
    inner_.recv(peer, bytes, granularity, sig, consume);
  }
  void wait_sends() override { inner_.wait_sends(); }
  void check() override { inner_.check(); }
  bool failed_now() const noexcept override { return inner_.failed_now(); }
  void fail(collx::errc code, const std::string& why) noexcept override { inner_.fail(code, why); }
  void adopt_failure(collx::errc code, const std::string& why) noexcept override { inner_.adopt_failure(code, why); }
  void announce(const collx::call_signature& sig) override { inner_.announce(sig); }
  void moves_nothing(const collx::call_signature& sig) override { inner_.moves_nothing(sig); }
  void set_timeout(std::chrono::milliseconds t) noexcept override { inner_.set_timeout(t); }
  bool failure(collx::errc& code, std::string& why) noexcept override { return inner_.failure(code, why); }
  std::shared_ptr<collx::transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                          std::uint64_t split_id) override {
    return inner_.split(members, group_rank, color, key, split_id);
  }
  void split_failed(std::uint64_t split_id, int color, const std::string& why) noexcept override {
    inner_.split_failed(split_id, color, why);
  }

 protected:
  collx::transport& inner_;
};

class group_start_fails final : public forwarding_transport {
 public:
  group_start_fails(collx::transport& inner, std::atomic<int>& arrived) : forwarding_transport(inner), arrived_(arrived) {}
  std::shared_ptr<collx::transport> split(const std::vector<int>& members, int group_rank, int, int, std::uint64_t) override {
    ++arrived_;
    while (arrived_.load() < inner_.size()) std::this_thread::sleep_for(1ms);
    if (members.empty())  // no_color: as MPI_Comm_split failing on a rank that joins no group
      COLLX_THROW(collx::errc::transport, "MPI_Comm_split failed: test");
    COLLX_THROW(collx::errc::aborted, "rank " + std::to_string((group_rank + 1) % static_cast<int>(members.size())) +
                                          " (pid 4242) died while rank " + std::to_string(group_rank) + " waits for it");
  }

 private:
  std::atomic<int>& arrived_;
};

TEST_CASE("a group's start that fails names which ranks of the parent the group's ranks are", "[split][errors]") {
  // Groups by parity, keys reversed: group 1 is parent ranks 3, 1 (group ranks 0, 1), group 0 is
  // parent ranks 2, 0; rank 4 joins none. The start's text numbers the group's ranks, as the
  // groups' own failures do (the previous test), and without the legend read as the parent's:
  // "rank 0 died" on parent rank 1, whose group rank 0 is parent rank 3. A rank in no group has
  // no group to describe (over MPI it still takes part in MPI_Comm_split, which may fail).
  collx::communicator_options opt;
  opt.timeout = 20s;
  auto comms = collx::make_thread_communicators(5, opt);
  std::atomic<int> arrived{0};
  std::vector<std::string> whys(5);
  std::vector<collx::errc> codes(5, collx::errc::internal);
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, inner = &c] {
      collx::communicator w(std::make_shared<group_start_fails>(inner->get_transport(), arrived), opt);
      try {
        (void)collx::split(w, w.rank() == 4 ? collx::no_color : w.rank() % 2, -w.rank());
      } catch (const collx::error& e) {
        codes[static_cast<std::size_t>(w.rank())] = e.code();
        whys[static_cast<std::size_t>(w.rank())] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ": " << whys[static_cast<std::size_t>(r)]);
    CHECK(codes[static_cast<std::size_t>(r)] == collx::errc::aborted);
  }
  CHECK(codes[4] == collx::errc::transport);
  CHECK(whys[4] == "rank 4: collx::split, joining no group: MPI_Comm_split failed: test");
  CHECK(whys[1] == "rank 1: collx::split, starting the group of color 1 (2 ranks): rank 0 (pid 4242) died while rank 1 "
                   "waits for it (split group (color 1): its ranks 0, 1 are world ranks 3, 1)");
  CHECK(whys[2] == "rank 2: collx::split, starting the group of color 0 (2 ranks): rank 1 (pid 4242) died while rank 0 "
                   "waits for it (split group (color 0): its ranks 0, 1 are world ranks 2, 0)");
}

// The thread transport of a rank whose exchange of colors (split's all_gather: one receive from
// each peer) fails after its last receive took its data, as when a failure overtakes a slow rank
// whose peers already have everything: they start their groups, this rank never comes.
class exchange_fails_late final : public forwarding_transport {
 public:
  exchange_fails_late(collx::transport& inner, bool fails, bool slow_to_start)
      : forwarding_transport(inner), fails_(fails), slow_to_start_(slow_to_start) {}
  std::shared_ptr<collx::transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                          std::uint64_t split_id) override {
    if (slow_to_start_) std::this_thread::sleep_for(600ms);  // its group is still starting when the failure comes
    return inner_.split(members, group_rank, color, key, split_id);
  }
  void recv(int peer, std::size_t bytes, std::size_t granularity, const collx::call_signature& sig,
            collx::consumer_ref consume) override {
    inner_.recv(peer, bytes, granularity, sig, consume);
    if (fails_ && ++received_ == inner_.size() - 1) {
      inner_.wait_sends();  // the peers have this rank's data
      std::this_thread::sleep_for(300ms);  // and each other's: they finish the exchange and start their group
      COLLX_THROW(collx::errc::transport, "test: this rank's exchange fails after its data came");
    }
  }

 private:
  bool fails_, slow_to_start_;
  int received_ = 0;
};

TEST_CASE("threads: a rank whose split failed after its peers' ended well fails its group at once, no other",
          "[split][errors]") {
  // Colors 0, 0, 1, 1: ranks 0 and 1 form one group, 2 and 3 the other. Rank 3's exchange fails
  // after its peers' ended well; rank 2's first call on their group waited for rank 3 until its
  // timeout (20 s here, 5 minutes by default); it now fails at once, naming rank 3. The group of
  // ranks 0 and 1 is not rank 3's and works, though rank 1 starts it after the failure.
  collx::communicator_options opt;
  opt.timeout = 20s;
  auto comms = collx::make_thread_communicators(4, opt);
  std::vector<outcome> split_calls(4), group_calls(4);
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, inner = &c] {
      const int r = inner->rank();
      collx::communicator w(std::make_shared<exchange_fails_late>(inner->get_transport(), r == 3, r == 1), opt);
      std::optional<collx::communicator> group;
      split_calls[static_cast<std::size_t>(r)] = timed_call([&] { group = collx::split(w, r / 2, r); });
      if (group) group_calls[static_cast<std::size_t>(r)] = timed_call([&] { collx::barrier(*group); });
    });
  for (auto& t : threads) t.join();
  CHECK(split_calls[3].code == collx::errc::transport);
  for (int r : {0, 1, 2}) {
    INFO("rank " << r << ": split: " << split_calls[static_cast<std::size_t>(r)].what
                 << "; group barrier: " << group_calls[static_cast<std::size_t>(r)].what);
    CHECK_FALSE(split_calls[static_cast<std::size_t>(r)].code);
    CHECK(group_calls[static_cast<std::size_t>(r)].seconds < 5);
  }
  CHECK_FALSE(group_calls[0].code);
  CHECK_FALSE(group_calls[1].code);
  CHECK(group_calls[2].code == collx::errc::aborted);
  CHECK_THAT(group_calls[2].what, Catch::Contains("rank 3 of the communicator split failed in collx::split before it "
                                                  "joined its group") &&
                                      Catch::Contains("this rank's exchange fails after its data came"));
}

// World rank 1's call on its group in world_rank_1s_error_on_group: an all-reduce.
inline void allreduce_on_group(collx::communicator& group) {
  std::vector<int> v(10, group.rank());
  collx::allreduce(group, std::span<int>(v));
}

// Colors r % 2: world ranks 1 and 3 are ranks 0 and 1 of their group. World rank 3 does
// `world_rank_3` with its group (its group lives on while it runs); world rank 1 does
// `world_rank_1` on the group. What world rank 1 got ("" if the call succeeded).
template <class Rank3, class Rank1 = decltype(&allreduce_on_group)>
std::string world_rank_1s_error_on_group(std::chrono::milliseconds timeout, Rank3 world_rank_3,
                                         Rank1 world_rank_1 = &allreduce_on_group) {
  collx::communicator_options opt;
  opt.timeout = timeout;
  auto comms = collx::make_thread_communicators(4, opt);
  std::string why;
  std::vector<std::thread> threads;
  for (auto& c : comms)
    threads.emplace_back([&, comm = &c] {
      const int r = comm->rank();
      std::optional<collx::communicator> group = collx::split(*comm, r % 2, r);
      if (r == 3) world_rank_3(group);
      if (r != 1) return;
      try {
        world_rank_1(*group);
      } catch (const collx::error& e) {
        why = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return why;
}

TEST_CASE("a timeout in a split group names the rank waited for with its world rank", "[split][errors]") {
  // World rank 3 makes no call on its group: world rank 1's timeout names it as the group numbers
  // it and as the user does.
  const std::string why = world_rank_1s_error_on_group(300ms, [](auto&) { std::this_thread::sleep_for(1s); });
  INFO(why);
  CHECK_THAT(why, Catch::Contains("timed out after 300 ms waiting for a message from rank 1 (world rank 3) (rank 1 "
                                  "(world rank 3) has made no collective call on this communicator yet"));
}

TEST_CASE("a deadlock in a split group names its ranks with their world ranks", "[split][errors]") {
  // Both members of the group receive from each other: the threads transport sees the cycle at
  // once (not at the 20 s timeout), and names each rank as the group and as the user numbers it.
  const auto t0 = std::chrono::steady_clock::now();
  auto receive_from_other = [](collx::communicator& group) {
    std::vector<int> v(3);
    collx::recv(group, std::span<int>(v), 1 - group.rank());
  };
  const std::string why = world_rank_1s_error_on_group(
      20s, [&](auto& group) { CHECK_THROWS_AS(receive_from_other(*group), collx::error); }, receive_from_other);
  INFO(why);
  CHECK_THAT(why, Catch::Contains("deadlock: rank ") &&
                      Catch::Contains("rank 0 (world rank 1) in a point-to-point call waits for a message from rank 1 "
                                      "(world rank 3)") &&
                      Catch::Contains("rank 1 (world rank 3) in a point-to-point call waits for a message from rank 0 "
                                      "(world rank 1)"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("a split group's member that closes it is named with its world rank", "[split][errors]") {
  // World rank 3 closes its group at once; world rank 1, waiting on it, fails well before its
  // timeout, and names both ranks with their world ranks.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = world_rank_1s_error_on_group(20s, [](auto& group) { group.reset(); });
  INFO(why);
  CHECK_THAT(why, Catch::Contains("rank 1 (world rank 3) closed its communicator while rank 0 (world rank 1) waits for "
                                  "it; the job cannot continue"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("a group of a split is used by its own async calls", "[split]") {
  // The group has its own progress thread: async calls on the group and the parent interleave.
  std::atomic<int> wrong{0};
  collx::run_threads(4, [&](collx::communicator& c) {
    std::optional<collx::communicator> g = collx::split(c, c.rank() / 2, 0);
    std::vector<std::int64_t> a(5000, split_checks::value(c.rank(), 0)), b(7000, split_checks::value(c.rank(), 1));
    collx::request ra = collx::allreduce_async(*g, std::span<std::int64_t>(a));
    collx::request rb = collx::allreduce_async(c, std::span<std::int64_t>(b));
    ra.wait();
    rb.wait();
    const int lo = c.rank() / 2 * 2;
    const std::int64_t want_a = split_checks::value(lo, 0) + split_checks::value(lo + 1, 0);
    std::int64_t want_b = 0;
    for (int q = 0; q < 4; ++q) want_b += split_checks::value(q, 1);
    for (auto x : a) wrong += x != want_a;
    for (auto x : b) wrong += x != want_b;
  });
  CHECK(wrong.load() == 0);
}

}  // namespace
