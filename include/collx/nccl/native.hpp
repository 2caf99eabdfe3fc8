/// @file nccl/native.hpp
/// Which (element type, op) pairs NCCL reduces itself, and which go through collx's schedules on
/// NCCL point-to-point calls instead. Plain C++ (no NCCL or CUDA headers), unit-tested without a GPU
/// by test_nccl_plan; nccl/communicator.hpp maps these names to ncclDataType_t / ncclRedOp_t.
#pragma once

#include <cstdint>
#include <type_traits>

#include <collx/numeric.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace nccl {

/// NCCL's element types, by name (nccl/communicator.hpp turns them into ncclDataType_t).
enum class data_type : std::uint8_t {
  none,      ///< NCCL has no such type: reductions run collx schedules
  int8,      ///< ncclInt8
  uint8,     ///< ncclUint8
  int32,     ///< ncclInt32
  uint32,    ///< ncclUint32
  int64,     ///< ncclInt64
  uint64,    ///< ncclUint64
  float16,   ///< ncclFloat16 (IEEE binary16: collx::half, __half)
  bfloat16,  ///< ncclBfloat16 (collx::bfloat16, __nv_bfloat16)
  float32,   ///< ncclFloat32
  float64,   ///< ncclFloat64
};

/// NCCL's built-in reduction ops, by name (ncclSum, ncclProd, ncclMin, ncclMax, ncclAvg).
enum class red_op : std::uint8_t {
  none,  ///< not one of NCCL's: reductions run collx schedules
  sum,   ///< ncclSum (ops::sum)
  prod,  ///< ncclProd (ops::prod)
  min,   ///< ncclMin (ops::min)
  max,   ///< ncclMax (ops::max)
  avg,   ///< ncclAvg (ops::avg)
};

/// NCCL's type for elements of type T, or data_type::none. Covers the standard integer types of 1,
/// 4 and 8 bytes by size and signedness (char by its signedness; bool and the charN_t/wchar_t types
/// are not mapped), float, double, collx::half and collx::bfloat16. nccl/communicator.hpp adds
/// CUDA's __half and __nv_bfloat16; specialise it for a type of your own that has NCCL's layout.
template <class T>
struct element_type {
  /// The type's NCCL name.
  static constexpr data_type value = [] {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same_v<U, float>) return data_type::float32;
    else if constexpr (std::is_same_v<U, double>) return data_type::float64;
    else if constexpr (std::is_same_v<U, half>) return data_type::float16;
    else if constexpr (std::is_same_v<U, bfloat16>) return data_type::bfloat16;
    else if constexpr (std::is_integral_v<U> && !std::is_same_v<U, bool> && !std::is_same_v<U, wchar_t> &&
                       !std::is_same_v<U, char8_t> && !std::is_same_v<U, char16_t> &&
                       !std::is_same_v<U, char32_t>) {
      constexpr bool s = std::is_signed_v<U>;
      if constexpr (sizeof(U) == 1) return s ? data_type::int8 : data_type::uint8;
      else if constexpr (sizeof(U) == 4) return s ? data_type::int32 : data_type::uint32;
      else if constexpr (sizeof(U) == 8) return s ? data_type::int64 : data_type::uint64;
      else return data_type::none;  // 2-byte integers: NCCL has none
    } else {
      return data_type::none;
    }
  }();
};

/// element_type<T>::value.
template <class T>
inline constexpr data_type element_type_v = element_type<T>::value;

/// NCCL's op for Op, or red_op::none (bitwise ops, user ops, commutative_op wrappers).
template <class Op>
inline constexpr red_op red_op_v = [] {
  if constexpr (std::is_same_v<Op, ops::avg>) return red_op::avg;  // before sum: avg derives from sum
  else if constexpr (std::is_same_v<Op, ops::sum>) return red_op::sum;
  else if constexpr (std::is_same_v<Op, ops::prod>) return red_op::prod;
  else if constexpr (std::is_same_v<Op, ops::min>) return red_op::min;
  else if constexpr (std::is_same_v<Op, ops::max>) return red_op::max;
  else return red_op::none;
}();

/// True when NCCL reduces T with Op itself (ncclAllReduce, ncclReduceScatter, ncclReduce): both have
/// an NCCL name. Otherwise the reduction runs a collx schedule over ncclSend/ncclRecv.
template <class T, class Op>
inline constexpr bool native_reduction_v = element_type_v<T> != data_type::none && red_op_v<Op> != red_op::none;

}  // namespace nccl
}  // namespace v0
}  // namespace collx
