/// @file numeric.hpp
/// Narrow floating-point element types (IEEE binary16 and bfloat16), and the trait that tells collx
/// a type is a narrow float to be accumulated in fp32. The conversions are COLLX_HOST_DEVICE, so
/// collx's CUDA kernels round exactly as the host does (including NaN payloads).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include <collx/detail/host_device.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// float -> IEEE binary16 bits, round to nearest, ties to even; overflow gives inf; NaN stays NaN
/// (quiet, payload's top bits kept; with CanonicalNan, the canonical quiet NaN 0x7e00).
template <bool CanonicalNan = false>
COLLX_HOST_DEVICE constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (CanonicalNan && ax > 0x7f800000u) return 0x7e00u;
    return static_cast<std::uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0u));
  }
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax >= 0x38800000u) {  // normal binary16 (>= 2^-14): rebias the exponent, round at bit 13
    std::uint32_t r = ax - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (ax <= 0x33000000u) return static_cast<std::uint16_t>(sign);  // <= 2^-25 rounds to (signed) zero
  // subnormal binary16: units of 2^-24
  const std::uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - (ax >> 23);
  std::uint32_t q = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
}

/// IEEE binary16 bits -> float (exact).
COLLX_HOST_DEVICE constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24, exact
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// float -> bfloat16 bits, round to nearest, ties to even; NaN stays a quiet NaN (with
/// CanonicalNan, the canonical quiet NaN 0x7fc0).
template <bool CanonicalNan = false>
COLLX_HOST_DEVICE constexpr std::uint16_t float_to_bfloat16_bits(float f) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return CanonicalNan ? 0x7fc0u : static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// bfloat16 bits -> float (exact).
COLLX_HOST_DEVICE constexpr float bfloat16_bits_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}
}  // namespace detail

/// IEEE 754 binary16 ("fp16", 1+5+10 bits) as a plain 2-byte trivially copyable value.
/// Layout-compatible with CUDA's __half. Conversions round to nearest, ties to even.
struct half {
  std::uint16_t bits = 0;  ///< the raw encoding
  /// +0 (bits 0, from the member initializer: never indeterminate).
  constexpr half() = default;
  /// Rounds f to the nearest binary16 (ties to even; beyond 65520 in magnitude becomes inf).
  COLLX_HOST_DEVICE constexpr explicit half(float f) noexcept : bits(detail::float_to_half_bits(f)) {}
  /// Exact conversion to float.
  COLLX_HOST_DEVICE constexpr explicit operator float() const noexcept { return detail::half_bits_to_float(bits); }
  /// The value with encoding b.
  COLLX_HOST_DEVICE static constexpr half from_bits(std::uint16_t b) noexcept { half h; h.bits = b; return h; }
  /// Bitwise equality (so +0 != -0 and a NaN equals itself): what "bit-identical" means.
  COLLX_HOST_DEVICE friend constexpr bool operator==(half a, half b) noexcept { return a.bits == b.bits; }
};

/// bfloat16 (1+8+7 bits: the top half of an IEEE binary32) as a plain 2-byte value.
/// Layout-compatible with CUDA's __nv_bfloat16. Conversions round to nearest, ties to even.
struct bfloat16 {
  std::uint16_t bits = 0;  ///< the raw encoding
  /// +0 (bits 0, from the member initializer: never indeterminate).
  constexpr bfloat16() = default;
  /// Rounds f to the nearest bfloat16 (ties to even).
  COLLX_HOST_DEVICE constexpr explicit bfloat16(float f) noexcept : bits(detail::float_to_bfloat16_bits(f)) {}
  /// Exact conversion to float.
  COLLX_HOST_DEVICE constexpr explicit operator float() const noexcept { return detail::bfloat16_bits_to_float(bits); }
  /// The value with encoding b.
  COLLX_HOST_DEVICE static constexpr bfloat16 from_bits(std::uint16_t b) noexcept { bfloat16 h; h.bits = b; return h; }
  /// Bitwise equality, as for half.
  COLLX_HOST_DEVICE friend constexpr bool operator==(bfloat16 a, bfloat16 b) noexcept { return a.bits == b.bits; }
};

/// Trait: T is a narrow float that collx widens to fp32 for arithmetic (sum, prod, avg, min, max).
/// Specialise it for your own 16-bit float with static `float widen(T)` and `T narrow(float)`
/// (round to nearest even), and optionally `T narrow_result(float)`, narrow with a NaN written as
/// the type's canonical quiet NaN (else a reduction's result tests for NaN before narrow);
/// collx/cuda_types.hpp does so for CUDA's __half and __nv_bfloat16.
template <class T>
struct narrow_float : std::false_type {};

/// collx::half is a narrow float.
template <>
struct narrow_float<half> : std::true_type {
  /// Exact conversion to float.
  COLLX_HOST_DEVICE static constexpr float widen(half h) noexcept { return static_cast<float>(h); }
  /// Rounds f to the nearest binary16, ties to even (as half(float): overflow gives inf, NaN stays NaN).
  COLLX_HOST_DEVICE static constexpr half narrow(float f) noexcept { return half(f); }
  /// narrow for a reduction's result (reduction::finalize): a NaN becomes the canonical quiet NaN.
  COLLX_HOST_DEVICE static constexpr half narrow_result(float f) noexcept {
    return half::from_bits(detail::float_to_half_bits<true>(f));
  }
};

/// collx::bfloat16 is a narrow float.
template <>
struct narrow_float<bfloat16> : std::true_type {
  /// Exact conversion to float.
  COLLX_HOST_DEVICE static constexpr float widen(bfloat16 h) noexcept { return static_cast<float>(h); }
  /// Rounds f to the nearest bfloat16, ties to even (as bfloat16(float): NaN stays a quiet NaN).
  COLLX_HOST_DEVICE static constexpr bfloat16 narrow(float f) noexcept { return bfloat16(f); }
  /// narrow for a reduction's result (reduction::finalize): a NaN becomes the canonical quiet NaN.
  COLLX_HOST_DEVICE static constexpr bfloat16 narrow_result(float f) noexcept {
    return bfloat16::from_bits(detail::float_to_bfloat16_bits<true>(f));
  }
};

/// True when T is a narrow float (see narrow_float).
template <class T>
inline constexpr bool is_narrow_float_v = narrow_float<std::remove_cv_t<T>>::value;

}  // namespace v0
}  // namespace collx
