/// @file topo/device_cost.hpp
/// The machine's wiring in collx's device collectives: the choice between one-shot and two-shot
/// of the device all-reduce (gpu::direct_form, cuda/device_plan.hpp), from what a rank reads from
/// all its peers at once (the topology model's routes and link figures) instead of collx's default
/// (an NVSwitch H100/H200); the rings of algo::ring calls on device (device_rings); and the
/// rate of those rings' hops, which decides from which size calls without an algorithm take it
/// (device_ring_cost, cuda/ring_plan.hpp ring_crossover_bytes).
/// Plain C++: it needs neither CUDA nor a GPU. A device communicator reads its machine this way
/// itself when created (device_options::discover_wiring: device_wiring on rank 0, from the ranks'
/// PCI bus ids). To decide from a topology file instead, or to look first:
///
///     collx::gpu::device_options o;  // collx/cuda/device_communicator.hpp (CUDA's headers, no GPU)
///     // topo/nvidia_smi.hpp; `text`: the file's contents (nvidia-smi topo -m or NCCL XML); or discover()
///     const collx::topo::topology t = collx::topo::read_topology(text, "topo.txt");
///     o.cost = collx::topo::device_direct_cost(t, gpus);
///     o.rings = collx::topo::device_rings(t, gpus);
///     o.ring_hops = collx::topo::device_ring_cost(t, gpus);
///     collx::gpu::device_communicator dc(host, o);
///
/// where `gpus` are the ranks' GPU vertices in rank order (discovered_device_direct_cost does the
/// first for every GPU this process sees). Rank 0's figures decide for every rank.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <collx/cuda/device_plan.hpp>
#include <collx/cuda/ring_plan.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/topo/routing.hpp>

namespace collx {
inline namespace v0 {
namespace topo {
namespace detail {
/// Throws unless every id of `gpus` is a GPU vertex of `t`, each once (`who` names the caller).
inline void require_gpu_vertices(const topology& t, const std::vector<int>& gpus, const char* who) {
  for (std::size_t k = 0; k < gpus.size(); ++k) {
    const int g = gpus[k];
    if (g < 0 || static_cast<std::size_t>(g) >= t.vertices.size() || t.vertices[static_cast<std::size_t>(g)].kind != vertex_kind::gpu)
      COLLX_THROW(errc::invalid_argument, std::string(who) + ": " + std::to_string(g) +
                                              " is not a GPU vertex of the topology (pass t.gpu(d) for CUDA device d)");
    if (std::find(gpus.begin(), gpus.begin() + static_cast<std::ptrdiff_t>(k), g) != gpus.begin() + static_cast<std::ptrdiff_t>(k))
      COLLX_THROW(errc::invalid_argument, std::string(who) + ": GPU vertex " + std::to_string(g) + " is listed twice");
  }
}
}  // namespace detail

/// gpu::direct_cost for collx's device communicator with one rank on each of `gpus` (GPU vertex
/// ids of `t` in rank order, distinct, ranks of one machine contiguous): call_seconds from `base`
/// (collx's own launch and barrier cost, not a link property), peer_read_bytes_per_second the rate
/// at which the slowest rank reads from all its peers at once in a one-shot all-reduce: world - 1
/// inputs over the model's busiest link for those flows (link sharing counted, NCCL's achievable
/// link figures; a pair without peer access is host-staged, as the router decides). `base` when
/// there are fewer than two GPUs. The device communicator takes these figures only where every
/// pair of its GPUs has peer access: otherwise some pairs go through shared host memory
/// (workspace_memory mixed or host) and gpu::host_memory_direct_cost decides (device_options::cost
/// ignored). `routing`: peer access as the router sees it (route_options).
/// @throws collx::error (errc::invalid_argument) for GPUs the model rejects (not GPU vertices,
///         repeated, or machines not contiguous).
inline gpu::direct_cost device_direct_cost(const topology& t, const std::vector<int>& gpus, gpu::direct_cost base = {},
                                           const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::device_direct_cost");
  if (gpus.size() < 2) return base;
  model_options o;
  o.routing = routing;
  o.search = false;  // only routes matter here, not rings
  model m(t, gpus, o);
  // One-shot flows (every rank sends its whole input to every peer) at a size the model runs
  // one-shot; bandwidth time is linear in the size.
  const std::size_t probe = 4096;
  const prediction p = m.predict(collective::allreduce, algo::direct, protocol::simple, probe);
  if (!p.valid || !(p.bandwidth_s > 0)) return base;
  base.peer_read_bytes_per_second = static_cast<double>(gpus.size() - 1) * static_cast<double>(probe) / p.bandwidth_s;
  return base;
}

/// The rings of collx's device ring calls (gpu::device_options::rings, algo::ring on device), one
/// per channel, for one rank on each of `gpus` (GPU vertex ids of `t` in rank order, e.g. t.gpu(d)
/// for CUDA device d; not device numbers): the rings topo::search_rings finds over them (the most
/// bandwidth in all with at most gpu::max_device_channels of them, hops over the fastest links:
/// NVLink where the GPUs have it), as ranks. A DGX-1 gives six (each NVLink once each way).
/// Empty (one ring in the rank order) for fewer than two GPUs. `routing`: peer access as the
/// router sees it (route_options), as for device_direct_cost.
/// @throws collx::error (errc::invalid_argument) for ids that are not GPU vertices of `t`, and for
///         GPUs the search rejects (repeated, or GPUs no ring can join).
inline std::vector<std::vector<int>> device_rings(const topology& t, const std::vector<int>& gpus, const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::device_rings");
  if (gpus.size() < 2) return {};
  router r(t, routing);
  ring_search_options most;
  most.max_channels = gpu::max_device_channels;
  std::vector<int> sorted = gpus;  // the same search whichever rank drives which GPU
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int>> rings;
  for (const std::vector<int>& ring : search_rings(r, sorted, most).rings) rings.push_back(ring_in_rank_order(ring, gpus));
  return rings;
}

namespace detail {
/// What each rank reads from its ring predecessors, in GB/s, with every channel of `rings` (ranks,
/// rank r on gpus[r]) moving at once: the channels times the slowest channel's slowest hop
/// (evaluate_rings: link sharing counted, NCCL's achievable link figures), as the device ring
/// gives every channel an equal part. 0 where that is not finite and positive.
inline double rings_read_GBps(router& r, const std::vector<int>& gpus, const std::vector<std::vector<int>>& rings) {
  std::vector<std::vector<int>> vertices;
  for (const std::vector<int>& ring : rings) {
    vertices.emplace_back();
    for (int rank : ring) vertices.back().push_back(gpus[static_cast<std::size_t>(rank)]);
  }
  const double g = static_cast<double>(rings.size()) * evaluate_rings(r, vertices).min_channel_GBps;
  return std::isfinite(g) && g > 0 ? g : 0.0;
}
}  // namespace detail

/// gpu::ring_cost for collx's device ring over device_rings' rings on `gpus` (as there):
/// hop_bytes_per_second what each rank reads from its predecessors with every channel moving at
/// once (the channels times the slowest channel's slowest hop; evaluate_rings), step_seconds
/// from `base` (collx's barrier, not a link property). `base` for fewer than two GPUs. With
/// device_direct_cost's figures it sets from which size calls without an algorithm take the ring
/// (gpu::device_options::ring_hops, ring_min_bytes): on NVSwitch the rings get what a rank reads
/// from all its peers, so never; over a DGX-1's NVLink (six rings, 120 GB/s), where the direct
/// forms stage the pairs without peer access through host memory, all-reduces from 93 KiB on 8
/// ranks.
/// @throws collx::error (errc::invalid_argument) as device_rings.
inline gpu::ring_cost device_ring_cost(const topology& t, const std::vector<int>& gpus, gpu::ring_cost base = {},
                                       const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::device_ring_cost");
  if (gpus.size() < 2) return base;
  const std::vector<std::vector<int>> rings = device_rings(t, gpus, routing);
  router r(t, routing);
  if (const double g = detail::rings_read_GBps(r, gpus, rings); g > 0) base.hop_bytes_per_second = g * 1e9;
  return base;
}

/// True when the router gives every pair of `gpus` (GPU vertex ids of `t`) peer access: the
/// device communicator then keeps every workspace in device memory (workspace_memory device);
/// otherwise some pairs go through shared host memory (mixed, or host where no pair has it). A
/// pair counts as without when the router host-stages it (peer access off, across sockets, PCIe
/// beyond NCCL's P2P level: route_options); on a live machine the communicator asks the CUDA
/// runtime. @throws collx::error (errc::invalid_argument) for ids that are not GPU vertices.
inline bool all_pairs_peer_access(const topology& t, const std::vector<int>& gpus, const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::all_pairs_peer_access");
  router r(t, routing);
  for (std::size_t a = 0; a < gpus.size(); ++a)
    for (std::size_t b = 0; b < gpus.size(); ++b)
      if (gpus[a] != gpus[b] && r.between(gpus[a], gpus[b]).host_staged) return false;
  return true;
}

/// The size (bytes of vector, as gpu::device_options::ring_min_bytes counts them) from which a
/// device communicator with one rank on each of `gpus` (in rank order) and this file's figures
/// (cost = device_direct_cost, rings = device_rings, ring_hops = device_ring_cost),
/// with `staging_bytes` of staging, sends calls of `phase` without an algorithm to the ring:
/// gpu::ring_crossover_bytes_where, the direct forms in device memory where all_pairs_peer_access,
/// the ring's hops where each of them has peer access. SIZE_MAX: never (fewer than two GPUs, or
/// GPUs no ring joins, too). What collx-topo prints.
/// @throws collx::error (errc::invalid_argument) as device_rings, or for staging the
///         communicator refuses (gpu::workspace_layout::for_staging).
inline std::size_t device_ring_min_bytes(const topology& t, const std::vector<int>& gpus, gpu::ring_phase phase,
                                         std::size_t staging_bytes = gpu::default_staging_bytes, const route_options& routing = {}) {
  const std::size_t slot = gpu::workspace_layout::for_staging(staging_bytes).slot_bytes;
  detail::require_gpu_vertices(t, gpus, "topo::device_ring_min_bytes");
  if (gpus.size() < 2) return SIZE_MAX;
  std::vector<std::vector<int>> rings;
  try {
    rings = device_rings(t, gpus, routing);
  } catch (const collx::error&) {  // GPUs no ring joins
    return SIZE_MAX;
  }
  router r(t, routing);
  bool hops_peer = true;
  for (const std::vector<int>& ring : rings)
    for (std::size_t k = 0; k < ring.size(); ++k) {
      const int a = gpus[static_cast<std::size_t>(ring[k])], b = gpus[static_cast<std::size_t>(ring[(k + 1) % ring.size()])];
      hops_peer = hops_peer && !r.between(a, b).host_staged && !r.between(b, a).host_staged;
    }
  return gpu::ring_crossover_bytes_where(phase, static_cast<int>(gpus.size()), slot, all_pairs_peer_access(t, gpus, routing),
                                         device_direct_cost(t, gpus, {}, routing), hops_peer, device_ring_cost(t, gpus, {}, routing));
}

/// A device communicator's ranks as device_wiring takes them: one GPU each, all different.
struct device_wiring_ranks {
  /// Rank r's GPU's PCI bus id, in any form normalize_busid reads (cudaDeviceGetPCIBusId's, NVML's).
  std::vector<std::string> busids;
  /// Rank r's GPU's compute capability x10 (0: not known), for its model where the PCI device id
  /// does not tell it (gpu_arch_for_sm). Empty: none known.
  std::vector<int> sm;
  /// Peer access as the CUDA runtime grants it: bit q of reach[r] set when rank r's GPU reads and
  /// writes rank q's device memory (device_communicator's reach). Empty: the router's own view
  /// (NVLink, or PCIe within NCCL's P2P level, route_options).
  std::vector<std::uint64_t> reach;
  /// The rings to rate, one per channel (each every rank once, in ring order; at most
  /// gpu::max_device_channels); empty: device_wiring chooses them.
  std::vector<std::vector<int>> rings;
};

/// What device_wiring read: its figures where `found`, else why not.
struct device_wiring_result {
  bool found = false;           ///< every rank's GPU was found, with its model and NVLinks, and the figures come from them
  gpu::direct_cost cost{};      ///< `base_cost` with peer_read_bytes_per_second from device_direct_cost where found
  std::vector<std::vector<int>> rings;  ///< the rings rated (ranks, one per channel): the given ones, or the chosen ones; empty where not found
  gpu::ring_cost ring_hops{};  ///< `base_ring` with hop_bytes_per_second what those rings read at (device_ring_cost) where found
  std::string note;             ///< one line: what was read (NVLinks, rates, ring, time taken), or why nothing was
};

/// The wiring between a device communicator's GPUs, as collx's device communicator reads it on
/// rank 0 when created (gpu::device_options::discover_wiring), NCCL's topology detection at init
/// being the model: the CPUs of `o.sysfs`; only the ranks' GPUs from its PCI tree, by bus id, so
/// that GPUs the calling process does not see (CUDA_VISIBLE_DEVICES) count, which is why the CUDA
/// runtime is not asked (o.cuda is ignored); their NVLinks through NVML (unless o.nvml is false:
/// then PCIe only); each GPU's model from its PCI device id, else its compute capability; peer
/// access per pair from ranks.reach where given (then PCIe peer access at any distance, as the
/// driver grants it). Then:
///   - cost: device_direct_cost's read rate;
///   - rings: ranks.rings where given; else, of one ring in the rank order, the rings the search
///     finds over the fastest links (device_rings) and gpu::ring_through_reach's ring, those whose
///     every hop has peer access (all, without ranks.reach), the ones that read fastest (the
///     channels times the slowest channel's slowest hop); the rank order on a tie or where none
///     qualifies, so a machine whose GPUs are all alike (NVSwitch) keeps the rank order's bits;
///   - ring_hops: what those rings read at with every hop moving at once (evaluate_rings).
/// Not found, with the reason in `note` and base_cost, base_ring and no ring returned, for fewer
/// than two ranks, a rank without a bus id, ranks sharing a GPU, sizes of sm or reach other than
/// the ranks', given rings that are too many or not permutations of the ranks, a GPU missing from the PCI tree or of a model collx does not know, NVML failing
/// (no library, no driver, a failed call: its NVLinks would be missing), or discovery failing.
/// @throws std::bad_alloc only.
inline device_wiring_result device_wiring(const device_wiring_ranks& ranks, const discover_options& o = {}, gpu::direct_cost base_cost = {},
                                          gpu::ring_cost base_ring = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  device_wiring_result w;
  w.cost = base_cost;
  w.ring_hops = base_ring;
  const std::size_t n = ranks.busids.size();
  const auto not_found = [&](std::string why) {
    w = device_wiring_result{false, base_cost, {}, base_ring, std::move(why)};
    return w;
  };
  if (n < 2) return not_found("one rank: no wiring to read");
  if (n > 64 || (!ranks.sm.empty() && ranks.sm.size() != n) || (!ranks.reach.empty() && ranks.reach.size() != n))
    return not_found("device_wiring_ranks: sm and reach must have one entry per rank (of at most 64)");
  std::vector<std::string> ids;
  for (std::size_t r = 0; r < n; ++r) {
    ids.push_back(detail::normalize_busid(ranks.busids[r]));
    if (ids.back().empty()) return not_found("rank " + std::to_string(r) + "'s GPU has no PCI bus id");
    for (std::size_t q = 0; q < r; ++q)
      if (ids[q] == ids[r])
        return not_found("ranks " + std::to_string(q) + " and " + std::to_string(r) + " share GPU " + ids[r] + ": no wiring between them");
  }
  try {
    topology t = discover_cpus(o);
    if (o.pci) discover_pci(t, o, &ids);
    std::vector<int> gpus;
    for (std::size_t r = 0; r < n; ++r) {
      int v = -1;
      for (int g : t.gpus())
        if (t.vertices[static_cast<std::size_t>(g)].busid == ids[r]) v = g;
      if (v < 0) return not_found("rank " + std::to_string(r) + "'s GPU " + ids[r] + " is not on the PCI tree of " + o.sysfs);
      vertex& x = t.vertices[static_cast<std::size_t>(v)];
      const int sm = ranks.sm.empty() ? 0 : ranks.sm[r];
      if ((!x.arch || x.arch == &unknown_gpu_arch) && sm > 0 && gpu_arch_for_sm(sm))
        x.arch = gpu_arch_for_sm(sm), x.device = std::string(x.arch->name);
      if (!x.arch || x.arch == &unknown_gpu_arch)
        return not_found("rank " + std::to_string(r) + "'s GPU " + ids[r] + " is of a model collx has no figures for (" + x.device +
                         (sm > 0 ? ", compute capability " + std::to_string(sm / 10) + "." + std::to_string(sm % 10) : std::string()) + ")");
      gpus.push_back(v);
    }
    if (o.nvml) {
      const std::size_t before = t.notes.size();
      nvlink_gaps gaps;
      discover_nvlinks_nvml(t, o, &gaps);
      if (!gaps.complete()) {
        std::string why = "NVLinks not read";
        for (std::size_t k = before; k < t.notes.size(); ++k)  // the first is the one that says why
          if (t.notes[k].find("not discovered") != std::string::npos) {
            why += ": " + t.notes[k];
            break;
          }
        return not_found(why);
      }
    }
    route_options routing;
    if (!ranks.reach.empty()) {
      routing.p2p_max = path_type::sys;  // the driver's answer, whatever the distance
      for (std::size_t a = 0; a < n; ++a)
        for (std::size_t b = 0; b < n; ++b)
          if (a != b) {
            peer_info p;
            p.from = gpus[a], p.to = gpus[b], p.access = ((ranks.reach[a] >> b) & 1u) != 0;
            t.peers.push_back(p);
          }
    }
    w.cost = device_direct_cost(t, gpus, base_cost, routing);

    // The rings: given, or the fastest of the candidates whose hops all have peer access.
    router rt(t, routing);
    const auto all_hops_reach = [&](const std::vector<std::vector<int>>& rings) {
      for (const std::vector<int>& ring : rings)
        for (std::size_t k = 0; k < ring.size() && !ranks.reach.empty(); ++k) {
          const auto a = static_cast<std::size_t>(ring[k]), b = static_cast<std::size_t>(ring[(k + 1) % ring.size()]);
          if (((ranks.reach[a] >> b) & 1u) == 0 || ((ranks.reach[b] >> a) & 1u) == 0) return false;
        }
      return true;
    };
    std::vector<int> rank_order(n);
    for (std::size_t r = 0; r < n; ++r) rank_order[r] = static_cast<int>(r);
    std::vector<std::vector<int>> rings = ranks.rings;
    if (rings.empty()) {
      std::vector<std::vector<std::vector<int>>> candidates{{rank_order}};
      try {
        candidates.push_back(device_rings(t, gpus, routing));
      } catch (const collx::error&) {  // no ring joins the GPUs: the other candidates
      }
      if (!ranks.reach.empty() && n <= static_cast<std::size_t>(gpu::max_device_world)) {
        const gpu::ring_order through = gpu::ring_through_reach(ranks.reach, static_cast<int>(n));
        candidates.push_back({std::vector<int>(through.order, through.order + through.world)});
      }
      rings = {rank_order};
      double best = -1;
      for (const std::vector<std::vector<int>>& c : candidates) {
        if (!all_hops_reach(c)) continue;
        const double g = detail::rings_read_GBps(rt, gpus, c);
        if (g > best * (1 + 1e-9)) best = g, rings = c;
      }
    } else {
      if (rings.size() > static_cast<std::size_t>(gpu::max_device_channels))
        return not_found("device_wiring_ranks::rings has more than " + std::to_string(gpu::max_device_channels) + " rings");
      for (const std::vector<int>& ring : rings) {
        std::vector<int> sorted = ring;
        std::sort(sorted.begin(), sorted.end());
        if (sorted != rank_order) return not_found("a ring of device_wiring_ranks::rings is not a permutation of the ranks");
      }
    }
    const double read_GBps = detail::rings_read_GBps(rt, gpus, rings);
    w.rings = rings;
    if (read_GBps > 0) w.ring_hops.hop_bytes_per_second = read_GBps * 1e9;

    int fewest = -1, most = 0;  // NVLinks per GPU, to the other GPUs and NVSwitches
    for (int g : gpus) {
      int links = 0;
      for (int l : t.incident(g))
        if (t.links[static_cast<std::size_t>(l)].kind == link_kind::nvlink) links += t.links[static_cast<std::size_t>(l)].count;
      fewest = fewest < 0 ? links : std::min(fewest, links), most = std::max(most, links);
    }
    std::string ring_text;  // "ring 0 1 2 3", or "2 rings (0 1 2 3 / 0 3 2 1)"
    for (const std::vector<int>& ring : rings) {
      ring_text += ring_text.empty() ? "" : " / ";
      for (std::size_t k = 0; k < ring.size(); ++k) ring_text += (k ? " " : "") + std::to_string(ring[k]);
    }
    const std::string given = ranks.rings.empty() ? "" : "the given ";
    ring_text = rings.size() == 1 ? given + "ring " + ring_text : given + std::to_string(rings.size()) + " rings (" + ring_text + ")";
    char took[32], rates[120];
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::snprintf(took, sizeof took, " in %.0f ms", ms);
    std::snprintf(rates, sizeof rates, "; each rank reads its peers at %.1f GB/s; ", w.cost.peer_read_bytes_per_second / 1e9);
    char hops[80];
    std::snprintf(hops, sizeof hops, " with hops at %.1f GB/s%s", w.ring_hops.hop_bytes_per_second / 1e9, rings.size() > 1 ? " in all" : "");
    const std::string links = most == 0 ? std::string("no NVLink")
                              : fewest == most ? std::to_string(most) + " NVLinks per GPU"
                                               : std::to_string(fewest) + " to " + std::to_string(most) + " NVLinks per GPU";
    w.note = "read from " + o.sysfs + (o.nvml ? " and NVML" : "") + took + " (" + links + ")" + rates + ring_text + hops;
    w.found = true;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    return not_found(std::string("discovery failed: ") + e.what());
  }
  return w;
}

/// device_direct_cost for every GPU this process sees (topo::discover with `o`), in CUDA device
/// order: the ranks of a device communicator with one rank per GPU of this machine. `base` when
/// this process sees fewer than two GPUs (e.g. CUDA_VISIBLE_DEVICES limits each rank to its own).
inline gpu::direct_cost discovered_device_direct_cost(const discover_options& o = {}, gpu::direct_cost base = {}) {
  const topology t = discover(o);
  std::vector<int> gpus = t.gpus();
  std::sort(gpus.begin(), gpus.end(), [&](int a, int b) {
    return t.vertices[static_cast<std::size_t>(a)].index < t.vertices[static_cast<std::size_t>(b)].index;
  });
  return device_direct_cost(t, gpus, base);
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
