/// @file detail/counts.hpp
/// The sums of v-form counts, checked: a count such as a negative int converted to std::size_t
/// would otherwise wrap the sum to a small number that passes the size checks, and a rank would
/// then read or write far outside its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace detail
}  // namespace v0
}  // namespace collx
