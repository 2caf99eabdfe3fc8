// Started by a launcher (Open MPI's mpirun, or collx-run): reads rank and world size from the
// environment, connects over shared memory and checks an allreduce and a broadcast. Exit status 0
// on success. Expected launcher name in argv[1] (e.g. "Open MPI" or "collx-run").
// With argv[2] "leader-exits-first" (2 ranks, for collx_run_cli.sh): rank 1's main thread exits
// alone, so that its process reads as dead (a zombie leader) while another of its threads still
// runs and kills it with SIGKILL 300 ms later, as a multi-threaded process killed by a signal looks
// until its last thread ends; rank 0 sees it dead and exits with status 1 first.
// With argv[2] "leader-exits-then-waits" and a path in argv[3]: the same, but rank 1's other thread
// lives 10 s, and rank 0 creates the file argv[3] just before it exits 1 (collx-run then waits for
// the zombie rank 1, and the script signals collx-run during that wait).
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <collx/collx.hpp>
#include <collx/transport/shm.hpp>

int main(int argc, char** argv) {
  try {
    const collx::launch_info info = collx::bootstrap::from_environment();
    if (argc > 1 && info.source != argv[1]) {
      std::fprintf(stderr, "expected launcher %s, found %s\n", argv[1], info.source.c_str());
      return 2;
    }
    collx::communicator comm = collx::connect_shm(info);
    const int n = comm.size(), r = comm.rank();
    const std::string mode = argc > 2 ? argv[2] : "";
    if (mode == "leader-exits-first" || (mode == "leader-exits-then-waits" && argc > 3)) {
      const auto lives = std::chrono::milliseconds(mode == "leader-exits-first" ? 300 : 10000);
      if (r == 1) {
        std::thread([lives] {
          std::this_thread::sleep_for(lives);
          ::kill(::getpid(), SIGKILL);
        }).detach();
        ::syscall(SYS_exit, 0);  // this thread only: the process lives on in the other
      }
      std::vector<int> v(1, r);
      try {
        collx::allreduce(comm, std::span{v});  // fails once rank 1 reads as dead
      } catch (const collx::error&) {
        if (argc > 3)
          if (FILE* f = std::fopen(argv[3], "w")) std::fclose(f);
        throw;
      }
      return 3;
    }
    std::vector<long> x(1000, r + 1);
    collx::allreduce(comm, std::span{x});
    std::vector<int> b(10, r == n - 1 ? 42 : 0);
    collx::broadcast(comm, std::span{b}, n - 1);
    const bool ok = x[999] == static_cast<long>(n) * (n + 1) / 2 && b[9] == 42;
    std::printf("rank %d/%d (%s, job %s): %s\n", r, n, info.source.c_str(), info.job_id.c_str(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
