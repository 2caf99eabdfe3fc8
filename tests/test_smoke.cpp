// Smoke test: allreduce(sum) over 1..5 thread ranks, every algorithm, against a reference computed
// here without collx. Small and fast, so the suite always has something that runs end to end. Also
// the transport interface's consumer_ref, which every transport passes along.
#include <catch2/catch.hpp>

#include <collx/collx.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/predict.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/transport/shm.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace {

// Rank r's element i. Distinct per rank and index; small enough that double sums stay exact.
template <class T>
T value(int r, std::size_t i) {
  return static_cast<T>(static_cast<std::int64_t>(i % 977) * 7 + (r + 1) * 1000 - 3 * r);
}

template <class T>
std::vector<T> reference(int n, std::size_t count) {
  std::vector<T> ref(count, T{});
  for (std::size_t i = 0; i < count; ++i)
    for (int r = 0; r < n; ++r) ref[i] = static_cast<T>(ref[i] + value<T>(r, i));
  return ref;
}

// Runs out-of-place and in-place allreduce(sum) on n thread ranks; returns each rank's two results.
template <class Algo, class T>
void check_allreduce(int n, std::size_t count) {
  const std::vector<T> ref = reference<T>(n, count);
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n)), inplace(static_cast<std::size_t>(n));
  collx::run_threads(n, [&](collx::communicator& comm) {
    const int r = comm.rank();
    std::vector<T> send(count);
    for (std::size_t i = 0; i < count; ++i) send[i] = value<T>(r, i);
    std::vector<T>& recv = out[static_cast<std::size_t>(r)];
    recv.assign(count, T{});
    collx::allreduce<Algo>(comm, std::span<const T>(send), std::span<T>(recv));
    collx::allreduce<Algo>(comm, std::span<T>(send));  // in place
    inplace[static_cast<std::size_t>(r)] = send;
  });
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r << " of " << n << ", count " << count);
    CHECK(out[static_cast<std::size_t>(r)] == ref);
    CHECK(inplace[static_cast<std::size_t>(r)] == ref);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("allreduce sum over 1..5 thread ranks matches a sequential reference", "[smoke][threads]",
                   collx::algo::automatic, collx::algo::ring, collx::algo::tree, collx::algo::direct) {
  for (int n = 1; n <= 5; ++n)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{7}, std::size_t{1000},
                              std::size_t{70000}}) {
      check_allreduce<TestType, std::int64_t>(n, count);
      check_allreduce<TestType, double>(n, count);
    }
}

TEST_CASE("version macros agree", "[smoke]") {
  CHECK(COLLX_VERSION == COLLX_VERSION_MAJOR * 10000 + COLLX_VERSION_MINOR * 100 + COLLX_VERSION_PATCH);
}

TEST_CASE("consumer_ref: copies call the same consumer and keep copy_to", "[smoke][transport]") {
  // A transport passes the consumer_ref it got on to helpers by value. An lvalue copy once picked
  // the converting constructor (F = consumer_ref), which wrapped the ref and dropped copy_to, so
  // the shm transport's single-copy reads straight into the destination never happened.
  int calls = 0;
  std::byte dest[4];
  auto consume = [&](const std::byte*, std::size_t, std::size_t) { ++calls; };
  collx::consumer_ref a(consume, dest);
  collx::consumer_ref b = a;
  const collx::consumer_ref& ca = a;
  collx::consumer_ref c = ca;
  auto passed = [](collx::consumer_ref r) { return r.copy_to(); };
  CHECK(a.copy_to() == dest);
  CHECK(b.copy_to() == dest);
  CHECK(c.copy_to() == dest);
  CHECK(passed(a) == dest);
  b(nullptr, 0, 0);
  c(nullptr, 0, 0);
  CHECK(calls == 2);
  CHECK(collx::consumer_ref(consume).copy_to() == nullptr);
}

// Designated initializers that leave fields out: every field of collx's options structs has a
// default, so -Wextra (missing-field-initializers; this file builds with -Werror in CI) stays quiet
// about the fields left out, and those keep their defaults.
TEST_CASE("options structs take designated initializers that leave fields out", "[smoke]") {
  using namespace std::chrono_literals;
  const collx::communicator_options c{.timeout = 5s};
  CHECK(c.timeout == 5s);
  CHECK(c.ring_order.empty());
  const collx::shm_options s{.cma = 0};
  CHECK(s.cma_min_bytes == 64 * 1024);
  const collx::topo::model_options m{.search = false};
  CHECK(m.tree_efficiency == 0.9);
  const collx::topo::selector_options sel{.cpu_copy_GBps = 4.0};
  CHECK(sel.cpu_latency_s == 1.0e-6);
  const collx::topo::scaling_options sc{.max_gpus = 64};
  CHECK(sc.sizes.empty());
  const collx::topo::discover_options d{.sysfs = "/nonexistent"};
  CHECK(d.sysfs == "/nonexistent");
  const collx::topo::ring_search_options r{.max_channels = 2};
  CHECK(r.max_channels == 2);
}
