/// @file cuda/runtime.hpp
/// Calls into the CUDA runtime that collx's device code needs on the host: error checking and the
/// device figures that launch geometry depends on. Host C++ with cudart (no nvcc needed).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include <collx/cuda/launch_geometry.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// Throws collx::error (errc::cuda) naming `what` and CUDA's error name and text unless
/// `status` is cudaSuccess.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    COLLX_THROW(errc::cuda, std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
                                cudaGetErrorString(status) + ")");
}

/// Makes `device` the calling thread's current CUDA device for a scope and restores the one it
/// found when the scope ends, as NCCL's calls do: collx's calls leave the caller's current device
/// (where its own cudaMalloc and launches go) as it was. Without a device, keeps the current one
/// and only restores it.
class scoped_device {
 public:
  /// Keeps the current device; restores it at the end of the scope.
  scoped_device() noexcept {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      saved_ = -1;
      (void)cudaGetLastError();
    }
  }
  /// Makes `device` current until the end of the scope.
  /// @throws collx::error (errc::cuda) naming `what` when it cannot be made current.
  scoped_device(int device, const char* what) : scoped_device() {
    if (device != saved_) check(cudaSetDevice(device), what);
  }
  /// Makes the device it found current again, if it found one and another is current now; errors
  /// are ignored (a destructor).
  ~scoped_device() {
    int now = -1;
    if (saved_ >= 0 && (cudaGetDevice(&now) != cudaSuccess || now != saved_)) (void)cudaSetDevice(saved_);
  }
  /// Not copyable: one scope restores the device once.
  scoped_device(const scoped_device&) = delete;
  /// Not copyable: one scope restores the device once.
  scoped_device& operator=(const scoped_device&) = delete;

 private:
  int saved_ = -1;
};

/// The launch limits of device `device` (a CUDA device ordinal).
/// @throws collx::error (errc::cuda) when the device cannot be queried.
inline device_limits device_limits_of(int device) {
  int sms = 0, threads = 0, grid_x = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute(MultiProcessorCount)");
  check(cudaDeviceGetAttribute(&threads, cudaDevAttrMaxThreadsPerBlock, device), "cudaDeviceGetAttribute(MaxThreadsPerBlock)");
  check(cudaDeviceGetAttribute(&grid_x, cudaDevAttrMaxGridDimX, device), "cudaDeviceGetAttribute(MaxGridDimX)");
  return {sms, static_cast<unsigned>(threads), static_cast<unsigned long long>(grid_x)};
}

/// The launch limits of the calling thread's current device (cudaGetDevice).
/// @throws collx::error (errc::cuda) when there is no usable device.
inline device_limits current_device_limits() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device_limits_of(device);
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
