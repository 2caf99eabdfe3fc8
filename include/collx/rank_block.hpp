/// @file rank_block.hpp
/// collx::rank_block: a rank's own block of a buffer cut into per-rank blocks, which is where the
/// in-place forms put it (NCCL's convention): an in-place reduce_scatter's recv and an in-place
/// all_gather's send are `rank_block(buffer, comm)`, and reduce_scatter_v's and all_gather_v's are
/// `rank_block(buffer, comm, counts)`.
#pragma once

#include <cstddef>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>  // std::cmp_less, std::forward

#include <collx/block_counts.hpp>
#include <collx/communicator.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// A buffer rank_block can cut: contiguous and sized, and not a temporary that owns its elements
/// (the block would dangle).
template <class R>
concept block_buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> && std::ranges::borrowed_range<R>;

template <class R>
using block_span = std::span<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

inline void check_block_rank(int rank, std::size_t blocks) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= blocks)
    COLLX_THROW(errc::invalid_argument,
                "collx::rank_block: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(blocks) + ")");
}
}  // namespace detail

/// Block `rank` of `whole` cut into `world` equal blocks: the `whole.size() / world` elements from
/// `rank * whole.size() / world` on, as a span into `whole` (whole is a contiguous sized range:
/// std::span, an lvalue std::vector or std::array, a C array; not a temporary container).
/// `world` is an integer, not a braced list: `rank_block(buf, rank, {n})` is the counts form below.
/// Local: it moves nothing and fails no communicator.
/// Throws collx::error (errc::invalid_argument) when world < 1, rank is not in [0, world), or
/// whole.size() is not a multiple of world (the collectives would refuse that buffer too).
template <detail::block_buffer R, detail::count_integer W>
detail::block_span<R> rank_block(R&& whole, int rank, W world) {
  const std::size_t n = std::ranges::size(whole);
  if (std::cmp_less(world, 1))
    COLLX_THROW(errc::invalid_argument, "collx::rank_block: world size " + std::to_string(world) + " < 1");
  const auto blocks = static_cast<std::size_t>(world);
  detail::check_block_rank(rank, blocks);
  if (n % blocks != 0)
    COLLX_THROW(errc::invalid_argument, "collx::rank_block: " + std::to_string(n) + " elements are not " +
                                            std::to_string(world) + " equal blocks");
  const std::size_t count = n / blocks;
  return detail::block_span<R>(std::ranges::data(whole), n).subspan(static_cast<std::size_t>(rank) * count, count);
}

/// rank_block(whole, comm.rank(), comm.size()): this rank's block, e.g.
/// `collx::reduce_scatter(comm, buf, collx::rank_block(buf, comm))` in place. Also throws
/// errc::invalid_argument for a moved-from communicator, as comm.rank() does.
template <detail::block_buffer R>
detail::block_span<R> rank_block(R&& whole, const communicator& comm) {
  return rank_block(std::forward<R>(whole), comm.rank(), comm.size());
}

/// Block `rank` of `whole` cut into blocks of counts[0], counts[1], ... elements (one per rank, as
/// reduce_scatter_v's recv_counts and all_gather_v's counts): the counts[rank] elements from
/// counts[0] + ... + counts[rank - 1] on.
/// Local, as above. Throws collx::error (errc::invalid_argument) when rank is not in
/// [0, counts.size()), a count is negative, or the counts do not add up to whole.size() (the v-forms
/// would refuse that buffer).
template <detail::block_buffer R>
detail::block_span<R> rank_block(R&& whole, int rank, const block_counts& counts) {
  const std::size_t n = std::ranges::size(whole);
  detail::check_block_rank(rank, counts.size());
  if (const auto neg = counts.negative())
    COLLX_THROW(errc::invalid_argument, "collx::rank_block: counts[" + std::to_string(neg->index) + "] is " +
                                            std::to_string(neg->value));
  std::size_t offset = 0, total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (i == static_cast<std::size_t>(rank)) offset = total;
    if (counts[i] > n - total)  // also catches a sum that would wrap around
      COLLX_THROW(errc::invalid_argument, "collx::rank_block: the counts add up to more than the buffer's " +
                                              std::to_string(n) + " elements");
    total += counts[i];
  }
  if (total != n)
    COLLX_THROW(errc::invalid_argument, "collx::rank_block: the counts add up to " + std::to_string(total) +
                                            " elements, the buffer has " + std::to_string(n));
  return detail::block_span<R>(std::ranges::data(whole), n).subspan(offset, counts[static_cast<std::size_t>(rank)]);
}

/// rank_block(whole, comm.rank(), counts): this rank's block of a v-form buffer, e.g.
/// `collx::all_gather_v(comm, collx::rank_block(buf, comm, counts), buf, counts)` in place. Also
/// throws errc::invalid_argument when counts does not have comm.size() entries, and for a
/// moved-from communicator.
template <detail::block_buffer R>
detail::block_span<R> rank_block(R&& whole, const communicator& comm, const block_counts& counts) {
  const int world = comm.size();
  if (counts.size() != static_cast<std::size_t>(world))
    COLLX_THROW(errc::invalid_argument, "collx::rank_block: counts has " + std::to_string(counts.size()) +
                                            " entries for " + std::to_string(world) + " ranks");
  return rank_block(std::forward<R>(whole), comm.rank(), counts);
}

}  // namespace v0
}  // namespace collx
