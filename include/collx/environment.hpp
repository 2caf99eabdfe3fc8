/// @file environment.hpp
/// The COLLX_* environment variables: one table of names, parsers that reject bad values with a
/// message naming the variable, and a check that warns about unknown COLLX_* names.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>  // environ (declared with C linkage: a C++ declaration of our own broke a later <unistd.h>)

#include <collx/detail/c_locale.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

/// One documented environment variable.
struct env_var_doc {
  std::string_view name;     ///< the variable, e.g. "COLLX_TIMEOUT"
  std::string_view values;   ///< what it accepts, and its default
  std::string_view meaning;  ///< what it sets
};

/// Every COLLX_* variable collx reads (the README's table is this one).
inline constexpr std::array<env_var_doc, 17> environment_variables{{
    {"COLLX_TIMEOUT", "seconds (decimal), rounded to whole ms, at least 1 ms; default 300", "deadline of every wait inside a call"},
    {"COLLX_CONNECT_TIMEOUT", "seconds (decimal), rounded to whole ms, at least 1 ms; default 60",
     "how long processes starting a shared-memory communicator wait for every rank to attach (shm_options::connect_timeout), "
     "and collx::mpi::connect and connect_hierarchical for every rank of the MPI communicator to call them "
     "(mpi_options::connect_timeout)"},
    {"COLLX_ALGO",
     "ring, tree or direct; or per collective: allreduce:ring,broadcast:tree; or both: tree,allreduce:direct "
     "(the bare name for the collectives not named; each given once)",
     "what algo::automatic picks (names are case-insensitive, nccl-tests' all_reduce and alltoall too; ring falls back to direct for "
     "non-commutative ops); for a device communicator's untagged all_reduce, reduce_scatter and all_gather "
     "(rank 0's), ring means algo::ring at every size and direct the direct forms at every size, unless "
     "device_options::ring_min_bytes is given"},
    {"COLLX_SEGMENT_BYTES", "size (4096, 64K, 4M, 0x1000), at least 64; default 8M",
     "scratch memory per rank per call segment; also where `algo::ring` cuts its blocks, so its bits (ranks must agree: a "
     "difference is a mismatch). Each segment is a round of the schedule, with its own synchronisation: tiny values are "
     "for tests (at 64 bytes a 256 KiB all-reduce over 8 thread ranks takes about 0.5 s on 2 idle cores, seconds under load)"},
    {"COLLX_SHM_BYTES_PER_PEER", "size, at least 4096 (its 8 slots each rounded down to a multiple of 64 bytes); default 1M (less for > 8 ranks: 64M / ranks^2, at least 64K)",
     "shared-memory staging per ordered pair of ranks, in 8 slots: an element type may be at most an eighth of it (a struct of more than 8 KiB needs more than the 64K floor)"},
    {"COLLX_CMA", "auto, 0 or 1 (also off/on, false/true); default auto",
     "single-copy transfers with process_vm_readv between processes: auto uses them when the ranks outnumber the "
     "CPUs they may use, 1 always (an error where the kernel forbids them)"},
    {"COLLX_BIND", "core or none; default core", "collx-run and run_processes pin each rank to its own allowed CPU when the ranks fit, in contiguous blocks per NUMA node (topo::pin_cpus)"},
    {"COLLX_NODE_ID", "printable characters without spaces, at most 255; default the host name",
     "which node a rank is on, read by `mpi::connect_hierarchical` for algo::hierarchical (set it to run several \"nodes\" "
     "on one machine under mpirun) and by a device communicator, whose ranks must share one (compared on the first 63 "
     "bytes); `collx-run` and `connect_shm` ignore it (one machine is one node there; "
     "`make_hierarchical_thread_communicators` takes node ids as an argument)"},
    {"COLLX_GPU_WIRING", "auto or off (also 1/0, on, true/false); default auto",
     "whether a device communicator's rank 0 reads how the GPUs are wired (sysfs, NVML) when created, for the "
     "figures its device_options leave at their defaults (gpu::device_options::discover_wiring); off: collx's defaults"},
    {"COLLX_DEBUG", "off, warn, info or trace (case-insensitive; also 0 and none for off); default off",
     "what collx logs, one line per event (collx::log_level, debug_log.hpp, README's Debug log): warn each "
     "communicator's failure, once on each rank; info also each communicator made, with what algo::automatic picks by size, "
     "each hierarchy attached, and once per process the version and COLLX_* variables set; trace also each host call that "
     "completes, with its count, bytes and time"},
    {"COLLX_DEBUG_FILE", "a path; %h is the host name, %p the process id, %% a %; default: stderr",
     "where COLLX_DEBUG's lines go, appended (NCCL_DEBUG_FILE's pattern: give each process its own file with %p); "
     "one that cannot be opened sends them to stderr, after a line saying why"},
    {"COLLX_JOB_ID", "string; an id of at most 64 characters from [A-Za-z0-9_.-] is used as it is, any other as its first 47 characters (others replaced by _) and a hash of the whole id", "keeps concurrent jobs on one machine apart (set by collx-run; a collx-run started as a rank of another appends `.rank`)"},
    {"COLLX_LAUNCH_ID", "string (set by collx-run: its pid and start time)", "one start of a job: of two starts given the same COLLX_JOB_ID at once, the later one's ranks fail at once instead of joining the other's"},
    {"COLLX_RANK", "integer in [0, COLLX_WORLD_SIZE)", "this process's rank (set by collx-run)"},
    {"COLLX_WORLD_SIZE", "integer >= 1", "number of ranks (set by collx-run)"},
    {"COLLX_LOCAL_RANK", "integer", "rank among the processes of this node (set by collx-run)"},
    {"COLLX_LOCAL_WORLD_SIZE", "integer >= 1", "processes on this node (set by collx-run)"},
}};

namespace env {

/// The variable's value, or nothing when unset or empty.
inline std::optional<std::string> get(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

/// Throws collx::error (errc::invalid_argument): "NAME='VALUE' is not valid: expected EXPECTED".
[[noreturn]] inline void reject(std::string_view name, std::string_view value, std::string_view expected) {
  COLLX_THROW(errc::invalid_argument,
              std::string(name) + "='" + std::string(value) + "' is not valid: expected " + std::string(expected));
}

/// Parses a non-negative integer: decimal, or hexadecimal after 0x/0X (a leading 0 is not octal:
/// "010" is 10), optional binary suffix K, M, G (also KB/KiB...). "4M" = 4194304. Rejects signs,
/// white space, garbage and overflow.
inline std::size_t parse_size(std::string_view name, std::string_view v) {
  constexpr std::string_view expected = "a size such as 4096, 64K, 4M or 0x1000";
  const std::string s(v);
  // strtoull would skip white space and take a sign; base 0 would read "010" as octal 8.
  const bool hex = s.size() > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const char* digits = s.c_str() + (hex ? 2 : 0);
  if (hex ? !std::isxdigit(static_cast<unsigned char>(*digits)) : !std::isdigit(static_cast<unsigned char>(*digits)))
    reject(name, v, expected);
  errno = 0;
  char* end = nullptr;
  const unsigned long long base = std::strtoull(digits, &end, hex ? 16 : 10);
  if (errno == ERANGE) reject(name, v, "a size that fits in 64 bits");
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B") mult = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") mult = 1ull << 30;
  else reject(name, v, expected);
  if (base > ~0ull / mult) reject(name, v, "a size that fits in 64 bits");
  return static_cast<std::size_t>(base * mult);
}

/// Parses an integer in [lo, hi] (decimal only; a '-' only where lo < 0; no '+', no white space
/// around it).
inline long long parse_int(std::string_view name, std::string_view v, long long lo, long long hi) {
  const std::string s(v);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(s.c_str(), &end, 10);
  // strtoll skips leading white space and takes '+'; trailing white space fails the *end test.
  const bool starts_right = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || (s[0] == '-' && lo < 0));
  if (!starts_right || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    reject(name, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

/// Parses a positive number of seconds (decimal, e.g. 30, 0.5 or 1e3; at most 1e9).
inline double parse_seconds(std::string_view name, std::string_view v) {
  constexpr std::string_view expected = "a positive number of seconds, e.g. 30 or 0.5";
  const std::string s(v);
  // strtod would also take white space, hexadecimal (0x1p3), inf and nan.
  if (s.empty() || s.find_first_not_of("0123456789.eE+-") != std::string::npos) reject(name, v, expected);
  char* end = nullptr;
  const double x = detail::strtod_c(s.c_str(), &end);
  if (*end != '\0' || !(x > 0)) reject(name, v, expected);
  if (x > 1e9) reject(name, v, "at most 1e9 seconds (about 31 years)");
  return x;
}

/// Variable `name` as a duration: its seconds (parse_seconds) rounded to the nearest millisecond,
/// or `fallback` when it is unset or empty. @throws collx::error (errc::invalid_argument) naming
/// the variable for a value parse_seconds refuses or one that rounds to less than 1 ms (a zero
/// deadline would fail every wait).
inline std::chrono::milliseconds milliseconds_or(const char* name, std::chrono::milliseconds fallback) {
  const auto v = get(name);
  if (!v) return fallback;
  const auto ms = static_cast<long long>(parse_seconds(name, *v) * 1000.0 + 0.5);
  if (ms < 1) reject(name, *v, "at least 1 ms once rounded to whole ms (0.0005 seconds or more)");
  return std::chrono::milliseconds(ms);
}

/// COLLX_CONNECT_TIMEOUT seconds rounded to the nearest millisecond, or 60 s when unset: how long
/// a communicator's start waits for every rank (shm_options::connect_timeout,
/// mpi_options::connect_timeout). @throws collx::error as milliseconds_or.
inline std::chrono::milliseconds connect_timeout() {
  return milliseconds_or("COLLX_CONNECT_TIMEOUT", std::chrono::seconds(60));
}

/// Lower-cases ASCII.
inline std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

/// Parses a three-way switch (case-insensitive): -1 for auto, 0 for 0, off or false, 1 for 1, on
/// or true (COLLX_CMA, COLLX_GPU_WIRING). @throws collx::error (errc::invalid_argument) naming
/// the variable for anything else.
inline int parse_switch(std::string_view name, std::string_view v) {
  const std::string l = lower(v);
  if (l == "auto") return -1;
  if (l == "0" || l == "off" || l == "false") return 0;
  if (l == "1" || l == "on" || l == "true") return 1;
  reject(name, v, "auto, 0 or 1 (also off/on, false/true)");
}

/// Parses an algorithm name (case-insensitive).
inline std::optional<algorithm> parse_algorithm_name(std::string_view s) {
  const std::string l = lower(s);
  for (algorithm a : {algorithm::ring, algorithm::tree, algorithm::direct})
    if (l == algorithm_name(a)) return a;
  return std::nullopt;
}

/// Every collective, in enum order (a test keeps this table and the enum in step).
inline constexpr std::array<collective, 8> all_collectives{
    collective::allreduce, collective::reduce_scatter, collective::all_gather, collective::broadcast,
    collective::reduce,    collective::all_to_all,     collective::barrier,    collective::send_recv};

/// Parses a collective name (case-insensitive; "-" and "_" are the same; nccl-tests' spellings
/// "all_reduce" and "alltoall", which collx-perf takes too, are allreduce and all_to_all).
inline std::optional<collective> parse_collective_name(std::string_view s) {
  std::string l = lower(s);
  for (char& c : l)
    if (c == '-') c = '_';
  if (l == "all_reduce") return collective::allreduce;
  if (l == "alltoall") return collective::all_to_all;
  for (collective c : all_collectives)
    if (l == collective_name(c)) return c;
  return std::nullopt;
}

/// The collectives COLLX_ALGO may name, comma-separated, in enum order ("allreduce, ...,
/// all_to_all"), for messages: barrier and send_recv run one fixed schedule, so naming them
/// would do nothing.
inline std::string choosable_collective_names() {
  std::string r;
  for (collective c : all_collectives)
    if (c != collective::barrier && c != collective::send_recv)
      r.append(r.empty() ? "" : ", ").append(collective_name(c));
  return r;
}

/// COLLX_ALGO parsed: an optional algorithm per collective.
struct algorithm_overrides {
  /// The algorithm per collective, indexed by its enum value; empty: not overridden.
  std::array<std::optional<algorithm>, all_collectives.size()> per{};
  /// The algorithm set for `c`, or none (c must be a collective enumerator).
  std::optional<algorithm> for_collective(collective c) const { return per[static_cast<std::size_t>(c)]; }
};

/// Parses "ring" (all collectives), "allreduce:ring,broadcast:tree" (per collective) or both
/// ("tree,allreduce:direct": a bare name sets every collective the value does not name, wherever it
/// stands). Unknown collective or algorithm names, barrier or send_recv (which have no algorithm to
/// choose), all_to_all:tree, and a collective or a bare name given twice (which one was meant?)
/// are errors naming the variable (a bare "tree" sends all_to_all to direct, as
/// communicator::select does).
inline algorithm_overrides parse_algorithms(std::string_view name, std::string_view v) {
  algorithm_overrides o;
  std::optional<algorithm> bare;  // for the collectives not named
  std::size_t pos = 0;
  while (pos <= v.size()) {
    std::size_t comma = v.find(',', pos);
    if (comma == std::string_view::npos) comma = v.size();
    std::string_view item = v.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    const std::size_t colon = item.find(':');
    const std::string_view algo_part = colon == std::string_view::npos ? item : item.substr(colon + 1);
    const auto a = parse_algorithm_name(algo_part);
    if (!a) reject(name, v, "ring, tree or direct, optionally per collective as allreduce:ring,broadcast:tree");
    if (colon == std::string_view::npos) {
      if (bare) reject(name, v, "one algorithm for all collectives, not two (" + std::string(algorithm_name(*bare)) + " and " +
                                    std::string(algorithm_name(*a)) + ")");
      bare = a;
    } else {
      const auto c = parse_collective_name(item.substr(0, colon));
      if (!c || *c == collective::barrier || *c == collective::send_recv)
        reject(name, v, "collective names from " + choosable_collective_names() +
                            " (barrier and send_recv have no algorithm to choose)");
      if (*c == collective::all_to_all && *a == algorithm::tree)  // (a bare "tree" leaves all_to_all direct)
        reject(name, v, "ring or direct for all_to_all, which has no tree algorithm");
      if (o.per[static_cast<std::size_t>(*c)])
        reject(name, v, "each collective named once (" + std::string(collective_name(*c)) + " is named twice)");
      o.per[static_cast<std::size_t>(*c)] = a;
    }
    pos = comma + 1;
  }
  if (bare)
    for (auto& slot : o.per)
      if (!slot) slot = bare;
  return o;
}

/// Edit distance, for "did you mean".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// Warnings for every COLLX_* variable of `envp` that collx does not know, each naming the closest
/// known one ("COLLX_TIMEOUTS is not a collx variable; did you mean COLLX_TIMEOUT?").
inline std::vector<std::string> unknown_variable_warnings(char** envp = environ) {
  std::vector<std::string> out;
  for (char** e = envp; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, 6) != "COLLX_") continue;
    const std::string_view key = kv.substr(0, kv.find('='));
    std::string_view best;
    std::size_t best_d = ~std::size_t{0};
    bool known = false;
    for (const auto& d : environment_variables) {
      if (d.name == key) known = true;
      const std::size_t dist = edit_distance(key, d.name);
      if (dist < best_d) best_d = dist, best = d.name;
    }
    if (!known)
      out.push_back("collx warning: " + std::string(key) + " is not a collx variable; did you mean " + std::string(best) +
                    "?");
  }
  return out;
}

/// Prints unknown_variable_warnings() to stderr at the first call in this process if `print`;
/// later calls do nothing. Communicators pass "this is rank 0": the first communicator a process
/// makes is normally the job's whole world, so only its rank 0 warns (the ranks share one
/// environment), and node-local communicators made later do not warn again.
inline void warn_unknown_variables_once(bool print = true) {
  static const bool done = [print] {
    if (print)
      for (const std::string& w : unknown_variable_warnings()) std::fprintf(stderr, "%s\n", w.c_str());
    return true;
  }();
  (void)done;
}

}  // namespace env
}  // namespace v0
}  // namespace collx
