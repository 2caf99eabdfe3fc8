#pragma once
/// @file
/// collx's device kernels this program may launch, so that a device communicator loads every one
/// of them into its GPU's context when it is created, as NCCL loads its kernels at init.
///
/// Why: under CUDA's lazy loading (the default since CUDA 12.2) a kernel is loaded at its first
/// launch, and the load may wait for every kernel running in the context. Ranks that share a
/// context (ranks as threads on one GPU) run kernels that wait for each other's, so a first launch
/// while a peer's kernel waits for this rank can wait until the timeout (the CUDA Programming
/// Guide's lazy-loading chapter names the hazard; it hung collx's GPU tests on an H200,
/// bench/results/h200-1gpu.md). collx's kernels are templates on the user's types and ops, so no
/// list of them exists before the program does: each one registers its loader (load_kernel in
/// cuda/device_collectives.cuh) during the static initialization of every .cu file that can
/// launch it, and unregisters it when that file's code is unloaded (dlclose). The registry is
/// one per program even across shared libraries built with hidden visibility (it is exported),
/// except for a library opened with dlopen by a program that does not export its symbols (linked
/// without -rdynamic): that library keeps a registry of its own, which communicators created in
/// the program do not see (each call still loads its own kernels first, load_kernels).
/// Not covered: kernels that are not collx's collectives (your own, cuBLAS's) launched for the
/// first time while a peer's collective waits. Plain C++: device_communicator.hpp compiles
/// without nvcc.

#include <mutex>
#include <vector>

namespace collx {
inline namespace v0 {
namespace gpu {
namespace device_detail {

/// Loads one kernel into the context of GPU `device` (the current device) if this process has
/// not yet; never throws, and leaves no CUDA error behind.
using kernel_loader = void (*)(int device) noexcept;

/// The loaders registered so far, behind the mutex that registrations from libraries loaded or
/// unloaded later (dlopen, dlclose) take.
struct kernel_loaders {
  std::mutex mutex;               ///< guards `all`
  std::vector<kernel_loader> all;  ///< one per registered kernel and translation unit, in registration order
};

/// Default visibility for the registry (GCC, Clang): one registry per program even where shared
/// libraries hide their symbols. Defined for this header only (undefined at its end).
#if defined(__GNUC__)
#define COLLX_EXPORTED __attribute__((visibility("default")))
#else
#define COLLX_EXPORTED
#endif

/// The program's one registry: built at the first registration whatever the order of
/// translation units, and never destroyed (registrations of shared libraries are destroyed at
/// exit after the program's own statics, which would include a function-local registry).
/// Exported, so that shared libraries built with -fvisibility=hidden share it with the program.
COLLX_EXPORTED inline kernel_loaders& registered_kernels() {
  static kernel_loaders& registry = *new kernel_loaders;  // never freed: see above
  return registry;
}

/// Registers one loader for as long as it lives: constructed during static initialization
/// (kernel_registered in device_collectives.cuh), destroyed at exit or when its library is
/// unloaded, so the registry never holds a loader whose code is gone.
class kernel_registration {
 public:
  /// Adds `load` to the registry. @throws std::bad_alloc only
  explicit kernel_registration(kernel_loader load) : load_(load) {
    kernel_loaders& r = registered_kernels();
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.all.push_back(load_);
  }
  /// Removes this registration's entry.
  ~kernel_registration() {
    kernel_loaders& r = registered_kernels();
    const std::lock_guard<std::mutex> lock(r.mutex);
    for (auto it = r.all.end(); it != r.all.begin();)
      if (*--it == load_) {
        r.all.erase(it);
        break;
      }
  }
  kernel_registration(const kernel_registration&) = delete;
  kernel_registration& operator=(const kernel_registration&) = delete;

 private:
  kernel_loader load_;
};

/// Loads every registered kernel into GPU `device`'s context, which must be current. A kernel
/// that cannot load (no code for this GPU) is skipped: its launch reports the error. No library
/// holding registered kernels may be unloaded (dlclose) while this runs, i.e. while a device
/// communicator is being made.
/// @throws std::bad_alloc only
inline void load_registered_kernels(int device) {
  std::vector<kernel_loader> loaders;
  {
    kernel_loaders& r = registered_kernels();
    const std::lock_guard<std::mutex> lock(r.mutex);
    loaders = r.all;
  }
  // Outside the lock: a library opened meanwhile registers from its static initialisers while
  // holding the dynamic loader's lock, which the CUDA runtime may need to load a kernel. A
  // library closed (dlclose) while a communicator is being made is not supported.
  for (const kernel_loader load : loaders) load(device);
}

}  // namespace device_detail
}  // namespace gpu
}  // namespace v0
}  // namespace collx

#undef COLLX_EXPORTED
