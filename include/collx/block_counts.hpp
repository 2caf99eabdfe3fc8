/// @file block_counts.hpp
/// collx::block_counts: the one-count-per-rank lists that the v-form collectives take, from
/// std::size_t lists as they are or from other integer types (MPI codes keep `int` counts).
#pragma once

#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

namespace collx {
inline namespace v0 {

namespace detail {
/// An integer type a count may come in: at most 64 bits (wider values would be cut), not bool or a
/// character type (char, wchar_t, char8/16/32_t), whose values are not counts; std::int8_t and
/// std::uint8_t (signed and unsigned char) are integers here.
template <class I>
concept count_integer = std::integral<I> && sizeof(I) <= sizeof(long long) && !std::same_as<I, bool> &&
                        !std::same_as<I, char> && !std::same_as<I, wchar_t> && !std::same_as<I, char8_t> &&
                        !std::same_as<I, char16_t> && !std::same_as<I, char32_t>;

/// A contiguous, sized range of counts (R as given: `const std::vector<int>&`, ...).
template <class R>
concept count_range = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                      count_integer<std::remove_cv_t<std::ranges::range_value_t<R>>>;
}  // namespace detail

/// A negative entry of a block_counts as it was passed: its index and value.
struct negative_count {
  std::size_t index;  ///< position in the list
  long long value;    ///< the entry, < 0
};

/// The counts of a v-form call, one per rank, in elements: all_gather_v's and reduce_scatter_v's
/// `counts`, all_to_all_v's `send_counts` and `recv_counts`, on the host and on the GPU
/// (gpu::all_gather_v, ...). A parameter type: write the counts as
/// - a contiguous range of std::size_t (std::vector<std::size_t>, std::array, std::span, a C
///   array): viewed, not copied;
/// - a contiguous range of another integer type (std::vector<int>, as MPI's counts;
///   std::int64_t, unsigned): copied as std::size_t; a negative entry makes the call throw
///   collx::error (errc::invalid_argument, naming the entry) and fail the communicator, as every
///   bad argument does;
/// - a braced list, `{3, 0, 5}`, `{n, 0}`: copied, each value checked as above.
/// A range of std::size_t is viewed and must outlive the block_counts: a temporary passed to a
/// call lives until the call returns; the `_async` forms copy the counts (owned()) before they
/// return.
class block_counts {
 public:
  /// Views `counts`, a contiguous range of std::size_t.
  template <class R>
    requires detail::count_range<const R&> && std::same_as<std::remove_cv_t<std::ranges::range_value_t<R>>, std::size_t>
  block_counts(const R& counts) noexcept  // NOLINT(google-explicit-constructor): stands for the list it is given
      : view_(std::ranges::data(counts), std::ranges::size(counts)) {}

  /// Copies `counts`, a contiguous range of another integer type, as std::size_t; remembers its
  /// first negative entry (negative()).
  template <class R>
    requires detail::count_range<const R&> && (!std::same_as<std::remove_cv_t<std::ranges::range_value_t<R>>, std::size_t>)
  block_counts(const R& counts)  // NOLINT(google-explicit-constructor)
  {
    copy_from(std::ranges::data(counts), std::ranges::size(counts));
  }

  /// Copies a braced list of one integer type (`{3, 0, 5}`: int; `{a, b}` of std::size_t).
  template <detail::count_integer I>
  block_counts(std::initializer_list<I> counts) {  // NOLINT(google-explicit-constructor)
    copy_from(counts.begin(), counts.size());
  }

  /// Copies a braced list of several integer types (`{n, 0}` with a std::size_t n), value by
  /// value, as a range of each.
  template <detail::count_integer... I>
    requires(sizeof...(I) >= 2)
  block_counts(I... counts) {  // NOLINT(google-explicit-constructor)
    copy_.reserve(sizeof...(I));
    (append(counts), ...);
    view_ = copy_;
  }

  /// A copy that owns its own copy of the counts if `other` owns them, else views the same range.
  block_counts(const block_counts& other) { *this = other; }
  /// As the copy constructor: owns a copy of the counts if `other` owns them, else views its range.
  block_counts& operator=(const block_counts& other) {
    if (this == &other) return *this;
    copy_ = other.copy_;
    negative_ = other.negative_;
    view_ = other.owns() ? std::span<const std::size_t>(copy_) : other.view_;
    return *this;
  }

  /// The counts as std::size_t (a negative entry reads as 0: check negative() first).
  std::span<const std::size_t> values() const noexcept { return view_; }
  /// Number of counts.
  std::size_t size() const noexcept { return view_.size(); }
  /// Count i (i < size()).
  std::size_t operator[](std::size_t i) const noexcept { return view_[i]; }
  /// The first negative entry as it was passed, or none.
  std::optional<negative_count> negative() const noexcept { return negative_; }
  /// A block_counts that owns a copy of these counts (for calls that read them after they return).
  block_counts owned() const {
    block_counts c(*this);
    if (!c.owns()) {
      c.copy_.assign(view_.begin(), view_.end());
      c.view_ = c.copy_;
    }
    return c;
  }

 private:
  bool owns() const noexcept { return !copy_.empty() && view_.data() == copy_.data(); }

  template <class I>
  void copy_from(const I* p, std::size_t n) {
    copy_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) append(p[i]);
    view_ = copy_;
  }
  /// Appends v; a negative v is kept as 0 and remembered (negative()) if it is the first.
  template <class I>
  void append(I v) {
    if constexpr (std::is_signed_v<I>) {
      if (v < 0) {
        if (!negative_) negative_ = negative_count{copy_.size(), static_cast<long long>(v)};
        copy_.push_back(0);
        return;
      }
    }
    copy_.push_back(static_cast<std::size_t>(v));
  }

  std::span<const std::size_t> view_;
  std::vector<std::size_t> copy_;  // the counts, when they came in another type or owned() copied them
  std::optional<negative_count> negative_;
};

}  // namespace v0
}  // namespace collx
