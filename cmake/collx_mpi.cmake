# collx::mpi: the MPI transport and bootstrap (include/collx/transport/mpi.hpp,
# include/collx/bootstrap/mpi.hpp) plus MPI (MPI::MPI_CXX, C API only). Included from the top-level
# CMakeLists.txt after collx::collx is defined.
#
# COLLX_MPI: AUTO (default) makes collx::mpi when find_package(MPI) finds MPI (its C API, through the CXX component: collx's
# translation units are C++; MPI_CXX_SKIP_MPICXX keeps MPI's deprecated C++ bindings out); ON
# requires them and fails at configure time without them; OFF never looks. collx::collx never
# depends on MPI.
set(COLLX_MPI AUTO CACHE STRING "Build collx::mpi (MPI transport and bootstrap; needs an MPI library): AUTO, ON or OFF")
set_property(CACHE COLLX_MPI PROPERTY STRINGS AUTO ON OFF)
collx_component_mode(COLLX_MPI)

set(COLLX_MPI_ENABLED OFF)
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Do not link MPI's deprecated C++ bindings")
if(COLLX_MPI_MODE STREQUAL "AUTO")
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(COLLX_MPI_ENABLED ON)
  endif()
  message(STATUS "collx: COLLX_MPI=AUTO -> ${COLLX_MPI_ENABLED}")
elseif(COLLX_MPI_MODE STREQUAL "ON")
  find_package(MPI COMPONENTS CXX)
  if(NOT MPI_CXX_FOUND)
    message(FATAL_ERROR "COLLX_MPI=ON but find_package(MPI) found no MPI library (Debian: "
                        "apt-get install libopenmpi-dev), or configure with -DCOLLX_MPI=OFF.")
  endif()
  set(COLLX_MPI_ENABLED ON)
endif()

if(COLLX_MPI_ENABLED)
  collx_component_target(mpi collxMpiTargets collx::collx MPI::MPI_CXX)  # loaded for COMPONENTS mpi
endif()
