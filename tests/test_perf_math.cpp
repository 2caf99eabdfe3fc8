// Case P1 of docs/edge-cases.md: the bandwidth arithmetic of collx-perf (and of the MPI
// peers, which share bench/perf_math.hpp) is nccl-tests' doc/PERFORMANCE.md to the last digit.
#include <catch2/catch.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include "perf_common.hpp"  // collx-perf's command line (parse_options)
#include "perf_math.hpp"    // found with -iquote bench (tests/CMakeLists.txt)

using namespace collx_perf;

namespace {
// P1: time 1000 us, n = 8, float32, count 1048576 per rank, GB = 1e9 B.
constexpr double t_s = 1000e-6;
constexpr int n = 8;
constexpr std::size_t per_rank = 1048576;
constexpr std::size_t fs = sizeof(float);

// The benchmark is driven by total sizes, as nccl-tests is: the count a rank passes comes out of
// counts_for(). Check that it yields the P1 per-rank count and return the bandwidths.
bandwidth p1(coll c, std::size_t total_count, int ranks = n) {
  const call_counts k = counts_for(c, total_count, ranks);
  REQUIRE(k.param_count == (ranks == n ? per_rank : total_count / ranks));
  return bandwidth_for(c, k.param_count, fs, ranks, t_s);
}
}  // namespace

TEST_CASE("P1 all-reduce: S = count * 4, busbw = algbw * 2(n-1)/n") {
  REQUIRE(algbw_bytes(coll::allreduce, per_rank, fs, n) == 4194304.0);
  const bandwidth b = p1(coll::allreduce, per_rank);
  CHECK(b.algbw == Approx(4.194304).epsilon(1e-12));
  CHECK(b.busbw == Approx(7.340032).epsilon(1e-12));
  CHECK(size_column_bytes(counts_for(coll::allreduce, per_rank, n), fs) == 4194304);
}

TEST_CASE("P1 all-gather and reduce-scatter: S = n * count * 4, busbw = algbw * (n-1)/n") {
  for (coll c : {coll::all_gather, coll::reduce_scatter}) {
    INFO(coll_name(c));
    REQUIRE(algbw_bytes(c, per_rank, fs, n) == 33554432.0);
    const bandwidth b = p1(c, per_rank * n);  // the sweep's size is the total, n * count * 4
    CHECK(b.algbw == Approx(33.554432).epsilon(1e-12));
    CHECK(b.busbw == Approx(29.360128).epsilon(1e-12));
    // The size column is the total, the count column the per-rank count (as nccl-tests prints them).
    const call_counts k = counts_for(c, per_rank * n, n);
    CHECK(size_column_bytes(k, fs) == 33554432);
    CHECK(k.param_count == per_rank);
  }
}

TEST_CASE("P1 broadcast and reduce: algbw = busbw = S / t") {
  for (coll c : {coll::broadcast, coll::reduce}) {
    INFO(coll_name(c));
    const bandwidth b = p1(c, per_rank);
    CHECK(b.algbw == Approx(4.194304).epsilon(1e-12));
    CHECK(b.busbw == Approx(4.194304).epsilon(1e-12));
  }
}

TEST_CASE("P1 one rank: busbw 0 for all-reduce, all-gather and reduce-scatter") {
  for (coll c : {coll::allreduce, coll::all_gather, coll::reduce_scatter}) {
    INFO(coll_name(c));
    const bandwidth b = p1(c, per_rank, 1);
    CHECK(b.algbw == Approx(4.194304).epsilon(1e-12));
    CHECK(b.busbw == 0.0);
  }
  CHECK(p1(coll::broadcast, per_rank, 1).busbw == Approx(4.194304).epsilon(1e-12));
}

TEST_CASE("all_to_all and sendrecv follow nccl-tests too") {
  const bandwidth a = p1(coll::all_to_all, per_rank * n);
  CHECK(a.algbw == Approx(33.554432).epsilon(1e-12));
  CHECK(a.busbw == Approx(29.360128).epsilon(1e-12));
  const bandwidth s = p1(coll::sendrecv, per_rank);
  CHECK(s.algbw == Approx(4.194304).epsilon(1e-12));
  CHECK(s.busbw == Approx(4.194304).epsilon(1e-12));
}

TEST_CASE("counts: sizes that do not divide by n are truncated per rank, in-place offsets") {
  const call_counts rs = counts_for(coll::reduce_scatter, 10, 4);
  CHECK(rs.send_count == 8);
  CHECK(rs.recv_count == 2);
  CHECK(rs.recv_inplace_offset == 2);
  const call_counts ag = counts_for(coll::all_gather, 10, 4);
  CHECK(ag.send_count == 2);
  CHECK(ag.recv_count == 8);
  CHECK(ag.send_inplace_offset == 2);
  const call_counts tiny = counts_for(coll::all_gather, 1, 2);  // 4 bytes of float over 2 ranks
  CHECK(tiny.param_count == 0);
  CHECK(algbw_GBps(1e9, 0.0) == 0.0);  // no division by zero for an unmeasured row
}

TEST_CASE("names round-trip, nccl-tests' names accepted") {
  for (coll c : all_colls) CHECK(parse_coll(coll_name(c)) == c);
  CHECK(parse_coll("all_reduce") == coll::allreduce);
  CHECK(parse_coll("alltoall") == coll::all_to_all);
  CHECK_FALSE(parse_coll("gather").has_value());
}

namespace {
/// parse_options on "collx-perf allreduce ARGS...", or the usage_error's message ("" if none).
std::string usage_error_of(std::initializer_list<const char*> args) {
  std::vector<std::string> words{"collx-perf", "allreduce"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    (void)parse_options(static_cast<int>(argv.size()), argv.data(), 2);
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("command line: -f takes 1 <= F <= 1024 as the help says (1: add -i, as nccl-tests), -R 1 only with shm; "
          "both usage errors (exit 2)") {
  for (const char* f : {"0.5", "0.99", "nan", "inf", "2000", " 2", "2x", ""}) {
    INFO(f);
    CHECK(usage_error_of({"-f", f}).find("-f: expected a factor F with 1 <= F <= 1024") != std::string::npos);
  }
  CHECK(usage_error_of({"-f", "1"}).empty());
  CHECK(usage_error_of({"-f", "1.0", "-i", "4K"}).empty());
  CHECK(usage_error_of({"-f", "2"}).empty());
  CHECK(usage_error_of({"-f", "1.5"}).empty());
  // -R 1 needs collx::shm_buffer, i.e. processes over shared memory; threads failed mid-run (exit 1).
  CHECK(usage_error_of({"-R", "1", "--transport", "threads"}).find("-R 1") != std::string::npos);
  CHECK(usage_error_of({"--transport", "threads", "-R", "1"}).find("--transport shm") != std::string::npos);
  CHECK(usage_error_of({"-R", "1"}).empty());
  CHECK(usage_error_of({"-R", "0", "--transport", "threads"}).empty());
  // Integers: no white space around them (strtoll skipped leading blanks).
  CHECK(usage_error_of({"-n", " 3"}).find("-n: expected an integer") != std::string::npos);
}

TEST_CASE("command line: nccl-tests' options accepted at their neutral value, refused otherwise with their own reason") {
  for (const char* o : {"-t", "-g", "-m"}) CHECK(usage_error_of({o, "1"}).empty());
  for (const char* o : {"-G", "-y", "-p", "-C"}) CHECK(usage_error_of({o, "0"}).empty());
  // Advice that fits both programs (mpi-perf refuses --ranks and --transport).
  CHECK(usage_error_of({"-t", "2"}).find("collx-perf --ranks N [--transport threads], mpi-perf under mpirun -np N") !=
        std::string::npos);
  CHECK(usage_error_of({"-g", "2"}).find("one rank per process or thread") != std::string::npos);
  // -m is nccl-tests' --agg_iters (calls per NCCL group), not a rank count.
  const std::string m = usage_error_of({"-m", "2"});
  CHECK(m.find("NCCL group") != std::string::npos);
  CHECK(m.find("--ranks") == std::string::npos);
  CHECK(usage_error_of({"--agg_iters", "4"}).find("NCCL group") != std::string::npos);
  CHECK(usage_error_of({"-G", "1"}).find("a GPU option") != std::string::npos);
}

TEST_CASE("command line: collx-perf's own options are told apart (the MPI peers refuse them), none by default") {
  const auto given = [](const std::vector<const char*>& args) {
    std::vector<std::string> words{"mpi-perf", "allreduce"};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    return parse_options(static_cast<int>(argv.size()), argv.data(), 2).collx_options_given();
  };
  CHECK_FALSE(given({}));  // the default --bind was "none", which mpi-perf took for one given
  CHECK_FALSE(given({"-b", "8", "-e", "1K"}));
  for (const auto& args : {std::vector<const char*>{"--bind", "none"}, {"--bind", "core"}, {"--ranks", "2"},
                           {"--algo", "ring"}, {"--transport", "threads"}}) {
    INFO(args[0] << " " << args[1]);
    CHECK(given(args));
  }
}

TEST_CASE("the size sweep: -f multiplies up to -e, never past size_t; without -f, -i adds") {
  const char* argv_mul[] = {"collx-perf", "allreduce", "-b", "8", "-e", "100", "-f", "3"};
  CHECK(parse_options(8, const_cast<char**>(argv_mul), 2).sizes() == std::vector<std::size_t>{8, 24, 72});
  const char* argv_add[] = {"collx-perf", "allreduce", "-b", "8", "-e", "30", "-i", "10"};
  CHECK(parse_options(8, const_cast<char**>(argv_add), 2).sizes() == std::vector<std::size_t>{8, 18, 28});
  // A factor that does not grow a small size by a whole element grows it by one (the sweep stopped
  // after its first size before; a byte at a time repeated rows), and so does any factor from 0.
  const char* argv_slow[] = {"collx-perf", "allreduce", "-b", "8", "-e", "20", "-f", "1.1"};
  CHECK(parse_options(8, const_cast<char**>(argv_slow), 2).sizes() == std::vector<std::size_t>{8, 12, 16, 20});
  const char* argv_zero[] = {"collx-perf", "allreduce", "-b", "0", "-e", "16", "-f", "2", "-d", "double"};
  CHECK(parse_options(10, const_cast<char**>(argv_zero), 2).sizes() == std::vector<std::size_t>{0, 8, 16});
  options o;
  o.min_bytes = std::size_t{1} << 62;
  o.max_bytes = ~std::size_t{0};
  o.step_factor = 1024;  // 2^72 does not fit: the sweep ends instead of casting it
  CHECK(o.sizes() == std::vector<std::size_t>{std::size_t{1} << 62});
}

TEST_CASE("launcher check: a world the launcher did not start is named, for both MPI launchers' variables") {
  // Built against one MPI, started by the other's mpirun: every process is rank 0 of a world of 1.
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
  CHECK(collx_perf::launcher_size_mismatch(1, "mpi-perf").empty());  // no launcher: nothing to compare
  ::setenv("PMI_SIZE", "2", 1);
  CHECK(collx_perf::launcher_size_mismatch(2, "mpi-perf").empty());
  CHECK(collx_perf::launcher_size_mismatch(1, "mpi-perf") ==
        "the launcher started 2 ranks but MPI_COMM_WORLD has 1: start mpi-perf with the mpirun of the MPI it was built with");
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);  // Open MPI's, where both are set
  CHECK(collx_perf::launcher_size_mismatch(2, "collx-perf").find("started 4 ranks but MPI_COMM_WORLD has 2: start collx-perf") !=
        std::string::npos);
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("PMI_SIZE");
}
