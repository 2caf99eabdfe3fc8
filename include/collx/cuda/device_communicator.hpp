/// @file cuda/device_communicator.hpp
/// collx's own communicator on device memory: the ranks of one node, one GPU each (several ranks
/// may share a GPU), each rank's workspace (flags + a bounded staging buffer) mapped into each
/// peer whose GPU reaches it over CUDA IPC, or used directly between ranks of one process; the
/// pairs without peer access go through one shared pinned host-memory object instead (memory
/// mixed), or every pair does (memory host; workspace_memory). Built collectively over any collx
/// host communicator (shared memory,
/// threads, MPI), which carries the IPC handles.
/// The collectives that run on it are in cuda/device_collectives.cuh (nvcc); this header is host
/// C++ with the CUDA runtime.
///
/// Like NCCL's, calls are stream-ordered: they enqueue a kernel on the caller's stream and return;
/// every rank must make the same collective calls in the same order (sends and recvs match per
/// pair of ranks, in order). One communicator's calls run one at a time in the order made, also
/// on different streams: a call on another stream than the previous one of its kind (eager, or
/// in the same capture) waits for it (order_after_previous_call); between graph launches and
/// eager calls the caller orders. Unlike NCCL's, a call that waits too long for
/// a peer, or whose peers make a different call, ends and reports a collx::error at the next
/// synchronize() / check() (and every later call fails at once): see device_plan.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <collx/all_gather.hpp>
#include <collx/barrier.hpp>
#include <collx/broadcast.hpp>
#include <collx/communicator.hpp>
#include <collx/cuda/device_plan.hpp>
#include <collx/cuda/kernel_registry.hpp>
#include <collx/cuda/ring_plan.hpp>
#include <collx/cuda/runtime.hpp>
#include <collx/cuda/shared_host_memory.hpp>
#include <collx/environment.hpp>
#include <collx/error.hpp>
#include <collx/node_layout.hpp>  // node_id_from_environment
#include <collx/topo/device_cost.hpp>  // device_wiring
#include <collx/topo/discover.hpp>

namespace collx {
inline namespace v0 {
namespace detail {
/// Errors name a device communicator's setup exchange (an all_gather of gpu::peer_record over the
/// host communicator) as the call the user made.
inline const bool device_setup_exchange_named =
    remember_exchange_call(type_signature_hash<gpu::peer_record>, "collx::gpu::device_communicator's constructor");
}  // namespace detail

namespace gpu {

/// Options of a device communicator.
struct device_options {
  /// CUDA device ordinal of this rank; -1: the calling thread's current device (cudaGetDevice).
  int device = -1;
  /// Bytes of staging per rank: two collective slots of staging_bytes / 2 (the workspace adds a
  /// third such slot for send/recv); bounds the memory a communicator takes however large the
  /// calls: device memory; or pinned host memory, one object of size() workspaces that every rank
  /// maps, with workspace_memory::host; both with mixed. Must be equal on every rank. Default 8 MiB;
  /// 8 KiB to 1 TiB (workspace_layout::for_staging).
  std::size_t staging_bytes = default_staging_bytes;
  /// How long a kernel waits for a peer's flag before it gives up (errc::timeout); default the host
  /// communicator's timeout (COLLX_TIMEOUT).
  std::chrono::milliseconds timeout{0};
  /// All-reduces of at least this many bytes per rank (count x sizeof(T)) run two-shot, smaller
  /// ones one-shot (direct_form in device_plan.hpp). 0: two_shot_crossover_bytes(size(), cost)
  /// (host_memory_direct_cost instead of cost when some workspace is reached in host memory),
  /// the size from which the cost model predicts two-shot faster (never on two ranks, nor where
  /// every rank is on one GPU with device memory: it has no links to save); SIZE_MAX:
  /// always one-shot; 1: always two-shot. Rank 0's choice holds for every rank (sent to the others
  /// when the communicator is created), so ranks cannot disagree on a call's form.
  std::size_t two_shot_min_bytes = 0;
  /// The figures two_shot_min_bytes = 0 decides by: left at the default (an NVSwitch H100/H200),
  /// rank 0 reads them from the machine (discover_wiring); topo::device_direct_cost
  /// (collx/topo/device_cost.hpp) derives them from a topology file.
  /// Ignored unless the workspaces are all in device memory (host_memory_direct_cost decides then).
  /// Where every rank is on one GPU it does not choose two-shot (one-shot at every size) but still
  /// sets ring_min_bytes' default.
  direct_cost cost{};
  /// Calls of all_reduce, reduce_scatter and all_gather without an algorithm (or algo::automatic)
  /// with a commutative op take the ring (algo::ring) from this many bytes of vector on (count x
  /// sizeof(T) for all_reduce; size() x recv_count x sizeof(T) for reduce_scatter, size() x
  /// send_count x sizeof(T) for all_gather: nccl-tests' size), and the direct forms below it.
  /// SIZE_MAX: never; 1: always. 0 (the default): the host communicator's algorithm_overrides
  /// (COLLX_ALGO) where they name ring (always) or direct (never) for the collective, else
  /// ring_crossover_bytes_where of the figures (cost and ring_hops; host memory's where the
  /// workspaces or the ring's hops are there), per collective: never unless ring_hops (given, or
  /// read from the machine) gives the hops' rate. Rank 0's choice holds for every rank. The ring's
  /// bits are not the rank-order fold's (see gpu::all_reduce<algo::ring>): for those at every
  /// size, call algo::direct or set SIZE_MAX here.
  std::size_t ring_min_bytes = 0;
  /// The figures of the ring's hops that ring_min_bytes = 0 decides by (with cost). Left at the
  /// default, rank 0 reads them from the machine (discover_wiring); where it cannot, the hop rate
  /// is not known and the ring never takes over. topo::device_ring_cost
  /// (collx/topo/device_cost.hpp) derives them from a topology file: over a DGX-1's NVLink, for
  /// instance, where the direct forms read the GPUs without peer access through host memory, the
  /// ring then takes over from 93 KiB (8 ranks, six channels). Ignored where a hop of a ring
  /// stages through host memory (host_memory_ring_cost decides then).
  ring_cost ring_hops{};
  /// Where the workspaces live (device_plan.hpp workspace_memory): automatic takes device memory
  /// where every rank's GPU has peer access to every other's, mixed where only some pairs have it
  /// (device memory between those, shared host memory between the others), and host where none
  /// do; host forces the
  /// host path for every pair (also between ranks of one GPU, e.g. to test it, or where peer
  /// access or CUDA IPC misbehaves). Ranks may differ only between automatic and one other choice.
  workspace_memory memory = workspace_memory::automatic;
  /// The rings of algo::ring calls (cuda/ring_plan.hpp), one per channel (at most
  /// max_device_channels): rings[c][k] is the rank at position k of channel c's ring, every rank
  /// once. Channels run at once, each carrying its part of the vector over its own blocks: rings
  /// over different links add their bandwidth (topo::device_rings: a DGX-1's six NVLink rings).
  /// Empty: the machine's rings (discover_wiring), else one ring in the rank order 0, 1, ...,
  /// size() - 1, or where one of its hops joins GPUs without peer access, the first ring whose
  /// hops all have it (ring_through_reach), if there is one. Rank 0's rings hold for every rank
  /// (sent to the others when the communicator is created). Apart from the host communicator's
  /// communicator_options::ring_order, which this does not read.
  /// @throws (from the constructor) collx::error (errc::invalid_argument) on every rank when a
  ///   rank's rings are more than max_device_channels, or one is empty or not a permutation of
  ///   its ranks.
  std::vector<std::vector<int>> rings = {};
  /// Pairs of ranks of this communicator (not GPU ids) to treat as without peer access (both
  /// directions), whatever the GPUs allow:
  /// their traffic goes through shared host memory (workspace_memory mixed, or host when no pair
  /// is left), as with NCCL_P2P_DISABLE for chosen pairs: for a pair whose peer access misbehaves,
  /// or to run the mixed path on one GPU. The union of every rank's pairs holds.
  /// @throws (from the constructor) collx::error (errc::invalid_argument) on every rank when a
  ///   rank lists a rank outside [0, size()).
  std::vector<std::pair<int, int>> no_peer_access = {};
  /// Whether rank 0 reads the machine's wiring when the communicator is created, for the figures
  /// left at their defaults above: cost's read rate (peer_read_bytes_per_second), rings (empty)
  /// and ring_hops' rate (hop_bytes_per_second 0), as NCCL reads its machine at init.
  /// topo::device_wiring (collx/topo/device_cost.hpp) finds the ranks' GPUs by PCI bus id in
  /// sysfs and their NVLinks through NVML (not through rank 0's CUDA runtime, which may not see
  /// every rank's GPU), with peer access as the CUDA runtime grants it (none between ranks that
  /// cannot see each other's GPUs: those go through host memory). Its rings are the rank order
  /// unless others are faster; given rings are rated as given. Where it cannot read the
  /// machine (ranks sharing a GPU, a GPU missing from sysfs or of a model collx has no figures
  /// for, NVML missing or failing) collx's defaults stay. device_communicator::wiring_note says
  /// which. Rank 0's setting holds, as does its COLLX_GPU_WIRING=off, which turns it off too.
  /// false: collx's defaults, never the machine.
  /// @throws (from the constructor) collx::error (errc::invalid_argument) on every rank when a
  ///   rank's COLLX_GPU_WIRING is neither auto nor off (nor 1/0, on/true, false).
  bool discover_wiring = true;
  /// Where that discovery looks (sysfs and procfs roots, the NVML library); tests point it at fakes.
  topo::discover_options discovery{};
};

/// What a kernel needs to reach every rank's workspace (passed by value to the kernels).
/// Which memory a kernel touches for what, per rank (memory mixed makes them differ by pair):
///  - workspace[q]: where this rank reads rank q's data (slots, exchange rows, point-to-point
///    staging) and writes its flags into rank q's tables;
///  - inbox[p]: where this rank reads the flags rank p writes to it (its own workspace, in device
///    memory if p's GPU reaches it, else its part of the shared host memory);
///  - outbox[q]: where this rank stages what only rank q reads (a send to q, the ring's slot
///    for its successor q, row q of a reduce-scatter's or all-to-all's slot): where q reads it;
///  - workspace[rank] and mirror: where this rank stages what every peer reads (collective slots,
///    exchange rows): workspace[rank], and the same offsets of mirror too when some peer reads it
///    elsewhere (mixed: its host memory part), else mirror is null.
struct device_view {
  std::byte* workspace[max_device_world] = {};  ///< rank q's workspace as this rank reaches it (device or shared host memory)
  std::byte* inbox[max_device_world] = {};      ///< this rank's workspace where rank p writes its flags to it
  std::byte* outbox[max_device_world] = {};     ///< this rank's workspace where rank q reads what only it reads
  std::byte* mirror = nullptr;                  ///< a second copy of this rank's workspace some peers read, or null
  std::byte* local = nullptr;                   ///< this rank's device memory below flags_offset: counters, claim, p2p counts (its alone)
  int rank = 0;                                 ///< this rank
  int world = 1;                                ///< ranks
  std::size_t counters_offset = 0;              ///< bytes into `local`: workspace_layout::counters_offset
  std::size_t claim_offset = 0;                 ///< bytes into `local`: workspace_layout::claim_offset
  std::size_t flags_offset = 0;                 ///< bytes: workspace_layout::flags_offset
  std::size_t exchange_offset = 0;              ///< bytes: workspace_layout::exchange_offset
  std::size_t p2p_sent_offset = 0;              ///< bytes into `local`: workspace_layout::p2p_sent_offset
  std::size_t p2p_received_offset = 0;          ///< bytes into `local`: workspace_layout::p2p_received_offset
  std::size_t p2p_ready_offset = 0;             ///< bytes: workspace_layout::p2p_ready_offset
  std::size_t p2p_ack_offset = 0;               ///< bytes: workspace_layout::p2p_ack_offset
  std::size_t p2p_size_offset = 0;              ///< bytes: workspace_layout::p2p_size_offset
  std::size_t p2p_staging_offset = 0;           ///< bytes: workspace_layout::p2p_staging_offset
  std::size_t staging_offset = 0;               ///< bytes: workspace_layout::staging_offset
  std::size_t slot_bytes = 0;                   ///< bytes per staging slot
  device_status* status = nullptr;              ///< host-mapped status (device address)
  std::uint64_t timeout_ns = 0;                 ///< wait limit per flag
};

/// A buffer registered on every rank of a device communicator (device_communicator::register_window,
/// as NCCL's ncclCommWindowRegister): peers read it in place, so collectives whose input is a window
/// skip the staging copy (zero-copy), where every pair of ranks has peer access (memory device);
/// otherwise (host, mixed) peers' buffers are not mapped and window calls stage (zero_copy_windows()).
/// Every rank registers its own buffer, in the same order. Usable with the communicator that
/// registered it until deregister_window (device_communicator::owns).
struct window {
  std::uint32_t id = 0;                                 ///< registration number, the same on every rank
  int world = 0;                                        ///< ranks
  std::uint64_t communicator = 0;                       ///< the registering communicator, as device_communicator::owns checks it
  std::array<const std::byte*, max_device_world> base{};   ///< rank r's buffer, as this rank reaches it (null for every peer unless memory is device)
  std::array<std::uint64_t, max_device_world> bytes{};     ///< rank r's buffer size
  std::array<std::uint64_t, max_device_world> address{};   ///< rank r's buffer address in its own process
  /// True when element `offset` of every rank's buffer, as type T, is 16-byte aligned (the same
  /// answer on every rank, so every rank picks the same vector width).
  template <class T>
  bool aligned16_at(std::size_t offset) const noexcept {
    for (int r = 0; r < world; ++r)
      if ((address[static_cast<std::size_t>(r)] + offset * sizeof(T)) % 16 != 0) return false;
    return true;
  }
};

/// A device communicator: rank r of `size()` ranks, each on one GPU, connected through device
/// memory. Construction and destruction are collective over the host communicator.
class device_communicator {
 public:
  /// Creates rank host.rank() of host.size() ranks: the ranks exchange records (device, process,
  /// PCI bus id, what they ask for), agree on the workspace memory (choose_workspace_memory: device
  /// memory where every GPU has peer access to every other, mixed where some pairs have it, shared
  /// pinned host memory where none do or when asked), rank 0 reads the machine's wiring
  /// (discover_wiring) and decides the forms' sizes and the ring, then the ranks map the
  /// workspaces each rank reaches (layout:
  /// device_plan.hpp): cudaIpcOpenMemHandle across processes, the address itself within one
  /// process (enabling peer access between different GPUs), and, unless every pair has peer
  /// access, one shared-memory object that rank 0 creates and every rank registers with CUDA.
  /// Each rank first loads every collx kernel of the program into its GPU's context
  /// (kernel_registry.hpp), so that none loads lazily during a call, where a peer's kernel would
  /// wait for it; a call still loads a kernel whose load failed here, after cudaDeviceReset, or
  /// registered after this communicator was made (one of a shared library loaded later, or of a
  /// file whose statics start after a communicator made during static initialisation). Returns
  /// once every rank has done so.
  /// `host` must outlive this communicator and must not be used by another thread meanwhile.
  /// @throws collx::error (errc::cuda) when a CUDA call fails; (errc::system) on the rank that
  ///         cannot create or open the shared host workspace (e.g. /dev/shm too small); (errc::mismatch) when ranks ask
  ///         for different staging sizes or workspace memories; (errc::invalid_argument) for more
  ///         than max_device_world ranks, ranks on different nodes (COLLX_NODE_ID or the host
  ///         name: one device communicator joins one node's GPUs), a staging too small or too large, device
  ///         memory asked for between GPUs without peer access, bad rings or
  ///         no_peer_access, or a bad COLLX_GPU_WIRING (on every rank; the world size, staging,
  ///         rings and no_peer_access are checked before any CUDA call, so a machine without a GPU
  ///         reports them too); and the host communicator's errors (errc::invalid_argument at once
  ///         for a moved-from host). When a CUDA call, allocation or mapping fails on one rank,
  ///         that rank throws its error and every other rank throws errc::cuda naming it, rather
  ///         than waiting for it.
  /// Leaves the communicator's device (opt.device) current for the calling thread, as
  /// cudaSetDevice would, for the caller's own buffers and streams (its calls, later, leave the
  /// caller's current device as they find it).
  explicit device_communicator(communicator& host, device_options opt = {})
      : host_(&host), rank_(host.rank()), size_(host.size()) {  // a moved-from host throws here, as its own calls do
    // One call on host (its exchanges and barriers): an async call started meanwhile runs after.
    host.drain_async();
    const communicator::call_scope one_thread(host);
    const auto timeout = std::min(opt.timeout.count() > 0 ? opt.timeout : host.options().timeout, detail::longest_wait);
    peer_record mine;
    try {
      // What the arguments alone decide, before any CUDA call: the same error with or without a GPU.
      on_every_rank(
          "accept its device_options",
          [&] {
            if (size_ > max_device_world)
              COLLX_THROW(errc::invalid_argument, "gpu: " + std::to_string(size_) + " ranks; a device communicator holds at most " +
                                                      std::to_string(max_device_world));
            layout_ = workspace_layout::for_staging(opt.staging_bytes);
            for (const auto& [a, b] : opt.no_peer_access)
              if (a < 0 || a >= size_ || b < 0 || b >= size_)
                COLLX_THROW(errc::invalid_argument, "gpu: device_options::no_peer_access names the pair (" + std::to_string(a) + ", " +
                                                        std::to_string(b) + "), outside ranks 0 to " + std::to_string(size_ - 1));
            if (!opt.rings.empty()) (void)make_ring_channels(opt.rings, size_);
          },
          errc::invalid_argument);
      on_every_rank("read its node id (COLLX_NODE_ID or the host name)", [&] { mine.set_node(node_id_from_environment()); },
                    errc::invalid_argument);
      bool read_the_wiring = opt.discover_wiring;
      on_every_rank("read COLLX_GPU_WIRING", [&] { read_the_wiring = gpu_wiring_from_environment() && read_the_wiring; },
                    errc::invalid_argument);
      on_every_rank("set up its device", [&] {
        int devices = 0;
        const cudaError_t found = cudaGetDeviceCount(&devices);
        if (found != cudaSuccess || devices < 1)
          COLLX_THROW(errc::cuda, "gpu: rank " + std::to_string(rank_) + " finds no CUDA device (cudaGetDeviceCount: " +
                                      (found == cudaSuccess ? std::string("0 devices") : std::string(cudaGetErrorName(found)) + ", " +
                                                                                              cudaGetErrorString(found)) +
                                      // What CUDA says when there is no driver at all, not only an old one:
                                      (found == cudaErrorInsufficientDriver ? "; no NVIDIA driver loaded?" : "") + ")");
        if (opt.device < 0) gpu::check(cudaGetDevice(&opt.device), "cudaGetDevice");
        device_ = opt.device;
        gpu::check(cudaSetDevice(device_), "cudaSetDevice");
        // Before any rank can launch (the all_gather below waits for every rank): no kernel of
        // this program loads lazily later while a peer's kernel waits (kernel_registry.hpp).
        device_detail::load_registered_kernels(device_);
        mine.process = process_token();
        mine.device = device_;
        mine.staging_bytes = opt.staging_bytes;
        mine.workspace_bytes = layout_.total_bytes;
        mine.memory = opt.memory;
        cudaDeviceProp prop{};
        gpu::check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
        mine.sm_count = prop.multiProcessorCount;
        mine.compute_capability = prop.major * 10 + prop.minor;
        std::memcpy(mine.uuid.data(), &prop.uuid, sizeof prop.uuid);
        // Only for reading the wiring (read_wiring): without it, collx's default figures.
        if (cudaDeviceGetPCIBusId(mine.pci_bus_id.data(), static_cast<int>(mine.pci_bus_id.size()), device_) != cudaSuccess) {
          mine.pci_bus_id.fill('\0');
          (void)cudaGetLastError();
        }
        mine.pci_bus_id.back() = '\0';
        gpu::check(cudaHostAlloc(reinterpret_cast<void**>(&status_), sizeof(device_status), cudaHostAllocMapped),
                   "cudaHostAlloc(status)");
        *status_ = device_status{};
        gpu::check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&status_device_), status_, 0),
                   "cudaHostGetDevicePointer(status)");
        // Made here, once: record_call must not fail for want of one (a call would lose its order
        // across streams without a word).
        for (launch_record* r : {&eager_, &captured_})
          gpu::check(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming), "cudaEventCreateWithFlags(call order)");
      });

      records_.resize(static_cast<std::size_t>(size_));
      all_gather<algo::direct>(host, std::span<const peer_record>(&mine, 1), std::span<peer_record>(records_));
      check_records(records_, rank());
      on_every_rank(
          "check its GPU's hardware queues",
          [&] { check_hardware_queues(records_, rank(), hardware_queues(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"))); },
          errc::invalid_argument);
      blocks_ = block_cap(records_);

      std::vector<std::uint64_t> reach(static_cast<std::size_t>(size_));
      const std::uint64_t my_reach = reach_mask();
      all_gather<algo::direct>(host, std::span<const std::uint64_t>(&my_reach, 1), std::span<std::uint64_t>(reach));
      // Pairs any rank's options take out of reach (the union, so every rank decides alike).
      std::array<std::uint16_t, max_device_world> deny{};
      for (const auto& [a, b] : opt.no_peer_access) {  // in range: checked first
        if (a == b) continue;                           // a rank always reaches its own memory
        deny[static_cast<std::size_t>(a)] |= static_cast<std::uint16_t>(1u << b);
        deny[static_cast<std::size_t>(b)] |= static_cast<std::uint16_t>(1u << a);
      }
      std::vector<std::array<std::uint16_t, max_device_world>> denied(static_cast<std::size_t>(size_));
      all_gather<algo::direct>(host, std::span<const std::array<std::uint16_t, max_device_world>>(&deny, 1),
                               std::span<std::array<std::uint16_t, max_device_world>>(denied));
      for (const auto& d : denied)
        for (std::size_t r = 0; r < reach.size(); ++r) reach[r] &= ~std::uint64_t{d[r]};
      memory_ = choose_workspace_memory(records_, reach);
      reach_ = reach;
      read_wiring(opt, read_the_wiring);

      // Rank 0's form threshold for every rank: ranks that chose differently would fail each call.
      // Ranks that all share one GPU (device memory) read each other's slots from its own L2 and
      // memory, where two-shot only adds a launch and a barrier: one-shot at every size (on an
      // H200, 4 ranks: 13 against 29 us at 64 KiB, busbw 261 against 232 GB/s at 256 MiB).
      const bool device = memory_ == workspace_memory::device;
      std::uint64_t two_shot = opt.two_shot_min_bytes != 0      ? opt.two_shot_min_bytes
                               : device && one_gpu_for_all(records_) ? SIZE_MAX
                                                                 : two_shot_crossover_bytes(size_, direct_cost_where(device, opt.cost));
      collx::broadcast<algo::direct>(host, std::span<std::uint64_t>(&two_shot, 1), 0);
      two_shot_min_bytes_ = static_cast<std::size_t>(two_shot);

      // Rank 0's rings for every rank: the user's (every rank's own checked first: a typo fails
      // loudly anywhere), the wiring's (read_wiring), or a ring through the GPUs that reach each other.
      on_every_rank(
          "accept its rings",
          [&] {
            rings_ = opt.rings.empty() ? ring_channels::single(ring_through_reach(reach_, size_)) : make_ring_channels(opt.rings, size_);
          },
          errc::invalid_argument);
      collx::broadcast<algo::direct>(host, std::span<int>(&rings_.count, 1), 0);
      for (int c = 0; c < rings_.count; ++c) {
        rings_.ring[c].world = size_;
        collx::broadcast<algo::direct>(host, std::span<int>(rings_.ring[c].order, max_device_world), 0);
      }
      // Rank 0's ring thresholds for every rank: ranks that chose differently would fail each call.
      std::array<std::uint64_t, 3> ring_min{};
      for (const collective c : {collective::allreduce, collective::reduce_scatter, collective::all_gather})
        ring_min[ring_index(c)] = choose_ring_min_bytes(c, host.options().algorithm_overrides.for_collective(c), opt, device);
      collx::broadcast<algo::direct>(host, std::span<std::uint64_t>(ring_min.data(), ring_min.size()), 0);
      for (std::size_t i = 0; i < ring_min.size(); ++i) ring_min_bytes_[i] = static_cast<std::size_t>(ring_min[i]);

      // Counters and claim are this rank's alone: with host memory only they stay on the device.
      // Mapping the peers comes last, so that nothing fails once a peer may map this workspace.
      const bool host_only = memory_ == workspace_memory::host;
      if (!device) open_host_workspaces();
      on_every_rank("allocate its device workspace", [&] { allocate_workspace(host_only ? layout_.flags_offset : layout_.total_bytes); });
      if (!host_only) {
        publish_device_workspace();
        on_every_rank("map the peers' workspaces", [&] { open_peers(); });
      }
      route_workspaces();
    } catch (...) {
      // Every rank failed together (on_every_rank): unmap, then meet, before anyone frees what a
      // peer may still have mapped. (A failure of the host communicator itself skips the meeting.)
      if (failed_together_) {
        close_mappings();
        try {
          barrier(*host_);
        } catch (...) {
        }
      }
      release();
      throw;
    }
    view_.local = static_cast<std::byte*>(workspace_);
    view_.rank = rank();
    view_.world = size();
    view_.counters_offset = layout_.counters_offset;
    view_.claim_offset = layout_.claim_offset;
    view_.flags_offset = layout_.flags_offset;
    view_.exchange_offset = layout_.exchange_offset;
    view_.p2p_sent_offset = layout_.p2p_sent_offset;
    view_.p2p_received_offset = layout_.p2p_received_offset;
    view_.p2p_ready_offset = layout_.p2p_ready_offset;
    view_.p2p_ack_offset = layout_.p2p_ack_offset;
    view_.p2p_size_offset = layout_.p2p_size_offset;
    view_.p2p_staging_offset = layout_.p2p_staging_offset;
    view_.staging_offset = layout_.staging_offset;
    view_.slot_bytes = layout_.slot_bytes;
    view_.status = status_device_;
    view_.timeout_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(timeout).count());
    if (log_enabled(log_level::info)) {  // COLLX_DEBUG=info
      try {
        log_message(log_level::info, describe());
      } catch (...) {  // no memory for the line: the communicator stands
      }
    }
  }

  /// Not copyable: it owns the workspace and the peers' mappings (nor movable).
  device_communicator(const device_communicator&) = delete;
  /// Not copyable: it owns the workspace and the peers' mappings.
  device_communicator& operator=(const device_communicator&) = delete;

  /// Collective: waits for this rank's device work (cudaDeviceSynchronize: all of the GPU's work, as
  /// the cudaFree after it would; ranks of one process sharing a GPU destroy a communicator only
  /// when none of their calls on another is in flight), then for every rank (host barrier, so no peer
  /// still reads this workspace), then unmaps the peers and frees the workspace. Errors are
  /// swallowed (a destructor); call synchronize() first to see them. A rank whose device calls
  /// failed meets the others too: a failure need not have reached every rank (a peer whose last
  /// call moved nothing never saw it), and one rank skipping the barrier would leave the others
  /// in it until the host communicator's timeout. A dead peer ends the barrier as any host call.
  ~device_communicator() {
    const gpu::scoped_device restore;
    (void)cudaSetDevice(device_);
    (void)cudaDeviceSynchronize();
    bool met = false;
    try {
      barrier(*host_);
      met = true;
    } catch (...) {
    }
    // Every rank unmaps its peers' workspaces before any rank frees its own (freeing memory another
    // process still has mapped over CUDA IPC is undefined). Not after a failed first meeting: a
    // second one could pair with a late peer's first, or wait a second timeout for a dead peer.
    close_mappings();
    if (met) {
      try {
        barrier(*host_);
      } catch (...) {
      }
    }
    release();
  }

  /// The host communicator this one was built over (for host-side synchronisation around calls
  /// that synchronise the whole device, such as cudaFree: with several ranks on one GPU in one
  /// process, such a call waits for a peer's kernel that may wait for this rank's next call).
  communicator& host() const noexcept { return *host_; }
  /// This rank (the host communicator's rank when this one was made).
  int rank() const noexcept { return rank_; }
  /// Number of ranks (the host communicator's size when this one was made).
  int size() const noexcept { return size_; }
  /// This rank's CUDA device ordinal.
  int device() const noexcept { return device_; }
  /// Bytes per staging slot (half the staging).
  std::size_t slot_bytes() const noexcept { return layout_.slot_bytes; }
  /// Thread blocks a call may use (the same on every rank).
  unsigned block_limit() const noexcept { return blocks_; }
  /// All-reduces of this many bytes per rank or more run two-shot (device_options::two_shot_min_bytes).
  std::size_t two_shot_min_bytes() const noexcept { return two_shot_min_bytes_; }
  /// The rings of algo::ring calls, one per channel (device_options::rings, rank 0's).
  const ring_channels& rings() const noexcept { return rings_; }
  /// Rank 0's account, one line, of where the figures this communicator decides by come from:
  /// the machine's wiring (device_options::discover_wiring; topo::device_wiring's note: GPUs,
  /// NVLinks, ring, rates), the options, or collx's defaults and why. The same on every rank.
  const std::string& wiring_note() const noexcept { return wiring_note_; }
  /// The vector size in bytes (device_options::ring_min_bytes) from which calls of collective `c`
  /// (allreduce, reduce_scatter, all_gather; SIZE_MAX for the others) without an algorithm, or
  /// with algo::automatic, take the ring when their op is commutative: SIZE_MAX never, 1 always.
  /// Rank 0's, the same on every rank.
  std::size_t ring_min_bytes(collective c) const noexcept {
    const std::size_t i = ring_index(c);
    return i < ring_min_bytes_.size() ? ring_min_bytes_[i] : SIZE_MAX;
  }
  /// True when a call of `c` moving a vector of `bytes` (as device_options::ring_min_bytes counts
  /// them) without an algorithm takes the ring: more than one rank, bytes > 0 and at least
  /// ring_min_bytes(c), which is not SIZE_MAX (never).
  bool ring_for(collective c, std::size_t bytes) const noexcept {
    const std::size_t min = ring_min_bytes(c);
    return size() > 1 && bytes > 0 && min != SIZE_MAX && bytes >= min;
  }
  /// This communicator in one line, as COLLX_DEBUG=info prints it when it is made: "rank 0/3
  /// device communicator: GPU 0 (0000:07:00.0, sm_90, 132 SMs), workspace memory mixed, peers
  /// [self, same process, host memory]; all-reduce two-shot from 512 KiB; ring from: allreduce 4
  /// MiB, reduce_scatter never, all_gather 1 MiB; rings [0 1 2]; up to 32 blocks; <wiring_note()>".
  std::string describe() const {
    const peer_record& me = records_[static_cast<std::size_t>(rank_)];
    const auto bytes = [](std::size_t b) { return b == SIZE_MAX ? std::string("never") : detail::bytes_text(b); };
    std::string s = "rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " device communicator: GPU " +
                    std::to_string(device_) + " (";
    if (me.pci_bus_id[0] != '\0') s.append(me.pci_bus_id.data()).append(", ");
    s.append("sm_").append(std::to_string(me.compute_capability)).append(", ");
    s.append(std::to_string(me.sm_count)).append(" SMs), workspace memory ").append(workspace_memory_name(memory_));
    s.append(", peers [");
    for (int p = 0; p < size_; ++p) s.append(p ? ", " : "").append(peer_path_name(path_to_peer(p)));
    s.append("]; all-reduce two-shot from ").append(bytes(two_shot_min_bytes_)).append("; ring from:");
    for (const collective c : {collective::allreduce, collective::reduce_scatter, collective::all_gather}) {
      s.append(c == collective::allreduce ? " " : ", ").append(collective_name(c)).append(" ");
      s.append(bytes(ring_min_bytes(c)));
    }
    s.append("; rings");
    for (int c = 0; c < rings_.count; ++c) {
      s.append(" [");
      for (int i = 0; i < rings_.ring[c].world; ++i)
        s.append(i ? " " : "").append(std::to_string(rings_.ring[c].order[i]));
      s.append("]");
    }
    s.append("; up to ").append(std::to_string(blocks_)).append(" blocks");
    if (!wiring_note_.empty()) s.append("; ").append(wiring_note_);
    return s;
  }
  /// How this rank reaches rank `peer`'s workspace.
  peer_path path_to_peer(int peer) const {
    if (peer != rank() && !reaches(rank(), peer)) return peer_path::host_memory;
    return path_to(records_, rank(), peer);
  }
  /// Where the workspaces live: workspace_memory::device, mixed or host (never automatic), the
  /// same on every rank.
  workspace_memory memory() const noexcept { return memory_; }
  /// True when peers read registered windows in place (memory device); with host or mixed memory
  /// a window call stages its input like the pointer form.
  bool zero_copy_windows() const noexcept { return memory_ == workspace_memory::device; }
  /// What the kernels are given.
  const device_view& view() const noexcept { return view_; }

  /// Whether a stream is being captured into a graph, and which capture (capture_of).
  struct capture_state {
    bool known = true;          ///< false: the query failed, or the capture was invalidated
    bool active = false;        ///< being captured
    unsigned long long id = 0;  ///< the capture's id (cudaStreamGetCaptureInfo) when active
  };
  /// The capture `stream` is in (a failed query's error is cleared).
  static capture_state capture_of(cudaStream_t stream) noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      return {false, false, 0};
    }
    if (status == cudaStreamCaptureStatusNone) return {};
    return {status == cudaStreamCaptureStatusActive, true, id};
  }

  /// Makes `stream` (whose capture is `capture`) wait for this communicator's previous call of the
  /// same kind when that went on another stream: a communicator's calls then run one at a time in
  /// the order made, whatever streams they are on (NCCL orders them so too); two of its kernels
  /// running at once would take the same chunk epochs and staging slots. Eager calls wait for the
  /// last eager call; calls being captured for the last call of the same capture. Between graph
  /// launches and eager calls the caller orders (a stream being captured cannot wait for work
  /// outside its graph, nor the reverse), as on one stream. Returns the wait's status
  /// (cudaSuccess when none is needed); the launch helpers (device_collectives.cuh) throw on an
  /// error, before enqueueing.
  cudaError_t order_after_previous_call(cudaStream_t stream, capture_state capture) noexcept {
    if (!capture.known) return cudaSuccess;
    const launch_record& last = capture.active ? captured_ : eager_;
    if (!last.recorded || (capture.active && last.capture_id != capture.id)) return cudaSuccess;
    // Eager calls on the same stream are ordered already. Within a capture streams are not told
    // apart: cudaStreamGetId on a stream being captured invalidates the capture (CUDA 13.0,
    // driver 580: cudaErrorStreamCaptureUnsupported), and a wait on the same stream only adds an
    // edge the graph has.
    if (!capture.active) {
      const unsigned long long id = stream_id(stream);
      if (id != 0 && id == last.stream_id) return cudaSuccess;
    }
    return cudaStreamWaitEvent(stream, last.done, 0);
  }
  /// Marks the call just enqueued on `stream` (whose capture is `capture`) as the one later calls
  /// of its kind on other streams wait for (order_after_previous_call). Its kernel is out already,
  /// so nothing here throws: a failure only loses the order across streams (its error is cleared,
  /// not left for the caller).
  void record_call(cudaStream_t stream, capture_state capture) noexcept {
    if (!capture.known) return;
    launch_record& last = capture.active ? captured_ : eager_;
    last.recorded = false;
    if (cudaEventRecord(last.done, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    last.stream_id = capture.active ? 0 : stream_id(stream);
    last.capture_id = capture.id;
    last.recorded = true;
  }

  /// True once a kernel of this communicator has given up (timeout, mismatch, a failed peer, or a
  /// call this rank rejected for its arguments).
  bool failed() const noexcept { return status_ != nullptr && std::atomic_ref<std::uint32_t>(status_->failure).load() != 0; }

  /// Records on the host that this rank gave up a call before enqueueing it (`what`: rejected for
  /// its arguments, collx/cuda/device_collectives.cuh call_check; launch_failed: its kernel could
  /// not be launched), unless a failure is recorded already: later calls then fail at check(), also
  /// when no kernel could record it (during stream capture, or a broken context).
  void mark_failed(device_failure what) noexcept {
    if (status_ == nullptr || failed()) return;
    status_->peer = -1;
    std::atomic_ref<std::uint32_t>(status_->failure).store(static_cast<std::uint32_t>(what));
  }

  /// Throws the failure a kernel reported, if any. Reads host-mapped memory: call it after the
  /// stream has been synchronised to see the failures of the calls before.
  /// @throws collx::error (errc::timeout, errc::mismatch -- a call signature, all_to_all_v counts
  ///         or a recv whose count or element size differs from the send's --, errc::aborted, errc::invalid_argument after a call this rank rejected,
  ///         or errc::cuda after a call whose kernel this rank could not launch) naming
  ///         the rank, block and peer.
  void check() const {
    if (!failed()) return;
    std::atomic_thread_fence(std::memory_order_acquire);
    const device_status s = *status_;
    COLLX_THROW(errc_of(static_cast<device_failure>(s.failure)), describe_failure(s, rank()));
  }

  /// Registers [ptr, ptr + bytes) (device memory of this rank's device) as a window, collectively:
  /// every rank registers its own buffer (sizes may differ), in the same order. Peers map it (CUDA
  /// IPC across processes: the allocation's handle is opened once per peer and cached, keyed by the
  /// handle, so memory freed and allocated again, which gets a new handle, is mapped afresh).
  /// With workspace memory host or mixed nothing is mapped (window calls stage their input, as the
  /// pointer forms do), but the registration is still collective and checked the same way.
  /// The buffer must stay allocated until deregister_window.
  /// The calling thread's current CUDA device is the same on return.
  /// @throws collx::error (errc::invalid_argument) for a null pointer, zero bytes, or a range that is
  ///         not inside one device allocation; (errc::cuda) when mapping fails; host errors. A rank
  ///         that fails throws its error and every other rank throws one with the same code naming
  ///         it (errc::cuda for a mapping), with nothing left mapped for the window.
  window register_window(const void* ptr, std::size_t bytes) {
    host_->drain_async();
    const communicator::call_scope one_thread(*host_);  // its exchanges are one call on host
    const gpu::scoped_device restore;  // the caller's device, when this returns or throws
    window_record mine;
    // Every rank learns whether every rank's own steps succeeded before any maps a peer's buffer:
    // a rank that throws alone would leave the others in the exchange below, or holding a window
    // their peer does not have, until their timeout.
    on_every_rank<step_of::register_window>("register its window", [&] {
      gpu::check(cudaSetDevice(device_), "gpu::register_window: cudaSetDevice");  // the driver calls act on it
      check();
      if (ptr == nullptr || bytes == 0)
        COLLX_THROW(errc::invalid_argument, "gpu::register_window: null pointer or zero bytes");
      mine.address = reinterpret_cast<std::uintptr_t>(ptr);
      mine.bytes = bytes;
      mine.process = process_token();
      const auto [alloc_base, alloc_bytes] = allocation_range(ptr);
      // Compared as room left, not as an end address: a huge count (a negative size converted to
      // std::size_t) would wrap the end below the start and pass.
      if (bytes > alloc_base + alloc_bytes - mine.address)
        COLLX_THROW(errc::invalid_argument, "gpu::register_window: " + std::to_string(bytes) + " bytes from " +
                                                std::to_string(mine.address) + " run past the end of its allocation" +
                                                (bytes > static_cast<std::size_t>(PTRDIFF_MAX)
                                                     ? " (a negative size converted to std::size_t?)"
                                                     : ""));
      mine.offset = mine.address - alloc_base;
      if (memory_ == workspace_memory::device && peers_in_other_processes()) {  // they map it (same process: its address)
        cudaIpcMemHandle_t h{};
        gpu::check(cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(alloc_base))),
                   "cudaIpcGetMemHandle(window)");
        std::memcpy(mine.ipc_handle.data(), &h, sizeof h);
      }
    }, failing_ranks_code);

    std::vector<window_record> all(static_cast<std::size_t>(size()));
    all_gather<algo::direct>(*host_, std::span<const window_record>(&mine, 1), std::span<window_record>(all));
    window w;
    w.id = next_window_++;
    w.world = size();
    w.communicator = token_;
    try {
      on_every_rank<step_of::register_window>("map its peers' windows", [&] { map_window(w, all, mine.process); });
    } catch (...) {
      unmap_window(w.id);  // no window object is returned to deregister: undo its mappings here
      throw;
    }
    live_windows_.insert(w.id);
    return w;
  }

  /// Whether `w` was registered with this communicator and not deregistered since: what every
  /// window call and deregister_window check first (a window of another communicator of the same
  /// size would have its peers' buffers read through that communicator's mappings, perhaps
  /// closed already).
  bool owns(const window& w) const noexcept {
    return w.communicator == token_ && w.world == size() && live_windows_.count(w.id) != 0;
  }

  /// Deregisters a window, collectively (every rank, same order). Every call that reads it must have
  /// finished on every rank (synchronize the streams first): the first barrier only orders the
  /// hosts. Peer mappings no other window uses are closed, and a second barrier waits until every
  /// rank has closed them, so the buffer may be freed on return (CUDA leaves freeing memory that
  /// another process still maps undefined).
  /// @throws collx::error (errc::invalid_argument) on every rank, with nothing unmapped, when some
  ///         rank's `w` is not a window this communicator owns (owns(): another communicator's,
  ///         or deregistered already), or when the ranks pass different windows (each would close
  ///         another window's mappings, and free a buffer its peers still map); host errors.
  void deregister_window(const window& w) {
    host_->drain_async();
    const communicator::call_scope one_thread(*host_);  // one call on host, as the creation
    const gpu::scoped_device restore;
    // Also the first barrier: every rank learns whether every rank's window is one to unmap.
    on_every_rank<step_of::deregister_window>("deregister its window", [&] {
      if (!owns(w))
        COLLX_THROW(errc::invalid_argument, "gpu::deregister_window: window " + std::to_string(w.id) +
                                                " was not registered with this communicator, or was deregistered already");
    }, failing_ranks_code);
    // Windows are numbered alike on every rank (registered in the same order): one id, or none unmapped.
    std::vector<std::uint32_t> ids(static_cast<std::size_t>(size()));
    all_gather<algo::direct>(*host_, std::span<const std::uint32_t>(&w.id, 1), std::span<std::uint32_t>(ids));
    for (int p = 0; p < size(); ++p)
      if (ids[static_cast<std::size_t>(p)] != w.id)
        COLLX_THROW(errc::invalid_argument,
                    "gpu::deregister_window: rank " + std::to_string(p) + " deregisters window " +
                        std::to_string(ids[static_cast<std::size_t>(p)]) + ", rank " + std::to_string(rank()) +
                        " window " + std::to_string(w.id) +
                        ": every rank deregisters the same window (windows are numbered in the order registered)");
    (void)cudaSetDevice(device_);  // where the mappings were opened; a failure only leaves them open
    unmap_window(w.id);
    live_windows_.erase(w.id);
    barrier(*host_);
  }

  /// Peer allocations currently mapped for windows (distinct IPC handles): what the cache holds.
  std::size_t mapped_window_allocations() const noexcept { return mappings_.size(); }

  /// cudaStreamSynchronize(stream), then check().
  /// @throws collx::error (errc::cuda) when the stream reports a CUDA error; check()'s errors.
  void synchronize(cudaStream_t stream) const {
    gpu::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check();
  }

 private:
  /// What each rank publishes for a window.
  struct window_record {
    std::uint64_t process = 0;
    std::uint64_t address = 0;  // in the owner's process
    std::uint64_t bytes = 0;
    std::uint64_t offset = 0;   // from the start of its allocation
    std::array<unsigned char, 64> ipc_handle{};
  };
  using mapping_key = std::pair<int, std::array<unsigned char, 64>>;
  struct mapping {
    void* base = nullptr;
    int users = 0;
  };

  /// The device allocation holding ptr: cuMemGetAddressRange from the driver, loaded at run time so
  /// that programs link without libcuda (CI machines have no driver).
  static std::pair<std::uint64_t, std::uint64_t> allocation_range(const void* ptr) {
    using fn_t = int (*)(unsigned long long*, std::size_t*, unsigned long long);
    static const fn_t fn = [] {
      // The program's own (linked with -lcuda, or a stand-in runtime's), else the driver's library.
      if (void* own = ::dlsym(RTLD_DEFAULT, "cuMemGetAddressRange_v2")) return reinterpret_cast<fn_t>(own);
      void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      return lib ? reinterpret_cast<fn_t>(::dlsym(lib, "cuMemGetAddressRange_v2")) : nullptr;
    }();
    if (!fn) COLLX_THROW(errc::cuda, "gpu::register_window: cuMemGetAddressRange_v2 not found in libcuda.so.1");
    unsigned long long base = 0;
    std::size_t bytes = 0;
    if (fn(&base, &bytes, reinterpret_cast<std::uintptr_t>(ptr)) != 0)
      COLLX_THROW(errc::invalid_argument, "gpu::register_window: the pointer is not in device memory allocated with cudaMalloc");
    return {base, bytes};
  }

  static std::uint64_t process_token() {
    // pid in the high bits, a random per-process token below: ranks of one process share it.
    static const std::uint64_t token = [] {
      std::random_device rd;
      return (static_cast<std::uint64_t>(::getpid()) << 32) ^ (static_cast<std::uint64_t>(rd()) & 0xffffffffu);
    }();
    return token;
  }

  /// Bit p set when this rank's GPU can read and write rank p's device memory: the same GPU, or
  /// peer access to it (a GPU this process cannot see is out of reach).
  std::uint64_t reach_mask() const {
    const peer_record& me = records_[static_cast<std::size_t>(rank())];
    std::uint64_t mask = 0;
    for (int p = 0; p < size(); ++p) {
      const peer_record& r = records_[static_cast<std::size_t>(p)];
      if (r.uuid == me.uuid) {
        mask |= std::uint64_t{1} << p;
        continue;
      }
      const int ordinal = r.process == me.process ? r.device : local_ordinal(r.uuid);
      if (ordinal < 0) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, device_, ordinal) != cudaSuccess) {
        (void)cudaGetLastError();  // this query's own error (not one the caller left pending): out of reach
        continue;
      }
      if (can) mask |= std::uint64_t{1} << p;
    }
    return mask;
  }

  /// This process's ordinal of the GPU with `uuid`, or -1 when it does not see that GPU.
  static int local_ordinal(const std::array<unsigned char, 16>& uuid) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // the query's own error only (see reach_mask)
      return -1;
    }
    for (int d = 0; d < n; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      if (std::memcmp(&prop.uuid, uuid.data(), uuid.size()) == 0) return d;
    }
    return -1;
  }

  /// This rank's device workspace of `bytes`, zeroed before any peer can see it.
  void allocate_workspace(std::size_t bytes) {
    gpu::check(cudaMalloc(&workspace_, bytes), "cudaMalloc(device communicator workspace)");
    // On a stream of its own: neither the legacy stream nor the whole device waits here for other
    // work on the GPU (the kernels of another communicator whose ranks share it may wait for this one).
    cudaStream_t zeroing = nullptr;
    gpu::check(cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    const cudaError_t set = cudaMemsetAsync(workspace_, 0, bytes, zeroing);
    const cudaError_t done = cudaStreamSynchronize(zeroing);
    (void)cudaStreamDestroy(zeroing);
    gpu::check(set, "cudaMemsetAsync(workspace)");
    gpu::check(done, "cudaStreamSynchronize(workspace zeroing)");
  }

  /// Gives every rank this rank's workspace address and IPC handle (records_).
  /// True when some rank runs in another process than this one (records_): only those map this
  /// rank's memory over CUDA IPC.
  bool peers_in_other_processes() const {
    const std::uint64_t mine = records_[static_cast<std::size_t>(rank())].process;
    return std::any_of(records_.begin(), records_.end(), [&](const peer_record& r) { return r.process != mine; });
  }
  void publish_device_workspace() {
    struct published {
      std::uint64_t address;
      std::array<unsigned char, 64> ipc_handle;
    } out{reinterpret_cast<std::uintptr_t>(workspace_), {}};
    on_every_rank("export its workspace", [&] {
      if (!peers_in_other_processes()) return;  // they use its address: no IPC (which some platforms lack)
      cudaIpcMemHandle_t handle{};
      gpu::check(cudaIpcGetMemHandle(&handle, workspace_), "cudaIpcGetMemHandle(workspace)");
      static_assert(sizeof handle <= sizeof out.ipc_handle);
      std::memcpy(out.ipc_handle.data(), &handle, sizeof handle);
    });
    std::vector<published> all(static_cast<std::size_t>(size()));
    all_gather<algo::direct>(*host_, std::span<const published>(&out, 1), std::span<published>(all));
    for (std::size_t p = 0; p < all.size(); ++p) {
      records_[p].workspace_address = all[p].address;
      records_[p].ipc_handle = all[p].ipc_handle;
    }
  }

  /// The user's call an on_every_rank step belongs to: part of the outcome's type, so that a rank
  /// in register_window while its peers deregister (or set up) fails that exchange as a mismatch.
  enum class step_of { setup, register_window, deregister_window };
  /// One rank's outcome of a setup step with the start of its message, so that every rank can say
  /// why (a named type: its name is part of the host all_gather's type check across ranks).
  template <step_of Call>
  struct setup_outcome {
    std::uint8_t ok = 1;
    std::array<char, 255> why{};
    std::int32_t code = static_cast<std::int32_t>(errc::internal);  ///< its collx::error's code
  };
  /// Errors name the exchanges of setup_outcome and window_record (a rank calling a collective on
  /// the host communicator meanwhile, or another of these) as the calls the user made.
  static inline const bool exchanges_named =
      collx::detail::remember_exchange_call(collx::detail::type_signature_hash<setup_outcome<step_of::setup>>,
                                            "collx::gpu::device_communicator's constructor") &&
      collx::detail::remember_exchange_call(
          collx::detail::type_signature_hash<setup_outcome<step_of::register_window>>,
          "collx::gpu::device_communicator::register_window") &&
      collx::detail::remember_exchange_call(
          collx::detail::type_signature_hash<setup_outcome<step_of::deregister_window>>,
          "collx::gpu::device_communicator::deregister_window") &&
      collx::detail::remember_exchange_call(collx::detail::type_signature_hash<window_record>,
                                            "collx::gpu::device_communicator::register_window");
  /// on_every_rank's `peers_code` for "the code the failing rank's own error has".
  static constexpr errc failing_ranks_code = static_cast<errc>(-1);

  /// Runs `step` on this rank, then tells every rank whether each rank's step succeeded: this
  /// rank rethrows its own error; the others throw `peers_code` (failing_ranks_code: that rank's
  /// error's code, internal for an exception not a collx::error) naming the first rank that failed,
  /// with the start (254 bytes) of its message (instead of waiting for it until the host
  /// communicator's timeout).
  template <step_of Call = step_of::setup, class Step>
  void on_every_rank(const char* what, Step&& step, errc peers_code = errc::cuda) {
    using outcome = setup_outcome<Call>;
    outcome mine;
    std::exception_ptr thrown;
    try {
      step();
    } catch (const error& e) {
      thrown = std::current_exception();
      mine.ok = 0;
      mine.code = static_cast<std::int32_t>(e.code());
      std::strncpy(mine.why.data(), e.what(), mine.why.size() - 1);
    } catch (const std::exception& e) {
      thrown = std::current_exception();
      mine.ok = 0;
      std::strncpy(mine.why.data(), e.what(), mine.why.size() - 1);
    } catch (...) {
      thrown = std::current_exception();
      mine.ok = 0;
      std::strncpy(mine.why.data(), "an exception not derived from std::exception", mine.why.size() - 1);
    }
    std::vector<outcome> all(static_cast<std::size_t>(size()));
    all_gather<algo::direct>(*host_, std::span<const outcome>(&mine, 1), std::span<outcome>(all));
    failed_together_ = std::any_of(all.begin(), all.end(), [](const outcome& o) { return o.ok == 0; });
    if (thrown) std::rethrow_exception(thrown);
    for (int p = 0; p < size(); ++p)
      if (const outcome& o = all[static_cast<std::size_t>(p)]; !o.ok)
        COLLX_THROW(peers_code == failing_ranks_code ? static_cast<errc>(o.code) : peers_code,
                    std::string("gpu: rank ") + std::to_string(p) + " could not " + what + ": " + std::string(o.why.data()));
  }

  /// Workspace memory host: rank 0 creates one shared-memory object holding every rank's workspace
  /// (rank r's at r x the page-rounded workspace size), every rank maps and registers it, then the
  /// name is removed (nothing is left in /dev/shm after a crash from then on).
  void open_host_workspaces() {
    const std::size_t region = workspace_layout::round_up(layout_.total_bytes, 4096);
    const std::size_t bytes = region * static_cast<std::size_t>(size());
    std::array<char, 64> name{};  // rank 0's object; empty when rank 0 could not create it
    on_every_rank("create the shared host workspace", [&] {
      if (rank() != 0) return;
      shared_ = shared_host_memory::create(bytes);
      std::memcpy(name.data(), shared_.name().c_str(), std::min(name.size() - 1, shared_.name().size()));
    });
    collx::broadcast<algo::direct>(*host_, std::span<char>(name.data(), name.size()), 0);
    on_every_rank("map the shared host workspace", [&] {
      if (rank() != 0) shared_ = shared_host_memory::open(name.data(), bytes);
    });
    if (rank() == 0) shared_.unlink_name();
    for (int p = 0; p < size(); ++p) host_part_[static_cast<std::size_t>(p)] = shared_.device() + static_cast<std::size_t>(p) * region;
  }

  /// Maps the device workspace of every peer this rank reaches (records_; every peer with memory
  /// device, those its GPU reaches with mixed).
  void open_peers() {
    for (int p = 0; p < size(); ++p)
      if (reaches(rank(), p)) view_.workspace[p] = map_peer(p);
  }

  /// True when rank a reads and writes rank b's workspace in b's device memory: always with memory
  /// device, never with host, where a's GPU reaches b's with mixed (and a's own, unless host).
  bool reaches(int a, int b) const {
    if (memory_ == workspace_memory::host) return false;
    if (memory_ == workspace_memory::device || a == b) return true;
    return (reach_[static_cast<std::size_t>(a)] >> b) & 1u;
  }

  /// Fills the view's per-pair pointers (device_view) from what reaches what: device memory where
  /// the reader reaches it (mapped by open_peers), this rank's part of the shared host memory (set
  /// by open_host_workspaces, in host_[]) otherwise.
  void route_workspaces() {
    std::byte* own_device = static_cast<std::byte*>(workspace_);
    std::byte* own_host = host_part_[static_cast<std::size_t>(rank())];
    bool some_peer_reads_host = false;
    for (int p = 0; p < size(); ++p) {
      if (!reaches(rank(), p)) view_.workspace[p] = host_part_[static_cast<std::size_t>(p)];
      const bool p_reaches_me = reaches(p, rank());
      view_.inbox[p] = p_reaches_me ? own_device : own_host;
      view_.outbox[p] = p_reaches_me ? own_device : own_host;
      some_peer_reads_host = some_peer_reads_host || !p_reaches_me;
    }
    view_.workspace[rank()] = memory_ == workspace_memory::host ? own_host : own_device;
    view_.mirror = memory_ == workspace_memory::mixed && some_peer_reads_host ? own_host : nullptr;
  }

  /// Rank p's device workspace (records_, after publish_device_workspace) as this rank reaches it:
  /// its own, the address itself in this process (peer access enabled), or mapped over CUDA IPC.
  std::byte* map_peer(int p) {
    const peer_record& r = records_[static_cast<std::size_t>(p)];
    if (p == rank()) return static_cast<std::byte*>(workspace_);
    if (r.process == records_[static_cast<std::size_t>(rank())].process) {
      if (r.device != device_) enable_peer_access(r.device, p);
      return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(r.workspace_address));
    }
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, r.ipc_handle.data(), sizeof h);
    void* mapped = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // reported here: not left for the caller's next cudaGetLastError()
      COLLX_THROW(errc::cuda, "gpu: rank " + std::to_string(rank()) + " (device " + std::to_string(device_) +
                                  ") cannot map rank " + std::to_string(p) + "'s workspace (device " + std::to_string(r.device) +
                                  " of its process): cudaIpcOpenMemHandle: " + cudaGetErrorName(e) + " (" +
                                  cudaGetErrorString(e) + "); workspace_memory::host stages through host memory instead");
    }
    opened_.push_back(mapped);
    return static_cast<std::byte*>(mapped);
  }



  void enable_peer_access(int peer_device, int peer) const {
    int can = 0;
    gpu::check(cudaDeviceCanAccessPeer(&can, device_, peer_device), "cudaDeviceCanAccessPeer");
    if (!can)
      COLLX_THROW(errc::cuda, "gpu: device " + std::to_string(device_) + " (rank " + std::to_string(rank()) +
                                  ") has no peer access to device " + std::to_string(peer_device) + " (rank " +
                                  std::to_string(peer) + "); workspace_memory::host stages through host memory instead");
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else gpu::check(e, "cudaDeviceEnablePeerAccess");
  }

  /// Fills in window `w`'s per-rank sizes, addresses and this rank's pointers to its peers'
  /// buffers (`all`: every rank's record), opening the peer allocations not mapped yet (the cache:
  /// mappings_, keyed by rank and IPC handle; window_keys_ lists what window `w.id` uses).
  /// @throws collx::error (errc::cuda) when cudaIpcOpenMemHandle fails; what it opened stays
  ///         listed under w.id for unmap_window.
  void map_window(window& w, const std::vector<window_record>& all, std::uint64_t my_process) {
    for (int p = 0; p < size(); ++p) {
      const window_record& r = all[static_cast<std::size_t>(p)];
      w.bytes[static_cast<std::size_t>(p)] = r.bytes;
      w.address[static_cast<std::size_t>(p)] = r.address;
      if (memory_ != workspace_memory::device && p != rank()) continue;  // window calls stage: peers never read it
      if (p == rank() || r.process == my_process) {
        w.base[static_cast<std::size_t>(p)] = reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(r.address));
        continue;
      }
      auto& m = mappings_[{p, r.ipc_handle}];
      if (m.users == 0) {
        cudaIpcMemHandle_t ph{};
        std::memcpy(&ph, r.ipc_handle.data(), sizeof ph);
        void* mapped = nullptr;
        const cudaError_t e = cudaIpcOpenMemHandle(&mapped, ph, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          mappings_.erase({p, r.ipc_handle});
          (void)cudaGetLastError();
          COLLX_THROW(errc::cuda, "gpu::register_window: rank " + std::to_string(rank()) + " cannot map rank " +
                                      std::to_string(p) + "'s window: cudaIpcOpenMemHandle: " + cudaGetErrorName(e));
        }
        m.base = mapped;
      }
      ++m.users;
      w.base[static_cast<std::size_t>(p)] = static_cast<const std::byte*>(m.base) + r.offset;
      window_keys_[w.id].push_back({p, r.ipc_handle});
    }
  }

  /// Releases window `id`'s uses of peer mappings, closing those no other window uses.
  void unmap_window(std::uint32_t id) noexcept {
    auto it = window_keys_.find(id);
    if (it == window_keys_.end()) return;
    for (const auto& key : it->second) {
      auto m = mappings_.find(key);
      if (m != mappings_.end() && --m->second.users == 0) {
        (void)cudaIpcCloseMemHandle(m->second.base);
        mappings_.erase(m);
      }
    }
    window_keys_.erase(it);
  }

  /// Closes the IPC mappings of peers' workspaces and windows.
  void close_mappings() noexcept {
    for (auto& [key, m] : mappings_) (void)cudaIpcCloseMemHandle(m.base);
    mappings_.clear();
    window_keys_.clear();
    for (void* p : opened_) (void)cudaIpcCloseMemHandle(p);
    opened_.clear();
  }

  void release() noexcept {
    for (launch_record* r : {&eager_, &captured_}) {
      if (r->done) (void)cudaEventDestroy(r->done);
      *r = {};
    }
    close_mappings();
    if (workspace_) (void)cudaFree(workspace_);
    workspace_ = nullptr;
    if (status_) (void)cudaFreeHost(status_);
    status_ = nullptr;
    shared_ = shared_host_memory{};
  }

  /// The stream's id (cudaStreamGetId: handles such as cudaStreamPerThread name a different
  /// stream on each thread, and a destroyed stream's handle may come back for a new one); 0 when
  /// it cannot be told (a failed query's error is cleared), so that the caller waits. Not for a
  /// stream being captured: the query invalidates the capture.
  static unsigned long long stream_id(cudaStream_t stream) noexcept {
    unsigned long long id = 0;
    if (cudaStreamGetId(stream, &id) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return id;
  }
  /// The last call of one kind (eager, or in a capture): its stream, its capture, and an event
  /// recorded after it.
  struct launch_record {
    bool recorded = false;
    unsigned long long stream_id = 0;
    unsigned long long capture_id = 0;
    cudaEvent_t done = nullptr;
  };

  communicator* host_;
  int rank_ = 0, size_ = 0;  // the host's, when this communicator was made
  int device_ = 0;
  launch_record eager_{}, captured_{};  // order_after_previous_call
  workspace_layout layout_{};
  void* workspace_ = nullptr;
  device_status* status_ = nullptr;         // host address
  device_status* status_device_ = nullptr;  // the same memory, as kernels see it
  std::vector<peer_record> records_;
  std::vector<void*> opened_;               // IPC mappings to close
  std::map<mapping_key, mapping> mappings_;  // peer window allocations, by (rank, IPC handle)
  std::map<std::uint32_t, std::vector<mapping_key>> window_keys_;
  std::uint32_t next_window_ = 1;
  std::set<std::uint32_t> live_windows_;    // registered, not deregistered (owns)
  std::uint64_t token_ = next_token();      // window::communicator
  // A number no other device communicator of the process has had: a count from a random start.
  // The count is an inline function's static, one across translation units, but one per shared
  // library built with hidden visibility; their random starts keep the tokens apart (two of
  // 2^64 meet only by a chance of about 2^-64 per pair of communicators; without an entropy
  // source, the clock and the counter's address, which differ between libraries, but less surely).
  static std::uint64_t next_token() noexcept {
    static std::atomic<std::uint64_t> made{[]() noexcept -> std::uint64_t {
      try {
        std::random_device rd;
        return std::uint64_t{rd()} << 32 ^ rd();
      } catch (...) {  // no entropy source: the clock, and where this copy of the code lies
        return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&made));
      }
    }()};
    return made.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  unsigned blocks_ = 1;
  std::size_t two_shot_min_bytes_ = SIZE_MAX;
  ring_channels rings_{};
  std::string wiring_note_;                 // read_wiring
  bool failed_together_ = false;            // an on_every_rank step failed on some rank: every rank throws there
  std::array<std::size_t, 3> ring_min_bytes_{SIZE_MAX, SIZE_MAX, SIZE_MAX};  // per ring_index
  static constexpr std::size_t ring_index(collective c) noexcept {
    return c == collective::allreduce ? 0 : c == collective::reduce_scatter ? 1 : c == collective::all_gather ? 2 : 3;
  }
  // COLLX_GPU_WIRING: false for off (0, false); true when unset, auto or on (1, true).
  // @throws collx::error (errc::invalid_argument) naming the variable for anything else.
  static bool gpu_wiring_from_environment() {
    const auto v = env::get("COLLX_GPU_WIRING");
    return !v || env::parse_switch("COLLX_GPU_WIRING", *v) != 0;
  }
  // Rank 0 fills the figures its options leave at their defaults from the machine's wiring
  // (device_options::discover_wiring) and tells every rank what it used (wiring_note). Only rank
  // 0's figures count (its choices are broadcast), so only rank 0 reads the machine; reading it
  // is advice, so nothing it throws stops the communicator (every rank must reach the broadcasts).
  void read_wiring(device_options& opt, bool wanted) {
    std::string note;
    if (rank() == 0) {
      const bool open_rate = opt.cost.peer_read_bytes_per_second == direct_cost{}.peer_read_bytes_per_second;
      const bool open_ring = opt.rings.empty(), open_hops = opt.ring_hops.hop_bytes_per_second == 0;
      try {
        if (!wanted) {
          note = std::string("collx's default figures: ") +
                 (opt.discover_wiring ? "COLLX_GPU_WIRING is off" : "device_options::discover_wiring is off");
        } else if (!open_rate && !open_ring && !open_hops) {
          note = "device_options gives the read rate, rings and ring_hops";
        } else {
          topo::device_wiring_ranks ranks;
          for (int p = 0; p < size(); ++p) {
            const peer_record& r = records_[static_cast<std::size_t>(p)];
            ranks.busids.emplace_back(r.pci_bus_id.data(), ::strnlen(r.pci_bus_id.data(), r.pci_bus_id.size()));
            ranks.sm.push_back(r.compute_capability);
            std::uint64_t bits = 0;
            for (int q = 0; q < size(); ++q) bits |= reaches(p, q) ? std::uint64_t{1} << q : 0;
            ranks.reach.push_back(bits);
          }
          ranks.rings = opt.rings;  // rated as given; the machine's rings only where none are
          const topo::device_wiring_result w = topo::device_wiring(ranks, opt.discovery, opt.cost, opt.ring_hops);
          if (w.found) {
            if (open_rate) opt.cost.peer_read_bytes_per_second = w.cost.peer_read_bytes_per_second;
            if (open_hops) opt.ring_hops.hop_bytes_per_second = w.ring_hops.hop_bytes_per_second;
            if (open_ring) opt.rings = w.rings;
            note = w.note;
            if (memory_ != workspace_memory::device)  // direct_cost_where: the read rate is not used
              note += std::string("; the direct forms go by host memory's figures instead (") + workspace_memory_name(memory_) + " memory)";
          } else {
            note = "collx's default figures: " + w.note;
          }
        }
      } catch (const std::exception& e) {
        note = std::string("collx's default figures: reading the wiring failed: ") + e.what();
      } catch (...) {
        note = "collx's default figures: reading the wiring failed";
      }
    }
    std::uint64_t bytes = note.size();
    collx::broadcast<algo::direct>(*host_, std::span<std::uint64_t>(&bytes, 1), 0);
    note.resize(static_cast<std::size_t>(bytes));
    collx::broadcast<algo::direct>(*host_, std::span<char>(note.data(), note.size()), 0);
    wiring_note_ = std::move(note);
  }
  // This rank's ring threshold for `c` (device_options::ring_min_bytes): the option, else the
  // host's override `chosen` for c, else the figures of where the workspaces and the ring's hops
  // are (`device`: every workspace in device memory).
  std::size_t choose_ring_min_bytes(collective c, std::optional<algorithm> chosen, const device_options& opt, bool device) const {
    if (opt.ring_min_bytes != 0) return opt.ring_min_bytes;
    if (chosen == algorithm::ring) return 1;
    if (chosen == algorithm::direct) return SIZE_MAX;
    bool hops_on_device = true;  // every hop of every channel between workspaces in device memory, both ways
    for (int ch = 0; ch < rings_.count; ++ch) {
      const ring_order& r = rings_.ring[ch];
      for (int k = 0; k < r.world && hops_on_device; ++k) hops_on_device = reaches(r.at(k), r.at(k + 1)) && reaches(r.at(k + 1), r.at(k));
    }
    const ring_phase phase = c == collective::allreduce        ? ring_phase::all_reduce
                             : c == collective::reduce_scatter ? ring_phase::reduce_scatter
                                                               : ring_phase::all_gather;
    return ring_crossover_bytes_where(phase, size(), layout_.slot_bytes, device, opt.cost, hops_on_device, opt.ring_hops);
  }
  workspace_memory memory_ = workspace_memory::device;
  std::vector<std::uint64_t> reach_;        // reach_[a] bit b: rank a's GPU reaches rank b's (choose_workspace_memory)
  std::array<std::byte*, max_device_world> host_part_{};  // each rank's part of the shared host memory, mapped here
  shared_host_memory shared_;                // every rank's host workspace, when memory_ is host or mixed
  device_view view_{};
};

}  // namespace gpu
}  // namespace v0
}  // namespace collx
