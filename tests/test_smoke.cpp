// Smoke test: allreduce(sum) over 1..5 thread ranks, every algorithm, against a reference computed
// here without collx. Small and fast, so the suite always has something that runs end to end.
#include <catch2/catch.hpp>

#include <collx/collx.hpp>

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
