/// @file debug_log.hpp
/// collx's diagnostic log, as NCCL_DEBUG is NCCL's: COLLX_DEBUG=warn|info|trace prints what
/// collx decides and does (communicators made and their algorithm choices, each call and its time,
/// each failure), one line per event, to stderr or COLLX_DEBUG_FILE. Off by default; off, a call
/// pays one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <sys/syscall.h>
#include <unistd.h>

#include <collx/environment.hpp>
#include <collx/error.hpp>
#include <collx/version.hpp>

namespace collx {
inline namespace v0 {

/// How much the log says; each level adds to the one before (NCCL_DEBUG's WARN, INFO, TRACE).
enum class log_level {
  off = 0,    ///< nothing (the default)
  warn = 1,   ///< each communicator's failure, once on each rank (its first: the reason calls throw)
  info = 2,   ///< also each communicator made (rank, world size, transport, timeout, segment size,
              ///< what algo::automatic picks for each collective by size; device communicators:
              ///< GPU, workspace memory, path to each peer, thresholds, rings), each hierarchy
              ///< attached and, once per process, collx's version and the COLLX_* variables set
  trace = 3,  ///< also each host call that completes: its name, element count, bytes and time in us
              ///< (send_recv: the elements received, the bytes both ways); not device calls,
              ///< which complete on their stream
};

/// Parses a COLLX_DEBUG value (case-insensitive): off (also 0, none, empty), warn, info or trace
/// (NCCL_DEBUG's WARN, INFO and TRACE; not its VERSION).
/// @throws collx::error (errc::invalid_argument) naming `name` for anything else.
inline log_level parse_log_level(std::string_view name, std::string_view v) {
  const std::string l = env::lower(v);
  if (l.empty() || l == "off" || l == "0" || l == "none") return log_level::off;
  if (l == "warn") return log_level::warn;
  if (l == "info") return log_level::info;
  if (l == "trace") return log_level::trace;
  env::reject(name, v, "off, warn, info or trace");
}

/// A COLLX_DEBUG_FILE pattern with `%h` replaced by the host name, `%p` by the process id and
/// `%%` by `%` (NCCL_DEBUG_FILE's), so that each process of a job writes its own file.
/// @throws collx::error (errc::invalid_argument) naming `name` for any other `%` sequence.
inline std::string expand_log_path(std::string_view name, std::string_view pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    const char c = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (c == 'h') {
      char host[256] = {};
      if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
      out += host;
    } else if (c == 'p') {
      out += std::to_string(static_cast<long long>(getpid()));
    } else if (c == '%') {
      out += '%';
    } else {
      env::reject(name, pattern, "a path in which % starts only %h (host name), %p (process id) or %% (a %)");
    }
    ++i;
  }
  return out;
}

namespace detail {

/// The log's process-wide state: the level (-1 until read from the environment or set) and where
/// lines go.
struct log_state {
  std::atomic<int> level{-1};
  std::mutex sink_mutex;      // guards the fields below and keeps lines whole
  std::string path_pattern;   // COLLX_DEBUG_FILE or set_log's; empty: stderr
  std::FILE* file = nullptr;  // opened for path_pattern by the process `file_pid`
  long long file_pid = 0;
  long long told_pid = 0;     // the process that wrote the once-per-process info line (a fork writes its own)

  static log_state& get() {
    static log_state s;  // never destroyed before a static communicator's last line
    return s;
  }
};

/// Opens the sink for `pattern` in this process (stderr for an empty one); sink_mutex held.
/// `source` names where the pattern came from in errors.
/// @throws collx::error (errc::invalid_argument) for a bad pattern, errc::system when the file
///   cannot be opened for appending.
inline void open_log_sink_locked(log_state& s, const std::string& pattern, std::string_view source) {
  std::FILE* f = nullptr;
  if (!pattern.empty()) {
    const std::string path = expand_log_path(source, pattern);
    f = std::fopen(path.c_str(), "a");
    if (!f)
      COLLX_THROW(errc::system,
                  std::string(source) + ": cannot open '" + path + "' for appending: " + std::strerror(errno));
  }
  if (s.file) std::fclose(s.file);
  s.file = f;
  s.file_pid = static_cast<long long>(getpid());
  s.path_pattern = pattern;
}

/// Reads COLLX_DEBUG and COLLX_DEBUG_FILE, once per process (a later call returns at once), unless
/// set_log came first. Every communicator's constructor calls it, so that a bad value fails there.
/// A COLLX_DEBUG_FILE that cannot be opened is no error (the job should not fail for its debug
/// log): the lines go to stderr, after one saying why.
/// @throws collx::error (errc::invalid_argument) naming the variable for a bad value (then the
///   next call reads them again).
inline void read_log_environment() {
  log_state& s = log_state::get();
  if (s.level.load(std::memory_order_acquire) >= 0) return;
  const std::lock_guard<std::mutex> lock(s.sink_mutex);
  if (s.level.load(std::memory_order_relaxed) >= 0) return;
  const auto v = env::get("COLLX_DEBUG");
  const log_level l = v ? parse_log_level("COLLX_DEBUG", *v) : log_level::off;
  const auto path = env::get("COLLX_DEBUG_FILE");
  if (path) (void)expand_log_path("COLLX_DEBUG_FILE", *path);  // a bad pattern is an error even while off
  std::string unopened;
  if (l != log_level::off) {
    try {
      open_log_sink_locked(s, path.value_or(std::string()), "COLLX_DEBUG_FILE");
    } catch (const error& e) {
      unopened = e.what();
      open_log_sink_locked(s, std::string(), "COLLX_DEBUG_FILE");  // stderr
    }
  }
  s.level.store(static_cast<int>(l), std::memory_order_release);
  if (!unopened.empty())
    std::fprintf(stderr, "collx WARN %s; COLLX_DEBUG's lines go to stderr\n", unopened.c_str());
}

/// "13:45:01.123456" in local time, for lines from several processes to be put in order.
inline std::string log_clock() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%06lld", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us));
  return buf;
}

/// Writes one line, whole, then flushes it (a job that hangs or dies keeps its log). Never throws:
/// a line that cannot be written is lost.
inline void write_log_line(log_level l, std::string_view text) noexcept {
  static constexpr const char* level_names[] = {"OFF", "WARN", "INFO", "TRACE"};
  try {
    log_state& s = log_state::get();
    static const std::string host = [] {
      char h[256] = {};
      return std::string(gethostname(h, sizeof h - 1) == 0 ? h : "unknown-host");
    }();
    std::string line = log_clock() + " " + host + ":" + std::to_string(static_cast<long long>(getpid())) + ":" +
                       std::to_string(static_cast<long long>(syscall(SYS_gettid))) + " collx " +
                       level_names[static_cast<int>(l)] + " " + std::string(text) + "\n";
    const std::lock_guard<std::mutex> lock(s.sink_mutex);
    // A child forked after the file was opened writes its own (%p), not its parent's.
    if (!s.path_pattern.empty() && s.file_pid != static_cast<long long>(getpid())) {
      s.file = nullptr;  // the parent's FILE: not ours to close (its buffer is the parent's)
      try {
        open_log_sink_locked(s, s.path_pattern, "COLLX_DEBUG_FILE");
      } catch (...) {  // this process's file cannot be opened: its lines go to stderr
        s.path_pattern.clear();
      }
    }
    std::FILE* f = s.file ? s.file : stderr;
    std::fwrite(line.data(), 1, line.size(), f);
    std::fflush(f);
  } catch (...) {
  }
}

}  // namespace detail

/// True when lines of level `l` are printed. Cheap (a relaxed load): call sites test it before
/// building a line. Reads the environment first if nothing did (a bad value then reads as off:
/// communicators' constructors report it).
inline bool log_enabled(log_level l) noexcept {
  int v = detail::log_state::get().level.load(std::memory_order_relaxed);
  if (v < 0) {
    try {
      detail::read_log_environment();
    } catch (...) {
      return false;
    }
    v = detail::log_state::get().level.load(std::memory_order_relaxed);
  }
  return v >= static_cast<int>(l);
}

/// Prints `text` as one line of level `l` when the log is at `l` or more:
/// "13:45:01.123456 host:pid:tid collx INFO text". collx's own lines name rank, world size and
/// call as its errors do ("rank 1/4 allreduce#7<float32,sum,ring> ..."). Never throws.
inline void log_message(log_level l, std::string_view text) noexcept {
  if (l != log_level::off && log_enabled(l)) detail::write_log_line(l, text);
}

/// Sets the level and destination in code, over COLLX_DEBUG and COLLX_DEBUG_FILE (which are then
/// not read): `path_pattern` as COLLX_DEBUG_FILE (%h, %p, %%), empty for stderr. Any thread, any
/// time; lines already being written finish where they were going.
/// @throws collx::error (errc::invalid_argument) for a bad pattern; errc::system when the file
///   cannot be opened (unlike COLLX_DEBUG_FILE's, which falls back to stderr; the log is then
///   left as it was).
inline void set_log(log_level l, const std::string& path_pattern = {}) {
  detail::log_state& s = detail::log_state::get();
  const std::lock_guard<std::mutex> lock(s.sink_mutex);
  detail::open_log_sink_locked(s, l == log_level::off ? std::string() : path_pattern, "collx::set_log's path");
  s.level.store(static_cast<int>(l), std::memory_order_release);
}

namespace detail {

/// "512 B", "64 KiB", "1.5 MiB": sizes in log lines.
inline std::string bytes_text(std::size_t b) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<long long>(v)))
    std::snprintf(buf, sizeof buf, "%lld %s", static_cast<long long>(v), units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

/// Once per process, at info: collx's version and the COLLX_* variables set (where a job's
/// behaviour differs from the defaults, this says why).
inline void log_process_once() {
  if (!log_enabled(log_level::info)) return;
  log_state& s = log_state::get();
  {
    const std::lock_guard<std::mutex> lock(s.sink_mutex);
    const auto pid = static_cast<long long>(getpid());
    if (s.told_pid == pid) return;
    s.told_pid = pid;
  }
  std::string vars;
  for (char** e = environ; e && *e; ++e)
    if (std::string_view(*e).substr(0, 6) == "COLLX_") vars += (vars.empty() ? "" : ", ") + std::string(*e);
  log_message(log_level::info, std::string("collx ") + COLLX_VERSION_STRING + "; environment: " + (vars.empty() ? "no COLLX_* variables" : vars));
}

/// Logs a call that completes at trace level: construct it as the call starts, with a callable
/// that names the call (run only if the line is printed; held by value), its element count and
/// bytes; its destructor prints "<name> count <count> (<bytes>): <us> us" unless an exception is
/// leaving (the failure logs itself).
template <class Name>
class call_trace {
 public:
  call_trace(Name name, std::size_t count, std::size_t bytes) noexcept
      : name_(std::move(name)), count_(count), bytes_(bytes), on_(log_enabled(log_level::trace)),
        exceptions_(on_ ? std::uncaught_exceptions() : 0) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  call_trace(const call_trace&) = delete;
  call_trace& operator=(const call_trace&) = delete;
  ~call_trace() {
    if (!on_ || std::uncaught_exceptions() != exceptions_) return;
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
    try {
      char t[32];
      std::snprintf(t, sizeof t, "%.1f us", us);
      log_message(log_level::trace, name_() + " count " + std::to_string(count_) + " (" + bytes_text(bytes_) + "): " + t);
    } catch (...) {
    }
  }

 private:
  Name name_;
  std::size_t count_, bytes_;
  bool on_;
  int exceptions_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace detail
}  // namespace v0
}  // namespace collx
