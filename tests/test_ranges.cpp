// Buffers given as contiguous ranges (std::vector, std::array, C arrays, views) instead of
// std::span: every collective and point-to-point call has an overload that views them as spans. Each call here runs
// on 3 thread ranks with distinct values per rank and index, outputs poisoned first, and is
// compared with a reference computed here without collx. Which calls compile (temporaries and
// const ranges as outputs, mixed element types) is checked with static_assert.
#include <catch2/catch.hpp>

#include <collx/collx.hpp>
#include <collx/nullable_ptr.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using T = std::int64_t;
constexpr int world = 3;
constexpr T poison = -777777;

T value(int r, std::size_t i) { return static_cast<T>(i) * 31 + (r + 1) * 1000 + r; }

std::vector<T> values(int r, std::size_t count, std::size_t from = 0) {
  std::vector<T> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = value(r, from + i);
  return v;
}

// Sum over ranks of value(r, i), i in [from, from + count).
std::vector<T> summed(std::size_t count, std::size_t from = 0) {
  std::vector<T> v(count, 0);
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < count; ++i) v[i] += value(r, from + i);
  return v;
}

// Runs fn(comm, out) on `world` thread ranks; returns each rank's `out` (checked after the threads
// joined: Catch2's macros are not for rank threads).
template <class F>
std::vector<std::vector<T>> on_ranks(F&& fn) {
  std::vector<std::vector<T>> outs(world);
  collx::run_threads(world, [&](collx::communicator& comm) { fn(comm, outs[static_cast<std::size_t>(comm.rank())]); });
  return outs;
}

// A user's non-owning view of elements (as a tensor library's), declared borrowed: results written
// through a temporary of it land in the viewed memory. (Not std::ranges::subrange: clang 14 cannot
// compile libstdc++ 12's.)
struct element_view {
  T* first = nullptr;
  std::size_t n = 0;
  T* begin() const { return first; }
  T* end() const { return first + n; }
};

template <class Out>
concept allreduce_into = requires(collx::communicator& c, const std::vector<T>& send, Out&& out) {
  collx::allreduce(c, send, std::forward<Out>(out));
};
template <class Buf>
concept allreduce_in_place = requires(collx::communicator& c, Buf&& buf) { collx::allreduce(c, std::forward<Buf>(buf)); };
template <class Send>
concept allreduce_async_from = requires(collx::communicator& c, Send&& send, std::vector<T>& out) {
  collx::allreduce_async(c, std::forward<Send>(send), out);
};
// The same calls naming their template arguments, as code that instantiates collx for a given
// type does: the temporary must still be refused, not bound to the std::span<const T> form.
template <class Send>
concept allreduce_async_named_from = requires(collx::communicator& c, Send&& send, std::vector<T>& out) {
  collx::allreduce_async<collx::algo::ring, T>(c, std::forward<Send>(send), out);
  collx::allreduce_async<collx::algo::ring, T, collx::ops::max>(c, std::forward<Send>(send), out, collx::ops::max{});
};
template <class Send>
concept other_async_named_from = requires(collx::communicator& c, Send&& send, std::vector<T>& out) {
  collx::send_async<const T>(c, std::forward<Send>(send), 1);
  collx::all_gather_async<collx::algo::ring, T>(c, std::forward<Send>(send), out);
  collx::reduce_scatter_v_async<collx::algo::ring, T>(c, std::forward<Send>(send), out, collx::block_counts{1, 2});
  collx::broadcast_async<collx::algo::tree, T>(c, std::forward<Send>(send), out, 0);
};
template <class Send>
concept allreduce_from = requires(collx::communicator& c, Send&& send, std::vector<T>& out) {
  collx::allreduce(c, std::forward<Send>(send), out);
};
// A view whose elements are reachable only through a non-const view (no const begin()): not a
// buffer collx can read through `const S&`.
struct mutable_only_view {
  T* first = nullptr;
  std::size_t n = 0;
  T* begin() { return first; }
  T* end() { return first + n; }
};

template <class Out>
concept recv_into = requires(collx::communicator& c, Out&& out) { collx::recv(c, std::forward<Out>(out), 0); };

}  // namespace

template <>
inline constexpr bool std::ranges::enable_borrowed_range<element_view> = true;

// Outputs must be lvalues of writable elements (a temporary's results would be lost), of the
// send's element type; spans keep their own overloads; non-contiguous ranges are refused.
static_assert(allreduce_into<std::vector<T>&>);
static_assert(allreduce_into<std::array<T, 4>&>);
static_assert(allreduce_into<T (&)[4]>);
static_assert(allreduce_into<std::span<T>>);
static_assert(!allreduce_into<std::vector<T>>);
static_assert(!allreduce_into<const std::vector<T>&>);
static_assert(!allreduce_into<std::vector<double>&>);
static_assert(!allreduce_into<std::list<T>&>);
static_assert(allreduce_in_place<std::vector<T>&>);
static_assert(!allreduce_in_place<std::vector<T>>);
static_assert(!allreduce_in_place<const std::vector<T>&>);
static_assert(recv_into<std::vector<T>&> && recv_into<std::span<T>> && !recv_into<const std::vector<T>&>);
static_assert(collx::contiguous_buffer<std::vector<T>> && !collx::contiguous_buffer<std::list<T>>);
// Volatile elements are refused by the concepts (they passed them, and failed inside collx).
static_assert(!collx::contiguous_buffer<volatile T (&)[4]> && !collx::input_buffer<volatile T[4]> &&
              !allreduce_into<volatile T (&)[4]> && !allreduce_from<volatile T (&)[4]>);
// Fixed-extent spans are views like any other (the span overloads take std::span<T> only).
static_assert(allreduce_into<std::span<T, 4>> && allreduce_in_place<std::span<T, 4>> && recv_into<std::span<T, 2>>);
// An async call reads its send buffer after it returns: a temporary container is refused, lvalues
// and views are not.
static_assert(!allreduce_async_from<std::vector<T>> && allreduce_async_from<std::vector<T>&> &&
              allreduce_async_from<const std::vector<T>&> && allreduce_async_from<std::span<const T>>);
static_assert(!allreduce_async_named_from<std::vector<T>> && allreduce_async_named_from<std::vector<T>&> &&
              allreduce_async_named_from<std::span<const T>>);
static_assert(!other_async_named_from<std::vector<T>> && other_async_named_from<const std::vector<T>&>);
static_assert(allreduce_from<std::vector<T>>);  // a blocking call has finished with it when it returns
static_assert(!allreduce_from<mutable_only_view&>);
static_assert(collx::output_buffer<std::vector<T>&> && !collx::output_buffer<std::vector<T>> &&
              !collx::output_buffer<std::span<T>> && !collx::output_buffer<const std::array<T, 2>&>);
// A view that does not own its elements may be a temporary (a tensor library's view, say).
static_assert(allreduce_into<element_view>);

TEST_CASE("contiguous ranges: allreduce on vectors, arrays and C arrays", "[ranges][threads]") {
  constexpr std::size_t n = 7;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank();
    const std::vector<T> send = values(r, n);
    std::vector<T> recv(n, poison);
    collx::allreduce(comm, send, recv);  // vector -> vector
    std::array<T, n> arr{};
    arr.fill(poison);
    collx::allreduce<collx::algo::ring>(comm, send, arr, collx::ops::max{});  // vector -> std::array
    T carr[n];
    for (std::size_t i = 0; i < n; ++i) carr[i] = value(r, i);
    collx::allreduce<collx::algo::tree>(comm, carr);  // in place on a C array
    std::vector<T> inplace = values(r, n);
    collx::allreduce_async(comm, inplace).wait();  // in place, async
    out = recv;
    out.insert(out.end(), arr.begin(), arr.end());
    out.insert(out.end(), carr, carr + n);
    out.insert(out.end(), inplace.begin(), inplace.end());
  });
  std::vector<T> expect = summed(n), max = values(world - 1, n);  // value() grows with the rank
  expect.insert(expect.end(), max.begin(), max.end());
  const std::vector<T> sum = summed(n);
  expect.insert(expect.end(), sum.begin(), sum.end());
  expect.insert(expect.end(), sum.begin(), sum.end());
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(outs[static_cast<std::size_t>(r)] == expect);
  }
}

TEST_CASE("contiguous ranges: reduce_scatter(_v), all_gather(_v) and all_to_all(_v) on vectors",
          "[ranges][threads]") {
  const std::vector<std::size_t> counts{2, 0, 5};  // uneven, one empty block
  const std::size_t total = 7, block = 3;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank();
    const auto ur = static_cast<std::size_t>(r);
    std::vector<T> rs(block, poison);
    collx::reduce_scatter(comm, values(r, block * world), rs);
    std::vector<T> rsv(counts[ur] + 2, poison);  // the result goes to a subrange of it; the ends stay poisoned
    collx::reduce_scatter_v(comm, values(r, total), element_view{rsv.data() + 1, counts[ur]}, counts);
    std::vector<T> ag(block * world, poison);
    collx::all_gather(comm, values(r, block), ag);
    std::vector<T> agv(total, poison);
    collx::all_gather_v(comm, values(r, counts[ur]), agv, counts);
    std::vector<T> a2a(block * world, poison);
    collx::all_to_all(comm, values(r, block * world), a2a);
    // all_to_all_v: rank r sends r + c + 1 elements to rank c (so receives c + r + 1 from c).
    std::vector<std::size_t> sc(world), rc(world);
    for (std::size_t c = 0; c < world; ++c) sc[c] = rc[c] = ur + c + 1;
    std::vector<T> a2av_send = values(r, 3 * ur + 6), a2av(3 * ur + 6, poison);
    collx::all_to_all_v(comm, a2av_send, sc, a2av, rc);
    for (const auto* v : {&rs, &rsv, &ag, &agv, &a2a, &a2av}) out.insert(out.end(), v->begin(), v->end());
  });
  for (int r = 0; r < world; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    std::size_t offset = 0;
    for (std::size_t c = 0; c < ur; ++c) offset += counts[c];
    std::vector<T> expect = summed(block, ur * block);
    const std::vector<T> rsv = summed(counts[ur], offset);
    expect.push_back(poison);
    expect.insert(expect.end(), rsv.begin(), rsv.end());
    expect.push_back(poison);
    for (int c = 0; c < world; ++c) {  // all_gather: every rank's first `block` values
      const std::vector<T> b = values(c, block);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    for (int c = 0; c < world; ++c) {  // all_gather_v: rank c's first counts[c] values
      const std::vector<T> b = values(c, counts[static_cast<std::size_t>(c)]);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    for (int c = 0; c < world; ++c) {  // all_to_all: block r of rank c's send
      const std::vector<T> b = values(c, block, ur * block);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    for (std::size_t c = 0; c < world; ++c) {  // all_to_all_v: rank c's block for r starts at sum_{d<r} (c+d+1)
      std::size_t from = 0;
      for (std::size_t d = 0; d < ur; ++d) from += c + d + 1;
      const std::vector<T> b = values(static_cast<int>(c), c + ur + 1, from);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    INFO("rank " << r);
    CHECK(outs[ur] == expect);
  }
}

TEST_CASE("rank_block: the rank's own block, where the in-place forms put it", "[ranges][threads]") {
  // In place on 3 thread ranks: reduce_scatter and all_gather on equal blocks, the v-forms on
  // uneven ones with an empty block; all_gather's buffers are poisoned outside the rank's block.
  // Each result is compared with the reference of the out-of-place test above.
  const std::vector<int> counts{2, 0, 5};  // int counts, as MPI codes keep them
  const std::size_t total = 7, block = 4;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank();
    const auto ur = static_cast<std::size_t>(r);
    std::vector<T> rs = values(r, block * world);
    collx::reduce_scatter(comm, rs, collx::rank_block(rs, comm));
    std::vector<T> rsv = values(r, total);
    collx::reduce_scatter_v(comm, rsv, collx::rank_block(rsv, comm, counts), counts);
    std::vector<T> ag(block * world, poison);
    const std::span<T> own = collx::rank_block(ag, comm);
    const std::vector<T> mine = values(r, block);
    std::copy(mine.begin(), mine.end(), own.begin());
    collx::all_gather(comm, own, ag);
    std::vector<T> agv(total, poison);
    const std::span<T> ownv = collx::rank_block(agv, r, counts);
    const std::vector<T> minev = values(r, ownv.size());
    std::copy(minev.begin(), minev.end(), ownv.begin());
    collx::all_gather_v(comm, ownv, agv, counts);
    out.insert(out.end(), rs.begin() + static_cast<std::ptrdiff_t>(ur * block),
               rs.begin() + static_cast<std::ptrdiff_t>((ur + 1) * block));
    const std::span<T> rsv_own = collx::rank_block(rsv, comm, counts);
    out.insert(out.end(), rsv_own.begin(), rsv_own.end());
    out.insert(out.end(), ag.begin(), ag.end());
    out.insert(out.end(), agv.begin(), agv.end());
  });
  for (int r = 0; r < world; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    std::size_t offset = 0;
    for (std::size_t c = 0; c < ur; ++c) offset += static_cast<std::size_t>(counts[c]);
    std::vector<T> expect = summed(block, ur * block);
    const std::vector<T> rsv = summed(static_cast<std::size_t>(counts[ur]), offset);
    expect.insert(expect.end(), rsv.begin(), rsv.end());
    for (int c = 0; c < world; ++c) {
      const std::vector<T> b = values(c, block);
      expect.insert(expect.end(), b.begin(), b.end());
    }
    for (int c = 0; c < world; ++c) {
      const std::vector<T> b = values(c, static_cast<std::size_t>(counts[static_cast<std::size_t>(c)]));
      expect.insert(expect.end(), b.begin(), b.end());
    }
    INFO("rank " << r);
    CHECK(outs[ur] == expect);
  }
}

template <class R>
concept can_cut_block = requires(R&& r) { collx::rank_block(std::forward<R>(r), 0, 1); };

TEST_CASE("rank_block: offsets and sizes; bad ranks, sizes and counts are refused", "[ranges]") {
  std::array<T, 12> a{};
  const auto at = [&](std::span<const T> b) { return std::pair{static_cast<std::size_t>(b.data() - a.data()), b.size()}; };
  CHECK(at(collx::rank_block(a, 0, 4)) == std::pair<std::size_t, std::size_t>{0, 3});
  CHECK(at(collx::rank_block(a, 3, 4)) == std::pair<std::size_t, std::size_t>{9, 3});
  CHECK(at(collx::rank_block(std::span<const T>(a), 0, 1)) == std::pair<std::size_t, std::size_t>{0, 12});
  CHECK(at(collx::rank_block(a, 2, {3, 4, 5})) == std::pair<std::size_t, std::size_t>{7, 5});
  CHECK(at(collx::rank_block(a, 1, {12, 0})) == std::pair<std::size_t, std::size_t>{12, 0});
  // A one-entry braced list is counts (one rank), not a world size; a world size may be any integer.
  CHECK(at(collx::rank_block(a, 0, {12})) == std::pair<std::size_t, std::size_t>{0, 12});
  const std::size_t n12 = a.size(), three = 3;
  CHECK(at(collx::rank_block(a, 0, {n12})) == std::pair<std::size_t, std::size_t>{0, 12});
  CHECK(at(collx::rank_block(a, 2, three)) == std::pair<std::size_t, std::size_t>{8, 4});
  std::vector<T> empty;
  CHECK(collx::rank_block(empty, 2, 3).empty());
  const std::vector<std::size_t> counts{5, 7};
  CHECK(at(collx::rank_block(a, 1, counts)) == std::pair<std::size_t, std::size_t>{5, 7});
  // A const buffer gives a span of const elements; a temporary container does not compile.
  const std::vector<T> cv(6);
  STATIC_REQUIRE(std::is_same_v<decltype(collx::rank_block(cv, 0, 2)), std::span<const T>>);
  STATIC_REQUIRE(can_cut_block<std::vector<T>&>);
  STATIC_REQUIRE(!can_cut_block<std::vector<T>>);
  const auto refused = [](auto&& call, const std::string& what) {
    try {
      call();
      FAIL("no error; expected: " << what);
    } catch (const collx::error& e) {
      CHECK(e.code() == collx::errc::invalid_argument);
      CHECK(std::string(e.what()) == "collx::rank_block: " + what);
    }
  };
  refused([&] { (void)collx::rank_block(a, 4, 4); }, "rank 4 is not in [0, 4)");
  refused([&] { (void)collx::rank_block(a, -1, 4); }, "rank -1 is not in [0, 4)");
  refused([&] { (void)collx::rank_block(a, 0, 0); }, "world size 0 < 1");
  refused([&] { (void)collx::rank_block(a, 0, 5); }, "12 elements are not 5 equal blocks");
  refused([&] { (void)collx::rank_block(a, 2, {3, 4}); }, "rank 2 is not in [0, 2)");
  refused([&] { (void)collx::rank_block(a, 0, {3, -4, 13}); }, "counts[1] is -4");
  refused([&] { (void)collx::rank_block(a, 0, {3, 4}); }, "the counts add up to 7 elements, the buffer has 12");
  refused([&] { (void)collx::rank_block(a, 0, {3, 4, 6}); }, "the counts add up to more than the buffer's 12 elements");
  const std::vector<std::size_t> wraps{SIZE_MAX, 2};
  refused([&] { (void)collx::rank_block(a, 1, wraps); }, "the counts add up to more than the buffer's 12 elements");
  refused([&] { (void)collx::rank_block(a, 0, std::int64_t{-2}); }, "world size -2 < 1");
  // With a communicator, the counts must have one entry per rank (rank 0 of 2 would get a block).
  // The errors are caught on the rank threads and checked here (Catch2's macros are not for them).
  std::array<std::vector<std::string>, 2> seen;
  collx::run_threads(2, [&](collx::communicator& comm) {
    std::vector<T> b(6);
    for (const auto& counts : {std::vector<std::size_t>{6}, std::vector<std::size_t>{2, 2, 2}}) {
      try {
        (void)collx::rank_block(b, comm, counts);
        seen[static_cast<std::size_t>(comm.rank())].push_back("no error");
      } catch (const collx::error& e) {
        seen[static_cast<std::size_t>(comm.rank())].push_back(e.what());
      }
    }
  });
  for (const auto& rank_seen : seen)
    CHECK(rank_seen == std::vector<std::string>{"collx::rank_block: counts has 1 entries for 2 ranks",
                                                "collx::rank_block: counts has 3 entries for 2 ranks"});
}

TEST_CASE("contiguous ranges: broadcast and reduce on vectors; non-roots' outputs untouched",
          "[ranges][threads]") {
  constexpr std::size_t n = 5;
  constexpr int root = 2;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank();
    std::vector<T> b(n, poison);
    if (r == root) collx::broadcast(comm, values(r, n), b, root);
    else collx::broadcast(comm, {}, b, root);  // send is read on the root only
    std::vector<T> inplace = values(r, n);
    collx::broadcast<collx::algo::direct>(comm, inplace, 1);
    std::vector<T> red(r == root ? n : 0);
    std::fill(red.begin(), red.end(), poison);
    if (r == root) collx::reduce(comm, values(r, n), red, root);
    else collx::reduce(comm, values(r, n), {}, root);  // recv is written on the root only
    std::vector<T> ired = values(r, n);
    collx::reduce(comm, ired, 0, collx::ops::min{});  // in place: only rank 0's changes
    for (const auto* v : {&b, &inplace, &red, &ired}) out.insert(out.end(), v->begin(), v->end());
  });
  for (int r = 0; r < world; ++r) {
    std::vector<T> expect = values(root, n);
    const std::vector<T> from1 = values(1, n), sum = summed(n), mine = values(r, n);
    expect.insert(expect.end(), from1.begin(), from1.end());
    if (r == root) expect.insert(expect.end(), sum.begin(), sum.end());
    const std::vector<T> min = values(0, n);  // value() grows with the rank
    expect.insert(expect.end(), (r == 0 ? min : mine).begin(), (r == 0 ? min : mine).end());
    INFO("rank " << r);
    CHECK(outs[static_cast<std::size_t>(r)] == expect);
  }
}

TEST_CASE("contiguous ranges: send, recv and send_recv on vectors, and mixed with spans", "[ranges][threads]") {
  constexpr std::size_t n = 6;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank(), next = (r + 1) % world, prev = (r + world - 1) % world;
    const std::vector<T> mine = values(r, n);
    std::vector<T> a(n, poison), b(n, poison), c(n, poison);
    collx::send_recv(comm, mine, next, a, prev);                  // vector -> vector
    collx::send_recv(comm, mine, next, std::span<T>(b), prev);    // vector -> span
    collx::send_recv(comm, std::span<const T>(mine), next, c, prev);  // span -> vector
    std::array<T, n> d{};
    d.fill(poison);
    if (r == 0) collx::send(comm, std::span<const T, n>(mine.data(), n), 1);
    if (r == 1) collx::recv(comm, std::span<T, n>(d), 0);
    for (const auto* v : {&a, &b, &c}) out.insert(out.end(), v->begin(), v->end());
    out.insert(out.end(), d.begin(), d.end());
  });
  for (int r = 0; r < world; ++r) {
    const std::vector<T> from_prev = values((r + world - 1) % world, n);
    std::vector<T> expect;
    for (int k = 0; k < 3; ++k) expect.insert(expect.end(), from_prev.begin(), from_prev.end());
    const std::vector<T> d = r == 1 ? values(0, n) : std::vector<T>(n, poison);
    expect.insert(expect.end(), d.begin(), d.end());
    INFO("rank " << r);
    CHECK(outs[static_cast<std::size_t>(r)] == expect);
  }
}

// v-form counts (collx::block_counts): std::size_t lists are viewed, other integer types and
// braced lists copied; what cannot be a count is refused at compile time.
static_assert(std::is_convertible_v<const std::vector<std::size_t>&, collx::block_counts>);
static_assert(std::is_convertible_v<const std::vector<int>&, collx::block_counts>);
static_assert(std::is_convertible_v<const std::array<std::int64_t, 3>&, collx::block_counts>);
static_assert(std::is_convertible_v<std::span<const unsigned>, collx::block_counts>);
static_assert(std::is_convertible_v<const long (&)[3], collx::block_counts>);
static_assert(!std::is_convertible_v<const std::vector<double>&, collx::block_counts>);
static_assert(!std::is_convertible_v<const std::vector<bool>&, collx::block_counts>);
static_assert(!std::is_convertible_v<const std::vector<char>&, collx::block_counts>);
static_assert(std::is_convertible_v<const std::vector<std::int8_t>&, collx::block_counts>);
static_assert(std::is_convertible_v<const std::vector<std::uint16_t>&, collx::block_counts>);
static_assert(!std::is_convertible_v<const std::list<int>&, collx::block_counts>);
static_assert(!std::is_constructible_v<collx::block_counts, std::initializer_list<double>>);

TEST_CASE("block_counts: views std::size_t lists, copies other integer types, owned() outlives its source",
          "[ranges][counts]") {
  const std::vector<std::size_t> sizes{4, 0, 9};
  const collx::block_counts viewed(sizes);
  CHECK(viewed.values().data() == sizes.data());
  CHECK(!viewed.negative());

  const std::vector<int> ints{4, -3, 9, -1};
  const collx::block_counts copied(ints);
  REQUIRE(copied.size() == 4);
  CHECK(copied[0] == 4);
  CHECK(copied[1] == 0);  // a negative entry reads as 0; negative() has it
  CHECK(copied[2] == 9);
  REQUIRE(copied.negative());
  CHECK(copied.negative()->index == 1);
  CHECK(copied.negative()->value == -3);

  std::optional<collx::block_counts> source;
  source.emplace(std::vector<std::uint32_t>{7, 8, 4000000000u});
  collx::block_counts kept = source->owned();
  const collx::block_counts second = kept;  // a copy of an owning list views its own copy
  source.reset();
  kept = collx::block_counts(sizes);  // the first copy is gone too
  REQUIRE(second.size() == 3);
  CHECK(second[0] == 7);
  CHECK(second[2] == 4000000000u);

  const collx::block_counts own = viewed.owned();
  CHECK(own.values().data() != sizes.data());
  CHECK(std::ranges::equal(own.values(), sizes));

  // Braced lists are copied (a named one outlives its list's array: ASan would see a view), of
  // one type or mixed, each value checked.
  const std::size_t a = 5, b = 0, c = 7;
  const collx::block_counts listed = {a, b, c};
  const long l = -4;
  const collx::block_counts mixed = {std::size_t{3}, l, 0};
  REQUIRE(listed.size() == 3);
  CHECK(listed[0] == 5);
  CHECK(listed[2] == 7);
  REQUIRE(mixed.size() == 3);
  CHECK(mixed[0] == 3);
  REQUIRE(mixed.negative());
  CHECK(mixed.negative()->index == 1);
  CHECK(mixed.negative()->value == -4);
}

TEST_CASE("v-form counts as std::vector<int>, braced lists and other integer types, sync and async",
          "[ranges][counts][threads]") {
  const std::vector<int> counts{3, 0, 4};  // uneven, one empty block
  const std::size_t total = 7;
  const auto outs = on_ranks([&](collx::communicator& comm, std::vector<T>& out) {
    const int r = comm.rank();
    const auto ur = static_cast<std::size_t>(r);
    const auto mine = static_cast<std::size_t>(counts[ur]);
    std::vector<T> agv(total, poison), braced(total, poison), sized(total, poison), later(total, poison);
    collx::all_gather_v(comm, values(r, mine), agv, counts);
    collx::all_gather_v(comm, values(r, mine), braced, {3, 0, 4});
    const std::size_t a = 3, c = 4;
    collx::all_gather_v(comm, values(r, mine), sized, {a, 0, c});  // mixed types: std::size_t and int
    std::vector<T> rsv(mine, poison);
    collx::reduce_scatter_v(comm, values(r, total), rsv, std::vector<std::int64_t>{3, 0, 4});
    // all_to_all_v: rank r sends r + d + 1 elements to rank d (unsigned), receives d + r + 1 (long).
    std::vector<unsigned> sc(world);
    std::array<long, world> rc{};
    for (std::size_t d = 0; d < world; ++d) sc[d] = static_cast<unsigned>(ur + d + 1), rc[d] = static_cast<long>(ur + d + 1);
    std::vector<T> a2av(3 * ur + 6, poison);
    collx::all_to_all_v(comm, values(r, 3 * ur + 6), sc, a2av, rc);
    // An async call copies its counts: the temporary list is gone, and its memory refilled, long
    // before the progress thread reads them.
    const std::vector<T> send_later = values(r, mine);
    std::vector<T> later_int(total, poison);
    collx::request viewed = collx::all_gather_v_async(comm, send_later, later, std::vector<std::size_t>{3, 0, 4});
    const std::vector<std::size_t> refill_viewed(3, std::size_t{1} << 40);
    collx::request copied = collx::all_gather_v_async(comm, send_later, later_int, std::vector<int>{3, 0, 4});
    const std::vector<int> refill_copied(3, 1 << 30);
    viewed.wait();
    copied.wait();
    for (const auto* v : {&agv, &braced, &sized, &rsv, &a2av, &later, &later_int})
      out.insert(out.end(), v->begin(), v->end());
    out.push_back(static_cast<T>(refill_viewed[0] + static_cast<std::size_t>(refill_copied[0])));
  });
  std::vector<T> gathered;
  for (int c = 0; c < world; ++c) {
    const std::vector<T> block = values(c, static_cast<std::size_t>(counts[static_cast<std::size_t>(c)]));
    gathered.insert(gathered.end(), block.begin(), block.end());
  }
  for (int r = 0; r < world; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    std::vector<T> expect;
    for (int k = 0; k < 3; ++k) expect.insert(expect.end(), gathered.begin(), gathered.end());
    std::size_t offset = 0;
    for (std::size_t c = 0; c < ur; ++c) offset += static_cast<std::size_t>(counts[c]);
    const std::vector<T> rsv = summed(static_cast<std::size_t>(counts[ur]), offset);
    expect.insert(expect.end(), rsv.begin(), rsv.end());
    for (std::size_t c = 0; c < world; ++c) {  // rank c's block for r starts at sum_{d<r} (c+d+1)
      std::size_t from = 0;
      for (std::size_t d = 0; d < ur; ++d) from += c + d + 1;
      const std::vector<T> blk = values(static_cast<int>(c), c + ur + 1, from);
      expect.insert(expect.end(), blk.begin(), blk.end());
    }
    for (int k = 0; k < 2; ++k) expect.insert(expect.end(), gathered.begin(), gathered.end());
    expect.push_back((T{1} << 40) + (1 << 30));
    INFO("rank " << r);
    CHECK(outs[ur] == expect);
  }
}

TEST_CASE("v-form counts: a negative count fails the call on every rank, naming the entry", "[ranges][counts][threads]") {
  struct outcome {
    collx::errc code{};
    std::string what;
    std::vector<T> recv;
  };
  // Rank 1 alone passes a negative count: its call is rejected before any byte moves, and the
  // others' calls end too (they do not wait for it).
  const auto run = [](auto call) {
    std::vector<outcome> got(world);
    collx::run_threads(world, [&](collx::communicator& comm) {
      outcome& o = got[static_cast<std::size_t>(comm.rank())];
      o.recv.assign(8, poison);
      try {
        call(comm, o.recv);
      } catch (const collx::error& e) {
        o.code = e.code();
        o.what = e.what();
      }
    });
    return got;
  };
  const std::vector<int> good{2, 0, 3}, bad{2, -5, 3};
  SECTION("all_gather_v") {
    const auto got = run([&](collx::communicator& comm, std::vector<T>& recv) {
      const auto& counts = comm.rank() == 1 ? bad : good;
      const std::size_t mine = comm.rank() == 1 ? 0 : static_cast<std::size_t>(good[static_cast<std::size_t>(comm.rank())]);
      collx::all_gather_v(comm, values(comm.rank(), mine), std::span<T>(recv.data(), 5), counts);
    });
    CHECK(got[1].code == collx::errc::invalid_argument);
    CHECK(got[1].recv == std::vector<T>(8, poison));  // rejected before any byte moved
    for (const outcome& o : got) {
      CHECK_THAT(o.what, Catch::Matchers::Contains("counts[1] = -5 is negative"));
      CHECK(std::all_of(o.recv.begin() + 5, o.recv.end(), [](T x) { return x == poison; }));  // past recv
    }
  }
  SECTION("reduce_scatter_v and all_to_all_v") {
    const auto got = run([&](collx::communicator& comm, std::vector<T>& recv) {
      if (comm.rank() == 1) {
        collx::all_to_all_v(comm, values(1, 3), std::vector<long>{1, 1, 1}, recv, std::vector<long>{1, 1, -1});
      } else {
        const auto mine = static_cast<std::size_t>(good[static_cast<std::size_t>(comm.rank())]);
        collx::reduce_scatter_v(comm, values(comm.rank(), 5), std::span<T>(recv.data(), mine), good);
      }
    });
    CHECK(got[1].code == collx::errc::invalid_argument);
    CHECK(got[1].recv == std::vector<T>(8, poison));
    for (const outcome& o : got) CHECK_THAT(o.what, Catch::Matchers::Contains("recv_counts[2] = -1 is negative"));
  }
}

namespace nullable_checks {
struct base_elem {
  float x;
};
struct derived_elem : base_elem {
  float y;
};
using collx::nullable_ptr;
// The GPU and NCCL collectives' buffers that may be null: a literal nullptr (or 0) and exactly T*
// convert; a pointer to another type or to a derived class does not (read as T's, its elements
// would be wrong), nor a const pointer into a non-const buffer.
static_assert(std::is_convertible_v<std::nullptr_t, nullable_ptr<float>>);
static_assert(std::is_convertible_v<float*, nullable_ptr<float>>);
static_assert(std::is_convertible_v<float*, nullable_ptr<const float>>);
static_assert(std::is_convertible_v<const float*, nullable_ptr<const float>>);
static_assert(!std::is_convertible_v<const float*, nullable_ptr<float>>);
static_assert(!std::is_convertible_v<double*, nullable_ptr<float>>);
static_assert(!std::is_convertible_v<int*, nullable_ptr<const float>>);
static_assert(!std::is_convertible_v<derived_elem*, nullable_ptr<base_elem>>);
static_assert(!std::is_convertible_v<const derived_elem*, nullable_ptr<const base_elem>>);
static_assert(!std::is_convertible_v<void*, nullable_ptr<float>>);
}  // namespace nullable_checks

TEST_CASE("nullable_ptr keeps the pointer it was given, or null", "[ranges]") {
  float x[2] = {1.0f, 2.0f};
  const collx::nullable_ptr<const float> a = x + 1, b = nullptr, c = 0;
  CHECK(a.p == x + 1);
  CHECK(b.p == nullptr);
  CHECK(c.p == nullptr);
}
