/// @file cuda/vector_access.cuh
/// Vector loads and stores for collx kernels: `width` consecutive values read or written with one
/// aligned access (16 bytes for the widest buffer of a kernel). For .cu files (nvcc).
#pragma once

#include <cstddef>

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
/// (collx::gpu::plan_vectors decides when it is).
template <unsigned Width, class V>
__device__ __forceinline__ aligned_vector<V, Width> load_vector(const V* p) {
  return *reinterpret_cast<const aligned_vector<V, Width>*>(p);
}

/// Writes p[0, Width) with one access. Precondition: as for load_vector.
template <unsigned Width, class V>
__device__ __forceinline__ void store_vector(V* p, const aligned_vector<V, Width>& v) {
  *reinterpret_cast<aligned_vector<V, Width>*>(p) = v;
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
