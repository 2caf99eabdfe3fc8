// collx::mpi from an installed collx: the transport and the bootstrap compile and link. Before
// MPI_Init they must refuse with a collx::error (transport) rather than crash.
#include <collx/bootstrap/mpi.hpp>
#include <collx/collx.hpp>
#include <collx/transport/mpi.hpp>

#include <cstdio>

int main() {
  try {
    collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
    std::printf("collx::mpi consumer: connected without MPI_Init?\n");
    return 1;
  } catch (const collx::error& e) {
    if (e.code() != collx::errc::transport) return 1;
    std::printf("collx %s consumer (find_package COMPONENTS mpi): ok (%s)\n", COLLX_VERSION_STRING, e.what());
  }
  return 0;
}
