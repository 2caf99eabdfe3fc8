/// @file detail/async_engine.hpp
/// The progress thread behind the *_async calls: one per communicator, started on first use, running
/// queued calls in order so that communication overlaps the caller's computation without polling.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <collx/detail/fork_generation.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
class async_engine;

/// Completion state shared by a request and the task it stands for.
struct request_state {
  const async_engine* engine = nullptr;  ///< the progress thread that runs the task
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

/// Runs tasks on one thread, in submission order.
class async_engine {
 public:
  async_engine() : thread_([this] { run(); }) {}
  ~async_engine() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  async_engine(const async_engine&) = delete;
  async_engine& operator=(const async_engine&) = delete;

  /// Queues fn; the returned state completes when it has run.
  std::shared_ptr<request_state> submit(std::function<void()> fn) {
    auto st = std::make_shared<request_state>();
    st->engine = this;
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
      lock.unlock();
      std::exception_ptr err;
      try {
        t.fn();
      } catch (...) {
        err = std::current_exception();
      }
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

  std::mutex m_;
  std::condition_variable cv_, idle_cv_;
  std::deque<task> queue_;
  std::size_t pending_ = 0;
  bool stop_ = false;
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
  request() = default;
  request(request&&) noexcept = default;
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      finish_unobserved();
      state_ = std::move(other.state_);
      created_in_ = other.created_in_;
      exceptions_at_creation_ = other.exceptions_at_creation_;
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { finish_unobserved(); }
  explicit request(std::shared_ptr<detail::request_state> s) : state_(std::move(s)) {}
  /// Blocks until the call finished; rethrows its collx::error if it failed. A default-constructed
  /// or already waited request returns at once.
  /// @throws collx::error (errc::invalid_argument) in a child fork() made of the process that
  ///         started the call: the call runs there, on a thread the child does not have; and on the
  ///         progress thread that runs the call (a task of submit_async waiting for a later call
  ///         of its own communicator), while the call has not run: it would wait for itself.
  void wait() {
    if (!state_) return;
    check_process();
    std::unique_lock<std::mutex> lock(state_->m);
    if (!state_->done && detail::running_engine == state_->engine)
      COLLX_THROW(errc::invalid_argument,
                  "collx::request waited on from the progress thread that runs its call (a task of submit_async "
                  "waiting for a later *_async call of its own communicator): the call runs after this task, so the "
                  "wait would never end; wait for it outside the task");
    state_->cv.wait(lock, [&] { return state_->done; });
    auto err = std::move(state_->error);
    lock.unlock();
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
  void check_process() const {
    if (created_in_ != detail::fork_generation())
      COLLX_THROW(errc::invalid_argument, "collx::request waited on in a child that fork() made of the process that "
                                          "started the call; the call runs in that process, not here");
  }
  /// The destructor's wait: the call has to end before its buffers may go; its error, unread by
  /// anyone, goes to stderr. In a fork() child the call runs in the parent: nothing to wait for.
  void finish_unobserved() noexcept {
    if (state_ && created_in_ == detail::fork_generation() && detail::running_engine == state_->engine) {
      std::fprintf(stderr, "collx: a request destroyed on the progress thread that runs its call is not waited for (it "
                           "would wait for itself)\n");
    } else if (state_ && created_in_ == detail::fork_generation()) {
      if (std::uncaught_exceptions() > exceptions_at_creation_ && state_->abandon) {
        bool done = false;
        {
          std::lock_guard<std::mutex> lock(state_->m);
          done = state_->done;
        }
        if (!done) state_->abandon();
      }
      std::exception_ptr err;
      {
        std::unique_lock<std::mutex> lock(state_->m);
        state_->cv.wait(lock, [&] { return state_->done; });
        err = std::move(state_->error);
      }
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
