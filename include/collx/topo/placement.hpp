/// @file topo/placement.hpp
/// Host-side placement of the ranks of one machine, from the same topology model: which GPU a
/// local rank drives, which NUMA node it should allocate its memory on, which CPUs to run on.
///
/// Why it matters: a rank that writes a shared-memory slot which peers then read should allocate
/// that slot on its own NUMA node (Linux places a page on the node of the CPU that first touches
/// it), so the writes stay local and only the peers' reads cross the SMP link; a rank that drives a
/// GPU should sit on the NUMA node the GPU's PCIe tree hangs from, so host-device copies do not
/// cross it either. collx's shm transport places each rank's staging on the node of the CPUs the
/// rank runs on, which collx-run and run_processes pin with pin_cpus (docs/topology.md, "Rank
/// placement").
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <collx/topo/topology.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// Where one local rank should live.
struct rank_placement {
  int numa_node = -1;     ///< NUMA node id to allocate on (the CPU vertex's index); -1 if the topology has no CPU
  std::vector<int> cpus;  ///< logical CPUs of that node (empty if not known)
  int gpu = -1;           ///< GPU vertex id the rank drives, -1 when ranks are not GPU ranks
};

/// Placement of `local_rank` of `local_size` ranks on host 0 of `t`:
/// - if the machine has at least local_size GPUs, rank r drives the r-th GPU (by index) and lives on
///   the NUMA node at the root of that GPU's PCIe tree;
/// - otherwise ranks are spread over NUMA nodes in contiguous blocks proportional to each node's
///   CPU count (equal shares when counts are unknown), block edges rounded up as pin_cpus rounds
///   them (so with every CPU allowed, a rank pinned by pin_cpus runs on the node placed here):
///   8 ranks on two 16-core nodes -> 0-3 on the first, 4-7 on the second; 3 on two 2-core nodes
///   -> 0-1, 2.
/// @throws collx::error(invalid_argument) unless 0 <= local_rank < local_size.
inline rank_placement place_local_rank(const topology& t, int local_rank, int local_size) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    COLLX_THROW(errc::invalid_argument, "place_local_rank: rank " + std::to_string(local_rank) + " of " + std::to_string(local_size));
  rank_placement p;
  auto cpus_of = [&](int cpu) {
    const vertex& c = t.vertices[static_cast<std::size_t>(cpu)];
    return !c.cores.empty() ? c.cores : parse_cpulist(c.cpu_affinity);
  };
  const std::vector<int> gpus = t.gpus(0);
  if (static_cast<int>(gpus.size()) >= local_size) {
    p.gpu = gpus[static_cast<std::size_t>(local_rank)];
    const int cpu = t.cpu_of(p.gpu);
    if (cpu >= 0) p.numa_node = t.vertices[static_cast<std::size_t>(cpu)].index, p.cpus = cpus_of(cpu);
    return p;
  }
  const std::vector<int> cpus = t.of_kind(vertex_kind::cpu, 0);
  if (cpus.empty()) return p;
  std::vector<std::size_t> weight;
  std::size_t total = 0;
  for (int c : cpus) weight.push_back(std::max<std::size_t>(1, cpus_of(c).size())), total += weight.back();
  // Node k takes ranks [ceil(W_k / W * size), ceil(W_{k+1} / W * size)), W_k the CPUs before it:
  // pin_cpus's blocks, so a rank pinned there is placed on the node it runs on.
  const std::size_t size = static_cast<std::size_t>(local_size);
  std::size_t before = 0;
  for (std::size_t k = 0; k < cpus.size(); ++k) {
    const int lo = static_cast<int>((before * size + total - 1) / total);
    before += weight[k];
    const int hi = static_cast<int>((before * size + total - 1) / total);
    if (local_rank >= lo && local_rank < hi) {
      p.numa_node = t.vertices[static_cast<std::size_t>(cpus[k])].index;
      p.cpus = cpus_of(cpus[k]);
      return p;
    }
  }
  p.numa_node = t.vertices[static_cast<std::size_t>(cpus.back())].index;
  p.cpus = cpus_of(cpus.back());
  return p;
}

/// The CPU to pin each of `local_size` ranks of host 0 to, given the CPUs they may use (`allowed`,
/// the launcher's affinity mask): the ranks spread over the NUMA nodes in contiguous blocks
/// proportional to each node's allowed CPUs (as place_local_rank, so neighbours in rank order, and
/// so in a ring, share a node), the j-th rank of a node on the node's j-th allowed CPU in `allowed`
/// order. Allowed CPUs that no NUMA node of `t` lists form one more node after the others. Every
/// rank gets its own CPU. Empty when the ranks outnumber the allowed CPUs (then nothing should be
/// pinned) or `local_size` < 1. Open MPI's mpirun binds one rank per core the same way for 2 ranks
/// and by NUMA node or socket above that (its --map-by default).
inline std::vector<int> pin_cpus(const topology& t, const std::vector<int>& allowed, int local_size) {
  if (local_size < 1 || static_cast<std::size_t>(local_size) > allowed.size()) return {};
  // The allowed CPUs of each node, in `allowed` order; the last group holds CPUs of no node.
  const std::vector<int> nodes = t.of_kind(vertex_kind::cpu, 0);
  std::vector<std::vector<int>> groups(nodes.size() + 1);
  for (int cpu : allowed) {
    std::size_t g = nodes.size();
    for (std::size_t k = 0; k < nodes.size() && g == nodes.size(); ++k) {
      const vertex& v = t.vertices[static_cast<std::size_t>(nodes[k])];
      const std::vector<int> listed = !v.cores.empty() ? v.cores : parse_cpulist(v.cpu_affinity);
      if (std::find(listed.begin(), listed.end(), cpu) != listed.end()) g = k;
    }
    groups[g].push_back(cpu);
  }
  // Group k takes ranks [ceil(A_k / A * size), ceil(A_{k+1} / A * size)), A_k the allowed CPUs
  // before it (rounded up, so one rank lands on the first node): never more ranks than it has
  // CPUs, since size <= A.
  std::vector<int> out;
  const std::size_t total = allowed.size(), size = static_cast<std::size_t>(local_size);
  std::size_t before = 0;
  for (const std::vector<int>& g : groups) {
    const std::size_t lo = (before * size + total - 1) / total;
    before += g.size();
    const std::size_t hi = (before * size + total - 1) / total;
    for (std::size_t j = 0; j < hi - lo; ++j) out.push_back(g[j]);
  }
  return out;
}

/// The NUMA node local rank `local_rank` of `local_size` should allocate on (see place_local_rank);
/// -1 if the topology has no CPU. @throws collx::error(invalid_argument) for a bad rank.
inline int numa_node_for_local_rank(const topology& t, int local_rank, int local_size) {
  return place_local_rank(t, local_rank, local_size).numa_node;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
