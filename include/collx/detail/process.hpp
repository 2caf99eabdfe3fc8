/// @file detail/process.hpp
/// Process liveness for the shared-memory transport: a peer is identified by (pid, start time) so
/// that a recycled pid is not mistaken for the peer, and a zombie counts as dead.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>  // std::strtoull
#include <cstring>
#include <string>

namespace collx {
inline namespace v0 {
namespace detail {

/// The process's start time in clock ticks since boot (field 22 of /proc/PID/stat) and its state
/// letter; false if the process does not exist.
inline bool read_proc_stat(pid_t pid, std::uint64_t& start_time, char& state) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may contain spaces and parentheses
  if (!p || p[1] != ' ') return false;
  state = p[2];
  // after ") S " come fields 4.. ; start time is field 22
  const char* q = p + 2;
  for (int field = 3; field < 22 && q; ++field) {
    q = std::strchr(q, ' ');
    if (q) ++q;
  }
  if (!q) return false;
  start_time = std::strtoull(q, nullptr, 10);
  return true;
}

/// Start time of this process (0 if /proc is unavailable).
inline std::uint64_t own_start_time() {
  std::uint64_t t = 0;
  char s = '?';
  return read_proc_stat(::getpid(), t, s) ? t : 0;
}

/// True if the process (pid, start_time) has ended: it does not exist, is a zombie, or the pid now
/// belongs to a process started at another time. start_time 0 skips the identity check.
inline bool process_dead(pid_t pid, std::uint64_t start_time) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::uint64_t t = 0;
  char state = '?';
  if (!read_proc_stat(pid, t, state)) return ::kill(pid, 0) != 0 && errno == ESRCH;
  if (state == 'Z' || state == 'X') return true;
  return start_time != 0 && t != start_time;
}

/// True if the process (pid, start_time) exists and is stopped (SIGSTOP, SIGTSTP, or held by a
/// debugger: state T or t): it makes no progress until continued.
inline bool process_stopped(pid_t pid, std::uint64_t start_time) {
  std::uint64_t t = 0;
  char state = '?';
  if (pid <= 0 || !read_proc_stat(pid, t, state)) return false;
  return (state == 'T' || state == 't') && (start_time == 0 || t == start_time);
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
