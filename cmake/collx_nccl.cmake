# collx::nccl: collectives on device memory over NCCL (include/collx/nccl/) = collx::cuda + NCCL.
# Included from the top-level CMakeLists.txt after cmake/collx_cuda.cmake.
#
# COLLX_NCCL: AUTO (default) makes collx::nccl when collx::cuda exists and NCCL (nccl.h, libnccl)
# is found (cmake/collx_find_nccl.cmake: NCCL_ROOT, NCCL_HOME, the CUDA toolkit, system paths); ON
# requires both and fails at configure time without them; OFF never looks. collx::collx and
# collx::cuda never depend on NCCL.
set(COLLX_NCCL AUTO CACHE STRING "Build collx::nccl (device collectives over NCCL; needs collx::cuda and NCCL): AUTO, ON or OFF")
set_property(CACHE COLLX_NCCL PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${COLLX_NCCL}" _collx_nccl_mode)
if(NOT _collx_nccl_mode MATCHES "^(AUTO|ON|OFF|TRUE|FALSE|YES|NO|1|0)$")
  message(FATAL_ERROR "COLLX_NCCL='${COLLX_NCCL}': use AUTO, ON or OFF")
endif()

set(COLLX_NCCL_ENABLED OFF)
if(NOT _collx_nccl_mode MATCHES "^(OFF|FALSE|NO|0)$")
  if(COLLX_CUDA_ENABLED)
    include("${CMAKE_CURRENT_LIST_DIR}/collx_find_nccl.cmake")
  endif()
  if(COLLX_CUDA_ENABLED AND COLLX_NCCL_FOUND)
    set(COLLX_NCCL_ENABLED ON)
    message(STATUS "collx: COLLX_NCCL=${COLLX_NCCL} -> ON (${COLLX_NCCL_LIBRARY})")
  elseif(_collx_nccl_mode STREQUAL "AUTO")
    message(STATUS "collx: COLLX_NCCL=AUTO -> OFF (needs collx::cuda and NCCL's nccl.h + libnccl)")
  else()
    message(FATAL_ERROR "COLLX_NCCL=ON but collx::cuda is off (COLLX_CUDA) or NCCL was not found (nccl.h and "
                        "libnccl; set NCCL_ROOT), or configure with -DCOLLX_NCCL=OFF.")
  endif()
endif()
unset(_collx_nccl_mode)

if(COLLX_NCCL_ENABLED)
  add_library(collx_nccl INTERFACE)
  add_library(collx::nccl ALIAS collx_nccl)
  set_target_properties(collx_nccl PROPERTIES EXPORT_NAME nccl)
  target_link_libraries(collx_nccl INTERFACE collx::cuda collx::NCCL)
  if(COLLX_INSTALL)
    install(TARGETS collx_nccl EXPORT collxNcclTargets)
    # Its own export set, loaded by collxConfig.cmake only for COMPONENTS nccl, which defines
    # collx::NCCL first with the same search (installed next to it).
    install(EXPORT collxNcclTargets
            NAMESPACE collx::
            FILE collxNcclTargets.cmake
            DESTINATION "${COLLX_INSTALL_CMAKEDIR}")
    install(FILES "${CMAKE_CURRENT_LIST_DIR}/collx_find_nccl.cmake" DESTINATION "${COLLX_INSTALL_CMAKEDIR}")
  endif()
endif()
