/// @file transport/threads.hpp
/// Ranks as threads of one process. A send publishes a pointer; the receiver reads (and reduces)
/// straight from the sender's memory, so every transfer is a single copy. Waits spin briefly and then
/// sleep on a futex, so many more ranks than cores still make progress.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <collx/communicator.hpp>
#include <collx/node_layout.hpp>
#include <collx/detail/cpus.hpp>
#include <collx/detail/futex.hpp>
#include <collx/detail/wait_graph.hpp>
#include <collx/error.hpp>
#include <collx/topo/host_cost.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {
namespace detail::transport_impl {

/// State shared by the threads of one in-process world: a mailbox per ordered pair of ranks, a
/// doorbell per rank, and the world's failure.
class thread_world {
 public:
  /// Sends a rank may have posted to one peer and not yet seen consumed.
  static constexpr std::uint64_t mailbox_capacity = 16;

  struct message {
    const void* data = nullptr;
    std::size_t bytes = 0;
    call_signature sig{};
  };
  struct alignas(64) mailbox {
    std::atomic<std::uint64_t> posted{0};
    alignas(64) std::atomic<std::uint64_t> consumed{0};
    /// 1 while the receiver copies out of the sender's memory (see threads_transport::recv).
    std::atomic<std::uint32_t> reading{0};
    message slots[mailbox_capacity];
  };
  struct alignas(64) padded_bell {
    detail::doorbell bell;
  };
  /// The calls a rank announced last, call k at calls[k % published_call_history]: a peer that
  /// moved on (a rank whose part of a call was empty returns at once) can still be compared with a
  /// rank that waits in an earlier call. Only its rank writes them; peers compare them with theirs
  /// while they wait. A mutex, not a seqlock: the copy would race (ThreadSanitizer says so), and
  /// the lock is contended only by a peer that is asleep anyway.
  struct alignas(64) published_calls {
    std::mutex m;
    std::uint64_t last = 0;  ///< sequence number of the call announced last (0: none)
    call_signature calls[published_call_history]{};  ///< call k at calls[k % published_call_history]
  };

  /// `ranks_running`: threads that run ranks of this world or of the one it was split from (at
  /// least world_size): waits spin only while they fit on the CPUs.
  explicit thread_world(int world_size, int ranks_running = 0)
      : size_(world_size),
        ranks_running_(std::max(world_size, ranks_running)),
        boxes_(new mailbox[static_cast<std::size_t>(world_size) * static_cast<std::size_t>(world_size)]),
        bells_(new padded_bell[static_cast<std::size_t>(world_size)]),
        calls_(new published_calls[static_cast<std::size_t>(world_size)]),
        departed_(new std::atomic<bool>[static_cast<std::size_t>(world_size)]),
        waits_(new detail::wait_slot[static_cast<std::size_t>(world_size)]),
        costs_(topo::host_cost_model(detail::allowed_cpus())) {
    for (int r = 0; r < world_size; ++r) departed_[static_cast<std::size_t>(r)].store(false, std::memory_order_relaxed);
  }

  /// Rank r's transport is gone (its communicator destroyed): wakes every rank, so that one waiting
  /// for r fails at once instead of at its timeout.
  void depart(int r) noexcept {
    departed_[static_cast<std::size_t>(r)].store(true, std::memory_order_release);
    for (int q = 0; q < size_; ++q) bell(q).ring(false);
  }
  /// Whether rank r's communicator was destroyed.
  bool departed(int r) const noexcept { return departed_[static_cast<std::size_t>(r)].load(std::memory_order_acquire); }

  /// Publishes rank r's current call (by rank r only).
  void announce(int r, const call_signature& sig) {
    published_calls& c = calls_[static_cast<std::size_t>(r)];
    std::lock_guard<std::mutex> lock(c.m);
    c.calls[sig.seq % published_call_history] = sig;
    c.last = sig.seq;
  }
  /// Call `seq` as rank r announced it (seq 0: its latest call), if r announced it and its history
  /// (published_call_history calls) still holds it.
  bool announced(int r, std::uint64_t seq, call_signature& out) {
    published_calls& c = calls_[static_cast<std::size_t>(r)];
    std::lock_guard<std::mutex> lock(c.m);
    const std::uint64_t want = seq ? seq : c.last;
    if (!want || want > c.last) return false;
    out = c.calls[want % published_call_history];
    return out.seq == want;
  }

  /// The world of group `color` of split `split_id` (collx::split), of `group_size` ranks: made by
  /// the first of its members to ask, and forgotten here once all of them took it.
  std::shared_ptr<thread_world> split_world(std::uint64_t split_id, int color, int group_size) {
    std::shared_ptr<thread_world> w;
    std::string failed_why;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_split& p = splits_[{split_id, color}];
      if (!p.world) p.world = std::make_shared<thread_world>(group_size, ranks_running_);
      w = p.world;
      if (++p.taken == group_size) splits_.erase({split_id, color});
      if (const auto f = failed_splits_.find({split_id, color}); f != failed_splits_.end()) failed_why = f->second;
    }
    if (!failed_why.empty()) w->fail(errc::aborted, failed_why);
    return w;
  }
  /// A rank's split `split_id` failed before it took its group, that of `color` (its exchange of
  /// colors threw): it never will, and the group's other members would wait for it until their
  /// timeout. Fails that group, now if a member took it already, else when one takes it.
  void fail_split(std::uint64_t split_id, int color, const std::string& why) noexcept {
    try {
      const std::string reason = why.empty() ? std::string("a rank's collx::split failed") : why;
      std::shared_ptr<thread_world> starting;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        failed_splits_.emplace(std::pair{split_id, color}, reason);
        if (const auto p = splits_.find({split_id, color}); p != splits_.end()) starting = p->second.world;
      }
      if (starting) starting->fail(errc::aborted, reason);
    } catch (...) {  // no memory: the group's members end by their timeout, as before
    }
  }

  int size() const noexcept { return size_; }
  /// Threads that run ranks of this world or of the one it was split from.
  int ranks_running() const noexcept { return ranks_running_; }
  /// algo::automatic's figures for ranks on this process's CPUs (topo::host_cost_model).
  const cost_model& costs() const noexcept { return costs_; }
  mailbox& box(int from, int to) noexcept {
    return boxes_[static_cast<std::size_t>(from) * static_cast<std::size_t>(size_) + static_cast<std::size_t>(to)];
  }
  detail::doorbell& bell(int r) noexcept { return bells_[static_cast<std::size_t>(r)].bell; }
  /// What rank r waits for now (threads_transport::wait publishes it), for deadlock detection.
  detail::wait_slot& wait_of(int r) noexcept { return waits_[static_cast<std::size_t>(r)]; }

  /// The waits of a rank between threads (detail::wait_record::kind). Each is met by its peer
  /// alone (the mailbox counters it reads move only when the peer posts or consumes), and once met
  /// stays met: what detail::find_wait_cycle needs.
  enum wait_kind : std::uint32_t {
    free_slot_towards = 1,  ///< k - consumed(r -> peer) < mailbox_capacity: room for message k
    message_from = 2,       ///< posted(peer -> r) > k: message k arrived
    consumed_by = 3,        ///< consumed(r -> peer) >= k: the peer read r's k messages
  };
  /// Whether rank r's wait w is met.
  bool wait_met(int r, const detail::wait_record& w) noexcept {
    switch (w.kind) {
      case free_slot_towards: return w.k - box(r, w.peer).consumed.load(std::memory_order_acquire) < mailbox_capacity;
      case message_from: return box(w.peer, r).posted.load(std::memory_order_acquire) > w.k;
      case consumed_by: return box(r, w.peer).consumed.load(std::memory_order_acquire) >= w.k;
      default: return true;
    }
  }

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  void fail(errc code, const std::string& why) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_.load(std::memory_order_relaxed)) return;
      try {
        reason_ = why;
      } catch (...) {
      }
      code_ = code;
      failed_.store(true, std::memory_order_release);
    }
    for (int r = 0; r < size_; ++r) bell(r).ring(false);
  }
  /// Throws the failure, its reason as `read` turns it (transport::as_read_by of the reader).
  template <class Read>
  [[noreturn]] void raise_failure(Read&& read) {
    std::lock_guard<std::mutex> lock(mutex_);
    COLLX_THROW(code_, read(reason_));
  }
  /// The failure's code and reason, if failed.
  bool failure(errc& code, std::string& why) noexcept {
    if (!failed()) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    code = code_;
    try {
      why = reason_;
    } catch (...) {
    }
    return true;
  }

 private:
  int size_;
  int ranks_running_;
  std::unique_ptr<mailbox[]> boxes_;
  std::unique_ptr<padded_bell[]> bells_;
  std::unique_ptr<published_calls[]> calls_;
  std::unique_ptr<std::atomic<bool>[]> departed_;
  std::unique_ptr<detail::wait_slot[]> waits_;
  cost_model costs_;
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  errc code_ = errc::internal;
  std::string reason_;
  struct pending_split {
    std::shared_ptr<thread_world> world;
    int taken = 0;  // members that took it so far
  };
  std::map<std::pair<std::uint64_t, int>, pending_split> splits_;  // guarded by mutex_
  std::map<std::pair<std::uint64_t, int>, std::string> failed_splits_;  // fail_split's reasons; guarded by mutex_
};

/// One rank's end of a thread_world.
class threads_transport final : public transport {
 public:
  threads_transport(std::shared_ptr<thread_world> world, int rank)
      : world_(std::move(world)), rank_(rank), posted_(static_cast<std::size_t>(world_->size()), 0) {
    // The process's CPUs (affinity, cgroup quota), not the machine's: see detail/cpus.hpp.
    spin_ = static_cast<unsigned>(world_->ranks_running()) <= detail::usable_cpus() ? std::chrono::microseconds(50)
                                                                           : std::chrono::microseconds(0);
  }
  /// Tells the peers this rank left (thread_world::depart).
  ~threads_transport() override { world_->depart(rank_); }
  threads_transport(const threads_transport&) = delete;
  threads_transport& operator=(const threads_transport&) = delete;

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return world_->size(); }
  std::string_view name() const noexcept override { return "threads"; }
  /// algo::automatic's figures: topo::host_cost_model of this process's CPUs (one for all ranks).
  cost_model costs() const noexcept override { return world_->costs(); }
  void set_timeout(std::chrono::milliseconds t) noexcept override { timeout_ = t; }
  void announce(const call_signature& sig) override {
    announced_ = sig;
    world_->announce(rank_, sig);
  }
  /// A world of the group's threads (thread_world::split_world), which the members share.
  std::shared_ptr<transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                   std::uint64_t split_id) override {
    (void)key;
    if (members.empty()) return nullptr;
    return std::make_shared<threads_transport>(world_->split_world(split_id, color, static_cast<int>(members.size())),
                                               group_rank);
  }
  /// Fails group `color` of split `split_id` (thread_world::fail_split).
  void split_failed(std::uint64_t split_id, int color, const std::string& why) noexcept override {
    world_->fail_split(split_id, color, why);
  }
  /// Throws the failure, if any. From inside a read of this world's (a fold's look between its
  /// pieces, detail::combine_checked) without waiting out peers' reads of this rank's messages, as
  /// fail() does not: a peer reading one may be in the same place, waiting for this read to end.
  /// The call's way out (communicator::fail, after this read ended) waits for them.
  void check() override {
    if (!world_->failed()) return;
    if (reading_this_world()) world_->raise_failure([&](const std::string& why) { return as_read_by(rank_, why); });
    rethrow_failure();
  }
  /// Whether the world has failed (a load): polled between the pieces of a fold.
  bool failed_now() const noexcept override { return world_->failed(); }
  /// Fails the world, then waits until no peer still copies out of a message of this rank's: the
  /// caller may be leaving its call (an exception from its op) and free the buffer behind it. Not
  /// from inside a read of this world's (an op that calls abort() or fail(), or drops a request):
  /// this thread stays in that call, which quiesces on its way out, and waiting here could wait
  /// for ever for a peer in the same place, whose read of this rank's message waits for this
  /// rank's read to end. A call on another world made from such an op quiesces as before.
  void fail(errc code, const std::string& why) noexcept override {
    world_->fail(code, reported(why));
    if (!reading_this_world()) quiesce();
  }
  void adopt_failure(errc code, const std::string& why) noexcept override { world_->fail(code, why); }
  bool failure(errc& code, std::string& why) noexcept override { return world_->failure(code, why); }

  void post_send(int peer, const void* data, std::size_t bytes, std::size_t granularity,
                 const call_signature& sig) override {
    (void)granularity;  // the receiver reads the whole message in place
    call_seq_ = sig.seq;
    auto& box = world_->box(rank_, peer);
    const std::uint64_t k = posted_[static_cast<std::size_t>(peer)];
    wait(thread_world::free_slot_towards, peer, k);
    box.slots[k % thread_world::mailbox_capacity] = {data, bytes, sig};
    box.posted.store(k + 1, std::memory_order_release);
    posted_[static_cast<std::size_t>(peer)] = k + 1;
    world_->bell(peer).ring(false);
  }

  void recv(int peer, std::size_t bytes, std::size_t granularity, const call_signature& sig,
            consumer_ref consume) override {
    (void)granularity;  // delivered whole
    call_seq_ = sig.seq;
    auto& box = world_->box(peer, rank_);
    const std::uint64_t k = box.consumed.load(std::memory_order_relaxed);
    wait(thread_world::message_from, peer, k);
    const thread_world::message& m = box.slots[k % thread_world::mailbox_capacity];
    if (!(m.sig == sig))
      fail_out(errc::mismatch, describe_message_mismatch(m.sig, sig, rank_, peer, [&](int r, std::uint64_t seq, call_signature& c) {
                 return world_->announced(r, seq, c);
               }));
    if (m.bytes != bytes)
      fail_out(errc::mismatch, message_size_mismatch(sig, peer, m.bytes, rank_, bytes));
    // The message is the sender's own memory, valid only while the sender is inside the call. A
    // sender that fails leaves the call at once, so announce the read and then re-check the
    // failure: a sender failing after this point waits in quiesce() until the read is over; one
    // that failed before is never read.
    box.reading.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (world_->failed()) {
      box.reading.store(0, std::memory_order_release);
      rethrow_failure();
    }
    struct end_read {
      std::atomic<std::uint32_t>& flag;
      read_frame frame;
      end_read(std::atomic<std::uint32_t>& f, const thread_world* w) : flag(f), frame{w, reads_on_this_thread} {
        reads_on_this_thread = &frame;
      }
      ~end_read() {
        reads_on_this_thread = frame.outer;
        flag.store(0, std::memory_order_release);
      }
      end_read(const end_read&) = delete;
      end_read& operator=(const end_read&) = delete;
    } reading{box.reading, world_.get()};
    if (bytes) consume(static_cast<const std::byte*>(m.data), 0, bytes);
    box.consumed.store(k + 1, std::memory_order_release);
    world_->bell(peer).ring(false);
  }

  void wait_sends() override {
    for (int p = 0; p < world_->size(); ++p) {
      const std::uint64_t k = posted_[static_cast<std::size_t>(p)];
      if (k) wait(thread_world::consumed_by, p, k);
    }
  }

 private:
  /// Waits until `peer` meets wait `kind` at counter k (thread_world::wait_met), publishing the wait
  /// meanwhile for deadlock detection.
  void wait(thread_world::wait_kind kind, int peer, std::uint64_t k) {
    const detail::wait_record w{kind, peer, k, call_seq_};
    auto ready = [&] { return world_->wait_met(rank_, w); };
    if (ready()) return;
    const auto start = std::chrono::steady_clock::now();
    detail::wait_slot& mine = world_->wait_of(rank_);
    mine.publish(w);
    struct unpublish {
      detail::wait_slot& slot;
      ~unpublish() { slot.publish({}); }
    } published{mine};
    // Checked on every wake-up and every 20 ms: the failure flag, whether a peer's records of this
    // call or of one it is still in differ (ranks that disagree on a root may never exchange a
    // message to compare, as when both broadcast as the root), the other levels of a hierarchy
    // (and their records: a hierarchical call's ranks may never meet on a level), whether the peer
    // left, whether it went past this call without what this rank waits for, and whether this
    // rank's wait closes a cycle of waits (a deadlock).
    const bool consuming = kind != thread_world::message_from;
    const auto st = detail::wait_until(world_->bell(rank_), false, std::chrono::nanoseconds(timeout_), spin_, ready,
                                       [&] {
                                         return world_->failed() || records_disagree() || watched_failed() || left(peer, ready) ||
                                                went_past(peer, ready, consuming) || deadlocked();
                                       },
                                       std::chrono::milliseconds(20));
    if (st == detail::wait_status::ready) return;
    if (st == detail::wait_status::timed_out)
      fail_out(errc::timeout, "timed out after " + std::to_string(timeout_.count()) + " ms waiting for " +
                                  wait_words(kind) + " " + peer_name(peer) + " (" + where_is(peer) + ")");
    rethrow_failure(own_wait_note(kind, peer, start));
  }

  /// detail::own_wait_note for a wait begun at `start` that another rank's timeout ended; "" for
  /// any other failure.
  std::string own_wait_note(std::uint32_t kind, int peer, std::chrono::steady_clock::time_point start) const {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    errc code{};
    std::string why;
    if (waited < detail::own_wait_note_after || !world_->failure(code, why) || code != errc::timeout ||
        why.rfind("rank " + std::to_string(rank_) + " ", 0) == 0)  // its own (abort() from another thread)
      return {};
    return detail::own_wait_note(peer_name(rank_), waited, wait_words(kind) + (" " + peer_name(peer)));
  }

  /// What rank r is doing, from the call it announced last and what it waits for, for a timeout's
  /// message (as the shm transport's).
  std::string where_is(int r) {
    call_signature theirs;
    const bool has_call = world_->announced(r, 0, theirs);
    detail::wait_record w;
    std::uint64_t version = 0;
    const std::string waits = world_->wait_of(r).read(w, version) ? detail::wait_text(wait_words(w.kind), w.peer, rank_, level_world_ranks()) : "";
    return detail::whereabouts(peer_name(r), has_call, theirs, announced_, call_seq_, waits, false);
  }

  static const char* wait_words(std::uint32_t kind) noexcept {
    switch (kind) {
      case thread_world::free_slot_towards: return "a free mailbox slot towards";
      case thread_world::message_from: return "a message from";
      default: return "its message to be consumed by";
    }
  }

  /// True (with the world failed, errc::mismatch) if this rank's wait is part of a cycle of waits
  /// in which each rank waits for the next (detail::find_wait_cycle): between
  /// threads a send returns only once received, so ranks that all send first, or one in a send
  /// and its peer in a collective's send, wait for each other until their timeout otherwise.
  bool deadlocked() noexcept {
    try {
      const auto cycle = detail::find_wait_cycle(
          rank_, world_->size(), [&](int r) -> const detail::wait_slot& { return world_->wait_of(r); },
          [&](int r, const detail::wait_record& w) { return !world_->wait_met(r, w); });
      if (cycle.empty()) return false;
      const std::string why = deadlock_message(
          cycle, [](const detail::wait_record& w) { return w.kind == thread_world::message_from; },
          [&](int r, std::uint64_t seq, call_signature& sig) { return world_->announced(r, seq, sig); },
          "between threads a send returns only once received: use send_recv, or order the calls: even ranks send "
          "first, odd ranks receive first",
          level_world_ranks());
      world_->fail(errc::mismatch, reported(why));
      return true;
    } catch (...) {  // no memory for the message: the timeout still ends the wait
      return false;
    }
  }

  /// True (with the world failed, errc::mismatch) if, in a wait of this rank's current collective
  /// call, `peer` has announced a later call and `ready` still does not hold: a peer returns from
  /// a call only once its messages of the call were read and it read those it expected
  /// (wait_sends), so it disagreed on this call. `ready` is asked again after the later call is
  /// seen, as in left(). The records are asked again too (the peer may have gone on since wait
  /// last asked them): while the peer's record of this call is published they name the field;
  /// once it is gone, went_past_message says what is known. Point-to-point calls (sequence number
  /// 0) are not numbered: a peer may legitimately make collective calls before it sends.
  template <class Ready>
  bool went_past(int peer, Ready& ready, bool consuming) noexcept {
    if (call_seq_ == 0 || call_seq_ != announced_.seq) return false;
    call_signature theirs;
    if (!world_->announced(peer, 0, theirs) || theirs.seq <= call_seq_ || ready()) return false;
    if (records_disagree()) return true;
    (void)world_->announced(peer, 0, theirs);  // where the peer is now, for the wording: it may have gone on
    try {
      world_->fail(errc::mismatch, reported(went_past_message(announced_, rank_, peer, theirs.seq, consuming,
                                                              !went_past_holds_record(call_seq_, theirs.seq))));
    } catch (...) {
      world_->fail(errc::mismatch, {});
    }
    return true;
  }

  /// True (with the world failed) if `peer` destroyed its communicator and `ready` still does not
  /// hold: what this rank waits for can no longer come (a send between threads returns only once
  /// received, so nothing of a finished call is left in flight). `ready` is asked again after the
  /// departure is seen: the peer's last step of its last call (consuming this rank's message) comes
  /// before its departure, and may have come after this wait last asked.
  template <class Ready>
  bool left(int peer, Ready& ready) noexcept {
    if (!world_->departed(peer) || ready()) return false;
    try {
      world_->fail(errc::transport, reported(peer_name(peer) + " closed its communicator while " + peer_name(rank_) +
                                             " waits for it; the job cannot continue"));
    } catch (...) {
      world_->fail(errc::transport, {});
    }
    return true;
  }

  /// True (with the world failed) if a peer's records of this call, or of an earlier one it is still
  /// in, differ from this rank's (first_disagreement).
  bool records_disagree() noexcept override {
    try {
      const std::string why = first_disagreement(announced_, rank_, world_->size(),
                                                 [&](int r, std::uint64_t seq, call_signature& c) { return world_->announced(r, seq, c); });
      if (why.empty()) return false;
      world_->fail(errc::mismatch, reported(why));
      return true;
    } catch (...) {  // no memory for the message: the timeout still ends the wait
      return false;
    }
  }

  // Every error leaves the call through one of these two, with the world failed: they first wait
  // until no peer is still copying out of a message this rank posted, because the caller may free
  // that buffer as soon as the exception is caught.
  [[noreturn]] void fail_out(errc code, const std::string& why) {
    world_->fail(code, reported(why));
    quiesce();
    COLLX_THROW(code, why);
  }
  /// Throws the world's failure as this rank reads it, followed by `note` (this rank's own part).
  [[noreturn]] void rethrow_failure(const std::string& note = {}) {
    quiesce();
    world_->raise_failure([&](const std::string& why) { return as_read_by(rank_, why) + note; });
  }
  /// Waits out peers' reads of this rank's messages that started before the failure was visible
  /// to them (recv announces a read, then checks the failure; the fences order the two sides).
  void quiesce() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (int p = 0; p < world_->size(); ++p)
      while (world_->box(rank_, p).reading.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

  std::string reported(const std::string& why) const noexcept {
    try {
      return reported_own(rank_, why);
    } catch (...) {
      return {};
    }
  }

  /// A read of a peer's message (recv's consume, which runs the user's op) this thread is inside:
  /// its world, and the read it is nested in (an op's call on another world), innermost first.
  /// fail() does not quiesce a world this thread is reading in.
  struct read_frame {
    const thread_world* world;
    const read_frame* outer;
  };
  static inline thread_local const read_frame* reads_on_this_thread = nullptr;
  /// Whether this thread is inside a read of this world's (see read_frame).
  bool reading_this_world() const noexcept {
    for (const read_frame* f = reads_on_this_thread; f; f = f->outer)
      if (f->world == world_.get()) return true;
    return false;
  }

  std::shared_ptr<thread_world> world_;
  int rank_;
  std::vector<std::uint64_t> posted_;
  std::chrono::nanoseconds spin_{0};  // poll this long before sleeping (0 when ranks outnumber cores)
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
  call_signature announced_{};  // this rank's current call (announce)
  std::uint64_t call_seq_ = 0;  // the call of the message sent or received last (0: point-to-point)
};

}  // namespace detail::transport_impl

/// Creates the communicators of an in-process world of `world_size` ranks (one per thread the
/// caller runs). Throws errc::invalid_argument if world_size < 1.
inline std::vector<communicator> make_thread_communicators(int world_size, const communicator_options& opt = {}) {
  if (world_size < 1) COLLX_THROW(errc::invalid_argument, "make_thread_communicators: world size must be >= 1");
  auto world = std::make_shared<detail::transport_impl::thread_world>(world_size);
  std::vector<communicator> comms;
  comms.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    comms.emplace_back(std::make_shared<detail::transport_impl::threads_transport>(world, r), opt);
  return comms;
}

/// Creates an in-process world of node_ids.size() ranks grouped into nodes (rank r on the node
/// named node_ids[r]), each communicator with a hierarchy attached (node_layout.hpp), so that
/// algo::hierarchical runs on threads as it does across machines.
/// @throws collx::error invalid_argument (no ranks, an empty id)
inline std::vector<communicator> make_hierarchical_thread_communicators(const std::vector<std::string>& node_ids,
                                                                        const communicator_options& opt = {}) {
  const int n = static_cast<int>(node_ids.size());
  std::vector<communicator> comms = make_thread_communicators(n, opt);
  const node_layout shape = node_layout::from_ids(node_ids, 0);
  communicator_options level = opt;  // for the node and cross-node communicators
  level.ring_order.clear();          // a world ring order means nothing to them
  std::vector<std::shared_ptr<detail::transport_impl::thread_world>> nodes, crosses;
  for (const auto& ranks : shape.ranks) nodes.push_back(std::make_shared<detail::transport_impl::thread_world>(static_cast<int>(ranks.size())));
  for (int local = 0; !shape.cross_ranks(local).empty(); ++local)
    crosses.push_back(std::make_shared<detail::transport_impl::thread_world>(static_cast<int>(shape.cross_ranks(local).size())));
  for (int r = 0; r < n; ++r) {
    node_layout lay = node_layout::from_ids(node_ids, r);
    const auto members = lay.cross_ranks(lay.local_rank);
    const int cross_rank = static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    communicator node(std::make_shared<detail::transport_impl::threads_transport>(nodes[static_cast<std::size_t>(lay.node_index)],
                                                                          lay.local_rank), level);
    communicator cross(std::make_shared<detail::transport_impl::threads_transport>(crosses[static_cast<std::size_t>(lay.local_rank)],
                                                                           cross_rank), level);
    detail::attach_levels(comms[static_cast<std::size_t>(r)], std::move(lay), std::move(node), std::move(cross));
  }
  return comms;
}

namespace detail {
/// run_threads' body; `close_when_done`: each rank's communicator is destroyed as soon as its fn
/// returns (the communicators are run_threads' own), so that peers still calling it learn at once
/// that the rank left ("rank 2 closed its communicator") instead of waiting for their timeout.
template <class F>
void run_rank_threads(std::vector<communicator>& comms, F&& fn, bool close_when_done) {
  std::mutex m;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  auto rank_thread = [&](communicator* comm) {
      // Taken before fn runs: fn may move the communicator out of *comm (then throw), and a
      // communicator moved from has no rank and cannot be failed. Weak: a communicator fn moved
      // out and destroyed must close (its peers learn at once that the rank left).
      const std::shared_ptr<transport>& at_start = comm->shared_transport();
      const int rank = at_start ? at_start->rank() : -1;
      const std::weak_ptr<transport> own = at_start;
      try {
        fn(*comm);
      } catch (...) {
        {
          std::lock_guard<std::mutex> lock(m);
          if (!first) first = std::current_exception();
        }
        std::string why = rank >= 0 ? "rank " + std::to_string(rank) + " failed" : std::string("a rank failed");
        try {
          throw;
        } catch (const std::exception& e) {
          why += ": ";
          why += e.what();
        } catch (...) {
        }
        if (comm->shared_transport()) comm->fail(errc::aborted, why);  // its hierarchy's levels too
        else if (const std::shared_ptr<transport> moved = own.lock()) moved->fail(errc::aborted, why);  // moved out, kept: its world at least
      }
      if (close_when_done) communicator closing = std::move(*comm);
  };
  // Taken before any thread starts (a rank's thread may move its communicator away): to end the
  // started ranks if a later rank's thread cannot start. Weak: a rank that returns must close its
  // transport at once, for its peers to learn that it left.
  std::vector<std::weak_ptr<transport>> transports;
  for (auto& c : comms) transports.push_back(c.shared_transport());
  for (auto& c : comms) {
    const int rank = c.rank();  // its thread has not started: nothing else touches c yet
    try {
      threads.emplace_back(rank_thread, &c);
    } catch (const std::exception& e) {  // no thread for this rank (system_error, bad_alloc): end the ranks started, then say why
      std::string why;
      try {
        why = "cannot start the thread of rank " + std::to_string(rank) + " of " + std::to_string(comms.size()) + ": " +
              e.what() + " (a thread or process limit, RLIMIT_NPROC, or no address space for its stack, ulimit -v)";
      } catch (...) {  // no memory for the words: the ranks started must still end
      }
      // Adopted, not fail(): the peers read the reason as is, not as the failure of a rank.
      for (const auto& w : transports)
        if (const std::shared_ptr<transport> t = w.lock()) t->adopt_failure(errc::aborted, why);
      for (auto& t : threads) t.join();
      COLLX_THROW(errc::system, why);
    }
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}
}  // namespace detail

/// Runs fn(communicator&) on one thread per communicator of `comms` (from make_thread_communicators
/// or make_hierarchical_thread_communicators) and joins them. If any rank throws, its
/// communicator is aborted (so the other ranks' calls fail fast instead of hanging) and the first
/// exception thrown is rethrown here after every thread ended. The communicators stay usable
/// afterwards, so a rank that returns while its peers still call it leaves them waiting until
/// their timeout (run_threads(world_size, fn) ends them at once).
/// @throws collx::error (errc::system) when a rank's thread cannot be started (a thread limit,
///   or no memory for its stack), after failing the communicators and joining the ranks started;
///   otherwise the first exception a rank's fn threw, as it was thrown.
template <class F>
void run_threads(std::vector<communicator>& comms, F&& fn) {
  detail::run_rank_threads(comms, std::forward<F>(fn), false);
}

/// Runs fn(communicator&) on `world_size` threads, one rank each, and joins them. If any rank
/// throws, the world is failed (so the other ranks' calls fail fast instead of hanging) and the
/// first exception thrown is rethrown here after every thread ended. A rank's communicator is
/// destroyed when its fn returns: peers still calling it fail at once (errc::transport, "rank R
/// closed its communicator"), as ranks over shared memory do when a process exits.
/// @throws collx::error (errc::invalid_argument) for world_size < 1 or options out of range (see
///   the communicator's constructor), before any thread starts; (errc::system) when a rank's
///   thread cannot be started, and the first exception a rank's fn threw, as the other form.
template <class F>
void run_threads(int world_size, F&& fn, const communicator_options& opt = {}) {
  std::vector<communicator> comms = make_thread_communicators(world_size, opt);
  detail::run_rank_threads(comms, std::forward<F>(fn), true);
}

}  // namespace v0
}  // namespace collx
