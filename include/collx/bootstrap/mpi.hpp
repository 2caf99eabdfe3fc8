/// @file bootstrap/mpi.hpp
/// Builds collx communicators from an MPI communicator: all ranks over MPI (collx::mpi::connect,
/// in transport/mpi.hpp), or with a hierarchy attached (connect_hierarchical): the ranks of each
/// node over shared memory, the ranks with the same local rank across nodes over MPI. MPI carries
/// the bootstrap exchange (node ids, the shared-memory job id). Needs <mpi.h> (CMake: collx::mpi).
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>  // std::snprintf
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <collx/bootstrap/env.hpp>
#include <collx/node_layout.hpp>
#include <collx/transport/mpi.hpp>
#include <collx/transport/shm.hpp>

namespace collx {
inline namespace v0 {
namespace mpi {

/// How connect_hierarchical connects the ranks inside a node.
enum class intra_node {
  shm,  ///< shared memory (transport/shm.hpp): the fast path
  mpi,  ///< MPI, like the cross-node level (for MPI-only setups or comparisons)
};

/// Every rank's node id (node_id_from_environment: COLLX_NODE_ID or the host name), gathered over
/// `comm` (waited for up to `timeout`). Collective over comm.
/// @throws collx::error invalid_argument (a bad COLLX_NODE_ID on any rank: every rank throws it,
///   naming that rank), timeout (not every rank took part within `timeout`: comm is unusable
///   after it), transport (an MPI error)
inline std::vector<std::string> gather_node_ids(MPI_Comm comm, std::chrono::milliseconds timeout) {
  constexpr std::size_t width = 256;  // node_id_from_environment allows at most 255 bytes
  // A rank whose id is bad still takes part, sending a 0 byte and its reason, so that every rank
  // fails with it instead of the others waiting for it until their timeout.
  std::string mine;
  errc code = errc::invalid_argument;
  try {
    mine = node_id_from_environment();
  } catch (const error& e) {
    code = e.code();
    mine = std::string(1, '\0') + static_cast<char>(static_cast<int>(code)) + e.what();
  } catch (const std::exception& e) {  // no memory, say: this rank still takes part
    code = errc::system;
    mine = std::string(1, '\0') + static_cast<char>(static_cast<int>(code)) + e.what();
  }
  mine.resize(width, '\0');
  // Waited for up to `timeout`: a rank whose connect's first exchange ended at once, because it
  // came after its peers had given up on it, would otherwise wait here for ever.
  const std::vector<char> all = detail::allgather_within(comm, std::vector<char>(mine.begin(), mine.end()), MPI_CHAR, timeout,
                                                 "collx::mpi::connect_hierarchical", "MPI_Iallgather(node ids)");
  const int n = static_cast<int>(all.size() / width);
  std::vector<std::string> ids;
  for (int r = 0; r < n; ++r) {
    const char* id = all.data() + static_cast<std::size_t>(r) * width;
    if (id[0] == '\0') {
      const std::string why(id + 2, ::strnlen(id + 2, width - 2));
      COLLX_THROW(static_cast<errc>(id[1]), "rank " + std::to_string(r) + " has no usable node id: " + why);
    }
    ids.emplace_back(id);
  }
  return ids;
}

/// A communicator over every rank of `comm` (MPI transport) with a hierarchy attached: the node
/// communicator runs over shared memory (or MPI with intra = intra_node::mpi) among the ranks with
/// the same node id, the cross-node communicator over MPI among the ranks with the same local rank.
/// algo::hierarchical then keeps node-local traffic off the network, and algo::automatic uses it
/// when the nodes hold several ranks each (with one node, the whole call runs on the node
/// communicator). Collective over comm.
/// Node ids: COLLX_NODE_ID, else the host name; setting COLLX_NODE_ID per rank runs several
/// "nodes" on one machine (e.g. `mpirun -np 2 -x COLLX_NODE_ID=a prog : -np 2 -x COLLX_NODE_ID=b prog`).
/// @throws collx::error invalid_argument (bad COLLX_NODE_ID; comm is MPI_COMM_NULL; ranks that called
///   connect or another intra_node instead: every rank throws it), timeout (a rank did not call it
///   within mopt.connect_timeout, as connect), transport (an MPI error), and what connect_shm throws
///   (shared memory full, ranks not arriving in time).
inline communicator connect_hierarchical(MPI_Comm comm, const communicator_options& opt = {},
                                         intra_node intra = intra_node::shm, const mpi_options& mopt = {},
                                         const shm_options& sopt = {}) {
  require_mpi_running("collx::mpi::connect_hierarchical");
  require_communicator(comm, "collx::mpi::connect_hierarchical");
  require_thread_support();
  detail::agree_on_connect(comm,
                           intra == intra_node::mpi ? detail::connect_entry::hierarchical_mpi : detail::connect_entry::hierarchical_shm,
                           "collx::mpi::connect_hierarchical", mopt.connect_timeout);
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  node_layout layout = node_layout::from_ids(gather_node_ids(comm, mopt.connect_timeout), rank);

  MPI_Comm node_comm = MPI_COMM_NULL, cross_comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm, layout.node_index, layout.local_rank, &node_comm), "MPI_Comm_split(node)");
  check_mpi(MPI_Comm_split(comm, layout.local_rank, layout.node_index, &cross_comm), "MPI_Comm_split(cross-node)");
  struct comm_guard {
    MPI_Comm& c;
    ~comm_guard() {
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    }
  } free_node{node_comm}, free_cross{cross_comm};

  communicator world = connect(comm, opt, mopt);
  communicator_options level = opt;  // for the node and cross-node communicators
  level.ring_order.clear();          // a world ring order means nothing to them
  communicator cross = connect(cross_comm, level, mopt);
  communicator node = [&] {
    if (intra == intra_node::mpi) return connect(node_comm, level, mopt);
    // A job id for this node's segment: made by the node's first rank, unique per job and node.
    char job[64] = {};
    if (layout.local_rank == 0) {
      std::random_device rd;
      const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
      std::snprintf(job, sizeof job, "mpi-%d-%llx-%x-n%d", static_cast<int>(::getpid()), static_cast<unsigned long long>(t),
                    rd(), layout.node_index);
    }
    check_mpi(MPI_Bcast(job, sizeof job, MPI_CHAR, 0, node_comm), "MPI_Bcast(shared-memory job id)");
    launch_info info;
    info.rank = info.local_rank = layout.local_rank;
    info.world_size = info.local_world_size = layout.local_size;
    info.job_id = job;
    info.source = "MPI";
    shm_options host_aware = sopt;  // spin only if every rank of this machine has a core
    if (!host_aware.ranks_on_host)
      host_aware.ranks_on_host = dynamic_cast<mpi_transport&>(world.get_transport()).ranks_on_host();
    return connect_shm(info, level, host_aware);
  }();
  collx::detail::attach_levels(world, std::move(layout), std::move(node), std::move(cross));  // built from the layout
  return world;
}

}  // namespace mpi
}  // namespace v0
}  // namespace collx
