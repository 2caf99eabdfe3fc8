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
// Bandwidth = bytes counted / time, GB = 1e9 B; the best of R repetitions (as STREAM reports) and the
// median. Threads start together after a barrier; the time runs from the first thread's start to
// the last thread's end. On a loaded machine the median says more about the load than about the
// memory: read the best, and rerun when the machine is quiet (`uptime`).
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

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int reps = 7;
  std::vector<int> thread_counts = {1, 2};
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "membw: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mib") mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--reps") reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--threads") {
      thread_counts.clear();
      const std::string s = next();
      for (std::size_t p = 0; p < s.size();) {
        const std::size_t q = std::min(s.find(',', p), s.size());
        thread_counts.push_back(std::max(1, std::atoi(s.substr(p, q - p).c_str())));
        p = q + 1;
      }
    } else if (a == "--json") json = next();
    else if (a == "-h" || a == "--help") {
      std::printf("usage: membw [--mib M (per array, default 256)] [--reps R (default 7)] [--threads 1,2] [--json FILE]\n");
      return 0;
    } else {
      std::fprintf(stderr, "membw: unknown option %s\n", a.c_str());
      return 2;
    }
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
    f << "\n  ]\n}\n";
  }
  return 0;
}
