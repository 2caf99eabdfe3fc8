/// @file detail/cpus.hpp
/// How many CPUs the ranks of a job can really run on, which decides whether a wait may spin. The
/// machine's CPU count is not it: `taskset`, a container's or Slurm's cpuset, and mpirun's binding
/// narrow the CPUs a process may use (its affinity mask), and a CPU quota (cgroup `cpu.max`, what
/// Docker's `--cpus` and Kubernetes' CPU limits set) caps how much of them it may use. A rank that
/// spins while the peer it waits for shares its CPU only delays that peer.
#pragma once

#include <sched.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <collx/detail/c_locale.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// A set of CPU numbers 0..1023, plain data so that it can live in shared memory.
struct cpu_bits {
  static constexpr int max_cpus = 1024;
  std::array<std::uint64_t, max_cpus / 64> words{};

  void set(int cpu) noexcept {
    if (cpu >= 0 && cpu < max_cpus) words[static_cast<std::size_t>(cpu) / 64] |= std::uint64_t{1} << (cpu % 64);
  }
  int count() const noexcept {
    int n = 0;
    for (std::uint64_t w : words) n += std::popcount(w);
    return n;
  }
  bool has(int cpu) const noexcept {
    return cpu >= 0 && cpu < max_cpus && (words[static_cast<std::size_t>(cpu) / 64] >> (cpu % 64) & 1);
  }
  /// The CPU numbers in the set, ascending.
  std::vector<int> list() const {
    std::vector<int> out;
    for (int cpu = 0; cpu < max_cpus; ++cpu)
      if (has(cpu)) out.push_back(cpu);
    return out;
  }
  cpu_bits& operator|=(const cpu_bits& o) noexcept {
    for (std::size_t i = 0; i < words.size(); ++i) words[i] |= o.words[i];
    return *this;
  }
};

/// The CPUs the calling thread may run on (its affinity mask); all online CPUs if that cannot be
/// read (then `*from_mask`, where given, is set to false).
inline cpu_bits allowed_cpus(bool* from_mask = nullptr) {
  cpu_bits out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < std::min(CPU_SETSIZE, cpu_bits::max_cpus); ++cpu)
      if (CPU_ISSET(static_cast<std::size_t>(cpu), &set)) out.set(cpu);
  }
  if (from_mask) *from_mask = out.count() != 0;
  if (out.count() == 0)
    for (unsigned cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu) out.set(static_cast<int>(cpu));
  return out;
}

/// CPUs' worth of time a cgroup v2 `cpu.max` line grants ("150000 100000" -> 1.5); nothing for
/// "max ..." (no limit) or text that is not a quota.
inline std::optional<double> parse_cgroup2_cpu_max(std::string_view text) {
  const std::string t(text);
  const std::size_t a = t.find_first_not_of(" \t"), b = t.find_first_of(" \t", a);
  if (a == std::string::npos || b == std::string::npos || t.compare(a, b - a, "max") == 0) return std::nullopt;
  char* end = nullptr;
  const double q = detail::strtod_c(t.c_str() + a, &end);
  if (end != t.c_str() + b) return std::nullopt;
  const double period = detail::strtod_c(t.c_str() + b, &end);
  if (end == t.c_str() + b || q <= 0 || period <= 0) return std::nullopt;
  return q / period;
}

/// CPUs' worth of time cgroup v1's `cpu.cfs_quota_us` and `cpu.cfs_period_us` grant; nothing when
/// the quota is -1 (no limit) or unreadable.
inline std::optional<double> parse_cgroup1_quota(std::string_view quota_us, std::string_view period_us) {
  const double q = detail::atof_c(std::string(quota_us).c_str()), p = detail::atof_c(std::string(period_us).c_str());
  if (q > 0 && p > 0 && std::isfinite(q / p)) return q / p;
  return std::nullopt;
}

/// The tightest CPU quota on the path from the process's cgroup up to the root, in CPUs' worth of
/// time. `proc_self_cgroup` is /proc/self/cgroup's text; `root` is where cgroups are mounted (v2:
/// ROOT/PATH/cpu.max; v1: ROOT/cpu/PATH/cpu.cfs_quota_us, also "cpu,cpuacct"). Nothing if no
/// level sets one. Parameters so that tests can point it at a made-up tree.
inline std::optional<double> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& root = "/sys/fs/cgroup") {
  const auto read = [](const std::string& path) -> std::optional<std::string> {
    std::ifstream f(path);
    std::string s;
    if (!f || !std::getline(f, s)) return std::nullopt;
    return s;
  };
  // A double, 0 for none, not an optional: g++ 12 -O1 -fsanitize=address falsely warned that the
  // optional "may be used uninitialized", which breaks users' -Werror builds.
  double best = 0;
  const auto take = [&](double q) {  // q: 0 for none
    if (q > 0 && (best == 0 || q < best)) best = q;
  };
  for (std::size_t at = 0; at < proc_self_cgroup.size();) {
    const std::size_t eol = std::min(proc_self_cgroup.find('\n', at), proc_self_cgroup.size());
    const std::string line = proc_self_cgroup.substr(at, eol - at);
    at = eol + 1;
    // "hierarchy-id:controllers:path"; the path may itself contain ':'
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    std::string dir;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      dir = root;  // v2 (unified)
    } else {
      if (("," + controllers + ",").find(",cpu,") == std::string::npos) continue;
      dir = root + "/" + controllers;
      if (!read(dir + "/cpu.cfs_period_us")) dir = root + "/cpu";  // mounted as "cpu" with a "cpu,cpuacct" link missing
    }
    for (;;) {  // from the process's own cgroup up to the root
      const std::string level = dir + (path == "/" ? "" : path);
      if (controllers.empty()) {
        if (const auto s = read(level + "/cpu.max")) take(parse_cgroup2_cpu_max(*s).value_or(0));
      } else if (const auto q = read(level + "/cpu.cfs_quota_us")) {
        if (const auto p = read(level + "/cpu.cfs_period_us")) take(parse_cgroup1_quota(*q, *p).value_or(0));
      }
      if (path.empty() || path == "/") break;
      const auto slash = path.find_last_of('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  if (best > 0) return best;
  return std::nullopt;
}

/// This process's CPU quota (cgroup_cpu_quota on /proc/self/cgroup), read once.
inline std::optional<double> own_cpu_quota() {
  static const std::optional<double> q = [] {
    std::ifstream f("/proc/self/cgroup");
    std::string text;
    for (std::string line; std::getline(f, line);) text += line + "\n";
    return cgroup_cpu_quota(text);
  }();
  return q;
}

/// The CPUs ranks whose affinity masks together make `cpus` can run on at once: the mask's size,
/// capped by this process's CPU quota (rounded up), at least 1.
inline unsigned usable_cpus(const cpu_bits& cpus) {
  double n = cpus.count();
  if (const auto q = own_cpu_quota()) n = std::min(n, std::ceil(*q));
  return static_cast<unsigned>(std::max(1.0, n));
}

/// usable_cpus for the calling thread's own affinity mask (for ranks that share one process, or
/// when the other ranks' masks are not known).
inline unsigned usable_cpus() { return usable_cpus(allowed_cpus()); }

}  // namespace detail
}  // namespace v0
}  // namespace collx
