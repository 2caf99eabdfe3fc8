/// @file cuda_types.hpp
/// Lets CUDA's own __half and __nv_bfloat16 be collx elements in host code and in collx's kernels:
/// they are widened to fp32 for built-in reductions exactly like collx::half / collx::bfloat16 (same
/// bits, same rounding, on the host and on the device).
/// Needs the CUDA toolkit's include directory; compiles with plain g++ or clang++.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <bit>
#include <collx/numeric.hpp>

namespace collx {
inline namespace v0 {

static_assert(sizeof(__half) == 2 && std::is_trivially_copyable_v<__half>);
static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable_v<__nv_bfloat16>);

/// CUDA's __half is a narrow float, converted bit for bit as collx::half.
template <>
struct narrow_float<__half> : std::true_type {
  /// Exact conversion to float.
  COLLX_HOST_DEVICE static float widen(__half h) noexcept { return detail::half_bits_to_float(std::bit_cast<std::uint16_t>(h)); }
  /// Rounds f to the nearest binary16, ties to even (overflow gives inf, NaN stays NaN), as collx::half(float).
  COLLX_HOST_DEVICE static __half narrow(float f) noexcept { return std::bit_cast<__half>(detail::float_to_half_bits(f)); }
  /// narrow for a reduction's result: a NaN becomes the canonical quiet NaN, as collx::half's.
  COLLX_HOST_DEVICE static __half narrow_result(float f) noexcept {
    return std::bit_cast<__half>(detail::float_to_half_bits<true>(f));
  }
};

/// CUDA's __nv_bfloat16 is a narrow float, converted bit for bit as collx::bfloat16.
template <>
struct narrow_float<__nv_bfloat16> : std::true_type {
  /// Exact conversion to float.
  COLLX_HOST_DEVICE static float widen(__nv_bfloat16 h) noexcept {
    return detail::bfloat16_bits_to_float(std::bit_cast<std::uint16_t>(h));
  }
  /// Rounds f to the nearest bfloat16, ties to even (NaN stays a quiet NaN), as collx::bfloat16(float).
  COLLX_HOST_DEVICE static __nv_bfloat16 narrow(float f) noexcept {
    return std::bit_cast<__nv_bfloat16>(detail::float_to_bfloat16_bits(f));
  }
  /// narrow for a reduction's result: a NaN becomes the canonical quiet NaN, as collx::bfloat16's.
  COLLX_HOST_DEVICE static __nv_bfloat16 narrow_result(float f) noexcept {
    return std::bit_cast<__nv_bfloat16>(detail::float_to_bfloat16_bits<true>(f));
  }
};

}  // namespace v0
}  // namespace collx
