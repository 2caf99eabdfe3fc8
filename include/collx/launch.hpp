/// @file launch.hpp
/// Starting ranks as local processes: run_processes (a function per rank, for tests and tools) and
/// launch_program (the engine of the collx-run launcher).
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <collx/bootstrap/env.hpp>
#include <collx/communicator.hpp>
#include <collx/detail/cpus.hpp>
#include <collx/error.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/placement.hpp>
#include <collx/transport/shm.hpp>

namespace collx {
inline namespace v0 {

/// How one rank's process ended.
struct process_exit {
  int rank = -1;         ///< the rank the process ran
  pid_t pid = -1;        ///< its process id
  int exit_code = -1;    ///< exit status, or -1 if killed by a signal
  int term_signal = 0;   ///< the signal that killed it, or 0
  /// True if it exited with status 0.
  bool ok() const noexcept { return exit_code == 0 && term_signal == 0; }
};

namespace detail {
/// A job id no other job on this machine has: parent pid, a counter, and the time.
inline std::string fresh_job_id(const char* prefix) {
  static std::atomic<unsigned> counter{0};
  const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::string(prefix) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(static_cast<unsigned long long>(t) % 1000000007ull);
}

/// Whether COLLX_BIND asks for pinning: unset or "core" yes, "none" no (case-insensitive).
/// @throws collx::error(errc::invalid_argument) for any other value; the launchers ask before
///         they fork, so that a bad value is one message, not one per rank.
inline bool binding_wanted() {
  const auto mode = env::get("COLLX_BIND");
  if (mode && env::lower(*mode) == "none") return false;
  if (mode && env::lower(*mode) != "core") env::reject("COLLX_BIND", *mode, "core or none");
  return true;
}

/// In a rank just forked by `launcher`: signal `sig` when the launcher dies, so that ranks do not
/// run on (or wait for peers until their timeout) after the launcher was killed with SIGKILL, which
/// it cannot forward. Only this process gets it (what it starts must pass it on). The launcher may
/// have died before the call: then the rank exits at once. `sig` must end the process: a handler
/// inherited from the launcher would swallow it (launch_program resets them first).
inline void die_with_launcher(pid_t launcher, int sig) {
  ::prctl(PR_SET_PDEATHSIG, sig);
  if (::getppid() != launcher) ::_exit(128 + sig);
}

/// Pins the calling process to one CPU of its allowed set, chosen by local rank from the machine's
/// topology (topo::pin_cpus: ranks in contiguous blocks per NUMA node), when the ranks fit on the
/// CPUs (as Open MPI binds by default): an unpinned rank that the scheduler moves or preempts turns
/// a 1 us hand-off into a 100 us futex wake-up, and ranks crowded onto one node share its memory
/// bandwidth. COLLX_BIND=none turns it off.
inline void bind_to_core(int local_rank, int local_world_size) {
  if (!binding_wanted()) return;
  bool from_mask = false;
  const std::vector<int> allowed = allowed_cpus(&from_mask).list();
  if (!from_mask) return;  // the mask cannot be read: pinning could leave the process's cpuset
  topo::topology machine;
  try {
    machine = topo::discover_cpus();
  } catch (const std::exception&) {  // no sysfs: no NUMA nodes, the allowed CPUs in order
  }
  const std::vector<int> cpus = topo::pin_cpus(machine, allowed, local_world_size);
  if (cpus.empty()) return;  // oversubscribed: let the scheduler spread them
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(static_cast<std::size_t>(cpus[static_cast<std::size_t>(local_rank)]), &one);
  ::sched_setaffinity(0, sizeof one, &one);
}

/// The launching program's name for its messages ("collx-run", or a tool such as collx-perf that
/// launches itself): glibc's program_invocation_short_name.
inline const char* launcher_name() noexcept { return program_invocation_short_name; }

/// launch_program's addition to its line on the first failure: " (rank 3 had already exited with
/// status 0)", for the ranks in `ranks` (at most 8 named, then how many more); "" for none.
inline std::string exited_early_text(const std::vector<std::size_t>& ranks) {
  if (ranks.empty()) return {};
  std::vector<std::size_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string text = sorted.size() == 1 ? " (rank " : " (ranks ";
  for (std::size_t i = 0; i < sorted.size() && i < 8; ++i) text += (i ? ", " : "") + std::to_string(sorted[i]);
  if (sorted.size() > 8) text += " and " + std::to_string(sorted.size() - 8) + " more";
  return text + " had already exited with status 0)";
}

/// Why a script's `#!` interpreter cannot be found, else empty: execvp then fails with ENOENT,
/// "No such file or directory", for a file that is there. As Linux reads the line, the name ends
/// at a space, a tab or the newline, not at a carriage return: a script with CRLF line endings
/// names "/bin/sh\r". No verdict (empty) for what is not a regular file, a line longer than the
/// 255 bytes read, or an interpreter whose stat fails otherwise than as missing.
inline std::string missing_interpreter(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  char head[256] = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return {};
  const ssize_t got = ::read(fd, head, sizeof head - 1);
  ::close(fd);
  if (got < 2 || head[0] != '#' || head[1] != '!') return {};
  std::size_t b = 2;
  while (head[b] == ' ' || head[b] == '\t') ++b;
  std::size_t e = b;
  while (head[e] && head[e] != ' ' && head[e] != '\t' && head[e] != '\n') ++e;
  if (!head[e] && got == static_cast<ssize_t>(sizeof head - 1)) return {};  // the line goes on past what was read
  std::string interpreter(head + b, e - b);
  if (interpreter.empty() || ::stat(interpreter.c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR)) return {};
  if (interpreter.back() == '\r') {
    interpreter.pop_back();
    return "its #! line ends in a carriage return (CRLF line endings: the interpreter it names is \"" + interpreter +
           "\\r\")";
  }
  return "its interpreter " + interpreter + " (the #! line) does not exist";
}

/// The paths execvp tries, in order, for a program name without '/': each directory of PATH (an
/// empty one is the current directory) followed by "/" and the name. Without PATH, glibc's
/// default, confstr(_CS_PATH): /bin and /usr/bin.
inline std::vector<std::string> path_candidates(const char* program) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/bin:/usr/bin";
  std::vector<std::string> candidates;
  for (std::size_t at = 0;;) {
    const std::size_t colon = dirs.find(':', at);
    const std::string dir = dirs.substr(at, colon == std::string::npos ? std::string::npos : colon - at);
    candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + program);
    if (colon == std::string::npos) return candidates;
    at = colon + 1;
  }
}

/// Empty if execvp could run `program` (a path, or a name found on PATH, executable), else why not:
/// the errno text execvp would fail with; "Is a directory" for a directory given as a path (execvp
/// says EACCES, "Permission denied", which sends the user looking at permissions); for a script
/// whose `#!` interpreter does not exist, that (execvp: "No such file or directory"; on PATH,
/// the first such script found, with its path, when no later directory has one that runs).
inline std::string why_not_runnable(const char* program) {
  if (!*program) return "the program name is empty";
  const bool is_path = std::strchr(program, '/') != nullptr;
  const auto check = [is_path](const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return is_path ? EISDIR : EACCES;
    return ::access(path.c_str(), X_OK) == 0 ? 0 : errno;
  };
  if (is_path) {
    const int e = check(program);
    return e != 0 ? std::string(std::strerror(e)) : missing_interpreter(program);
  }
  int err = ENOENT;
  std::string first_script;  // why the first script found cannot run, when execvp goes on past it
  for (const std::string& candidate : path_candidates(program)) {
    const int e = check(candidate);
    if (e == 0) {
      const std::string why = missing_interpreter(candidate);
      if (why.empty()) return {};
      if (first_script.empty()) first_script = candidate + ": " + why;  // execvp's ENOENT: it tries the next directory
    } else if (e != ENOENT) {
      err = e;  // as execvp: a file found but not executable says EACCES
    }
  }
  return err != ENOENT || first_script.empty() ? std::string(std::strerror(err)) : first_script;
}

/// Whether the file at `path` begins with the ELF magic number (is a program for some machine, not
/// a script).
inline bool is_elf(const char* path) {
  char magic[4] = {};
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  const ssize_t got = ::read(fd, magic, sizeof magic);
  ::close(fd);
  return got == 4 && std::memcmp(magic, "\x7f" "ELF", 4) == 0;
}

/// execvp, less one of its fallbacks: execvp runs any file the kernel refuses to load (ENOEXEC)
/// with /bin/sh, as POSIX asks for a script without a `#!` line; an ELF file it refuses (built
/// for another machine, or cut short) was then read as shell commands, and the user saw the
/// shell's "Syntax error" about binary junk. Here such a file fails with ENOEXEC; a script without
/// `#!` still runs with /bin/sh. The PATH search is execvp's (glibc): a name with no '/' is tried
/// in each PATH directory (empty: the current one); EACCES is remembered and the search goes on,
/// as it does past a missing file; any other failure ends it. Returns only on failure, with errno
/// set. For launch_program's child between fork and exec, which allocates already (setenv).
inline void exec_program(char* const argv[]) {
  const auto try_path = [argv](const char* path) {
    ::execv(path, argv);
    if (errno != ENOEXEC || is_elf(path)) return errno;
    std::vector<char*> with_shell{const_cast<char*>("/bin/sh"), const_cast<char*>(path)};
    for (char* const* a = argv + 1; *a; ++a) with_shell.push_back(*a);
    with_shell.push_back(nullptr);
    ::execv("/bin/sh", with_shell.data());
    return errno;
  };
  const char* program = argv[0];
  if (std::strchr(program, '/')) {
    errno = try_path(program);
    return;
  }
  bool denied = false;
  for (const std::string& candidate : path_candidates(program)) {
    const int e = try_path(candidate.c_str());
    if (e == EACCES) denied = true;
    else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ENODEV && e != ETIMEDOUT) {
      errno = e;
      return;
    }
  }
  errno = denied ? EACCES : ENOENT;
}

inline process_exit wait_for(int rank, pid_t pid) {
  process_exit e;
  e.rank = rank;
  e.pid = pid;
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st)) e.exit_code = WEXITSTATUS(st);
  else if (WIFSIGNALED(st)) e.term_signal = WTERMSIG(st);
  return e;
}

/// Sends `sig` to the process group of every rank still running (each rank leads its own group, so
/// what it started gets the signal too). Only ranks not yet reaped (pid > 0): kill(-1, ...) would
/// signal every process the caller may signal, and kill(0, ...) the caller's own group.
inline void signal_ranks(const std::vector<pid_t>& pids, int sig) {
  for (pid_t p : pids)
    if (p > 0) ::kill(-p, sig);
}

/// Ends a start that could not fork every rank of job `job`: kills the ranks started (`pids`; their
/// process groups where each leads one, `groups`), reaps them, and unlinks the job's rendezvous
/// segment if one of them created it while it waited for the others (otherwise it would stay in
/// /dev/shm until a later start's stale-segment sweep), and its split groups' stale ones
/// (shm_transport::remove_if_stale). A segment whose creator still runs (another job given the
/// same COLLX_JOB_ID) is left alone; one that names no creator yet is removed (no rank of this
/// start still runs to make it). Then throws errc::system for fork's error `fork_errno` as
/// `launcher` (the caller's name) saw it starting rank pids.size() of `world_size`.
[[noreturn]] inline void abandon_start(const std::vector<pid_t>& pids, const std::string& job, bool groups,
                                       int fork_errno, const char* launcher, int world_size) {
  if (groups) signal_ranks(pids, SIGKILL);
  else
    for (pid_t p : pids) ::kill(p, SIGKILL);
  for (std::size_t i = 0; i < pids.size(); ++i) wait_for(static_cast<int>(i), pids[i]);
  detail::transport_impl::shm_transport::remove_if_stale(job, pids);
  COLLX_THROW(errc::system, std::string(launcher) + ": cannot start rank " + std::to_string(pids.size()) + " of " +
                                std::to_string(world_size) + ": fork: " + std::strerror(fork_errno) +
                                (fork_errno == EAGAIN ? " (a process limit: RLIMIT_NPROC, ulimit -u)" : ""));
}
}  // namespace detail

/// Forks `world_size` processes (each pinned to one CPU when they fit, see COLLX_BIND); process r connects to the others over shared memory as rank r and
/// runs fn(communicator&). fn may return void (exit status 0) or an int (the exit status). An
/// exception in fn is printed to stderr with the rank and gives exit status 1. Returns how every
/// process ended, in rank order, after all ended (a rank that failed does not make it throw: check
/// each process_exit::ok()); a segment the job left (a rank killed while it started) is removed then,
/// and shared buffers its ranks were killed making. The processes get SIGKILL if the caller dies. The caller should have
/// no other threads running.
/// @throws collx::error(errc::invalid_argument) for world_size < 1 or a bad COLLX_BIND, before
///         anything starts;
///         (errc::system) if fork fails (processes already started are killed, and the job's
///         rendezvous segment removed).
template <class F>
[[nodiscard]] std::vector<process_exit> run_processes(int world_size, F&& fn, const communicator_options& opt = {},
                                        const shm_options& shm = {}) {
  if (world_size < 1) COLLX_THROW(errc::invalid_argument, "run_processes: world size must be >= 1");
  const std::string job = detail::fresh_job_id("rp");
  (void)detail::binding_wanted();
  const pid_t parent = ::getpid();
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < world_size; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) detail::abandon_start(pids, job, false, errno, "run_processes", world_size);
    if (pid == 0) {
      int code = 0;
      detail::die_with_launcher(parent, SIGKILL);  // the caller's own SIGTERM handler may be inherited
      try {
        detail::bind_to_core(r, world_size);
        launch_info info{r, world_size, r, world_size, job, "run_processes"};
        communicator comm = connect_shm(info, opt, shm);
        if constexpr (std::is_convertible_v<std::invoke_result_t<F&, communicator&>, int>) code = fn(comm);
        else fn(comm);
      } catch (const std::exception& e) {
        // collx's errors mostly name the rank already ("rank 3/4 allreduce#2...": no second prefix).
        const std::string what = e.what(), me = "rank " + std::to_string(r);
        const bool named = what.rfind(me, 0) == 0 && what.size() > me.size() && std::strchr("/: ", what[me.size()]);
        std::fprintf(stderr, "%s%s\n", named ? "" : (me + ": ").c_str(), what.c_str());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "rank %d: unknown exception\n", r);
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<process_exit> out;
  for (int r = 0; r < world_size; ++r) out.push_back(detail::wait_for(r, pids[static_cast<std::size_t>(r)]));
  detail::transport_impl::shm_transport::remove_if_stale(job, pids);
  return out;
}

namespace detail {
/// The signal launch_program got (SIGINT, SIGTERM, SIGHUP) and forwards to the ranks; 0 if none.
inline volatile std::sig_atomic_t launch_signal = 0;
inline void launch_on_signal(int sig) { launch_signal = sig; }

/// Installs launch_on_signal for SIGINT, SIGTERM and SIGHUP (without SA_RESTART) for its lifetime.
class forward_signals {
 public:
  forward_signals() {
    launch_signal = 0;
    struct sigaction sa{};
    sa.sa_handler = launch_on_signal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < 3; ++i) ::sigaction(signals_[i], &sa, &old_[i]);
  }
  ~forward_signals() {
    for (std::size_t i = 0; i < 3; ++i) ::sigaction(signals_[i], &old_[i], nullptr);
  }
  forward_signals(const forward_signals&) = delete;
  forward_signals& operator=(const forward_signals&) = delete;

 private:
  static constexpr int signals_[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};
}  // namespace detail

/// Runs `argv` as `world_size` local processes with COLLX_RANK, COLLX_WORLD_SIZE, COLLX_LOCAL_RANK,
/// COLLX_LOCAL_WORLD_SIZE and COLLX_JOB_ID set (the job id is kept if already set; a launcher that
/// is itself a rank of a start, with COLLX_LAUNCH_ID and COLLX_RANK set, appends ".rank") and
/// COLLX_LAUNCH_ID naming this start (so that two starts given one job id fail apart), each pinned to
/// one CPU when they fit (COLLX_BIND) and leading its own process group. When a process fails
/// (non-zero status or a signal), a line on stderr says which, and the other ranks' process groups
/// get SIGTERM, then SIGKILL after `grace`; so do the groups of the failed rank and of ranks that
/// end after it (what they started and left running), until `grace` is over even when every rank
/// has ended. Ranks that exited 0 before the failure are not followed; that line names them ("(rank
/// 1 had already exited with status 0)": a rank that returned early is often why its peers
/// failed). SIGINT, SIGTERM and SIGHUP sent to the caller while it waits are forwarded to every
/// rank's group (as mpirun does), with the same escalation. Waits only for its own ranks (other
/// children of the caller are left alone). Returns the first failure's
/// status (128 + signal for a signal, also for a forwarded one), or 0. Ranks found ended together
/// are told apart by how: one killed by a signal other than SIGABRT is the first failure over one
/// that exited non-zero or aborted (a rank that sees a peer die fails with an error just after
/// it); a rank that exits with an error while a peer's process is a zombie not yet reapable (a
/// multi-threaded process killed by a signal is one until its last thread ends) waits up to 1 s
/// for that peer, which is then found ended together with it. A segment the job left (a rank killed while it started) is removed once every rank ended,
/// and shared buffers (shm_buffer) its ranks were all killed making.
/// The ranks (the processes started, not what they start in turn) get SIGTERM if the caller dies,
/// even of SIGKILL.
/// @throws collx::error(errc::invalid_argument) before starting anything for world_size < 1, a null
/// argv or argv[0], a program that cannot be run (not found on PATH, not executable) or a bad
/// COLLX_BIND, so that one message says so
/// instead of one per rank; collx::error(errc::system) if fork fails (the ranks already started
/// are killed, and the job's rendezvous segment removed).
inline int launch_program(int world_size, char* const argv[], std::chrono::milliseconds grace = std::chrono::seconds(3)) {
  if (world_size < 1 || !argv || !argv[0]) COLLX_THROW(errc::invalid_argument, "launch_program: need N >= 1 and a program");
  if (const std::string why = detail::why_not_runnable(argv[0]); !why.empty())
    COLLX_THROW(errc::invalid_argument, std::string("cannot run ") + argv[0] + ": " + why);
  (void)detail::binding_wanted();
  std::string job = env::get("COLLX_JOB_ID").value_or(detail::fresh_job_id("run"));
  // Started as a rank of another start (collx-run inside collx-run): the job id it inherited is
  // its siblings' too, whose own jobs would collide with this one; its rank sets it apart.
  if (env::get("COLLX_LAUNCH_ID"))
    if (const auto rank = env::get("COLLX_RANK")) job += "." + *rank;
  const detail::forward_signals forwarding;
  const pid_t parent = ::getpid();
  // This start, apart from any other given the same COLLX_JOB_ID: no other process has this pid
  // with this start time.
  const std::string launch_id = std::to_string(parent) + "." + std::to_string(detail::own_start_time());
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (int r = 0; r < world_size; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) detail::abandon_start(pids, job, true, errno, "launch_program", world_size);
    if (pid == 0) {
      ::setpgid(0, 0);  // its own group: a failure elsewhere stops what it started too
      for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, SIG_DFL);  // forward_signals' handlers, as exec resets them
      detail::die_with_launcher(parent, SIGTERM);
      ::setenv("COLLX_RANK", std::to_string(r).c_str(), 1);
      ::setenv("COLLX_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("COLLX_LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("COLLX_LOCAL_WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("COLLX_JOB_ID", job.c_str(), 1);
      ::setenv("COLLX_LAUNCH_ID", launch_id.c_str(), 1);
      detail::bind_to_core(r, world_size);
      detail::exec_program(argv);
      const int e = errno;
      std::fprintf(stderr, "%s: cannot run %s: %s%s\n", detail::launcher_name(), argv[0], std::strerror(e),
                   e == ENOEXEC ? " (an ELF file this machine cannot load: built for another machine, or damaged)" : "");
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so the group exists before any signal (either call may lose the race)
    pids.push_back(pid);
  }
  const std::vector<pid_t> rank_pids = pids;  // pids[r] becomes -1 once rank r is reaped
  int first_failure = 0;
  std::size_t alive = pids.size();
  auto deadline = std::chrono::steady_clock::time_point::max();
  // The groups of ranks reaped once the job is failing, the failed rank's among them: what such a
  // rank started may outlive it (`sh -c 'prog'` killed while prog runs) and is stopped with the
  // others (the others' groups are signalled while their leaders live). Only those: an empty
  // group's id may be reused by a new process, which the grace period makes unlikely.
  std::vector<pid_t> reaped_groups;
  // Ranks that exited 0 before the first failure, named with it: a rank that left early (an early
  // return, a skipped call) is often why its peers failed, and its status alone does not show it.
  std::vector<std::size_t> exited_ok;
  const auto stop_others = [&](int status) {
    if (!first_failure) first_failure = status;
    detail::signal_ranks(pids, SIGTERM);
    detail::signal_ranks(reaped_groups, SIGTERM);
    deadline = std::min(deadline, std::chrono::steady_clock::now() + grace);  // a later stop does not extend it
  };
  while (alive) {
    if (const int sig = detail::launch_signal) {
      detail::launch_signal = 0;
      detail::signal_ranks(pids, sig);
      detail::signal_ranks(reaped_groups, sig);
      if (!first_failure) first_failure = 128 + sig;
      deadline = std::min(deadline, std::chrono::steady_clock::now() + grace);  // signals sent again do not extend it
    }
    // The ranks that ended since the last pass. Of several failures, one killed by a signal
    // comes first: its peers exit with an error when they see it gone, often before this pass.
    struct ended_rank {
      std::size_t rank;
      pid_t pid;
      int st;
    };
    std::vector<ended_rank> ended;
    const std::size_t alive_before = alive;
    // Reaps rank r if it ended; false while it runs (or the wait was interrupted).
    const auto reap = [&](std::size_t r) {
      int st = 0;
      const pid_t got = ::waitpid(pids[r], &st, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) return false;
      if (got > 0) ended.push_back({r, pids[r], st});  // else not ours to wait for any more (ECHILD)
      pids[r] = -1, --alive;
      return true;
    };
    for (std::size_t r = 0; r < pids.size(); ++r)
      if (pids[r] > 0) reap(r);
    // A rank that exits with an error has often seen a peer die whose process cannot be reaped
    // yet: a multi-threaded process killed by a signal is a zombie (what its peers read as dead)
    // until its last thread ends, later still while it dumps core. Wait for such a peer (up to
    // 1 s) before naming the first failure, so that the death is the one named. A signal to
    // forward (Ctrl-C) ends the wait: it is passed on at the top of the next pass.
    if (!first_failure && std::any_of(ended.begin(), ended.end(), [](const ended_rank& e) { return e.st != 0; })) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      for (std::size_t r = 0; r < pids.size(); ++r)
        if (pids[r] > 0 && detail::process_dead(pids[r], 0))
          while (!reap(r) && !detail::launch_signal && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    // SIGABRT aside: a program that does not catch collx::error aborts when a peer's failure reaches it.
    std::stable_partition(ended.begin(), ended.end(), [](const ended_rank& e) { return WIFSIGNALED(e.st) && WTERMSIG(e.st) != SIGABRT; });
    if (!first_failure)
      for (const ended_rank& e : ended)
        if (WIFEXITED(e.st) && WEXITSTATUS(e.st) == 0) exited_ok.push_back(e.rank);
    for (const ended_rank& e : ended) {
      const int status = WIFEXITED(e.st) ? WEXITSTATUS(e.st) : 128 + WTERMSIG(e.st);
      if (status != 0 || first_failure) reaped_groups.push_back(e.pid);  // SIGKILL after the grace period
      if (status == 0 || first_failure) continue;
      const std::string early = detail::exited_early_text(exited_ok);
      if (WIFEXITED(e.st))
        std::fprintf(stderr, "%s: rank %zu (pid %d) exited with status %d; stopping the other ranks%s\n",
                     detail::launcher_name(), e.rank, static_cast<int>(e.pid), status, early.c_str());
      else
        std::fprintf(stderr, "%s: rank %zu (pid %d) was killed by signal %d (%s); stopping the other ranks%s\n",
                     detail::launcher_name(), e.rank, static_cast<int>(e.pid), WTERMSIG(e.st), ::strsignal(WTERMSIG(e.st)),
                     early.c_str());
      stop_others(status);
    }
    const bool reaped = alive != alive_before;
    if (first_failure && std::chrono::steady_clock::now() > deadline) {  // grace period over
      detail::signal_ranks(pids, SIGKILL);
      detail::signal_ranks(reaped_groups, SIGKILL);
      deadline = std::chrono::steady_clock::time_point::max();
    }
    if (alive && !reaped) std::this_thread::sleep_for(std::chrono::milliseconds(first_failure ? 10 : 20));  // 50 looks a second: nothing next to a job
  }
  // Every rank ended; what the failed ones started may not have (SIGTERM ignored or handled): the
  // rest of the grace period, then SIGKILL. kill(-group, 0) fails once a group has no member.
  if (first_failure && !reaped_groups.empty()) {
    const auto members_left = [&] {
      for (pid_t g : reaped_groups)
        if (::kill(-g, 0) == 0) return true;
      return false;
    };
    while (deadline != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() < deadline &&
           members_left())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    detail::signal_ranks(reaped_groups, SIGKILL);
  }
  detail::transport_impl::shm_transport::remove_if_stale(job, rank_pids);
  return first_failure;
}

/// Whether a program that can also start its own ranks (`collx-perf --ranks N`, the examples'
/// `--ranks N`, with run_processes or launch_program) should instead join a launched job as one of
/// its ranks: true when a launcher started this process (bootstrap::launcher_in_environment) and
/// its job has more than this one process, or collx-run started it (COLLX_RANK and
/// COLLX_WORLD_SIZE set: `collx-run -n 1` asks for one rank), or `requested_ranks` < 2 (0: not
/// asked). One process that another launcher started alone and that is asked for more ranks
/// starts them itself, as in an interactive `srun --pty bash` step. A caller that joins should
/// refuse a `requested_ranks` other than the job's world size (as the examples and collx-perf
/// do: collx-perf says "--ranks 4 but the launcher started 2 ranks").
/// @throws collx::error(errc::invalid_argument) if the launcher's variables are malformed or
/// contradict each other (bootstrap::from_environment).
inline bool joins_launched_job(int requested_ranks) {
  if (!bootstrap::launcher_in_environment()) return false;
  if (requested_ranks < 2) return true;
  const launch_info job = bootstrap::from_environment();
  return job.world_size > 1 || job.source == "collx-run";
}

}  // namespace v0
}  // namespace collx
