# CUDA for collx's own targets (tests/cuda, later bench and tools): the CUDA language and
# collx_cuda_dev_options, the CUDA counterpart of collx_dev_options. Included from the top-level
# CMakeLists.txt when collx::cuda exists and collx is the top-level project.
#
#   COLLX_CUDA_ARCHITECTURES  default "80-real;90": sm_80 and sm_90 machine code plus compute_90 PTX
#                             (which newer GPUs JIT-compile).
#   COLLX_WERROR              also makes every nvcc warning an error (-Werror all-warnings) and the
#                             host compiler's, through -Xcompiler.
set(COLLX_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "CUDA_ARCHITECTURES of collx's own CUDA targets")

# The toolkit found for collx::cuda decides the compiler too (nvcc need not be on PATH), and
# CMake's compiler check builds for the same architectures instead of its own default.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "${COLLX_CUDA_ARCHITECTURES}")
endif()
# C++20 for .cu files through CUDA_STANDARD, so that CMake adds no standard flag of its own after
# it. CMake before 3.25.2 knows no C++20 flag for nvcc: it is named here, before the language is
# enabled (a -std=c++20 option instead was followed by CMake's -std=c++17 wherever the host
# compiler defaults to C++14, as clang 14 does, and nvcc takes the last).
if(CMAKE_VERSION VERSION_LESS 3.25.2 AND NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

add_library(collx_cuda_dev_options INTERFACE)
# Host compiler warnings as for collx_dev_options, minus -Wpedantic: nvcc's generated host code
# uses GNU extensions. nvcc's own front end checks device code.
target_compile_options(collx_cuda_dev_options INTERFACE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(COLLX_WERROR)
  target_compile_options(collx_cuda_dev_options INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
  # nvcc's default host compiler is g++; "clang++" ends in "g++" too, and clang rejects the option.
  if(NOT CMAKE_CUDA_HOST_COMPILER OR (CMAKE_CUDA_HOST_COMPILER MATCHES "g\\+\\+|gcc" AND NOT CMAKE_CUDA_HOST_COMPILER MATCHES "clang"))
    # Same GCC 12 false -Wrestrict in libstdc++ as in collx_dev_options.
    target_compile_options(collx_cuda_dev_options INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-error=restrict>)
  endif()
endif()

# collx_cuda_target(<target>): collx's settings for a target with .cu sources.
function(collx_cuda_target target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${COLLX_CUDA_ARCHITECTURES}")
  target_link_libraries(${target} PRIVATE collx::cuda collx_cuda_dev_options)
endfunction()
