/// @file detail/async_engine.hpp
/// The progress thread behind the *_async calls: one per communicator, started on first use, running
/// queued calls in order so that communication overlaps the caller's computation without polling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <collx/detail/fork_generation.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
class async_engine;

/// Completion state shared by a request and the task it stands for.
struct request_state {
  const async_engine* engine = nullptr;  ///< the progress thread that runs the task
  /// The communicator's busy thread (communicator::call_scope): a thread inside a call on it must
  /// not wait for the task, which runs after that call.
  const std::atomic<std::thread::id>* busy = nullptr;
  /// True if the calling thread would wait for itself: it is the progress thread that runs the
  /// task, or inside a call on the task's communicator.
  bool waiter_blocks_task() const noexcept;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  /// Fails the call's communicator for every rank (set by communicator::submit_async; only the
  /// request's owner calls it): a request dropped by an exception must not wait for peers that may
  /// never join the call, as the communicator's destructor does not.
  std::function<void()> abandon;
};

/// The engine whose progress thread this is, or null on any other thread: a call a progress thread
/// runs must not wait for that engine's own queue (it would wait for itself), but waits for other
/// communicators' queues as any thread does.
inline thread_local const async_engine* running_engine = nullptr;

inline bool request_state::waiter_blocks_task() const noexcept {
  return running_engine == engine || (busy && busy->load(std::memory_order_acquire) == std::this_thread::get_id());
}

/// What each progress thread that waits for another engine waits for: that engine's queue to
/// empty (drain, async_engine::drain_from) or a call it runs (request::wait on a progress thread).
/// A wait that would close a cycle could never end (async_engine::enter_wait).
struct engine_waits {
  struct edge {
    const async_engine* target;
    bool drain;
  };
  std::mutex m;
  std::unordered_map<const async_engine*, edge> on;
};
inline engine_waits& engine_wait_graph() {
  static engine_waits g;
  return g;
}

/// Runs tasks on one thread, in submission order.
class async_engine {
 public:
  // (self_delete_ is written and read on the progress thread only: retire from a task.)
  async_engine()
      : thread_([this] {
          run();
          if (self_delete_) delete this;
        }) {}
  ~async_engine() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();  // (not joinable: retired from its own thread, which deletes it)
  }

  /// Ends engine `e` (null: nothing): from any other thread, runs what is queued and joins its
  /// thread (~async_engine). From a task on e's own thread (one that destroys, or assigns over,
  /// the communicator owning e), the thread cannot join itself: the tasks queued after the running
  /// one fail with invalid_argument (they would run on a communicator that is gone), and the thread
  /// deletes e when the running task has returned.
  static void retire(async_engine* e) noexcept {
    if (!e) return;
    if (running_engine != e) {
      delete e;
      return;
    }
    std::deque<task> left;
    {
      std::lock_guard<std::mutex> lock(e->m_);
      e->stop_ = true;
      left.swap(e->queue_);
      e->pending_ -= left.size();
    }
    // The states point at the communicator's busy thread, which is about to go: a waiter reads it
    // under the state's lock, so it reads it before this, or reads nothing.
    if (e->running_state_) {
      std::lock_guard<std::mutex> sl(e->running_state_->m);
      e->running_state_->busy = nullptr;
    }
    for (task& t : left) {
      {
        std::lock_guard<std::mutex> sl(t.state->m);
        t.state->busy = nullptr;
        try {
          t.state->error = std::make_exception_ptr(
              error(errc::invalid_argument, "collx: this async call was queued on a communicator that a task on its "
                                            "progress thread destroyed (or assigned over) before the call ran; it did not run"));
        } catch (...) {  // no memory for the message (retire is noexcept): the call still fails
          t.state->error = std::current_exception();
        }
        t.state->done = true;
      }
      t.state->cv.notify_all();
    }
    e->self_delete_ = true;
    e->thread_.detach();
  }
  async_engine(const async_engine&) = delete;
  async_engine& operator=(const async_engine&) = delete;

  /// Queues fn; the returned state completes when it has run. `busy`: the communicator's busy
  /// thread (request_state::busy).
  std::shared_ptr<request_state> submit(std::function<void()> fn, const std::atomic<std::thread::id>* busy = nullptr) {
    auto st = std::make_shared<request_state>();
    st->engine = this;
    st->busy = busy;
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back({std::move(fn), st});
      ++pending_;
    }
    cv_.notify_all();
    return st;
  }

  /// The progress thread's id.
  std::thread::id thread_id() const noexcept { return thread_.get_id(); }

  /// Blocks until every task submitted so far has finished.
  void drain() {
    std::unique_lock<std::mutex> lock(m_);
    idle_cv_.wait(lock, [&] { return pending_ == 0; });
  }

  /// drain() on the progress thread of engine `waiter` (a task of one communicator calling on
  /// another): waits as drain() does, unless this engine's thread already waits, directly or
  /// through others, for waiter's queue (a task on A's thread calling on B while one on B's calls on
  /// A): those waits would never end. Then nobody in that cycle waits: the threads already waiting
  /// are released and this one returns false at once. Their calls then run as they come, each
  /// taking its turn on its communicator (communicator::call_scope), the order the user's cycle
  /// left undefined. Returns whether it waited until the queue was empty.
  bool drain_from(const async_engine* waiter) {
    std::size_t released = 0;
    if (!enter_wait(waiter, this, true, released)) return false;
    bool emptied = false;
    {
      std::unique_lock<std::mutex> lock(m_);
      idle_cv_.wait(lock, [&] { return pending_ == 0 || waiter->drain_released_.load(std::memory_order_relaxed); });
      emptied = pending_ == 0;
    }
    leave_wait(waiter);
    return emptied;
  }

  /// Records that `waiter`'s progress thread is about to wait for `target` (its queue to empty if
  /// `drain`, else a call it runs) and returns true; or, if `target`'s thread already waits,
  /// directly or through others, for `waiter`'s, records nothing, releases the drain waits of that
  /// cycle (`released`: how many) and returns false: the caller must not wait then, unless
  /// something was released (the threads released go on, and the cycle with them).
  static bool enter_wait(const async_engine* waiter, const async_engine* target, bool drain, std::size_t& released) {
    engine_waits& g = engine_wait_graph();
    std::lock_guard<std::mutex> lock(g.m);
    std::vector<const async_engine*> path;  // the waiting engines from target on
    std::size_t steps = 0;  // no cycle stays in the graph, so the walk ends; bounded anyway
    for (const async_engine* e = target; e && steps <= g.on.size(); ++steps) {
      if (e == waiter) {
        for (const async_engine* w : path) {
          const engine_waits::edge& d = g.on.at(w);
          if (d.drain) w->release_drain(*d.target), ++released;
        }
        return false;
      }
      const auto it = g.on.find(e);
      if (it == g.on.end()) break;
      path.push_back(e);
      e = it->second.target;
    }
    waiter->drain_released_.store(false, std::memory_order_relaxed);
    g.on[waiter] = {target, drain};
    return true;
  }
  /// Ends what enter_wait recorded for `waiter`.
  static void leave_wait(const async_engine* waiter) {
    engine_waits& g = engine_wait_graph();
    std::lock_guard<std::mutex> lock(g.m);
    g.on.erase(waiter);
  }

 private:
  struct task {
    std::function<void()> fn;
    std::shared_ptr<request_state> state;
  };
  void run() {
    running_engine = this;
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      task t = std::move(queue_.front());
      queue_.pop_front();
      running_state_ = t.state;
      lock.unlock();
      std::exception_ptr err;
      try {
        t.fn();
      } catch (...) {
        err = std::current_exception();
      }
      running_state_.reset();
      {
        // Moved, not copied: the waiter takes the only reference, so the exception is freed on its
        // thread (libstdc++'s exception_ptr counts in code TSan does not see).
        std::lock_guard<std::mutex> sl(t.state->m);
        t.state->error = std::move(err);
        t.state->done = true;
      }
      t.state->cv.notify_all();
      t.fn = nullptr;
      lock.lock();
      if (--pending_ == 0) idle_cv_.notify_all();
    }
  }

  /// Ends this engine's thread's drain_from wait on `target`'s queue (a cycle was found).
  void release_drain(const async_engine& target) const {
    std::lock_guard<std::mutex> lock(target.m_);  // the waiter tests the flag under this lock
    drain_released_.store(true, std::memory_order_relaxed);
    target.idle_cv_.notify_all();
  }

  mutable std::mutex m_;
  mutable std::condition_variable idle_cv_;
  std::condition_variable cv_;
  mutable std::atomic<bool> drain_released_{false};  ///< set by release_drain, read by drain_from
  std::deque<task> queue_;
  std::size_t pending_ = 0;
  bool stop_ = false;
  bool self_delete_ = false;  ///< retire() from a task: the thread deletes the engine at its end
  std::shared_ptr<request_state> running_state_;  ///< the running task's (progress thread only)
  std::thread thread_;
};
}  // namespace detail

/// A collective started by an *_async call. Its buffers must stay alive and untouched (send: not
/// written; recv: not read or written) until wait() returns or test() returns true. Move-only, as
/// std::future: the call's outcome, an error included, is delivered once.
/// [[nodiscard]]: a request dropped unread is a bug. Destroying (or assigning over) a request whose
/// call has not been waited for waits for it, as std::async's future does, so that the call never
/// runs on buffers its caller has freed; if that call failed, the error, which nobody can catch
/// there, is written to stderr (a failed collective fails its communicator too: the next call
/// throws). Destroyed by an exception on its way out, it first fails the communicator for every
/// rank (errc::aborted), as the communicator's destructor does, so that the wait ends at once
/// instead of at the timeout. On its own communicator's progress thread (a task of submit_async
/// owning a request of the same communicator) it does not wait, which would wait for itself, and
/// says so on stderr.
class [[nodiscard]] request {
 public:
  /// No call: wait() and test() return at once.
  request() = default;
  /// Takes `other`'s call; `other` is left without one.
  request(request&&) noexcept = default;
  /// First finishes this request's call as the destructor does (waits for it, see the class), then
  /// takes `other`'s.
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      finish_unobserved();
      state_ = std::move(other.state_);
      created_in_ = other.created_in_;
      exceptions_at_creation_ = other.exceptions_at_creation_;
    }
    return *this;
  }
  /// Not copyable: the call's outcome is delivered once.
  request(const request&) = delete;
  /// Not copyable: the call's outcome is delivered once.
  request& operator=(const request&) = delete;
  /// Waits for a call not waited for, as the class says (errors go to stderr; never throws).
  ~request() { finish_unobserved(); }
  /// Blocks until the call finished; rethrows its collx::error if it failed. A default-constructed
  /// or already waited request returns at once.
  /// @throws collx::error (errc::invalid_argument) in a child fork() made of the process that
  ///         started the call: the call runs there, on a thread the child does not have; and, while
  ///         the call has not run, on the progress thread that runs it (a task of submit_async
  ///         waiting for a later call of its own communicator) or inside a call on its
  ///         communicator (a reduction op's or a selector's code): it would wait for itself.
  void wait() {
    if (!state_) return;
    check_process();
    std::unique_lock<std::mutex> lock(state_->m);
    if (!state_->done && state_->waiter_blocks_task())
      COLLX_THROW(errc::invalid_argument,
                  std::string("collx::request waited on ") +
                      (detail::running_engine == state_->engine
                           ? "from the progress thread that runs its call (a task of submit_async waiting for a later "
                             "*_async call of its own communicator): the call runs after this task"
                           : "inside a call on its own communicator (in a reduction op or a selector, say): the call "
                             "runs after that call") +
                      ", so the wait would never end; wait for it outside");
    lock.unlock();
    const progress_wait recorded = enter_progress_wait();
    if (recorded == progress_wait::never_ends)
      COLLX_THROW(errc::invalid_argument,
                  "collx::request waited on from a progress thread whose own queue that call waits for, through "
                  "other communicators' tasks (tasks of two communicators waiting for each other's calls): the wait "
                  "would never end; wait for it outside the tasks");
    lock.lock();
    state_->cv.wait(lock, [&] { return state_->done; });
    auto err = std::move(state_->error);
    lock.unlock();
    if (recorded == progress_wait::recorded) detail::async_engine::leave_wait(detail::running_engine);
    state_.reset();
    if (err) std::rethrow_exception(err);
  }
  /// True if the call finished (then like wait(): rethrows its error, once).
  bool test() {
    if (!state_) return true;
    check_process();
    {
      std::lock_guard<std::mutex> lock(state_->m);
      if (!state_->done) return false;
    }
    wait();
    return true;
  }

 private:
  friend class communicator;  // its *_async forms are the only makers of a request with a call
  /// The request of a started call.
  explicit request(std::shared_ptr<detail::request_state> s) : state_(std::move(s)) {}
  enum class progress_wait { none, recorded, never_ends };
  /// On a progress thread waiting for another engine's call: records the wait in the engines' wait
  /// graph (recorded: leave_wait after it), or finds that it would close a cycle nothing breaks
  /// (never_ends); else none.
  progress_wait enter_progress_wait() const {
    if (!detail::running_engine || task_done()) return progress_wait::none;
    std::size_t released = 0;
    if (detail::async_engine::enter_wait(detail::running_engine, state_->engine, false, released))
      return progress_wait::recorded;
    return released ? progress_wait::none : progress_wait::never_ends;
  }
  bool task_done() const {
    std::lock_guard<std::mutex> lock(state_->m);
    return state_->done;
  }
  /// The call has not finished and this thread would wait for itself (done and the busy thread
  /// read under one lock: once the call is done, its communicator may be gone).
  bool blocks_unless_done() const {
    std::lock_guard<std::mutex> lock(state_->m);
    return !state_->done && state_->waiter_blocks_task();
  }
  void check_process() const {
    if (created_in_ != detail::fork_generation())
      COLLX_THROW(errc::invalid_argument, "collx::request waited on in a child that fork() made of the process that "
                                          "started the call; the call runs in that process, not here");
  }
  /// The destructor's wait: the call has to end before its buffers may go; its error, unread by
  /// anyone, goes to stderr. In a fork() child the call runs in the parent: nothing to wait for.
  void finish_unobserved() noexcept {
    if (state_ && created_in_ == detail::fork_generation() && detail::running_engine == state_->engine && !task_done()) {
      std::fprintf(stderr, "collx: a request destroyed on the progress thread that runs its call is not waited for (it "
                           "would wait for itself)\n");
    } else if (state_ && created_in_ == detail::fork_generation() && blocks_unless_done()) {
      // Inside a call on its communicator: the call runs after this one, on buffers that may be gone
      // by then. Fail the communicator instead, so that it throws before touching them.
      if (state_->abandon) state_->abandon();
      std::fprintf(stderr, "collx: a request destroyed inside a call on its own communicator is not waited for (it "
                           "would wait for itself); the communicator is failed instead\n");
    } else if (state_ && created_in_ == detail::fork_generation()) {
      if (std::uncaught_exceptions() > exceptions_at_creation_ && state_->abandon) {
        bool done = false;
        {
          std::lock_guard<std::mutex> lock(state_->m);
          done = state_->done;
        }
        if (!done) state_->abandon();
      }
      progress_wait recorded = progress_wait::none;
      try {
        recorded = enter_progress_wait();
      } catch (...) {  // no memory to record the wait: wait unrecorded
      }
      if (recorded == progress_wait::never_ends) {  // as inside a call: fail it rather than wait for ever
        if (state_->abandon) state_->abandon();
        std::fprintf(stderr, "collx: a request destroyed on a progress thread whose queue its call waits for (tasks of two "
                             "communicators waiting for each other) is not waited for; the communicator is failed instead\n");
        state_.reset();
        return;
      }
      std::exception_ptr err;
      {
        std::unique_lock<std::mutex> lock(state_->m);
        state_->cv.wait(lock, [&] { return state_->done; });
        err = std::move(state_->error);
      }
      if (recorded == progress_wait::recorded) detail::async_engine::leave_wait(detail::running_engine);
      if (err) {
        try {
          std::rethrow_exception(err);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "collx: a request destroyed without wait() or test() failed: %s\n", e.what());
        } catch (...) {
          std::fprintf(stderr, "collx: a request destroyed without wait() or test() failed (not a std::exception)\n");
        }
      }
    }
    state_.reset();
  }
  std::shared_ptr<detail::request_state> state_;
  unsigned created_in_ = detail::fork_generation();  ///< this process, as fork_generation() tells it
  int exceptions_at_creation_ = std::uncaught_exceptions();  ///< more at destruction: dropped by one
};

}  // namespace v0
}  // namespace collx
