/// @file cuda/vector_access.hpp
/// Vector loads and stores for collx kernels: `Width` consecutive values read or written with one
/// aligned access (16 bytes for the widest buffer of a kernel). Plain C++ with COLLX_HOST_DEVICE:
/// on the device one load/store instruction, on the host a memcpy, so kernel bodies can also be
/// run (and tested) on the CPU.
#pragma once

#include <cstddef>
#include <cstring>

#include <collx/detail/host_device.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// `Width` consecutive values of type V, aligned to their total size so that one load or store
/// instruction moves them. Width x sizeof(V) must be a power of two of at most 16 bytes.
template <class V, unsigned Width>
struct alignas(sizeof(V) * Width) aligned_vector {
  static_assert(Width >= 1 && (sizeof(V) * Width & (sizeof(V) * Width - 1)) == 0 && sizeof(V) * Width <= 16,
                "aligned_vector: Width x sizeof(V) must be a power of two <= 16 bytes");
  V values[Width];  ///< the values, in memory order
};

/// Reads p[0, Width) with one access. Precondition: p is aligned to Width x sizeof(V) bytes
/// (collx::gpu::plan_vectors decides when it is); V default-constructible.
template <unsigned Width, class V>
COLLX_HOST_DEVICE inline aligned_vector<V, Width> load_vector(const V* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const aligned_vector<V, Width>*>(p);
#else
  aligned_vector<V, Width> v;
  std::memcpy(static_cast<void*>(&v), p, sizeof v);  // trivially copyable values (collx::element)
  return v;
#endif
}

/// Writes p[0, Width) with one access. Precondition: as for load_vector.
template <unsigned Width, class V>
COLLX_HOST_DEVICE inline void store_vector(V* p, const aligned_vector<V, Width>& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<aligned_vector<V, Width>*>(p) = v;
#else
  std::memcpy(static_cast<void*>(p), &v, sizeof v);
#endif
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
