// collx::send_recv's checks on any transport, each rank checking its own results against values it
// computes itself (distinct per sender and index, counts that differ per rank): ring shifts both
// ways in which every rank posts its send first (larger than a shared-memory ring, which send then
// recv could not do), a halo exchange that does not wrap (no_peer), a world of one (a copy),
// zero-length messages, send_recv meeting plain send and recv, and send_recv_async. Run over
// threads by test_collectives, over processes by test_shm and over MPI by test_mpi.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <collx/collx.hpp>

#include "reference.hpp"

namespace p2p_checks {

using tally = ref::rank_tally;

/// Element i of what rank `from` sends in message `tag`.
inline double value(int from, std::size_t i, int tag) { return from * 1e6 + static_cast<double>(i) + tag * 0.25; }
inline std::vector<double> message(int from, std::size_t count, int tag) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = value(from, i, tag);
  return v;
}

/// `got` holds message(from, count, tag) and one poisoned element after it.
inline void expect(tally& t, const std::vector<double>& got, int from, std::size_t count, int tag, const std::string& what) {
  bool ok = got.size() == count + 1 && ref::is_poison(got[count]);
  std::size_t bad = count;
  for (std::size_t i = 0; ok && i < count; ++i)
    if (got[i] != value(from, i, tag)) bad = i, ok = false;
  t.check(ok, what + (bad < count ? ": element " + std::to_string(bad) + " is " + ref::show(got[bad]) : std::string()));
}

/// Runs every check on `c`; `big`: elements of the large ring shift (past a shared-memory ring's
/// 1 MiB by default). Returns the number of failed checks (each printed to stderr).
inline int run(collx::communicator& c, std::size_t big = 300007) {
  tally t{c.rank(), 0};
  const int r = c.rank(), n = c.size();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Counts differ per sender, so a receiver reading the wrong sender's message fails its count.
  auto count_of = [](int from, std::size_t base) { return base + static_cast<std::size_t>(from) * 7; };

  for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{1009}, big}) {
    // Forward: every rank sends first to next, then receives from prev, in one call.
    const auto out = message(r, count_of(r, base), 1);
    auto in = ref::poisoned<double>(count_of(prev, base) + 1);
    collx::send_recv(c, std::span<const double>(out), next, std::span<double>(in.data(), in.size() - 1), prev);
    expect(t, in, prev, count_of(prev, base), 1, "forward shift of " + std::to_string(base));
    // Backward: to prev, from next.
    const auto back = message(r, count_of(r, base), 2);
    auto in2 = ref::poisoned<double>(count_of(next, base) + 1);
    collx::send_recv(c, std::span<const double>(back), prev, std::span<double>(in2.data(), in2.size() - 1), next);
    expect(t, in2, next, count_of(next, base), 2, "backward shift of " + std::to_string(base));
  }

  {  // A halo exchange that does not wrap: the edges name no_peer; rank 0's buffer stays untouched.
    const int right = r + 1 < n ? r + 1 : collx::no_peer, left = r > 0 ? r - 1 : collx::no_peer;
    const auto out = message(r, 33, 3);
    auto in = ref::poisoned<double>(34);
    collx::send_recv(c, std::span<const double>(out), right, std::span<double>(in.data(), 33), left);
    if (r > 0) expect(t, in, r - 1, 33, 3, "halo from the left");
    else
      for (const double& x : in) t.check(ref::is_poison(x), "rank 0's halo (from no_peer) was written");
    // Plain send and recv skip no_peer too.
    collx::send(c, std::span<const double>(out), collx::no_peer);
    collx::recv(c, std::span<double>(in.data(), 33), collx::no_peer);
  }

  if (n >= 2 && r < 2) {  // send_recv on rank 0 meets recv then send on rank 1, types differing by side
    const int other = 1 - r;
    if (r == 0) {
      const std::vector<std::int32_t> out{7, -8, 9};
      auto in = ref::poisoned<double>(6);
      collx::send_recv(c, std::span<const std::int32_t>(out), other, std::span<double>(in.data(), 5), other);
      expect(t, in, 1, 5, 4, "send_recv's message from a plain send");
    } else {
      auto in = ref::poisoned<std::int32_t>(3);
      collx::recv(c, std::span<std::int32_t>(in), other);
      t.check(in == std::vector<std::int32_t>{7, -8, 9}, "plain recv of a send_recv's message");
      const auto out = message(1, 5, 4);
      collx::send(c, std::span<const double>(out), other);
    }
  }

  {  // async: after an async all-reduce, in call order
    std::vector<std::int64_t> sum(5, r + 1);
    const auto out = message(r, 4097, 5);
    auto in = ref::poisoned<double>(4098);
    auto q1 = collx::allreduce_async(c, std::span<std::int64_t>(sum));
    auto q2 = collx::send_recv_async(c, std::span<const double>(out), next, std::span<double>(in.data(), 4097), prev);
    q1.wait();
    q2.wait();
    t.check(sum[4] == std::int64_t{n} * (n + 1) / 2, "async all-reduce before send_recv_async");
    expect(t, in, prev, 4097, 5, "send_recv_async");
  }
  return t.failed;
}

}  // namespace p2p_checks
