// allreduce over 4 ranks run as threads of this process (collx::run_threads): rank r contributes
// [r+1, 10(r+1), 100(r+1), ...]; every rank ends with the element-wise sum and rank 0 prints it.
// Usage: allreduce_threads [ranks (default 4)] [elements (default 8)]
#include <collx/collx.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 4;
  const std::size_t count = argc > 2 ? static_cast<std::size_t>(std::atol(argv[2])) : 8;
  if (ranks < 1) {
    std::fprintf(stderr, "usage: %s [ranks >= 1] [elements]\n", argv[0]);
    return 2;
  }
  std::vector<std::vector<double>> results(static_cast<std::size_t>(ranks));
  try {
    collx::run_threads(ranks, [&](collx::communicator& comm) {
      std::vector<double> send(count), recv(count);
      double scale = 1;
      for (std::size_t i = 0; i < count; ++i, scale *= 10) send[i] = (comm.rank() + 1) * scale;
      collx::allreduce(comm, std::span<const double>(send), std::span<double>(recv));  // ops::sum, algo::automatic
      results[static_cast<std::size_t>(comm.rank())] = recv;
    });
  } catch (const collx::error& e) {
    std::fprintf(stderr, "allreduce failed: %s\n", e.what());
    return 1;
  }

  // Expected: (1 + 2 + ... + ranks) * 10^i on every rank.
  const double ranks_sum = ranks * (ranks + 1) / 2.0;
  int wrong = 0;
  for (int r = 0; r < ranks; ++r) {
    double scale = 1;
    for (std::size_t i = 0; i < count; ++i, scale *= 10)
      if (results[static_cast<std::size_t>(r)][i] != ranks_sum * scale) ++wrong;
  }
  std::printf("collx %s: allreduce(sum) of %zu doubles over %d thread ranks\nresult on rank 0:", COLLX_VERSION_STRING,
              count, ranks);
  for (double v : results[0]) std::printf(" %g", v);
  std::printf("\n%s\n", wrong ? "MISMATCH" : "every rank holds the expected sum");
  return wrong ? 1 : 0;
}
