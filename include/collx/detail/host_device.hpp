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

/// Put before a COLLX_HOST_DEVICE function template that calls user code (an op, a narrow_float
/// specialisation): nvcc then does not reject the host-only user code that host collectives in a
/// .cu file may use (warning 20011). Code that really runs that call on the device still fails to
/// build, at the kernel's instantiation. Thrust and CUB do the same. Nothing outside nvcc.
#if defined(__NVCC__)
#define COLLX_NV_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define COLLX_NV_EXEC_CHECK_DISABLE
#endif
