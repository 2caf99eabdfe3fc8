/// @file transport/mpi.hpp
/// A collx transport over MPI point-to-point messages: runs any collx schedule between ranks that
/// MPI connects (other nodes over the network, or any ranks of an MPI job). Needs <mpi.h> and an
/// MPI library (CMake: target collx::mpi).
///
/// Wire protocol, per message of a schedule (one MPI tag on a private duplicate of the user's
/// communicator, so nothing collx sends can match the application's receives):
///   1. a first MPI message: a header {call signature, total bytes, piece bytes} followed by the
///      first piece of the payload (at most piece bytes);
///   2. the rest of the payload in pieces of `piece` bytes (the last may be shorter), sent straight
///      from the sender's buffer (no copy) and received into two bounded staging buffers, so a
///      receiver holds at most 2 pieces plus one first message however long the message is.
/// MPI's non-overtaking rule (messages between one pair with one tag arrive in order) keeps the
/// pieces in order. A receiver whose expected signature or size differs still drains the pieces
/// the header announces, so the sender's requests complete, and then fails the communicator.
///
/// Failures reach every rank: a rank that fails (mismatch, timeout, abort(), an invalid call) sends
/// a control message with the error code and text to every peer on a second tag; every wait polls
/// for it. MPI itself offers no liveness check: a peer that dies is seen by the launcher (mpirun
/// ends the job) or by the timeout. A peer that closed its communicator healthy (it left the job,
/// or skipped a call) is seen by its close message (closing_duplicates): a rank that has waited
/// `query_after` for it looks for that message, and fails closed_peer_grace after it came.
///
/// Disagreements that no message shows (a rank whose count is 0 returns at once; its peers wait for
/// data it never sends): a rank that moves nothing in a call, and a rank that has waited
/// `query_after` for a peer in a call, send a query on the control tag carrying their own
/// signature of the call (to every peer, or to the peer waited for). The peer answers nothing; it compares
/// the query with its own record of that call (each rank keeps its last published_call_history
/// calls, or holds the query until it reaches the call) whenever it polls: in its waits, at the
/// start of its next call, or when it announces the call. If they differ, it fails with
/// errc::mismatch naming the field, and its failure notice reaches every rank. Queries carry a token
/// the ranks agreed on at construction, so one left over from an earlier transport is ignored.
///
/// Timeouts: a quarter of its timeout (at most 500 ms) before a wait ends, a rank asks the peers it
/// waits for where they are (whereabouts_message, on the control tag); a peer answers from any of
/// its waits on the communicator with its latest call and what it waits for, and the timeout's
/// message says so, or that the peer did not answer (it is in no call on this communicator).
///
/// Threads: the transport calls MPI from the thread that runs the collective (the caller, or the
/// communicator's progress thread for *_async calls). MPI must therefore be initialised with
/// MPI_THREAD_MULTIPLE when *_async calls are used or the application calls MPI while a collective
/// runs in another thread, and at least MPI_THREAD_SERIALIZED otherwise (checked at construction;
/// below MPI_THREAD_MULTIPLE, *_async calls throw invalid_argument: async_refusal).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include <collx/communicator.hpp>
#include <collx/detail/cpus.hpp>
#include <collx/error.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {
namespace mpi {

/// Settings of the MPI transport.
struct mpi_options {
  /// Payload bytes per MPI message after the first (rounded down to whole elements). Bounds the
  /// receiver's staging memory (2 pieces per communicator) and sets the pipelining grain. A
  /// message is cut into at most detail::max_pieces pieces, so one that would need more gets
  /// larger ones (and the receiver larger staging): each piece is a send in flight at once, and
  /// MPICH aborted the process with half a million of them (4 MiB in 8-byte pieces). Likewise the
  /// messages of a call to many peers, posted at once, get fewer, larger pieces once a message
  /// would take the sends posted since the call's last wait past detail::max_sends_in_flight (at
  /// least detail::min_pieces each).
  std::size_t piece_bytes = std::size_t{1} << 20;
  /// How long connect and connect_hierarchical wait for every rank of the MPI communicator to call
  /// them (their first exchange, the duplicate each makes, connect_hierarchical's node ids):
  /// COLLX_CONNECT_TIMEOUT seconds, else 60 s, as a shared-memory start
  /// (shm_options::connect_timeout). MPI's blocking collectives have no timeout: a rank that never
  /// came, or waited in another MPI call on the communicator, held the others in MPI for ever.
  /// Past it they fail with errc::timeout.
  std::chrono::milliseconds connect_timeout = env::connect_timeout();
};

/// Throws errc::transport naming `what` if an MPI call returned an error code.
inline void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  COLLX_THROW(errc::transport, std::string(what) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

/// Whether MPI_Finalize has run: any MPI call but a few (MPI_Finalized) then aborts the process.
inline bool mpi_finalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

/// Throws errc::transport naming `who` unless MPI is initialised and not yet finalized (MPI calls
/// outside that window abort the process instead of returning an error).
inline void require_mpi_running(const char* who) {
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (!initialised || finalized)
    COLLX_THROW(errc::transport, std::string(who) + ": MPI is " +
                                     (finalized ? "finalized" : "not initialised (call MPI_Init_thread first)"));
}

/// Throws collx::error (errc::invalid_argument) when `comm` is MPI_COMM_NULL (what a rank outside
/// every group of an MPI_Comm_split gets: MPI's default error handler would abort the whole job in
/// the first call on it) or an intercommunicator (two groups: collx's ranks are one group's).
inline void require_communicator(MPI_Comm comm, const char* who) {
  if (comm == MPI_COMM_NULL)
    COLLX_THROW(errc::invalid_argument, std::string(who) + ": the MPI communicator is MPI_COMM_NULL (a rank that "
                                            "MPI_Comm_split put in no group gets it): connect only the ranks of a group");
  int inter = 0;
  check_mpi(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  if (inter)
    COLLX_THROW(errc::invalid_argument, std::string(who) + ": the MPI communicator is an intercommunicator; connect an "
                                            "intracommunicator (MPI_Intercomm_merge makes one of both groups)");
}

/// The thread support MPI was initialised with (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE).
inline int thread_level() {
  int level = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&level), "MPI_Query_thread");
  return level;
}

/// MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE by name.
inline std::string thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return std::to_string(level);
}

/// thread_level(), checked before any MPI call a connect makes: below MPI_THREAD_SERIALIZED a
/// thread other than the main one may not call MPI at all.
/// @throws collx::error (errc::transport) below MPI_THREAD_SERIALIZED.
inline int require_thread_support() {
  const int level = thread_level();
  if (level < MPI_THREAD_SERIALIZED)
    COLLX_THROW(errc::transport,
                "collx::mpi: MPI was initialised with thread level " + thread_level_name(level) +
                    "; collx needs at least MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE for *_async calls): ask for it "
                    "in MPI_Init_thread (MPI_Init gives MPI_THREAD_SINGLE; an MPI built without thread support may "
                    "provide less than asked)");
  return level;
}

namespace detail {
/// What travels in front of every message's first piece.
struct wire_header {
  call_signature sig;
  std::uint64_t bytes = 0;  ///< the whole payload
  std::uint64_t piece = 0;  ///< payload bytes per later MPI message
};
/// Pieces after the first: how many and how long the k-th is (k from 0).
inline std::size_t later_pieces(std::uint64_t bytes, std::uint64_t piece) noexcept {
  if (bytes <= piece) return 0;
  return static_cast<std::size_t>((bytes - piece + piece - 1) / piece);
}
inline std::size_t later_piece_bytes(std::uint64_t bytes, std::uint64_t piece, std::size_t k) noexcept {
  const std::uint64_t start = piece * (k + 1);
  return static_cast<std::size_t>(std::min<std::uint64_t>(piece, bytes - start));
}
/// Most pieces one message is cut into (the first included): the sender posts them all at once.
/// Open MPI slowed down past some ten thousand (8 MiB in 8-byte pieces took a minute); MPICH
/// aborted at half a million ("Assertion failed ... req != NULL").
inline constexpr std::uint64_t max_pieces = 8192;
/// Most sends one transport posts between two wait_sends: a further message gets no more pieces
/// than are left (at least min_pieces), since a call sending to many peers posts all their
/// messages at once, and MPICH 4.0 (ch4:ucx) aborted a process with between 262,144 and 400,000
/// sends in flight.
inline constexpr std::uint64_t max_sends_in_flight = 16384;
/// Fewest pieces max_sends_in_flight cuts a message down to (more peers than that limit / 16
/// still add 16 sends each, so the receivers' staging stays bounded by the message / 16).
inline constexpr std::uint64_t min_pieces = 16;
/// The piece size for a message of `bytes` in elements of `granularity` bytes, sent while
/// `in_flight` sends are posted: `piece_bytes` in whole elements (at least one), larger where the
/// message would need more than max_pieces, or more than max_sends_in_flight leaves (at least
/// min_pieces). Every piece but the last has this size; the receiver reads it from the header.
inline std::size_t piece_for(std::size_t piece_bytes, std::size_t granularity, std::uint64_t bytes,
                             std::uint64_t in_flight = 0) noexcept {
  const std::size_t g = std::max<std::size_t>(1, granularity);
  const std::size_t cap = std::max(g, std::size_t{INT_MAX / 2} / g * g);  // a piece's count is an int
  const std::uint64_t left = max_sends_in_flight - std::min(in_flight, max_sends_in_flight);
  const std::uint64_t most = std::min(max_pieces, std::max(min_pieces, left));
  const std::uint64_t fewest = (bytes + most - 1) / most;  // bytes per piece at `most` pieces
  const std::uint64_t wanted = std::max<std::uint64_t>(std::min(piece_bytes, cap), (fewest + g - 1) / g * g);
  return static_cast<std::size_t>(std::min<std::uint64_t>(std::max<std::uint64_t>(g, wanted / g * g), cap));
}

/// The message of the errc::timeout of a step of connecting (`what`, in `who`) that not every rank
/// of the MPI communicator of `size` ranks joined within `timeout`.
inline std::string connect_step_timeout_text(const char* who, const char* what, std::chrono::milliseconds timeout, int size) {
  return std::string(who) + ": timed out after " + std::to_string(timeout.count()) +
         " ms waiting for every rank of the MPI communicator (" + std::to_string(size) + " ranks) in " + what +
         " (mpi_options::connect_timeout, COLLX_CONNECT_TIMEOUT): a rank that has not called collx::mpi::connect or "
         "connect_hierarchical, waits in another MPI call on this communicator (MPI_Barrier, say), or gave up before "
         "this rank came (its connect timeout), never will. End the job (MPI_Abort): MPI cannot cancel the step, which "
         "leaves the MPI communicator unusable, and under Open MPI no communicator can be made in this process after it";
}

/// Waits, polling, for `r`, a non-blocking MPI collective of connecting (a blocking one has no
/// timeout: a rank that never joins it, or waits in another MPI call on the communicator, would
/// hold its peers in MPI for ever), for up to `timeout` (clamped to collx::detail::longest_wait).
/// Past it, or if MPI_Test fails, it calls `abandon()`, which leaves `r` and the step's buffers
/// allocated for MPI (a collective cannot be cancelled), and throws.
/// @throws collx::error timeout (connect_step_timeout_text, for a communicator of `size` ranks),
///   transport (MPI_Test failed: check_mpi, naming `what`).
template <class Abandon>
void finish_connect_step(MPI_Request& r, std::chrono::milliseconds timeout, const char* who, const char* what, int size,
                         Abandon&& abandon) {
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::min(timeout, collx::detail::longest_wait);
  for (;;) {
    int done = 0;
    if (const int rc = MPI_Test(&r, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
      abandon();
      check_mpi(rc, what);
    }
    if (done) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      abandon();
      COLLX_THROW(errc::timeout, connect_step_timeout_text(who, what, timeout, size));
    }
    // The peers usually come within microseconds; a late one may take seconds: stop taking the core.
    if (now - start < std::chrono::milliseconds(2)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

/// MPI_Iallgather of each rank's `mine` (the same number of elements of MPI type `type` on every
/// rank) over comm, waited for up to `timeout` (finish_connect_step): every rank's, in rank order.
/// @throws collx::error timeout (comm is unusable after it: the exchange stays pending in MPI,
///   which keeps its buffers), transport (an MPI call failed, naming `what`).
template <class T>
std::vector<T> allgather_within(MPI_Comm comm, std::vector<T> mine, MPI_Datatype type, std::chrono::milliseconds timeout,
                                const char* who, const char* what) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  // Heap-held: an exchange the peers never join stays pending in MPI, which reads and writes them.
  auto sent = std::make_unique<std::vector<T>>(std::move(mine));
  auto gathered = std::make_unique<std::vector<T>>(sent->size() * static_cast<std::size_t>(size));
  auto request = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
  const int count = static_cast<int>(sent->size());
  check_mpi(MPI_Iallgather(sent->data(), count, type, gathered->data(), count, type, comm, request.get()), what);
  finish_connect_step(*request, timeout, who, what, size,
                      [&] { (void)sent.release(), (void)gathered.release(), (void)request.release(); });
  return std::move(*gathered);
}

/// MPI_Finalize's first step for collx (defined after mpi_transport): live_transports::stop_all,
/// then closing_duplicates' last frees.
inline int at_mpi_finalize(MPI_Comm, int, void*, void*);

/// Has MPI_Finalize call at_mpi_finalize, once per process: MPI deletes MPI_COMM_SELF's
/// attributes first thing in MPI_Finalize, while every MPI call still works (MPI 3.1, 8.7.1; but
/// MPICH no longer serialises threads' calls then: live_transports::stop_all). MPI must be
/// running; a failed attempt is tried again at the next call.
inline void hook_finalize() noexcept {
  static std::mutex mu;
  static bool hooked = false;
  const std::lock_guard<std::mutex> lock(mu);
  if (hooked) return;
  int key = MPI_KEYVAL_INVALID;
  if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &at_mpi_finalize, &key, nullptr) != MPI_SUCCESS) return;
  hooked = MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr) == MPI_SUCCESS;
  MPI_Comm_free_keyval(&key);  // the attribute keeps it until it is deleted
}
}  // namespace detail

class mpi_transport;

namespace detail {
/// Every live mpi_transport of the process, for MPI_Finalize to stop first (stop_all): a call still
/// running on another thread (an *_async call not waited for) went on calling MPI during and after
/// MPI_Finalize, and the process crashed (MPICH in MPI_Isend, Open MPI with SIGSEGV) where wait()
/// should have thrown.
class live_transports {
 public:
  /// The process's one list; never destroyed (MPI_Finalize may run from an atexit handler).
  static live_transports& instance() {
    static live_transports& l = *new live_transports;
    return l;
  }
  /// Whether MPI_Finalize has begun (stop_all): no transport starts an MPI call after it sees this.
  static bool finalizing() noexcept { return finalizing_flag().load(); }
  /// Adds `t` (its constructor). @throws std::bad_alloc
  void add(mpi_transport* t) {
    const std::lock_guard<std::mutex> lock(mu_);
    list_.push_back(t);
  }
  /// Removes `t` (its destructor, or its constructor's failure).
  void remove(mpi_transport* t) noexcept {
    const std::lock_guard<std::mutex> lock(mu_);
    std::erase(list_, t);
  }
  /// At MPI_Finalize, which MPICH already runs unlocked (it stops serialising threads' MPI calls as
  /// MPI_Finalize begins): sets finalizing() first, so that every call in progress stops at its
  /// next MPI call and none starts; fails each transport (mpi_transport::stop_for_finalize); waits,
  /// up to finalize_stop_wait in all, until no transport is inside a member that calls MPI; then,
  /// as the only thread left in MPI, tells the peers of the calls it stopped.
  void stop_all() noexcept;

 private:
  static std::atomic<bool>& finalizing_flag() noexcept {
    static std::atomic<bool> f{false};
    return f;
  }
  std::mutex mu_;
  std::vector<mpi_transport*> list_;
};
}  // namespace detail

/// Duplicates of destroyed transports, freed once no message can still reach them. A rank may
/// send a peer control messages nobody waits for (a signature query, see the file comment) right
/// up to the peer's last call; freed at once, the peer's duplicate would let MPI give its context
/// id to the next communicator while such a message is still on its way, and the message would
/// land there (Open MPI's ob1 then crashed in MPI_Comm_dup under load, matching a sender rank the
/// new communicator does not have). So a closing rank sends every peer a close message and frees
/// its duplicate only once it has received every peer's: by MPI's non-overtaking rule (a receive
/// for any tag from that peer), everything the peer sent before has then been received and
/// dropped; data found there instead (from a call the peer made and this rank did not, which
/// failed the peer unless its sends finished unseen) is not received, as the peer may have handed
/// its buffer back, and the duplicate is given up (kept). Freeing is finished when the next transport is made or destroyed, and at
/// MPI_Finalize, which waits up to finalize_wait for the peers' close messages (MPICH with UCX
/// warned of each one left unreceived). A failed transport keeps its duplicate (mpi_transport's
/// destructor says why) and tells its peers (close_failed), which keep theirs too: one MPI
/// context id each, of the 2048 a process has under MPICH. A duplicate whose peer keeps its
/// communicator past MPI_Finalize is never freed.
class closing_duplicates {
 public:
  /// The close message's tag (mpi_transport::close_tag).
  static constexpr int close_tag = 7003;
  /// The tag of close_failed's message.
  static constexpr int failed_close_tag = 7004;
  /// mpi_transport::data_tag: what a closing peer must not receive (free_finished_locked).
  static constexpr int data_tag = 7001;
  /// How long MPI_Finalize waits, at most, for peers' close messages still on their way.
  static constexpr std::chrono::milliseconds finalize_wait{2000};
  /// The process's one list (every transport's duplicates, whatever communicator they came from).
  static closing_duplicates& instance() {
    // Never destroyed: MPI_Finalize (at_finalize) or a transport may reach it from an atexit
    // handler or a static destructor that runs after function-local statics are gone.
    static closing_duplicates& c = *new closing_duplicates;
    return c;
  }
  /// Sends the close message to every peer of `comm` (rank `rank` of `size`) and keeps it until
  /// every peer's has come. MPI must be initialised and not finalized.
  void close(MPI_Comm comm, int rank, int size) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    try {
      entry e{comm, std::vector<char>(static_cast<std::size_t>(size), 0)};
      e.closed[static_cast<std::size_t>(rank)] = 1;
      tell_peers(comm, rank, size, close_tag);
      open_.push_back(std::move(e));
    } catch (...) {  // no memory for the list: the duplicate is kept
    }
    free_finished_locked();
  }
  /// Tells every peer of `comm` that this rank's transport failed and keeps its duplicate for
  /// good (mpi_transport's destructor says why): a peer whose own transport closed healthy then
  /// stops waiting for this rank's close message, and keeps its duplicate too.
  void close_failed(MPI_Comm comm, int rank, int size) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    tell_peers(comm, rank, size, failed_close_tag);
    free_finished_locked();
  }
  /// Frees the duplicates whose peers have all closed, receiving (and dropping) whatever they
  /// sent before their close message; gives up (keeps, and stops waiting for) those where a peer
  /// failed or sent data this rank never received.
  void free_finished() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    free_finished_locked();
  }
  /// Duplicates closed by this process, neither freed nor given up yet: some peer's close message
  /// has not come.
  std::size_t kept() noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    return open_.size();
  }

 private:
  /// Sends every peer of `comm` but `rank` a message with `tag`, not waited for.
  static void tell_peers(MPI_Comm comm, int rank, int size, int tag) noexcept {
    static const int message = 0;  // sent from here: stays valid however long the send takes
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Isend(&message, 1, MPI_INT, p, tag, comm, &r) == MPI_SUCCESS) MPI_Request_free(&r);
    }
  }

  friend int detail::at_mpi_finalize(MPI_Comm, int, void*, void*);
  /// At MPI_Finalize (detail::at_mpi_finalize): frees what it can until no duplicate waits or
  /// finalize_wait has passed: the peers are finalizing too, and their close messages, sent when
  /// they destroyed their transports, are on their way.
  void finish_at_finalize() noexcept {
    std::unique_lock<std::mutex> lock(mu_);
    const auto until = std::chrono::steady_clock::now() + finalize_wait;
    for (;;) {
      free_finished_locked();
      if (open_.empty() || std::chrono::steady_clock::now() >= until) return;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
  }
  struct entry {
    MPI_Comm comm;
    std::vector<char> closed;  // per peer: its close message came
  };
  void free_finished_locked() noexcept {
    if (mpi_finalized()) return;
    for (auto it = open_.begin(); it != open_.end();) {
      bool all = true, peer_failed = false;  // peer_failed: give the duplicate up
      for (std::size_t p = 0; p < it->closed.size() && !peer_failed; ++p) {
        // Looked for by its tag, ahead of what the peer sent before: nothing of a failed peer's
        // is received once its notice is here, since a send it did not finish may read a buffer
        // its caller got back.
        int failed = 0;
        if (!it->closed[p] &&
            MPI_Iprobe(static_cast<int>(p), failed_close_tag, it->comm, &failed, MPI_STATUS_IGNORE) == MPI_SUCCESS && failed) {
          peer_failed = true;
          break;
        }
        while (!it->closed[p] && !peer_failed) {
          int found = 0;
          MPI_Message msg;
          MPI_Status st;
          if (MPI_Iprobe(static_cast<int>(p), MPI_ANY_TAG, it->comm, &found, &st) != MPI_SUCCESS || !found) break;
          // Data this rank never received: the peer made a call this rank did not, and failed in
          // it (or will), perhaps with its buffer handed back already; its failed-close may still
          // be on its way. Received, the data would be read from that buffer: given up instead.
          if (st.MPI_TAG == data_tag) {
            peer_failed = true;
            break;
          }
          if (MPI_Improbe(static_cast<int>(p), st.MPI_TAG, it->comm, &found, &msg, &st) != MPI_SUCCESS || !found) break;
          int bytes = 0;
          MPI_Get_count(&st, MPI_BYTE, &bytes);
          try {
            std::vector<std::byte> drop(static_cast<std::size_t>(std::max(bytes, 1)));
            MPI_Mrecv(drop.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
          } catch (...) {  // no memory for it: received into nothing would fail; keep the duplicate
            return;
          }
          if (st.MPI_TAG == close_tag) it->closed[p] = 1;
          if (st.MPI_TAG == failed_close_tag) peer_failed = true;  // it came in the meantime
        }
        all = all && it->closed[p];
      }
      if (peer_failed) {  // kept for good: no close will come
        it = open_.erase(it);
      } else if (all) {
        MPI_Comm_free(&it->comm);
        it = open_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::mutex mu_;
  std::vector<entry> open_;
};

/// The MPI transport of one rank. Construct it on every rank of `comm` (collective, like
/// MPI_Comm_dup); it works on a private duplicate, freed when the transport is destroyed and
/// every peer has closed it too (closing_duplicates).
/// @throws collx::error transport (MPI not initialised, too little thread support, an MPI error),
///   invalid_argument (comm is MPI_COMM_NULL or an intercommunicator)
class mpi_transport final : public transport {
 public:
  static constexpr int data_tag = closing_duplicates::data_tag;  ///< schedule messages
  static constexpr int control_tag = 7002;  ///< failure notices, signature and whereabouts queries
  static constexpr int close_tag = closing_duplicates::close_tag;  ///< "this rank is done with the duplicate"
  /// How long a rank waits for a peer in one call before it sends that peer its signature.
  static constexpr std::chrono::milliseconds query_after{50};
  /// How long an oversubscribed rank's wait polls with only yields between, before it sleeps
  /// between polls (wait()).
  static constexpr std::chrono::milliseconds oversubscribed_spin{1};
  /// How long a failed call waits for its sends to finish before it returns (settle_sends),
  /// whatever the communicator's timeout: a shorter wait would leave a late peer's receives to
  /// read the user's buffer after the call returned.
  static constexpr std::chrono::milliseconds settle_time{2000};
  /// Control messages (failure notices, queries) are looked for at most this often: each look is
  /// an MPI_Improbe for any source, which scans MPI's queue of unexpected messages, long when many
  /// small data messages arrived ahead of their receives.
  static constexpr std::chrono::microseconds control_poll_interval{1000};
  /// How long a rank goes on waiting for a peer whose close message came (it destroyed its
  /// communicator) before it fails: what the peer sent before it closed has arrived by then.
  static constexpr std::chrono::milliseconds closed_peer_grace{2000};

  /// Collective over `comm`: duplicates it (MPI_Comm_idup, waited for up to opt.connect_timeout:
  /// a rank that came after its peers gave up on connecting finds connect's first exchange
  /// complete at once, their parts being there, and stops here), agrees on a token with rank 0
  /// (MPI_Bcast) and gathers the CPUs of the ranks on this machine (MPI_Comm_split_type): every
  /// rank is here once the duplicate is made.
  /// @throws collx::error transport (MPI not initialised, too little thread support, or an MPI
  ///   call failed: check_mpi), invalid_argument (comm is MPI_COMM_NULL or an intercommunicator),
  ///   timeout (not every rank duplicated comm in time: end the job, see connect).
  explicit mpi_transport(MPI_Comm comm, const mpi_options& opt = {}) : opt_(opt) {
    require_mpi_running("collx::mpi");
    require_communicator(comm, "collx::mpi");
    level_ = require_thread_support();
    detail::hook_finalize();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    closing_duplicates::instance().free_finished();  // before MPI picks a context id for the new one
    {
      int size = 0;
      check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
      // Heap-held: a duplicate the peers never join stays pending in MPI, which writes into both.
      auto dup = std::make_unique<MPI_Request>(MPI_REQUEST_NULL);
      auto made = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
      check_mpi(MPI_Comm_idup(comm, made.get(), dup.get()), "MPI_Comm_idup");
      detail::finish_connect_step(*dup, opt.connect_timeout, "collx::mpi", "MPI_Comm_idup (its duplicate)", size,
                                  [&] { (void)dup.release(), (void)made.release(); });
      comm_ = *made;
    }
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    owner_ = std::this_thread::get_id();
    queried_.assign(static_cast<std::size_t>(size_), 0);
    // The token queries carry: rank 0's random number, the same on every rank of this transport.
    if (rank_ == 0) token_ = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}();
    check_mpi(MPI_Bcast(&token_, 1, MPI_UINT64_T, 0, comm_), "MPI_Bcast");
    // More ranks on this machine than cores: a polling rank would take the core a peer needs, so
    // waits yield from the first poll instead of spinning first.
    MPI_Comm host = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host), "MPI_Comm_split_type");
    MPI_Comm_size(host, &ranks_on_host_);
    // The CPUs the host's ranks may use together (mpirun pins each to its own core by default, so
    // one rank's mask alone would say 1), capped by the cgroup quota: detail/cpus.hpp.
    const collx::detail::cpu_bits mine = collx::detail::allowed_cpus();
    std::vector<collx::detail::cpu_bits> all(static_cast<std::size_t>(ranks_on_host_));
    check_mpi(MPI_Allgather(mine.words.data(), static_cast<int>(mine.words.size()), MPI_UINT64_T, all.data(),
                            static_cast<int>(mine.words.size()), MPI_UINT64_T, host),
              "MPI_Allgather");
    MPI_Comm_free(&host);
    collx::detail::cpu_bits host_cpus;
    for (const collx::detail::cpu_bits& b : all) host_cpus |= b;
    oversubscribed_ = static_cast<unsigned>(ranks_on_host_) > collx::detail::usable_cpus(host_cpus);
  }
  /// After MPI_Finalize: nothing. Otherwise cancels unfinished piece receives and hands the
  /// duplicate to closing_duplicates, which frees it once every peer has closed it too; after a
  /// failure the duplicate and the buffers of unfinished sends are kept instead (a stale message
  /// must not match a later communicator's receive). Never throws.
  ~mpi_transport() override {
    const mpi_section use(*this);
    if (!use) return;
    // A receive that matched before its cancel still completes, into staging_, perhaps only
    // when the peer next drives MPI: unless it is over already, both staging buffers are left
    // allocated rather than waited for (a wait would hang on a peer that stopped calling MPI).
    bool receiving = false;
    for (MPI_Request& r : piece_recvs_)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        int done = 0;
        if (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
          MPI_Request_free(&r);
          receiving = true;
        }
      }
    if (receiving)
      for (auto& s : staging_) (void)new std::vector<std::byte>(std::move(s));  // left allocated
    // The first message's receive, matched already (past cancelling): the same.
    if (first_recv_ != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Test(&first_recv_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
        MPI_Request_free(&first_recv_);
        (void)new std::vector<std::byte>(std::move(first_));  // left allocated
      }
    }
    // A query still on its way keeps its bytes (MPI may read them until the send completes); one
    // that arrives after the peer's transport is gone is dropped when that peer frees its
    // duplicate (closing_duplicates), and carries another token than any later transport's.
    for (auto& [r, bytes] : query_sends_) {
      int done = 0;
      if (r != MPI_REQUEST_NULL && (MPI_Test(&r, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)) {
        MPI_Request_free(&r);
        (void)bytes.release();
      }
    }
    if (!failed_.load(std::memory_order_acquire)) {
      closing_duplicates::instance().close(comm_, rank_, size_);
      return;
    }
    // A failure from another thread under MPI_THREAD_SERIALIZED (abort()) waited for this
    // thread to tell the peers; it may be the last chance.
    if (notice_pending_) send_notices();
    // After a failure, messages of the failed call may still be in flight or unreceived (the
    // data of a call the peers gave up on, failure notices from several ranks). Freeing the
    // duplicate would let MPI hand its context id to a later communicator, where a stale message
    // could match a receive; so it is kept, and so are the buffers of unfinished sends. Nor can
    // the close handshake drop them: a peer draining an unfinished send would have MPI read a
    // buffer its caller got back, perhaps freed (Open MPI then broke the connection, and the
    // peer's receive hung). A failed communicator is rare and these are small.
    for (MPI_Request& r : sends_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    for (MPI_Request& r : control_sends_)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    for (auto& b : first_buffers_) (void)b.release();
    (void)notice_.release();
    closing_duplicates::instance().close_failed(comm_, rank_, size_);
  }
  /// Not copyable: it owns the duplicate communicator and its requests.
  mpi_transport(const mpi_transport&) = delete;
  /// Not copyable: it owns the duplicate communicator and its requests.
  mpi_transport& operator=(const mpi_transport&) = delete;

  /// See transport::rank (the rank in the duplicate, as in `comm`).
  int rank() const noexcept override { return rank_; }
  /// See transport::size.
  int size() const noexcept override { return size_; }
  /// "mpi".
  std::string_view name() const noexcept override { return "mpi"; }
  /// True: MPI_Comm_split waits for every rank (see transport::split_waits_for_all).
  bool split_waits_for_all() const noexcept override { return true; }
  /// Empty under MPI_THREAD_MULTIPLE; otherwise why not, naming the thread level MPI was
  /// initialised with (see transport::async_refusal).
  std::string async_refusal() const override {
    if (level_ == MPI_THREAD_MULTIPLE) return {};
    return std::string("MPI was initialised with ") + thread_level_name(level_) +
           ", and an async call runs MPI from the communicator's progress thread while the caller's thread goes "
           "on, which needs MPI_THREAD_MULTIPLE (MPI_Init_thread)";
  }
  /// MPI_Comm_split of this transport's communicator (every rank takes part, those in no group
  /// with MPI_UNDEFINED), and a transport on the group's communicator with this one's options.
  /// @throws collx::error transport (an MPI call failed: check_mpi), internal (MPI ranked this rank
  ///   otherwise than collx::split), and what the constructor throws.
  std::shared_ptr<transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                   std::uint64_t split_id) override {
    (void)split_id;
    const mpi_section use(*this);
    if (!use) throw_unusable();
    MPI_Comm group = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, members.empty() ? MPI_UNDEFINED : color, key, &group), "MPI_Comm_split");
    if (group == MPI_COMM_NULL) return nullptr;
    struct comm_guard {
      MPI_Comm& c;
      ~comm_guard() { MPI_Comm_free(&c); }
    } free_group{group};  // the transport works on its own duplicate
    int r = -1;
    MPI_Comm_rank(group, &r);
    if (r != group_rank)  // MPI orders by (key, rank) as collx::split does
      COLLX_THROW(errc::internal, "collx::split: MPI_Comm_split made this rank " + std::to_string(r) + " of its group, not " +
                                      std::to_string(group_rank));
    return std::make_shared<mpi_transport>(group, opt_);
  }
  /// See transport::set_timeout.
  void set_timeout(std::chrono::milliseconds t) noexcept override { timeout_ = t; }
  /// The duplicate communicator collx sends on.
  MPI_Comm mpi_comm() const noexcept { return comm_; }
  /// Ranks of this communicator on this machine (MPI_COMM_TYPE_SHARED).
  int ranks_on_host() const noexcept { return ranks_on_host_; }

  /// See transport::check; reads the failure notices peers sent first.
  /// @throws collx::error transport when MPI was finalized while this transport lives; the
  ///   transport's failure, if it has failed.
  void check() override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();  // after MPI_Finalize any other MPI call would abort the job
    poll_control();
    if (failed_.load(std::memory_order_acquire)) rethrow_failure();
  }

  /// Records the call this rank starts (its peers' queries are compared with it) and compares it
  /// with the queries of peers that reached it first.
  /// @throws collx::error (errc::mismatch) when such a query differs.
  void announce(const call_signature& sig) override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    history_[sig.seq % published_call_history] = sig;
    current_ = sig;
    announced_at_ = std::chrono::steady_clock::now();
    if (finalizing()) stop_for_finalize_here();
    std::erase_if(query_sends_, [](auto& q) {  // queries delivered: their bytes can go
      int done = 0;
      return MPI_Test(&q.first, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done;
    });
    std::string why;
    for (const auto& [peer, q] : early_queries_)
      if (why.empty() && q.sig.seq == sig.seq && !(q.sig == sig)) why = disagreement(sig, q.sig, peer, q.before);
    std::erase_if(early_queries_, [&](const auto& q) { return q.second.sig.seq <= sig.seq; });
    if (!why.empty()) fail_out(errc::mismatch, why);
  }

  /// Sends every peer this call's signature (a rank moving nothing sends no data): a peer that
  /// expected data from this rank compares it with its own call and reports the mismatch, even
  /// when this rank makes no further call (it may finalize at once).
  void moves_nothing(const call_signature& sig) override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    (void)sig;  // the current call (announce came first)
    for (int p = 0; p < size_; ++p) query(p);
  }

  /// The world transport of an algo::hierarchical call moves no message of its own: ranks that
  /// disagree on the call (a root) may take level calls that never meet, and wait there until their
  /// timeout. The levels' waits call this (transport::watched_failed, every 50 ms). Once such a
  /// call has run query_after, this rank sends its record of it to its two neighbours in rank
  /// order (query, once per call and peer: O(n) messages for the job, not O(n^2); where ranks
  /// disagree, some neighbours do); it takes in the peers' notices and queries, comparing those
  /// with its own records (answer). A peer whose record differs fails the communicator for every
  /// rank, naming the field, when it next polls: in a wait, or at its next call. True when this
  /// transport has failed.
  bool records_disagree() noexcept override {
    if (failed_.load(std::memory_order_acquire)) return true;
    const mpi_section use(*this);
    if (!use) return failed_.load(std::memory_order_acquire);
    try {
      enter();
      poll_control();
      if (current_.algo == hierarchical_signature_algo && std::chrono::steady_clock::now() - announced_at_ > query_after) {
        query((rank_ + 1) % size_);
        query((rank_ + size_ - 1) % size_);
      }
    } catch (...) {  // poll_control failed (it fails the transport) or no memory: the timeout still ends the wait
    }
    return failed_.load(std::memory_order_acquire);
  }

  /// See transport::compare_records_now: sends this rank's record of a hierarchical call to its two
  /// neighbours at once, then takes in the peers' notices for up to min(wait, the timeout).
  bool compare_records_now(std::chrono::milliseconds wait) noexcept override {
    if (failed_.load(std::memory_order_acquire)) return true;
    const mpi_section use(*this);
    if (!use) return failed_.load(std::memory_order_acquire);
    try {
      enter();
      if (current_.algo == hierarchical_signature_algo) {
        query((rank_ + 1) % size_);
        query((rank_ + size_ - 1) % size_);
      }
      // A disagreeing neighbour answers at its next look at the control messages (its level
      // waits look every 50 ms): end with its notice, or after `wait` when the records agree.
      const auto until = std::chrono::steady_clock::now() + std::min(wait, timeout_);
      while (!failed_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
        poll_control();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    } catch (...) {  // poll_control failed (it fails the transport) or no memory
    }
    return failed_.load(std::memory_order_acquire);
  }

  /// See transport::fail; also sends every peer a failure notice (from this thread if MPI allows it
  /// here, else at the owning thread's next call).
  void fail(errc code, const std::string& why) noexcept override {
    const mpi_section use(*this);
    fail_with_notice(code, why, true, static_cast<bool>(use));
  }
  /// See transport::adopt_failure; notices as fail().
  void adopt_failure(errc code, const std::string& why) noexcept override {
    const mpi_section use(*this);
    fail_with_notice(code, why, false, static_cast<bool>(use));
  }

  /// See transport::failure; reads the notices peers sent first.
  bool failure(errc& code, std::string& why) noexcept override {
    enter();
    try {
      const mpi_section use(*this);
      if (use) poll_control();  // the notices peers sent
    } catch (...) {
    }
    if (!failed_.load(std::memory_order_acquire)) return false;
    std::lock_guard<std::mutex> lock(mu_);
    code = code_;
    try {
      why = notice_text_.empty() ? why_ : notice_text_;  // this rank's own: "rank R failed: ...", as the peers read it
    } catch (...) {
    }
    return true;
  }

  /// See transport::post_send: the first piece travels with the signature (copied); later pieces
  /// are sent from `data` (MPI_Isend, in pieces sized from mpi_options::piece_bytes).
  /// @throws collx::error transport (an MPI call failed: check_mpi; the transport is failed).
  void post_send(int peer, const void* data, std::size_t bytes, std::size_t granularity,
                 const call_signature& sig) override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    message_seq_ = sig.seq;
    const std::size_t piece = detail::piece_for(opt_.piece_bytes, granularity, bytes, sends_.size());
    const std::size_t first = std::min(bytes, piece);
    auto buf = std::make_unique<std::byte[]>(sizeof(detail::wire_header) + first);
    const detail::wire_header h{sig, bytes, piece};
    std::memcpy(buf.get(), &h, sizeof h);
    if (first) std::memcpy(buf.get() + sizeof h, data, first);
    isend(buf.get(), sizeof h + first, peer, data_tag);
    first_buffers_.push_back(std::move(buf));
    const auto* p = static_cast<const std::byte*>(data);
    const std::size_t later = detail::later_pieces(bytes, piece);
    for (std::size_t k = 0; k < later; ++k)
      isend(p + piece * (k + 1), detail::later_piece_bytes(bytes, piece, k), peer, data_tag);
  }

  /// See transport::recv; the pieces after the first are received double-buffered.
  /// @throws collx::error mismatch (signature, size or piece size differs), timeout, transport (an
  ///   MPI call failed, a malformed message, a peer closed its communicator), or the transport's
  ///   failure; each fails the transport.
  void recv(int peer, std::size_t bytes, std::size_t granularity, const call_signature& sig,
            consumer_ref consume) override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    message_seq_ = sig.seq;
    // 1. The first message: probe for its size, then receive it whole.
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    wait(wait_kind::message_from, peer, [&] {
      int found = 0;
      check_rc(MPI_Improbe(peer, data_tag, comm_, &found, &msg, &st), "MPI_Improbe", peer);
      return found != 0;
    });
    int len = 0;
    MPI_Get_count(&st, MPI_BYTE, &len);
    if (static_cast<std::size_t>(len) < sizeof(detail::wire_header)) {
      MPI_Mrecv(nullptr, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      fail_out(errc::transport, "malformed message of " + std::to_string(len) + " bytes from rank " + std::to_string(peer) +
                                    " (is another program sending on collx's communicator?)");
    }
    first_.resize(static_cast<std::size_t>(len));
    // Received in a wait, as the later pieces are, not by a blocking MPI_Mrecv: a first message
    // past the eager limit (a few KiB; it holds up to piece_bytes) is a rendezvous, which over
    // TCP needs the sender to drive MPI, and one that stopped (SIGSTOP, a debugger) would keep
    // MPI_Mrecv from returning past every timeout.
    if (finalizing()) stop_for_finalize_here();
    check_rc(MPI_Imrecv(first_.data(), len, MPI_BYTE, &msg, &first_recv_), "MPI_Imrecv", peer);
    wait(wait_kind::rest_of_message_from, peer, [&] {
      int done = 0;
      check_rc(MPI_Test(&first_recv_, &done, MPI_STATUS_IGNORE), "MPI_Test", peer);
      return done != 0;
    });
    detail::wire_header h;
    std::memcpy(&h, first_.data(), sizeof h);
    const std::size_t later = detail::later_pieces(h.bytes, h.piece);

    std::string mismatch;
    if (!(h.sig == sig)) mismatch = explain(sig, h.sig, peer);
    else if (h.bytes != bytes)
      mismatch = message_size_mismatch(sig, peer, h.bytes, rank_, bytes);
    else if (h.piece % std::max<std::size_t>(1, granularity) != 0)
      mismatch = peer_name(peer) + " cuts messages into " + std::to_string(h.piece) +
                 "-byte pieces, not whole " + std::to_string(granularity) + "-byte elements";
    const bool ok = mismatch.empty();
    if (ok && len > static_cast<int>(sizeof h)) consume(first_.data() + sizeof h, 0, static_cast<std::size_t>(len) - sizeof h);

    // 2. The later pieces, double-buffered: piece k+1 is on its way while piece k is consumed.
    // On a mismatch they are still received (and dropped) so that the sender's sends complete.
    for (auto& s : staging_)
      if (s.size() < h.piece) s.resize(static_cast<std::size_t>(std::min<std::uint64_t>(h.piece, INT_MAX)));
    auto post = [&](std::size_t k) {
      irecv(staging_[k % 2].data(), detail::later_piece_bytes(h.bytes, h.piece, k), peer, &piece_recvs_[k % 2]);
    };
    if (later > 0) {
      // The later pieces are sent from the sender's own buffer. A sender whose call failed may
      // have returned and freed it (settle_sends waits only so long): a receive matched now would
      // make MPI read freed memory (Open MPI's single-copy path reads it from here). The notice
      // of that failure went out before the sender returned, from the sender or, where another
      // rank's notice failed it, from that rank: look for any first (any-source looks per
      // message of several pieces), then receive nothing more. Several looks, not one: a probe
      // may only move a notice that arrived long ago into MPI's queue (Open MPI's ob1 searches
      // its queue, then progresses once, which takes in a bounded number of fragments, and the
      // sender's notice comes after its pieces'); after a non-blocking collective one look missed
      // it, and test_mpi's late receiver crashed. More for a message of many pieces: Open MPI
      // (shared memory) took 2 looks after 3 later pieces, 3 after 63, 9 after 255.
      const std::size_t looks = 3 + later / 16;
      for (std::size_t look = 0; look < looks && !failed_.load(std::memory_order_acquire); ++look) poll_control(true);
      if (failed_.load(std::memory_order_acquire)) rethrow_failure();
      post(0);
    }
    for (std::size_t k = 0; k < later; ++k) {
      if (k + 1 < later) post(k + 1);
      MPI_Request& r = piece_recvs_[k % 2];
      wait(wait_kind::rest_of_message_from, peer, [&] {
        int done = 0;
        check_rc(MPI_Test(&r, &done, MPI_STATUS_IGNORE), "MPI_Test", peer);
        return done != 0;
      });
      if (ok) consume(staging_[k % 2].data(), h.piece * (k + 1), detail::later_piece_bytes(h.bytes, h.piece, k));
    }
    if (!ok) {
      // The peer went past this call (how did it see it?), or an earlier call differed: the peer
      // compares this rank's records, which the query carries, with its own and names the field.
      // A point-to-point recv (seq 0) has no call of its own for the peer to compare: no answer comes.
      if (sig.seq != 0 && (h.sig.seq > sig.seq || differ_only_in_earlier(sig, h.sig))) await_answer(peer);
      fail_out(errc::mismatch, mismatch);
    }
  }

  /// See transport::wait_sends: MPI_Isend completed for every send.
  /// @throws collx::error timeout, transport (an MPI call failed, a peer closed its communicator),
  ///   or the transport's failure; each fails the transport.
  void wait_sends() override {
    enter();
    const mpi_section use(*this);
    if (!use) throw_unusable();
    wait(wait_kind::sends_delivered, -1, [&] {
      int done = 0;
      check_rc(MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall",
               -1);
      return done != 0;
    });
    sends_.clear();
    send_peers_.clear();
    first_buffers_.clear();
  }

 private:
  friend class detail::live_transports;

  void enter() noexcept { owner_ = std::this_thread::get_id(); }

  /// Whether MPI_Finalize has begun: no MPI call may start (each place that calls MPI looks).
  static bool finalizing() noexcept { return detail::live_transports::finalizing(); }

  /// Brackets this transport's use of MPI, opened first thing by every member that calls MPI:
  /// MPI_Finalize (live_transports::stop_all) waits until none is open, and one opened after it
  /// began, or after MPI_Finalize, is false: its member makes no MPI call. (in_use_ then the flag
  /// here, the flag then in_use_ there, both sequentially consistent: one of the two sees the other.)
  class mpi_section {
   public:
    explicit mpi_section(mpi_transport& t) noexcept : t_(t) {
      t_.in_use_.fetch_add(1);
      usable_ = !finalizing() && !mpi_finalized();
    }
    ~mpi_section() { t_.in_use_.fetch_sub(1); }
    mpi_section(const mpi_section&) = delete;
    mpi_section& operator=(const mpi_section&) = delete;
    explicit operator bool() const noexcept { return usable_; }

   private:
    mpi_transport& t_;
    bool usable_ = false;
  };

  /// What a call after MPI_Finalize began throws, without an MPI call: the transport's failure
  /// (stop_for_finalize set one), else that MPI was finalized.
  [[noreturn]] void throw_unusable() {
    if (failed_.load(std::memory_order_acquire)) throw_failure();
    COLLX_THROW(errc::transport, finalized_text);
  }
  static constexpr const char* finalized_text =
      "MPI was finalized while this communicator was alive (a collx::mpi communicator's calls, *_async ones "
      "included, end before MPI_Finalize; destroying it after is allowed)";
  static constexpr const char* interrupted_text =
      "MPI_Finalize was called during a call on this communicator (an *_async call not waited for?): wait for "
      "every request, and destroy the communicator, before MPI_Finalize";

  /// How long MPI_Finalize waits, at most, for the calls in progress to leave MPI: each stops at
  /// its next MPI call, but an op may be folding a piece.
  static constexpr std::chrono::milliseconds finalize_stop_wait{5000};

  /// Ends a call that finds MPI_Finalize begun (before an MPI call it would make): fails the
  /// transport as interrupted, without an MPI call (stop_all tells the peers), and throws that.
  [[noreturn]] void stop_for_finalize_here() {
    stop_for_finalize();  // (this member's mpi_section is open: failed as interrupted)
    throw_unusable();
  }

  /// MPI_Finalize has begun (live_transports::stop_all; no MPI call from here): a transport inside
  /// a member that calls MPI is failed as interrupted (its call throws at its next MPI call, and
  /// the peers are told once every call has stopped), an idle one quietly (a later call throws
  /// that MPI was finalized).
  void stop_for_finalize() noexcept {
    if (in_use_.load() == 0) {
      fail_with_notice(errc::transport, finalized_text, false, false);
      return;
    }
    interrupted_.store(true);
    fail_with_notice(errc::transport, interrupted_text, true, false);
  }
  /// At MPI_Finalize, once no transport is inside a member that calls MPI (stop_all): tells the
  /// peers of an interrupted call that it failed, so that those waiting on this rank stop too.
  void tell_peers_at_finalize() noexcept {
    if (!interrupted_.load() || in_use_.load() != 0 || mpi_finalized()) return;
    notice_pending_ = true;
    send_notices(true);
  }

  /// The destinations of the sends posted since the last wait_sends, each once, ascending.
  std::vector<int> send_destinations() const {
    std::vector<int> peers = send_peers_;
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    return peers;
  }
  /// Whether a send to `peer` posted since the last wait_sends has not completed
  /// (MPI_Request_get_status: asked, the requests left as they are).
  bool send_pending_to(int peer) const {
    for (std::size_t i = 0; i < sends_.size(); ++i) {
      int done = 0;
      if (send_peers_[i] == peer && sends_[i] != MPI_REQUEST_NULL &&
          (MPI_Request_get_status(sends_[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done))
        return true;
    }
    return false;
  }

  /// The destinations of the sends still pending.
  std::vector<int> pending_send_destinations() const {
    std::vector<int> peers = send_destinations();
    std::erase_if(peers, [&](int p) { return !send_pending_to(p); });
    return peers;
  }

  /// "its sends to ranks 2, 3 to be delivered" (the peers of the sends still pending; on a level
  /// or split group "ranks 2, 3 (world ranks 5, 7)", as peer_name).
  std::string send_wait_text() const {
    std::vector<int> peers = pending_send_destinations();
    if (peers.empty()) peers = send_destinations();  // completed meanwhile: name them all
    const std::vector<int>& world = level_world_ranks();
    const char* plural = peers.size() > 1 ? "s " : " ";
    // append, not `"..." + std::string`: g++ 12 warns falsely (-Wrestrict) on the latter at -O2.
    std::string s = std::string("its sends to rank").append(plural), in_world;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      s.append(i ? ", " : "").append(std::to_string(peers[i]));
      if (static_cast<std::size_t>(peers[i]) < world.size())
        in_world.append(i ? ", " : "").append(std::to_string(world[static_cast<std::size_t>(peers[i])]));
    }
    if (!in_world.empty()) s.append(" (world rank").append(plural).append(in_world).append(")");
    return s.append(" to be delivered");
  }

  void isend(const void* p, std::size_t n, int peer, int tag) {
    if (finalizing()) stop_for_finalize_here();
    MPI_Request r = MPI_REQUEST_NULL;
    check_rc(MPI_Isend(p, static_cast<int>(n), MPI_BYTE, peer, tag, comm_, &r), "MPI_Isend", peer);
    sends_.push_back(r);
    send_peers_.push_back(peer);
  }
  void irecv(void* p, std::size_t n, int peer, MPI_Request* r) {
    if (finalizing()) stop_for_finalize_here();
    check_rc(MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, peer, data_tag, comm_, r), "MPI_Irecv", peer);
  }
  void check_rc(int rc, const char* what, int peer) {
    if (rc == MPI_SUCCESS) return;
    try {
      check_mpi(rc, what);
    } catch (const error& e) {
      fail_out(errc::transport, std::string(e.what()) + (peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : ""));
    }
  }

  /// What a wait waits for (wait()), also as whereabouts_message::wait tells a peer.
  enum class wait_kind : std::int32_t { message_from = 1, rest_of_message_from = 2, sends_delivered = 3 };
  static const char* wait_words(wait_kind k) noexcept {
    switch (k) {
      case wait_kind::message_from: return "a message from";
      case wait_kind::rest_of_message_from: return "the rest of a message from";
      default: return "its sends to be delivered";
    }
  }

  /// Polls `ready` until it returns true; between polls looks for failure notices and the deadline,
  /// and backs off from spinning (100 us) to yielding to short sleeps (after 5 ms). Oversubscribed
  /// (more ranks on the host than CPUs), it yields from the first poll and, after
  /// oversubscribed_spin, sleeps before every poll: a rank that spins takes the CPU from the peer
  /// it waits for (test_mpi, 4 ranks on 2 cores, MPICH: 95 s and 181 CPU-s with yields only,
  /// 38-60 s and 62-104 CPU-s with the sleeps). This rank's own failure (abort() from another
  /// thread) is looked at before every poll: one poll of many requests may take milliseconds, and
  /// a call aborted while its last sends drained must still fail.
  template <class Ready>
  void wait(wait_kind kind, int peer, Ready ready) {
    const char* what = wait_words(kind);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    // Published for peers' whereabouts queries (answer_whereabouts) while it lasts.
    struct published_wait {
      mpi_transport& t;
      published_wait(mpi_transport& self, wait_kind k, int p) : t(self) { t.waiting_ = {k, p}; }
      ~published_wait() { t.waiting_ = {}; }
      published_wait(const published_wait&) = delete;
      published_wait& operator=(const published_wait&) = delete;
    } published{*this, kind, peer};
    // The peers this wait needs are asked where they are whereabouts_grace before the deadline, so
    // that the timeout can say (their answers come while this wait polls on); not under a timeout
    // too short to leave them time to answer.
    const auto grace = whereabouts_grace();
    const auto ask_at = deadline - grace;
    bool asked = grace < min_whereabouts_grace;
    // When the close message of `closed_who`, a peer this wait still needs, was first seen.
    std::chrono::steady_clock::time_point closed_seen{};
    int closed_who = -1;
    for (unsigned polls = 0;; ++polls) {
      if (finalizing()) stop_for_finalize_here();  // each poll calls MPI
      if (failed_.load(std::memory_order_acquire)) rethrow_failure(own_wait_note(start, what, peer));
      if (ready()) return;
      if (polls % 64 == 0) {
        poll_control();
        if (failed_.load(std::memory_order_acquire) || watched_failed()) rethrow_failure(own_wait_note(start, what, peer));
        const auto now = std::chrono::steady_clock::now();
        if (!asked && now > ask_at) {
          asked = true;
          ask_whereabouts(peer >= 0 ? std::vector<int>{peer} : pending_send_destinations());
        }
        // (A rank that asked only now, after a stall past the deadline, gives the answers their time.)
        if (now > deadline && (grace < min_whereabouts_grace || now - whereabouts_asked_at_ >= grace))
          fail_out(errc::timeout, "timed out after " + std::to_string(timeout_.count()) +
                                      " ms waiting for " +
                                      (peer >= 0 ? what + (" " + peer_name(peer))
                                                 : send_peers_.empty() ? std::string(what) : send_wait_text()) +
                                      " (" + whereabouts_text(grace >= min_whereabouts_grace) + ")");
        const auto waited = now - start;
        if (waited > query_after) {
          if (peer >= 0) query(peer);
          else
            for (int p : send_peers_) query(p);
          // A peer that closed its communicator healthy (it left the job, or skipped this call)
          // sends nothing more: fail now rather than at the timeout.
          const int gone = closed_peer(peer);
          if (gone != closed_who) closed_who = gone, closed_seen = now;  // (none, or another peer: its own grace)
          // (ready() was false just now: asking again could match a message a recv then drops.)
          if (gone >= 0 && now - closed_seen > closed_peer_grace)
            fail_out(errc::transport, peer_name(gone) + " closed its communicator while " + peer_name(rank_) +
                                          " waits for " +
                                          (peer >= 0 ? what + (" " + peer_name(peer)) : send_wait_text()) +
                                          "; the job cannot continue");
        }
        if (waited > std::chrono::milliseconds(5)) std::this_thread::sleep_for(std::chrono::microseconds(50));
        else if (oversubscribed_ || waited > std::chrono::microseconds(100)) std::this_thread::yield();
      } else if (oversubscribed_) {
        if (std::chrono::steady_clock::now() - start > oversubscribed_spin)
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        else
          std::this_thread::yield();
      }
    }
  }

  /// The first of the peers a wait is for (`peer`, or, for -1, those of the sends not completed:
  /// a peer that received everything and then closed is no reason to fail) whose close message has
  /// come (looked at, not received: closing_duplicates takes it later); -1: none.
  int closed_peer(int peer) const {
    const auto closed = [&](int p) {
      int found = 0;
      return p != rank_ && MPI_Iprobe(p, close_tag, comm_, &found, MPI_STATUS_IGNORE) == MPI_SUCCESS && found != 0;
    };
    if (finalizing() || mpi_finalized()) return -1;
    if (peer >= 0) return closed(peer) ? peer : -1;
    for (const int p : send_destinations())  // a probe each; only a closed one's requests are asked
      if (closed(p) && send_pending_to(p)) return p;
    return -1;
  }

  /// What a query message holds after its leading query_code: the sender's record of a call and
  /// of the calls before it, so that the receiver can name an earlier call they disagree on.
  struct query_message {
    std::uint64_t token = 0;
    call_signature sig;
    call_signature before[published_call_history - 1];  ///< calls sig.seq - 1, - 2, ... (seq 0: not held)
  };
  /// The leading int of a query (failure notices lead with their errc, which is never negative).
  static constexpr int query_code = -1;

  /// What a rank does, as it answers a whereabouts query (answer_whereabouts): for a timeout's
  /// message, worded by detail::whereabouts as the threads and shm transports word theirs.
  struct whereabouts_message {
    std::uint64_t token = 0;
    std::uint64_t ask = 0;           ///< the query's number (the asker's whereabouts_ask_)
    call_signature call;             ///< the collective call announced last (seq 0: none)
    std::int32_t wait = 0;           ///< its wait_kind (0: not waiting)
    std::int32_t wait_peer = -1;     ///< the rank it waits for (-1: its sends' destinations)
  };
  /// The leading ints of a whereabouts query (a whereabouts_message of which token and ask count)
  /// and of its answer.
  static constexpr int whereabouts_query_code = -2;
  static constexpr int whereabouts_answer_code = -3;

  /// Takes in the control messages that arrived: signature queries (compared with this rank's
  /// record of the call) and a failure notice from any peer. At most once per
  /// control_poll_interval, unless `now_anyway`.
  void poll_control(bool now_anyway = false) {
    if (finalizing()) return;
    const auto now = std::chrono::steady_clock::now();
    if (!now_anyway && now - last_control_poll_ < control_poll_interval) {
      if (notice_pending_) send_notices();
      return;
    }
    last_control_poll_ = now;
    if (mpi_finalized()) return;  // (a failure() or a wait after MPI_Finalize): nothing can come
    for (;;) {
      int found = 0;
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      if (MPI_Improbe(MPI_ANY_SOURCE, control_tag, comm_, &found, &msg, &st) != MPI_SUCCESS || !found) {
        if (notice_pending_) send_notices();
        return;
      }
      int len = 0;
      MPI_Get_count(&st, MPI_BYTE, &len);
      std::string text(static_cast<std::size_t>(std::max(len, 0)), '\0');
      MPI_Mrecv(text.data(), len, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      errc code = errc::aborted;
      if (text.size() >= sizeof(int)) {
        int c = 0;
        std::memcpy(&c, text.data(), sizeof c);
        if (c == query_code) {
          if (text.size() == sizeof c + sizeof(query_message)) {
            query_message q;
            std::memcpy(&q, text.data() + sizeof c, sizeof q);
            if (q.token == token_) answer(st.MPI_SOURCE, q);
          }
          continue;
        }
        if (c == whereabouts_query_code || c == whereabouts_answer_code) {
          whereabouts_message w;
          if (text.size() == sizeof c + sizeof w) {
            std::memcpy(&w, text.data() + sizeof c, sizeof w);
            if (w.token != token_) continue;  // left over from an earlier transport
            if (c == whereabouts_query_code) answer_whereabouts(st.MPI_SOURCE, w.ask);
            else if (w.ask == whereabouts_ask_) whereabouts_answers_.emplace_back(st.MPI_SOURCE, w);
          }
          continue;
        }
        code = static_cast<errc>(c);
        text.erase(0, sizeof c);
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.load(std::memory_order_relaxed)) return;
      code_ = code;
      why_ = text;  // (own_failure_ stays false: a transport fails once)
      failed_.store(true, std::memory_order_release);  // a peer's failure: it told everyone already
      return;
    }
  }

  /// Sends `peer` this rank's records of the current call and those before it (query_message),
  /// once per call and peer; it compares them with its own (answer).
  void query(int peer) {
    if (finalizing() || current_.seq == 0 || peer == rank_ || queried_[static_cast<std::size_t>(peer)] == current_.seq) return;
    queried_[static_cast<std::size_t>(peer)] = current_.seq;
    query_message q;
    q.token = token_;
    q.sig = current_;
    for (std::uint64_t i = 0; i + 1 < published_call_history && i + 1 < current_.seq; ++i) {
      const std::uint64_t seq = current_.seq - 1 - i;
      if (history_[seq % published_call_history].seq == seq) q.before[i] = history_[seq % published_call_history];
    }
    send_control(peer, query_code, q);
  }

  /// How long before its deadline a wait asks the peers it needs where they are: a quarter of the
  /// timeout, at most 500 ms (an answer comes at the peer's next look at its control messages,
  /// within milliseconds if it waits on this communicator, never if it does not).
  std::chrono::milliseconds whereabouts_grace() const { return std::min(timeout_ / 4, std::chrono::milliseconds(500)); }
  /// Below this whereabouts_grace (a timeout under 40 ms) no peer is asked: too little time for an
  /// oversubscribed peer to answer, whose silence would then be misread.
  static constexpr std::chrono::milliseconds min_whereabouts_grace{10};

  /// Sends `peers` a whereabouts query (a new whereabouts_ask_: answers to earlier ones are
  /// dropped) and notes when, for whereabouts_text.
  void ask_whereabouts(std::vector<int> peers) {
    std::erase(peers, rank_);
    whereabouts_ask_ += 1;
    whereabouts_asked_ = std::move(peers);
    whereabouts_asked_at_ = std::chrono::steady_clock::now();
    whereabouts_answers_.clear();
    whereabouts_message w;
    w.token = token_;
    w.ask = whereabouts_ask_;
    for (const int p : whereabouts_asked_) send_control(p, whereabouts_query_code, w);
  }

  /// Answers rank `peer`'s whereabouts query `ask` with what this rank does now.
  void answer_whereabouts(int peer, std::uint64_t ask) {
    whereabouts_message w;
    w.token = token_;
    w.ask = ask;
    w.call = current_;
    w.wait = static_cast<std::int32_t>(waiting_.kind);
    w.wait_peer = waiting_.peer;
    send_control(peer, whereabouts_answer_code, w);
  }

  /// Sends `peer` a control message: `code`, then `body`'s bytes (kept until delivered).
  template <class Body>
  void send_control(int peer, int code, const Body& body) {
    if (finalizing()) return;
    auto buf = std::make_unique<std::byte[]>(sizeof(int) + sizeof body);
    std::memcpy(buf.get(), &code, sizeof(int));
    std::memcpy(buf.get() + sizeof(int), &body, sizeof body);
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(buf.get(), static_cast<int>(sizeof(int) + sizeof body), MPI_BYTE, peer, control_tag, comm_, &r) ==
        MPI_SUCCESS)
      query_sends_.emplace_back(r, std::move(buf));
  }

  /// Where the peers asked last (ask_whereabouts) are, from their answers: detail::whereabouts for
  /// each that answered; for one that did not, that it does not look at this communicator.
  /// `asked`: this wait asked them (else, as when none was asked, a guess).
  std::string whereabouts_text(bool asked) const {
    if (!asked || whereabouts_asked_.empty())
      return std::string(waiting_.peer < 0 && pending_send_destinations().size() > 1 ? "the peers are" : "the peer is") +
             " late, stuck, dead, or called something else";
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                              whereabouts_asked_at_);
    std::string s;
    for (const int p : whereabouts_asked_) {
      const auto a = std::find_if(whereabouts_answers_.begin(), whereabouts_answers_.end(),
                                  [&](const auto& e) { return e.first == p; });
      s += s.empty() ? "" : "; ";
      if (a == whereabouts_answers_.end()) {
        s += peer_name(p) + " did not answer in " + std::to_string(waited.count()) +
             " ms: it is in no call on this communicator (busy in its own code, or waiting on another "
             "communicator), stopped, or dead";
        continue;
      }
      const whereabouts_message& w = a->second;
      const std::string waits =
          w.wait != 0 ? collx::detail::wait_text(wait_words(static_cast<wait_kind>(w.wait)), w.wait_peer, rank_, level_world_ranks()) : "";
      s += collx::detail::whereabouts(peer_name(p), w.call.seq != 0, w.call, current_, message_seq_, waits, false);
    }
    return s;
  }

  /// A peer waiting in call theirs.seq sent its signature: a difference from this rank's record of
  /// that call fails the communicator (the notice tells the peer); a call this rank has not reached
  /// is compared when it announces it.
  void answer(int peer, const query_message& q) {
    if (q.sig.seq > current_.seq) {
      early_queries_.emplace_back(peer, q);
      return;
    }
    const call_signature& mine = history_[q.sig.seq % published_call_history];
    if (mine.seq == q.sig.seq && !(mine == q.sig)) fail(errc::mismatch, disagreement(mine, q.sig, peer, q.before));
  }

  /// The mismatch message for a message of rank `peer`'s call `theirs` that arrived in this rank's
  /// call `mine`. A peer behind this rank is compared with this rank's record of its call, which
  /// names the field they disagree on (not only that the calls are out of step).
  std::string explain(const call_signature& mine, const call_signature& theirs, int peer) const {
    const call_signature& then = history_[theirs.seq % published_call_history];
    // seq 0: a point-to-point message, which has no record here (history_'s unused slots have seq 0 too).
    if (theirs.seq != 0 && theirs.seq < mine.seq && then.seq == theirs.seq && !(then == theirs))
      return disagreement(then, theirs, peer);
    return describe_mismatch(mine, rank_, theirs, peer);
  }

  /// A message from a peer ahead of this call, or one whose earlier calls differ: sends it this
  /// rank's records (query) and waits up to 2 s for its notice naming the call and field they
  /// disagree on (it compares them with its own).
  /// @throws collx::error with that notice when it comes (else the caller reports what it saw).
  void await_answer(int peer) {
    query(peer);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!failed_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      poll_control();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (failed_.load(std::memory_order_acquire)) rethrow_failure();
  }

  /// The mismatch message for this rank's call `mine` against rank `peer`'s `theirs`; where they
  /// differ only in their earlier calls, the first of those whose records differ (this rank's
  /// history against `before`, the peer's records of the calls before `theirs`, when it sent them).
  std::string disagreement(const call_signature& mine, const call_signature& theirs, int peer,
                           const call_signature* before = nullptr) const {
    const std::string earlier =
        earlier_disagreement(mine, rank_, theirs, peer, [&](int r, std::uint64_t seq, call_signature& out) {
          if (r == rank_) {
            out = history_[seq % published_call_history];
            return out.seq == seq;
          }
          for (std::size_t i = 0; before && i + 1 < published_call_history; ++i)
            if (before[i].seq == seq && seq != 0) {
              out = before[i];
              return true;
            }
          return false;
        });
    if (!earlier.empty()) return earlier;
    return describe_mismatch(mine, rank_, theirs, peer) + " (rank " + std::to_string(rank_) + "'s " + describe_call(mine) +
           (current_.seq > mine.seq ? ", since gone on to call #" + std::to_string(current_.seq) : std::string()) +
           ")";
  }

  /// Fails this transport with `why` and tells every peer: "rank R failed: why" when the failure
  /// is this rank's own (`own`), `why` verbatim when it was adopted (adopt_failure).
  /// Without `notify` (MPI may not be called: MPI_Finalize began), the peers are not told.
  void fail_with_notice(errc code, const std::string& why, bool own, bool notify) noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failed_.load(std::memory_order_relaxed)) return;
      code_ = code;
      own_failure_ = own;
      try {
        why_ = why;
        notice_text_ = own ? reported_own(rank_, why) : why;
      } catch (...) {
      }
      failed_.store(true, std::memory_order_release);
      notice_pending_ = notify;
    }
    // MPI may be called here only from the thread that owns the transport, unless MPI allows any.
    if (notify && (level_ == MPI_THREAD_MULTIPLE || std::this_thread::get_id() == owner_)) send_notices();
  }

  /// Tells every peer this rank failed (once). Once MPI_Finalize began, only from stop_all
  /// (`at_finalize`), when no other thread of the process is in MPI.
  void send_notices(bool at_finalize = false) noexcept {
    if (mpi_finalized() || (finalizing() && !at_finalize)) return;  // no peer can hear it, or not now
    std::lock_guard<std::mutex> lock(mu_);
    if (!notice_pending_.exchange(false)) return;
    const int c = static_cast<int>(code_);
    notice_ = std::make_unique<std::string>(sizeof c, '\0');
    std::memcpy(notice_->data(), &c, sizeof c);
    *notice_ += notice_text_;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Isend(notice_->data(), static_cast<int>(notice_->size()), MPI_BYTE, p, control_tag, comm_, &r) ==
          MPI_SUCCESS)
        control_sends_.push_back(r);
    }
  }

  [[noreturn]] void fail_out(errc code, const std::string& why) {
    fail_with_notice(code, why, true, true);  // (in a member's open mpi_section)
    rethrow_failure();
  }
  /// Throws the failure, its text followed by `note` (this rank's own part, not sent to peers).
  [[noreturn]] void rethrow_failure(const std::string& note = {}) {
    if (notice_pending_) send_notices();
    settle_sends();
    throw_failure(note);
  }
  /// Throws the transport's failure (its code and text, then `note`), no MPI call.
  [[noreturn]] void throw_failure(const std::string& note = {}) {
    errc code;
    std::string why;
    {
      std::lock_guard<std::mutex> lock(mu_);
      code = code_;
      why = why_;
    }
    COLLX_THROW(code, why + note);
  }

  /// collx::detail::own_wait_note for a wait begun at `start` (as wait() names it) that a peer's timeout
  /// notice ended; "" for any other failure.
  std::string own_wait_note(std::chrono::steady_clock::time_point start, const char* what, int peer) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (waited < collx::detail::own_wait_note_after) return {};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (own_failure_ || code_ != errc::timeout) return {};
    }
    const std::string waited_for = peer >= 0 ? what + (" " + peer_name(peer))
                                   : send_peers_.empty() ? std::string(what)
                                                         : send_wait_text();
    return collx::detail::own_wait_note(peer_name(rank_), waited, waited_for);
  }

  /// A failed call is about to hand its buffers back to the user, who may free them: the sends
  /// still reading from them get up to settle_time to finish. Those a peer matched finish once MPI
  /// moves their data (this loop drives it); one that no peer matched reads no more than its
  /// eager part, which goes out here too. MPI cannot cancel a send, so past that time a send
  /// stays posted (the peer stopped taking part in MPI) and may still read its buffer.
  void settle_sends() noexcept {
    // Once per failure: a later call on the failed communicator fails at once. Not once
    // MPI_Finalize began: no MPI call then (the sends stay posted).
    if (settled_ || finalizing() || mpi_finalized()) return;
    settled_ = true;
    const auto until = std::chrono::steady_clock::now() + settle_time;
    for (;;) {
      int done = 0;
      if (sends_.empty()) break;
      // Unfinished past the time, or MPI failing to tell: kept, with their first pieces, for the
      // destructor (MPI may still read them).
      if (MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return;
      if (done) break;
      if (std::chrono::steady_clock::now() >= until) return;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    sends_.clear();
    send_peers_.clear();
    first_buffers_.clear();
  }

  mpi_options opt_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, level_ = MPI_THREAD_SINGLE, ranks_on_host_ = 1;
  bool oversubscribed_ = false;
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
  std::atomic<std::thread::id> owner_{};

  std::vector<MPI_Request> sends_;                          // posted since the last wait_sends
  std::vector<int> send_peers_;                             // their destinations
  std::vector<std::unique_ptr<std::byte[]>> first_buffers_;  // header + first piece of each send
  std::vector<std::byte> first_;                             // the received first message
  MPI_Request first_recv_ = MPI_REQUEST_NULL;                // its receive, until it completes
  std::vector<std::byte> staging_[2];                        // later pieces, double-buffered
  MPI_Request piece_recvs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

  std::mutex mu_;  // guards the failure state below (fail() may come from any thread)
  std::atomic<bool> failed_{false};
  std::atomic<bool> notice_pending_{false};
  errc code_ = errc::aborted;
  std::string why_;
  std::string notice_text_;  // what the peers read: why_, with "rank R failed: " when this rank's own
  bool own_failure_ = false;  // the failure is this rank's own, not a peer's notice or a watched level's
  std::unique_ptr<std::string> notice_;  // the control message; stays alive while it is being sent
  std::vector<MPI_Request> control_sends_;

  // Signature queries (the owner thread only).
  std::uint64_t token_ = 0;                                            // agreed at construction
  call_signature current_;                                             // the call announced last
  std::chrono::steady_clock::time_point announced_at_{};               // ... and when
  call_signature history_[published_call_history];                     // call k at k % history
  std::vector<std::uint64_t> queried_;                                 // per peer: the call last queried
  std::vector<std::pair<int, query_message>> early_queries_;          // for calls not reached yet
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::byte[]>>> query_sends_;  // until delivered (queries, answers)
  std::uint64_t message_seq_ = 0;  // the call of the message sent or received last (0: point-to-point)
  struct current_wait {
    wait_kind kind{};  // (0: not waiting)
    int peer = -1;
  } waiting_;                                                          // published to whereabouts queries
  std::uint64_t whereabouts_ask_ = 0;                                  // the whereabouts query sent last
  std::vector<int> whereabouts_asked_;                                 // ... to these peers
  std::chrono::steady_clock::time_point whereabouts_asked_at_{};       // ... then
  std::vector<std::pair<int, whereabouts_message>> whereabouts_answers_;  // their answers so far
  std::chrono::steady_clock::time_point last_control_poll_{};                      // poll_control's last look
  bool settled_ = false;                                                           // settle_sends ran (owner thread)

  // MPI_Finalize (live_transports::stop_all, mpi_section).
  std::atomic<int> in_use_{0};              // mpi_sections open
  std::atomic<bool> interrupted_{false};    // MPI_Finalize failed a call in progress: its peers are told
  /// In live_transports from before the constructor's body (declared last: the other members are
  /// made by then; the body's MPI calls are in an mpi_section) to the end of the destructor.
  struct registration {
    mpi_transport* t;
    explicit registration(mpi_transport* self) : t(self) { detail::live_transports::instance().add(t); }
    ~registration() { detail::live_transports::instance().remove(t); }
    registration(const registration&) = delete;
    registration& operator=(const registration&) = delete;
  } registration_{this};
};

namespace detail {
inline void live_transports::stop_all() noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  finalizing_flag().store(true);
  for (mpi_transport* t : list_) t->stop_for_finalize();
  const auto until = std::chrono::steady_clock::now() + mpi_transport::finalize_stop_wait;
  for (mpi_transport* t : list_)
    while (t->in_use_.load() != 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (mpi_transport* t : list_) t->tell_peers_at_finalize();
}

inline int at_mpi_finalize(MPI_Comm, int, void*, void*) {
  live_transports::instance().stop_all();
  closing_duplicates::instance().finish_at_finalize();
  return MPI_SUCCESS;
}
}  // namespace detail

namespace detail {
/// Which function a rank connects with. Exchanged first: connecting runs MPI collectives, which
/// have no timeout, and those of connect and connect_hierarchical (or of its two intra_node
/// choices) do not match, so ranks that called different ones waited in MPI for ever.
enum class connect_entry : int { connect = 1, hierarchical_shm = 2, hierarchical_mpi = 3 };

inline const char* connect_entry_name(int e) {
  switch (e) {
    case 1: return "connect";
    case 2: return "connect_hierarchical (intra_node::shm)";
    case 3: return "connect_hierarchical (intra_node::mpi)";
    default: return "another function";
  }
}

/// One MPI_Iallgather of each rank's connect_entry over comm, waited for up to `timeout`
/// (allgather_within: a rank that never calls connect, or waits in another MPI call on comm, would
/// hold the others in a blocking one for ever). Collective over comm.
/// @throws collx::error invalid_argument on every rank when the ranks' entries differ, naming which
///   ranks called which function; timeout when not every rank joined within `timeout` (comm is
///   unusable after it); transport (an MPI call failed).
inline void agree_on_connect(MPI_Comm comm, connect_entry mine, const char* who, std::chrono::milliseconds timeout) {
  const std::vector<int> all = allgather_within(comm, std::vector<int>{static_cast<int>(mine)}, MPI_INT, timeout, who,
                                                "MPI_Iallgather(how each rank connects)");
  const int size = static_cast<int>(all.size());
  if (std::all_of(all.begin(), all.end(), [&](int e) { return e == all[0]; })) return;
  std::string called;  // "ranks 0, 2 called connect; ranks 1, 3 called connect_hierarchical (...)"
  std::vector<int> seen;
  for (int e : all) {
    if (std::find(seen.begin(), seen.end(), e) != seen.end()) continue;
    seen.push_back(e);
    std::string ranks;
    int listed = 0, count = 0;
    for (int r = 0; r < size; ++r)
      if (all[static_cast<std::size_t>(r)] == e && ++count <= 8) ranks.append(listed++ ? ", " : "").append(std::to_string(r));
    if (count > 8) ranks += ", ... (" + std::to_string(count) + " ranks)";
    called.append(called.empty() ? "" : "; ").append(count == 1 ? "rank " : "ranks ").append(ranks).append(" called ").append(connect_entry_name(e));
  }
  COLLX_THROW(errc::invalid_argument, std::string(who) + ": the ranks did not all call the same function: " + called +
                                          "; every rank of the MPI communicator must call the same one");
}
}  // namespace detail

/// A communicator over every rank of `comm` whose messages go over MPI (a private duplicate of
/// `comm`; rank and world size are comm's). Collective over comm: every rank calls connect (ranks
/// that call connect_hierarchical instead get invalid_argument, every one of them), within
/// mopt.connect_timeout of the others. After a timeout here end the job (MPI_Abort): the step that
/// timed out stays pending in MPI (a collective cannot be cancelled), which leaves comm unusable,
/// and under Open MPI a pending MPI_Comm_idup keeps this process from making any communicator.
/// @throws collx::error transport, invalid_argument (see mpi_transport; ranks that disagree on the
///   function, detail::agree_on_connect), timeout (a rank did not call connect within
///   mopt.connect_timeout, or waits in another MPI call on comm: comm is unusable after it)
inline communicator connect(MPI_Comm comm, const communicator_options& opt = {}, const mpi_options& mopt = {}) {
  require_mpi_running("collx::mpi::connect");
  require_communicator(comm, "collx::mpi::connect");
  require_thread_support();
  detail::agree_on_connect(comm, detail::connect_entry::connect, "collx::mpi::connect", mopt.connect_timeout);
  return communicator(std::make_shared<mpi_transport>(comm, mopt), opt);
}

}  // namespace mpi
}  // namespace v0
}  // namespace collx
