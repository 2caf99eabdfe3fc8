/// @file topo/device_cost.hpp
/// The machine's wiring in collx's device collectives: the choice between one-shot and two-shot
/// of the device all-reduce (gpu::direct_form, cuda/device_plan.hpp), from what a rank reads from
/// all its peers at once (the topology model's routes and link figures) instead of collx's default
/// (an NVSwitch H100/H200); the ring of algo::ring calls on device (device_ring_order); and the
/// rate of that ring's hops, which decides from which size calls without an algorithm take it
/// (device_ring_cost, cuda/ring_plan.hpp ring_crossover_bytes).
/// Plain C++: it needs neither CUDA nor a GPU. Use it as
///
///     gpu::device_options o;  // collx/cuda/device_communicator.hpp (CUDA's headers, no GPU)
///     const collx::topo::topology t = collx::topo::discover();  // or a topology file
///     o.cost = collx::topo::device_direct_cost(t, gpus);
///     o.ring_order = collx::topo::device_ring_order(t, gpus);
///     o.ring_hops = collx::topo::device_ring_cost(t, gpus);
///     gpu::device_communicator dc(host, o);
///
/// where `gpus` are the ranks' GPU vertices in rank order (discovered_device_direct_cost does the
/// first for every GPU this process sees). Rank 0's figures decide for every rank.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
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

/// The ring of collx's device ring calls (gpu::device_options::ring_order, algo::ring on device)
/// for one rank on each of `gpus` (GPU vertex ids of `t` in rank order, e.g. t.gpu(d) for CUDA
/// device d; not device numbers): the first ring
/// topo::search_rings finds over them (the fastest bottleneck, hops over the fastest links: NVLink
/// where the GPUs have it), as ranks. A device ring runs one channel, so only the first ring is
/// used. Empty (the rank order) for fewer than two GPUs. `routing`: peer access as the router sees
/// it (route_options), as for device_direct_cost.
/// @throws collx::error (errc::invalid_argument) for ids that are not GPU vertices of `t`, and for
///         GPUs the search rejects (repeated, or GPUs no ring can join).
inline std::vector<int> device_ring_order(const topology& t, const std::vector<int>& gpus, const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::device_ring_order");
  if (gpus.size() < 2) return {};
  router r(t, routing);
  const ring_set rings = search_rings(r, gpus);
  return ring_in_rank_order(rings.rings.at(0), gpus);
}

/// gpu::ring_cost for collx's device ring over device_ring_order's ring on `gpus` (as there):
/// hop_bytes_per_second the rate of that ring's slowest hop with every hop moving at once (one
/// channel: evaluate_rings, link sharing counted, NCCL's achievable link figures), step_seconds
/// from `base` (collx's barrier, not a link property). `base` for fewer than two GPUs. With
/// device_direct_cost's figures it sets from which size calls without an algorithm take the ring
/// (gpu::device_options::ring_hops, ring_min_bytes): on NVSwitch one hop gets what a rank reads
/// from all its peers, so never; over a DGX-1's NVLink (40 GB/s), where the direct forms stage the
/// pairs without peer access through host memory, all-reduces from 119 KiB on 8 ranks.
/// @throws collx::error (errc::invalid_argument) as device_ring_order.
inline gpu::ring_cost device_ring_cost(const topology& t, const std::vector<int>& gpus, gpu::ring_cost base = {},
                                       const route_options& routing = {}) {
  detail::require_gpu_vertices(t, gpus, "topo::device_ring_cost");
  if (gpus.size() < 2) return base;
  router r(t, routing);
  const ring_set rings = search_rings(r, gpus);
  const ring_evaluation e = evaluate_rings(r, {rings.rings.at(0)});
  if (std::isfinite(e.min_channel_GBps) && e.min_channel_GBps > 0) base.hop_bytes_per_second = e.min_channel_GBps * 1e9;
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
/// (cost = device_direct_cost, ring_order = device_ring_order, ring_hops = device_ring_cost),
/// with `staging_bytes` of staging, sends calls of `phase` without an algorithm to the ring:
/// gpu::ring_crossover_bytes_where, the direct forms in device memory where all_pairs_peer_access,
/// the ring's hops where each of them has peer access. SIZE_MAX: never (fewer than two GPUs, or
/// GPUs no ring joins, too). What collx-topo prints.
/// @throws collx::error (errc::invalid_argument) as device_ring_order, or for staging the
///         communicator refuses (gpu::workspace_layout::for_staging).
inline std::size_t device_ring_min_bytes(const topology& t, const std::vector<int>& gpus, gpu::ring_phase phase,
                                         std::size_t staging_bytes = gpu::default_staging_bytes, const route_options& routing = {}) {
  const std::size_t slot = gpu::workspace_layout::for_staging(staging_bytes).slot_bytes;
  detail::require_gpu_vertices(t, gpus, "topo::device_ring_min_bytes");
  if (gpus.size() < 2) return SIZE_MAX;
  std::vector<int> ring;
  try {
    ring = device_ring_order(t, gpus, routing);
  } catch (const collx::error&) {  // GPUs no ring joins
    return SIZE_MAX;
  }
  router r(t, routing);
  bool hops_peer = true;
  for (std::size_t k = 0; k < ring.size(); ++k) {
    const int a = gpus[static_cast<std::size_t>(ring[k])], b = gpus[static_cast<std::size_t>(ring[(k + 1) % ring.size()])];
    hops_peer = hops_peer && !r.between(a, b).host_staged && !r.between(b, a).host_staged;
  }
  return gpu::ring_crossover_bytes_where(phase, static_cast<int>(gpus.size()), slot, all_pairs_peer_access(t, gpus, routing),
                                         device_direct_cost(t, gpus, {}, routing), hops_peer, device_ring_cost(t, gpus, {}, routing));
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
