// allreduce over 4 ranks run as threads of this process (collx::run_threads): rank r contributes
// element i = (r+1)(i mod 1000 + 1); every rank ends with the element-wise sum, which the program
// checks on every rank, and rank 0 prints it. The values are integers whose every partial sum is
// exact in a double, so every summation order (ring, tree, direct) gives the same, checkable sum.
// Usage: allreduce_threads [ranks (1 to 4096, default 4)] [elements (0 to 1048576, default 8)]
#include <collx/collx.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {
constexpr const char* usage = "[ranks (1 to 4096, default 4)] [elements (0 to 1048576, default 8)]";

/// argv[i] as a decimal integer in [lo, hi], `def` when absent; anything else exits with status 2
/// (atoi took "abc" as 0, and a count of -1 became a vector too large to create).
long long arg(int argc, char** argv, int i, const char* what, long long def, long long lo, long long hi) {
  if (argc <= i) return def;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(argv[i], &end, 10);
  if (std::isspace(static_cast<unsigned char>(*argv[i])) || end == argv[i] || *end || errno == ERANGE || x < lo || x > hi) {
    std::fprintf(stderr, "%s: %s must be an integer from %lld to %lld, got '%s'\nusage: %s %s\n", argv[0], what,
                 lo, hi, argv[i], argv[0], usage);
    std::exit(2);
  }
  return x;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::printf("usage: %s %s\n", argv[0], usage);
    return 0;
  }
  if (argc > 3) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    return 2;
  }
  const int ranks = static_cast<int>(arg(argc, argv, 1, "ranks", 4, 1, 4096));
  const auto count = static_cast<std::size_t>(arg(argc, argv, 2, "elements", 8, 0, 1 << 20));
  std::vector<std::vector<double>> results(static_cast<std::size_t>(ranks));
  try {
    collx::run_threads(ranks, [&](collx::communicator& comm) {
      std::vector<double> send(count), recv(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = (comm.rank() + 1) * static_cast<double>(i % 1000 + 1);
      collx::allreduce(comm, std::span<const double>(send), std::span<double>(recv));  // ops::sum, algo::automatic
      results[static_cast<std::size_t>(comm.rank())] = recv;
    });
  } catch (const std::exception& e) {  // collx::error, and no memory or threads for this many ranks
    std::fprintf(stderr, "allreduce failed: %s\n", e.what());
    return 1;
  }

  // Expected: (1 + 2 + ... + ranks)(i mod 1000 + 1) on every rank, exactly (at most 8.4e9: integers
  // and sums of them below 2^53 are exact doubles).
  const double ranks_sum = ranks * (ranks + 1) / 2.0;
  std::size_t wrong = 0;
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < count; ++i)
      if (results[static_cast<std::size_t>(r)][i] != ranks_sum * static_cast<double>(i % 1000 + 1)) ++wrong;
  std::printf("collx %s: allreduce(sum) of %zu doubles over %d thread ranks\nresult on rank 0:", COLLX_VERSION_STRING,
              count, ranks);
  const std::size_t shown = std::min<std::size_t>(count, 16);  // not a million numbers
  for (std::size_t i = 0; i < shown; ++i) std::printf(" %g", results[0][i]);
  if (shown < count) std::printf(" ... (%zu in all)", count);
  if (wrong) std::printf("\nMISMATCH: %zu of %zu elements (over all ranks) differ from the expected sum\n", wrong, count * static_cast<std::size_t>(ranks));
  else std::printf("\nevery rank holds the expected sum\n");
  return wrong ? 1 : 0;
}
