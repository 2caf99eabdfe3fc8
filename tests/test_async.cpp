// The *_async forms between thread ranks: every form gives what its blocking form gives (the
// blocking forms are checked against references elsewhere), counts passed as temporaries are
// copied, several threads may start calls on one communicator at once, and a request delivers its
// outcome once (move-only).
#include <catch2/catch.hpp>

#include <collx/collx.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "reference.hpp"

namespace {

using std::size_t;
inline size_t uz(int x) { return static_cast<size_t>(x); }

/// Rank r's element i: distinct per rank and index.
std::vector<double> values(int r, size_t count, int salt) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = 1000.0 * r + static_cast<double>(i) + 0.25 * salt;
  return v;
}

/// Every async form and its blocking twin on `c`, outputs poisoned first: counts of failures.
int async_equals_blocking(collx::communicator& c) {
  const int n = c.size(), r = c.rank();
  const size_t k = 5, all = k * uz(n);
  int bad = 0;
  auto same = [&](const std::vector<double>& a, const std::vector<double>& b) {
    bad += std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) != 0;
  };
  auto fresh = [](size_t m) { return ref::poisoned<double>(m); };
  // Per-rank counts of the v-forms: 1..n, as a temporary built in the call.
  auto ranks_counts = [n] {
    std::vector<size_t> v(uz(n));
    std::iota(v.begin(), v.end(), size_t{1});
    return v;
  };
  const size_t v_total = uz(n) * uz(n + 1) / 2;
  {
    auto in = values(r, all, 1), a = fresh(all), b = fresh(all);
    collx::allreduce_async(c, std::span<const double>(in), std::span<double>(a)).wait();
    collx::allreduce(c, std::span<const double>(in), std::span<double>(b));
    same(a, b);
    auto ia = in, ib = in;
    collx::allreduce_async(c, std::span<double>(ia), collx::ops::max{}).wait();
    collx::allreduce(c, std::span<double>(ib), collx::ops::max{});
    same(ia, ib);
  }
  {
    auto in = values(r, all, 2), a = fresh(k), b = fresh(k);
    collx::reduce_scatter_async(c, std::span<const double>(in), std::span<double>(a)).wait();
    collx::reduce_scatter(c, std::span<const double>(in), std::span<double>(b));
    same(a, b);
    auto vin = values(r, v_total, 3), va = fresh(uz(r + 1)), vb = fresh(uz(r + 1));
    collx::request q = collx::reduce_scatter_v_async(c, std::span<const double>(vin), std::span<double>(va), ranks_counts());
    q.wait();
    const auto counts = ranks_counts();
    collx::reduce_scatter_v(c, std::span<const double>(vin), std::span<double>(vb), counts);
    same(va, vb);
  }
  {
    auto in = values(r, k, 4), a = fresh(all), b = fresh(all);
    collx::all_gather_async(c, std::span<const double>(in), std::span<double>(a)).wait();
    collx::all_gather(c, std::span<const double>(in), std::span<double>(b));
    same(a, b);
    auto vin = values(r, uz(r + 1), 5), va = fresh(v_total), vb = fresh(v_total);
    collx::request q = collx::all_gather_v_async(c, std::span<const double>(vin), std::span<double>(va), ranks_counts());
    q.wait();
    const auto counts = ranks_counts();
    collx::all_gather_v(c, std::span<const double>(vin), std::span<double>(vb), counts);
    same(va, vb);
  }
  {
    const int root = n - 1;
    auto in = values(r, k, 6), a = fresh(k), b = fresh(k);
    collx::broadcast_async(c, std::span<const double>(in), std::span<double>(a), root).wait();
    collx::broadcast(c, std::span<const double>(in), std::span<double>(b), root);
    same(a, b);
    auto ia = values(r, k, 7), ib = ia;
    collx::broadcast_async(c, std::span<double>(ia), 0).wait();
    collx::broadcast(c, std::span<double>(ib), 0);
    same(ia, ib);
  }
  {
    const int root = n / 2;
    auto in = values(r, k, 8), a = fresh(k), b = fresh(k);
    collx::reduce_async(c, std::span<const double>(in), std::span<double>(a), root).wait();
    collx::reduce(c, std::span<const double>(in), std::span<double>(b), root);
    same(a, b);
    auto ia = values(r, k, 9), ib = ia;
    collx::reduce_async(c, std::span<double>(ia), root, collx::ops::min{}).wait();
    collx::reduce(c, std::span<double>(ib), root, collx::ops::min{});
    same(ia, ib);
  }
  {
    auto in = values(r, all, 10), a = fresh(all), b = fresh(all);
    collx::all_to_all_async(c, std::span<const double>(in), std::span<double>(a)).wait();
    collx::all_to_all(c, std::span<const double>(in), std::span<double>(b));
    same(a, b);
    // all_to_all_v: rank r sends r + c + 1 elements to rank c (and receives c + r + 1 from it).
    auto send_counts = [n, r] {
      std::vector<size_t> v(uz(n));
      for (int q = 0; q < n; ++q) v[uz(q)] = uz(r + q + 1);
      return v;
    };
    const auto sc = send_counts();
    const size_t total = std::accumulate(sc.begin(), sc.end(), size_t{0});
    auto vin = values(r, total, 11), va = fresh(total), vb = fresh(total);
    collx::request q =
        collx::all_to_all_v_async(c, std::span<const double>(vin), send_counts(), std::span<double>(va), send_counts());
    q.wait();
    collx::all_to_all_v(c, std::span<const double>(vin), sc, std::span<double>(vb), sc);
    same(va, vb);
  }
  collx::barrier_async(c).wait();
  {  // a ring shift: send to the next rank, receive from the previous one (async sends queue first)
    auto out = values(r, k, 12), a = fresh(k);
    if (r % 2 == 0) {
      collx::send_async(c, std::span<const double>(out), (r + 1) % n).wait();
      collx::recv_async(c, std::span<double>(a), (r + n - 1) % n).wait();
    } else {
      collx::recv_async(c, std::span<double>(a), (r + n - 1) % n).wait();
      collx::send_async(c, std::span<const double>(out), (r + 1) % n).wait();
    }
    same(a, values((r + n - 1) % n, k, 12));
  }
  return bad;
}

}  // namespace

TEST_CASE("every *_async form gives its blocking form's result, counts passed as temporaries", "[async]") {
  for (const int n : {2, 3, 4}) {
    INFO("world size " << n);
    std::atomic<int> bad{0};
    ref::run_ranks(n, [&](collx::communicator& c) { bad += async_equals_blocking(c); });
    CHECK(bad == 0);
  }
}

TEST_CASE("several threads start async calls on one communicator at once: every call runs", "[async]") {
  // The progress thread is made at the first async call; two threads making the first call at once
  // raced on it (TSan; now and then a call lost, then a timeout). Both threads' calls carry the same
  // values, so whichever pairing the ranks' queues make, each result is sum over ranks of (r + 1) (i + 1).
  constexpr int n = 3, per_thread = 40;
  constexpr size_t count = 8;
  for (int round = 0; round < 10; ++round) {
    std::atomic<long> wrong{0};
    ref::run_ranks(n, [&](collx::communicator& c) {
      std::vector<std::vector<double>> bufs(2 * per_thread);
      std::vector<collx::request> reqs(bufs.size());
      auto start = [&](int t) {
        for (int k = 0; k < per_thread; ++k) {
          auto& b = bufs[uz(t * per_thread + k)];
          b.resize(count);
          for (size_t i = 0; i < count; ++i) b[i] = (c.rank() + 1.0) * static_cast<double>(i + 1);
          reqs[uz(t * per_thread + k)] = collx::allreduce_async(c, std::span<double>(b));
        }
      };
      std::thread other(start, 1);
      start(0);
      other.join();
      for (auto& q : reqs) q.wait();
      for (const auto& b : bufs)
        for (size_t i = 0; i < count; ++i) wrong += b[i] != static_cast<double>(n * (n + 1) / 2) * static_cast<double>(i + 1);
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("an async call started while another thread's blocking call runs waits its turn", "[async]") {
  // Rank 0's main thread is inside a blocking call (rank 1 joins it late) when its second thread
  // starts an allreduce_async: the progress thread reaches it while the blocking call holds the
  // communicator, and must wait for that call to end, then run (it failed with "two threads called
  // collectives" before). Rank 1 makes the same calls, blocking, in that order. Then the blocking
  // call is a call made of calls (split: an all_gather, then connecting the group): the async call
  // runs after the whole split. (An async call queued between the split's start and its inner
  // all_gather, a window too narrow to hit here, must not make that all_gather wait for it: it
  // would wait for itself; drain_async skips inside a call.)
  constexpr int n = 2;
  constexpr size_t count = 7;
  collx::communicator_options o = ref::test_options();
  o.timeout = std::chrono::seconds(20);
  std::vector<std::string> errors(n);
  std::vector<int> wrong(n, -1), group_size(n, 0);
  ref::run_ranks(n, [&](collx::communicator& c) {
    const int r = c.rank();
    auto a = values(r, count, 1), b = values(r, count, 2), d = values(r, count, 3);
    auto late = [] { std::this_thread::sleep_for(std::chrono::milliseconds(400)); };
    // On rank 0: runs `blocking` on this thread and starts allreduce_async(buf) from another one
    // while `blocking` waits for rank 1.
    auto async_during = [&](auto blocking, std::vector<double>& buf) {
      std::atomic<bool> entering{false};
      collx::request q;
      std::thread starter([&] {
        while (!entering) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the blocking call waits by now
        q = collx::allreduce_async(c, std::span<double>(buf));
      });
      entering = true;
      try {
        blocking();
      } catch (...) {
        starter.join();
        throw;
      }
      starter.join();
      q.wait();
    };
    try {
      if (r == 0) {
        async_during([&] { collx::allreduce(c, std::span<double>(a)); }, b);
        async_during([&] { group_size[0] = collx::split(c, 0, r)->size(); }, d);
      } else {
        late();
        collx::allreduce(c, std::span<double>(a));
        collx::allreduce(c, std::span<double>(b));
        late();
        group_size[1] = collx::split(c, 0, r)->size();
        collx::allreduce(c, std::span<double>(d));
      }
      int bad = 0;
      for (int salt = 1; salt <= 3; ++salt) {
        const auto& got = salt == 1 ? a : salt == 2 ? b : d;
        const auto v0 = values(0, count, salt), v1 = values(1, count, salt);
        for (size_t i = 0; i < count; ++i) bad += got[i] != v0[i] + v1[i];
      }
      wrong[uz(r)] = bad;
    } catch (const collx::error& e) {
      errors[uz(r)] = e.what();
    }
  }, o);
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[uz(r)]);
    CHECK(errors[uz(r)].empty());
    CHECK(wrong[uz(r)] == 0);
    CHECK(group_size[uz(r)] == 2);
  }
}

TEST_CASE("a task on one communicator's progress thread waits for another communicator's queue", "[async]") {
  // A blocking call on B made from A's progress thread must come after B's earlier async call (rank
  // 1 joins that one late, so it is still queued or running): progress threads were all one to
  // drain_async, which skipped B's queue there, and the two calls collided.
  constexpr int n = 2;
  constexpr size_t count = 1000;
  std::vector<std::string> errors(n);
  std::vector<int> wrong(n, -1);
  ref::run_ranks(n, [&](collx::communicator& a) {
    const int r = a.rank();
    auto b = collx::split(a, 0, r);
    auto x = values(r, count, 1), y = values(r, count / 7, 2);
    try {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      collx::request first = collx::allreduce_async(*b, std::span<double>(x));
      collx::request second = a.submit_async([&] { collx::allreduce(*b, std::span<double>(y)); });
      first.wait();
      second.wait();
      int bad = 0;
      for (const auto* got : {&x, &y}) {
        const int salt = got == &x ? 1 : 2;
        const auto v0 = values(0, got->size(), salt), v1 = values(1, got->size(), salt);
        for (size_t i = 0; i < got->size(); ++i) bad += (*got)[i] != v0[i] + v1[i];
      }
      wrong[uz(r)] = bad;
    } catch (const collx::error& e) {
      errors[uz(r)] = e.what();
    }
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[uz(r)]);
    CHECK(errors[uz(r)].empty());
    CHECK(wrong[uz(r)] == 0);
  }
}

TEST_CASE("a request waited on from the progress thread that runs its call is an error, not a hang", "[async]") {
  // A task of submit_async that waits for a later async call of its own communicator would wait for
  // itself (the call runs after the task). The request, dropped in the task, is not waited for
  // either (stderr says so); the call still runs after the task.
  constexpr int n = 2;
  std::vector<std::string> errors(n);
  std::vector<int> wrong(n, -1);
  ref::run_ranks(n, [&](collx::communicator& c) {
    const int r = c.rank();
    auto x = values(r, 9, 1);
    collx::request task = c.submit_async([&] {
      try {
        collx::allreduce_async(c, std::span<double>(x)).wait();
      } catch (const collx::error& e) {
        errors[uz(r)] = e.what();
      }
    });
    task.wait();
    collx::barrier(c);  // after the dropped call
    const auto v0 = values(0, 9, 1), v1 = values(1, 9, 1);
    int bad = 0;
    for (size_t i = 0; i < 9; ++i) bad += x[i] != v0[i] + v1[i];
    wrong[uz(r)] = bad;
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[uz(r)]);
    CHECK(errors[uz(r)].find("progress thread that runs its call") != std::string::npos);
    CHECK(wrong[uz(r)] == 0);
  }
}

TEST_CASE("an async call started inside a call on its communicator runs after it; waiting for it there is an error",
          "[async]") {
  // Rank 0's reduction op runs inside a blocking all-reduce. An async call it starts on the same
  // communicator runs once that all-reduce has ended: waited for after it, it completes. Waited
  // for inside the op, it would wait for itself: the progress thread waits for the all-reduce to
  // end, the all-reduce for the op. That hung for ever (neither the timeout nor abort() ended it);
  // now wait() throws, and the request, dropped unfinished, fails the communicator.
  collx::communicator_options o = ref::test_options();
  o.timeout = std::chrono::seconds(20);
  for (const bool wait_inside : {false, true}) {
    std::vector<std::string> errors(2), inside(2);
    std::vector<int> y_sum(2, -1);
    const auto t0 = std::chrono::steady_clock::now();
    ref::run_ranks(2, [&](collx::communicator& c) {
      const int r = c.rank();
      std::vector<int> x(8, r + 1), y(8, 10 * (r + 1));
      collx::request later;
      bool first = r == 0;
      auto op = [&](int a, int b) {
        if (first) {
          first = false;
          if (!wait_inside) {
            later = collx::allreduce_async(c, std::span<int>(y));
          } else {
            try {
              collx::allreduce_async(c, std::span<int>(y)).wait();
            } catch (const collx::error& e) {
              inside[uz(r)] = e.what();
            }
          }
        }
        return a + b;
      };
      try {
        collx::allreduce<collx::algo::direct>(c, std::span<int>(x), collx::commutative_op{op});
        if (r == 0) later.wait();
        else collx::allreduce(c, std::span<int>(y));
        y_sum[uz(r)] = y[0];
      } catch (const collx::error& e) {
        errors[uz(r)] = e.what();
      }
    }, o);
    INFO("wait inside the op: " << wait_inside << "; rank 0: " << errors[0] << "; rank 1: " << errors[1]);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));
    if (!wait_inside) {
      CHECK(errors == std::vector<std::string>{"", ""});
      CHECK(y_sum == std::vector<int>{30, 30});
    } else {
      CHECK(inside[0].find("inside a call on its own communicator") != std::string::npos);
      CHECK(!errors[1].empty());  // rank 0 dropped the unfinished call: the communicator failed
    }
  }
}

TEST_CASE("tasks of two communicators' progress threads calling on each other do not wait for each other for ever",
          "[async]") {
  // On every rank a task on A's progress thread calls on B while a task on B's calls on A (both
  // queued behind a gate, so both run at once). Each progress thread waited for the other's queue
  // before its call: for ever. Now the second to wait sees the cycle and neither waits: each call
  // takes its turn on its communicator, as before progress threads waited for other queues.
  collx::communicator_options o = ref::test_options();
  o.timeout = std::chrono::seconds(20);
  std::atomic<int> wrong{0};
  for (int round = 0; round < 5; ++round) ref::run_ranks(2, [&](collx::communicator& a) {
    auto b = collx::split(a, 0, a.rank());
    std::vector<double> x(16, 1.0 + a.rank()), y(16, 10.0 + a.rank());
    std::atomic<bool> go{false};
    auto gate = [&] {
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    collx::request ga = a.submit_async(gate), gb = b->submit_async(gate);
    collx::request ra = a.submit_async([&] { collx::allreduce(*b, std::span<double>(x)); });
    collx::request rb = b->submit_async([&] { collx::allreduce(a, std::span<double>(y)); });
    go = true;
    ga.wait();
    gb.wait();
    ra.wait();
    rb.wait();
    wrong += x[0] != 3.0 || y[15] != 21.0;  // Catch2 checks are not thread-safe: counted here
  }, o);
  CHECK(wrong == 0);
}

TEST_CASE("tasks and ops of two communicators waiting for each other end, with results or errors, never hang",
          "[async]") {
  // Review of the turn-taking: (1) A's task makes a blocking call on B while B's task waits for an
  // async call on A: the drain and the request wait closed a cycle the drain check did not see;
  // (2) both tasks wait for async calls on the other: a cycle nothing can break; (3) an async call's
  // op on A calls on B while one's op on B calls on A: each progress thread held its communicator
  // and waited for the other's. All hung for ever; (1) now completes, (2) and (3) fail.
  collx::communicator_options o = ref::test_options();
  o.timeout = std::chrono::seconds(20);
  for (const int variant : {1, 2, 3}) {
    std::atomic<int> wrong{0}, failed{0};
    const auto t0 = std::chrono::steady_clock::now();
    ref::run_ranks(2, [&](collx::communicator& a) {
      const int r = a.rank();
      auto b = collx::split(a, 0, r);
      std::vector<double> x(16, 1.0 + r), y(16, 10.0 + r);
      std::vector<int> u(4, 1 + r), v(4, 1 + r), p(4, 1), q(4, 1);
      bool first_a = true, first_b = true;  // variant 3: each op runs on its own progress thread
      std::atomic<int> inside{0};
      // Variant 3: both ops inside their calls before either calls on the other communicator (at
      // most 5 s). Everything the ops use lives here: they run after the branch below has ended.
      auto both_inside = [&] {
        ++inside;
        for (int i = 0; i < 5000 && inside < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      };
      std::atomic<bool> go{false};
      auto gate = [&] {
        while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      };
      std::vector<collx::request> reqs;
      if (variant < 3) {
        reqs.push_back(a.submit_async(gate));
        reqs.push_back(b->submit_async(gate));
        if (variant == 1) reqs.push_back(a.submit_async([&] { collx::allreduce(*b, std::span<double>(x)); }));
        else reqs.push_back(a.submit_async([&] { collx::allreduce_async(*b, std::span<double>(x)).wait(); }));
        reqs.push_back(b->submit_async([&] { collx::allreduce_async(a, std::span<double>(y)).wait(); }));
        go = true;
      } else {
        auto op_a = [&](int m, int n) {
          if (first_a) first_a = false, both_inside(), collx::allreduce(*b, std::span<int>(p));
          return m + n;
        };
        auto op_b = [&](int m, int n) {
          if (first_b) first_b = false, both_inside(), collx::allreduce(a, std::span<int>(q));
          return m + n;
        };
        reqs.push_back(collx::allreduce_async<collx::algo::direct>(a, std::span<int>(u), collx::commutative_op{op_a}));
        reqs.push_back(collx::allreduce_async<collx::algo::direct>(*b, std::span<int>(v), collx::commutative_op{op_b}));
      }
      for (auto& q : reqs) {
        try {
          q.wait();
        } catch (const collx::error&) {
          ++failed;
        }
      }
      if (variant == 1) wrong += x[0] != 3.0 || y[15] != 21.0;
    }, o);
    INFO("variant " << variant);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(15));  // not the 20 s timeout
    if (variant == 1) {
      CHECK(failed == 0);
      CHECK(wrong == 0);
    } else {
      CHECK(failed > 0);
    }
  }
}

TEST_CASE("a request that outlives its communicator is destroyed without waiting (its call ran)", "[async]") {
  // The destructor read the communicator's busy thread before seeing that the call had finished:
  // a use after free (ASan) once the communicator was gone.
  std::atomic<int> wrong{0};
  ref::run_ranks(2, [&](collx::communicator& a) {
    std::vector<double> x(8, 1.0 + a.rank());
    collx::request left;
    {
      auto b = std::make_unique<collx::communicator>(std::move(*collx::split(a, 0, a.rank())));
      left = collx::allreduce_async(*b, std::span<double>(x));
    }  // the communicator's destructor runs the call first
    wrong += x[0] != 3.0;
  });
  CHECK(wrong == 0);
}

TEST_CASE("a task that destroys or assigns over its own communicator: the calls queued after it fail, nothing aborts",
          "[async]") {
  // Its progress thread cannot join itself: ~async_engine's join threw std::system_error
  // ("Resource deadlock avoided") in a noexcept destructor, and the process ended in
  // std::terminate. The task blocks until the next call is queued behind it, so that the call is
  // pending when the communicator goes.
  for (const bool assign : {false, true}) {
    std::atomic<int> wrong{0};
    ref::run_ranks(3, [&](collx::communicator& a) {
      auto g = std::make_unique<collx::communicator>(std::move(*collx::split(a, 0, a.rank())));
      auto other = std::make_unique<collx::communicator>(std::move(*collx::split(a, 0, a.rank())));
      std::atomic<bool> queued{false};
      collx::request ends = g->submit_async([&] {
        while (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (assign) *g = std::move(*other);
        else g.reset();
      });
      std::vector<int> v(7, a.rank() + 1);
      collx::request after = collx::allreduce_async(*g, std::span<int>(v));
      queued = true;
      ends.wait();
      std::string why;
      try {
        after.wait();
      } catch (const collx::error& e) {
        wrong += e.code() != collx::errc::invalid_argument;
        why = e.what();
      }
      wrong += why.find("destroyed (or assigned over) before the call ran") == std::string::npos;
      wrong += v[0] != a.rank() + 1;  // it did not run
      if (assign) {  // g now holds the other group's transport, and works
        std::vector<int> w(5, a.rank() + 1);
        collx::allreduce(*g, std::span<int>(w));
        wrong += w[4] != 6;
      }
      collx::barrier(a);
    });
    CHECK(wrong == 0);
  }
}

TEST_CASE("a request is move-only and delivers its call's error once", "[async]") {
  static_assert(!std::is_copy_constructible_v<collx::request> && !std::is_copy_assignable_v<collx::request>);
  static_assert(std::is_nothrow_move_constructible_v<collx::request> && std::is_nothrow_move_assignable_v<collx::request>);
  std::atomic<int> rethrown{0};
  ref::run_ranks(2, [&](collx::communicator& c) {
    std::vector<float> x(4);
    collx::request q = collx::broadcast_async(c, std::span<float>(x), 7);  // no rank 7: invalid_argument
    collx::request moved = std::move(q);
    try {
      moved.wait();
    } catch (const collx::error& e) {
      rethrown += e.code() == collx::errc::invalid_argument;
    }
    moved.wait();  // delivered already: returns
    q.wait();      // moved from: returns
  });
  CHECK(rethrown == 2);
}

// Rank 1 joins the call 300 ms late: a request rank 0 destroys (or assigns over) at once must wait
// for the call, or rank 0 would read its poisoned output (and the call would later write to a
// buffer its caller may have freed).
TEST_CASE("a request destroyed or assigned over without wait() waits for its call", "[async]") {
  constexpr size_t count = 1001;
  std::atomic<int> wrong{0};
  ref::run_ranks(2, [&](collx::communicator& c) {
    auto in = values(c.rank(), count, 3);
    std::vector<double> expected(count);
    for (size_t i = 0; i < count; ++i) expected[i] = values(0, count, 3)[i] + values(1, count, 3)[i];
    for (int form = 0; form < 2; ++form) {
      auto out = ref::poisoned<double>(count);
      if (c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        collx::allreduce(c, std::span<const double>(in), std::span<double>(out));
      } else if (form == 0) {
        collx::request q = collx::allreduce_async(c, std::span<const double>(in), std::span<double>(out));
      } else {
        collx::request q = collx::allreduce_async(c, std::span<const double>(in), std::span<double>(out));
        q = collx::request{};
      }
      wrong += std::memcmp(out.data(), expected.data(), count * sizeof(double)) != 0;
    }
  });
  CHECK(wrong == 0);
}

// A failed call whose request nobody waits for: its error cannot be thrown from a destructor, so
// it goes to stderr (read back here through a temporary file put in place of fd 2).
TEST_CASE("a failed request destroyed without wait() writes its error to stderr", "[async]") {
  std::FILE* log = std::tmpfile();
  REQUIRE(log != nullptr);
  std::fflush(stderr);
  const int saved = ::dup(2);
  REQUIRE(::dup2(::fileno(log), 2) == 2);
  ref::run_ranks(2, [&](collx::communicator& c) {
    std::vector<float> x(4);
    if (c.rank() == 0) collx::request q = collx::broadcast_async(c, std::span<float>(x), 7);  // no rank 7
  });
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::rewind(log);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), log));
  std::fclose(log);
  CHECK(text.find("collx: a request destroyed without wait() or test() failed:") != std::string::npos);
  CHECK(text.find("root") != std::string::npos);
}

// Rank 1 joins the async call only after rank 0 has got past dropping its request (as when it
// waits for a message on another communicator): a request dropped by an exception must fail the
// communicator at once, as the communicator's own destructor does, not wait for rank 1 until the
// 20 s timeout.
TEST_CASE("a request dropped by an exception fails the communicator instead of waiting for the timeout", "[async]") {
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(20);
  std::atomic<bool> rank0_past{false};
  std::atomic<int> aborted{0};
  std::chrono::steady_clock::duration rank0_took{};
  ref::run_ranks(
      2,
      [&](collx::communicator& c) {
        std::vector<double> v(100, 1.0);
        if (c.rank() == 0) {
          const auto t0 = std::chrono::steady_clock::now();
          try {
            collx::request q = collx::allreduce_async(c, std::span<double>(v));
            throw std::runtime_error("the caller's own failure");
          } catch (const std::runtime_error&) {
          }
          rank0_took = std::chrono::steady_clock::now() - t0;
          rank0_past = true;
        } else {
          while (!rank0_past) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        try {
          collx::allreduce(c, std::span<double>(v));
        } catch (const collx::error& e) {
          aborted += e.code() == collx::errc::aborted;
        }
      },
      o);
  CHECK(rank0_took < std::chrono::seconds(5));
  CHECK(aborted == 2);
}
