// collx-run: starts N local processes of a program as the ranks of one collx job.
//   collx-run -n N [--] program [args...]
// Each process gets COLLX_RANK, COLLX_WORLD_SIZE, COLLX_LOCAL_RANK, COLLX_LOCAL_WORLD_SIZE and one
// COLLX_JOB_ID. If a rank fails, the others are terminated; the exit status is the first failure's.
#include <collx/launch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static const char* const usage_text =
    "usage: collx-run -n N [--] program [args...]\n"
    "  runs N processes of program as ranks 0..N-1 of one job on this machine (1 <= N <= 4096)\n"
    "  -n N, -np N, --np N, -nN, --np=N   number of ranks (the spellings mpirun takes)\n"
    "  -h, --help                          this text\n"
    "sets in each rank: COLLX_RANK, COLLX_WORLD_SIZE, COLLX_LOCAL_RANK, COLLX_LOCAL_WORLD_SIZE,\n"
    "  COLLX_JOB_ID (kept if set), COLLX_LAUNCH_ID\n"
    "reads: COLLX_BIND=core|none (pin each rank to a CPU when they fit; default core); checks\n"
    "  COLLX_TIMEOUT, COLLX_SEGMENT_BYTES, COLLX_ALGO, COLLX_CMA, COLLX_SHM_BYTES_PER_PEER,\n"
    "  COLLX_CONNECT_TIMEOUT, COLLX_DEBUG and COLLX_DEBUG_FILE, which every rank would refuse,\n"
    "  before starting any\n"
    "when a rank fails, the others get SIGTERM, then SIGKILL 3 s later; SIGINT, SIGTERM and SIGHUP\n"
    "  are forwarded to every rank\n"
    "exit status: the first failure's (128 + signal for a signal), 0 if every rank exits 0,\n"
    "  2 for a usage error, 127 if the program cannot be run, 1 if the ranks cannot be started\n";

static int usage(const char* why) {
  std::fprintf(stderr, "collx-run: %s\n%s", why, usage_text);
  return 2;
}

int main(int argc, char** argv) {
  int n = -1, i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") return std::fputs(usage_text, stdout) < 0;
    // -n N, -np N, --np N, and the attached forms -nN and --np=N (as mpirun takes them)
    std::string value;
    if (a == "-n" || a == "-np" || a == "--np") {
      if (i + 1 >= argc) return usage("-n needs a number");
      value = argv[++i];
    } else if (a.rfind("--np=", 0) == 0) {
      value = a.substr(5);
    } else if (a.size() > 2 && a.compare(0, 2, "-n") == 0 && a[2] >= '0' && a[2] <= '9') {
      value = a.substr(2);
    } else if (a.size() > 1 && a[0] == '-') {
      return usage(("unknown option " + a).c_str());
    } else {
      break;
    }
    if (n != -1) return usage("-n given twice");
    try {
      n = static_cast<int>(collx::env::parse_int("-n", value, 1, 4096));
    } catch (const collx::error& e) {
      return usage(e.what());
    }
  }
  if (n < 1) return usage("missing -n N");
  if (i >= argc) return usage("missing program");
  if (argv[i][0] == '\0') return usage("the program name is empty");
  if (const std::string why = collx::detail::why_not_runnable(argv[i]); !why.empty()) {  // one message, not one per rank
    std::fprintf(stderr, "collx-run: cannot run %s: %s\n", argv[i], why.c_str());
    return 127;  // as a shell does
  }
  try {
    // The variables every rank reads when it makes its communicator: a bad one is said once here,
    // as a usage error, instead of by every rank with status 1.
    (void)collx::communicator_options{};  // COLLX_TIMEOUT, COLLX_SEGMENT_BYTES, COLLX_ALGO
    (void)collx::shm_bytes_per_peer(0, n);  // also too large for n ranks' segment
    (void)collx::shm_cma_from_environment(-1);
    (void)collx::env::connect_timeout();
    // COLLX_DEBUG and COLLX_DEBUG_FILE's pattern (not opened here: each rank opens its own file)
    if (const auto v = collx::env::get("COLLX_DEBUG")) (void)collx::parse_log_level("COLLX_DEBUG", *v);
    if (const auto v = collx::env::get("COLLX_DEBUG_FILE")) (void)collx::expand_log_path("COLLX_DEBUG_FILE", *v);
  } catch (const collx::error& e) {  // the environment, not the command line: no usage text
    std::fprintf(stderr, "collx-run: %s\n", e.what());
    return 2;
  }
  try {
    return collx::launch_program(n, argv + i);
  } catch (const collx::error& e) {  // bad input (COLLX_BIND) as a usage error; fork failing as 1
    std::fprintf(stderr, "collx-run: %s\n", e.what());
    return e.code() == collx::errc::invalid_argument ? 2 : 1;
  }
}
