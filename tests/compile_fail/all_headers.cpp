// Every public header that needs neither CUDA nor MPI, and two collectives instantiated: compiled
// by ctest with flags users build with (tests/CMakeLists.txt: -fno-exceptions must stop with
// collx's own message; with -D_GLIBCXX_DEBUG, libstdc++'s checked containers, this file and
// all_headers_main.cpp, which includes it again, must compile and link: a function a header
// defines without inline would be defined twice).
#include <collx/algo/automatic.hpp>
#include <collx/algo/build.hpp>
#include <collx/algo/direct.hpp>
#include <collx/algo/hierarchical.hpp>
#include <collx/algo/ring.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/algo/tree.hpp>
#include <collx/all_gather.hpp>
#include <collx/all_to_all.hpp>
#include <collx/allreduce.hpp>
#include <collx/barrier.hpp>
#include <collx/block_counts.hpp>
#include <collx/bootstrap/env.hpp>
#include <collx/broadcast.hpp>
#include <collx/collx.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/environment.hpp>
#include <collx/error.hpp>
#include <collx/hierarchy.hpp>
#include <collx/launch.hpp>
#include <collx/node_layout.hpp>
#include <collx/nullable_ptr.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>
#include <collx/rank_block.hpp>
#include <collx/reduce.hpp>
#include <collx/reduce_scatter.hpp>
#include <collx/send_recv.hpp>
#include <collx/split.hpp>
#include <collx/topo/cost_model.hpp>
#include <collx/topo/device_cost.hpp>
#include <collx/topo/discover.hpp>
#include <collx/topo/host_cost.hpp>
#include <collx/topo/nccl_tests.hpp>
#include <collx/topo/nccl_xml.hpp>
#include <collx/topo/nvidia_smi.hpp>
#include <collx/topo/placement.hpp>
#include <collx/topo/predict.hpp>
#include <collx/topo/ring_search.hpp>
#include <collx/topo/routing.hpp>
#include <collx/topo/smp_link.hpp>
#include <collx/topo/topology.hpp>
#include <collx/transport/shm.hpp>
#include <collx/transport/threads.hpp>
#include <collx/transport/transport.hpp>
#include <collx/version.hpp>

#include <vector>

#ifndef COLLX_ALL_HEADERS_MAIN
void use(collx::communicator& comm) {
  std::vector<float> v(4);
  collx::allreduce(comm, v, v);
  collx::reduce_scatter(comm, v, collx::rank_block(v, comm));
}
#else
int main() { return 0; }
#endif
