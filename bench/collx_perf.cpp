// collx-perf: nccl-tests-compatible benchmark of collx's collectives.
//
//   collx-perf COLLECTIVE [nccl-tests options] [--algo ring|tree|direct|hierarchical|auto]
//              [--transport shm|threads|mpi]
//              [--ranks N] [--json FILE] [--csv FILE]
//
// COLLECTIVE: allreduce reduce_scatter all_gather broadcast reduce all_to_all sendrecv.
// With --transport shm (the default), collx-perf re-executes itself as --ranks N processes through
// collx::launch_program unless a launcher (collx-run, mpirun, torchrun, srun) started it as one
// rank of several (collx::joins_launched_job): then it connects to the job it is part of. With --transport
// threads it runs --ranks N threads of this process. With --transport mpi (builds with collx::mpi)
// it must be started by mpirun and sends over MPI; --algo hierarchical then connects with
// collx::mpi::connect_hierarchical (shared memory inside a node, MPI across nodes; nodes from
// COLLX_NODE_ID or the host name). The harness (timing, checking, output) is
// bench/perf_common.hpp, shared with the MPI peers in bench/peers/.
#include <unistd.h>

#include <collx/collx.hpp>
#include <collx/launch.hpp>
#include <collx/transport/shm.hpp>
#ifdef COLLX_PERF_HAVE_MPI
#include <mpi.h>

#include <collx/bootstrap/mpi.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "collx_perf_backend.hpp"
#include "collx_perf_revision.hpp"  // COLLX_PERF_GIT_REVISION, generated at build time (bench/CMakeLists.txt)
#include "perf_common.hpp"

namespace cp = collx_perf;
using collx_perf_backend::collx_backend;

namespace {

/// The communicator's options: defaults (from the environment), with --algo forcing one algorithm.
collx::communicator_options comm_options(const cp::options& o) {
  collx::communicator_options c;
  if (o.algo != "auto" && o.algo != "hierarchical") {
    const collx::algorithm a = o.algo == "ring" ? collx::algorithm::ring
                               : o.algo == "tree" ? collx::algorithm::tree
                                                  : collx::algorithm::direct;
    for (auto& slot : c.algorithm_overrides.per) slot = a;
  }
  return c;
}

std::string pretty_bytes(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return std::to_string(b) + " " + units[u];
}

int bench(collx::communicator& comm, const cp::options& o, const std::string& launcher) {
  collx_backend be{comm};
  cp::run_info info;
  info.tool = "collx-perf";
  info.library = std::string("collx ") + COLLX_VERSION_STRING;
#ifdef COLLX_PERF_GIT_REVISION
  info.library += " (git " COLLX_PERF_GIT_REVISION ")";
#endif
  info.ranks = comm.size();
  info.launcher = launcher;
  info.machine = cp::describe_machine();
  std::string tr(comm.get_transport().name());
  if (auto* shm = dynamic_cast<collx::detail::transport_impl::shm_transport*>(&comm.get_transport()))
    tr += std::string(" (single-copy process_vm_readv for messages >= 64 KiB: ") + (shm->cma_enabled() ? "on" : "off") +
          "; COLLX_CMA=" + collx::env::get("COLLX_CMA").value_or("auto") + ")";
  else if (tr == "mpi" && comm.get_hierarchy())
    tr = "mpi across nodes, " + std::string(comm.get_hierarchy()->node.get_transport().name()) + " inside a node (" +
         std::to_string(comm.get_hierarchy()->layout.node_count) + " nodes of " +
         std::to_string(comm.get_hierarchy()->layout.local_size) + " ranks; COLLX_NODE_ID or host name)";
  else if (tr == "threads")
    tr += " (ranks are threads of one process; receivers read the sender's buffer directly)";
  info.transport = tr;
  {
    // Where each rank may run (the launcher's binding; collx binds nothing).
    std::string mine = cp::affinity();
    mine.resize(64, '\0');
    std::vector<char> all(64 * static_cast<std::size_t>(comm.size()));
    collx::all_gather<collx::algo::direct, char>(comm, std::span<const char>(mine.data(), 64), std::span<char>(all));
    std::string line = "CPU affinity per rank:";
    for (int r = 0; r < comm.size(); ++r)
      line.append(" ").append(std::to_string(r)).append(":{").append(all.data() + 64 * static_cast<std::size_t>(r)).append("}");
    info.notes.push_back(line);
  }
  info.notes.push_back(cp::malloc_env_note());
  const auto timeout_ms = comm.options().timeout.count();  // whole seconds, or ms when not (0.5 s is no "0 s")
  info.notes.push_back("max_segment_bytes " + std::to_string(comm.options().max_segment_bytes) +
                       " (COLLX_SEGMENT_BYTES), timeout " +
                       (timeout_ms % 1000 ? std::to_string(timeout_ms) + " ms" : std::to_string(timeout_ms / 1000) + " s") +
                       " (COLLX_TIMEOUT)");

  // The algorithm line: what was asked, and what each size resolves to.
  const std::size_t ts = cp::with_type(o.type, [](auto tag) { return sizeof(typename decltype(tag)::type); });
  std::string resolved;
  std::string cur;
  std::size_t lo = 0, hi = 0;
  auto flush = [&] {
    if (cur.empty()) return;
    if (!resolved.empty()) resolved += ", ";
    resolved += cur + " for " + pretty_bytes(lo) + (lo == hi ? "" : ".." + pretty_bytes(hi));
  };
  for (std::size_t s : o.sizes()) {
    const cp::call_counts k = cp::counts_for(o.collective, s / ts, comm.size());
    const std::size_t col = cp::size_column_bytes(k, ts);
    const std::string a = be.algorithm_for(o.collective, k, ts);
    if (a != cur) flush(), cur = a, lo = col;
    hi = col;
  }
  flush();
  if (o.collective == cp::coll::sendrecv) info.algorithm = "point-to-point (collx::send_recv; --algo does not apply)";
  else if (o.algo == "hierarchical")
    info.algorithm = "hierarchical (--algo hierarchical: a communicator from collx::mpi::connect_hierarchical, whose "
                     "algo::automatic calls run algo::hierarchical where it applies): " + resolved;
  else if (o.algo == "auto") info.algorithm = "auto (algo::automatic, resolved by communicator::select): " + resolved;
  else
    info.algorithm = o.algo + " for every call (communicator_options::algorithm_overrides, as COLLX_ALGO=" + o.algo +
                     " does): " + resolved;

  cp::reporter rep(o, info, comm.rank() == 0);
  rep.header();
  cp::with_type(o.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (collx_perf_backend::built_for<T>())
      collx_perf_backend::sweep_collx<T>(be, o, rep);
    else
      throw std::invalid_argument("this collx-perf was built without that element type (-d): configure with it in "
                                  "COLLX_PERF_TYPES (bench/CMakeLists.txt)");
  });
  return rep.footer();
}

int usage(const char* why) {
  if (why) {
    std::fprintf(stderr, "collx-perf: %s\n(collx-perf --help lists the options)\n", why);
    return 2;
  }
  std::fprintf(stdout,
               "usage: collx-perf COLLECTIVE [options]\n"
               "  COLLECTIVE: allreduce reduce_scatter all_gather broadcast reduce all_to_all sendrecv\n"
               "nccl-tests options:\n%s"
               "collx options:\n"
               "      --algo A             ring, tree, direct, hierarchical (--transport mpi) or auto (default:\n"
               "                           algo::automatic)\n"
               "      --transport T        shm (processes, default), threads, or mpi (under mpirun; "
#ifdef COLLX_PERF_HAVE_MPI
               "in this build)\n"
#else
               "not in this build)\n"
#endif

               "      --ranks N            number of ranks: shm re-executes collx-perf as N processes unless a\n"
               "                           launcher started it as one rank of several (collx-run, mpirun, srun,\n"
               "                           torchrun); threads runs N threads\n"
               "      --bind none|core     core: rank i runs on the i-th CPU it may use (as mpirun --bind-to core);\n"
               "                           none: the processes --ranks starts are not pinned (COLLX_BIND=none);\n"
               "                           default: the launcher's (--ranks: COLLX_BIND, default core). Under\n"
               "                           collx-run or mpirun, their own setting unpins (COLLX_BIND=none,\n"
               "                           --bind-to none)\n"
               "Environment: COLLX_CMA, COLLX_SHM_BYTES_PER_PEER, COLLX_SEGMENT_BYTES, COLLX_TIMEOUT, COLLX_ALGO\n"
               "(see README.md), NCCL_TESTS_MIN_BW (fail when the average busbw is below 90%% of it).\n",
               cp::common_usage);
  return 0;
}

#ifdef COLLX_PERF_HAVE_MPI
/// --transport mpi: a rank of an mpirun job; every message over MPI, or with --algo hierarchical
/// over shared memory inside a node and MPI across nodes.
int run_over_mpi(int& argc, char**& argv, const cp::options& o) {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE") && !std::getenv("PMI_RANK"))
    return usage("--transport mpi: start collx-perf with mpirun (e.g. mpirun -np 4 collx-perf allreduce --transport mpi); "
                 "--ranks does not launch MPI jobs");
  // -z 0 starts the calls on the communicator's progress thread, which collx::mpi allows only under
  // MPI_THREAD_MULTIPLE (transport::async_refusal); blocking calls need SERIALIZED.
  const int wanted = o.blocking ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, wanted, &provided);
  int status = 0;
  {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // The shared-memory path's checks and words, said once (by rank 0).
    std::string refused;
    if (provided < wanted)
      refused = "-z 0 over MPI needs MPI_THREAD_MULTIPLE, which this MPI did not provide (MPI_Init_thread gave " +
                collx::mpi::thread_level_name(provided) + "): use -z 1";
    else if (const std::string other = cp::launcher_size_mismatch(size, "collx-perf"); !other.empty())
      refused = other;  // e.g. built with Open MPI, started by MPICH's mpiexec
    else if (o.ranks && o.ranks != size)
      refused = "--ranks " + std::to_string(o.ranks) + " but mpirun started " + std::to_string(size) + " ranks";
    else if (o.collective == cp::coll::sendrecv && size < 2)
      refused = "sendrecv needs 2 or more ranks";
    else if (o.root >= size)
      refused = "-r: the root must be below the number of ranks";
    if (!refused.empty()) {
      if (rank == 0) usage(refused.c_str());
      MPI_Finalize();
      return 2;
    }
    if (o.bind == "core") cp::bind_to_core(rank);
    collx::communicator comm = o.algo == "hierarchical" ? collx::mpi::connect_hierarchical(MPI_COMM_WORLD, comm_options(o))
                                                        : collx::mpi::connect(MPI_COMM_WORLD, comm_options(o));
    if (o.algo == "hierarchical") {
      const collx::node_layout& l = comm.get_hierarchy()->layout;
      if (l.local_size < 2 || !l.uniform) {  // (one node of several ranks runs each call on its communicator)
        if (rank == 0)
          std::fprintf(stderr, "collx-perf: --algo hierarchical needs nodes with the same number (>= 2) of ranks; "
                               "this job has %d node(s) (set COLLX_NODE_ID per rank to make nodes on one machine)\n",
                       l.node_count);
        status = 2;
      }
    }
    if (!status)
      status = bench(comm, o, std::to_string(size) + (size == 1 ? " process" : " processes") + " started by mpirun, connected over MPI");
  }
  MPI_Finalize();
  return status;
}
#endif

int run(int argc, char** argv);

}  // namespace

// The table goes to stdout: a run whose table was lost (a full disk, a closed file) is a failure,
// not a success with nothing written.
int main(int argc, char** argv) {
  int rc = run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "collx-perf: could not write the results to standard output\n");
    if (rc == 0) rc = 1;
  }
  return rc;
}

namespace {

int run(int argc, char** argv) {
  if (argc < 2) return usage("missing the collective");
  const std::string first = argv[1];
  if (first == "-h" || first == "--help") return usage(nullptr);
  const auto c = cp::parse_coll(first);
  if (!c) return usage(("unknown collective '" + first + "'").c_str());
  cp::options o;
  try {
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") return usage(nullptr);
    o = cp::parse_options(argc, argv, 2);
  } catch (const cp::usage_error& e) {
    return usage(e.what());
  }
  o.collective = *c;

#ifndef COLLX_PERF_HAVE_MPI
  if (o.transport == "mpi") {
    std::fprintf(stderr, "collx-perf: this build has no MPI (configure with COLLX_MPI=ON). For MPI itself as a peer "
                         "see bench/peers (mpi-perf-openmpi, mpi-perf-mpich).\n");
    return 2;
  }
#endif
  if (o.transport == "cuda" || o.transport == "nccl") {
    std::fprintf(stderr, "collx-perf: transport '%s' is not available in this build (available: shm, threads, mpi).\n",
                 o.transport.c_str());
    return 2;
  }
  if (o.transport != "shm" && o.transport != "threads" && o.transport != "mpi")
    return usage(("unknown transport '" + o.transport + "' (shm, threads, mpi)").c_str());
  if (o.algo == "hierarchical" && o.transport != "mpi")
    return usage("--algo hierarchical needs --transport mpi (nodes come from the MPI bootstrap)");
  if (o.collective == cp::coll::all_to_all && o.algo == "tree")
    return usage("all_to_all has no tree algorithm (ring, direct or auto)");
  // Bad input exits 2 here, once, rather than 1 from every rank once the sweep has started.
  if (!cp::with_type(o.type, [](auto tag) { return collx_perf_backend::built_for<typename decltype(tag)::type>(); }))
    return usage("-d: this collx-perf was built without that element type (configure it in COLLX_PERF_TYPES, "
                 "bench/CMakeLists.txt)");

  try {
    try {
      (void)comm_options(o);  // reads COLLX_TIMEOUT, COLLX_SEGMENT_BYTES and COLLX_ALGO
      if (o.transport == "shm") {  // what every rank's shared memory would read, and fail on
        (void)collx::shm_bytes_per_peer_from_environment();
        (void)collx::shm_cma_from_environment(-1);
      }
      // A launcher's variables (COLLX_RANK 5 of COLLX_WORLD_SIZE 2, say): a usage error too.
      if (o.transport != "mpi" && collx::bootstrap::launcher_in_environment()) (void)collx::bootstrap::from_environment();
    } catch (const collx::error& e) {
      if (e.code() == collx::errc::invalid_argument) return usage(e.what());
      throw;
    }
#ifdef COLLX_PERF_HAVE_MPI
    if (o.transport == "mpi") return run_over_mpi(argc, argv, o);
#endif
    if (o.transport == "threads") {
      if (collx::bootstrap::launcher_in_environment() && collx::bootstrap::from_environment().world_size > 1)
        return usage("--transport threads runs all ranks in this process; do not start it as several ranks of a "
                     "launcher");
      const int n = o.ranks ? o.ranks : 1;
      if (o.collective == cp::coll::sendrecv && n < 2) return usage("sendrecv needs --ranks 2 or more");
      if (o.root >= n) return usage("-r: the root must be below the number of ranks");
      int status = 0;
      collx::run_threads(
          n,
          [&](collx::communicator& comm) {
            if (o.bind == "core") cp::bind_to_core(comm.rank());
            const std::string threads = std::to_string(n) + (n == 1 ? " thread" : " threads");
            const int s = bench(comm, o, threads + " of one process (collx::run_threads)");
            if (comm.rank() == 0) status = s;
          },
          comm_options(o));
      return status;
    }

    // Shared memory: either we are a rank of a launched job, or we launch one.
    if (!collx::joins_launched_job(o.ranks)) {
      const int n = o.ranks ? o.ranks : 1;
      if (o.collective == cp::coll::sendrecv && n < 2) return usage("sendrecv needs --ranks 2 or more");
      if (o.root >= n) return usage("-r: the root must be below the number of ranks");
      std::vector<char> self(4096, '\0');
      const ssize_t len = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
      std::vector<char*> args(argv, argv + argc);
      if (len > 0) args[0] = self.data();
      args.push_back(nullptr);
      ::setenv("CXPERF_LAUNCHED_BY", "collx-perf --ranks", 1);
      if (o.bind == "none") ::setenv("COLLX_BIND", "none", 1);  // launch_program pins by default
      return collx::launch_program(n, args.data());
    }
    const collx::launch_info info = collx::bootstrap::from_environment();
    if (o.ranks && o.ranks != info.world_size)
      return usage(("--ranks " + std::to_string(o.ranks) + " but the launcher started " +
                    std::to_string(info.world_size) + " ranks")
                       .c_str());
    if (o.collective == cp::coll::sendrecv && info.world_size < 2) return usage("sendrecv needs 2 or more ranks");
    if (o.root >= info.world_size) return usage("-r: the root must be below the number of ranks");
    if (o.bind == "core") cp::bind_to_core(info.local_rank);  // before connecting: the first touch happens there
    collx::communicator comm = collx::connect_shm(info, comm_options(o));
    const char* by = std::getenv("CXPERF_LAUNCHED_BY");
    const std::string launcher = std::to_string(info.world_size) + " processes over shared memory, started by " +
                                 (by ? std::string(by) + " (collx::launch_program)" : info.source);
    return bench(comm, o, launcher);
  } catch (const collx::error& e) {
    std::fprintf(stderr, "collx-perf: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {  // the buffers of the largest size (-e) did not fit
    std::fprintf(stderr, "collx-perf: out of memory (most likely the buffers of the largest size, -e %zu "
                         "bytes): lower -e\n", o.max_bytes);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collx-perf: %s\n", e.what());
    return 1;
  }
}

}  // namespace
