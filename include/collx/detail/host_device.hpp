/// @file detail/host_device.hpp
/// COLLX_HOST_DEVICE: marks collx functions that CUDA kernels call too (the built-in ops, the narrow
/// float conversions, the reduction steps), so one definition serves the host and the device path
/// and both give the same bits.
#pragma once

/// `__host__ __device__` when compiled by a CUDA compiler (nvcc, or clang in CUDA mode); nothing
/// otherwise, so plain C++ builds see exactly the same functions as before.
#if defined(__CUDACC__)
#define COLLX_HOST_DEVICE __host__ __device__
#else
#define COLLX_HOST_DEVICE
#endif
