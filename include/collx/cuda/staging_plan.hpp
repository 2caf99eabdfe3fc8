/// @file cuda/staging_plan.hpp
/// How a buffer that peers cannot read in place (not registered with collx) moves through a bounded
/// staging buffer. Plain C++ (no CUDA headers), unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <numeric>
#include <optional>
#include <string>

#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// One chunk of a staged transfer: bytes [offset, offset + bytes) of the user's buffer pass through
/// bytes [staging_offset, staging_offset + bytes) of the staging buffer.
struct staging_chunk {
  std::size_t offset = 0;          ///< byte offset in the user's buffer
  std::size_t bytes = 0;           ///< chunk length in bytes, a whole number of elements, >= 1
  std::size_t slot = 0;            ///< staging slot, index % staging_plan::depth
  std::size_t staging_offset = 0;  ///< byte offset of the slot in the staging buffer
  friend constexpr bool operator==(const staging_chunk&, const staging_chunk&) = default;
};

/// Cuts `total_bytes` of a user buffer into chunks that fit the slots of a staging buffer of
/// `staging_bytes`. The staging buffer holds `depth` (2) slots used in turn, so chunk i+1 can be
/// copied into one slot while chunk i is still consumed from the other (double buffering).
/// Chunk i uses slot i % depth and may fill it only after chunk i - depth's consumer has finished
/// (reuse_waits_for). Every chunk but the last is exactly slot_bytes() long; slots and chunks are
/// whole elements, and slot offsets are multiples of `alignment` so vector kernels stay aligned.
class staging_plan {
 public:
  /// Slots in the staging buffer: the pipeline depth.
  static constexpr std::size_t depth = 2;

  /// @param total_bytes   bytes to move; a multiple of element_size (0: no chunks)
  /// @param staging_bytes size of the staging buffer, whose start is assumed aligned to `alignment`
  /// @param element_size  bytes per element (chunks never split one), >= 1
  /// @param alignment     power of two; slot sizes are multiples of lcm(element_size, alignment)
  /// @throws collx::error (errc::invalid_argument) when element_size is 0, alignment is not a power
  ///         of two, total_bytes is not a whole number of elements, or a slot cannot hold one unit of
  ///         lcm(element_size, alignment) bytes (staging buffer too small).
  staging_plan(std::size_t total_bytes, std::size_t staging_bytes, std::size_t element_size,
               std::size_t alignment = 16)
      : total_bytes_(total_bytes) {
    if (element_size == 0) COLLX_THROW(errc::invalid_argument, "staging_plan: element_size is 0");
    if (alignment == 0 || (alignment & (alignment - 1)) != 0)
      COLLX_THROW(errc::invalid_argument, "staging_plan: alignment " + std::to_string(alignment) + " is not a power of two");
    if (total_bytes % element_size != 0)
      COLLX_THROW(errc::invalid_argument, "staging_plan: " + std::to_string(total_bytes) +
                                              " bytes is not a whole number of " + std::to_string(element_size) +
                                              "-byte elements");
    const std::size_t unit = std::lcm(element_size, alignment);
    slot_bytes_ = staging_bytes / depth / unit * unit;
    if (slot_bytes_ == 0)
      COLLX_THROW(errc::invalid_argument, "staging_plan: a staging buffer of " + std::to_string(staging_bytes) +
                                              " bytes cannot hold " + std::to_string(depth) + " slots of " +
                                              std::to_string(unit) + " bytes");
    chunk_count_ = total_bytes / slot_bytes_ + (total_bytes % slot_bytes_ != 0);
  }

  /// Bytes of the user's buffer the plan moves.
  std::size_t total_bytes() const noexcept { return total_bytes_; }
  /// Bytes per slot: the largest chunk.
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  /// Number of chunks: ceil(total_bytes / slot_bytes), 0 for an empty buffer.
  std::size_t chunk_count() const noexcept { return chunk_count_; }

  /// Chunk i. @throws collx::error (errc::invalid_argument) when i >= chunk_count().
  staging_chunk chunk(std::size_t i) const {
    if (i >= chunk_count_)
      COLLX_THROW(errc::invalid_argument, "staging_plan: chunk " + std::to_string(i) + " of " +
                                              std::to_string(chunk_count_));
    staging_chunk c;
    c.offset = i * slot_bytes_;
    c.bytes = i + 1 < chunk_count_ ? slot_bytes_ : total_bytes_ - c.offset;
    c.slot = i % depth;
    c.staging_offset = c.slot * slot_bytes_;
    return c;
  }

  /// The chunk whose consumer must have finished before chunk i may overwrite its slot
  /// (i - depth), or none for the first `depth` chunks.
  static std::optional<std::size_t> reuse_waits_for(std::size_t i) noexcept {
    if (i < depth) return std::nullopt;
    return i - depth;
  }

 private:
  std::size_t total_bytes_ = 0;
  std::size_t slot_bytes_ = 0;
  std::size_t chunk_count_ = 0;
};

}  // namespace gpu
}  // namespace v0
}  // namespace collx
