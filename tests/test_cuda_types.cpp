// collx/cuda_types.hpp in plain host code (g++ or clang++ with CUDA's include directory, no nvcc):
// CUDA's __half and __nv_bfloat16 are narrow floats for collx, with the same bits as collx::half
// and collx::bfloat16, and CUDA's own host conversions agree with collx's.
// Build only where the CUDA include directory exists (e.g. -isystem /usr/local/cuda/include).
#include <catch2/catch.hpp>

#include <collx/cuda_types.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/concepts.hpp>
#include <collx/ops.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

// (cuda_fp16.h declares a global `half` = __half, so collx's types are named in full here.)
using cx_half = collx::half;
using cx_bf16 = collx::bfloat16;

static_assert(sizeof(__half) == sizeof(cx_half) && alignof(__half) == alignof(cx_half));
static_assert(sizeof(__nv_bfloat16) == sizeof(cx_bf16) && alignof(__nv_bfloat16) == alignof(cx_bf16));
static_assert(collx::is_narrow_float_v<__half> && collx::is_narrow_float_v<__nv_bfloat16>);
static_assert(collx::element<__half> && collx::element<__nv_bfloat16>);
static_assert(collx::reduction_op<collx::ops::sum, __half> && collx::reduction_op<collx::ops::max, __nv_bfloat16>);
static_assert(std::is_same_v<collx::detail::reduction<__half, collx::ops::sum>::acc, float>);
static_assert(std::is_same_v<collx::detail::reduction<__nv_bfloat16, collx::ops::avg>::acc, float>);
// A user op taking floats runs in fp32 on CUDA's narrow types too, although they convert to and
// from float implicitly (so it would also take them), and so does a generic one, although __half
// has arithmetic; one typed on the narrow type does not.
namespace {
inline constexpr auto float_sum = [](float a, float b) { return a + b; };
inline constexpr auto half_max = [](__half a, __half b) { return __hlt(a, b) ? b : a; };
inline constexpr auto generic_sum = [](auto a, auto b) { return a + b; };
}  // namespace
static_assert(collx::reduction_op<std::remove_const_t<decltype(generic_sum)>, __half> &&
              std::is_same_v<collx::detail::reduction<__half, std::remove_const_t<decltype(generic_sum)>>::acc, float> &&
              std::is_same_v<collx::detail::reduction<__nv_bfloat16, std::remove_const_t<decltype(generic_sum)>>::acc, float>);
static_assert(collx::reduction_op<std::remove_const_t<decltype(float_sum)>, __half> &&
              std::is_same_v<collx::detail::reduction<__half, std::remove_const_t<decltype(float_sum)>>::acc, float> &&
              std::is_same_v<collx::detail::reduction<__nv_bfloat16, std::remove_const_t<decltype(float_sum)>>::acc, float>);
static_assert(collx::reduction_op<std::remove_const_t<decltype(half_max)>, __half> &&
              std::is_same_v<collx::detail::reduction<__half, std::remove_const_t<decltype(half_max)>>::acc, __half>);

namespace {
std::uint16_t bits(__half h) { return std::bit_cast<std::uint16_t>(h); }
std::uint16_t bits(__nv_bfloat16 h) { return std::bit_cast<std::uint16_t>(h); }
bool same_float(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }
}  // namespace

TEST_CASE("cuda_types: every encoding widens like collx's and like CUDA's", "[numeric][cuda]") {
  int bad = 0;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const std::uint16_t u = static_cast<std::uint16_t>(b);
    const __half h = std::bit_cast<__half>(u);
    const __nv_bfloat16 g = std::bit_cast<__nv_bfloat16>(u);
    const float hw = collx::narrow_float<__half>::widen(h), gw = collx::narrow_float<__nv_bfloat16>::widen(g);
    const bool h_ok = std::isnan(hw) ? std::isnan(__half2float(h)) && std::isnan(static_cast<float>(cx_half::from_bits(u)))
                                     : same_float(hw, static_cast<float>(cx_half::from_bits(u))) && same_float(hw, __half2float(h));
    const bool g_ok = std::isnan(gw) ? std::isnan(__bfloat162float(g))
                                     : same_float(gw, static_cast<float>(cx_bf16::from_bits(u))) && same_float(gw, __bfloat162float(g));
    if (!h_ok || !g_ok) {
      if (++bad <= 5) FAIL_CHECK("encoding " << b << ": half ok " << h_ok << ", bfloat16 ok " << g_ok);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda_types: float -> __half/__nv_bfloat16 gives collx's bits and CUDA's _rn bits", "[numeric][cuda]") {
  std::mt19937 gen(7u);
  std::uniform_int_distribution<std::uint32_t> any;
  std::uniform_int_distribution<int> exp_near(100, 145);
  int bad = 0;
  for (int i = 0; i < 300000; ++i) {
    const std::uint32_t raw = i % 2 ? any(gen) : (any(gen) & 0x807fffffu) | static_cast<std::uint32_t>(exp_near(gen)) << 23;
    const float f = std::bit_cast<float>(raw);
    if (std::isnan(f)) continue;  // NaN payloads are not specified to agree; NaN-ness is checked above
    const __half h = collx::narrow_float<__half>::narrow(f);
    const __nv_bfloat16 g = collx::narrow_float<__nv_bfloat16>::narrow(f);
    if (bits(h) != cx_half(f).bits || bits(h) != bits(__float2half_rn(f)) || bits(g) != cx_bf16(f).bits ||
        bits(g) != bits(__float2bfloat16_rn(f))) {
      if (++bad <= 5)
        FAIL_CHECK("float bits " << raw << ": __half " << bits(h) << " collx " << cx_half(f).bits << " cuda "
                                 << bits(__float2half_rn(f)) << "; bf16 " << bits(g) << " collx " << cx_bf16(f).bits
                                 << " cuda " << bits(__float2bfloat16_rn(f)));
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda_types: reductions on CUDA types equal those on collx types", "[numeric][cuda]") {
  using rh = collx::detail::reduction<__half, collx::ops::sum>;
  using rc = collx::detail::reduction<cx_half, collx::ops::sum>;
  using rb = collx::detail::reduction<__nv_bfloat16, collx::ops::avg>;
  using rd = collx::detail::reduction<cx_bf16, collx::ops::avg>;
  const float xs[] = {65504.0f, 16.0f, 0.1f, 0.2f, 1.0f, 0x1p-11f, 0x1p-24f, 256.0f, -3.5f};
  for (float a : xs)
    for (float b : xs) {
      const __half ha = __float2half_rn(a), hb = __float2half_rn(b);
      const __half r1 = rh::finalize(rh::combine({}, rh::widen(ha), rh::widen(hb)), 2);
      const cx_half r2 = rc::finalize(rc::combine({}, rc::widen(cx_half(a)), rc::widen(cx_half(b))), 2);
      CHECK(bits(r1) == r2.bits);
      CHECK(bits(collx::ops::sum{}(ha, hb)) == collx::ops::sum{}(cx_half(a), cx_half(b)).bits);
      const __nv_bfloat16 ba = __float2bfloat16_rn(a), bb = __float2bfloat16_rn(b);
      const __nv_bfloat16 r3 = rb::finalize(rb::combine({}, rb::widen(ba), rb::widen(bb)), 3);
      const cx_bf16 r4 = rd::finalize(rd::combine({}, rd::widen(cx_bf16(a)), rd::widen(cx_bf16(b))), 3);
      CHECK(bits(r3) == r4.bits);
    }
}
