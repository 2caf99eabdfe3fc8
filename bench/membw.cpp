// membw: this machine's memory bandwidth, the physical bound of an on-node collective
// (bench/README.md, "The physical limit").
//
//   membw [--mib M] [--reps R] [--threads 1,2] [--json FILE]
//
// Kernels, each over arrays much larger than the caches (default 256 MiB per array), every thread on
// its own contiguous slice:
//   read    s += a[i]              1 stream  (bytes counted: 8 per element)
//   copy    memcpy(b, a)           2 streams (16: read + write; glibc's large memcpy uses non-temporal
//                                  stores, so no read-for-ownership of b)
//   copyloop b[i] = a[i]           2 streams (16; ordinary stores: the CPU also reads b first)
//   rmw     b[i] += a[i]           3 streams (24: read a, read b, write b: an in-place reduction)
//   reduce  c[i] = a[i] + b[i]     3 streams (24: an out-of-place reduction)
// and, with 2 CPUs, the core-to-core hand-off (c2c below): reading lines the other core just wrote,
// and writing lines the other core just read (an in-place output its peer has read), against the
// same on lines only this core touched; and the kernel's single copy between processes
// (process_vm_readv, in the 4 MiB pieces collx's shm transport uses): the data path of collx's
// collectives on plain (unregistered) buffers, counted as bytes copied.
// Bandwidth = bytes counted / time, GB = 1e9 B; the best of R repetitions (as STREAM reports) and the
// median. Threads start together after a barrier; the time runs from the first thread's start to
// the last thread's end. On a loaded machine the median says more about the load than about the
// memory: read the best, and rerun when the machine is quiet (`uptime`).
#include <sched.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "perf_common.hpp"  // parse_integer, writable_path: collx-perf's option checks

namespace {

struct result {
  std::string kernel;
  int threads;
  double best_GBps, median_GBps;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Keeps the compiler from discarding the read kernel.
volatile double sink;

void kernel(const std::string& k, double* a, double* b, double* c, std::size_t lo, std::size_t hi) {
  if (k == "read") {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::size_t i = lo;
    for (; i + 4 <= hi; i += 4) s0 += a[i], s1 += a[i + 1], s2 += a[i + 2], s3 += a[i + 3];
    for (; i < hi; ++i) s0 += a[i];
    sink = s0 + s1 + s2 + s3;
  } else if (k == "copy") {
    std::memcpy(b + lo, a + lo, (hi - lo) * sizeof(double));
  } else if (k == "copyloop") {
    for (std::size_t i = lo; i < hi; ++i) b[i] = a[i];
  } else if (k == "rmw") {
    for (std::size_t i = lo; i < hi; ++i) b[i] += a[i];
  } else if (k == "reduce") {
    for (std::size_t i = lo; i < hi; ++i) c[i] = a[i] + b[i];
  }
}

int streams(const std::string& k) { return k == "read" ? 1 : (k == "copy" || k == "copyloop") ? 2 : 3; }

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  ::sched_setaffinity(0, sizeof s, &s);
}

struct c2c_result {
  std::size_t bytes;
  double read_after_remote_write, read_local, write_after_remote_read, write_local;  // GB/s, medians
};

/// Core-to-core hand-off, what a collective between two ranks pays besides DRAM: thread B (CPU 1)
/// memcpys `bytes` out of a buffer thread A (CPU 0) has just written (dirty lines in A's cache) or
/// that B itself wrote last; and B writes a buffer A has just read (B must invalidate A's copies:
/// an in-place output the peer read) or one only B touches. Medians of `reps` hand-offs.
c2c_result c2c(std::size_t bytes, int reps) {
  std::vector<char> buf(bytes, 1), src(bytes, 2), sink_a(bytes), sink_b(bytes);
  std::atomic<int> turn{0};
  std::vector<double> t[4];
  const int phases = 4;
  std::thread a([&] {
    pin(0);
    for (int r = 0; r < reps * phases; ++r) {
      while (turn.load(std::memory_order_acquire) != 0) {
      }
      const int ph = r % phases;
      if (ph == 0) std::memset(buf.data(), r & 0x7f, bytes);          // A writes: B reads dirty lines
      else if (ph == 2) std::memcpy(sink_a.data(), buf.data(), bytes);  // A reads: B writes shared lines
      turn.store(1, std::memory_order_release);
    }
  });
  std::thread b([&] {
    pin(1);
    for (int r = 0; r < reps * phases; ++r) {
      while (turn.load(std::memory_order_acquire) != 1) {
      }
      const int ph = r % phases;
      const double t0 = now();
      if (ph < 2) std::memcpy(sink_b.data(), buf.data(), bytes);  // 0: after A wrote, 1: B's own last write
      else std::memcpy(buf.data(), src.data(), bytes);             // 2: after A read, 3: only B has it
      t[ph].push_back(now() - t0);
      turn.store(0, std::memory_order_release);
    }
  });
  a.join();
  b.join();
  auto gbps = [&](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return static_cast<double>(bytes) / v[v.size() / 2] / 1e9;
  };
  return {bytes, gbps(t[0]), gbps(t[1]), gbps(t[2]), gbps(t[3])};
}

/// process_vm_readv from this process's `src` into a child's own buffer, `bytes` per repetition in
/// 4 MiB pieces: {best, median} GB/s of bytes copied; {0, 0} when the kernel refuses (ptrace scope).
std::pair<double, double> cma_bandwidth(const double* src, std::size_t bytes, int reps) {
  int fds[2];
  if (::pipe(fds) != 0) return {0, 0};
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return {0, 0};
  if (child == 0) {
    std::vector<char> dst(bytes, 1);  // touched: no page faults while timing
    std::vector<double> times;
    const std::size_t piece = std::size_t{4} << 20;
    for (int r = 0; r < reps; ++r) {
      const double t0 = now();
      for (std::size_t off = 0; off < bytes; off += piece) {
        const std::size_t len = std::min(piece, bytes - off);
        iovec local{dst.data() + off, len};
        iovec remote{const_cast<char*>(reinterpret_cast<const char*>(src)) + off, len};
        if (::process_vm_readv(parent, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(len)) ::_exit(1);
      }
      times.push_back(now() - t0);
    }
    std::sort(times.begin(), times.end());
    const double r[2] = {static_cast<double>(bytes) / times.front() / 1e9,
                         static_cast<double>(bytes) / times[times.size() / 2] / 1e9};
    ::_exit(::write(fds[1], r, sizeof r) == static_cast<ssize_t>(sizeof r) ? 0 : 1);
  }
  ::close(fds[1]);
  double r[2] = {0, 0};
  if (::read(fds[0], r, sizeof r) != static_cast<ssize_t>(sizeof r)) r[0] = r[1] = 0;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return {r[0], r[1]};
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int reps = 7;
  std::vector<int> thread_counts = {1, 2};
  std::string json;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw collx_perf::usage_error(a + " needs a value");
        return argv[++i];
      };
      // Three arrays of M MiB each must fit: at most 64 GiB per array.
      if (a == "--mib") mib = static_cast<std::size_t>(collx_perf::parse_integer(a, next(), 1, 65536));
      else if (a == "--reps") reps = static_cast<int>(collx_perf::parse_integer(a, next(), 1, 100000));
      else if (a == "--threads") {
        thread_counts.clear();
        const std::string s = next();
        for (std::size_t p = 0; p <= s.size();) {
          const std::size_t q = std::min(s.find(',', p), s.size());
          thread_counts.push_back(static_cast<int>(collx_perf::parse_integer(a, s.substr(p, q - p), 1, 4096)));
          p = q + 1;
        }
      } else if (a == "--json") {
        json = next();
        if (!collx_perf::writable_path(json)) throw collx_perf::usage_error("--json " + json + ": cannot write there");
      } else if (a == "-h" || a == "--help") {
        std::printf("usage: membw [--mib M (per array, default 256)] [--reps R (default 7)] [--threads 1,2] [--json FILE]\n");
        return 0;
      } else {
        throw collx_perf::usage_error("unknown option " + a);
      }
    }
  } catch (const collx_perf::usage_error& e) {
    std::fprintf(stderr, "membw: %s\n", e.what());
    return 2;
  }
  const std::size_t n = mib * (1u << 20) / sizeof(double);
  std::vector<double> va(n, 1.0), vb(n, 2.0), vc(n, 0.0);  // touched: no page faults while timing
  double *a = va.data(), *b = vb.data(), *c = vc.data();

  std::printf("# membw: %zu MiB per array, best and median of %d repetitions, GB = 1e9 B\n", mib, reps);
  std::printf("# %-9s %7s %12s %12s   bytes counted per element\n", "kernel", "threads", "best GB/s", "median GB/s");
  std::vector<result> results;
  for (int t : thread_counts) {
    for (const std::string k : {"read", "copy", "copyloop", "rmw", "reduce"}) {
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) {
        std::barrier sync(t + 1);
        std::vector<double> t_start(static_cast<std::size_t>(t)), t_end(static_cast<std::size_t>(t));
        std::vector<std::thread> th;
        for (int w = 0; w < t; ++w)
          th.emplace_back([&, w] {
            const std::size_t lo = n * static_cast<std::size_t>(w) / static_cast<std::size_t>(t);
            const std::size_t hi = n * static_cast<std::size_t>(w + 1) / static_cast<std::size_t>(t);
            sync.arrive_and_wait();
            t_start[static_cast<std::size_t>(w)] = now();
            kernel(k, a, b, c, lo, hi);
            t_end[static_cast<std::size_t>(w)] = now();
          });
        sync.arrive_and_wait();
        for (auto& x : th) x.join();
        // From the first thread's start to the last one's end (each thread reads the clock itself:
        // the main thread may be descheduled right after the barrier).
        times.push_back(*std::max_element(t_end.begin(), t_end.end()) - *std::min_element(t_start.begin(), t_start.end()));
      }
      std::sort(times.begin(), times.end());
      const double bytes = static_cast<double>(n) * sizeof(double) * streams(k);
      const result res{k, t, bytes / times.front() / 1e9, bytes / times[times.size() / 2] / 1e9};
      results.push_back(res);
      std::printf("  %-9s %7d %12.2f %12.2f   %d\n", k.c_str(), t, res.best_GBps, res.median_GBps,
                  streams(k) * static_cast<int>(sizeof(double)));
      std::fflush(stdout);
    }
  }
  // Core-to-core: only with 2 or more CPUs.
  std::vector<c2c_result> cc;
  if (std::thread::hardware_concurrency() >= 2) {
    std::printf("# core-to-core (CPU 0 -> CPU 1), memcpy GB/s, medians of 300 hand-offs:\n");
    std::printf("# %9s %14s %14s %14s %14s\n", "bytes", "read dirty", "read own", "write shared", "write own");
    for (std::size_t bytes : {std::size_t{32} << 10, std::size_t{128} << 10, std::size_t{1} << 20}) {
      cc.push_back(c2c(bytes, 300));
      const auto& x = cc.back();
      std::printf("  %9zu %14.2f %14.2f %14.2f %14.2f\n", bytes, x.read_after_remote_write, x.read_local,
                  x.write_after_remote_read, x.write_local);
    }
    std::printf("# read dirty: lines the other core just wrote; write shared: lines the other core just read\n");
  }
  const auto cma = cma_bandwidth(a, n * sizeof(double), reps);
  if (cma.first > 0)
    std::printf("# single copy between processes (process_vm_readv, 4 MiB pieces): best %.2f GB/s, median %.2f GB/s\n",
                cma.first, cma.second);
  else
    std::printf("# single copy between processes: process_vm_readv is not permitted here\n");
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\n  \"mib_per_array\": " << mib << ",\n  \"reps\": " << reps << ",\n  \"results\": [";
    for (std::size_t i = 0; i < results.size(); ++i) {
      char line[256];
      std::snprintf(line, sizeof line, "%s\n    {\"kernel\": \"%s\", \"threads\": %d, \"best_GBps\": %.3f, \"median_GBps\": %.3f}",
                    i ? "," : "", results[i].kernel.c_str(), results[i].threads, results[i].best_GBps,
                    results[i].median_GBps);
      f << line;
    }
    f << "\n  ],\n  \"c2c\": [";
    for (std::size_t i = 0; i < cc.size(); ++i) {
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s\n    {\"bytes\": %zu, \"read_dirty_GBps\": %.3f, \"read_own_GBps\": %.3f, "
                    "\"write_shared_GBps\": %.3f, \"write_own_GBps\": %.3f}",
                    i ? "," : "", cc[i].bytes, cc[i].read_after_remote_write, cc[i].read_local,
                    cc[i].write_after_remote_read, cc[i].write_local);
      f << line;
    }
    char line[160];
    std::snprintf(line, sizeof line, "\n  ],\n  \"cma\": {\"best_GBps\": %.3f, \"median_GBps\": %.3f}\n}\n", cma.first,
                  cma.second);
    f << line;
    f.close();
    if (!f) {
      std::fprintf(stderr, "membw: could not write %s\n", json.c_str());
      return 1;
    }
  }
  return 0;
}
