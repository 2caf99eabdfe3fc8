// Downstream consumer of collx (fetchcontent): allreduce(sum) over 3 thread ranks; exits non-zero if any
// rank's result differs from the expected sum.
#include <collx/collx.hpp>

#include <cstdio>
#include <span>
#include <vector>

int main() {
  constexpr int ranks = 3;
  constexpr std::size_t count = 5;
  std::vector<int> wrong(ranks, 0);  // per rank, read after run_threads joined the threads
  collx::run_threads(ranks, [&](collx::communicator& comm) {
    std::vector<long> send(count), recv(count, -1);
    for (std::size_t i = 0; i < count; ++i) send[i] = (comm.rank() + 1) * static_cast<long>(i + 1);
    collx::allreduce(comm, std::span<const long>(send), std::span<long>(recv));
    for (std::size_t i = 0; i < count; ++i)  // (1 + 2 + 3) * (i + 1)
      if (recv[i] != 6 * static_cast<long>(i + 1)) ++wrong[static_cast<std::size_t>(comm.rank())];
  });
  int total = 0;
  for (int w : wrong) total += w;
  std::printf("collx %s consumer (fetchcontent): %s\n", COLLX_VERSION_STRING, total ? "MISMATCH" : "ok");
  return total ? 1 : 0;
}
