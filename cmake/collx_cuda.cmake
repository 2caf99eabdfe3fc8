# collx::cuda: collx's CUDA kernels and device-side helpers (headers under include/collx/cuda/) plus
# the CUDA runtime. Included from the top-level CMakeLists.txt after collx::collx is defined.
#
# COLLX_CUDA: AUTO (default) makes collx::cuda when CUDA's toolkit is found; ON requires it and
# fails at configure time without it; OFF never looks. The core target collx::collx never depends
# on CUDA. Only collx's own .cu targets need a CUDA compiler (tests/cuda enables the language);
# consumers of collx::cuda bring their own nvcc and C++20 setting.
set(COLLX_CUDA AUTO CACHE STRING "Build collx::cuda (CUDA kernels; needs the CUDA toolkit): AUTO, ON or OFF")
set_property(CACHE COLLX_CUDA PROPERTY STRINGS AUTO ON OFF)
collx_component_mode(COLLX_CUDA)

set(COLLX_CUDA_ENABLED OFF)
if(COLLX_CUDA_MODE STREQUAL "AUTO")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
    set(COLLX_CUDA_ENABLED ON)
  endif()
  if(COLLX_CUDA_ENABLED)
    message(STATUS "collx: COLLX_CUDA=AUTO -> ON (CUDA ${CUDAToolkit_VERSION}, ${CUDAToolkit_NVCC_EXECUTABLE})")
  else()
    message(STATUS "collx: COLLX_CUDA=AUTO -> OFF (no CUDA toolkit with nvcc found)")
  endif()
elseif(COLLX_CUDA_MODE STREQUAL "ON")
  find_package(CUDAToolkit)
  if(NOT CUDAToolkit_FOUND OR NOT CUDAToolkit_NVCC_EXECUTABLE)
    message(FATAL_ERROR "COLLX_CUDA=ON but no CUDA toolkit with nvcc was found (looked in PATH, "
                        "CUDAToolkit_ROOT, CUDA_PATH and /usr/local/cuda). Install it, point "
                        "CUDAToolkit_ROOT at it, or configure with -DCOLLX_CUDA=OFF.")
  endif()
  set(COLLX_CUDA_ENABLED ON)
endif()

if(COLLX_CUDA_ENABLED)
  # A separate export set: installs without CUDA, and consumers that do not ask for the cuda
  # component, never need CUDA's toolkit (collxConfig.cmake includes it on request).
  collx_component_target(cuda collxCudaTargets collx::collx CUDA::cudart)
  # collx's host code (std::bit_cast, std::numeric_limits) is constexpr and runs on the device too.
  target_compile_options(collx_cuda INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
endif()
