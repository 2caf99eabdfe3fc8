/// @file cuda/device_plan.hpp
/// The host-side decisions of collx's device collectives (cuda/device_communicator.hpp,
/// cuda/device_collectives.cuh), in plain C++ so they are unit-tested without a GPU:
///  - the workspace every rank allocates on its GPU and shares with its peers (flags + staging),
///  - the record each rank publishes when the communicator is created (CUDA IPC handle, device,
///    process) and the checks made on the records of all ranks,
///  - the 24-bit call signature every flag carries, so ranks that disagree on a call fail with
///    errc::mismatch naming the field instead of hanging,
///  - how a call is cut into chunks that fit a staging slot and into per-block element ranges.
///  - which form of the direct all-reduce (one-shot or two-shot) a size gets, and two-shot's pieces,
///  - whether the workspaces live in device memory (peer access) or in shared host memory.
///
/// The protocol (one barrier per chunk, sequence numbers, two staging slots) is described in
/// cuda/device_collectives.cuh.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collx/algo/schedule.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/host_device.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// Most ranks a device communicator holds (one node's GPUs, or several ranks per GPU).
inline constexpr int max_device_world = 16;
/// Most thread blocks a device collective launches; each block synchronises with the same block of
/// every peer through its own flags, so blocks of one rank never wait for each other.
inline constexpr unsigned max_device_blocks = 64;
/// Threads per block of the device collectives (16 warps).
inline constexpr unsigned device_threads_per_block = 512;

// ---------------------------------------------------------------------------------------------
// Workspace

/// Bytes of staging per rank when device_options::staging_bytes is not given: two 4 MiB slots.
inline constexpr std::size_t default_staging_bytes = std::size_t{8} << 20;

/// Byte layout of one rank's workspace: one cudaMalloc shared with the peers over CUDA IPC; or,
/// with workspace_memory::host, the words below flags_offset (this rank's alone) in device memory
/// and the rest in the shared host object.
///   counters[2]   u64: [0] the epoch of the last chunk this rank finished (every block of a call
///                 uses the same chunk epochs, so staging slots alternate for the whole rank);
///                 [1] blocks of the running call that are done (the last one advances [0])
///   claim         u64: nonzero once a kernel of this rank has failed (the first failing thread
///                 sets it; later calls end at once): 1 when this rank's flags carry poison, 2
///                 when they carry the rejection mark (device_collectives.cuh, claim_poisoned)
///   p2p_sent[max_device_world] u64: point-to-point chunks this rank has sent to rank p, ever
///   p2p_received[max_device_world] u64: point-to-point chunks this rank has taken from rank p
///   flags[max_device_blocks][max_device_world] u64: flags[b][p] = the last flag_word rank p's block b
///                 wrote here (written by peers, read by this rank)
///   exchange[2][max_device_blocks][max_device_world] u64: counts a call publishes before its first
///                 barrier (all_to_all_v: this rank's send count per destination), one copy per
///                 block, the call's first epoch e in exchange[e % 2]
///   p2p_ready[max_device_blocks][max_device_world] u64: [b][p] = flag_word(k, signature): rank p's
///                 block b has put its part of its k-th chunk for this rank in p's p2p staging
///   p2p_ack[max_device_blocks][max_device_world] u64: [b][p] = flag_word(k, signature): rank p's
///                 block b has taken its part of this rank's k-th chunk for p
///   p2p_size[max_device_blocks][max_device_world] u64: [b][p] = p2p_message_word of the message
///                 rank p's block b is sending here (written before its first ready flag)
///   staging       two slots of slot_bytes; chunk epoch e uses slot e % 2
///   p2p staging   one more slot_bytes, in two halves: point-to-point chunk k uses half k % 2
///                 (apart from the collectives' slots, which peers may still read after a call)
/// The tables and staging start at multiples of 256 bytes, so vector loads of staging are aligned.
struct workspace_layout {
  std::size_t counters_offset = 0;      ///< bytes from the workspace start
  std::size_t claim_offset = 0;         ///< bytes from the workspace start
  std::size_t p2p_sent_offset = 0;      ///< bytes from the workspace start
  std::size_t p2p_received_offset = 0;  ///< bytes from the workspace start
  std::size_t flags_offset = 0;         ///< bytes from the workspace start (the shared part starts here)
  std::size_t exchange_offset = 0;      ///< bytes from the workspace start
  std::size_t p2p_ready_offset = 0;     ///< bytes from the workspace start
  std::size_t p2p_ack_offset = 0;       ///< bytes from the workspace start
  std::size_t p2p_size_offset = 0;      ///< bytes from the workspace start
  std::size_t staging_offset = 0;       ///< bytes from the workspace start
  std::size_t p2p_staging_offset = 0;   ///< bytes from the workspace start
  std::size_t slot_bytes = 0;           ///< bytes per staging slot
  std::size_t total_bytes = 0;          ///< the allocation
  /// The largest staging for_staging accepts, bytes: far above any GPU's memory, far below where
  /// 1.5 x staging plus the tables would wrap.
  static constexpr std::size_t max_staging_bytes = std::size_t{1} << 40;

  /// Layout for a staging area of `staging_bytes` (two slots; rounded down to 256-byte slots),
  /// plus one slot of point-to-point staging.
  /// @throws collx::error (errc::invalid_argument) when a slot would be smaller than 4 KiB, or the
  ///         staging is larger than max_staging_bytes (the offsets would wrap past SIZE_MAX).
  static workspace_layout for_staging(std::size_t staging_bytes) {
    if (staging_bytes > max_staging_bytes)
      COLLX_THROW(errc::invalid_argument, "gpu: staging of " + std::to_string(staging_bytes) + " bytes is too large (at most " +
                                              std::to_string(max_staging_bytes) + ", 1 TiB)");
    workspace_layout w;
    const std::size_t row = std::size_t{max_device_world} * sizeof(std::uint64_t);
    const std::size_t table = std::size_t{max_device_blocks} * row;
    w.counters_offset = 0;
    w.claim_offset = 2 * sizeof(std::uint64_t);
    w.p2p_sent_offset = round_up(w.claim_offset + sizeof(std::uint64_t), 64);
    w.p2p_received_offset = w.p2p_sent_offset + row;
    w.flags_offset = round_up(w.p2p_received_offset + row, 256);
    w.exchange_offset = round_up(w.flags_offset + table, 256);
    w.p2p_ready_offset = round_up(w.exchange_offset + 2 * table, 256);
    w.p2p_ack_offset = w.p2p_ready_offset + table;
    w.p2p_size_offset = w.p2p_ack_offset + table;
    w.staging_offset = round_up(w.p2p_size_offset + table, 256);
    w.slot_bytes = staging_bytes / 2 / 256 * 256;
    if (w.slot_bytes < 4096)
      COLLX_THROW(errc::invalid_argument, "gpu: staging of " + std::to_string(staging_bytes) +
                                              " bytes is too small (two slots of at least 4 KiB)");
    w.p2p_staging_offset = w.staging_offset + 2 * w.slot_bytes;
    w.total_bytes = w.p2p_staging_offset + w.slot_bytes;
    return w;
  }

  /// a rounded up to a multiple of m (m > 0).
  static constexpr std::size_t round_up(std::size_t a, std::size_t m) noexcept { return (a + m - 1) / m * m; }
};

// ---------------------------------------------------------------------------------------------
// Call signature and flag words

/// Bits of a flag word below the epoch.
inline constexpr unsigned flag_signature_bits = 24;
/// The signature a rank writes with the epoch of the call it rejected (bad arguments): no call's
/// signature (device_signature::make never gives it), so a peer waiting at that epoch knows the
/// rank gave up, while peers still at earlier epochs pass (the rank finished those).
inline constexpr std::uint32_t rejected_signature_bits = (1u << flag_signature_bits) - 1;

/// A call's signature, packed into the low 24 bits of every flag word: collective (3 bits), element
/// type (6 bits of the hash of its name and size), op (5 bits of the hash of its name), root (4 bits)
/// and count (6 bits of the hash of the count and, for registered windows, the window and offset;
/// ring calls flip bits of it: ring_signature). Two ranks whose signatures differ are making
/// different calls; the converse holds up to hash collisions of the type, op and count (1 in 64,
/// 32 and about 62). The count field's value 0 (empty_count_bits) is that of count 0 without a
/// layout (a rank's one meeting when it moves nothing) alone: a rank that passed count 0 where its
/// peers did not is always told apart (that meeting would otherwise pass a peer that then reads
/// its stale staging). all_to_all_v signs count 0 with a layout, and is kept off it too.
struct device_signature {
  std::uint32_t bits = 0;  ///< the packed 24 bits

  /// Bit fields: {shift, width, name}.
  struct field {
    unsigned shift,    ///< the field's lowest bit in `bits`
        width;         ///< its width, bits
    const char* name;  ///< what it holds, for messages
  };
  /// The fields, low bits first.
  static constexpr std::array<field, 5> fields{{{0, 3, "collective"},
                                                {3, 6, "element type"},
                                                {9, 5, "reduction op"},
                                                {14, 4, "root"},
                                                {18, 6, "count (or window and offset, or algorithm)"}}};
  /// The count field of a call with count 0 and no layout, and of no other call.
  static constexpr std::uint32_t empty_count_bits = 0;

  /// Packs a call: `type_name`/`type_size` of the element, `op_name` ("" for collectives without an
  /// op), `root` (-1 when the collective has none), `count` (elements, as the host API counts them)
  /// and `layout` (registered windows: window id and offset, hashed with the count; 0 otherwise).
  static device_signature make(collective coll, std::string_view type_name, std::size_t type_size,
                               std::string_view op_name, int root, std::size_t count, std::uint64_t layout = 0) noexcept {
    const auto h = [](std::uint64_t x) { return static_cast<std::uint32_t>(x ^ (x >> 29) ^ (x >> 47)); };
    std::uint32_t v = 0;
    const std::uint32_t parts[5] = {
        static_cast<std::uint32_t>(coll),
        h(detail::fnv1a(type_name) + type_size),
        op_name.empty() ? 0u : h(detail::fnv1a(op_name)),
        static_cast<std::uint32_t>(root + 1),
        h(detail::fnv1a(std::string_view(reinterpret_cast<const char*>(&layout), sizeof layout),
                        detail::fnv1a(std::string_view(reinterpret_cast<const char*>(&count), sizeof count))))};
    for (std::size_t i = 0; i < fields.size(); ++i)
      v |= (parts[i] & ((1u << fields[i].width) - 1)) << fields[i].shift;
    const unsigned count_shift = fields[4].shift;
    const std::uint32_t count_mask = ((1u << fields[4].width) - 1) << count_shift;
    if (count == 0 && layout == 0) v = (v & ~count_mask) | (empty_count_bits << count_shift);
    else if (((v & count_mask) >> count_shift) == empty_count_bits) v ^= 1u << count_shift;  // reserved for count 0
    if (v == rejected_signature_bits) v ^= 1u << count_shift;  // reserved (the count hash loses one more value)
    return {v};
  }

  /// The fields in which `a` and `b` differ, comma separated ("" if none).
  static std::string differing_fields(device_signature a, device_signature b) {
    std::string out;
    for (const auto& f : fields) {
      const std::uint32_t m = ((1u << f.width) - 1) << f.shift;
      if ((a.bits & m) != (b.bits & m)) out += (out.empty() ? "" : ", ") + std::string(f.name);
    }
    return out;
  }
};

/// The epoch a failing rank writes into its peers' flags so that their waits end at once. Epochs
/// have 40 bits: a communicator serves poison_epoch - 1 chunk epochs (about 20 days of calls 1.6 us
/// apart), then an ordinary flag would read as poison.
inline constexpr std::uint64_t poison_epoch = (std::uint64_t{1} << (64 - flag_signature_bits)) - 1;

/// The flag word of chunk `epoch` (>= 1) of a call with signature `sig`.
COLLX_HOST_DEVICE constexpr std::uint64_t flag_word(std::uint64_t epoch, device_signature sig) noexcept {
  return (epoch << flag_signature_bits) | sig.bits;
}
/// The epoch of a flag word.
COLLX_HOST_DEVICE constexpr std::uint64_t flag_epoch(std::uint64_t word) noexcept { return word >> flag_signature_bits; }
/// The signature of a flag word.
COLLX_HOST_DEVICE constexpr device_signature flag_signature(std::uint64_t word) noexcept {
  return {static_cast<std::uint32_t>(word & ((std::uint64_t{1} << flag_signature_bits) - 1))};
}

/// What a block waiting at chunk `epoch` of a call signed `sig` makes of a peer's flag word.
enum class flag_verdict : std::uint8_t {
  wait,      ///< the peer has not reached this epoch yet
  pass,      ///< the peer's writes for this epoch (or a later one) are done
  poisoned,  ///< the peer gave up (timeout, mismatch): end the call
  rejected,  ///< the peer rejected this very call's arguments: end the call, poisoning nobody
  mismatch,  ///< the peer is at this epoch in another call
};

/// The verdict on flag `word` for a wait at `epoch` in a call signed `sig` (barrier() in
/// device_collectives.cuh). A rejection is flagged at the rejected call's first epoch: peers at
/// earlier epochs pass (the rejecting rank finished them), peers at that epoch end. Every peer got
/// the rejection from the rejecting rank itself, so a rank ending on it poisons nobody (poison
/// would cut short a third rank still finishing the previous call).
COLLX_HOST_DEVICE constexpr flag_verdict judge_flag(std::uint64_t word, std::uint64_t epoch, device_signature sig) noexcept {
  const std::uint64_t e = flag_epoch(word);
  if (e == poison_epoch) return flag_verdict::poisoned;
  if (e < epoch) return flag_verdict::wait;
  if (e == epoch && flag_signature(word).bits == rejected_signature_bits) return flag_verdict::rejected;
  if (e == epoch && flag_signature(word).bits != sig.bits) return flag_verdict::mismatch;
  return flag_verdict::pass;
}

/// The verdict on a point-to-point flag word for a wait at chunk `seq` of a message signed `sig`:
/// the sender's ready flag (the receiver waits for chunk seq) or the receiver's ack (the sender
/// waits until the receiver has taken chunk seq). Below seq: wait. At or past it: the peer's flag
/// was written in the message holding chunk seq (a sender cannot get past a chunk its receiver has
/// not acked, nor a receiver past one not sent), so another signature is another message:
/// mismatch. `check_signature` false for a sender waiting only for a staging half to come back,
/// which the previous message may have acked. The point-to-point words are never poisoned (a
/// peer's failure shows in its collective flags: see p2p_next in device_collectives.cuh).
COLLX_HOST_DEVICE constexpr flag_verdict judge_p2p_flag(std::uint64_t word, std::uint64_t seq, device_signature sig,
                                                        bool check_signature) noexcept {
  if (flag_epoch(word) < seq) return flag_verdict::wait;
  if (check_signature && flag_signature(word).bits != sig.bits) return flag_verdict::mismatch;
  return flag_verdict::pass;
}

/// What a rank was doing when it gave up (device_status::during).
enum class device_activity : std::uint32_t {
  collective = 0,  ///< a collective call (the waits are at chunk epochs)
  send = 1,        ///< a send: waiting for the receiver to take a chunk (sequence numbers of the pair)
  recv = 2,        ///< a recv: waiting for the sender's chunk
};

/// What a device collective writes to the communicator's host-mapped status when it gives up.
enum class device_failure : std::uint32_t {
  none = 0,           ///< no failure
  timeout = 1,        ///< a peer's flag did not arrive within the communicator's timeout
  mismatch = 2,       ///< a peer's flag carried another call signature
  peer_failed = 3,    ///< a peer gave up first and poisoned or marked this rank's flags
  rejected = 4,       ///< this rank rejected a call's arguments, which ended the communicator
  counts = 5,         ///< all_to_all_v: a peer sends another count than this rank receives from it
  message_size = 6,   ///< recv: the matching send carries another count or element size
  launch_failed = 7,  ///< this rank could not launch a call's kernel, which ended the communicator
};

/// A point-to-point message's size as its sender publishes it: the count (low 48 bits kept) and
/// the element size (capped at 65535), so a receiver compares both exactly.
COLLX_HOST_DEVICE constexpr std::uint64_t p2p_message_word(std::uint64_t count, std::uint64_t type_size) noexcept {
  return (count << 16) | (type_size > 0xffff ? 0xffff : type_size);
}

/// The host-mapped status of a device communicator (written once by the first failing thread).
struct device_status {
  std::uint32_t failure = 0;    ///< a device_failure; 0 while all is well
  std::int32_t peer = -1;       ///< the rank waited for
  std::uint32_t block = 0;      ///< the thread block that failed
  std::uint32_t theirs = 0;     ///< the peer's signature bits (mismatch)
  std::uint32_t mine = 0;       ///< this rank's signature bits (mismatch)
  std::uint32_t during = 0;     ///< a device_activity
  std::uint64_t epoch = 0;      ///< the chunk epoch waited for (send/recv: the pair's chunk sequence number)
  std::uint64_t seen = 0;       ///< the peer's flag word when the wait ended (message_size: its p2p_message_word)
  std::uint64_t expected = 0;   ///< message_size: this rank's p2p_message_word
};

/// The collx::error message for a failed status of rank `me`.
inline std::string describe_failure(const device_status& s, int me) {
  const auto during = static_cast<device_activity>(s.during);
  const bool p2p = during != device_activity::collective;
  const std::string where =
      "gpu: rank " + std::to_string(me) + " (block " + std::to_string(s.block) +
      (during == device_activity::send   ? ", sending chunk " + std::to_string(s.epoch) + " to rank " + std::to_string(s.peer)
       : during == device_activity::recv ? ", receiving chunk " + std::to_string(s.epoch) + " from rank " + std::to_string(s.peer)
                                         : ", chunk epoch " + std::to_string(s.epoch)) +
      ")";
  switch (static_cast<device_failure>(s.failure)) {
    case device_failure::none: return "";
    case device_failure::timeout:
      return where + ": timed out waiting for rank " + std::to_string(s.peer) + " (its last flag: " +
             (p2p ? "chunk " : "epoch ") + std::to_string(flag_epoch(s.seen)) + "); the peer is late, dead, or " +
             (p2p ? "not making the matching " + std::string(during == device_activity::send ? "recv" : "send") +
                        " (a send completes only once received: two ranks that both send first wait for each other)"
                  : std::string("not making the same calls"));
    case device_failure::mismatch:
      return where + ": call signature differs from rank " + std::to_string(s.peer) + "'s (" +
             device_signature::differing_fields({s.theirs}, {s.mine}) +
             (p2p ? "): the send and the recv do not match" : "): the ranks are not making the same collective call");
    case device_failure::peer_failed:
      return where + ": rank " + std::to_string(s.peer) +
             " failed first (timeout, mismatch, a call it rejected for invalid arguments, or a call whose kernel it could "
             "not launch) and ended the call";
    case device_failure::rejected:
      return "gpu: rank " + std::to_string(me) +
             " rejected a call's arguments (see the error that call threw), which ended the communicator on every rank";
    case device_failure::launch_failed:
      return "gpu: rank " + std::to_string(me) +
             " could not launch a call's kernel (see the errc::cuda error that call threw), which ended the communicator on "
             "every rank";
    case device_failure::message_size:
      return where + ": the send and the recv do not match: rank " + std::to_string(s.peer) + " sends " +
             std::to_string(s.seen >> 16) + " elements of " + std::to_string(s.seen & 0xffff) + " bytes, this recv takes " +
             std::to_string(s.expected >> 16) + " elements of " + std::to_string(s.expected & 0xffff) + " bytes";
    case device_failure::counts:
      return where + ": all_to_all_v counts differ: rank " + std::to_string(s.peer) + " sends " + std::to_string(s.theirs) +
             " elements to rank " + std::to_string(me) + ", whose recv_counts[" + std::to_string(s.peer) + "] is " +
             std::to_string(s.mine) + (s.theirs == 0xffffffffu || s.mine == 0xffffffffu ? " (counts above 2^32 - 1 shown as that)" : "");
  }
  return where + ": unknown failure " + std::to_string(s.failure);
}

/// The collx error code of a failure.
constexpr errc errc_of(device_failure f) noexcept {
  switch (f) {
    case device_failure::timeout: return errc::timeout;
    case device_failure::mismatch: return errc::mismatch;
    case device_failure::peer_failed: return errc::aborted;
    case device_failure::rejected: return errc::invalid_argument;
    case device_failure::counts: return errc::mismatch;
    case device_failure::message_size: return errc::mismatch;
    case device_failure::launch_failed: return errc::cuda;
    case device_failure::none: break;
  }
  return errc::internal;
}

// ---------------------------------------------------------------------------------------------
// Peer records

/// Where the ranks' workspaces (flags, exchange rows, staging slots) live, which decides how the
/// GPUs reach each other. The same for every rank of a communicator (choose_workspace_memory).
enum class workspace_memory : std::uint32_t {
  /// device where every rank's GPU reaches every other rank's device memory, mixed where some
  /// pairs of ranks reach each other, host where none do.
  automatic = 0,
  /// Each rank's device memory, mapped into its peers (CUDA IPC, peer access): NVLink or PCIe
  /// peer-to-peer. Registered windows are read in place (zero-copy).
  device = 1,
  /// Pinned host memory shared by all ranks (POSIX shared memory registered with
  /// cudaHostRegister): every GPU writes its staging and its peers' flags there and reads its
  /// peers' staging from there, over PCIe, as NCCL's SHM transport does between GPUs without peer
  /// access. Works between any GPUs of one node, at host-memory bandwidth; window calls stage too.
  host = 2,
  /// Both, per pair of ranks (what automatic picks when some GPUs reach each other and others do
  /// not, as on a DGX-1 across its sockets): a rank reads a peer's data from, and writes its flags
  /// into, the peer's device memory where its GPU reaches the peer's, the peer's part of the
  /// shared host memory otherwise; it stages what several peers read (collective slots, exchange
  /// rows) in both when some reader lacks peer access, and what one peer reads (its ring
  /// successor's slot, a send's staging, a reduce-scatter's or all-to-all's row for that peer)
  /// where that peer reads it. Window calls stage. Asking for it is asking for automatic.
  mixed = 3,
};

/// "automatic", "device", "host" or "mixed".
inline const char* workspace_memory_name(workspace_memory m) noexcept {
  switch (m) {
    case workspace_memory::automatic: return "automatic";
    case workspace_memory::device: return "device";
    case workspace_memory::host: return "host";
    case workspace_memory::mixed: return "mixed";
  }
  return "unknown";
}

/// What each rank publishes when a device communicator is created (fixed size, exchanged as bytes
/// over the host communicator).
struct peer_record {
  std::uint32_t magic = 0x636f6c78;   ///< "colx"
  /// Layout version of this record, the workspace and the setup (2: exchange area; 3: memory;
  /// 4: point-to-point; 5: ring, mixed memory; 6: PCI bus id, compute capability).
  std::uint32_t version = 6;
  std::uint64_t process = 0;          ///< pid and a per-process random token: equal = same address space
  std::uint64_t workspace_address = 0;  ///< the workspace's device address in the owner's process
  std::uint64_t workspace_bytes = 0;  ///< size of the workspace
  std::uint64_t staging_bytes = 0;    ///< the staging the owner asked for (must agree)
  std::int32_t device = -1;           ///< CUDA ordinal in the owner's process
  std::int32_t sm_count = 0;          ///< multiprocessors of that device
  std::int32_t compute_capability = 0;  ///< of that device, major x10 + minor (90: sm_90)
  std::uint32_t reserved2 = 0;        ///< zero
  workspace_memory memory = workspace_memory::automatic;  ///< what the owner asked for (device_options::memory)
  std::uint32_t reserved = 0;         ///< zero
  std::array<unsigned char, 16> uuid{};        ///< the device's UUID (cudaDeviceProp::uuid)
  std::array<unsigned char, 64> ipc_handle{};  ///< cudaIpcMemHandle_t of the workspace
  std::array<char, 32> pci_bus_id{};  ///< the device's PCI bus id (cudaDeviceGetPCIBusId, "dddd:bb:dd.f"), empty when not known
  std::array<char, 64> node{};        ///< the owner's node id (node_id_from_environment: COLLX_NODE_ID or the host name), cut to 63 bytes (ids alike in those are taken as one node)

  /// Sets `node` from a node id (cut to 63 bytes, zero-terminated).
  void set_node(std::string_view id) noexcept {
    node.fill('\0');
    std::memcpy(node.data(), id.data(), std::min(id.size(), node.size() - 1));
  }
};

/// How this rank reaches a peer's workspace.
enum class peer_path {
  self,          ///< its own workspace
  same_process,  ///< another rank of this process: the address is valid here (same or peer device)
  ipc,           ///< another process: cudaIpcOpenMemHandle
  host_memory,   ///< another rank whose workspace this rank reaches in shared host memory (memory host, or mixed without peer access)
};

/// "self", "same process", "ipc" or "host memory".
inline const char* peer_path_name(peer_path p) noexcept {
  switch (p) {
    case peer_path::self: return "self";
    case peer_path::same_process: return "same process";
    case peer_path::ipc: return "ipc";
    case peer_path::host_memory: return "host memory";
  }
  return "unknown";
}

/// The path to the workspace of `peer` for rank `me`.
inline peer_path path_to(const std::vector<peer_record>& records, int me, int peer) {
  if (peer == me) return peer_path::self;
  return records[static_cast<std::size_t>(peer)].process == records[static_cast<std::size_t>(me)].process
             ? peer_path::same_process
             : peer_path::ipc;
}

/// Checks the records of all ranks (index = rank) as rank `me` sees them.
/// @throws collx::error (errc::invalid_argument) when the world is larger than max_device_world, a
///         record is not a collx record, or the ranks are on different nodes; (errc::mismatch) when
///         ranks asked for different staging sizes or run different record versions.
inline void check_records(const std::vector<peer_record>& records, int me) {
  if (records.size() > static_cast<std::size_t>(max_device_world))
    COLLX_THROW(errc::invalid_argument, "gpu: " + std::to_string(records.size()) + " ranks; a device communicator holds at most " +
                                            std::to_string(max_device_world));
  const peer_record& mine = records.at(static_cast<std::size_t>(me));
  for (std::size_t r = 0; r < records.size(); ++r) {
    const peer_record& p = records[r];
    if (p.magic != mine.magic) COLLX_THROW(errc::invalid_argument, "gpu: rank " + std::to_string(r) + " sent no collx device record");
    if (p.version != mine.version)
      COLLX_THROW(errc::mismatch, "gpu: rank " + std::to_string(r) + " runs device record version " + std::to_string(p.version) +
                                      ", rank " + std::to_string(me) + " version " + std::to_string(mine.version));
    if (p.staging_bytes != mine.staging_bytes)
      COLLX_THROW(errc::mismatch, "gpu: staging size differs: rank " + std::to_string(r) + " has " +
                                      std::to_string(p.staging_bytes) + " bytes, rank " + std::to_string(me) + " has " +
                                      std::to_string(mine.staging_bytes));
  }
  for (std::size_t r = 0; r < records.size(); ++r)
    if (records[r].node != mine.node)
      COLLX_THROW(errc::invalid_argument, "gpu: a device communicator joins the GPUs of one node, but rank " + std::to_string(r) +
                                              " is on node '" + std::string(records[r].node.data()) + "' and rank " +
                                              std::to_string(me) + " on '" + std::string(mine.node.data()) +
                                              "' (COLLX_NODE_ID or the host name); between nodes use collx::nccl, or a "
                                              "device communicator per node under a hierarchy");
}

/// The workspace memory of a communicator, decided alike on every rank from what each rank asked
/// for (records[r].memory) and what its GPU reaches (reach[r] bit p: rank r's GPU can read and
/// write rank p's device memory: the same GPU, or peer access): host when any rank asks for it;
/// otherwise device when every GPU reaches every other, else mixed where some pair of ranks
/// reaches each other and host where none does (unless a rank asked for device). Asking for
/// mixed counts as automatic.
/// Precondition: reach.size() == records.size().
/// @throws collx::error (errc::mismatch) when one rank asks for device memory and another for
///         host; (errc::invalid_argument) when a rank asks for device memory and some rank's GPU
///         cannot reach another's (the message names both ranks).
inline workspace_memory choose_workspace_memory(const std::vector<peer_record>& records, const std::vector<std::uint64_t>& reach) {
  int asked_device = -1, asked_host = -1;
  for (std::size_t r = 0; r < records.size(); ++r) {
    if (records[r].memory == workspace_memory::device && asked_device < 0) asked_device = static_cast<int>(r);
    if (records[r].memory == workspace_memory::host && asked_host < 0) asked_host = static_cast<int>(r);
  }
  if (asked_device >= 0 && asked_host >= 0)
    COLLX_THROW(errc::mismatch, "gpu: workspace memory differs: rank " + std::to_string(asked_device) +
                                    " asks for device memory, rank " + std::to_string(asked_host) + " for host memory");
  if (asked_host >= 0) return workspace_memory::host;
  bool some_pair = false;  // two ranks on different GPUs with peer access, or on one GPU
  for (std::size_t r = 0; r < records.size(); ++r)
    for (std::size_t p = 0; p < records.size(); ++p) some_pair = some_pair || (p != r && ((reach.at(r) >> p) & 1u));
  for (std::size_t r = 0; r < records.size(); ++r)
    for (std::size_t p = 0; p < records.size(); ++p)
      if (p != r && !((reach.at(r) >> p) & 1u)) {
        if (asked_device < 0) return some_pair ? workspace_memory::mixed : workspace_memory::host;
        COLLX_THROW(errc::invalid_argument,
                    "gpu: rank " + std::to_string(asked_device) + " asks for device memory, but rank " + std::to_string(r) +
                        "'s GPU has no peer access to rank " + std::to_string(p) +
                        "'s (or device_options::no_peer_access takes that pair out); use workspace_memory::host or "
                        "automatic (staging through host memory)");
      }
  return workspace_memory::device;
}

/// Whether every rank's device is one and the same GPU (equal UUIDs; ranks as threads or
/// processes sharing it).
inline bool one_gpu_for_all(const std::vector<peer_record>& records) noexcept {
  return std::all_of(records.begin(), records.end(), [&](const peer_record& r) { return r.uuid == records.front().uuid; });
}

/// Blocks a call may use, the same on every rank: two per multiprocessor of the smallest device,
/// divided by the most ranks sharing one device (their kernels must be resident side by side, since
/// each waits for the others; two 512-thread blocks per SM leave room for that), within
/// [1, max_device_blocks].
inline unsigned block_cap(const std::vector<peer_record>& records) {
  int min_sm = 1 << 30;
  std::size_t sharing = 1;
  for (const auto& r : records) {
    min_sm = std::min(min_sm, r.sm_count);
    const auto same = static_cast<std::size_t>(std::count_if(records.begin(), records.end(), [&](const peer_record& q) {
      return q.uuid == r.uuid;
    }));
    sharing = std::max(sharing, same);
  }
  const long cap = static_cast<long>(min_sm) * 2 / static_cast<long>(sharing);
  return static_cast<unsigned>(std::clamp<long>(cap, 1, max_device_blocks));
}

/// The hardware work queues a process has to each GPU, as the CUDA runtime takes them from
/// CUDA_DEVICE_MAX_CONNECTIONS (the value given, `unset` or an unreadable one: CUDA's default, 8),
/// within [1, 32].
inline int hardware_queues(const char* cuda_device_max_connections) {
  constexpr int cuda_default = 8;
  if (!cuda_device_max_connections || !*cuda_device_max_connections) return cuda_default;
  char* end = nullptr;
  const long v = std::strtol(cuda_device_max_connections, &end, 10);
  if (*end != '\0') return cuda_default;
  return static_cast<int>(std::clamp<long>(v, 1, 32));
}

/// Checks that the ranks of one process that share a GPU can run side by side. Each waits in its
/// kernels for the others', so each rank's stream needs a hardware queue of its own: the CUDA
/// runtime spreads a process's streams over `queues` queues per GPU (CUDA_DEVICE_MAX_CONNECTIONS),
/// and a kernel queued behind a kernel of the same rank that has not ended (two-shot all-reduce,
/// or any next call) keeps a peer's kernel behind it in that queue from starting: the call would
/// end at its timeout. Ranks in separate processes are not affected (they time-slice the GPU).
/// @throws collx::error (errc::invalid_argument) when more of `me`'s process's ranks share its GPU
/// than there are queues, naming them and the setting to change.
inline void check_hardware_queues(const std::vector<peer_record>& records, int me, int queues) {
  const peer_record& mine = records.at(static_cast<std::size_t>(me));
  std::vector<int> sharing;
  for (std::size_t r = 0; r < records.size(); ++r)
    if (records[r].process == mine.process && records[r].uuid == mine.uuid) sharing.push_back(static_cast<int>(r));
  if (static_cast<int>(sharing.size()) <= queues) return;
  std::string ranks;
  for (std::size_t i = 0; i < sharing.size(); ++i)
    ranks += (i == 0 ? "" : i + 1 == sharing.size() ? " and " : ", ") + std::to_string(sharing[i]);
  COLLX_THROW(errc::invalid_argument,
              "gpu: ranks " + ranks + " share one GPU in one process, which has " + std::to_string(queues) +
                  " hardware queue" + (queues == 1 ? "" : "s") + " to it (CUDA_DEVICE_MAX_CONNECTIONS" +
                  (queues == 8 ? ", CUDA's default 8" : "") + "); a rank's kernel queued behind its own earlier one "
                  "would keep a peer's kernel from starting, and the call would wait until its timeout. Set "
                  "CUDA_DEVICE_MAX_CONNECTIONS to at least " + std::to_string(sharing.size()) +
                  " (at most 32) before CUDA starts, or run the ranks as separate processes");
}

// ---------------------------------------------------------------------------------------------
// Chunks and blocks

/// Elements per vector of a device collective on T: 16 bytes' worth when T divides 16 bytes, else 1.
template <class T>
inline constexpr std::size_t device_vector_elements = (sizeof(T) <= 16 && 16 % sizeof(T) == 0) ? 16 / sizeof(T) : 1;

/// How a call moves through the staging slots. A call moves `count` elements per rank row (the whole
/// vector for all-reduce/broadcast/reduce, the per-rank block for reduce-scatter/all-gather); a slot
/// holds `rows` rows of one chunk (world size rows for reduce-scatter, whose chunk carries a piece of
/// every rank's block; 1 otherwise), each row starting at a multiple of `row_pitch` elements.
struct chunk_plan {
  std::size_t count = 0;         ///< elements per row of the call
  std::size_t chunk = 0;         ///< elements per row of a full chunk (a multiple of the vector width)
  std::size_t row_pitch = 0;     ///< elements between rows in a slot (chunk, a multiple of the vector width)
  std::size_t chunks = 0;        ///< chunks of the call: ceil(count / chunk); 0 when count is 0
  unsigned blocks = 0;           ///< thread blocks of the launch
  std::size_t vector = 1;        ///< elements per vector

  /// Elements of row chunk i: [i * chunk, min(count, (i + 1) * chunk)).
  COLLX_HOST_DEVICE constexpr std::size_t chunk_begin(std::size_t i) const noexcept { return i * chunk; }
  /// Elements in chunk i.
  COLLX_HOST_DEVICE constexpr std::size_t chunk_size(std::size_t i) const noexcept {
    return std::min(count, (i + 1) * chunk) - i * chunk;
  }
};

/// Plans a call of `count` elements of `elem_size` bytes per row, `rows` rows per slot, vectors of
/// `vector` elements, on slots of `slot_bytes` and at most `block_cap` blocks of
/// device_threads_per_block threads. A full chunk fills the slot; blocks are as many as the first
/// chunk's vectors need (one vector per thread), within the cap, so small calls take one block.
/// @throws collx::error (errc::invalid_argument) when a slot cannot hold one vector per row.
inline chunk_plan plan_chunks(std::size_t count, std::size_t elem_size, std::size_t rows, std::size_t vector,
                              std::size_t slot_bytes, unsigned block_cap) {
  if (elem_size == 0 || rows == 0 || vector == 0 || block_cap == 0)
    COLLX_THROW(errc::invalid_argument, "gpu::plan_chunks: zero element size, rows, vector or block cap");
  chunk_plan p;
  p.count = count;
  p.vector = vector;
  p.chunk = slot_bytes / (rows * elem_size) / vector * vector;
  if (p.chunk == 0)
    COLLX_THROW(errc::invalid_argument, "gpu: a staging slot of " + std::to_string(slot_bytes) + " bytes cannot hold " +
                                            std::to_string(rows) + " rows of " + std::to_string(vector) + " " +
                                            std::to_string(elem_size) + "-byte elements");
  p.row_pitch = p.chunk;
  p.chunks = count == 0 ? 0 : (count + p.chunk - 1) / p.chunk;
  const std::size_t first = std::min(count, p.chunk);
  const std::size_t vectors = (first + vector - 1) / vector;
  const std::size_t want = (vectors + device_threads_per_block - 1) / device_threads_per_block;
  p.blocks = static_cast<unsigned>(std::clamp<std::size_t>(want, 1, block_cap));
  return p;
}

/// Plans a zero-copy call on registered windows: no staging, so one "chunk" of the whole count,
/// split over as many blocks as its vectors need (one vector per thread), within `block_cap`.
inline chunk_plan plan_direct(std::size_t count, std::size_t vector, unsigned block_cap) {
  if (vector == 0 || block_cap == 0) COLLX_THROW(errc::invalid_argument, "gpu::plan_direct: zero vector or block cap");
  chunk_plan p;
  p.count = count;
  p.vector = vector;
  p.chunk = p.row_pitch = (count + vector - 1) / vector * vector;
  p.chunks = count == 0 ? 0 : 1;
  const std::size_t vectors = (count + vector - 1) / vector;
  const std::size_t want = (vectors + device_threads_per_block - 1) / device_threads_per_block;
  p.blocks = static_cast<unsigned>(std::clamp<std::size_t>(want, 1, block_cap));
  return p;
}

/// Elements [begin, end) of a chunk of `n` elements that block `b` of `blocks` handles: contiguous
/// ranges whose bounds are multiples of `vector` (except the chunk's end), in block order, covering
/// [0, n) exactly once. Every rank gives block b the same range, so block b only ever waits for
/// block b of its peers.
struct block_range {
  std::size_t begin = 0;  ///< first element
  std::size_t end = 0;    ///< one past the last element
};

/// Block b's range of an n-element chunk.
COLLX_HOST_DEVICE constexpr block_range range_of_block(std::size_t n, unsigned blocks, unsigned b, std::size_t vector) noexcept {
  const std::size_t vectors = (n + vector - 1) / vector;
  const std::size_t per = vectors / blocks, extra = vectors % blocks;
  const std::size_t first = b * per + std::min<std::size_t>(b, extra);
  const std::size_t len = per + (b < extra ? 1 : 0);
  return {std::min(n, first * vector), std::min(n, (first + len) * vector)};
}

/// Block b's range of an n-element chunk of a call whose first chunk has n0 >= n elements: its
/// range of the first chunk, clipped to n. A block so keeps the same offsets of a staging slot in
/// every chunk: when it refills a slot it overwrites only what it staged there itself two chunks
/// before, which the same block of every peer has read by the barrier in between. (Cutting a
/// short last chunk afresh, range_of_block(n), moves ranges onto other blocks' offsets, which
/// their peers may still be reading.)
COLLX_HOST_DEVICE constexpr block_range chunk_block_range(std::size_t n0, std::size_t n, unsigned blocks, unsigned b,
                                                          std::size_t vector) noexcept {
  const block_range r = range_of_block(n0, blocks, b, vector);
  return {std::min(r.begin, n), std::min(r.end, n)};
}

/// Block b's range of chunk i of plan p (chunk_block_range).
COLLX_HOST_DEVICE constexpr block_range range_in_chunk(const chunk_plan& p, std::size_t i, unsigned b) noexcept {
  return chunk_block_range(p.chunk_size(0), p.chunk_size(i), p.blocks, b, p.vector);
}

/// The part of block range `r` of a chunk starting at element `cb` that lies within a row of
/// `len` elements (a v-form's shorter blocks end inside a chunk, or before it). An empty result
/// is {x, x}. The begin stays a multiple of the vector width whenever the result is not empty.
COLLX_HOST_DEVICE constexpr block_range clip_to_row(block_range r, std::size_t cb, std::size_t len) noexcept {
  const std::size_t lim = len > cb ? len - cb : 0;
  return {std::min(r.begin, lim), std::min(r.end, lim)};
}

/// A v-form's per-rank element counts and their offsets (exclusive prefix sums), as the kernels
/// take them by value (so a call needs no device copy of the counts).
struct v_layout {
  std::size_t counts[max_device_world] = {};  ///< elements of rank q's block
  std::size_t displs[max_device_world] = {};  ///< where rank q's block starts in the concatenation
  std::size_t total = 0;                      ///< sum of the counts
  std::size_t longest = 0;                    ///< the largest count: the call's row length
  std::uint64_t hash = 0;                     ///< FNV-1a of the counts: ranks must agree on them

  /// True when every block starts on a 16-byte boundary of a 16-byte aligned base (elements of
  /// `elem_size` bytes), so 16-byte accesses stay aligned in every block.
  constexpr bool offsets_aligned16(std::size_t elem_size) const noexcept {
    for (std::size_t d : displs)
      if ((d * elem_size) % 16 != 0) return false;
    return true;
  }
};

/// An all_to_all_v's counts on one rank, as the kernel takes them (by value): what it sends to
/// each rank and where that lies in its send buffer, what it receives from each rank and where that
/// goes in its recv buffer (blocks packed in rank order, as the host all_to_all_v has them).
struct a2a_layout {
  std::size_t send_counts[max_device_world] = {};  ///< elements for rank d
  std::size_t send_displs[max_device_world] = {};  ///< where they start in send
  std::size_t recv_counts[max_device_world] = {};  ///< elements from rank q
  std::size_t recv_displs[max_device_world] = {};  ///< where they land in recv
  std::size_t send_total = 0;                      ///< elements of send
  std::size_t recv_total = 0;                      ///< elements of recv

  /// True when every block starts on a 16-byte boundary of a 16-byte aligned base.
  constexpr bool offsets_aligned16(std::size_t elem_size) const noexcept {
    for (std::size_t i = 0; i < max_device_world; ++i)
      if ((send_displs[i] * elem_size) % 16 != 0 || (recv_displs[i] * elem_size) % 16 != 0) return false;
    return true;
  }
};

/// Builds rank `rank`'s all_to_all_v layout from its send and recv counts (one per rank each) of
/// elements of `element_bytes` bytes.
/// @throws collx::error (errc::invalid_argument) when a list does not have one count per rank of a
///   world in [1, max_device_world], its counts add up to more than memory holds (a negative count
///   converted to std::size_t), or this rank sends itself another count than it receives; `what`
///   names the call in the message.
inline a2a_layout make_a2a_layout(const std::size_t* send_counts, std::size_t n_send, const std::size_t* recv_counts,
                                  std::size_t n_recv, int world, int rank, std::size_t element_bytes, const char* what) {
  if (world < 1 || world > max_device_world)
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": world size " + std::to_string(world) + " is outside [1, " +
                                            std::to_string(max_device_world) + "]");
  if (n_send != static_cast<std::size_t>(world) || n_recv != static_cast<std::size_t>(world))
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": " + std::to_string(n_send) + " send and " +
                                            std::to_string(n_recv) + " recv counts for a communicator of " +
                                            std::to_string(world) + " ranks (one per rank each)");
  for (const auto& [name, counts] : {std::pair{"send_counts", send_counts}, std::pair{"recv_counts", recv_counts}})
    if (const std::size_t i = detail::first_count_past_memory(counts, n_send, element_bytes); i < n_send)
      COLLX_THROW(errc::invalid_argument, std::string(what) + ": " + detail::counts_past_memory(name, counts, i));
  const std::size_t me = static_cast<std::size_t>(rank);
  if (send_counts[me] != recv_counts[me])
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": rank " + std::to_string(rank) + " sends itself " +
                                            std::to_string(send_counts[me]) + " elements but receives " +
                                            std::to_string(recv_counts[me]) + " from itself");
  a2a_layout l;
  for (std::size_t q = 0; q < n_send; ++q) {
    l.send_counts[q] = send_counts[q];
    l.send_displs[q] = l.send_total;
    l.send_total += send_counts[q];
    l.recv_counts[q] = recv_counts[q];
    l.recv_displs[q] = l.recv_total;
    l.recv_total += recv_counts[q];
  }
  return l;
}

/// Builds the layout of `counts` (one per rank of a communicator of `world` ranks) of elements of
/// `element_bytes` bytes.
/// @throws collx::error (errc::invalid_argument) when counts.size() != world, world is outside
///   [1, max_device_world] or the counts add up to more than memory holds (a negative count
///   converted to std::size_t); `what` names the call in the message.
inline v_layout make_v_layout(const std::size_t* counts, std::size_t n_counts, int world, std::size_t element_bytes,
                              const char* what) {
  if (world < 1 || world > max_device_world)
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": world size " + std::to_string(world) + " is outside [1, " +
                                            std::to_string(max_device_world) + "]");
  if (n_counts != static_cast<std::size_t>(world))
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": " + std::to_string(n_counts) +
                                            " counts given for a communicator of " + std::to_string(world) +
                                            " ranks (one per rank)");
  if (const std::size_t i = detail::first_count_past_memory(counts, n_counts, element_bytes); i < n_counts)
    COLLX_THROW(errc::invalid_argument, std::string(what) + ": " + detail::counts_past_memory("counts", counts, i));
  v_layout l;
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t q = 0; q < n_counts; ++q) {
    l.counts[q] = counts[q];
    l.displs[q] = l.total;
    l.total += counts[q];
    l.longest = std::max(l.longest, counts[q]);
    for (int i = 0; i < 8; ++i) h = (h ^ ((counts[q] >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
  l.hash = h;
  return l;
}

// ---------------------------------------------------------------------------------------------
// Direct all-reduce: one-shot or two-shot

/// The two forms of collx's direct all-reduce on device memory (those of the host's algo::direct,
/// and of the custom all-reduce of TensorRT-LLM and vLLM):
///  - one_shot: one staged call; every rank reads every peer's whole input and folds it: (world - 1)
///    x bytes read from peers per rank, one call's fixed cost.
///  - two_shot: a reduce-scatter (rank r folds piece r of every rank's input, two_shot_pieces) into
///    piece r of its output, then an all-gather of the pieces: 2 (world - 1) / world x bytes read
///    per rank, two calls' fixed cost.
/// Both fold the ranks in rank order 0, 1, ..., n-1, so they give the same bits.
enum class direct_form : std::uint8_t {
  one_shot,  ///< every rank folds the whole vector from every rank's input
  two_shot,  ///< a reduce-scatter of pieces, then an all-gather of them
};

/// Name of a form ("one-shot", "two-shot").
constexpr const char* direct_form_name(direct_form f) noexcept { return f == direct_form::one_shot ? "one-shot" : "two-shot"; }

/// The latency-bandwidth figures that choose a form (alpha-beta, as collx::cost_model on the host).
struct direct_cost {
  /// Seconds of one staged call apart from its bytes: the launch and one cross-rank barrier per
  /// chunk. Default 7 us: a staged call of 8 B - 64 KiB took 6.5 - 8.6 us on an H200
  /// (bench/results/h200-1gpu.md).
  double call_seconds = 7e-6;
  /// Bytes per second one rank reads from all its peers at once. Default 370.8 GB/s: an H100/H200
  /// SXM on NVSwitch, 18 NVLink 4 links at the 20.6 GB/s NCCL assumes a collective reaches on each
  /// (src/graph/topo.h; the datasheet's 25 GB/s per link and direction), all of which NVSwitch
  /// gives to any mix of peers; what topo::device_direct_cost computes for such a machine.
  double peer_read_bytes_per_second = 18 * 20.6e9;
};

/// The figures a communicator whose workspaces are in shared host memory (workspace_memory::host)
/// decides its all-reduce form by: every rank reads its peers' staging from host memory through
/// its own PCIe link, taken at NCCL's 12 GB/s for a PCIe link (PCI_BW, src/graph/topo.h: Gen3
/// x16; later generations are faster, so two-shot starts later than it could there), and a flag
/// round trip through host memory per chunk, taken as 10 us per call. Estimates: not measured.
inline constexpr direct_cost host_memory_direct_cost{10e-6, 12e9};

/// The figures a device communicator's direct forms go by: `given` (device_options::cost) where
/// every workspace is in device memory (`on_device`: workspace_memory device), else
/// host_memory_direct_cost (some peer is read through host memory).
constexpr const direct_cost& direct_cost_where(bool on_device, const direct_cost& given) noexcept {
  return on_device ? given : host_memory_direct_cost;
}

/// Seconds of a call as fixed + per_byte x bytes (an alpha-beta line).
struct cost_line {
  double fixed = 0;     ///< seconds whatever the size
  double per_byte = 0;  ///< seconds per byte
  /// Seconds for `bytes`.
  double at(double bytes) const noexcept { return fixed + per_byte * bytes; }
};

/// The line of an all-reduce in form `f` on `world` ranks: one-shot one call reading (world - 1)
/// x the bytes, two-shot two calls reading 2 (world - 1) / world x the bytes.
inline cost_line direct_line(direct_form f, int world, const direct_cost& c) noexcept {
  const double w = static_cast<double>(world), rate = c.peer_read_bytes_per_second;
  if (f == direct_form::one_shot) return {c.call_seconds, (w - 1) / rate};
  return {2 * c.call_seconds, 2 * (w - 1) / w / rate};
}

/// Predicted seconds of an all-reduce of `bytes` per rank on `world` ranks in form `f`.
inline double predict_direct(direct_form f, std::size_t bytes, int world, const direct_cost& c) noexcept {
  return direct_line(f, world, c).at(static_cast<double>(bytes));
}

/// The all-reduce size, in bytes per rank, from which `c` predicts two-shot no slower than one-shot
/// on `world` ranks (the break-even size, rounded up): two-shot saves (world - 1)(world - 2) / world
/// x bytes of reading for one more call. SIZE_MAX when it never is (world <= 2: two-shot reads as
/// much and pays two calls), and for figures that are not finite and positive (a rate) or
/// non-negative (call_seconds).
inline std::size_t two_shot_crossover_bytes(int world, const direct_cost& c) noexcept {
  if (world <= 2 || !std::isfinite(c.peer_read_bytes_per_second) || !(c.peer_read_bytes_per_second > 0) ||
      !std::isfinite(c.call_seconds) || !(c.call_seconds >= 0))
    return SIZE_MAX;
  const double w = static_cast<double>(world);
  const double saved_per_byte = (w - 1) * (w - 2) / w / c.peer_read_bytes_per_second;
  const double bytes = c.call_seconds / saved_per_byte;
  if (!(bytes < 1e18)) return SIZE_MAX;
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(bytes)));
}

/// The form of an all-reduce of `bytes` per rank: two-shot from `two_shot_min_bytes` on.
constexpr direct_form direct_form_for(std::size_t bytes, std::size_t two_shot_min_bytes) noexcept {
  return bytes >= two_shot_min_bytes ? direct_form::two_shot : direct_form::one_shot;
}

/// The pieces of a two-shot all-reduce of `count` elements on `world` ranks (as a v-form's counts:
/// rank q folds and then serves elements [displs[q], displs[q] + counts[q])): world pieces of
/// ceil(count / world) elements rounded up to `vector`, the last ones shorter or empty, so that
/// every piece starts on a vector boundary and the 16-byte path stays open.
/// @throws collx::error (errc::invalid_argument) for a world outside [1, max_device_world] or a
///   zero vector.
inline v_layout two_shot_pieces(std::size_t count, int world, std::size_t vector) {
  if (vector == 0) COLLX_THROW(errc::invalid_argument, "gpu::two_shot_pieces: zero vector width");
  if (world < 1 || world > max_device_world)
    COLLX_THROW(errc::invalid_argument, "gpu::two_shot_pieces: world size " + std::to_string(world) + " is outside [1, " +
                                            std::to_string(max_device_world) + "]");
  const std::size_t w = static_cast<std::size_t>(world);
  const std::size_t piece = ((count + w - 1) / w + vector - 1) / vector * vector;
  std::size_t counts[max_device_world] = {};
  for (std::size_t q = 0; q < w; ++q) {
    const std::size_t begin = std::min(count, q * piece);
    counts[q] = std::min(count, begin + piece) - begin;
  }
  return make_v_layout(counts, w, world, 1, "gpu::two_shot_pieces");  // pieces of a count already in memory
}

/// The signature layout (device_signature::make's `layout`) of two-shot's launch `phase` (0: the
/// reduce-scatter, 1: the all-gather) over pieces `lay`: both sign as all-reduces of lay.longest
/// elements, told apart from one-shot, from each other and from other piece layouts.
inline std::uint64_t two_shot_layout(const v_layout& lay, int phase) noexcept { return lay.hash ^ (phase == 0 ? 0x2511 : 0x2512); }

}  // namespace gpu
}  // namespace v0
}  // namespace collx
