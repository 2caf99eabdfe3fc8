/// @file detail/counts.hpp
/// The sums of v-form counts, checked: a count such as a negative int converted to std::size_t
/// would otherwise wrap the sum to a small number that passes the size checks, and a rank would
/// then read or write far outside its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace detail
}  // namespace v0
}  // namespace collx
