// mpi-perf: the collx-perf harness (bench/perf_common.hpp: sizes, timing rules, checking, output)
// over an MPI library. One source, compiled once per MPI (bench/peers/CMakeLists.txt builds
// mpi-perf-openmpi with mpicxx.openmpi and mpi-perf-mpich with mpicxx.mpich).
//
//   mpirun -np 2 mpi-perf-openmpi COLLECTIVE [the same options as collx-perf]
//
// Calls: MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Reduce,
// MPI_Alltoall, MPI_Sendrecv (with -z 0 their MPI_I* forms, waited once with MPI_Waitall).
// In place uses MPI_IN_PLACE; for reduce_scatter MPI puts the result at the start of the buffer,
// where nccl-tests' convention (and collx's) puts it at rank * count: the check reads it there.
// Out-of-place broadcast: the root broadcasts from its send buffer, the others receive into their
// recv buffer (MPI has one buffer per rank; no copy on the root).
// Not available: half and bfloat16 (no standard MPI type) and avg (no MPI_AVG); collx-only options
// (--algo, --transport, --ranks) are rejected.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "perf_common.hpp"

namespace cp = collx_perf;

namespace {

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, std::int8_t>) return MPI_INT8_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return MPI_UINT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else return MPI_DATATYPE_NULL;  // half, bfloat16: rejected before any call
}

MPI_Op mpi_op(cp::redop o) {
  switch (o) {
    case cp::redop::sum: return MPI_SUM;
    case cp::redop::prod: return MPI_PROD;
    case cp::redop::max: return MPI_MAX;
    case cp::redop::min: return MPI_MIN;
    case cp::redop::avg: break;
  }
  return MPI_OP_NULL;
}

int as_int(std::size_t n) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::runtime_error("count " + std::to_string(n) + " does not fit MPI's int");
  return static_cast<int>(n);
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string(what) + ": " + msg);
  }
}

struct mpi_backend {
  MPI_Comm comm = MPI_COMM_WORLD;
  int me = 0, n = 1;

  int rank() const { return me; }
  int size() const { return n; }
  void barrier() { check_mpi(MPI_Barrier(comm), "MPI_Barrier"); }

  double combine_time(double s, int mode) {
    if (mode == 0) return s;
    double v = s;
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, mode == 2 ? MPI_MIN : mode == 3 ? MPI_MAX : MPI_SUM, comm),
              "MPI_Allreduce");
    return mode == 1 ? v / n : v;
  }

  std::uint64_t sum_over_ranks(std::uint64_t x) {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_UINT64_T, MPI_SUM, comm), "MPI_Allreduce");
    return x;
  }

  /// One call; with req != nullptr its nonblocking form.
  template <class T>
  void call(const cp::call_args<T>& a, MPI_Request* req, MPI_Request* req2) {
    const MPI_Datatype dt = mpi_type<T>();
    const cp::call_counts& k = a.k;
    void* send = const_cast<T*>(a.send);
    switch (a.c) {
      case cp::coll::allreduce: {
        void* s = a.in_place ? MPI_IN_PLACE : send;
        const int c = as_int(k.recv_count);
        check_mpi(req ? MPI_Iallreduce(s, a.recv, c, dt, mpi_op(a.op), comm, req)
                      : MPI_Allreduce(s, a.recv, c, dt, mpi_op(a.op), comm),
                  "MPI_Allreduce");
        break;
      }
      case cp::coll::reduce_scatter: {
        void* s = a.in_place ? MPI_IN_PLACE : send;
        void* r = a.in_place ? static_cast<void*>(a.base) : static_cast<void*>(a.recv);
        const int c = as_int(k.recv_count);
        check_mpi(req ? MPI_Ireduce_scatter_block(s, r, c, dt, mpi_op(a.op), comm, req)
                      : MPI_Reduce_scatter_block(s, r, c, dt, mpi_op(a.op), comm),
                  "MPI_Reduce_scatter_block");
        break;
      }
      case cp::coll::all_gather: {
        void* s = a.in_place ? MPI_IN_PLACE : send;
        void* r = a.in_place ? static_cast<void*>(a.base) : static_cast<void*>(a.recv);
        const int c = as_int(k.send_count);
        check_mpi(req ? MPI_Iallgather(s, c, dt, r, c, dt, comm, req) : MPI_Allgather(s, c, dt, r, c, dt, comm),
                  "MPI_Allgather");
        break;
      }
      case cp::coll::broadcast: {
        void* b = (!a.in_place && me == a.root) ? send : static_cast<void*>(a.recv);
        const int c = as_int(k.recv_count);
        check_mpi(req ? MPI_Ibcast(b, c, dt, a.root, comm, req) : MPI_Bcast(b, c, dt, a.root, comm), "MPI_Bcast");
        break;
      }
      case cp::coll::reduce: {
        // recvbuf matters on the root only; elsewhere pass none: in place, send is the same buffer
        // and MPI forbids aliased arguments (MPICH 4.0 crashes on them).
        void* s = (a.in_place && me == a.root) ? MPI_IN_PLACE : send;
        void* r = me == a.root ? static_cast<void*>(a.recv) : nullptr;
        const int c = as_int(k.send_count);
        check_mpi(req ? MPI_Ireduce(s, r, c, dt, mpi_op(a.op), a.root, comm, req)
                      : MPI_Reduce(s, r, c, dt, mpi_op(a.op), a.root, comm),
                  "MPI_Reduce");
        break;
      }
      case cp::coll::all_to_all: {
        const int c = as_int(k.param_count);
        check_mpi(req ? MPI_Ialltoall(send, c, dt, a.recv, c, dt, comm, req)
                      : MPI_Alltoall(send, c, dt, a.recv, c, dt, comm),
                  "MPI_Alltoall");
        break;
      }
      case cp::coll::sendrecv: {
        const int c = as_int(k.send_count), next = (me + 1) % n, prev = (me - 1 + n) % n;
        if (req) {
          check_mpi(MPI_Irecv(a.recv, c, dt, prev, 0, comm, req2), "MPI_Irecv");
          check_mpi(MPI_Isend(send, c, dt, next, 0, comm, req), "MPI_Isend");
        } else {
          check_mpi(MPI_Sendrecv(send, c, dt, next, 0, a.recv, c, dt, prev, 0, comm, MPI_STATUS_IGNORE), "MPI_Sendrecv");
        }
        break;
      }
    }
  }

  template <class T>
  void run(const cp::call_args<T>& a, int calls, bool blocking) {
    if (blocking) {
      for (int i = 0; i < calls; ++i) call(a, nullptr, nullptr);
      return;
    }
    std::vector<MPI_Request> reqs(static_cast<std::size_t>(calls) * 2, MPI_REQUEST_NULL);
    for (int i = 0; i < calls; ++i) call(a, &reqs[2 * static_cast<std::size_t>(i)], &reqs[2 * static_cast<std::size_t>(i) + 1]);
    check_mpi(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  }

  template <class T>
  const T* result_of(const cp::call_args<T>& a) const {
    if (a.in_place && a.c == cp::coll::reduce_scatter) return a.base;      // MPI_IN_PLACE: result at the start
    if (!a.in_place && a.c == cp::coll::broadcast && me == a.root) return a.send;  // broadcast from send
    return a.recv;
  }

  std::string algorithm_for(cp::coll, const cp::call_counts&, std::size_t) const { return "mpi"; }

  /// MPICH 4.0.x crashes (SIGSEGV in memcpy) in MPI_Reduce with MPI_IN_PLACE at a root other than 0
  /// once the message exceeds 2 KiB (reproducer in bench/README.md): that column is N/A there.
  bool in_place_supported(cp::coll c, int root) const {
#if defined(MPICH_VERSION)
    if (c == cp::coll::reduce && root != 0) return false;
#else
    (void)c, (void)root;
#endif
    return true;
  }
};

std::string library_name() {
#if defined(OPEN_MPI)
  return "Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) + "." +
         std::to_string(OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  return std::string("MPICH ") + MPICH_VERSION;
#else
  char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string s(v);
  return s.substr(0, s.find_first_of(",\n"));
#endif
}

int fail_usage(int me, const std::string& why) {
  if (me == 0) std::fprintf(stderr, "mpi-perf: %s\n", why.c_str());
  MPI_Finalize();
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  mpi_backend be;
  MPI_Comm_rank(be.comm, &be.me);
  MPI_Comm_size(be.comm, &be.n);
  MPI_Comm_set_errhandler(be.comm, MPI_ERRORS_RETURN);

  if (argc < 2) return fail_usage(be.me, "usage: mpi-perf COLLECTIVE [collx-perf's nccl-tests options]");
  // Each of N processes would otherwise run its own 1-rank table.
  if (const std::string other = cp::launcher_size_mismatch(be.n, "mpi-perf"); !other.empty())
    return fail_usage(be.me, other);
  const std::string first = argv[1];
  if (first == "-h" || first == "--help") {
    if (be.me == 0)
      std::printf("usage: mpirun -np N mpi-perf COLLECTIVE [options]\n  COLLECTIVE: allreduce reduce_scatter all_gather "
                  "broadcast reduce all_to_all sendrecv\n%s",
                  cp::common_usage);
    MPI_Finalize();
    return 0;
  }
  const auto c = cp::parse_coll(first);
  if (!c) return fail_usage(be.me, "unknown collective '" + first + "'");
  cp::options o;
  try {
    o = cp::parse_options(argc, argv, 2);
  } catch (const cp::usage_error& e) {
    return fail_usage(be.me, e.what());
  }
  o.collective = *c;
  if (o.collx_options_given())
    return fail_usage(be.me, "--algo, --transport, --ranks and --bind are collx-perf's; start mpi-perf with mpirun -np N "
                             "(and bind with mpirun's options)");
  if (o.registered) return fail_usage(be.me, "-R 1: MPI collectives take plain memory (no registration here)");
  if (o.type == cp::dtype::half || o.type == cp::dtype::bfloat16)
    return fail_usage(be.me, std::string("-d ") + std::string(cp::dtype_name(o.type)) +
                                 ": MPI has no standard type for it (use int8..uint64, float or double)");
  if (o.op == cp::redop::avg && cp::reduces(o.collective))
    return fail_usage(be.me, "-o avg: MPI has no MPI_AVG (use sum, prod, max or min)");
  if (o.root >= be.n) return fail_usage(be.me, "-r: the root must be below the number of ranks");
  if (o.collective == cp::coll::sendrecv && be.n < 2) return fail_usage(be.me, "sendrecv needs 2 or more ranks");

  cp::run_info info;
  info.tool = "mpi-perf";
  info.library = library_name();
  info.ranks = be.n;
  info.machine = cp::describe_machine();
  info.launcher = std::getenv("OMPI_COMM_WORLD_SIZE") ? "mpirun (Open MPI)"
                  : std::getenv("PMI_RANK")           ? "mpiexec (Hydra)"
                                                      : "MPI launcher";
  info.transport = "MPI (the library's own on-node path and settings)";
  info.algorithm = "the MPI library's own choice";
  // Where each rank may run (the launcher's binding), gathered on rank 0.
  {
    std::string mine = cp::affinity();
    mine.resize(64, '\0');
    std::vector<char> all(64 * static_cast<std::size_t>(be.n));
    MPI_Gather(mine.data(), 64, MPI_CHAR, all.data(), 64, MPI_CHAR, 0, be.comm);
    std::string line = "CPU affinity per rank:";
    for (int r = 0; r < be.n; ++r) line.append(" ").append(std::to_string(r)).append(":{").append(all.data() + 64 * r).append("}");
    info.notes.push_back(line);
  }
  info.notes.push_back(cp::malloc_env_note());
#if defined(MPICH_VERSION)
  if (o.collective == cp::coll::reduce && o.root != 0)
    info.notes.push_back("in place: N/A, MPICH 4.0 crashes in MPI_Reduce(MPI_IN_PLACE) at a root other than 0 (bench/README.md)");
#endif

  int status = 0;
  try {
    cp::reporter rep(o, info, be.me == 0);
    rep.header();
    cp::with_type(o.type, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, collx::half> || std::is_same_v<T, collx::bfloat16>) return;  // rejected above
      else cp::sweep<T>(be, o, rep);
    });
    status = rep.footer();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi-perf: rank %d: %s\n", be.me, e.what());
    MPI_Abort(be.comm, 1);
  }
  MPI_Finalize();
  return status;
}
