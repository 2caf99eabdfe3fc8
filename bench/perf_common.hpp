/// @file bench/perf_common.hpp
/// The harness shared by collx-perf (bench/collx_perf.cpp) and the MPI peers (bench/peers/mpi_perf.cpp):
/// command line, sizes, data, the reference every result is checked against, the timing loop, and
/// nccl-tests' output format (plus JSON and CSV). Both drivers run exactly this code; they differ
/// only in the "backend" that performs one call, a barrier and the reductions of timings and error
/// counts.
///
/// Timing rules (identical for every backend):
///   for each size, out-of-place then in-place:
///     fill the buffers (outside the timed region), run -w warm-up calls, barrier,
///     t0, -n calls (blocking, or started back to back and waited once with -z 0), t1;
///     time = (t1 - t0) / n on each rank, then averaged over ranks (-a 1, the default; -a 0 rank 0,
///     -a 2 min, -a 3 max);
///     with -c 1: refill, one more call, compare every element with the reference (#wrong = number of
///     elements that differ, summed over ranks).
///   Buffers are allocated once, for the largest size, page aligned and touched before the sweep
///   (as nccl-tests allocates once), so the harness itself never maps or unmaps memory while timing.
///
/// Data: element i of rank r's send vector is gen(r, i), a small integer (so that every fold is exact
/// in every type and order), different per rank and per index; prod uses +-1 (floats) so that
/// repeated in-place products never leave the normal range (denormals would slow the CPU down).
/// The reference folds gen over ranks with collx's documented semantics (integers wrap, narrow
/// floats accumulate in fp32, avg = sum / n in the accumulator type, truncating for integers); it
/// calls no communication library.
#pragma once

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <collx/detail/c_locale.hpp>

#include <collx/numeric.hpp>  // collx::half, collx::bfloat16 (header-only, no other dependency)

#include "perf_math.hpp"

namespace collx_perf {

// ---------------------------------------------------------------------------------------------
// Element types and ops (nccl-tests' names)

enum class dtype { int8, uint8, int32, uint32, int64, uint64, half, float32, float64, bfloat16 };
inline constexpr dtype all_dtypes[] = {dtype::int8,   dtype::uint8, dtype::int32,   dtype::uint32,  dtype::int64,
                                       dtype::uint64, dtype::half,  dtype::float32, dtype::float64, dtype::bfloat16};

constexpr std::string_view dtype_name(dtype d) noexcept {
  switch (d) {
    case dtype::int8: return "int8";
    case dtype::uint8: return "uint8";
    case dtype::int32: return "int32";
    case dtype::uint32: return "uint32";
    case dtype::int64: return "int64";
    case dtype::uint64: return "uint64";
    case dtype::half: return "half";
    case dtype::float32: return "float";
    case dtype::float64: return "double";
    case dtype::bfloat16: return "bfloat16";
  }
  return "?";
}

inline std::optional<dtype> parse_dtype(std::string_view s) {
  for (dtype d : all_dtypes)
    if (s == dtype_name(d)) return d;
  // Aliases nccl-tests accepts.
  if (s == "char") return dtype::int8;
  if (s == "int") return dtype::int32;
  if (s == "fp16" || s == "float16") return dtype::half;
  if (s == "fp32" || s == "float32") return dtype::float32;
  if (s == "fp64" || s == "float64") return dtype::float64;
  if (s == "bf16") return dtype::bfloat16;
  return std::nullopt;
}

template <class T>
struct type_tag {
  using type = T;
};

/// Calls f(type_tag<T>{}) for the C++ type of d.
template <class F>
decltype(auto) with_type(dtype d, F&& f) {
  switch (d) {
    case dtype::int8: return f(type_tag<std::int8_t>{});
    case dtype::uint8: return f(type_tag<std::uint8_t>{});
    case dtype::int32: return f(type_tag<std::int32_t>{});
    case dtype::uint32: return f(type_tag<std::uint32_t>{});
    case dtype::int64: return f(type_tag<std::int64_t>{});
    case dtype::uint64: return f(type_tag<std::uint64_t>{});
    case dtype::half: return f(type_tag<collx::half>{});
    case dtype::float32: return f(type_tag<float>{});
    case dtype::float64: return f(type_tag<double>{});
    case dtype::bfloat16: return f(type_tag<collx::bfloat16>{});
  }
  throw std::logic_error("bad dtype");
}

enum class redop { sum, prod, max, min, avg };
inline constexpr redop all_redops[] = {redop::sum, redop::prod, redop::max, redop::min, redop::avg};

constexpr std::string_view redop_name(redop o) noexcept {
  switch (o) {
    case redop::sum: return "sum";
    case redop::prod: return "prod";
    case redop::max: return "max";
    case redop::min: return "min";
    case redop::avg: return "avg";
  }
  return "?";
}

inline std::optional<redop> parse_redop(std::string_view s) {
  for (redop o : all_redops)
    if (s == redop_name(o)) return o;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Command line

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Bytes with nccl-tests' suffixes: 8, 64K, 4M, 1G (powers of 1024).
inline std::size_t parse_bytes(const std::string& flag, const std::string& v) {
  if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0]))) throw usage_error(flag + ": not a size: '" + v + "'");
  char* end = nullptr;
  errno = 0;
  const unsigned long long base = std::strtoull(v.c_str(), &end, 10);
  std::string suf(end);
  for (char& c : suf) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned long long mult = 1;
  if (suf.empty() || suf == "B") mult = 1;
  else if (suf == "K" || suf == "KB" || suf == "KIB") mult = 1ull << 10;
  else if (suf == "M" || suf == "MB" || suf == "MIB") mult = 1ull << 20;
  else if (suf == "G" || suf == "GB" || suf == "GIB") mult = 1ull << 30;
  else throw usage_error(flag + ": not a size: '" + v + "' (use 8, 64K, 4M, 1G)");
  if (errno == ERANGE || base > ~0ull / mult) throw usage_error(flag + ": size too large: '" + v + "'");
  return static_cast<std::size_t>(base * mult);
}

/// A decimal integer in [lo, hi]; anything else (white space included) is a usage_error naming the flag.
inline long long parse_integer(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  // strtoll skips leading white space; the other tests catch the rest.
  if (v.empty() || std::isspace(static_cast<unsigned char>(v[0])) || *end || errno == ERANGE || x < lo || x > hi)
    throw usage_error(flag + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                      v + "'");
  return x;
}

/// Every option of both drivers. Defaults are nccl-tests' except -z (bench/README.md, "Where it
/// differs from nccl-tests": blocking calls are the natural form of a CPU library; -z 0 starts the
/// -n calls back to back and waits once).
struct options {
  coll collective = coll::allreduce;
  std::size_t min_bytes = 32u << 20, max_bytes = 32u << 20;
  std::size_t step_bytes = 1u << 20;  ///< -i
  double step_factor = 1;             ///< -f (> 1: multiply; 1: add -i)
  int iters = 20, warmup = 5;
  int check = 1;
  dtype type = dtype::float32;
  redop op = redop::sum;
  int root = 0;
  int blocking = 1;
  int average = 1;  ///< -a: 0 rank 0, 1 mean, 2 min, 3 max
  int registered = 0;  ///< -R 1: buffers the library registers (collx: collx::shm_buffer)
  // collx-perf's own
  std::string algo = "auto";       ///< ring | tree | direct | hierarchical | auto
  std::string transport = "shm";   ///< threads | shm | mpi (when built with collx::mpi)
  int ranks = 0;                   ///< --ranks N (0: from the launcher, else 1)
  std::string bind;                ///< --bind none|core: core pins rank i to the i-th allowed CPU; "": the launcher's
  std::string json_path, csv_path;
  std::string label;               ///< --label: a name for this run in the JSON/CSV (default: the library)
  bool algo_given = false, transport_given = false;

  /// Whether any of collx-perf's own options (--algo, --transport, --ranks, --bind) was given:
  /// the MPI peers refuse them.
  bool collx_options_given() const { return algo_given || transport_given || ranks != 0 || !bind.empty(); }

  /// The sweep: min, then *factor (at least one element more: 8 * 1.1 and 0 * 2 would not grow, and
  /// a smaller step repeats the row) or +increment, up to max.
  std::vector<std::size_t> sizes() const {
    const std::size_t element = with_type(type, [](auto tag) { return sizeof(typename decltype(tag)::type); });
    std::vector<std::size_t> v;
    for (std::size_t s = min_bytes; s <= max_bytes;) {
      v.push_back(s);
      const double grown = static_cast<double>(s) * step_factor;
      if (step_factor > 1 && grown >= 0x1p64) break;  // past size_t: never cast
      const std::size_t next = step_factor > 1 ? std::max(s + element, static_cast<std::size_t>(grown)) : s + step_bytes;
      if (next <= s) break;  // -i 0, or a wrap past size_t
      s = next;
    }
    return v;
  }
};

/// Under an MPI launcher: "" when the world MPI_COMM_WORLD gives (`world_size`) is the one the
/// launcher started (OMPI_COMM_WORLD_SIZE, else PMI_SIZE, where set), else why not, for `program`:
/// a binary built against one MPI and started by the other's mpirun runs as N jobs of 1 rank each.
inline std::string launcher_size_mismatch(int world_size, const std::string& program) {
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE") ? std::getenv("OMPI_COMM_WORLD_SIZE") : std::getenv("PMI_SIZE");
  if (!launched || std::atoi(launched) == world_size) return "";
  return "the launcher started " + std::string(launched) + " ranks but MPI_COMM_WORLD has " + std::to_string(world_size) +
         ": start " + program + " with the mpirun of the MPI it was built with";
}

/// Whether `path` can be written: an existing file (not a directory) writable, or a new one in a
/// writable directory.
inline bool writable_path(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;  // a directory is not a file to write
  if (::access(path.c_str(), F_OK) == 0) return ::access(path.c_str(), W_OK) == 0;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return ::access(dir.c_str(), W_OK | X_OK) == 0;
}

inline const char* common_usage =
    "  -b, --minbytes SIZE      smallest size, bytes (K, M, G suffixes; default 32M)\n"
    "  -e, --maxbytes SIZE      largest size (default 32M)\n"
    "  -f, --stepfactor F       multiply the size by F between steps (1 <= F <= 1024; 1: add -i)\n"
    "  -i, --stepbytes SIZE     else add SIZE between steps (default 1M)\n"
    "  -n, --iters N            timed calls per size (default 20)\n"
    "  -w, --warmup_iters N     untimed calls before each size (default 5)\n"
    "  -c, --check 0|1          after each size's timed calls, check one more call's result (made as\n"
    "                           the timed ones: with -z 0 through the progress thread) against an\n"
    "                           independent reference (default 1)\n"
    "  -d, --datatype T         int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 (default float)\n"
    "  -o, --op OP              sum prod max min avg (default sum)\n"
    "  -r, --root R             root of broadcast and reduce (default 0)\n"
    "  -z, --blocking 0|1       1: blocking calls (default); 0: start the -n calls back to back, wait once\n"
    "  -a, --average 0|1|2|3    time reported: rank 0's, mean (default), min or max over ranks\n"
    "  -R, --local_register 0|1 1: buffers registered with the library (collx: collx::shm_buffer, shm only)\n"
    "      --json FILE          also write the results as JSON\n"
    "      --csv FILE           also write the results as CSV\n"
    "      --label NAME         the name of this run in JSON/CSV (default: the library)\n";

/// Parses argv[first..]; driver-specific options are rejected by the driver after parsing.
inline options parse_options(int argc, char** argv, int first) {
  options o;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i], v;
    bool has_v = false;
    // --name=value, -bVALUE
    if (a.rfind("--", 0) == 0) {
      if (const auto eq = a.find('='); eq != std::string::npos) v = a.substr(eq + 1), a = a.substr(0, eq), has_v = true;
    } else if (a.size() > 2 && a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1]))) {
      v = a.substr(2), a = a.substr(0, 2), has_v = true;
    }
    auto value = [&]() -> std::string {
      if (has_v) return v;
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      return argv[++i];
    };
    auto is = [&](const char* s, const char* l) { return a == s || a == l; };
    if (is("-b", "--minbytes")) o.min_bytes = parse_bytes(a, value());
    else if (is("-e", "--maxbytes")) o.max_bytes = parse_bytes(a, value());
    else if (is("-i", "--stepbytes")) o.step_bytes = parse_bytes(a, value());
    else if (is("-f", "--stepfactor")) {
      const std::string s = value();
      char* end = nullptr;
      o.step_factor = collx::detail::strtod_c(s.c_str(), &end);
      // 1 (the default) adds -i, as in nccl-tests; !(...) also catches nan.
      if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])) || *end || !(o.step_factor >= 1 && o.step_factor <= 1024))
        throw usage_error(a + ": expected a factor F with 1 <= F <= 1024 (1: add -i instead), got '" + s + "'");
    } else if (is("-n", "--iters")) o.iters = static_cast<int>(parse_integer(a, value(), 1, 1 << 30));
    else if (is("-w", "--warmup_iters")) o.warmup = static_cast<int>(parse_integer(a, value(), 0, 1 << 30));
    else if (is("-c", "--check")) o.check = static_cast<int>(parse_integer(a, value(), 0, 1));
    else if (is("-d", "--datatype")) {
      const std::string s = value();
      const auto d = parse_dtype(s);
      if (!d) throw usage_error("-d: unknown type '" + s + "' (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16)");
      o.type = *d;
    } else if (is("-o", "--op")) {
      const std::string s = value();
      const auto r = parse_redop(s);
      if (!r) throw usage_error("-o: unknown op '" + s + "' (sum prod max min avg)");
      o.op = *r;
    } else if (is("-r", "--root")) o.root = static_cast<int>(parse_integer(a, value(), 0, 1 << 24));
    else if (is("-z", "--blocking")) o.blocking = static_cast<int>(parse_integer(a, value(), 0, 1));
    else if (is("-a", "--average")) o.average = static_cast<int>(parse_integer(a, value(), 0, 3));
    else if (a == "--json") o.json_path = value();
    else if (a == "--csv") o.csv_path = value();
    else if (a == "--label") o.label = value();
    else if (a == "--algo") {
      o.algo = value();
      o.algo_given = true;
      if (o.algo == "automatic") o.algo = "auto";
      if (o.algo != "ring" && o.algo != "tree" && o.algo != "direct" && o.algo != "auto" && o.algo != "hierarchical")
        throw usage_error("--algo: expected ring, tree, direct, hierarchical or auto, got '" + o.algo + "'");
    } else if (a == "--transport") {
      o.transport = value();
      o.transport_given = true;
    } else if (a == "--ranks" || a == "--np") o.ranks = static_cast<int>(parse_integer(a, value(), 1, 4096));
    else if (a == "--bind") {
      o.bind = value();
      if (o.bind != "none" && o.bind != "core") throw usage_error("--bind: expected none or core, got '" + o.bind + "'");
    }
    // nccl-tests options that have no meaning here: accepted at their neutral value only.
    else if (is("-t", "--nthreads") || is("-g", "--ngpus")) {
      const std::string s = value();
      if (s != "1")
        throw usage_error(a + " " + s + ": not applicable (one rank per process or thread: collx-perf --ranks N" +
                          (a == "-t" || a == "--nthreads" ? " [--transport threads]" : "") + ", mpi-perf under mpirun -np N)");
    } else if (is("-m", "--agg_iters")) {
      const std::string s = value();
      if (s != "1")
        throw usage_error(a + " " + s + ": not applicable (nccl-tests groups that many calls into one NCCL group; "
                          "here each timed call is one collective: use -z 0 to start them back to back)");
    } else if (is("-R", "--local_register")) {
      o.registered = static_cast<int>(parse_integer(a, value(), 0, 1));
    } else if (is("-G", "--cudagraph") || is("-y", "--stream_null") || is("-p", "--parallel_init") ||
               is("-C", "--report_cputime")) {
      const std::string s = value();
      if (s != "0") throw usage_error(a + " " + s + ": a GPU option, not applicable to this benchmark");
    } else if (a == "-T" || a == "--timeout") {
      (void)parse_integer(a, value(), 0, std::numeric_limits<int>::max());  // nccl-tests' seconds; collx: COLLX_TIMEOUT; MPI: none
    } else throw usage_error("unknown option '" + a + "'");
  }
  if (o.min_bytes > o.max_bytes) throw usage_error("-b is larger than -e");
  // A size near 2^64 wrapped the buffer arithmetic into a 4 KiB allocation (and a crash).
  constexpr std::size_t most_bytes = std::size_t{1} << 50;
  if (o.max_bytes > most_bytes) throw usage_error("-e " + std::to_string(o.max_bytes) + ": more than 1 PiB per buffer");
  if (o.step_factor <= 1 && o.step_bytes == 0 && o.min_bytes < o.max_bytes)
    throw usage_error("-i 0: the sweep would never grow from -b to -e (give -i above 0, or -f above 1)");
  // Before the run, not after it: a long sweep must not end without its results file. (Looked at,
  // not created: every rank parses the options, and a later usage error leaves nothing behind.)
  for (const std::string* path : {&o.json_path, &o.csv_path})
    if (!path->empty() && !writable_path(*path)) throw usage_error("cannot write " + *path);
  // The CSV, written second, would replace the JSON. (The same name, not the same file: a second
  // name for it, a link, is not looked for.)
  if (!o.json_path.empty() && o.json_path == o.csv_path)
    throw usage_error("--json and --csv name the same file, " + o.json_path + ": the CSV would replace the JSON");
  // Caught here rather than when the sweep allocates (which failed with exit status 1, not 2).
  if (o.registered && o.transport != "shm")
    throw usage_error("-R 1: registered buffers are collx::shm_buffer, shared memory between processes; they need "
                      "--transport shm (the default), not " + o.transport);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Data and the reference

/// How values of T are built and compared: arithmetic types directly, narrow floats through float.
template <class T>
struct value_traits {
  static constexpr bool narrow = collx::is_narrow_float_v<T>;
  static constexpr bool floating = std::is_floating_point_v<T> || narrow;
  static constexpr bool is_unsigned = std::is_unsigned_v<T>;
  static T from_int(long long v) {
    if constexpr (narrow) return T(static_cast<float>(v));
    else return static_cast<T>(v);
  }
};

/// A cheap, well-mixed hash of (rank, index).
inline std::uint64_t mix(int rank, std::size_t i) noexcept {
  std::uint64_t x = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(rank + 1) * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

/// Element i of rank r's input (see the file comment for the value ranges).
template <class T>
T gen(int rank, std::size_t i, redop op) {
  using vt = value_traits<T>;
  const std::uint64_t h = mix(rank, i);
  long long v;
  if (op == redop::prod) {
    if constexpr (vt::floating) v = (h & 1) ? 1 : -1;
    else if constexpr (vt::is_unsigned) v = static_cast<long long>(h % 5) + 1;
    else v = static_cast<long long>(h % 9) - 4, v = v ? v : 3;
  } else {
    v = vt::is_unsigned ? static_cast<long long>(h % 11) : static_cast<long long>(h % 11) - 5;
  }
  return vt::from_int(v);
}

/// op folded over ranks 0..n-1 of value(k), with collx's semantics (see ops.hpp).
template <class T, class V>
T fold(redop op, int n, V value) {
  using vt = value_traits<T>;
  if constexpr (vt::floating) {
    // Every value is a small integer or +-1: the exact result fits a double, whatever the order.
    auto to_double = [](const T& v) -> double {
      if constexpr (vt::narrow) return static_cast<double>(static_cast<float>(v));
      else return static_cast<double>(v);
    };
    double acc = to_double(value(0));
    for (int k = 1; k < n; ++k) {
      const double x = to_double(value(k));
      switch (op) {
        case redop::sum:
        case redop::avg: acc += x; break;
        case redop::prod: acc *= x; break;
        case redop::max: acc = std::max(acc, x); break;
        case redop::min: acc = std::min(acc, x); break;
      }
    }
    // Divide in the accumulator type (fp32 for half, bfloat16 and float; double for double), round once.
    using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
    acc_t r = static_cast<acc_t>(acc);
    if (op == redop::avg) r = r / static_cast<acc_t>(n);
    if constexpr (vt::narrow) return T(static_cast<float>(r));
    else return static_cast<T>(r);
  } else {
    // Integers: wrap modulo 2^bits (unsigned arithmetic), avg truncates toward zero.
    using U = std::make_unsigned_t<T>;
    U acc = static_cast<U>(value(0));
    T m = value(0);
    for (int k = 1; k < n; ++k) {
      const T x = value(k);
      switch (op) {
        case redop::sum:
        case redop::avg: acc = static_cast<U>(acc + static_cast<U>(x)); break;
        case redop::prod: acc = static_cast<U>(static_cast<std::uint64_t>(acc) * static_cast<std::uint64_t>(static_cast<U>(x))); break;
        case redop::max: m = std::max(m, x); break;
        case redop::min: m = std::min(m, x); break;
      }
    }
    if (op == redop::max || op == redop::min) return m;
    T r = static_cast<T>(acc);
    if (op == redop::avg) {
      if constexpr (std::is_signed_v<T>) r = static_cast<T>(static_cast<long long>(r) / n);
      else r = static_cast<T>(static_cast<unsigned long long>(r) / static_cast<unsigned long long>(n));
    }
    return r;
  }
}

template <class T>
bool same_bits(const T& a, const T& b) noexcept {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// One call's buffers and shape, as the timing loop hands them to a backend.
template <class T>
struct call_args {
  coll c = coll::allreduce;
  redop op = redop::sum;
  call_counts k;
  int root = 0;
  bool in_place = false;
  const T* send = nullptr;  ///< this rank's send buffer (in place: inside recv's allocation)
  T* recv = nullptr;        ///< this rank's recv buffer
  T* base = nullptr;        ///< in place: the start of the shared allocation (recvbuf)
};

/// Fills the buffers of `a` for a checked (or in-place) run: the send data, and a sentinel where
/// results will land.
template <class T>
void fill_for_run(const call_args<T>& a, int rank, int n, T* sendbuf, T* recvbuf, std::size_t cap) {
  const std::uint8_t sentinel = 0xA5;
  if (!a.in_place) {
    std::memset(static_cast<void*>(recvbuf), sentinel, std::min(cap, std::max(a.k.recv_count, a.k.send_count)) * sizeof(T));
    (void)sendbuf;  // the send buffer holds gen() for the largest size since start-up, never written
    return;
  }
  std::memset(static_cast<void*>(recvbuf), sentinel, std::min(cap, std::max(a.k.recv_count, a.k.send_count)) * sizeof(T));
  T* s = const_cast<T*>(a.send);
  for (std::size_t i = 0; i < a.k.send_count; ++i) s[i] = gen<T>(rank, i, a.op);
  (void)n;
}

/// Number of elements of `result` (what this rank got) that differ from the reference.
template <class T>
std::uint64_t count_wrong(const call_args<T>& a, const T* result, int rank, int n) {
  const call_counts& k = a.k;
  std::uint64_t wrong = 0;
  auto expect = [&](std::size_t j, T e) {
    if (!same_bits(result[j], e)) ++wrong;
  };
  switch (a.c) {
    case coll::allreduce:
      for (std::size_t i = 0; i < k.recv_count; ++i) expect(i, fold<T>(a.op, n, [&](int r) { return gen<T>(r, i, a.op); }));
      break;
    case coll::reduce:
      if (rank == a.root)
        for (std::size_t i = 0; i < k.recv_count; ++i) expect(i, fold<T>(a.op, n, [&](int r) { return gen<T>(r, i, a.op); }));
      break;
    case coll::reduce_scatter:
      for (std::size_t j = 0; j < k.recv_count; ++j) {
        const std::size_t i = static_cast<std::size_t>(rank) * k.recv_count + j;
        expect(j, fold<T>(a.op, n, [&](int r) { return gen<T>(r, i, a.op); }));
      }
      break;
    case coll::all_gather:
      for (int c = 0; c < n; ++c)
        for (std::size_t j = 0; j < k.send_count; ++j)
          expect(static_cast<std::size_t>(c) * k.send_count + j, gen<T>(c, j, a.op));
      break;
    case coll::broadcast:
      for (std::size_t i = 0; i < k.recv_count; ++i) expect(i, gen<T>(a.root, i, a.op));
      break;
    case coll::all_to_all:
      for (int c = 0; c < n; ++c)
        for (std::size_t j = 0; j < k.param_count; ++j)
          expect(static_cast<std::size_t>(c) * k.param_count + j,
                 gen<T>(c, static_cast<std::size_t>(rank) * k.param_count + j, a.op));
      break;
    case coll::sendrecv:
      for (std::size_t i = 0; i < k.recv_count; ++i) expect(i, gen<T>((rank - 1 + n) % n, i, a.op));
      break;
  }
  return wrong;
}

/// Whether nccl-tests' in-place column exists for c here: collx's all_to_all is never in place and a
/// point-to-point exchange cannot be in place; both drivers print N/A for them.
constexpr bool has_in_place(coll c) noexcept { return c != coll::all_to_all && c != coll::sendrecv; }

// ---------------------------------------------------------------------------------------------
// Machine description and output

struct machine_info {
  std::string hostname, cpu_model;
  unsigned cores = 0;
  std::string compiler;
};

inline machine_info describe_machine() {
  machine_info m;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) m.cpu_model = line.substr(line.find_first_not_of(' ', c + 1));
      break;
    }
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown CPU";
  m.cores = std::max(1u, std::thread::hardware_concurrency());
#if defined(__clang__)
  m.compiler = std::string("clang++ ") + __clang_version__;
#elif defined(__GNUC__)
  m.compiler = std::string("g++ ") + __VERSION__;
#else
  m.compiler = "unknown compiler";
#endif
  return m;
}

/// CPUs this process may run on, as "0,1" (shows a launcher's binding).
inline std::string affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::string s;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      if (!s.empty()) s += ',';
      s += std::to_string(c);
    }
  return s;
}

/// Pins the calling thread to the (index mod count)-th CPU it may run on (what mpirun's default
/// --bind-to core does for rank `index`). Returns the CPU, or -1.
inline int bind_to_core(int index) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) return -1;
  const int cpu = cpus[static_cast<std::size_t>(index) % cpus.size()];
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0 ? cpu : -1;
}

/// The glibc malloc tunables in the environment (bench/compare runs the MPI peers with and without).
inline std::string malloc_env_note() {
  std::string s = "glibc malloc:";
  bool any = false;
  for (const char* v : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
    if (const char* x = std::getenv(v)) s += std::string(" ") + v + "=" + x, any = true;
  return any ? s : s + " defaults (no MALLOC_* variables)";
}

/// One placement's measurement.
struct measurement {
  bool valid = false;  ///< false: N/A
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = -1;  ///< -1: not checked
};

struct row {
  std::size_t size = 0, count = 0;
  std::string type, redop, algorithm;
  int root = -1;
  measurement oop, ip;
};

/// What the header says about the run (filled by the driver).
struct run_info {
  std::string tool;        ///< "collx-perf", "mpi-perf"
  std::string library;     ///< "collx 0.1.0", "Open MPI v4.1.4", ...
  std::string transport;   ///< "shm (single-copy: on)", "threads", "MPI"
  std::string algorithm;   ///< as requested, and what it resolves to
  std::string launcher;    ///< how the ranks were started
  std::vector<std::string> notes;  ///< extra header lines
  int ranks = 1;
  machine_info machine;
};

inline std::string time_str(double us) {
  char b[32];
  if (us >= 10000.0) std::snprintf(b, sizeof b, "%7.0f", us);
  else if (us >= 100.0) std::snprintf(b, sizeof b, "%7.1f", us);
  else std::snprintf(b, sizeof b, "%7.2f", us);
  return b;
}

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else o += c;
  }
  return o;
}

/// Prints nccl-tests' table on rank 0 as rows come, and writes JSON/CSV at the end.
class reporter {
 public:
  reporter(const options& o, run_info info, bool printer) : o_(o), info_(std::move(info)), print_(printer) {}

  void header() {
    if (!print_) return;
    const auto& m = info_.machine;
    std::printf("# %s %s: nccl-tests-compatible benchmark\n", info_.tool.c_str(), std::string(coll_name(o_.collective)).c_str());
    if (o_.step_factor > 1)
      std::printf("# nRanks %d minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d agg iters: 1 "
                  "validation: %d blocking: %d registered: %d\n",
                  info_.ranks, o_.min_bytes, o_.max_bytes, o_.step_factor, o_.warmup, o_.iters, o_.check, o_.blocking,
                  o_.registered);
    else
      std::printf("# nRanks %d minBytes %zu maxBytes %zu step: %zu(bytes) warmup iters: %d iters: %d agg iters: 1 "
                  "validation: %d blocking: %d registered: %d\n",
                  info_.ranks, o_.min_bytes, o_.max_bytes, o_.step_bytes, o_.warmup, o_.iters, o_.check, o_.blocking,
                  o_.registered);
    std::printf("#\n");
    std::printf("# library   : %s\n", info_.library.c_str());
    std::printf("# compiler  : %s\n", m.compiler.c_str());
    std::printf("# machine   : %s, %s, %u cores\n", m.hostname.c_str(), m.cpu_model.c_str(), m.cores);
    std::printf("# ranks     : %d (%s)\n", info_.ranks, info_.launcher.c_str());
    std::printf("# transport : %s\n", info_.transport.c_str());
    std::printf("# algorithm : %s\n", info_.algorithm.c_str());
    for (const auto& n : info_.notes) std::printf("# %s\n", n.c_str());
    std::printf("#\n");
    std::printf("#                                                              out-of-place                       in-place          \n");
    std::printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n");
    std::printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n");
    std::fflush(stdout);
  }

  void add(const row& r) {
    rows_.push_back(r);
    for (const measurement* m : {&r.oop, &r.ip}) {
      if (!m->valid) continue;
      bw_sum_ += m->busbw;
      ++bw_count_;
      if (m->wrong > 0) wrong_ += m->wrong;
    }
    if (!print_) return;
    std::printf("%12zu  %12zu  %8s  %6s  %6d", r.size, r.count, r.type.c_str(), r.redop.c_str(), r.root);
    for (const measurement* m : {&r.oop, &r.ip}) {
      if (!m->valid) {
        std::printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
        continue;
      }
      char wrong[32];
      if (m->wrong < 0) std::snprintf(wrong, sizeof wrong, "%5s", "N/A");
      else std::snprintf(wrong, sizeof wrong, "%5lld", m->wrong);
      std::printf("  %7s  %6.2f  %6.2f  %5s", time_str(m->time_us).c_str(), m->algbw, m->busbw, wrong);
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  /// The closing lines; returns nccl-tests' exit status (1 on wrong values or a busbw below
  /// NCCL_TESTS_MIN_BW * 0.9), or 1 when the --json or --csv file could not be written.
  int footer() {
    const double avg = bw_count_ ? bw_sum_ / bw_count_ : 0.0;
    const char* min_bw = std::getenv("NCCL_TESTS_MIN_BW");
    const double check_avg = min_bw ? collx::detail::atof_c(min_bw) : -1;
    const bool bw_failed = check_avg != -1 && avg < check_avg * 0.9;
    bool written = true;
    if (print_) {
      std::printf("# Out of bounds values : %lld %s\n", wrong_, wrong_ ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : %g %s\n", avg, check_avg == -1 ? "" : (bw_failed ? "FAILED" : "OK"));
      std::printf("#\n");
      std::fflush(stdout);
      if (!o_.json_path.empty()) written = write_json(avg) && written;
      if (!o_.csv_path.empty()) written = write_csv() && written;
    }
    return (wrong_ || bw_failed || !written) ? 1 : 0;
  }

  long long wrong() const noexcept { return wrong_; }

 private:
  std::string label() const { return o_.label.empty() ? info_.library : o_.label; }

  /// Writes --json's file; false (with a message) when it cannot.
  bool write_json(double avg) const {
    std::ofstream f(o_.json_path);
    if (!f) return cannot_write(o_.json_path);
    const auto& m = info_.machine;
    f << "{\n  \"tool\": \"" << json_escape(info_.tool) << "\",\n  \"label\": \"" << json_escape(label())
      << "\",\n  \"library\": \"" << json_escape(info_.library) << "\",\n  \"collective\": \"" << coll_name(o_.collective)
      << "\",\n  \"transport\": \"" << json_escape(info_.transport) << "\",\n  \"algorithm\": \""
      << json_escape(info_.algorithm) << "\",\n  \"ranks\": " << info_.ranks << ",\n  \"launcher\": \""
      << json_escape(info_.launcher) << "\",\n  \"machine\": {\"hostname\": \"" << json_escape(m.hostname)
      << "\", \"cpu\": \"" << json_escape(m.cpu_model) << "\", \"cores\": " << m.cores << ", \"compiler\": \""
      << json_escape(m.compiler) << "\"},\n  \"options\": {\"iters\": " << o_.iters << ", \"warmup\": " << o_.warmup
      << ", \"check\": " << o_.check << ", \"blocking\": " << o_.blocking << ", \"average\": " << o_.average
      << ", \"registered\": " << o_.registered
      << ", \"type\": \"" << dtype_name(o_.type) << "\", \"op\": \"" << redop_name(o_.op) << "\", \"root\": " << o_.root
      << "},\n  \"rows\": [";
    char buf[64];
    auto num = [&](double v) {
      std::snprintf(buf, sizeof buf, "%.6g", v);
      return std::string(buf);
    };
    auto meas = [&](const measurement& x) {
      if (!x.valid) return std::string("null");
      return "{\"time_us\": " + num(x.time_us) + ", \"algbw\": " + num(x.algbw) + ", \"busbw\": " + num(x.busbw) +
             ", \"wrong\": " + (x.wrong < 0 ? std::string("null") : std::to_string(x.wrong)) + "}";
    };
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const row& r = rows_[i];
      f << (i ? ",\n    " : "\n    ") << "{\"size\": " << r.size << ", \"count\": " << r.count << ", \"type\": \"" << r.type
        << "\", \"redop\": \"" << r.redop << "\", \"root\": " << r.root << ", \"algorithm\": \""
        << json_escape(r.algorithm) << "\", \"out_of_place\": " << meas(r.oop) << ", \"in_place\": " << meas(r.ip)
        << "}";
    }
    f << "\n  ],\n  \"avg_busbw\": " << num(avg) << ",\n  \"wrong\": " << wrong_ << "\n}\n";
    f.close();
    return f ? true : cannot_write(o_.json_path);
  }

  bool cannot_write(const std::string& path) const {
    std::fprintf(stderr, "%s: cannot write %s\n", info_.tool.c_str(), path.c_str());
    return false;
  }

  /// Writes --csv's file; false (with a message) when it cannot.
  bool write_csv() const {
    std::ofstream f(o_.csv_path);
    if (!f) return cannot_write(o_.csv_path);
    auto q = [](const std::string& s) {
      std::string o = "\"";
      for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
      return o + "\"";
    };
    f << "label,tool,library,collective,transport,algorithm,ranks,size,count,type,redop,root,placement,time_us,algbw_GBps,"
         "busbw_GBps,wrong\n";
    for (const row& r : rows_) {
      for (int p = 0; p < 2; ++p) {
        const measurement& m = p ? r.ip : r.oop;
        if (!m.valid) continue;
        char nums[160];
        std::snprintf(nums, sizeof nums, "%.6g,%.6g,%.6g", m.time_us, m.algbw, m.busbw);
        f << q(label()) << ',' << q(info_.tool) << ',' << q(info_.library) << ',' << coll_name(o_.collective) << ','
          << q(info_.transport) << ',' << q(r.algorithm) << ',' << info_.ranks << ',' << r.size << ',' << r.count << ','
          << r.type << ',' << r.redop << ',' << r.root << ',' << (p ? "in_place" : "out_of_place") << ',' << nums << ','
          << (m.wrong < 0 ? std::string("") : std::to_string(m.wrong)) << '\n';
      }
    }
    f.close();
    return f ? true : cannot_write(o_.csv_path);
  }

  const options& o_;
  run_info info_;
  bool print_;
  std::vector<row> rows_;
  double bw_sum_ = 0;
  int bw_count_ = 0;
  long long wrong_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The timing loop

/// Page-aligned buffer of T, touched (so no first-touch page fault lands in a timed region).
template <class T>
struct buffer {
  struct free_deleter {
    void operator()(T* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<T, free_deleter> p;
  std::size_t n = 0;
  explicit buffer(std::size_t count) : n(count) {
    if (count > (SIZE_MAX - 4095) / sizeof(T)) throw std::bad_alloc();  // the byte count would wrap
    const std::size_t bytes = std::max<std::size_t>(4096, (count * sizeof(T) + 4095) / 4096 * 4096);
    p.reset(static_cast<T*>(std::aligned_alloc(4096, bytes)));
    if (!p) throw std::bad_alloc();
    std::memset(static_cast<void*>(p.get()), 0, bytes);
  }
  T* get() const noexcept { return p.get(); }
};

/// Runs the sweep for element type T. Backend B provides:
///   int rank(), size();  void barrier();
///   double combine_time(double seconds, int average_mode);   // -a over ranks
///   std::uint64_t sum_over_ranks(std::uint64_t);
///   template <class T> void run(const call_args<T>&, int calls, bool blocking);
///   template <class T> const T* result_of(const call_args<T>&);  // where the result is on this rank
///   std::string algorithm_for(coll, const call_counts&, std::size_t type_size);
///   optionally bool in_place_supported(coll, int root);   // false: the in-place column is N/A
///   optionally std::shared_ptr<T> registered_buffer<T>(std::size_t count);  // -R 1 (collective call)
template <class T, class B>
void sweep(B& be, const options& o, reporter& rep) {
  const int n = be.size(), rank = be.rank();
  const std::vector<std::size_t> sizes = o.sizes();
  std::size_t cap = 1;
  for (std::size_t s : sizes) {
    const call_counts k = counts_for(o.collective, s / sizeof(T), n);
    cap = std::max({cap, k.send_count, k.recv_count});
  }
  // Plain page-aligned memory, or with -R 1 memory the library registers (both ranks' buffers
  // created in the same order: the registration is collective).
  std::shared_ptr<T> reg_send, reg_recv;
  if constexpr (requires { be.template registered_buffer<T>(cap); }) {
    if (o.registered) {
      reg_send = be.template registered_buffer<T>(cap);
      reg_recv = be.template registered_buffer<T>(cap);
    }
  }
  if (o.registered && !reg_send) throw std::runtime_error("-R 1: this library has no registered buffers");
  buffer<T> plain_send(reg_send ? 0 : cap), plain_recv(reg_recv ? 0 : cap);
  T* const send_base = reg_send ? reg_send.get() : plain_send.get();
  T* const recv_base = reg_recv ? reg_recv.get() : plain_recv.get();
  struct {
    T* p;
    T* get() const noexcept { return p; }
  } sendbuf{send_base}, recvbuf{recv_base};
  for (std::size_t i = 0; i < cap; ++i) sendbuf.get()[i] = gen<T>(rank, i, o.op);
  std::memset(static_cast<void*>(recvbuf.get()), 0xA5, cap * sizeof(T));

  for (std::size_t s : sizes) {
    const call_counts k = counts_for(o.collective, s / sizeof(T), n);
    row r;
    r.size = size_column_bytes(k, sizeof(T));
    r.count = k.param_count;
    r.type = std::string(dtype_name(o.type));
    r.redop = reduces(o.collective) ? std::string(redop_name(o.op)) : "none";
    r.root = rooted(o.collective) ? o.root : -1;
    r.algorithm = be.algorithm_for(o.collective, k, sizeof(T));
    for (int place = 0; place < 2; ++place) {
      measurement& m = place ? r.ip : r.oop;
      if (place && !has_in_place(o.collective)) continue;
      if constexpr (requires { be.in_place_supported(o.collective, o.root); })
        if (place && !be.in_place_supported(o.collective, o.root)) continue;
      call_args<T> a;
      a.c = o.collective;
      a.op = o.op;
      a.k = k;
      a.root = o.root;
      a.in_place = place == 1;
      a.base = recvbuf.get();
      if (a.in_place) {
        a.send = recvbuf.get() + k.send_inplace_offset * static_cast<std::size_t>(rank);
        a.recv = recvbuf.get() + k.recv_inplace_offset * static_cast<std::size_t>(rank);
        fill_for_run(a, rank, n, sendbuf.get(), recvbuf.get(), cap);
      } else {
        a.send = sendbuf.get();
        a.recv = recvbuf.get();
      }
      be.run(a, o.warmup, o.blocking != 0);
      be.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      be.run(a, o.iters, o.blocking != 0);
      const auto t1 = std::chrono::steady_clock::now();
      const double sec = std::chrono::duration<double>(t1 - t0).count() / o.iters;
      const double t = be.combine_time(sec, o.average);
      const bandwidth bw = bandwidth_for(o.collective, k.param_count, sizeof(T), n, t);
      m.valid = true;
      m.time_us = t * 1e6;
      m.algbw = bw.algbw;
      m.busbw = bw.busbw;
      if (o.check) {
        fill_for_run(a, rank, n, sendbuf.get(), recvbuf.get(), cap);
        be.run(a, 1, o.blocking != 0);  // the timed calls' form: -z 0's async path is checked too
        const std::uint64_t mine = count_wrong(a, be.result_of(a), rank, n);
        if (mine)
          std::fprintf(stderr, "rank %d: %" PRIu64 " wrong elements at size %zu (%s)\n", rank, mine, r.size,
                       a.in_place ? "in place" : "out of place");
        m.wrong = static_cast<long long>(be.sum_over_ranks(mine));
      }
    }
    rep.add(r);
  }
}

}  // namespace collx_perf
