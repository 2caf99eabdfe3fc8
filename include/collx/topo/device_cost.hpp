/// @file topo/device_cost.hpp
/// The machine's wiring in collx's device collectives: the choice between one-shot and two-shot
/// of the device all-reduce (gpu::direct_form, cuda/device_plan.hpp), from what a rank reads from
/// all its peers at once (the topology model's routes and link figures) instead of collx's default
/// (an NVSwitch H100/H200); and the ring of algo::ring calls on device (device_ring_order).
/// Plain C++: it needs neither CUDA nor a GPU. Use it as
///
///     gpu::device_options o;
///     o.cost = collx::topo::device_direct_cost(collx::topo::discover(), gpus);  // or a topology file
///     gpu::device_communicator dc(host, o);
///
/// where `gpus` are the ranks' GPU vertices in rank order (discovered_device_direct_cost does it
/// for every GPU this process sees). Rank 0's figures decide for every rank.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <collx/cuda/device_plan.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/topo/routing.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

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
  for (int g : gpus)
    if (g < 0 || static_cast<std::size_t>(g) >= t.vertices.size() || t.vertices[static_cast<std::size_t>(g)].kind != vertex_kind::gpu)
      COLLX_THROW(errc::invalid_argument, "topo::device_ring_order: " + std::to_string(g) +
                                              " is not a GPU vertex of the topology (pass t.gpu(d) for CUDA device d)");
  if (gpus.size() < 2) return {};
  router r(t, routing);
  const ring_set rings = search_rings(r, gpus);
  return ring_in_rank_order(rings.rings.at(0), gpus);
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
