// collx::split's checks on any transport, each rank checking its own results against references
// it computes itself from the values every rank holds (distinct per rank and index): groups
// ordered by key, two splits alive at once, a rank in no group, a group of one, a failure that
// stays inside its group, and the parent used between and after. test_split runs them over
// threads and processes, test_mpi over MPI.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <collx/collx.hpp>

#include "reference.hpp"

namespace split_checks {

using tally = ref::rank_tally;

inline std::int64_t value(int rank, std::size_t i) { return std::int64_t{rank + 1} * 1000003 + std::int64_t(i) * 7 - 500; }
inline ref::mat2 matrix(int rank, std::size_t i) {
  const auto x = static_cast<std::uint32_t>(rank * 7919 + static_cast<int>(i) * 31 + 1);
  return {x, x ^ 0x55u, 3 * x + 1, x + 2};
}
constexpr std::int64_t poison = -0x5a5a5a5a5a5a5a5;
constexpr ref::mat2 poison_matrix{0xdeadbeef, 0xdeadbeef, 0xdeadbeef, 0xdeadbeef};

/// Sums of value(q, i) over the parent ranks q in `ranks`, i < count.
inline std::vector<std::int64_t> sums(const std::vector<int>& ranks, std::size_t count) {
  std::vector<std::int64_t> s(count, 0);
  for (int q : ranks)
    for (std::size_t i = 0; i < count; ++i) s[i] += value(q, i);
  return s;
}

/// Checks a group made by split: its size, this rank's place in it (`members`: parent ranks in
/// the group's order), and a non-commutative all-reduce with algo::direct, which folds in the
/// group's rank order, against the sequential fold in that order.
inline void check_group(tally& t, collx::communicator& g, const std::vector<int>& members, int parent_rank,
                        const std::string& what) {
  const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), parent_rank) - members.begin());
  t.check(g.size() == static_cast<int>(members.size()) && g.rank() == want_rank,
          what + ": rank " + std::to_string(g.rank()) + "/" + std::to_string(g.size()) + ", want " +
              std::to_string(want_rank) + "/" + std::to_string(members.size()));
  const std::size_t count = 37;
  std::vector<ref::mat2> in(count), out(count, poison_matrix);
  for (std::size_t i = 0; i < count; ++i) in[i] = matrix(parent_rank, i);
  collx::allreduce<collx::algo::direct, ref::mat2, ref::mat_mul>(g, std::span<const ref::mat2>(in), std::span<ref::mat2>(out));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    ref::mat2 want = matrix(members[0], i);
    for (std::size_t k = 1; k < members.size(); ++k) want = ref::mat_mul{}(want, matrix(members[k], i));
    wrong += out[i] == want ? 0 : 1;
  }
  t.check(wrong == 0, what + ": non-commutative all-reduce in the group's rank order: " + std::to_string(wrong) + " wrong");
}

/// Every check on `world`; returns the number that failed (each printed to stderr).
inline int run(collx::communicator& world) {
  const int n = world.size(), r = world.rank();
  tally t{r};
  std::vector<int> all_ranks(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) all_ranks[static_cast<std::size_t>(q)] = q;

  // Even and odd ranks, twice over: ordered by descending rank (key -rank), then by rank. Both
  // splits stay alive and are used in turn, with the parent in between.
  {
    std::optional<collx::communicator> down = collx::split(world, r % 2, -r);
    std::optional<collx::communicator> up = collx::split(world, r % 2, r);
    std::vector<int> same_parity;
    for (int q = 0; q < n; ++q)
      if (q % 2 == r % 2) same_parity.push_back(q);
    std::vector<int> reversed(same_parity.rbegin(), same_parity.rend());
    t.check(down.has_value() && up.has_value(), "every rank with a color gets a communicator");
    if (down && up) {
      check_group(t, *down, reversed, r, "parity groups by descending rank");
      std::vector<std::int64_t> in(1001), out(1001, poison);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
      collx::allreduce(world, std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
      t.check(out == sums(all_ranks, in.size()), "the parent's all-reduce between its groups' calls");
      check_group(t, *up, same_parity, r, "parity groups by rank");
      check_group(t, *down, reversed, r, "parity groups by descending rank, again");
    }
  }

  // Rank 0 joins no group; the others form one in the parent's order (equal keys).
  {
    std::optional<collx::communicator> g = collx::split(world, r == 0 ? collx::no_color : 5, 0);
    t.check(g.has_value() == (r != 0), "no_color gives std::nullopt, a color a communicator");
    if (g) {
      std::vector<int> rest(all_ranks.begin() + 1, all_ranks.end());
      check_group(t, *g, rest, r, "all ranks but rank 0");
      std::vector<std::int64_t> in(4099), out(4099, poison);
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
      collx::allreduce(*g, std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
      t.check(out == sums(rest, in.size()), "an int64 sum over all ranks but rank 0");
    }
  }

  // The last rank alone: a group of one.
  {
    std::optional<collx::communicator> g = collx::split(world, r == n - 1 ? 7 : 0, 0);
    if (g && r == n - 1) check_group(t, *g, {r}, r, "a group of one");
  }

  // A failure stays in its group: the first odd rank aborts its group, whose ranks then fail
  // with errc::aborted; the even ranks' group and the parent go on.
  {
    std::optional<collx::communicator> g = collx::split(world, r % 2, 0);
    if (g) {
      std::vector<std::int64_t> in(64, value(r, 0)), out(64, poison);
      if (r % 2 == 1) {
        if (g->rank() == 0) g->abort();
        collx::errc code = collx::errc::internal;
        try {
          collx::allreduce(*g, std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
        } catch (const collx::error& e) {
          code = e.code();
        }
        t.check(code == collx::errc::aborted, "a call on the aborted group fails with errc::aborted");
      } else {
        std::vector<int> evens;
        for (int q = 0; q < n; q += 2) evens.push_back(q);
        check_group(t, *g, evens, r, "the even ranks' group while the odd ranks' one is aborted");
      }
    }
    std::vector<std::int64_t> in(3), out(3, poison);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
    collx::allreduce(world, std::span<const std::int64_t>(in), std::span<std::int64_t>(out));
    t.check(out == sums(all_ranks, in.size()), "the parent after a group of it was aborted");
  }
  return t.failed;
}

}  // namespace split_checks
