/// @file detail/ring_order_check.hpp
/// The check of a ring order a user gives (communicator_options::ring_order for host rings,
/// each of gpu::device_options::rings for device rings): every rank of the communicator, once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace collx {
inline namespace v0 {
namespace detail {

/// Why `ranks` is not an order of the ranks of a `world`-rank communicator (each exactly once), or
/// "" when it is: the count, or the first position holding a rank outside [0, world) or one listed
/// before.
inline std::string ring_order_problem(const std::vector<int>& ranks, int world) {
  if (ranks.size() != static_cast<std::size_t>(world < 0 ? 0 : world))
    return "it lists " + std::to_string(ranks.size()) + " ranks for a world of " + std::to_string(world) + " (every rank once)";
  std::vector<bool> seen(ranks.size(), false);
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    const int q = ranks[k];
    if (q < 0 || q >= world)
      return "position " + std::to_string(k) + " holds rank " + std::to_string(q) + ", outside [0, " + std::to_string(world) + ")";
    if (seen[static_cast<std::size_t>(q)]) return "it lists rank " + std::to_string(q) + " twice (every rank once)";
    seen[static_cast<std::size_t>(q)] = true;
  }
  return {};
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
