/// @file cuda/device_callable.cuh
/// Makes a user op or narrow-float conversion without a __device__ version a compile error in
/// collx's kernels. For .cu files (nvcc).
#pragma once

#include <type_traits>

#include <collx/numeric.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// Names, in device-only code, the user code a reduction of T with Op calls on the device: op(T, T)
/// (op(float, float) where it runs in fp32) and, for narrow floats, narrow_float<T>'s widen and
/// narrow. A host-only one is then a hard error
/// ("calling a __host__ function from a __device__ function") where the kernel is instantiated,
/// instead of a kernel that nvcc compiles to nothing: collx's shared host/device functions turn that
/// check off (COLLX_NV_EXEC_CHECK_DISABLE) so that host code in .cu files may use host-only ops.
/// Kernels call it on a branch never taken at run time; x is not read.
template <class T, class Op>
__device__ void require_device_callable(const Op& op, const T& x) {
  // Not callable at all: the collective's own static_assert has said so; no second error here.
  if constexpr (collx::detail::op_runs_in_fp32<Op, T>) {  // it gets fp32 operands
    const float v = narrow_float<T>::widen(x);
    (void)op(v, v);  // An error here: the op needs a __device__ (or __host__ __device__) call operator.
  } else if constexpr (std::is_invocable_v<const Op&, const T&, const T&>) {
    (void)op(x, x);  // An error here: the op needs a __device__ (or __host__ __device__) call operator.
  }
  if constexpr (is_narrow_float_v<T>)  // An error here: narrow_float<T> needs __device__ widen and narrow.
    (void)narrow_float<T>::narrow(narrow_float<T>::widen(x));
}

/// commutative_op forwards with the check off too: check the op it wraps.
template <class T, class F>
__device__ void require_device_callable(const commutative_op<F>& op, const T& x) {
  require_device_callable<T>(op.f, x);
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
