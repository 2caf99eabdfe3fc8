/// @file detail/counts.hpp
/// The sums of v-form counts, checked: a count such as a negative int converted to std::size_t
/// would otherwise wrap the sum to a small number that passes the size checks, and a rank would
/// then read or write far outside its buffers. And count_array, where a call keeps per-rank counts.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <collx/block_counts.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// The index of the first of counts[0 .. n) at which their running sum passes what memory can hold
/// (PTRDIFF_MAX bytes, in elements of `element_bytes` > 0), or n when the whole sum fits.
inline std::size_t first_count_past_memory(const std::size_t* counts, std::size_t n, std::size_t element_bytes) noexcept {
  const std::size_t most = static_cast<std::size_t>(PTRDIFF_MAX) / element_bytes;
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (counts[i] > most - total) return i;
    total += counts[i];
  }
  return n;
}

/// The message for first_count_past_memory's index i of `counts`, named `name` ("send_counts").
inline std::string counts_past_memory(const char* name, const std::size_t* counts, std::size_t i) {
  return std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(counts[i]) +
         " makes the counts add up to more than memory holds (a negative count converted to std::size_t?)";
}

/// Whether bad_counts finds nothing wrong with `counts`: no negative entry, and a sum that fits
/// in memory. Cheap (no string), for the check every call makes.
inline bool counts_are_sound(const block_counts& counts, std::size_t element_bytes) noexcept {
  const std::span<const std::size_t> c = counts.values();
  return !counts.negative() && first_count_past_memory(c.data(), c.size(), element_bytes) == c.size();
}

/// What is wrong with `counts` (named `name`, "send_counts") of elements of `element_bytes` bytes
/// in a call: its first negative entry as passed, else the entry at which the sum passes what
/// memory holds; empty when nothing is.
inline std::string bad_counts(const char* name, const block_counts& counts, std::size_t element_bytes) {
  if (const auto neg = counts.negative())
    return std::string(name) + "[" + std::to_string(neg->index) + "] = " + std::to_string(neg->value) +
           " is negative";
  const std::span<const std::size_t> c = counts.values();
  if (const std::size_t i = first_count_past_memory(c.data(), c.size(), element_bytes); i < c.size())
    return counts_past_memory(name, c.data(), i);
  return {};
}

/// `size` counts (per-rank block sizes, their prefix sums) kept in the object itself up to
/// `inline_capacity` of them, on the heap beyond. A small collective takes a few hundred
/// nanoseconds, and the two std::vector allocations an all-gather made for its counts, with their
/// frees, were an eighth of a 32-byte all-gather's instructions. Not copyable or movable: its
/// span points into it.
class count_array {
 public:
  static constexpr std::size_t inline_capacity = 64;

  /// `size` counts, each `value`.
  explicit count_array(std::size_t size, std::size_t value = 0) : size_(size) {
    if (size > inline_capacity) {
      heap_.assign(size, value);
      data_ = heap_.data();
    } else {
      std::fill_n(inline_.begin(), size, value);
    }
  }
  count_array(const count_array&) = delete;
  count_array& operator=(const count_array&) = delete;

  std::size_t& operator[](std::size_t i) noexcept { return data_[i]; }
  std::size_t operator[](std::size_t i) const noexcept { return data_[i]; }
  std::size_t size() const noexcept { return size_; }
  std::span<const std::size_t> span() const noexcept { return {data_, size_}; }

 private:
  std::array<std::size_t, inline_capacity> inline_;  // the first `size_` are set
  std::vector<std::size_t> heap_;
  std::size_t* data_ = inline_.data();
  std::size_t size_;
};

}  // namespace detail
}  // namespace v0
}  // namespace collx
