/// @file cuda/launch_geometry.hpp
/// How many blocks and threads an element-wise collx kernel is launched with. Plain C++ (no CUDA
/// headers): the device's figures come in as numbers, so the arithmetic is unit-tested without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// The figures of the device a kernel runs on that bound its launch (from cudaDeviceGetAttribute).
struct device_limits {
  int sm_count = 0;                           ///< multiprocessors (cudaDevAttrMultiProcessorCount); >= 1
  unsigned max_threads_per_block = 1024;      ///< cudaDevAttrMaxThreadsPerBlock
  unsigned long long max_grid_x = 2147483647;  ///< cudaDevAttrMaxGridDimX
};

/// What collx asks of a launch. Element-wise kernels are memory-bound: a grid of a few full blocks
/// per multiprocessor that strides over the data keeps every SM's loads in flight without paying for
/// millions of short-lived blocks.
struct launch_policy {
  unsigned threads_per_block = 256;  ///< a multiple of 32 (whole warps), at most the device's limit
  unsigned blocks_per_sm = 8;        ///< grid cap: blocks_per_sm x sm_count blocks; >= 1
};

/// Blocks and threads for `work_items` independent items (vectors or elements) handled by a
/// grid-stride loop: thread t of the grid does items t, t + total_threads(), t + 2 total_threads(), ...
struct launch_geometry {
  unsigned blocks = 0;             ///< grid size; 0 when there is nothing to do (do not launch then)
  unsigned threads_per_block = 0;  ///< block size, a multiple of 32; 0 when blocks is 0
  std::size_t iterations = 0;      ///< passes of the grid-stride loop the busiest thread makes

  /// Threads in the grid.
  constexpr std::size_t total_threads() const noexcept {
    return static_cast<std::size_t>(blocks) * threads_per_block;
  }
  /// False when there is nothing to launch.
  constexpr bool empty() const noexcept { return blocks == 0; }
};

/// Geometry for `work_items` items on a device with `limits` under `policy`.
/// Threads per block: policy.threads_per_block, lowered to the fewest whole warps that cover
/// `work_items` (a 3-item launch is one warp, not 256 threads). Blocks: enough to give every item a
/// thread, capped at blocks_per_sm x sm_count and at the grid limit; the grid-stride loop covers the
/// rest. work_items == 0 gives the empty geometry.
/// @throws collx::error (errc::invalid_argument) when sm_count < 1, blocks_per_sm == 0, or
///         threads_per_block is not a multiple of 32 in [32, limits.max_threads_per_block].
inline launch_geometry plan_launch(std::size_t work_items, const device_limits& limits,
                                   const launch_policy& policy = {}) {
  if (limits.sm_count < 1)
    COLLX_THROW(errc::invalid_argument, "plan_launch: sm_count " + std::to_string(limits.sm_count) + " < 1");
  if (policy.blocks_per_sm == 0) COLLX_THROW(errc::invalid_argument, "plan_launch: blocks_per_sm is 0");
  if (policy.threads_per_block == 0 || policy.threads_per_block % 32 != 0 ||
      policy.threads_per_block > limits.max_threads_per_block)
    COLLX_THROW(errc::invalid_argument, "plan_launch: threads_per_block " + std::to_string(policy.threads_per_block) +
                                            " is not a multiple of 32 in [32, " +
                                            std::to_string(limits.max_threads_per_block) + "]");
  if (limits.max_grid_x == 0) COLLX_THROW(errc::invalid_argument, "plan_launch: max_grid_x is 0");
  if (work_items == 0) return {};

  const auto ceil_div = [](std::size_t a, std::size_t b) { return a / b + (a % b != 0); };
  const std::size_t warps = std::min<std::size_t>(ceil_div(work_items, 32), policy.threads_per_block / 32);
  const std::size_t threads = warps * 32;
  const std::size_t cap = std::min<unsigned long long>(
      static_cast<unsigned long long>(limits.sm_count) * policy.blocks_per_sm, limits.max_grid_x);
  const std::size_t blocks = std::min(ceil_div(work_items, threads), cap);
  launch_geometry g;
  g.blocks = static_cast<unsigned>(blocks);
  g.threads_per_block = static_cast<unsigned>(threads);
  g.iterations = ceil_div(work_items, g.total_threads());
  return g;
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
