/// @file transport/shm.hpp
/// Processes of one node over POSIX shared memory.
///
/// One segment per job holds, for every ordered pair of ranks, a ring of message slots with their
/// staging memory, plus a doorbell per rank and the job's failure state. A message is either staged
/// (the sender copies it through the ring in slot-sized pieces, streaming: staging stays bounded
/// however large the message) or, from COLLX_CMA's size threshold up and where the kernel allows,
/// read by the receiver straight from the sender's memory with process_vm_readv (single copy).
/// Waits spin briefly, then sleep on a process-shared futex, and look at the peers' liveness every
/// 50 ms: a dead peer, a timeout or abort() fails the segment for every rank.
///
/// Lifecycle: the segment is named "/collx-<uid>-<job id>"; rank 0 creates it, every rank maps it,
/// and the last rank to map it unlinks it, so a crash after start-up leaves nothing in /dev/shm.
/// Segments of this user whose creator died (a crash during start-up) are reclaimed at the next
/// start. A full /dev/shm is reported as such.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>
#include <dirent.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <collx/bootstrap/env.hpp>
#include <collx/all_gather.hpp>
#include <collx/barrier.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/detail/cpus.hpp>
#include <collx/detail/futex.hpp>
#include <collx/detail/numa.hpp>
#include <collx/detail/process.hpp>
#include <collx/detail/wait_graph.hpp>
#include <collx/environment.hpp>
#include <collx/error.hpp>
#include <collx/topo/host_cost.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {

/// Settings of the shared-memory transport (defaults from the environment).
struct shm_options {
  /// Staging bytes per ordered pair of ranks (COLLX_SHM_BYTES_PER_PEER; default 1 MiB, shrunk for
  /// more than 8 ranks so that the segment stays near 64 MiB).
  std::size_t bytes_per_peer = 0;
  /// Single-copy reads with process_vm_readv: -1 auto, 0 off, 1 required (an error where the kernel
  /// forbids it). Auto uses them where every rank may and the ranks on this host outnumber the
  /// CPUs they may use (shm_transport::usable_cpus): a staged message moves while its sender and receiver both run (one copies in while the
  /// other copies out), 1.7-2x faster than a single copy from 256 KiB to 128 MiB with 2 ranks on 2
  /// cores; with more ranks than cores a sender is often descheduled, and a single copy needs only
  /// the receiver (4 ranks on 2 cores: 1.2-1.6x faster than staging at 1-64 MiB).
  /// bench/results/2core-x86-debian12-staged.md has the measurements.
  int cma = -1;
  /// Messages of at least this many bytes go single-copy when CMA is on.
  std::size_t cma_min_bytes = 64 * 1024;
  /// How long start-up waits for all ranks to attach: COLLX_CONNECT_TIMEOUT seconds, else 60 s.
  std::chrono::milliseconds connect_timeout = env::connect_timeout();
  /// NUMA placement of each rank's outgoing staging slots on the node of its CPUs: -1 auto (where
  /// the machine has several nodes and the rank's CPUs are all on one, as collx-run's binding
  /// leaves them), 0 off, 1 also on a one-node machine (tests). Rank 0 allocates the segment, so
  /// otherwise every slot lies on its node.
  int numa = -1;
  /// Processes of the whole job on this machine (0: this communicator's ranks). Waits spin only
  /// while they fit on the CPUs the ranks may use (shm_transport::usable_cpus); a hierarchy's node communicator sets it to every rank of the host.
  int ranks_on_host = 0;
};

/// COLLX_SHM_BYTES_PER_PEER as the shared-memory transport reads it: 0 when unset.
/// @throws collx::error(invalid_argument) naming the variable for a malformed value or one below 4096.
inline std::size_t shm_bytes_per_peer_from_environment() {
  const auto v = env::get("COLLX_SHM_BYTES_PER_PEER");
  if (!v) return 0;
  const std::size_t bytes = env::parse_size("COLLX_SHM_BYTES_PER_PEER", *v);
  if (bytes < 4096) env::reject("COLLX_SHM_BYTES_PER_PEER", *v, "at least 4096 bytes");
  return bytes;
}

/// The staging bytes per pair of ranks a shared-memory communicator of `world_size` ranks uses:
/// `requested` (shm_options::bytes_per_peer) unless 0, else COLLX_SHM_BYTES_PER_PEER, else 64 MiB
/// over world_size^2 pairs within [64 KiB, 1 MiB].
/// @throws collx::error(invalid_argument) for a value below 4096 bytes, a malformed variable, or a
/// value whose segment (world_size^2 pairs) would exceed 2^62 bytes (its size would wrap, or not
/// fit the off_t posix_fallocate takes, and a wrapped size maps a segment smaller than its layout).
inline std::size_t shm_bytes_per_peer(std::size_t requested, int world_size) {
  std::size_t per_peer = requested;
  if (!per_peer) per_peer = shm_bytes_per_peer_from_environment();
  const std::size_t pairs = static_cast<std::size_t>(world_size) * static_cast<std::size_t>(world_size);
  if (!per_peer) per_peer = std::clamp<std::size_t>((std::size_t{64} << 20) / pairs, 64 << 10, 1 << 20);
  if (per_peer < 4096)
    COLLX_THROW(errc::invalid_argument, "shm_options::bytes_per_peer of " + std::to_string(per_peer) + " must be at least 4096 bytes");
  if (per_peer > (std::size_t{1} << 62) / pairs)
    COLLX_THROW(errc::invalid_argument, "COLLX_SHM_BYTES_PER_PEER (shm_options::bytes_per_peer) of " + std::to_string(per_peer) +
                                            " bytes is too large: the segment of " + std::to_string(world_size) +
                                            (world_size == 1 ? " rank" : " ranks") + " would exceed 2^62 bytes");
  return per_peer;
}

/// COLLX_CMA as the shared-memory transport reads it (-1 auto, 0 off, 1 on), or `fallback` when unset.
/// @throws collx::error(invalid_argument) naming the variable for a malformed value.
inline int shm_cma_from_environment(int fallback) {
  const auto v = env::get("COLLX_CMA");
  return v ? env::parse_switch("COLLX_CMA", *v) : fallback;
}

namespace detail::transport_impl {

/// The shared segment's layout. Everything in it is plain data and lock-free atomics.
struct shm_segment {
  static constexpr std::uint64_t magic_ready = 0x636f6c6c78736d31ull;   // "collxsm1"
  static constexpr std::uint64_t magic_failed = 0x636f6c6c78666169ull;  // rank 0 could not set up
  // 2: peer_info::call; 3: call on its own line, slots line-aligned; 4: a slot's stamp replaces the
  // posted counter; 5: peer_info::cpus; 6: peer_info::calls (a history); 7: peer_info::waiting,
  // header::launch_id; 8: call_signature::earlier; 9: peer_info::wait (a wait_slot) replaces
  // waiting, mailbox::queued and zero_copy_until
  static constexpr std::uint32_t layout_version = 10;
  /// Calls each rank's published history keeps.
  static constexpr std::size_t call_history = published_call_history;

  enum class slot_kind : std::uint32_t { staged = 1, cma = 2, window = 3 };
  /// One message (or one staged piece of it). The sender fills it and stores `stamp` last; the
  /// receiver polls `stamp` itself, so the line that says "ready" also brings the signature.
  struct alignas(64) slot {  // whole lines: a receiver reading one slot pulls no neighbour's line
    std::atomic<std::uint64_t> stamp{0};  ///< k + 1 once the pair's k-th message is in this slot
    call_signature sig;
    std::uint64_t total_bytes;  ///< size of the whole message
    std::uint64_t offset;       ///< where this piece starts within the message
    std::uint64_t len;          ///< bytes in this piece (staged) or the whole message (cma)
    std::uint64_t addr;         ///< cma: the sender's address; window: offset in the sender's window
    slot_kind kind;
    std::int32_t pid;           ///< cma: the sender's pid; window: the window's id
    /// A staged piece of at most this many bytes travels here, not in the slot's staging memory:
    /// the receiver pulls the lines it reads anyway, and a small message costs no extra line.
    static constexpr std::size_t inline_bytes = 144;
    alignas(16) std::byte inline_data[inline_bytes];
  };
  static_assert(sizeof(slot) == 256, "a slot is four cache lines");
  /// What the receiver tells the sender: how many of the pair's messages it has consumed. The
  /// sender reads it only when it needs a slot back or waits for a zero-copy message. On a line of
  /// their own, what the sender tells its peers for deadlock detection (written only when they
  /// change: a message that fits in the ring writes neither).
  struct alignas(64) mailbox {
    std::atomic<std::uint64_t> consumed{0};
    /// 1 while the sender holds messages for the pair that are not yet in the ring (the ring was full).
    alignas(64) std::atomic<std::uint32_t> queued{0};
    /// The sender's wait_sends needs `consumed` to reach this: messages read in place (single-copy,
    /// window) must be read before their buffers are free.
    std::atomic<std::uint64_t> zero_copy_until{0};
  };
  struct alignas(64) peer_info {
    std::atomic<std::int32_t> pid{0};
    std::atomic<std::uint32_t> attached{0};
    std::uint64_t start_time = 0;
    std::uint64_t probe_addr = 0;             ///< address of a value peers read to test CMA
    /// 0 unknown, 1 can read its neighbour, 2 cannot, 3 single copy turned off on this rank
    /// (COLLX_CMA=0, shm_options::cma = 0)
    std::atomic<std::uint32_t> cma_state{0};
    std::atomic<std::uint32_t> departed{0};   ///< set when the rank closed its communicator
    detail::doorbell bell;
    detail::cpu_bits cpus;                    ///< the CPUs the rank may run on (written before `attached`)
    /// Seqlock over `last` and `calls`: odd while they are written. On its own line: the owner
    /// writes it every call, while peers read `bell` on every message.
    alignas(64) std::atomic<std::uint32_t> call_version{0};
    /// 1 while the rank writes into peers' shared buffers (shared_writes); on the owner's line too,
    /// not on `bell`'s, which its peers write.
    std::atomic<std::uint32_t> writing_shared{0};
    /// What the rank waits for while it blocks (kind 0: it does not; left set after its timeout):
    /// read by waiting peers to find deadlocks (shm_transport::deadlocked), and by a peer that timed
    /// out, to say where the rank is (point-to-point calls announce no call).
    detail::wait_slot wait;
    std::uint64_t last = 0;                      ///< sequence number of the call announced last (0: none)
    /// The calls announced last (transport::announce), call k at calls[k % call_history]: a peer
    /// that moved on can still be compared with a rank that waits in an earlier call.
    call_signature calls[call_history]{};
  };
  struct header {
    std::atomic<std::uint64_t> magic{0};
    std::uint32_t version = 0;
    std::int32_t world_size = 0;
    std::uint64_t total_bytes = 0;
    std::uint64_t slot_bytes = 0;
    std::uint32_t slots = 0;
    std::int32_t creator_pid = 0;
    std::uint64_t creator_start = 0;
    std::atomic<std::uint32_t> attached{0};
    std::atomic<std::uint32_t> cma_enabled{0};  ///< decided once all ranks probed
    std::atomic<std::uint32_t> failed{0};
    std::atomic<std::uint32_t> fail_lock{0};
    std::uint32_t fail_code = 0;
    char fail_reason[1024] = {};
    char launch_id[64] = {};  ///< rank 0's launch_info::launch_id (COLLX_LAUNCH_ID), cut to 63 bytes
  };

  struct layout {
    std::size_t peers = 0, boxes = 0, slots = 0, data = 0, total = 0;
  };
  static constexpr std::size_t align_up(std::size_t x, std::size_t a) { return (x + a - 1) / a * a; }
  static layout compute(int n, std::size_t slot_bytes, std::size_t slots) {
    const std::size_t pairs = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
    layout l;
    l.peers = align_up(sizeof(header), 4096);
    l.boxes = align_up(l.peers + sizeof(peer_info) * static_cast<std::size_t>(n), 64);
    l.slots = align_up(l.boxes + sizeof(mailbox) * pairs, 64);
    l.data = align_up(l.slots + sizeof(slot) * slots * pairs, 4096);
    l.total = align_up(l.data + slot_bytes * slots * pairs, 4096);
    return l;
  }
};

/// One rank's end of the shared segment.
class shm_transport final : public transport {
 public:
  /// Asked while a start waits (every 50 ms) with the ranks that have not attached yet and how
  /// long it has waited: a non-empty answer ends the start with it as the failure.
  using abandon_question = std::function<std::string(const std::vector<int>& waiting_for, std::chrono::milliseconds waited)>;

  /// `abandon_start`, where given, is asked while start-up waits for other ranks (collx::split:
  /// whether a group member that has not attached died, or the communicator being split failed).
  shm_transport(const launch_info& info, const shm_options& opt, std::chrono::milliseconds timeout,
                abandon_question abandon_start = {})
      : rank_(info.rank), n_(info.world_size), timeout_(std::min(timeout, detail::longest_wait)), cma_min_(opt.cma_min_bytes), info_(info), opt_(opt),
        abandon_start_(std::move(abandon_start)) {
    if (info.local_world_size != info.world_size)
      COLLX_THROW(errc::invalid_argument,
                  "the shared-memory transport needs every rank on one node, but " + std::to_string(info.world_size) +
                      " ranks run " + std::to_string(info.local_world_size) + " per node");
    name_ = segment_name(info.job_id);
    if (bootstrap::detail::sanitize_job_id(info.job_id) != info.job_id)
      id_note_ = " (job id \"" + info.job_id + "\", cleaned and hashed in the name)";
    launch_id_ = info.launch_id.substr(0, sizeof(shm_segment::header::launch_id) - 1);
    try {
      connect(opt);
    } catch (...) {  // no destructor runs: a failed start must not keep the segment's memory mapped
      if (base_) ::munmap(base_, bytes_);
      throw;
    }
    abandon_start_ = nullptr;  // it may refer to what only lives while this start runs
  }

  ~shm_transport() override {
    for (window& w : windows_)
      for (std::size_t r = 0; r < w.peers.size(); ++r)
        if (w.peers[r]) ::munmap(w.peers[r], std::max<std::size_t>(w.bytes[r], 1));
    if (!base_) return;
    peer(rank_).departed.store(1, std::memory_order_release);
    for (int r = 0; r < n_; ++r) peer(r).bell.ring(true);
    ::munmap(base_, bytes_);
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return n_; }
  std::string_view name() const noexcept override { return "shm"; }
  /// algo::automatic's figures: topo::host_cost_model over the CPUs the ranks may run on together.
  cost_model costs() const noexcept override { return costs_; }
  void set_timeout(std::chrono::milliseconds t) noexcept override { timeout_ = t; }
  /// Whether this rank sends with single-copy (process_vm_readv) transfers (see shm_options::cma).
  bool cma_enabled() const noexcept { return cma_; }
  /// The CPUs this communicator's ranks may run on together: the union of their affinity masks,
  /// capped by the CPU quota of this process's cgroup. Waits spin only while the ranks (or
  /// shm_options::ranks_on_host) are no more than this; single copy's `auto` turns on above it.
  unsigned usable_cpus() const noexcept { return usable_cpus_; }
  /// Whether waits sleep at once instead of spinning first: more ranks than usable_cpus().
  bool oversubscribed() const noexcept { return oversubscribed_; }
  /// The NUMA node this rank's outgoing staging memory was moved to (shm_options::numa), -1 if it
  /// was not moved.
  int staging_numa_node() const noexcept { return numa_node_; }
  /// First byte of the staging memory for messages from rank `from` to rank `to` (slots x slot
  /// bytes, contiguous for one pair; consecutive `to` follow each other). For diagnostics and tests.
  const std::byte* staging(int from, int to) const noexcept { return slot_data(from, to, 0); }
  /// The segment's name in /dev/shm (already unlinked once every rank attached).
  const std::string& segment() const noexcept { return name_; }

  void check() override {
    if (hdr()->failed.load(std::memory_order_acquire)) raise_failure();
  }

  /// A segment of the group's own, under this job's id extended by the split and the color (so
  /// each group of each split has its own name), with this transport's options; every rank of
  /// this communicator still counts as on this host for spinning (shm_options::ranks_on_host).
  std::shared_ptr<transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                   std::uint64_t split_id) override {
    (void)key;
    if (members.empty()) return nullptr;
    launch_info group = info_;
    group.rank = group.local_rank = group_rank;
    group.world_size = group.local_world_size = static_cast<int>(members.size());
    group.job_id = info_.job_id + ".split" + std::to_string(split_id) + ".color" + std::to_string(color);
    shm_options o = opt_;
    if (!o.ranks_on_host) o.ranks_on_host = n_;
    // The group's start waits for its members: it ends as soon as one that has not attached dies
    // or leaves this communicator (it failed its split), or, a second on, when this communicator
    // failed (a member whose exchange failed never comes; one that finished it comes within
    // milliseconds even so), not at the connect timeout.
    auto abandon = [this, &members](const std::vector<int>& waiting_for, std::chrono::milliseconds waited) -> std::string {
      for (int g : waiting_for) {
        const int r = members.at(static_cast<std::size_t>(g));
        const shm_segment::peer_info& pi = peer(r);
        if (pi.departed.load(std::memory_order_acquire) || detail::process_dead(pi.pid.load(std::memory_order_acquire), pi.start_time))
          return peer_name(r, "pid " + std::to_string(pi.pid.load())) +
                 " of the communicator being split died or left before it joined its group";
      }
      errc code{};
      std::string why;
      if (waited >= std::chrono::seconds(1) && failure(code, why)) return "the communicator being split failed: " + why;
      return "";
    };
    return std::make_shared<shm_transport>(group, o, timeout_, abandon);
  }

  void fail(errc code, const std::string& why) noexcept override {
    try {
      publish_failure(code, reported_own(rank_, why));  // the other ranks read it: say whose failure it is
    } catch (...) {
      publish_failure(code, {});
    }
  }
  void adopt_failure(errc code, const std::string& why) noexcept override { publish_failure(code, why); }

  bool failure(errc& code, std::string& why) noexcept override {
    shm_segment::header* h = hdr();
    if (!h || !h->failed.load(std::memory_order_acquire)) return false;
    code = static_cast<errc>(h->fail_code);
    try {
      why = h->fail_reason;
    } catch (...) {
    }
    return true;
  }

  void announce(const call_signature& sig) override {
    announced_ = sig;
    shm_segment::peer_info& me = peer(rank_);
    const std::uint32_t v = me.call_version.load(std::memory_order_relaxed);
    me.call_version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(static_cast<void*>(&me.calls[sig.seq % shm_segment::call_history]), &sig, sizeof sig);
    me.last = sig.seq;
    me.call_version.store(v + 2, std::memory_order_release);
  }

  void post_send(int peer_rank, const void* data, std::size_t bytes, std::size_t granularity,
                 const call_signature& sig) override {
    granularity = std::max<std::size_t>(1, granularity);
    call_seq_ = sig.seq;
    if (granularity > slot_bytes_)
      COLLX_THROW(errc::invalid_argument, "element of " + std::to_string(granularity) +
                                              " bytes is larger than a shared-memory staging slot (" +
                                              std::to_string(slot_bytes_) + " bytes, an eighth of COLLX_SHM_BYTES_PER_PEER); raise "
                                              "COLLX_SHM_BYTES_PER_PEER to at least " + std::to_string((granularity + 63) / 64 * 64 * 8));
    // Queued, not sent: what does not fit in the ring now is pushed by every later wait.
    out_[static_cast<std::size_t>(peer_rank)].push_back(
        {static_cast<const std::byte*>(data), bytes, granularity, 0, sig, cma_ && bytes >= cma_min_});
    progress(peer_rank);
  }

  void recv(int peer_rank, std::size_t bytes, std::size_t granularity, const call_signature& sig,
            consumer_ref consume) override {
    call_seq_ = sig.seq;
    shm_segment::mailbox& box = mbox(peer_rank, rank_);
    std::uint64_t& k = received_[static_cast<std::size_t>(peer_rank)];
    std::size_t delivered = 0;
    bool first = true;
    do {
      const shm_segment::slot& s = slot_at(peer_rank, rank_, k);
      wait(wait_kind::message_from, peer_rank, k, [&] { return s.stamp.load(std::memory_order_acquire) == k + 1; });
      if (first) {
        if (!(s.sig == sig)) mismatch(why_message_differs(s.sig, sig, peer_rank));
        if (s.total_bytes != bytes)
          mismatch(message_size_mismatch(sig, peer_rank, s.total_bytes, rank_, bytes));
        first = false;
      }
      if (s.kind == shm_segment::slot_kind::cma) {
        read_remote(peer_rank, s, granularity, consume);
        require_not_failed_after_read();
        delivered += s.len;
      } else if (s.kind == shm_segment::slot_kind::window) {
        if (s.len) consume(window_of(s.pid).peers[static_cast<std::size_t>(peer_rank)] + s.addr, 0, s.len);
        require_not_failed_after_read();
        delivered += s.len;
      } else {
        if (s.len)
          consume(s.len <= shm_segment::slot::inline_bytes ? s.inline_data : slot_data(peer_rank, rank_, k), s.offset,
                  s.len);
        delivered += s.len;
      }
      box.consumed.store(++k, std::memory_order_release);
      peer(peer_rank).bell.ring(true);
    } while (delivered < bytes);
  }

  /// Staged messages are copies: once a message is all in the ring its buffer is free, whether or
  /// not the peer has read it yet (not waiting saves small messages a round trip). Zero-copy ones
  /// (single-copy, window) are read from the user's memory, so those are waited for.
  void wait_sends() override {
    for (int p = 0; p < n_; ++p) {
      const auto i = static_cast<std::size_t>(p);
      auto& q = out_[i];
      if (q.empty() && seen_consumed_[i] >= zero_copy_until_[i]) continue;
      shm_segment::mailbox& box = mbox(rank_, p);
      wait(wait_kind::consumed_by, p, 0, [&] {
        seen_consumed_[i] = box.consumed.load(std::memory_order_acquire);
        return q.empty() && seen_consumed_[i] >= zero_copy_until_[i];
      });
    }
  }

  /// Memory every rank maps (see collx::shm_buffer). peers[r] is rank r's buffer in this process.
  struct window {
    std::uint32_t id = 0;
    std::vector<std::byte*> peers;
    std::vector<std::size_t> bytes;
  };

  /// Maps `bytes` of shared memory for this rank and every peer's buffer of the same window id.
  /// Collective: every rank calls it in the same order (ids must agree). Returns this rank's memory.
  std::byte* map_window(std::uint32_t id, std::size_t bytes, std::span<const std::size_t> all_bytes,
                        const std::function<void()>& barrier) {
    window w;
    w.id = id;
    w.bytes.assign(all_bytes.begin(), all_bytes.end());
    w.peers.assign(static_cast<std::size_t>(n_), nullptr);
    // Named after this run of the job too (its segment's creator: pid and start time), not the job
    // id alone: a run killed while its ranks made a buffer leaves the names behind (until a later
    // start's sweep finds them stale), and a restart under the same id must not collide with them.
    char run[40];
    std::snprintf(run, sizeof run, "-%x.%llx", static_cast<unsigned>(hdr()->creator_pid),
                  static_cast<unsigned long long>(hdr()->creator_start));
    auto name_of = [&](int r) { return name_ + run + "-w" + std::to_string(id) + "-r" + std::to_string(r); };
    auto map_one = [&](int r, bool create) {
      const std::size_t len = std::max<std::size_t>(all_bytes[static_cast<std::size_t>(r)], 1);
      const int fd = ::shm_open(name_of(r).c_str(), create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
      if (fd < 0) system_error("cannot open shared buffer " + name_of(r), errno);
      if (create) {
        (void)::fchmod(fd, 0600);  // the umask may have taken the owner's read or write bit: peers open it
        if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(len)); e != 0) {
          ::close(fd);
          ::shm_unlink(name_of(r).c_str());
          system_error("cannot reserve " + std::to_string(len) + " bytes for a shared buffer (is /dev/shm full?)", e);
        }
      }
      // Peers' buffers writable too: an all-reduce on shared buffers writes each rank's result block
      // into every rank's output (detail/shared_allreduce.hpp).
      void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      const int e = errno;
      ::close(fd);
      if (p == MAP_FAILED) system_error("cannot map shared buffer " + name_of(r), e);
      w.peers[static_cast<std::size_t>(r)] = static_cast<std::byte*>(p);
    };
    (void)bytes;
    try {
      map_one(rank_, true);
      barrier();  // every rank created its buffer
      for (int r = 0; r < n_; ++r)
        if (r != rank_) map_one(r, false);
      barrier();  // every rank mapped every buffer: the names can go
    } catch (const error& e) {
      // A peer died or failed, or this rank could not create or map a buffer: fail the
      // communicator (the peers must not wait in the barriers for this rank), then remove every
      // rank's name, a dead peer's too, or the files would stay in /dev/shm.
      fail(e.code(), std::string("creating a shared buffer: ") + e.what());
      for (int r = 0; r < n_; ++r) {
        if (void* p = w.peers[static_cast<std::size_t>(r)]) ::munmap(p, std::max<std::size_t>(all_bytes[static_cast<std::size_t>(r)], 1));
        ::shm_unlink(name_of(r).c_str());
      }
      throw;
    }
    ::shm_unlink(name_of(rank_).c_str());
    windows_.push_back(std::move(w));
    return windows_.back().peers[static_cast<std::size_t>(rank_)];
  }

  /// Unmaps window `id` (after the ranks synchronised: no message refers to it any more).
  void unmap_window(std::uint32_t id) noexcept {
    for (auto it = windows_.begin(); it != windows_.end(); ++it) {
      if (it->id != id) continue;
      for (std::size_t r = 0; r < it->peers.size(); ++r)
        if (it->peers[r]) ::munmap(it->peers[r], std::max<std::size_t>(it->bytes[r], 1));
      windows_.erase(it);
      return;
    }
  }

  bool has_shared() const noexcept override { return !windows_.empty(); }
  bool locate_shared(const void* p, std::size_t bytes, std::uint32_t& id, std::uint64_t& offset) const override {
    const window* w = find_window(static_cast<const std::byte*>(p), bytes);
    if (!w) return false;
    id = w->id;
    offset = static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - w->peers[static_cast<std::size_t>(rank_)]);
    return true;
  }
  std::byte* shared_address(int r, std::uint32_t id, std::uint64_t offset, std::size_t bytes) const override {
    if (r < 0 || r >= n_) return nullptr;
    for (const window& w : windows_)
      if (w.id == id) {
        const std::size_t have = w.bytes[static_cast<std::size_t>(r)];
        return offset <= have && bytes <= have - offset ? w.peers[static_cast<std::size_t>(r)] + offset : nullptr;
      }
    return nullptr;
  }

  void shared_writes(bool writing) noexcept override {
    peer(rank_).writing_shared.store(writing ? 1u : 0u, std::memory_order_seq_cst);
  }
  bool failed_now() const noexcept override { return hdr()->failed.load(std::memory_order_seq_cst) != 0; }
  void wait_shared_writers() noexcept override {
    // Pairs with a writer's store of its flag before it polls failed_now (both seq_cst): a writer
    // that has not seen the failure published before this call is seen writing here.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int r = 0; r < n_; ++r) {
      const shm_segment::peer_info& pi = peer(r);
      while (r != rank_ && pi.writing_shared.load(std::memory_order_seq_cst) != 0 &&
             std::chrono::steady_clock::now() < deadline) {
        const pid_t pid = pi.pid.load(std::memory_order_acquire);
        if (pi.departed.load(std::memory_order_acquire) || detail::process_dead(pid, pi.start_time) ||
            detail::process_stopped(pid, pi.start_time))
          break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  /// Id for the next window (the same sequence on every rank).
  std::uint32_t next_window_id() noexcept { return next_window_id_++; }

  /// The name a job's segment gets: "/collx-<uid>-<job id>", the id as names can carry it
  /// (bootstrap::detail::sanitize_job_id: distinct ids keep distinct names).
  static std::string segment_name(const std::string& job_id) {
    return "/collx-" + std::to_string(::getuid()) + "-" + bootstrap::detail::sanitize_job_id(job_id);
  }

  /// Unlinks job `job_id`'s segment if its creator died, and keeps it otherwise (a live job with the
  /// same id). Then the stale segments of the job's split groups (collx::split), left by a rank
  /// that died while a group started: those whose names extend the job's (ids too long to keep
  /// whole are hashed, and left to the next start's sweep). A segment whose creator had not yet
  /// written itself into it (killed within microseconds of making it, likelier in a program that
  /// splits often) counts as dead only 10 s after it was made (then a later start's
  /// reclaim_stale_segments removes it), unless `ranks` is given: the pids of the job's ranks, all
  /// ended (a launcher that reaped them), so no rank of this job can still be making it (what could
  /// is another start given the same job id at the same moment, or a process a rank left behind
  /// starting a job of that id: microseconds of a misuse). Then, given `ranks`, the
  /// shared buffers (map_window) of runs that one of them created, left when every rank was killed
  /// while making one (so none removed the names); a later start's sweep would take them only 10 s
  /// on. Returns whether it unlinked the job's segment.
  static bool remove_if_stale(const std::string& job_id, const std::vector<pid_t>& ranks = {}) {
    const std::string name = segment_name(job_id);
    const bool all_ended = !ranks.empty();
    const bool removed = unlink_if_stale(name, all_ended);
    reclaim_stale_segments(name.substr(1) + ".split", all_ended);
    if (!ranks.empty()) remove_dead_runs_windows(name.substr(1) + "-", ranks);
    return removed;
  }

  /// Unlinks shared-buffer names "<prefix><pid>.<start>-w<id>-r<rank>" (pid and start in hex: the
  /// run's creator, see map_window) whose creator is one of `ranks` and has ended.
  static void remove_dead_runs_windows(const std::string& prefix, const std::vector<pid_t>& ranks) {
    DIR* d = ::opendir("/dev/shm");
    if (!d) return;
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      const std::string nm = e->d_name;
      if (nm.compare(0, prefix.size(), prefix) != 0) continue;
      const char* p = nm.c_str() + prefix.size();
      const char* end = nm.c_str() + nm.size();
      unsigned pid = 0;
      unsigned long long start = 0, id = 0, rank = 0;
      // Every field present and nothing more: another job's name that merely extends this one's
      // is not taken for a buffer.
      auto field = [&](auto& v, int base, std::string_view after) {
        const auto r = std::from_chars(p, end, v, base);
        if (r.ec != std::errc{} || r.ptr == p || std::string_view(r.ptr, static_cast<std::size_t>(end - r.ptr)).substr(0, after.size()) != after)
          return false;
        p = r.ptr + after.size();
        return true;
      };
      if (!(field(pid, 16, ".") && field(start, 16, "-w") && field(id, 10, "-r") && field(rank, 10, "")) || p != end) continue;
      if (std::find(ranks.begin(), ranks.end(), static_cast<pid_t>(pid)) == ranks.end()) continue;
      if (detail::process_dead(static_cast<pid_t>(pid), start)) names.push_back("/" + nm);
    }
    ::closedir(d);
    for (const std::string& nm : names) ::shm_unlink(nm.c_str());
  }

  /// Unlinks segment `name` only if it is still the segment `judged` (its stat when it was found
  /// stale): meanwhile another start may have removed that one and made its own under the name,
  /// which must not be unlinked under it (the inode is compared just before unlinking, so only a
  /// start within those microseconds could still lose its name). Returns whether it unlinked.
  static bool unlink_if_same(const std::string& name, const struct stat& judged) {
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) return false;
    struct stat now{};
    const bool same = ::fstat(fd, &now) == 0 && now.st_ino == judged.st_ino && now.st_dev == judged.st_dev;
    ::close(fd);
    return same && ::shm_unlink(name.c_str()) == 0;
  }

  /// Unlinks this user's collx segments whose creator died (left by a crash during start-up), or
  /// only those whose names (without the leading '/') start with `only`; with `unsigned_dead`, also
  /// those that name no creator yet, whatever their age (segment_is_stale). Returns how many were
  /// removed.
  static int reclaim_stale_segments(const std::string& only = {}, bool unsigned_dead = false) {
    int removed = 0;
    const std::string prefix = only.empty() ? "collx-" + std::to_string(::getuid()) + "-" : only;
    DIR* d = ::opendir("/dev/shm");
    if (!d) return 0;
    while (dirent* e = ::readdir(d)) {
      const std::string nm = e->d_name;
      if (nm.compare(0, prefix.size(), prefix) != 0) continue;
      removed += unlink_if_stale("/" + nm, unsigned_dead);
    }
    ::closedir(d);
    return removed;
  }

 private:
  struct outgoing {
    const std::byte* data;
    std::size_t bytes;
    std::size_t granularity;
    std::size_t sent;
    call_signature sig;
    bool cma;
  };

  shm_segment::header* hdr() const noexcept { return reinterpret_cast<shm_segment::header*>(base_); }
  shm_segment::peer_info& peer(int r) const noexcept {
    return reinterpret_cast<shm_segment::peer_info*>(base_ + lay_.peers)[r];
  }
  std::size_t pair(int from, int to) const noexcept {
    return static_cast<std::size_t>(from) * static_cast<std::size_t>(n_) + static_cast<std::size_t>(to);
  }
  shm_segment::mailbox& mbox(int from, int to) const noexcept {
    return reinterpret_cast<shm_segment::mailbox*>(base_ + lay_.boxes)[pair(from, to)];
  }
  shm_segment::slot& slot_at(int from, int to, std::uint64_t k) const noexcept {
    return reinterpret_cast<shm_segment::slot*>(base_ + lay_.slots)[pair(from, to) * slots_ + k % slots_];
  }
  std::byte* slot_data(int from, int to, std::uint64_t k) const noexcept {
    return base_ + lay_.data + (pair(from, to) * slots_ + k % slots_) * slot_bytes_;
  }

  /// Pushes as much of the pending messages to `p` into free slots as fits; never blocks.
  void progress(int p) {
    const auto i = static_cast<std::size_t>(p);
    auto& q = out_[i];
    bool rang = false;
    while (!q.empty()) {
      const std::uint64_t k = posted_[i];
      if (k - seen_consumed_[i] >= slots_) {  // the ring looks full: look again at what the peer consumed
        seen_consumed_[i] = mbox(rank_, p).consumed.load(std::memory_order_acquire);
        if (k - seen_consumed_[i] >= slots_) break;
      }
      outgoing& m = q.front();
      shm_segment::slot& s = slot_at(rank_, p, k);
      s.sig = m.sig;
      s.total_bytes = m.bytes;
      s.offset = m.sent;
      if (const window* w = find_window(m.data, m.bytes)) {  // the receiver reads it in place
        s.kind = shm_segment::slot_kind::window;
        s.len = m.bytes;
        s.addr = static_cast<std::uint64_t>(m.data - w->peers[static_cast<std::size_t>(rank_)]);
        s.pid = static_cast<std::int32_t>(w->id);
        m.sent = m.bytes;
        zero_copy_until_[i] = k + 1;
        mbox(rank_, p).zero_copy_until.store(k + 1, std::memory_order_relaxed);  // published by queued/stamp below
      } else if (m.cma) {
        s.kind = shm_segment::slot_kind::cma;
        s.len = m.bytes;
        s.addr = reinterpret_cast<std::uint64_t>(m.data);
        s.pid = static_cast<std::int32_t>(::getpid());
        m.sent = m.bytes;
        zero_copy_until_[i] = k + 1;
        mbox(rank_, p).zero_copy_until.store(k + 1, std::memory_order_relaxed);
      } else {
        const std::size_t piece = std::max(m.granularity, slot_bytes_ / m.granularity * m.granularity);
        const std::size_t len = std::min(piece, m.bytes - m.sent);
        s.kind = shm_segment::slot_kind::staged;
        s.len = len;
        if (len) std::memcpy(len <= shm_segment::slot::inline_bytes ? s.inline_data : slot_data(rank_, p, k), m.data + m.sent, len);
        m.sent += len;
      }
      s.stamp.store(k + 1, std::memory_order_release);
      posted_[i] = k + 1;
      rang = true;
      if (m.sent == m.bytes) q.pop_front();
    }
    if (const bool held = !q.empty(); held != queued_[i]) {  // for the peers' deadlock detection
      mbox(rank_, p).queued.store(held ? 1 : 0, std::memory_order_release);
      queued_[i] = held;
      held ? ++queued_peers_ : --queued_peers_;
    }
    if (rang) peer(p).bell.ring(true);
  }
  const window* find_window(const std::byte* p, std::size_t len) const noexcept {
    for (const window& w : windows_) {
      const std::byte* b = w.peers[static_cast<std::size_t>(rank_)];
      if (p >= b && p + len <= b + w.bytes[static_cast<std::size_t>(rank_)]) return &w;
    }
    return nullptr;
  }
  const window& window_of(std::int32_t id) const {
    for (const window& w : windows_)
      if (w.id == static_cast<std::uint32_t>(id)) return w;
    COLLX_THROW(errc::internal, "message refers to shared buffer " + std::to_string(id) + ", which this rank does not map");
  }

  void progress_all() {
    for (int p = 0; p < n_; ++p)
      if (!out_[static_cast<std::size_t>(p)].empty()) progress(p);
  }

  /// After reading a message in its sender's memory (single copy, or a shared buffer): throws the
  /// job's failure if one was published meanwhile. A sender whose call fails returns at once (it
  /// does not wait for readers), and its caller may then rewrite the buffer this rank was reading:
  /// the read may mix old and new bytes, so the call fails instead of delivering them. (The
  /// failure is published before the sender's call returns, so a read that saw a rewrite sees it.)
  void require_not_failed_after_read() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (hdr()->failed.load(std::memory_order_acquire)) raise_failure();
  }

  /// Reads a message in the sender's memory (process_vm_readv): straight into the destination when
  /// the consumer only copies, else through the bounce buffer (cache-sized pieces) into the consumer.
  void read_remote(int from, const shm_segment::slot& s, std::size_t granularity, consumer_ref consume) {
    std::byte* const direct = consume.copy_to();
    // The bounce buffer holds at least one element: an element is never cut (post_send keeps it
    // within a staging slot, so this stays bounded).
    if (!direct && bounce_.size() < granularity) bounce_.resize(granularity);
    // Direct pieces stay a few MiB so that a dead sender is noticed between them.
    const std::size_t piece = direct ? std::size_t{4} << 20 : std::max(granularity, bounce_.size() / granularity * granularity);
    for (std::size_t off = 0; off < s.len; off += piece) {
      const std::size_t len = std::min(piece, s.len - off);
      iovec local{direct ? direct + off : bounce_.data(), len};
      iovec remote{reinterpret_cast<void*>(s.addr + off), len};
      const ssize_t got = ::process_vm_readv(s.pid, &local, 1, &remote, 1, 0);
      if (got != static_cast<ssize_t>(len)) {
        const int err = errno;
        last_liveness_ = {};  // a dead sender is the likely cause: say so rather than blame CMA
        if (interrupted(from, [] { return false; })) raise_failure();  // nothing to wait for any more
        // ESRCH: the sender is gone, or exiting (its memory is released before /proc shows it dead).
        const std::string why =
            err == ESRCH ? peer_name(from, "pid " + std::to_string(s.pid)) + " died while " + peer_name(rank_) +
                               " read its message; the job cannot continue"
                         : "process_vm_readv from " + peer_name(from) + " failed (" + std::string(std::strerror(err)) +
                               "); set COLLX_CMA=0 to stage through shared memory";
        fail(errc::transport, why);
        COLLX_THROW(errc::transport, why);
      }
      if (!direct) consume(bounce_.data(), off, len);
    }
  }

  [[noreturn]] void mismatch(const std::string& why) {
    const std::string text = why + unreceived_sends_note();
    fail(errc::mismatch, text);
    COLLX_THROW(errc::mismatch, text);
  }

  /// "; rank 0 sent rank 1 2 point-to-point messages it has not received (...)" for each peer that
  /// has not received all of this rank's sends, else "": the cause of a mismatch that this rank's
  /// own comparison names only as the collectives after them differing (a send returns once its
  /// message is in the ring, so the sender goes on to its next collective).
  std::string unreceived_sends_note() const {
    std::string note;
    for (int to = 0; to < n_; ++to) {
      if (to == rank_) continue;
      const auto i = static_cast<std::size_t>(to);
      std::size_t unreceived = 0;  // messages, counted at their first piece
      for (std::uint64_t k = mbox(rank_, to).consumed.load(std::memory_order_acquire); k < posted_[i]; ++k) {
        const shm_segment::slot& sl = slot_at(rank_, to, k);  // this rank's own, until consumed
        unreceived += sl.sig.seq == 0 && sl.offset == 0;
      }
      for (const outgoing& m : out_[i]) unreceived += m.sig.seq == 0 && m.sent == 0;
      if (unreceived)
        note += "; rank " + std::to_string(rank_) + " sent rank " + std::to_string(to) + " " + std::to_string(unreceived) +
                " point-to-point message" + (unreceived == 1 ? "" : "s") +
                " that it has not received (a send without a matching recv before this call?)";
    }
    return note;
  }

  /// Fails the job with `text`, what every rank's calls then throw (the first failure is kept).
  void publish_failure(errc code, const std::string& text) noexcept {
    write_failure(*hdr(), code, text);
    // Before this rank's failed call returns and its caller rewrites a buffer that a peer may be
    // reading in place (require_not_failed_after_read): the flag first, then any such write.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (int r = 0; r < n_; ++r) peer(r).bell.ring(true);
  }
  /// Records `code` and `text` as segment `h`'s failure unless one is recorded already.
  static void write_failure(shm_segment::header& h, errc code, const std::string& text) noexcept {
    std::uint32_t expected = 0;
    if (h.fail_lock.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      h.fail_code = static_cast<std::uint32_t>(code);
      std::snprintf(h.fail_reason, sizeof h.fail_reason, "%s", text.c_str());
      h.failed.store(1, std::memory_order_release);
      return;
    }
    // Another rank's failure won: it is published (microseconds) before this caller goes on, so
    // that "published before the failed call returns" holds for this rank too.
    for (int i = 0; !h.failed.load(std::memory_order_acquire) && i < 1000000; ++i) std::this_thread::yield();
  }

  /// Throws the job's failure (`note` appended: own_wait_note).
  [[noreturn]] void raise_failure(const std::string& note = {}) {
    shm_segment::header* h = hdr();
    // A rank whose own fail() lost the race to another rank's may get here while that rank is
    // still writing its reason: wait (microseconds) until the failure is published whole.
    for (int i = 0; !h->failed.load(std::memory_order_acquire) && i < 1000000; ++i) std::this_thread::yield();
    COLLX_THROW(static_cast<errc>(h->fail_code), as_read_by(rank_, std::string(h->fail_reason)) + note);  // its own: not "rank R failed"
  }

  /// True once the job failed, or when `watched` (a rank, or -1 for all) has died or left while
  /// `ready` still does not hold: a dead peer fails the job. `ready` is asked again after the death
  /// or departure is seen: a peer may send what this rank waits for (or read what it sent) and then
  /// leave, after this wait last asked, and its leaving then ends nothing. Liveness is looked at
  /// most every 50 ms.
  template <class Ready>
  bool interrupted(int watched, Ready&& ready) {
    if (hdr()->failed.load(std::memory_order_acquire)) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_liveness_ < std::chrono::milliseconds(50)) return false;
    last_liveness_ = now;
    if (watched_failed()) return true;  // another level of this rank's hierarchy failed
    if (records_disagree(watched)) return true;
    for (int r = 0; r < n_; ++r) {
      if (r == rank_ || (watched >= 0 && r != watched)) continue;
      shm_segment::peer_info& pi = peer(r);
      const bool left = pi.departed.load(std::memory_order_acquire) != 0;
      if (left || detail::process_dead(pi.pid.load(std::memory_order_acquire), pi.start_time)) {
        if (ready()) return false;
        const std::string who = peer_name(r, "pid " + std::to_string(pi.pid.load())),
                          waits = " while " + peer_name(rank_) + " waits for it";
        // A peer that closed its communicator often did so because a rank died (its split group's
        // call failed, say): the death is the cause to look at, so it comes first.
        const std::string dead = left ? dead_peers(r) : std::string();
        fail(errc::transport, (!left ? who + " died" + waits
                               : dead.empty() ? who + " closed its communicator" + waits
                                              : dead + " died, and " + who + " closed its communicator" + waits) +
                                  "; the job cannot continue");
        return true;
      }
    }
    return false;
  }

  /// For a peer `left` that closed its communicator: the ranks of this job that died, which may be
  /// why it left (a failure it saw on another communicator, a split group's, say): "rank 3
  /// (pid 1234)", "rank 3 (pid 1234), rank 5 (pid 1236)", or "".
  std::string dead_peers(int left) const {
    std::string dead;
    for (int r = 0; r < n_; ++r) {
      const shm_segment::peer_info& pi = peer(r);
      const std::int32_t pid = pi.pid.load(std::memory_order_acquire);
      if (r == rank_ || r == left || pi.departed.load(std::memory_order_acquire) || !detail::process_dead(pid, pi.start_time))
        continue;
      dead += (dead.empty() ? "" : ", ") + peer_name(r, "pid " + std::to_string(pid));
    }
    return dead;
  }

  /// True (with the job failed) if the records of `watched` (a rank, or -1 for all) of this call,
  /// or of an earlier one it is still in, differ from this rank's (first_disagreement): a root that
  /// only sends returns early, and ranks of a hierarchical call may never meet on a level.
  bool records_disagree(int watched) noexcept {
    if (!hdr() || announced_.seq == 0) return false;
    try {
      const std::string why = first_disagreement(announced_, rank_, n_, [&](int r, std::uint64_t seq, call_signature& c) {
        return (watched < 0 || r == watched || r == rank_) && announced_call(r, seq, c);
      });
      if (why.empty()) return false;
      fail(errc::mismatch, why + unreceived_sends_note());
      return true;
    } catch (...) {  // no memory for the message: the timeout still ends the wait
      return false;
    }
  }
  bool records_disagree() noexcept override { return records_disagree(-1); }

  /// Call `seq` as rank r announced it (seq 0: its latest call), if r's history still holds it and
  /// it is not being written right now.
  bool announced_call(int r, std::uint64_t seq, call_signature& out) const {
    const shm_segment::peer_info& pi = peer(r);
    const std::uint32_t v = pi.call_version.load(std::memory_order_acquire);
    if (v == 0 || (v & 1)) return false;
    const std::uint64_t want = seq ? seq : pi.last;
    std::memcpy(&out, static_cast<const void*>(&pi.calls[want % shm_segment::call_history]), sizeof out);
    std::atomic_thread_fence(std::memory_order_acquire);
    return pi.call_version.load(std::memory_order_relaxed) == v && out.seq == want && want != 0;
  }
  bool announced_call(int r, call_signature& out) const { return announced_call(r, 0, out); }

  /// A received message's signature `got` differs from this call's `sig`: why, from the ranks'
  /// published records (describe_message_mismatch).
  std::string why_message_differs(const call_signature& got, const call_signature& sig, int from) const {
    return describe_message_mismatch(got, sig, rank_, from,
                                     [&](int r, std::uint64_t seq, call_signature& c) { return announced_call(r, seq, c); });
  }

  /// What rank r is doing, from the call it announced last and what it blocks on, for a
  /// timeout's message.
  std::string where_is(int r) const {
    // A stopped rank's published state is what it was doing when it stopped: say it is stopped.
    const shm_segment::peer_info& pi = peer(r);
    if (const pid_t pid = pi.pid.load(std::memory_order_acquire); detail::process_stopped(pid, pi.start_time))
      return peer_name(r, "pid " + std::to_string(pid)) +
             " is stopped (SIGSTOP or SIGTSTP, or held by a debugger) and cannot go on until continued; when it stopped, " +
             where_it_was(r, true);
    return where_it_was(r, false);
  }
  /// where_is from what rank r published: its last call and what it blocks on (`stopped`: the
  /// caller has said it is stopped, so a rank blocking on nothing is not guessed about).
  std::string where_it_was(int r, bool stopped) const {
    call_signature theirs;
    const bool has_call = announced_call(r, theirs);
    return detail::whereabouts(peer_name(r), has_call, theirs, announced_, call_seq_, waits_for(r, stopped), stopped);
  }

  /// What a rank blocks on (peer_info::waiting), worded as wait()'s `what`.
  enum class wait_kind : std::uint32_t { message_from = 1, consumed_by = 2 };
  static const char* wait_words(wait_kind k) { return k == wait_kind::message_from ? "a message from" : "its messages to be consumed by"; }

  /// detail::own_wait_note for a wait for `kind` from `peer_rank` begun at `start` that another
  /// rank's timeout ended; "" for any other failure (as the threads transport's).
  std::string own_wait_note(wait_kind kind, int peer_rank, std::chrono::steady_clock::time_point start) const {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const shm_segment::header* h = hdr();
    if (waited < detail::own_wait_note_after || !h->failed.load(std::memory_order_acquire) ||
        static_cast<errc>(h->fail_code) != errc::timeout ||
        std::string_view(h->fail_reason).starts_with("rank " + std::to_string(rank_) + " "))  // its own
      return {};
    return detail::own_wait_note(peer_name(rank_), waited, wait_words(kind) + (" " + peer_name(peer_rank)));
  }

  /// True (with the job failed, errc::mismatch) if, in a wait of this rank's current collective
  /// call, `peer_rank` has announced a later call and `ready` still does not hold: a rank returns
  /// from a call only once its messages of the call are all in the ring and it read those it
  /// expected (wait_sends, recv), so the peer disagreed on this call. `ready` is asked again after
  /// the later call is seen. While the peer's record of this call is published, the records name
  /// the field (records_disagree, not otherwise looked at more than every 50 ms; a record being
  /// rewritten right now is read at the next wake-up, at most 50 ms on); once it is gone, or if it
  /// names nothing, went_past_message says what is known. Point-to-point calls (sequence number 0)
  /// are not numbered: a peer may legitimately make collective calls before it sends.
  template <class Ready>
  bool went_past(wait_kind kind, int peer_rank, Ready& ready) noexcept {
    if (call_seq_ == 0 || call_seq_ != announced_.seq) return false;
    call_signature theirs, then;
    if (!announced_call(peer_rank, theirs) || theirs.seq <= call_seq_ || ready()) return false;
    if (records_disagree(peer_rank)) return true;
    const bool held = went_past_holds_record(call_seq_, theirs.seq);
    if (held && !announced_call(peer_rank, call_seq_, then)) return false;  // being rewritten: look again
    try {
      // Decided from this one read (records_disagree's may have met the record mid-rewrite).
      std::string why;
      if (held && !(then == announced_))
        why = describe_mismatch_from_records(announced_, rank_, then, peer_rank, [&](int r, std::uint64_t seq, call_signature& c) {
          return (r == peer_rank || r == rank_) && announced_call(r, seq, c);
        });
      fail(errc::mismatch,
           !why.empty() ? why : went_past_message(announced_, rank_, peer_rank, theirs.seq, kind == wait_kind::consumed_by, !held));
    } catch (...) {
      fail(errc::mismatch, {});
    }
    return true;
  }

  /// What rank r waits for now ("" if it does not block), for where_is. Of a rank that waits for
  /// this one, "each waits for the other", unless r is `stopped` (what it waits for may well be
  /// there: it cannot look).
  std::string waits_for(int r, bool stopped) const {
    detail::wait_record w;
    std::uint64_t version = 0;
    if (!peer(r).wait.read(w, version)) return "";
    return detail::wait_text(wait_words(static_cast<wait_kind>(w.kind)), w.peer, rank_, level_world_ranks(), stopped);
  }

  /// Whether rank r's published wait w still cannot end (detail::find_wait_cycle), from the
  /// segment: a message_from wait until its slot is stamped, and only while the peer holds nothing
  /// for r outside the ring (a waiting rank still pushes its queued messages, mailbox::queued); a
  /// consumed_by wait while r holds queued messages and the ring is full (with room, r pushes them
  /// when it wakes: its flag alone says nothing), or the peer has not read its zero-copy ones.
  /// Each ends only by the peer's action: sending (outside its waits, or a queued push) or
  /// receiving (outside its waits).
  bool wait_blocked(int r, const detail::wait_record& w) const noexcept {
    if (static_cast<wait_kind>(w.kind) == wait_kind::message_from)
      return slot_at(w.peer, r, w.k).stamp.load(std::memory_order_acquire) != w.k + 1 &&
             mbox(w.peer, r).queued.load(std::memory_order_acquire) == 0;
    const shm_segment::mailbox& box = mbox(r, w.peer);
    const bool queued = box.queued.load(std::memory_order_acquire) != 0;  // read first: cleared after zero_copy_until is set
    const std::uint64_t until = box.zero_copy_until.load(std::memory_order_acquire);
    const std::uint64_t consumed = box.consumed.load(std::memory_order_acquire);
    // Full: the ring holds messages consumed .. consumed + slots - 1 (stamped in order).
    const bool full = slot_at(r, w.peer, consumed + slots_ - 1).stamp.load(std::memory_order_acquire) == consumed + slots_;
    return (queued && full) || consumed < until;
  }

  /// True (with the job failed, errc::mismatch) if this rank's wait is part of a cycle of waits in
  /// which each rank waits for the next (detail::find_wait_cycle): ranks that all send a message
  /// larger than the ring first, say, wait for each other until their timeout otherwise.
  bool deadlocked() noexcept {
    try {
      const auto cycle = detail::find_wait_cycle(
          rank_, n_, [&](int r) -> const detail::wait_slot& { return peer(r).wait; },
          [&](int r, const detail::wait_record& w) { return wait_blocked(r, w); });
      if (cycle.empty()) return false;
      // Ranks that disagree on a call (a root, say) often wait for each other: say what differs.
      if (records_disagree(-1)) return true;
      const std::string why = deadlock_message(
          cycle, [](const detail::wait_record& w) { return static_cast<wait_kind>(w.kind) == wait_kind::message_from; },
          [&](int r, std::uint64_t seq, call_signature& sig) { return announced_call(r, seq, sig); },
          "a send larger than the staging ring, or read in place, returns only once received: use send_recv, or "
          "order the calls: even ranks send first, odd ranks receive first",
          level_world_ranks());
      fail(errc::mismatch, why);
      return true;
    } catch (...) {  // no memory for the message: the timeout still ends the wait
      return false;
    }
  }

  /// Waits until ready() (progressing this rank's queued sends meanwhile), publishing the wait in
  /// peer_info::wait: `k` is the message a message_from wait needs (the pair's count).
  template <class Ready>
  void wait(wait_kind kind, int peer_rank, std::uint64_t k, Ready ready) {
    detail::wait_slot& published = peer(rank_).wait;
    bool in_wait = false;
    auto ready_with_progress = [&] {
      // Pushing queued pieces while published changes what peers read (a stamp, then
      // mailbox::queued): marked as a change, so that no deadlock check reads it halfway.
      if (in_wait && queued_peers_ > 0) {
        published.begin_change();
        progress_all();
        published.end_change();
      } else {
        progress_all();
      }
      return ready();
    };
    if (ready_with_progress()) return;
    const auto start = std::chrono::steady_clock::now();
    published.publish({static_cast<std::uint32_t>(kind), peer_rank, k, call_seq_});
    in_wait = true;
    const auto st = detail::wait_until(peer(rank_).bell, true, std::chrono::nanoseconds(timeout_), spin_, ready_with_progress,
                                       [&] {
                                         return (interrupted(peer_rank, ready) || went_past(kind, peer_rank, ready) || deadlocked()) &&
                                                !ready();
                                       },
                                       std::chrono::milliseconds(50));
    // Left set after a timeout (the communicator has failed, nothing waits on it again): a peer
    // that timed out at the same moment still reads this rank as blocked, as it was.
    if (st != detail::wait_status::timed_out) published.publish({});
    if (st == detail::wait_status::ready) return;
    if (st == detail::wait_status::timed_out) {
      const std::string why = "timed out after " + std::to_string(timeout_.count()) + " ms waiting for " + wait_words(kind) +
                              " " + peer_name(peer_rank) + " (" + where_is(peer_rank) + ")";
      fail(errc::timeout, why);
      COLLX_THROW(errc::timeout, why);
    }
    raise_failure(own_wait_note(kind, peer_rank, start));
  }

  /// Unlinks segment `name` if its creator died (segment_is_stale) and the name still means the
  /// segment judged (unlink_if_same).
  static bool unlink_if_stale(const std::string& name, bool unsigned_dead = false) {
    struct stat judged{};
    return segment_is_stale(name, &judged, unsigned_dead) && unlink_if_same(name, judged);
  }

  /// Whether segment `name` was left by a dead creator; `seen` gets the segment's stat. One that
  /// names no creator yet (made within microseconds, or left by a creator killed then) counts as
  /// dead 10 s after it was made, or at once with `unsigned_dead` (the caller knows that every
  /// process that could be making it has ended).
  static bool segment_is_stale(const std::string& name, struct stat* seen = nullptr, bool unsigned_dead = false) {
    const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) return false;
    struct stat st{};
    bool stale = false;
    if (::fstat(fd, &st) == 0 && st.st_uid == ::getuid()) {
      if (seen) *seen = st;
      if (static_cast<std::size_t>(st.st_size) < sizeof(shm_segment::header)) {
        stale = unsigned_dead || std::time(nullptr) - st.st_mtime > 10;  // never initialised
      } else if (void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ, MAP_SHARED, fd, 0); p != MAP_FAILED) {
        const auto* h = static_cast<const shm_segment::header*>(p);
        stale = h->creator_pid == 0 ? unsigned_dead || std::time(nullptr) - st.st_mtime > 10
                                    : detail::process_dead(h->creator_pid, h->creator_start);
        ::munmap(p, sizeof(shm_segment::header));
      }
    }
    ::close(fd);
    return stale;
  }

  /// Writes this process as the creator into the header of the segment it just created (`fd`, still
  /// empty), before the slow reservation and set-up: killed during them, it leaves a segment that
  /// names a dead creator, which the next start or the launcher removes at once (an unsigned one
  /// counts as dead only 10 s after it was made).
  static void sign_new_segment(int fd) {
    const std::size_t page = shm_segment::align_up(sizeof(shm_segment::header), 4096);
    if (::ftruncate(fd, static_cast<off_t>(page)) != 0) return;  // posix_fallocate reports it next
    void* p = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return;
    auto* h = new (p) shm_segment::header();
    h->creator_pid = static_cast<std::int32_t>(::getpid());
    h->creator_start = detail::own_start_time();
    ::munmap(p, page);
  }

  /// The pid of the dead process that made the segment open as `fd` (`size` bytes), or 0 while it
  /// lives or is not known yet. (Whether it was this job's rank 0 cannot be told: an earlier
  /// program under the same job id, even of the same launcher start, leaves the same kind of
  /// segment for the next rank 0 to replace. So a rank waits, and its timeout names this pid.)
  static std::int32_t dead_creator(int fd, std::size_t size) {
    if (size < sizeof(shm_segment::header)) return 0;
    void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return 0;
    const auto* h = static_cast<const shm_segment::header*>(p);
    const std::int32_t dead =
        h->creator_pid != 0 && detail::process_dead(h->creator_pid, h->creator_start) ? h->creator_pid : 0;
    ::munmap(p, sizeof(shm_segment::header));
    return dead;
  }

  /// Turns the segment into a one-page failure marker that the other ranks read (the last of them
  /// unlinks it; if they never come, the next start reclaims it once this process is gone).
  void publish_setup_failure(int fd, const std::string& why) {
    const std::size_t marker = shm_segment::align_up(sizeof(shm_segment::header), 4096);
    if (::ftruncate(fd, static_cast<off_t>(marker)) != 0) {
      ::shm_unlink(name_.c_str());
      return;
    }
    void* p = ::mmap(nullptr, marker, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::shm_unlink(name_.c_str());
      return;
    }
    auto* h = new (p) shm_segment::header();
    h->creator_pid = static_cast<std::int32_t>(::getpid());
    h->creator_start = detail::own_start_time();
    std::snprintf(h->fail_reason, sizeof h->fail_reason, "%s", why.c_str());
    h->failed.store(1);
    h->magic.store(shm_segment::magic_failed, std::memory_order_release);
    ::munmap(p, marker);
    if (n_ == 1) ::shm_unlink(name_.c_str());
  }

  /// Unlinks the job's name if it still names this rank's segment (same creator), not one a later
  /// job of the same id made after the last rank attached and unlinked ours.
  void unlink_name_if_ours() const {
    const int fd = ::shm_open(name_.c_str(), O_RDONLY, 0);
    if (fd < 0) return;
    struct stat st{};
    bool ours = false;
    if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= sizeof(shm_segment::header))
      if (void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ, MAP_SHARED, fd, 0); p != MAP_FAILED) {
        const auto* h = static_cast<const shm_segment::header*>(p);
        ours = h->creator_pid == hdr()->creator_pid && h->creator_start == hdr()->creator_start;
        ::munmap(p, sizeof(shm_segment::header));
      }
    ::close(fd);
    if (ours) ::shm_unlink(name_.c_str());
  }

  /// "" unless the segment open as `fd` (`size` bytes) is a live job's that this rank must not
  /// join: another start's (launch_info::launch_id), or set up for another world size or staging
  /// size than this rank's. Then what differs, so that the rank fails now instead of joining
  /// another job's ranks or waiting out the connect timeout for a segment that will never fit.
  std::string live_segment_disagrees(int fd, std::size_t size, bool* same_start = nullptr) const {
    if (size < sizeof(shm_segment::header)) return "";  // rank 0 is still creating it
    void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return "";
    const auto* h = static_cast<const shm_segment::header*>(p);
    const bool live = h->magic.load(std::memory_order_acquire) == shm_segment::magic_ready &&
                      !detail::process_dead(h->creator_pid, h->creator_start);
    // Read only once the magic says the header is written (the acquire above).
    const std::string theirs = live ? std::string(h->launch_id, ::strnlen(h->launch_id, sizeof h->launch_id)) : "";
    std::string why;
    if (!live)
      why = "";  // being set up, or left by a dead job: rank 0 replaces it
    else if (!theirs.empty() && !launch_id_.empty() && theirs != launch_id_)
      why = "shared memory " + name_ + " belongs to another start of this job id (rank 0 pid " + std::to_string(h->creator_pid) +
            ", COLLX_LAUNCH_ID " + theirs + "; this rank's is " + launch_id_ +
            "): two jobs were given the same COLLX_JOB_ID; give each its own";
    else if (h->world_size != n_ || h->total_bytes != bytes_) {
      if (same_start) *same_start = this_start(theirs);
      why = "shared memory " + name_ + " was set up by rank 0 (pid " + std::to_string(h->creator_pid) + ") for " +
            std::to_string(h->world_size) + " ranks and " + std::to_string(h->slot_bytes * h->slots) +
            " staging bytes per pair, this rank has " + std::to_string(n_) + " ranks and " +
            std::to_string(slot_bytes_ * slots_) +
            ": the ranks disagree on the world size or COLLX_SHM_BYTES_PER_PEER, or another job has this job id";
    }
    ::munmap(p, sizeof(shm_segment::header));
    return why;
  }

  /// Whether the segment open as `fd` is live and rank 0's of this very start (as tell_rank0 needs).
  bool segment_of_this_start(int fd) const {
    void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return false;
    const auto* h = static_cast<const shm_segment::header*>(p);
    const bool live = h->magic.load(std::memory_order_acquire) == shm_segment::magic_ready &&
                      !detail::process_dead(h->creator_pid, h->creator_start);
    const std::string theirs = live ? std::string(h->launch_id, ::strnlen(h->launch_id, sizeof h->launch_id)) : "";
    ::munmap(p, sizeof(shm_segment::header));
    return live && this_start(theirs);
  }

  /// Whether a segment whose launch id is `theirs` is this very start's: the same launch id, or
  /// none on either side (ranks started by hand, for which the job id is all that tells jobs
  /// apart), unless that id is the parent's pid, which two jobs started by one parent share.
  bool this_start(const std::string& theirs) const {
    return theirs == launch_id_ && (!theirs.empty() || !id_from_parent());
  }

  /// Publishes `why` as the failure of rank 0's segment, so that rank 0, waiting for the ranks to
  /// attach, ends now with this rank's reason instead of at its connect timeout. Only for a
  /// segment of this very start (same COLLX_LAUNCH_ID, or none on both sides): another start's is
  /// left alone.
  void tell_rank0(int fd, const std::string& why, errc code = errc::mismatch) const noexcept {
    void* p = ::mmap(nullptr, sizeof(shm_segment::header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return;
    // (no bell: rank 0's attach wait looks at the failure every 50 ms)
    try {
      write_failure(*static_cast<shm_segment::header*>(p), code, reported_by(rank_, why));
    } catch (...) {  // no memory for the text: the failure without it
      write_failure(*static_cast<shm_segment::header*>(p), code, {});
    }
    ::munmap(p, sizeof(shm_segment::header));
  }

  [[noreturn]] void system_error(const std::string& what, int err) {
    COLLX_THROW(errc::system, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + " shared memory " + name_ +
                                  ": " + what + ": " + std::strerror(err) + address_space_limit_note(err));
  }

  /// For a mapping that failed with ENOMEM under an address-space limit (ulimit -v): the limit,
  /// which the bare "Cannot allocate memory" does not suggest; else "".
  static std::string address_space_limit_note(int err) {
    rlimit as{};
    if (err != ENOMEM || ::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return {};
    return " (this process's address space is limited to " + std::to_string(as.rlim_cur >> 20) +
           " MiB: RLIMIT_AS, ulimit -v)";
  }

  /// MAP_POPULATE for a segment of `bytes` up to 256 MiB (every segment of up to 32 ranks at the
  /// default staging size): the page faults of the whole segment at the start, not in the first
  /// calls of each message size (they made a cold 512 B all-reduce twice as slow as a warm one).
  /// A larger segment (n x n rings) is faulted in as used: each rank touches 2n of the n^2 rings,
  /// and populating all of them in every rank cost time and page tables that grow as n^3 (100
  /// ranks: 650 MiB mapped 100 times).
  static int populate(std::size_t bytes) noexcept { return bytes <= (std::size_t{256} << 20) ? MAP_POPULATE : 0; }

  /// Whether the job id is the parent process's pid (no COLLX_JOB_ID nor a launcher's job id).
  bool id_from_parent() const {
    const std::size_t at = name_.rfind("-ppid-");
    return at != std::string::npos && name_.find_first_not_of("0123456789", at + 6) == std::string::npos;
  }

  /// For a start that timed out: where a job id taken from the parent process came from.
  std::string job_id_hint() const {
    if (!id_from_parent()) return "";
    const std::size_t at = name_.rfind("-ppid-");
    return "; the job id came from this process's parent (pid " + name_.substr(at + 6) +
           "), as neither COLLX_JOB_ID nor a known launcher's job id is set: ranks started by different parents "
           "(a wrapper such as timeout or sh per rank) get different ids, so set COLLX_JOB_ID to one value for all";
  }

  void connect(const shm_options& opt) {
    // Staging geometry: the same on every rank (derived from the world size and the environment).
    const std::size_t per_peer = shm_bytes_per_peer(opt.bytes_per_peer, n_);
    slots_ = 8;
    slot_bytes_ = per_peer / slots_ / 64 * 64;
    lay_ = shm_segment::compute(n_, slot_bytes_, slots_);
    bytes_ = lay_.total;
    const int cma_pref = shm_cma_from_environment(opt.cma);

    const auto deadline = std::chrono::steady_clock::now() + std::min(opt.connect_timeout, detail::longest_wait);
    int fd = -1;
    if (rank_ == 0) {
      reclaim_stale_segments();
      for (int attempt = 0;; ++attempt) {
        fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
          // 0600 whatever the umask (one without the owner's read or write bit made a segment no
          // peer could open, and no later start could judge stale and remove).
          (void)::fchmod(fd, 0600);
          break;
        }
        if (errno != EEXIST) system_error("cannot create the segment", errno);
        if (unlink_if_stale(name_)) continue;  // a crashed start's: gone now
        const int probe = ::shm_open(name_.c_str(), O_RDONLY, 0);
        if (probe >= 0) ::close(probe);
        else if (errno == ENOENT && attempt < 100) continue;  // removed meanwhile (another start's reclaim)
        COLLX_THROW(errc::system, "shared memory " + name_ +
                                      " already belongs to a running job with the same job id; give each job its own "
                                      "COLLX_JOB_ID");
      }
      sign_new_segment(fd);
      if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_)); e != 0) {
        struct statvfs vfs{};
        std::string why = "rank 0: cannot reserve " + std::to_string(bytes_ >> 20) + " MiB of shared memory for " + name_ +
                          ": " + std::strerror(e);
        if (e == ENOSPC && ::statvfs("/dev/shm", &vfs) == 0)
          why = "shared memory is full: " + why + " (/dev/shm has " + std::to_string(vfs.f_bavail * vfs.f_frsize >> 20) +
                " MiB free; lower COLLX_SHM_BYTES_PER_PEER or free /dev/shm)";
        publish_setup_failure(fd, why);  // so the other ranks fail now instead of at the connect timeout
        ::close(fd);
        COLLX_THROW(errc::system, why);
      }
    } else {
      // Wait for rank 0's segment; skip one left by a dead job until rank 0 replaces it.
      bool denied = false;  // the name was there but could not be opened: said at the timeout
      std::string unmappable;  // why a segment of the job's size could not be mapped (ENOMEM): said at the timeout
      for (unsigned waits = 0;; ) {
        fd = ::shm_open(name_.c_str(), O_RDWR, 0);
        if (fd >= 0) {
          struct stat st{};
          const std::size_t marker = shm_segment::align_up(sizeof(shm_segment::header), 4096);
          const bool sized = ::fstat(fd, &st) == 0;
          if (sized && static_cast<std::size_t>(st.st_size) != marker) {
            bool ours = false;
            if (const std::string why = live_segment_disagrees(fd, static_cast<std::size_t>(st.st_size), &ours); !why.empty()) {
              if (ours) tell_rank0(fd, why);
              ::close(fd);
              COLLX_THROW(errc::mismatch, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + why);
            }
          }
          if (sized && (static_cast<std::size_t>(st.st_size) == bytes_ || static_cast<std::size_t>(st.st_size) == marker)) {
            const std::size_t map_bytes = static_cast<std::size_t>(st.st_size);
            void* p = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | populate(map_bytes), fd, 0);
            if (p != MAP_FAILED) {
              auto* h = static_cast<shm_segment::header*>(p);
              if (h->magic.load(std::memory_order_acquire) == shm_segment::magic_failed) {  // rank 0 gave up
                const std::string why(h->fail_reason);
                if (h->attached.fetch_add(1) + 2 == static_cast<std::uint32_t>(n_)) ::shm_unlink(name_.c_str());
                ::munmap(p, map_bytes);
                ::close(fd);
                COLLX_THROW(errc::system, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) +
                                              ": rank 0 failed to set up the shared memory: " + why);
              }
              if (h->magic.load(std::memory_order_acquire) == shm_segment::magic_ready &&
                  map_bytes == bytes_ && !detail::process_dead(h->creator_pid, h->creator_start) &&
                  h->world_size == n_) {
                // Ready now, perhaps not when live_segment_disagrees looked: ask again before joining.
                bool ours = false;
                if (const std::string why = live_segment_disagrees(fd, map_bytes, &ours); !why.empty()) {
                  if (ours) tell_rank0(fd, why);
                  ::munmap(p, map_bytes);
                  ::close(fd);
                  COLLX_THROW(errc::mismatch, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + why);
                }
                base_ = static_cast<std::byte*>(p);
                break;
              }
              ::munmap(p, map_bytes);
            } else if (const int e = errno; e == ENOMEM) {  // no room in this process (ulimit -v)
              unmappable = "cannot map the segment (" + std::to_string(map_bytes) + " bytes) " + name_ + ": " +
                           std::strerror(e) + address_space_limit_note(e);
              // Rank 0's, ready: it and the others fail now. (Not yet ready, or a dead job's: looked
              // at again, and said at the timeout.)
              if (segment_of_this_start(fd)) {
                tell_rank0(fd, unmappable, errc::system);
                ::close(fd);
                COLLX_THROW(errc::system, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + unmappable);
              }
            }
          }
          ::close(fd);
          fd = -1;
        } else if (errno == EACCES) {
          // Made this instant under a umask without the owner's bits (rank 0 sets 0600 next), or a
          // segment of an older version so made: waited for as for a missing one.
          denied = true;
        } else if (errno != ENOENT) {
          system_error("cannot open the segment", errno);
        }
        if (std::chrono::steady_clock::now() > deadline) {
          if (!unmappable.empty())
            COLLX_THROW(errc::system, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + unmappable);
          std::int32_t left_by_dead = 0;  // the maker of a segment still there, if it died
          if (const int probe = ::shm_open(name_.c_str(), O_RDONLY, 0); probe >= 0) {
            struct stat st{};
            if (::fstat(probe, &st) == 0) left_by_dead = dead_creator(probe, static_cast<std::size_t>(st.st_size));
            ::close(probe);
          }
          if (left_by_dead)
            COLLX_THROW(errc::timeout, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": shared memory " +
                                           name_ + id_note_ + " was made by pid " + std::to_string(left_by_dead) +
                                           ", which died before the ranks attached, and no live rank 0 replaced it within "
                                           "the connect timeout (COLLX_CONNECT_TIMEOUT): did this job's rank 0 die while "
                                           "starting? (Or it is an earlier run's, and rank 0 is not running with the same "
                                           "job id and world size.)" + job_id_hint());
          if (denied)
            COLLX_THROW(errc::timeout, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": shared memory " +
                                           name_ + id_note_ + " could not be opened within the connect timeout: "
                                           "Permission denied (its mode lacks the owner's read or write bit; remove it "
                                           "from /dev/shm if no job of yours is running)" + job_id_hint());
          COLLX_THROW(errc::timeout, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": shared memory " +
                                         name_ + id_note_ + " did not appear within the connect timeout (COLLX_CONNECT_TIMEOUT; is rank 0 running, with "
                                         "the same job id and world size? A job removes the name once all its ranks "
                                         "attached, so a rank started again after that, or late, also ends here)" +
                                         job_id_hint());
        }
        if (abandon_start_ && ++waits % 50 == 0)  // about every 50 ms, while rank 0 has not made it
          if (const std::string why = abandon_start_({0}, std::chrono::milliseconds(waits)); !why.empty())
            COLLX_THROW(errc::aborted, "rank " + std::to_string(rank_) + " ended the start: " + why);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (!base_) {
      void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | populate(bytes_), fd, 0);
      if (p == MAP_FAILED) {
        const int e = errno;
        const std::string why = "rank 0: cannot map the " + std::to_string(bytes_ >> 20) + " MiB segment " + name_ + ": " +
                                std::strerror(e) + address_space_limit_note(e);
        publish_setup_failure(fd, why);  // the other ranks fail now (the last of them removes the name)
        ::close(fd);
        COLLX_THROW(errc::system, why);
      }
      base_ = static_cast<std::byte*>(p);
      auto* h = new (base_) shm_segment::header();
      // The creator first, as sign_new_segment wrote it: the header names no creator between these
      // lines only (a segment that names none counts as dead only 10 s after it was made).
      h->creator_pid = static_cast<std::int32_t>(::getpid());
      h->creator_start = detail::own_start_time();
      h->version = shm_segment::layout_version;
      h->world_size = n_;
      h->total_bytes = bytes_;
      h->slot_bytes = slot_bytes_;
      h->slots = static_cast<std::uint32_t>(slots_);
      std::memcpy(h->launch_id, launch_id_.data(), launch_id_.size());
      for (int r = 0; r < n_; ++r) new (&peer(r)) shm_segment::peer_info();
      for (std::size_t i = 0; i < static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_); ++i)
        new (&reinterpret_cast<shm_segment::mailbox*>(base_ + lay_.boxes)[i]) shm_segment::mailbox();
      for (std::size_t i = 0; i < static_cast<std::size_t>(n_) * static_cast<std::size_t>(n_) * slots_; ++i)
        new (&reinterpret_cast<shm_segment::slot*>(base_ + lay_.slots)[i]) shm_segment::slot();
      h->magic.store(shm_segment::magic_ready, std::memory_order_release);
    }
    try {
      place_outgoing_staging(fd, opt.numa);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);

    // Announce ourselves; the last rank to attach unlinks the name.
    static const std::uint64_t probe_value = 0x636f6c6c78ull;
    shm_segment::peer_info& me = peer(rank_);
    if (me.attached.exchange(1) != 0) {
      // Another process holds this rank: leave its record alone (its peers watch that pid; this
      // one's exit must not read as that rank dying) and the job too, as another start's rank.
      const std::int32_t holder = me.pid.load(std::memory_order_acquire);
      COLLX_THROW(errc::invalid_argument,
                  "rank " + std::to_string(rank_) + " of " + name_ + " has started already" +
                      (holder > 0 ? " (pid " + std::to_string(holder) + ")" : std::string()) +
                      ": two processes were given the same rank and job id (COLLX_RANK set by hand, or a launcher "
                      "that starts a rank twice?); this one leaves the job alone");
    }
    me.start_time = detail::own_start_time();
    me.probe_addr = reinterpret_cast<std::uint64_t>(&probe_value);
    me.cpus = detail::allowed_cpus();
    me.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_release);
    if (hdr()->attached.fetch_add(1) + 1 == static_cast<std::uint32_t>(n_)) ::shm_unlink(name_.c_str());
    for (int r = 0; r < n_; ++r) peer(r).bell.ring(true);
    const auto all_attached = [&] { return hdr()->attached.load(std::memory_order_acquire) == static_cast<std::uint32_t>(n_); };
    // abandon_start_'s answer, kept until the wait ends: acted on only if the start then still
    // waits (it may have completed meanwhile).
    const auto started = std::chrono::steady_clock::now();
    auto last_abandon_check = started;
    std::string abandon_why;
    const auto stop_start = [&](auto& ready) {
      if (interrupted(-1, ready)) return true;
      const auto now = std::chrono::steady_clock::now();
      if (!abandon_start_ || now - last_abandon_check < std::chrono::milliseconds(50)) return false;
      last_abandon_check = now;
      std::vector<int> waiting_for;  // ranks that have not attached
      for (int r = 0; r < n_; ++r)
        if (peer(r).attached.load(std::memory_order_acquire) == 0) waiting_for.push_back(r);
      if (!waiting_for.empty())
        abandon_why = abandon_start_(waiting_for, std::chrono::duration_cast<std::chrono::milliseconds>(now - started));
      return !abandon_why.empty();
    };
    const auto connect_wait = [&](auto ready) {
      const auto st = detail::wait_until(me.bell, true, deadline, std::chrono::nanoseconds(0), ready,
                                         [&] { return stop_start(ready); }, std::chrono::milliseconds(50));
      if (st == detail::wait_status::timed_out) {
        unlink_name_if_ours();  // the job cannot start: leave nothing in /dev/shm for a rank that never came
        std::string missing, unfinished;  // not attached; attached, not through the single-copy probe
        for (int r = 0; r < n_; ++r) {
          if (peer(r).attached.load(std::memory_order_acquire) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          else if (peer(r).cma_state.load(std::memory_order_acquire) == 0) unfinished += (unfinished.empty() ? "" : ", ") + std::to_string(r);
        }
        const auto ranks = [](const std::string& list) {
          return "rank" + std::string(list.find(',') != std::string::npos ? "s " : " ") + list;
        };
        const std::string why =
            missing.empty()
                ? "every rank attached to " + name_ + id_note_ + ", but " +
                      (unfinished.empty() ? std::string("not every rank") : ranks(unfinished)) +
                      " did not finish starting (the single-copy probe) within the connect timeout (COLLX_CONNECT_TIMEOUT)"
                : "only " + std::to_string(hdr()->attached.load()) + " of " + std::to_string(n_) + " ranks attached to " +
                      name_ + id_note_ + " within the connect timeout (COLLX_CONNECT_TIMEOUT) (missing: " + ranks(missing) +
                      " when this rank stopped waiting)" + job_id_hint();
        // Told to the ranks still waiting (a later deadline): else they see this rank's process
        // end and blame it ("rank 0 died"), not the rank that never came.
        fail(errc::timeout, why);
        COLLX_THROW(errc::timeout, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + why);
      }
      // A peer may finish its start, use the communicator and fail it between this rank's last
      // look at `ready` and its look at the peers: the start itself succeeded then (the failure
      // is the communicator's, for its first call). A peer that closed it ends nothing then.
      if (st == detail::wait_status::interrupted && !ready()) {
        // The other ranks' starts end with it too (interrupted: the segment failed).
        if (!abandon_why.empty()) adopt_failure(errc::aborted, "rank " + std::to_string(rank_) + " ended the start: " + abandon_why);
        unlink_name_if_ours();  // as for the timeout: the job cannot start
        raise_failure();
      }
      abandon_why.clear();
    };
    connect_wait(all_attached);

    // Spin only while the ranks fit on the CPUs they may use together: ranks that mpirun or
    // run_processes pinned one per core count as many CPUs as ranks; ranks that taskset or a
    // container squeezed onto fewer count those (detail/cpus.hpp).
    detail::cpu_bits job_cpus;
    for (int r = 0; r < n_; ++r) job_cpus |= peer(r).cpus;
    usable_cpus_ = detail::usable_cpus(job_cpus);
    costs_ = topo::host_cost_model(job_cpus);  // from the union of masks: the same on every rank
    oversubscribed_ = static_cast<unsigned>(std::max(n_, opt.ranks_on_host)) > usable_cpus_;
    spin_ = oversubscribed_ ? std::chrono::microseconds(0) : std::chrono::microseconds(50);

    // Can this process read its neighbour's memory? (Yama or seccomp may forbid it.)
    if (cma_pref != 0) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    std::uint32_t mine = cma_pref == 0 ? 3 : 2;
    if (cma_pref != 0 && n_ > 1) {
      const int nb = (rank_ + 1) % n_;
      std::uint64_t v = 0;
      iovec local{&v, sizeof v};
      iovec remote{reinterpret_cast<void*>(peer(nb).probe_addr), sizeof v};
      if (::process_vm_readv(peer(nb).pid.load(), &local, 1, &remote, 1, 0) == sizeof v && v == probe_value) mine = 1;
    }
    me.cma_state.store(mine, std::memory_order_release);
    for (int r = 0; r < n_; ++r) peer(r).bell.ring(true);
    connect_wait([&] {
      for (int r = 0; r < n_; ++r)
        if (peer(r).cma_state.load(std::memory_order_acquire) == 0) return false;
      return true;
    });
    bool all_can = n_ > 1;
    for (int r = 0; r < n_; ++r) all_can = all_can && peer(r).cma_state.load() == 1;
    if (cma_pref == 1 && !all_can && n_ > 1) {
      // Said to the peers too (their first call fails with it), rather than leaving them to find
      // this rank gone.
      int off = -1;
      for (int r = 0; r < n_ && off < 0; ++r)
        if (peer(r).cma_state.load(std::memory_order_acquire) == 3) off = r;
      const std::string why =
          off >= 0 ? "COLLX_CMA (shm_options::cma) differs: rank " + std::to_string(rank_) + " requires single copy (1), rank " +
                         std::to_string(off) + " turned it off (0); set the same value on every rank"
                   : "COLLX_CMA=1 but process_vm_readv between the ranks is not permitted here (ptrace restrictions); "
                     "use COLLX_CMA=auto or 0";
      const errc code = off >= 0 ? errc::mismatch : errc::system;
      fail(code, why);  // the peers read "rank R failed: why"
      COLLX_THROW(code, "rank " + std::to_string(rank_) + "/" + std::to_string(n_) + ": " + why);
    }
    cma_ = all_can && (cma_pref == 1 || (cma_pref == -1 && oversubscribed_));  // see shm_options::cma
    bounce_.resize(256 * 1024);
    out_.resize(static_cast<std::size_t>(n_));
    posted_.assign(static_cast<std::size_t>(n_), 0);
    seen_consumed_.assign(static_cast<std::size_t>(n_), 0);
    zero_copy_until_.assign(static_cast<std::size_t>(n_), 0);
    received_.assign(static_cast<std::size_t>(n_), 0);
    queued_.assign(static_cast<std::size_t>(n_), false);
  }

  /// Moves this rank's outgoing staging memory (the slots it writes for every peer) to the NUMA
  /// node its CPUs are on, where the machine has several (shm_options::numa). Rank 0 allocated the
  /// whole segment, so without this every slot lies on rank 0's node.
  void place_outgoing_staging(int fd, int numa) {
    if (numa == 0 || (numa < 0 && detail::numa_node_count() < 2)) return;
    numa_node_ = detail::numa_node_of(detail::allowed_cpus());
    if (numa_node_ < 0) return;  // CPUs on several nodes: no node is this rank's
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t begin = lay_.data + pair(rank_, 0) * slots_ * slot_bytes_;
    const std::size_t end = begin + static_cast<std::size_t>(n_) * slots_ * slot_bytes_;
    // Whole pages only: a page shared with a neighbour's region stays where it is.
    const std::size_t lo = (begin + page - 1) / page * page, hi = end / page * page;
    if (hi <= lo) return;
    const char* step = "";
    const int e = detail::place_pages_on_node(fd, base_ + lo, lo, hi - lo, numa_node_, step);
    if (e == EPERM || e == ENOSYS) {  // mbind not permitted here: the pages stay where they are
      numa_node_ = -1;
      return;
    }
    if (e != 0) {
      std::string why = "rank " + std::to_string(rank_) + ": cannot move its staging memory to NUMA node " +
                        std::to_string(numa_node_) + " (" + step + "): " + std::strerror(e);
      if (e == ENOSPC) why = "shared memory is full: " + why + " (lower COLLX_SHM_BYTES_PER_PEER or free /dev/shm)";
      fail(errc::system, why);
      COLLX_THROW(errc::system, why);
    }
  }

  int rank_, n_;
  std::chrono::milliseconds timeout_;
  std::size_t cma_min_;
  std::string name_;
  std::string id_note_;  ///< the job id as given, for messages, where the name carries it cleaned
  std::string launch_id_;  // launch_info::launch_id: a segment of another start is never joined
  launch_info info_;       // as connected: split() derives its groups' from it
  shm_options opt_;
  abandon_question abandon_start_;  // asked while the start waits (constructor)
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  shm_segment::layout lay_{};
  std::size_t slots_ = 8, slot_bytes_ = 0;
  bool cma_ = false;
  bool oversubscribed_ = false;  // more ranks on this host than the CPUs they may use
  unsigned usable_cpus_ = 1;     // CPUs the ranks may use together (detail::usable_cpus)
  int numa_node_ = -1;           // node this rank's outgoing staging lies on (-1: not placed)
  cost_model costs_;             // what algo::automatic chooses with (costs())
  std::chrono::nanoseconds spin_{0};  // poll this long before sleeping (0 when ranks outnumber cores)
  std::vector<std::byte> bounce_;
  std::vector<std::deque<outgoing>> out_;
  // Per peer, this rank's own counts (not shared): messages posted to it, how many of those it was
  // last seen to have consumed, the count it must consume before the last zero-copy message's
  // buffer is free, and messages received from it.
  std::vector<std::uint64_t> posted_, seen_consumed_, zero_copy_until_, received_;
  std::vector<bool> queued_;     // what this rank last wrote to mailbox::queued, per peer
  std::size_t queued_peers_ = 0;  // peers whose queued_ is true
  std::chrono::steady_clock::time_point last_liveness_{};
  call_signature announced_{};  // this rank's current call (announce)
  std::uint64_t call_seq_ = 0;  // the call of the message posted or received last (0: point-to-point)
  std::vector<window> windows_;
  std::uint32_t next_window_id_ = 0;
};

}  // namespace detail::transport_impl

/// Connects this process to the other ranks of its job over shared memory (all ranks on one node).
/// Every rank calls it with the same world size and job id (see bootstrap::from_environment).
/// @throws collx::error invalid_argument (ranks on several nodes, bad settings), timeout (ranks did
///   not all arrive within shm_options::connect_timeout), system (shared memory full or unusable).
inline communicator connect_shm(const launch_info& info, const communicator_options& opt = {},
                                const shm_options& shm = {}) {
  return communicator(std::make_shared<detail::transport_impl::shm_transport>(info, shm, opt.timeout), opt);
}

/// connect_shm with the launcher's environment (collx-run, torchrun, mpirun, srun).
inline communicator connect_shm_from_environment(const communicator_options& opt = {}, const shm_options& shm = {}) {
  return connect_shm(bootstrap::from_environment(), opt, shm);
}

/// Memory of `count` elements of T that every rank of a shared-memory communicator maps, so that
/// collectives whose buffers lie in it are read by peers in place (no staging, no process_vm_readv):
/// NCCL's registered/symmetric buffers, for processes. An all-reduce of 256 KiB or more whose input
/// and output lie in such buffers on every rank goes further: each rank folds its block from every
/// input and writes it into every rank's output (detail/shared_allreduce.hpp), so peers also write
/// into this memory during such calls. Counts may differ between ranks. It is a contiguous range
/// of this rank's elements (data, size, begin, end, []), passed to collectives as a vector is:
/// `shm_buffer<float> in(comm, n), out(comm, n); allreduce(comm, in, out);`.
/// Creating and destroying it are collective (every rank, same order, like MPI_Win_allocate and
/// MPI_Win_free): both synchronise the ranks, and each is one call on comm (after its earlier
/// *_async calls; one started meanwhile waits for it). Contents start zeroed. It keeps a pointer to `comm`,
/// which must outlive it and stay where it is (not moved from) until it is destroyed.
/// @throws collx::error invalid_argument (the communicator is not a shared-memory one), system
///   (shared memory full), and what barrier/all_gather throw.
template <element T>
class shm_buffer {
 public:
  /// Collective: `count` elements (zeroed) for this rank, mapped with every peer's buffer (one call
  /// on comm: an all_gather of the sizes, then barriers).
  /// @throws collx::error as the class says; an error of the all_gather names the buffer's creation.
  shm_buffer(communicator& comm, std::size_t count) : comm_(&comm), count_(count) {
    tp_ = dynamic_cast<detail::transport_impl::shm_transport*>(&comm.get_transport());
    if (!tp_)
      COLLX_THROW(errc::invalid_argument, "shm_buffer needs a shared-memory communicator (connect_shm), not " +
                                              std::string(comm.get_transport().name()));
    // One call, made of an all_gather and two barriers: an async call started meanwhile must not
    // run between them.
    comm.drain_async();
    const communicator::call_scope one_thread(comm);
    std::vector<std::size_t> mine{count * sizeof(T)}, all(static_cast<std::size_t>(comm.size()));
    try {
      all_gather(comm, std::span<const std::size_t>(mine), std::span<std::size_t>(all));
    } catch (const error& e) {  // say what the user called: the all_gather is ours, not theirs
      COLLX_THROW(e.code(), std::string("creating a collx::shm_buffer (collective: every rank creates its buffers in "
                                        "the same order): ") + e.what());
    }
    id_ = tp_->next_window_id();
    data_ = reinterpret_cast<T*>(tp_->map_window(id_, count * sizeof(T), all, [&] { barrier(comm); }));
  }
  /// Collective: waits for comm's earlier *_async calls, meets every rank (barrier: no peer still
  /// reads this buffer), then unmaps it. Errors are swallowed (on a failed communicator nobody
  /// reads any more either).
  ~shm_buffer() {
    if (!tp_) return;
    comm_->drain_async();  // earlier async calls may use this buffer
    std::optional<communicator::call_scope> one_thread;  // the barrier and the unmapping are one call
    try {
      one_thread.emplace(*comm_);
      barrier(*comm_);  // no peer still reads this rank's buffer, nor this rank theirs
    } catch (...) {  // a failed communicator: nobody reads any more either
    }
    tp_->unmap_window(id_);
  }
  /// Not copyable: it owns the mapping.
  shm_buffer(const shm_buffer&) = delete;
  /// Not copyable: it owns the mapping.
  shm_buffer& operator=(const shm_buffer&) = delete;

  // A contiguous range of this rank's elements, as a std::vector is (const when the buffer is), so
  // that it is passed to collectives as it is: `allreduce(comm, in, out)`, `allreduce(comm, buf)`.

  /// This rank's `size()` elements.
  std::span<T> span() noexcept { return {data_, count_}; }
  /// This rank's `size()` elements, read-only.
  std::span<const T> span() const noexcept { return {data_, count_}; }
  /// This rank's first element.
  T* data() noexcept { return data_; }
  /// This rank's first element, read-only.
  const T* data() const noexcept { return data_; }
  /// Elements (not bytes) of this rank's buffer, as created.
  std::size_t size() const noexcept { return count_; }
  /// Iterator to this rank's first element.
  T* begin() noexcept { return data_; }
  /// Iterator past this rank's last element.
  T* end() noexcept { return data_ + count_; }
  /// Iterator to this rank's first element, read-only.
  const T* begin() const noexcept { return data_; }
  /// Iterator past this rank's last element, read-only.
  const T* end() const noexcept { return data_ + count_; }
  /// Element i; i < size() (not checked).
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// Element i, read-only; i < size() (not checked).
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  communicator* comm_;
  detail::transport_impl::shm_transport* tp_ = nullptr;
  std::uint32_t id_ = 0;
  T* data_ = nullptr;
  std::size_t count_;
};

}  // namespace v0
}  // namespace collx
