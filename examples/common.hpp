// Helpers shared by collx's workload examples (train_digits, reductions, fsdp, tensor_parallel,
// pipeline, heat_halo, moe_dispatch, and gpu_moments on GPUs): command-line options, starting the ranks, checksums, checks.
//
// Every example runs the same way:
//   - under a launcher (collx-run -n N prog, mpirun, torchrun, srun): this process is one rank and
//     connects to the others over shared memory (collx::connect_shm_from_environment);
//   - otherwise it starts its own ranks: `prog --ranks N` forks N local processes with
//     collx::run_processes (default: the example's own rank count), so ctest needs no launcher.
// The exit status is 0 only if every rank's checks passed (skipped_exit_code where they skipped).
#pragma once

#include <collx/collx.hpp>
#include <collx/launch.hpp>
#include <collx/transport/shm.hpp>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace collx_examples {

/// The most ranks an example starts with --ranks: collx-run's limit for -n (tools/collx-run.cpp).
inline constexpr int max_ranks = 4096;

/// `--name value` and `--flag` options; anything else is an error (exit status 2, with the usage).
class options {
 public:
  /// Reads argv[1..]. With -h or --help, the get/has calls only note each option and its default,
  /// and reject_unknown prints "usage: PROGRAM usage" and those options, then exits 0.
  options(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    program_ = argc > 0 ? argv[0] : "example";
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        help_ = true;
        items_.clear();
        return;
      }
      if (a.rfind("--", 0) != 0) fail("unexpected argument '" + a + "'");
      const auto eq = a.find('=');
      if (eq != std::string::npos) {
        items_.push_back({a.substr(0, eq), a.substr(eq + 1)});
      } else if (i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0) {
        items_.push_back({a, argv[++i]});
      } else {
        items_.push_back({a, ""});
      }
    }
  }
  /// The value of --name (which must then have one), or `def` if the option is absent.
  std::string get(const std::string& name, const std::string& def) const {
    used_.push_back(name);
    note(name, def.empty() ? "a value; none by default" : "default " + def);
    for (auto it = items_.rbegin(); it != items_.rend(); ++it)
      if (it->first == name) {
        if (it->second.empty()) fail(name + " needs a value");
        return it->second;
      }
    return def;
  }
  /// The integer value of --name in [lo, hi] (decimal), or `def` if the option is absent. Anything
  /// else (not a number, white space, out of range) fails with exit status 2, naming the option and
  /// the range; `why`, if given, says where the range comes from.
  long long get_int(const std::string& name, long long def, long long lo, long long hi, const std::string& why = "") const {
    const std::string v = get(name, "");
    note(name, "an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + (why.empty() ? "" : " (" + why + ")") +
                   ", default " + std::to_string(def));
    if (v.empty()) return def;
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    // strtoll would skip leading white space; the range check also catches ERANGE's clamped values.
    if (std::isspace(static_cast<unsigned char>(v[0])) || *end != '\0' || errno == ERANGE || x < lo || x > hi)
      fail(name + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
           (why.empty() ? "" : " (" + why + ")") + ", got '" + v + "'");
    return x;
  }
  /// --ranks: how many processes to start, 0 if absent (the example's default, or the launcher's
  /// world size). At most `max`: by default collx-run's -n limit, so that `prog --ranks N` takes
  /// the N that `collx-run -n N prog` takes; an example with fewer possible ranks passes its own
  /// limit and the reason.
  int get_ranks(int max = max_ranks, const std::string& why = "collx-run's -n limit") const {
    const int ranks = static_cast<int>(get_int("--ranks", 0, 1, max, why));
    note("--ranks", "processes to start, 1 to " + std::to_string(max) + " (" + why +
                        "); by default the launcher's ranks (collx-run -n N), else the example's own number");
    return ranks;
  }
  /// The number value of --name in [lo, hi] (decimal), or `def` if the option is absent; anything
  /// else (not a number, inf, nan, white space, out of range) fails with exit status 2.
  double get_double(const std::string& name, double def, double lo, double hi) const {
    const std::string v = get(name, "");
    char range[64], fallback[32];
    std::snprintf(range, sizeof range, "from %g to %g", lo, hi);
    std::snprintf(fallback, sizeof fallback, "%g", def);
    note(name, std::string("a number ") + range + ", default " + fallback);
    if (v.empty()) return def;
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    // !(x >= lo && x <= hi) is also true for nan.
    if (std::isspace(static_cast<unsigned char>(v[0])) || *end != '\0' || !(x >= lo && x <= hi))
      fail(name + " must be a number " + range + ", got '" + v + "'");
    return x;
  }
  /// True if the flag --name was given. A flag takes no value: `--periodic 0` is an error, not
  /// periodic boundaries turned on by a word that reads as "off".
  bool has(const std::string& name) const {
    used_.push_back(name);
    note(name, "a flag, off by default");
    bool given = false;
    for (const auto& it : items_)
      if (it.first == name) {
        if (!it.second.empty()) fail(name + " is a flag and takes no value, got '" + it.second + "'");
        given = true;
      }
    return given;
  }
  /// Fails on options that no get()/has() asked for (call after reading them all). After -h or
  /// --help: prints the usage and every option read, with its default, and exits 0.
  void reject_unknown() const {
    if (help_) {
      std::printf("usage: %s %s\n", program_.c_str(), usage_.c_str());
      for (const auto& [name, what] : help_lines_) std::printf("  %-16s %s\n", name.c_str(), what.c_str());
      std::exit(0);
    }
    for (const auto& it : items_) {
      bool known = false;
      for (const auto& u : used_) known = known || u == it.first;
      if (!known) fail("unknown option " + it.first);
    }
  }
  /// Prints `why` and the usage to stderr and exits with status 2 (a bad command line).
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\n", program_.c_str(), why.c_str(), program_.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  /// Under --help, what `name` takes (the last word on it wins: get_int's over get's).
  void note(const std::string& name, std::string what) const {
    if (!help_) return;
    for (auto& line : help_lines_)
      if (line.first == name) {
        line.second = std::move(what);
        return;
      }
    help_lines_.push_back({name, std::move(what)});
  }

  std::string program_, usage_;
  bool help_ = false;
  std::vector<std::pair<std::string, std::string>> items_;
  mutable std::vector<std::string> used_;
  mutable std::vector<std::pair<std::string, std::string>> help_lines_;
};

/// True when a launcher started this process as one rank of a job (collx-run, torchrun, Open
/// MPI, MPICH, or Slurm inside a job step: collx::bootstrap::launcher_in_environment).
inline bool started_by_launcher() { return collx::bootstrap::launcher_in_environment().has_value(); }

/// The exit status of a rank that skips its work and has said why (ctest's SKIP_RETURN_CODE).
inline constexpr int skipped_exit_code = 77;

/// Runs fn(comm) -> int (0: this rank's checks passed) on every rank, and returns main's exit status.
/// Under a launcher this process is one rank (collx::joins_launched_job); otherwise `ranks`
/// processes are forked (`ranks` < 1: the example's default). A rank that throws prints the error
/// and fails; one that returns skipped_exit_code makes the job's status that, unless another rank
/// failed.
template <class F>
int run_ranks(int ranks, F&& fn) {
  auto guarded = [&](collx::communicator& comm) -> int {
    try {
      return fn(comm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: error: %s\n", comm.rank(), e.what());
      return 1;
    }
  };
  try {
    if (collx::joins_launched_job(ranks)) {
      collx::communicator comm = collx::connect_shm_from_environment();
      if (ranks > 0 && ranks != comm.size()) {
        std::fprintf(stderr, "--ranks %d contradicts the launcher's world size %d\n", ranks, comm.size());
        return 2;
      }
      const int code = guarded(comm);
      std::fflush(nullptr);
      return code;
    }
    const auto exits = collx::run_processes(ranks, guarded);
    int code = 0;
    for (const auto& e : exits) {
      if (e.ok()) continue;
      if (e.exit_code == skipped_exit_code && !e.term_signal) {  // said why itself (no GPU, say)
        if (!code) code = skipped_exit_code;
        continue;
      }
      if (e.term_signal) std::fprintf(stderr, "rank %d (pid %d) killed by signal %d\n", e.rank, int(e.pid), e.term_signal);
      else std::fprintf(stderr, "rank %d (pid %d) exited with status %d\n", e.rank, int(e.pid), e.exit_code);
      if (!code || code == skipped_exit_code) code = e.term_signal ? 128 + e.term_signal : e.exit_code;  // a failure wins over a skip
    }
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

/// FNV-1a over the bytes of a vector of trivially copyable values: equal iff bit-identical (for
/// practical purposes); printed so that runs can be compared by eye.
template <class T>
std::uint64_t fnv1a(std::span<const T> v) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/// True when a and b hold the same bits.
template <class T>
bool same_bits(std::span<const T> a, std::span<const T> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

/// Largest |a[i] - b[i]|.
template <class T>
double max_abs_diff(std::span<const T> a, std::span<const T> b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    m = d < 0 ? (-d > m ? -d : m) : (d > m ? d : m);
  }
  return m;
}

/// splitmix64: a small, fast, portable generator (the same numbers on every platform, unlike the
/// distributions of <random>), so every rank and every run builds the same data.
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1), 24 random bits (exact in float).
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

/// Block `part` of `count` items cut into `parts` nearly equal contiguous blocks (the first
/// count % parts blocks are one longer): [first, first + size).
struct block {
  std::size_t first, size;
};
inline block split(std::size_t count, int parts, int part) {
  const std::size_t p = static_cast<std::size_t>(parts), i = static_cast<std::size_t>(part);
  const std::size_t base = count / p, extra = count % p;
  return {i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}
/// The sizes of all blocks of split(count, parts, .), for the *_v collectives.
inline std::vector<std::size_t> split_counts(std::size_t count, int parts) {
  std::vector<std::size_t> c;
  for (int i = 0; i < parts; ++i) c.push_back(split(count, parts, i).size);
  return c;
}

/// Seconds since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Counts failed checks; prints each one (with the rank) as it happens.
struct checker {
  int rank = 0;
  int failures = 0;
  bool operator()(bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "rank %d: CHECK FAILED: %s\n", rank, what.c_str());
    }
    return ok;
  }
  /// Combines every rank's failures (sum over ranks) so that all ranks agree on the outcome.
  int total(collx::communicator& comm) {
    int f = failures;
    collx::allreduce(comm, std::span<int>(&f, 1));
    return f;
  }
};

}  // namespace collx_examples
