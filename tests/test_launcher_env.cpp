// Started by a launcher (Open MPI's mpirun, or collx-run): reads rank and world size from the
// environment, connects over shared memory and checks an allreduce and a broadcast. Exit status 0
// on success. Expected launcher name in argv[1] (e.g. "Open MPI" or "collx-run").
// With argv[2] "leader-exits-first" (2 ranks, for collx_run_cli.sh): rank 1's main thread exits
// alone, so that its process reads as dead (a zombie leader) while another of its threads still
// runs and kills it with SIGKILL 300 ms later, as a multi-threaded process killed by a signal looks
// until its last thread ends; rank 0 sees it dead and exits with status 1 first.
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
    if (argc > 2 && std::string(argv[2]) == "leader-exits-first") {
      if (r == 1) {
        std::thread([] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::kill(::getpid(), SIGKILL);
        }).detach();
        ::syscall(SYS_exit, 0);  // this thread only: the process lives on in the other
      }
      std::vector<int> v(1, r);
      collx::allreduce(comm, std::span{v});  // fails once rank 1 reads as dead
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
