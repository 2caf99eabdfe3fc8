/// @file communicator.hpp
/// collx::communicator: a rank's handle on a group of ranks (rank, world size, transport, options,
/// scratch memory, call sequence numbers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/concepts.hpp>
#include <collx/debug_log.hpp>
#include <collx/detail/async_engine.hpp>
#include <collx/detail/fork_generation.hpp>
#include <collx/detail/ring_order_check.hpp>
#include <collx/detail/schedule_cache.hpp>
#include <collx/detail/streaming_store.hpp>
#include <collx/environment.hpp>
#include <collx/error.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {

/// A communicator's view of its nodes, defined in node_layout.hpp (declared here for get_hierarchy).
struct hierarchy;  // node_layout.hpp

namespace detail {
/// COLLX_TIMEOUT seconds rounded to the nearest millisecond, or 300 s when unset.
/// @throws collx::error (errc::invalid_argument) naming the variable for values that are not
/// positive seconds, or that round to less than 1 ms (a zero deadline would fail every wait).
inline std::chrono::milliseconds default_timeout() {
  return env::milliseconds_or("COLLX_TIMEOUT", std::chrono::seconds(300));
}
/// COLLX_SEGMENT_BYTES, or 8 MiB when unset.
inline std::size_t default_segment_bytes() {
  const auto v = env::get("COLLX_SEGMENT_BYTES");
  if (!v) return std::size_t{8} << 20;
  const std::size_t b = env::parse_size("COLLX_SEGMENT_BYTES", *v);
  if (b < 64) env::reject("COLLX_SEGMENT_BYTES", *v, "at least 64 bytes");
  return b;
}
/// COLLX_ALGO parsed, or no overrides when unset.
inline env::algorithm_overrides default_algorithm_overrides() {
  const auto v = env::get("COLLX_ALGO");
  return v ? env::parse_algorithms("COLLX_ALGO", *v) : env::algorithm_overrides{};
}
}  // namespace detail

/// Per-communicator settings: `collx::communicator_options o; o.timeout = 5s;`, or `{.timeout = 5s}`
/// (an aggregate whose every field has a default, so -Wextra's missing-field-initializers stays
/// quiet about the fields left out; test_smoke checks it, as for the other options structs).
struct communicator_options {
  /// Deadline of every wait inside a call; past it the call fails with errc::timeout and the
  /// communicator is failed for every rank. Default: COLLX_TIMEOUT seconds, else 300 s. At least
  /// 1 ms (the communicator's constructor throws errc::invalid_argument otherwise); longer than
  /// about 100 years (milliseconds::max(), say) means 100 years: never.
  std::chrono::milliseconds timeout = detail::default_timeout();
  /// Scratch memory bound per rank, bytes. Larger reductions run in segments of this size, so the
  /// staging memory does not grow with the message. At least 64 (as COLLX_SEGMENT_BYTES; the
  /// constructor throws errc::invalid_argument otherwise: a segment of a few bytes makes every
  /// call thousands of times slower).
  std::size_t max_segment_bytes = detail::default_segment_bytes();
  /// Reductions whose result is at least this many bytes per rank write it with streaming
  /// (non-temporal) stores, which skip reading each line first and leave the cache to data that is
  /// read again (detail/streaming_store.hpp: 1.25-1.5x on all-reduces past the cache). Default: a
  /// quarter of the last-level cache (sysfs), below which the next reader would find the results
  /// in cache. All-reduces on collx::shm_buffer memory stream their outputs when every rank's
  /// inputs and outputs together exceed four times this (the cache, by default). Results do not
  /// depend on it.
  std::size_t streaming_min_bytes = detail::default_streaming_min_bytes();
  /// Replaces algo::automatic's choice; empty: the transport's figures (transport::costs, e.g.
  /// topo/host_cost.hpp for threads and shared memory) in collx::cost_model. Must return the same
  /// answer on every rank for the same query.
  std::function<algorithm(const selection_query&)> selector = {};
  /// Per-collective algorithms for algo::automatic that win over the selector (default: COLLX_ALGO).
  env::algorithm_overrides algorithm_overrides = detail::default_algorithm_overrides();
  /// The order of algo::ring: ranks in ring order, each sending to the next (a permutation of
  /// [0, world size), the same on every rank; the communicator's constructor throws
  /// errc::invalid_argument otherwise); empty: rank order. Put ranks that share fast links
  /// next to each other, e.g. with topo::ring_in_rank_order of a ring topo::search_rings found.
  std::vector<int> ring_order = {};
};

/// One rank's view of a group of ranks. Collectives take it as their first argument and must be
/// called by every rank in the same order with matching arguments. A communicator is used by one
/// thread at a time, except abort(), which any thread may call, and the *_async forms, which any
/// thread may start; a second thread calling a blocking collective while one runs gets
/// errc::invalid_argument (call_scope).
///
/// Ordering of async calls: calls run in the order they are made, *_async or blocking: a blocking
/// call first waits until every earlier *_async call on the communicator has finished. Moving a
/// communicator waits for its pending *_async calls too.
class communicator {
 public:
  /// Takes `o`'s transport, state and progress thread after waiting for o's pending *_async calls
  /// (as drain_async; not on o's own progress thread, nor inside a call). `o` is left moved from:
  /// it may only be destroyed or assigned to.
  communicator(communicator&& o) noexcept { *this = std::move(o); }
  /// Waits for the pending *_async calls of `o` and of this communicator (as drain_async), ends
  /// this one's progress thread, lets go of its transport and takes `o`'s, as the move
  /// constructor. In a child forked from the process that created this communicator, its parts are
  /// left to the parent, as the destructor does.
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      if (forked()) leave_to_parent();  // not torn down here: the parent's rank goes on with it
      o.drain_async();
      drain_async();
      detail::async_engine::retire(engine_.exchange(o.engine_.exchange(nullptr)));  // ours drained: its thread ends
      transport_ = std::move(o.transport_);
      rank_ = o.rank_;
      size_ = o.size_;
      options_ = std::move(o.options_);
      sequence_ = o.sequence_;
      calls_digest_ = o.calls_digest_;
      scratch_ = std::move(o.scratch_);
      scratch_bytes_ = o.scratch_bytes_;
      schedules_ = std::move(o.schedules_);
      hierarchy_ = std::move(o.hierarchy_);
      linked_ = std::move(o.linked_);
      hierarchy_note_ = std::move(o.hierarchy_note_);
      failure_logged_.store(o.failure_logged_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      exceptions_at_creation_ = o.exceptions_at_creation_;
      created_in_ = o.created_in_;
    }
    return *this;
  }
  /// Finishes pending async calls, as wait() would: like MPI_Comm_free, it does not cancel them,
  /// so a call that no peer joins ends at its timeout (its error goes to the request, unread).
  /// Destroyed by an exception on its way out (the caller threw between collectives), it first
  /// fails the communicator for every rank (errc::aborted, naming this rank): the peers' next call
  /// would otherwise wait for this rank until their timeout (over MPI nothing else tells them it
  /// left).
  /// In a child forked from the process that created it, it is left as it is (its memory goes
  /// with the child): tearing it down would tell the peers this rank left.
  /// Destroyed (or assigned over) by a task on its own progress thread (submit_async), it cannot
  /// wait for the calls queued after that task: they fail with invalid_argument without running,
  /// and the thread ends when the task returns.
  ~communicator() {
    if (forked()) {
      leave_to_parent();
      return;
    }
    if (transport_ && std::uncaught_exceptions() > exceptions_at_creation_)
      fail(errc::aborted, "it left its communicator while an exception was propagating out of its code; the job cannot continue");
    detail::async_engine::retire(engine_.exchange(nullptr));  // while the rest still exists
  }

  /// Wraps a transport (see transport/threads.hpp for ready-made ones).
  /// @throws collx::error (errc::invalid_argument) for a null transport, or options out of range:
  ///   a ring_order that is not a permutation of the ranks, a timeout under 1 ms,
  ///   max_segment_bytes under 64.
  explicit communicator(std::shared_ptr<transport> t, communicator_options opt = {})
      : transport_(std::move(t)), options_(std::move(opt)) {
    if (!transport_) COLLX_THROW(errc::invalid_argument, "communicator: null transport");
    rank_ = transport_->rank();
    size_ = transport_->size();
    env::warn_unknown_variables_once(transport_->rank() == 0);  // once per job, not once per rank
    if (!options_.ring_order.empty())
      if (const std::string why = detail::ring_order_problem(options_.ring_order, size()); !why.empty())
        COLLX_THROW(errc::invalid_argument, "communicator_options::ring_order: " + why);
    if (options_.timeout < std::chrono::milliseconds(1))
      COLLX_THROW(errc::invalid_argument, "communicator_options::timeout is " + std::to_string(options_.timeout.count()) +
                                              " ms; it must be at least 1 ms (a zero deadline fails every wait)");
    if (options_.max_segment_bytes < 64)
      COLLX_THROW(errc::invalid_argument, "communicator_options::max_segment_bytes is " +
                                              std::to_string(options_.max_segment_bytes) + "; it must be at least 64 bytes");
    options_.timeout = std::min(options_.timeout, detail::longest_wait);
    transport_->set_timeout(options_.timeout);
    detail::read_log_environment();  // a bad COLLX_DEBUG or COLLX_DEBUG_FILE fails here, not silently
    detail::log_process_once();
    if (log_enabled(log_level::info)) log_message(log_level::info, describe());
  }

  /// This rank, in [0, size()).
  /// @throws collx::error (errc::invalid_argument) on a communicator moved from, or used in a
  ///         child fork() made of the process that created it, as every call that takes it does
  ///         (it may only be destroyed or assigned to).
  int rank() const {
    (void)live();
    return rank_;
  }
  /// Number of ranks (world size). @throws as rank().
  int size() const {
    (void)live();
    return size_;
  }
  /// The settings.
  const communicator_options& options() const noexcept { return options_; }
  /// The transport underneath. @throws as rank().
  transport& get_transport() { return live(); }

  /// Fails the communicator for every rank: waiters wake within milliseconds with errc::aborted and
  /// every later call on it fails at once. Safe from any thread; never throws.
  /// With a hierarchy attached, its node and cross-node communicators are aborted too.
  void abort() noexcept {
    if (transport_ && !forked()) fail(errc::aborted, "communicator aborted by rank " + std::to_string(rank()));
  }

  /// Fails the communicator for every rank with `code` and `why` (what their calls then throw), and
  /// with it the node and cross-node communicators of an attached hierarchy, at once: a peer
  /// waiting on one of those learns the reason there, before it can see this rank leave. Safe from
  /// any thread; never throws; the first failure's reason is kept.
  void fail(errc code, const std::string& why) noexcept {
    if (!transport_ || forked()) return;  // moved from, or a fork's copy: not this process's to fail
    log_failure(code, why);
    fail_with_levels(*transport_, linked_, transport_->rank(), code, why);
  }

  /// COLLX_DEBUG=warn's line for this communicator's failure as this rank sees it: "rank 1/4
  /// communicator failed (<code>): <why>"; only the first on each communicator (later ones repeat
  /// it, as the calls that then throw do). fail() and a call that finds the communicator failed
  /// call it. Any thread; never throws.
  void log_failure(errc code, const std::string& why) noexcept {
    if (!log_enabled(log_level::warn) || failure_logged_.exchange(true)) return;
    try {
      log_message(log_level::warn, "rank " + std::to_string(rank_) + "/" + std::to_string(size_) +
                                       " communicator failed (" + make_error_code(code).message() + "): " + why +
                                       log_where());
    } catch (...) {  // no memory for the line
    }
  }

  /// For log lines of a communicator that is a group of another (collx::split, a level of a
  /// hierarchy): " (split group (color 1) of world ranks [1, 3])"; empty for others.
  std::string log_where() const {
    if (!transport_ || transport_->level().empty()) return {};
    std::string s = " (" + transport_->level() + " of world ranks [";
    const std::vector<int>& w = transport_->level_world_ranks();
    for (std::size_t i = 0; i < w.size(); ++i) s.append(i ? ", " : "").append(std::to_string(w[i]));
    return s + "])";
  }

  /// The node-local and cross-node communicators algo::hierarchical runs on (node_layout.hpp), or
  /// null when none is attached. A hierarchical *_async call on this communicator makes its level
  /// calls on them from this communicator's progress thread, and a blocking call of your own on one
  /// of them is not ordered after such a call: it may come between the call's level calls (a
  /// mismatch) or meet one running (invalid_argument, "two threads"). Wait for the requests first,
  /// or split a communicator of your own.
  hierarchy* get_hierarchy() const noexcept { return hierarchy_.get(); }
  /// Attaches a hierarchy; `parts` are its communicators' transports, failed with this one on
  /// abort(); `note` says what it changes, for describe(). Use collx::attach_hierarchy
  /// (hierarchy.hpp) rather than this.
  void set_hierarchy(std::shared_ptr<hierarchy> h, std::vector<std::shared_ptr<transport>> parts,
                     std::string note = {}) noexcept {
    hierarchy_ = std::move(h);
    linked_ = std::move(parts);
    hierarchy_note_ = std::move(note);
  }
  /// The transport, shared (for linking communicators).
  const std::shared_ptr<transport>& shared_transport() const noexcept { return transport_; }

  /// The algorithm algo::automatic resolves to for `q`: COLLX_ALGO's choice for the collective, else
  /// the options' selector, else the cost model; ring for a non-commutative op becomes direct, and
  /// tree for all_to_all direct.
  /// @throws collx::error (errc::invalid_argument) when the selector returns something other than
  ///   ring, tree or direct; as rank() on a moved-from communicator.
  algorithm select(const selection_query& q) const {
    const auto forced = options_.algorithm_overrides.for_collective(q.coll);
    algorithm a = forced ? *forced : options_.selector ? options_.selector(q) : live().costs().choose(q);
    if (a != algorithm::ring && a != algorithm::tree && a != algorithm::direct)
      COLLX_THROW(errc::invalid_argument, "rank " + std::to_string(rank()) + "/" + std::to_string(size()) + " " +
                                              std::string(collective_name(q.coll)) +
                                              ": communicator_options::selector returned algorithm " +
                                              std::to_string(static_cast<int>(a)) + ", not ring, tree or direct");
    if (a == algorithm::ring && !q.commutative) a = algorithm::direct;
    if (a == algorithm::tree && q.coll == collective::all_to_all) a = algorithm::direct;
    return a;
  }

  /// This communicator in one line, as COLLX_DEBUG=info prints it when it is made: "rank 0/4
  /// communicator: transport shm, timeout 300 s, segments of 8 MiB; algo::automatic: allreduce
  /// direct, ring from 36000 B, direct from 65537 B; ...": what algo::automatic picks for each
  /// collective by message size (bytes as selection_query counts them, sampled at the powers of two
  /// from 1 B to 1 GiB, each change located to the byte; commutative ops: a non-commutative op
  /// runs direct where it says ring), or that the options' selector decides; with a hierarchy
  /// attached, what runs on its levels instead; and log_where(). @throws as rank().
  std::string describe() const {
    std::string s = "rank " + std::to_string(rank()) + "/" + std::to_string(size()) + " communicator: transport " +
                    std::string(live().name()) + ", timeout ";
    const auto ms = options_.timeout.count();
    s.append(std::to_string(ms % 1000 == 0 ? ms / 1000 : ms)).append(ms % 1000 == 0 ? " s" : " ms");
    s.append(", segments of ").append(detail::bytes_text(options_.max_segment_bytes));
    if (!options_.ring_order.empty()) {
      s += ", ring order";
      for (int r : options_.ring_order) s.append(" ").append(std::to_string(r));  // (not " " + string: g++ 12's -Wrestrict)
    }
    s += hierarchy_ ? "; algo::automatic, flat:" : "; algo::automatic:";
    if (options_.selector) s += " the options' selector";
    bool first = true;
    for (collective c : {collective::allreduce, collective::reduce_scatter, collective::all_gather,
                         collective::broadcast, collective::reduce, collective::all_to_all}) {
      if (options_.selector) break;
      s.append(first ? " " : "; ").append(collective_name(c));
      first = false;
      std::optional<algorithm> last;
      auto choice = [&](std::size_t b) { return select(selection_query{c, size(), b, true}); };
      for (std::size_t b = 1; b <= (std::size_t{1} << 30); b *= 2) {
        const algorithm a = choice(b);
        if (last && a == *last) continue;
        s.append(last ? ", " : " ").append(algorithm_name(a));
        if (last) {
          // The exact size where the choice changes, between the powers of two sampled (a one-shot
          // limit or a cost crossing lies anywhere): choice(from - 1) != a == choice(from).
          std::size_t below = b / 2, from = b;
          while (from - below > 1) {
            const std::size_t mid = below + (from - below) / 2;
            (choice(mid) == a ? from : below) = mid;
          }
          const std::string text = detail::bytes_text(from);
          s.append(" from ").append(text.find('.') == std::string::npos ? text : std::to_string(from) + " B");
        }
        last = a;
      }
    }
    if (hierarchy_) s.append("; hierarchy: ").append(hierarchy_note_);
    return s + log_where();
  }

  /// select() for the call this thread is in (communicator::call_scope held): the cost model's
  /// answer is remembered for the last query; a selector of the options and COLLX_ALGO are asked
  /// every time, as select() asks them.
  algorithm select_in_call(const selection_query& q) {
    if (options_.selector || options_.algorithm_overrides.for_collective(q.coll)) return select(q);
    return schedules_.choice(q, [this](const selection_query& s) { return select(s); });
  }

  /// Runs fn on this communicator's progress thread after every earlier call; the request completes
  /// when fn returns (with its exception, if any). Several threads may submit at once (the calls
  /// then run in the order their submissions took the queue).
  /// @throws collx::error invalid_argument, on the calling rank only (no communicator fails), when
  ///   the transport or a level of an attached hierarchy cannot run calls on another thread
  ///   (transport::async_refusal: collx::mpi below MPI_THREAD_MULTIPLE); fn is not run.
  ///   errc::system, on the calling rank only, when the progress thread cannot be started (its
  ///   first async call); fn is not run.
  request submit_async(std::function<void()> fn) {
    (void)live();
    std::string refusal = transport_->async_refusal();
    for (std::size_t i = 0; i < linked_.size() && refusal.empty(); ++i) refusal = linked_[i]->async_refusal();
    if (!refusal.empty()) COLLX_THROW(errc::invalid_argument, "collx: an async call on this communicator: " + refusal);
    detail::async_engine* e = engine_.load(std::memory_order_acquire);
    if (!e) {  // the first async call starts the thread; two threads racing here keep one
      std::unique_ptr<detail::async_engine> fresh;
      try {
        fresh = std::make_unique<detail::async_engine>();
      } catch (const std::system_error& x) {  // nothing was queued: this rank's call fails, no communicator
        COLLX_THROW(errc::system, "rank " + std::to_string(rank()) +
                                      ": collx: cannot start the communicator's progress thread for async calls: " +
                                      x.what() + " (a thread limit, RLIMIT_NPROC, or no memory for its stack)");
      }
      if (engine_.compare_exchange_strong(e, fresh.get(), std::memory_order_acq_rel)) e = fresh.release();
    }
    std::shared_ptr<detail::request_state> st = e->submit(std::move(fn), &busy_);
    // What a request dropped by an exception does (request::~request): fail(), as this
    // communicator's own destructor would; weak, as the request may outlive the communicator.
    std::vector<std::weak_ptr<transport>> levels(linked_.begin(), linked_.end());
    st->abandon = [world = std::weak_ptr<transport>(transport_), levels = std::move(levels)] {
      const auto t = world.lock();
      if (!t) return;
      std::vector<std::shared_ptr<transport>> alive;
      for (const auto& l : levels)
        if (auto p = l.lock()) alive.push_back(std::move(p));
      fail_with_levels(*t, alive, t->rank(), errc::aborted,
                       "it dropped a pending async call's request while an exception was propagating out of its code; "
                       "the job cannot continue");
    };
    return request(std::move(st));
  }

  /// Waits until the progress thread's queue is empty: every *_async call made so far has finished
  /// (and any another thread started meanwhile). A no-op on its own progress thread, and inside a call
  /// (a call made of calls, as split is): async calls started meanwhile come after the whole call
  /// and wait for it (call_scope), so waiting for them here would wait for itself. On another
  /// communicator's progress thread it does not wait where that would close a cycle of progress
  /// threads waiting for each other's queues (async_engine::drain_from).
  void drain_async() noexcept {
    detail::async_engine* e = engine_.load(std::memory_order_acquire);
    if (!e || detail::running_engine == e || forked() || busy_.load(std::memory_order_acquire) == std::this_thread::get_id())
      return;
    if (detail::running_engine) (void)e->drain_from(detail::running_engine);  // a task of another communicator
    else e->drain();
  }

  /// Marks the calling thread as the one inside a call on this communicator until it ends (nested
  /// calls from the same thread are fine). The progress thread and the user's threads take turns:
  /// an *_async call that reaches the front of the queue while another thread's blocking call runs
  /// waits for it to end, and a blocking call waits for an *_async call already running (one
  /// started after the blocking call's drain_async). A second user thread entering while another
  /// user thread's call runs gets errc::invalid_argument instead of interleaving its messages with
  /// the first one's (the order of two unsynchronized calls could differ between ranks).
  class call_scope {
   public:
    /// Enters a call on `c` (nothing in a child forked from the process that created it).
    /// @throws collx::error (errc::invalid_argument) for a call nested inside a collective running
    ///   on `c`, a second user thread's call while another runs, or a call made inside a call on
    ///   another communicator while another thread's call runs on `c`; otherwise waits for the
    ///   running call to end.
    explicit call_scope(const communicator& c) : c_(&c) {
      // A fork's copy: the call fails in get_transport; a holder copied from the parent never leaves.
      if (c.forked()) return;
      const std::thread::id me = std::this_thread::get_id();
      for (;;) {
        std::thread::id holder{};
        if (c.busy_.compare_exchange_strong(holder, me, std::memory_order_acquire)) {
          owner_ = true;
          ++calls_held;
          return;
        }
        if (holder == me) {  // nested: a call made of calls (split), unless a collective runs
          if (!c.running_.empty())
            COLLX_THROW(errc::invalid_argument,
                        "rank " + std::to_string(c.rank()) + ": a call on this communicator was made inside its own " +
                            std::string(c.running_) + ", which is still running (from a reduction op's or selector's "
                            "code?); its messages would come between that call's and the ranks' calls would no longer "
                            "pair up. Make calls outside the op");
          return;
        }
        const detail::async_engine* e = c.engine_.load(std::memory_order_acquire);
        if (!(e && (detail::running_engine == e || holder == e->thread_id())))
          COLLX_THROW(errc::invalid_argument,
                      "rank " + std::to_string(c.rank()) + ": two threads made calls (collectives or point-to-point) on one communicator at the "
                      "same time; a communicator serves one thread at a time (their messages would interleave). Give "
                      "each thread its own communicator, or use the *_async forms, which run in the order started "
                      "(after a blocking call that is running)");
        // A thread inside a call on another communicator must not wait: the holder's call could be
        // waiting for that one (calls of two communicators nested in each other's ops), for ever.
        if (calls_held > 0)
          COLLX_THROW(errc::invalid_argument,
                      "rank " + std::to_string(c.rank()) + ": a call on this communicator was made inside a call on "
                      "another one (a reduction op's code, say) while another thread's call runs here; waiting for it "
                      "could wait for ever (the two calls may wait for each other). Make such calls outside");
        c.busy_.wait(holder, std::memory_order_acquire);  // its call ends: take a turn
      }
    }
    /// Ends the call, if this scope entered it (not a nested one): the next thread may enter.
    ~call_scope() {
      if (owner_) {
        --calls_held;
        c_->busy_.store(std::thread::id{}, std::memory_order_release);
        c_->busy_.notify_all();
      }
    }
    /// Not copyable: it holds the communicator's turn.
    call_scope(const call_scope&) = delete;
    /// Not copyable: it holds the communicator's turn.
    call_scope& operator=(const call_scope&) = delete;

   private:
    /// Calls this thread is inside, on any communicator (scopes it owns).
    static inline thread_local int calls_held = 0;
    const communicator* c_;
    bool owner_ = false;
  };

  /// Marks a collective as running on this communicator (detail::run_collective, inside its
  /// call_scope) until it ends: call_scope then refuses calls nested in it, which could only come
  /// from the user's code that the collective runs (a reduction op, a selector).
  class running_scope {
   public:
    /// Marks `coll` as running on `c`, remembering what ran before (a nested scope).
    running_scope(communicator& c, collective coll) noexcept : c_(&c), saved_(c.running_) {
      c.running_ = collective_name(coll);
    }
    /// Restores what ran before (nothing, outside a nested scope).
    ~running_scope() { c_->running_ = saved_; }
    /// Not copyable: it restores the communicator's state once.
    running_scope(const running_scope&) = delete;
    /// Not copyable: it restores the communicator's state once.
    running_scope& operator=(const running_scope&) = delete;

   private:
    communicator* c_;
    std::string_view saved_;
  };

  /// Numbers the next collective call and records it: sets sig.seq (this communicator's call
  /// sequence number; first call: 1) and sig.earlier (the digest of the calls before it), then
  /// folds sig into the digest. Every other field of sig must be set already.
  void record_call(call_signature& sig) noexcept {
    sig.seq = ++sequence_;
    sig.earlier = calls_digest_;
    calls_digest_ = history_digest(calls_digest_, sig);
  }
  /// How many collective calls this communicator has numbered (record_call), this rank's count.
  std::uint64_t calls_made() const noexcept { return sequence_; }

  /// The last schedule this communicator built, for the next call with the same parameters.
  detail::schedule_cache& schedules() noexcept { return schedules_; }

  /// Scratch memory of at least `bytes` bytes, aligned for any element (max_element_alignment),
  /// owned by the communicator.
  std::byte* scratch(std::size_t bytes) {
    if (bytes > scratch_bytes_) {
      scratch_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{max_element_alignment})));
      scratch_bytes_ = bytes;
    }
    return scratch_.get();
  }

 private:
  /// fail()'s body: `world` (this rank `rank`) fails with `why`; each level adopts it as the
  /// world's peers read it ("rank R failed: why"; the levels number their ranks otherwise).
  static void fail_with_levels(transport& world, const std::vector<std::shared_ptr<transport>>& levels, int rank,
                               errc code, const std::string& why) noexcept {
    world.fail(code, why);
    if (levels.empty()) return;
    std::string text;
    try {
      text = reported_by(rank, why);
    } catch (...) {
    }
    for (const auto& t : levels) t->adopt_failure(code, text);
  }

  /// The transport, after checking that this communicator may be used here. Every call checks,
  /// several times: the check inlines to two comparisons, and the errors are built out of line.
  transport& live() const {
    if (!transport_ || forked()) [[unlikely]]
      unusable();
    return *transport_;
  }
  [[noreturn, gnu::noinline, gnu::cold]] void unusable() const {
    if (!transport_)
      COLLX_THROW(errc::invalid_argument, "collx::communicator used after it was moved from (a moved-from communicator "
                                          "may only be destroyed or assigned to)");
    COLLX_THROW(errc::invalid_argument, "collx::communicator of rank " + std::to_string(rank_) +
                                            " used in a child that fork() made of the process that created it; it "
                                            "belongs to that process (the child would take part as the rank). Create "
                                            "communicators in the child, after fork, under a job id of its own");
  }
  /// True in a child fork() made of the process that created this communicator. (created_in_'s
  /// initialiser called fork_generation(), which registers the counting: the count can be read
  /// directly.)
  bool forked() const noexcept { return created_in_ != detail::forks_seen.load(std::memory_order_relaxed); }
  /// In a fork's child: lets go of the parent's transport, hierarchy and progress thread without
  /// tearing them down (which would tell the peers this rank left, or join a thread that is not
  /// in this process). Leaked on purpose: the memory goes with the child.
  void leave_to_parent() noexcept {
    (void)engine_.exchange(nullptr);
    new std::shared_ptr<transport>(std::move(transport_));
    new std::shared_ptr<hierarchy>(std::move(hierarchy_));
    new std::vector<std::shared_ptr<transport>>(std::move(linked_));
  }
  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{max_element_alignment}); }
  };
  std::shared_ptr<transport> transport_;
  int rank_ = 0, size_ = 0;  // transport_'s (fixed): rank() and size() need not ask it
  communicator_options options_;
  std::uint64_t sequence_ = 0;
  std::uint64_t calls_digest_ = 0;  // history_digest of the calls so far
  std::unique_ptr<std::byte, aligned_delete> scratch_;
  std::size_t scratch_bytes_ = 0;
  detail::schedule_cache schedules_;
  std::shared_ptr<hierarchy> hierarchy_;
  std::vector<std::shared_ptr<transport>> linked_;
  std::string hierarchy_note_;                // set_hierarchy's, for describe()
  std::atomic<bool> failure_logged_{false};  // log_failure's line was written
  mutable std::atomic<std::thread::id> busy_{};  // the thread inside a call (call_scope), or none
  std::string_view running_;                     // the collective the busy thread runs (running_scope), or empty
  int exceptions_at_creation_ = std::uncaught_exceptions();  // more at destruction: destroyed by a throw
  unsigned created_in_ = detail::fork_generation();  ///< this process, as fork_generation() tells it
  std::atomic<detail::async_engine*> engine_{nullptr};  // owned: made at the first async call, deleted first by ~communicator
};

}  // namespace v0
}  // namespace collx
