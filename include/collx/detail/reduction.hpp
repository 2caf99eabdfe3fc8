/// @file detail/reduction.hpp
/// How an (element type, op) pair is reduced: accumulator type, widening, combining, finalising.
#pragma once

#include <cstddef>
#include <cstring>
#include <limits>
#include <type_traits>

#include <collx/concepts.hpp>
#include <collx/detail/host_device.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

template <class Op>
inline constexpr bool is_builtin_arith_op_v =
    std::is_same_v<Op, ops::sum> || std::is_same_v<Op, ops::prod> || std::is_same_v<Op, ops::min> ||
    std::is_same_v<Op, ops::max> || std::is_same_v<Op, ops::avg>;

/// Reduction of T with Op. Partial results have type `acc` (fp32 for narrow floats under built-in
/// ops and user ops that take floats: op_runs_in_fp32; T otherwise); `finalize` turns a complete
/// result into the value written to the user.
template <class T, class Op>
struct reduction {
  static constexpr bool widened = is_narrow_float_v<T> && (is_builtin_arith_op_v<Op> || op_runs_in_fp32<Op, T>);
  using acc = std::conditional_t<widened, float, T>;
  /// Whether results need more than a copy when written (rounding or the avg division).
  static constexpr bool needs_finalize = widened || op_traits<Op>::is_avg;

  COLLX_NV_EXEC_CHECK_DISABLE
  COLLX_HOST_DEVICE static constexpr acc widen(const T& x) noexcept {
    if constexpr (widened) return narrow_float<T>::widen(x);
    else return x;
  }
  COLLX_NV_EXEC_CHECK_DISABLE
  COLLX_HOST_DEVICE static constexpr acc combine(const Op& op, const acc& a, const acc& b) {
    if constexpr (widened) {
      if constexpr (std::is_same_v<Op, ops::avg>) return ops::sum{}(a, b);
      else return static_cast<acc>(op(a, b));
    } else if constexpr (std::is_invocable_v<const Op&, const T&, const T&>) {
      return static_cast<T>(op(a, b));
    } else {
      // Reached only by code that does not compile: every collective asserts that Op reduces T
      // (gpu::) or is constrained on it (host), with the message that matters; this branch keeps
      // the kernels from adding a second error after it.
      return a;
    }
  }
  COLLX_NV_EXEC_CHECK_DISABLE
  COLLX_HOST_DEVICE static constexpr T finalize(const acc& a, int world_size) noexcept {
    acc v = a;
    if constexpr (op_traits<Op>::is_avg) {
      if constexpr (std::signed_integral<acc>)
        v = static_cast<acc>(static_cast<long long>(v) / static_cast<long long>(world_size));
      else if constexpr (std::unsigned_integral<acc>)
        v = static_cast<acc>(static_cast<unsigned long long>(v) / static_cast<unsigned long long>(world_size));
      else if constexpr (is_std_complex_v<acc>)  // by a real n: each part divided, as for a real
        v = v / static_cast<typename acc::value_type>(world_size);
      else
        v = static_cast<acc>(v / static_cast<acc>(world_size));
    }
    if constexpr (widened) {
      // A NaN result is the canonical quiet NaN, as ops::min/max give: which operand's payload
      // `a + b` keeps follows the operand order the compiler chose, which differs between code
      // paths and so between ranks (fp16 NaNs 7f4f + 7e81 on 3 thread ranks gave 7f4f, 7f4f, 7e81).
      // narrow_result does it inside the conversion's own inf/NaN branch, adding no test to the
      // finite values' path.
      if constexpr (requires { narrow_float<T>::narrow_result(v); }) {
        return narrow_float<T>::narrow_result(v);
      } else {
        if (v != v) v = std::numeric_limits<acc>::quiet_NaN();
        return narrow_float<T>::narrow(v);
      }
    } else {
      return v;
    }
  }
};

}  // namespace detail
}  // namespace v0
}  // namespace collx
