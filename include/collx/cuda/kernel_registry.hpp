#pragma once
/// @file
/// The device kernels this program may launch, so that a device communicator loads every one of
/// them into its GPU's context when it is created, as NCCL loads its kernels at init.
///
/// Why: under CUDA's lazy loading (the default since CUDA 12.2) a kernel is loaded at its first
/// launch, and the load may wait for every kernel running in the context. Ranks that share a
/// context (ranks as threads on one GPU) run kernels that wait for each other's, so a first launch
/// while a peer's kernel waits for this rank can wait until the timeout (the CUDA Programming
/// Guide's lazy-loading chapter names the hazard; it hung collx's GPU tests on an H200,
/// bench/results/h200-1gpu.md). collx's kernels are templates on the user's types and ops, so no
/// list of them exists before the program does: each one registers its loader (load_kernel in
/// cuda/device_collectives.cuh) during the program's static initialization, from every .cu file
/// that can launch it. Plain C++: device_communicator.hpp compiles without nvcc.

#include <mutex>
#include <vector>

namespace collx {
inline namespace v0 {
namespace gpu {
namespace device_detail {

/// Loads one kernel into the context of GPU `device` (the current device) if this process has
/// not yet; never throws, and leaves no CUDA error behind.
using kernel_loader = void (*)(int device) noexcept;

/// The loaders registered so far (function-local: registration runs during static
/// initialization, in any order of translation units), behind the mutex that libraries loaded
/// later (dlopen) register under.
struct kernel_loaders {
  std::mutex mutex;
  std::vector<kernel_loader> all;
};

/// The program's one registry.
inline kernel_loaders& registered_kernels() {
  static kernel_loaders registry;
  return registry;
}

/// Adds `load` to the registry. @return true (the value of the registering variable).
inline bool register_kernel(kernel_loader load) {
  kernel_loaders& r = registered_kernels();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.all.push_back(load);
  return true;
}

/// Loads every registered kernel into GPU `device`'s context, which must be current. A kernel
/// that cannot load (no code for this GPU) is skipped: its launch reports the error.
/// @throws std::bad_alloc only
inline void load_registered_kernels(int device) {
  std::vector<kernel_loader> loaders;
  {
    kernel_loaders& r = registered_kernels();
    const std::lock_guard<std::mutex> lock(r.mutex);
    loaders = r.all;
  }
  for (const kernel_loader load : loaders) load(device);
}

}  // namespace device_detail
}  // namespace gpu
}  // namespace v0
}  // namespace collx
