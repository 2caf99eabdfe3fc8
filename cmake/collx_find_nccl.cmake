# Finds NCCL (nccl.h and libnccl) and defines the imported target collx::NCCL; sets
# COLLX_NCCL_FOUND. Looks in NCCL_ROOT / NCCL_HOME (CMake or environment variables), then next to
# the CUDA toolkit find_package(CUDAToolkit) found (CUDA 13 installs may carry NCCL there), then
# the system paths. Used by cmake/collx_nccl.cmake when building collx and, installed, by
# collxConfig.cmake for COMPONENTS nccl.
if(TARGET collx::NCCL)
  set(COLLX_NCCL_FOUND TRUE)
  return()
endif()
set(_collx_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _collx_nccl_hints "${CUDAToolkit_LIBRARY_ROOT}")
endif()
find_path(COLLX_NCCL_INCLUDE_DIR nccl.h HINTS ${_collx_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(COLLX_NCCL_LIBRARY NAMES nccl HINTS ${_collx_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib64 lib)
unset(_collx_nccl_hints)
if(COLLX_NCCL_INCLUDE_DIR AND COLLX_NCCL_LIBRARY)
  add_library(collx::NCCL UNKNOWN IMPORTED)
  set_target_properties(collx::NCCL PROPERTIES
    IMPORTED_LOCATION "${COLLX_NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${COLLX_NCCL_INCLUDE_DIR}")
  set(COLLX_NCCL_FOUND TRUE)
else()
  set(COLLX_NCCL_FOUND FALSE)
endif()
