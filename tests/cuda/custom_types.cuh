// User element types and ops the CUDA tests run as device functors (test_cuda_kernels.cu,
// test_nccl.cu): what NCCL cannot reduce, so collx's kernels must.
#pragma once

#include <cstdint>

namespace collx_cuda_test {

/// Composition of affine maps x -> mul * x + add modulo 2^32: associative, not commutative.
/// op(f, g) = "f, then g". 8 bytes: the vector path handles two per 16-byte access.
struct affine {
  std::uint32_t mul, add;
};
struct then_op {
  static constexpr const char* name = "then";
  __host__ __device__ affine operator()(const affine& f, const affine& g) const {
    return {f.mul * g.mul, f.add * g.mul + g.add};
  }
};

/// 12 bytes (not a power of two: always the kernels' scalar path), commutative: a wrapping sum, an
/// xor and a max in one element.
struct triple {
  std::int32_t sum;
  std::uint32_t bits;
  std::int32_t high;
};
struct triple_op {
  static constexpr bool commutative = true;
  static constexpr const char* name = "triple";
  __host__ __device__ triple operator()(const triple& x, const triple& y) const {
    return {static_cast<std::int32_t>(static_cast<std::uint32_t>(x.sum) + static_cast<std::uint32_t>(y.sum)),
            x.bits ^ y.bits, x.high < y.high ? y.high : x.high};
  }
};

}  // namespace collx_cuda_test
