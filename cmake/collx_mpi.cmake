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
string(TOUPPER "${COLLX_MPI}" _collx_mpi_mode)
if(NOT _collx_mpi_mode MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|YES|NO|1|0)$")
  message(FATAL_ERROR "COLLX_MPI='${COLLX_MPI}': use AUTO, ON or OFF")
endif()

set(COLLX_MPI_ENABLED OFF)
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Do not link MPI's deprecated C++ bindings")
if(_collx_mpi_mode STREQUAL "AUTO")
  find_package(MPI QUIET COMPONENTS CXX)
  set(COLLX_MPI_ENABLED ${MPI_CXX_FOUND})
  message(STATUS "collx: COLLX_MPI=AUTO -> ${COLLX_MPI_ENABLED}")
elseif(_collx_mpi_mode MATCHES "^(ON|TRUE|YES|1)$")
  find_package(MPI COMPONENTS CXX)
  if(NOT MPI_CXX_FOUND)
    message(FATAL_ERROR "COLLX_MPI=ON but find_package(MPI) found no MPI library (Debian: "
                        "apt-get install libopenmpi-dev), or configure with -DCOLLX_MPI=OFF.")
  endif()
  set(COLLX_MPI_ENABLED ON)
endif()
unset(_collx_mpi_mode)

if(COLLX_MPI_ENABLED)
  add_library(collx_mpi INTERFACE)
  add_library(collx::mpi ALIAS collx_mpi)
  set_target_properties(collx_mpi PROPERTIES EXPORT_NAME mpi)
  target_link_libraries(collx_mpi INTERFACE collx::collx MPI::MPI_CXX)
  if(COLLX_INSTALL)
    install(TARGETS collx_mpi EXPORT collxMpiTargets)
    # Its own export set, loaded by collxConfig.cmake only for COMPONENTS mpi.
    install(EXPORT collxMpiTargets
            NAMESPACE collx::
            FILE collxMpiTargets.cmake
            DESTINATION "${COLLX_INSTALL_CMAKEDIR}")
  endif()
endif()
