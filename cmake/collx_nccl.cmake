# collx::nccl: collectives on device memory over NCCL (include/collx/nccl/) = collx::cuda + NCCL.
# Included from the top-level CMakeLists.txt after cmake/collx_cuda.cmake.
#
# COLLX_NCCL: AUTO (default) makes collx::nccl when collx::cuda exists and NCCL (nccl.h, libnccl)
# is found (cmake/collx_find_nccl.cmake: NCCL_ROOT, NCCL_HOME, the CUDA toolkit, system paths); ON
# requires both and fails at configure time without them; OFF never looks. collx::collx and
# collx::cuda never depend on NCCL.
set(COLLX_NCCL AUTO CACHE STRING "Build collx::nccl (device collectives over NCCL; needs collx::cuda and NCCL): AUTO, ON or OFF")
set_property(CACHE COLLX_NCCL PROPERTY STRINGS AUTO ON OFF)
collx_component_mode(COLLX_NCCL)

set(COLLX_NCCL_ENABLED OFF)
if(NOT COLLX_NCCL_MODE STREQUAL "OFF")
  if(COLLX_CUDA_ENABLED)
    include("${CMAKE_CURRENT_LIST_DIR}/collx_find_nccl.cmake")
  endif()
  if(COLLX_CUDA_ENABLED AND COLLX_NCCL_FOUND)
    set(COLLX_NCCL_ENABLED ON)
    message(STATUS "collx: COLLX_NCCL=${COLLX_NCCL} -> ON (${COLLX_NCCL_LIBRARY})")
  elseif(COLLX_NCCL_MODE STREQUAL "AUTO")
    message(STATUS "collx: COLLX_NCCL=AUTO -> OFF (needs collx::cuda and NCCL's nccl.h + libnccl)")
  else()
    message(FATAL_ERROR "COLLX_NCCL=ON but collx::cuda is off (COLLX_CUDA) or NCCL was not found (nccl.h and "
                        "libnccl; set NCCL_ROOT), or configure with -DCOLLX_NCCL=OFF.")
  endif()
endif()

if(COLLX_NCCL_ENABLED)
  # Loaded for COMPONENTS nccl, which defines collx::NCCL first with the same search
  # (collx_find_nccl.cmake, installed next to it).
  collx_component_target(nccl collxNcclTargets collx::cuda collx::NCCL)
  if(COLLX_INSTALL)
    install(FILES "${CMAKE_CURRENT_LIST_DIR}/collx_find_nccl.cmake" DESTINATION "${COLLX_INSTALL_CMAKEDIR}")
  endif()
endif()
