/// @file topo/host_cost.hpp
/// The machine's wiring in algo::automatic's choice for ranks on this machine's CPUs (threads of one
/// process, or processes over shared memory): collx::cost_model's figures, with the bandwidth of
/// the inter-CPU link (QPI/UPI/Infinity Fabric, topo::smp_GBps from the CPU model) when the CPUs
/// the ranks may run on span NUMA nodes -- the rule topo::make_selector applies to a CPU-only
/// topology, here read from the live machine (sysfs and /proc/cpuinfo; no library needed). The
/// host transports ask it once when a communicator is made (transport::costs).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include <collx/algo/automatic.hpp>
#include <collx/detail/cpus.hpp>
#include <collx/detail/numa.hpp>
#include <collx/topo/smp_link.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// The CPU model, as /proc/cpuinfo's first processor gives it (x86: vendor_id, cpu family, model;
/// Arm CPUs, which list a "CPU implementer" instead, are vendor "ARM").
struct cpu_identity {
  std::string vendor;  ///< "GenuineIntel", "AuthenticAMD", "ARM", ...; empty when not known
  int family = 0;      ///< "cpu family"; 0 when not known
  int model = 0;       ///< "model"; 0 when not known
};

/// Reads `procfs`/cpuinfo (all fields empty when it cannot be read).
inline cpu_identity read_cpu_identity(const std::string& procfs = "/proc") {
  cpu_identity id;
  std::FILE* f = std::fopen((procfs + "/cpuinfo").c_str(), "r");  // stdio: the transports include this
  if (!f) return id;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string val = line.substr(colon + 1);
    while (!val.empty() && val.front() == ' ') val.erase(val.begin());
    if (key == "vendor_id" && id.vendor.empty()) id.vendor = val;
    else if (key == "cpu family" && !id.family) id.family = std::atoi(val.c_str());
    else if (key == "model" && !id.model) id.model = std::atoi(val.c_str());
    else if (key == "CPU implementer" && id.vendor.empty()) id.vendor = "ARM";  // Arm's /proc/cpuinfo
  }
  std::fclose(f);
  return id;
}

/// algo::automatic's cost model for ranks that may run on `job_cpus` (the union of the ranks'
/// affinity masks): collx::cost_model{} when those CPUs lie on one NUMA node (or sysfs lists one),
/// else the same with its bandwidth lowered to the inter-CPU link's (cost_model::across_numa_link
/// with smp_GBps of the CPU model: Broadwell-class 6 GB/s changes choices; Skylake to Emerald
/// Rapids, every AMD CPU and unknown ones reach cost_model's 8 GB/s and change nothing). So on a
/// multi-socket machine with a slow link, automatic's choice -- and with it the result's bits --
/// can depend on the CPUs the ranks may run on; name an algorithm for the same bits everywhere.
/// CPUs whose node sysfs does not say are ignored. `sysfs` and `procfs` are the roots to read
/// (tests use fakes).
inline cost_model host_cost_model(const collx::detail::cpu_bits& job_cpus, const std::string& sysfs = "/sys",
                                  const std::string& procfs = "/proc") {
  // collx::detail, not topo::detail (topo/detail/xml.hpp): these are the core's sysfs readers.
  if (collx::detail::numa_node_count(sysfs) < 2) return {};
  int first = -1;
  bool spans = false;
  for (int cpu = 0; cpu < collx::detail::cpu_bits::max_cpus && !spans; ++cpu) {
    if (!job_cpus.has(cpu)) continue;
    const int node = collx::detail::numa_node_of_cpu(cpu, sysfs);
    if (node < 0) continue;
    if (first < 0) first = node;
    spans = node != first;
  }
  if (!spans) return {};
  const cpu_identity id = read_cpu_identity(procfs);
  return cost_model{}.across_numa_link(smp_GBps(id.vendor, id.family, id.model));
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
