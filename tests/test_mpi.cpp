// collx over MPI, run by the launcher of the MPI it links: Open MPI (TCP between ranks) or MPICH
// (tests/CMakeLists.txt):
//   1. the MPI transport alone (collx::mpi::connect): every collective and algorithm, many pieces
//      per message, custom and non-commutative ops, send/recv, async calls;
//   2. the hierarchy (collx::mpi::connect_hierarchical): shared memory inside a "node"
//      (COLLX_NODE_ID per rank), MPI across nodes, algo::hierarchical and algo::automatic;
//   3. a slow rank in a correct program is not taken for a mismatch (the signature queries);
//   4. failures: a count mismatch reaches every rank as errc::mismatch, also where no message
//      shows it (one rank's count is 0: it sends nothing and returns at once), and abort() from
//      another thread wakes a waiting rank and its peers, and a hierarchical call one rank rejects
//      reaches ranks waiting on the node or cross-node level, and a rank whose own code throws
//      (destroying its communicator) ends its peers' next call, and so does one that closes its
//      communicator and leaves, all within seconds, not at the timeout;
//   5. the close handshake (closing_duplicates): every healthy duplicate freed or given up, none
//      left after MPI_Finalize, and a failed peer's unfinished data never received;
//   6. a call on a communicator kept past MPI_Finalize throws collx::error instead of aborting,
//      and an *_async call still running at MPI_Finalize is failed there (wait() throws);
//   7. a failed send's buffer is not read after the call returned, also when its receiver comes
//      late, also where a third rank's failure failed it (mode late-receiver).
// Every result is compared with the sequential rank-order reference of tests/reference.hpp
// (every rank generates every rank's inputs). A plain program, not Catch2: each rank checks, all
// ranks keep making the same calls, and the exit status says whether any check failed.
// argv[1] (optional): the number of nodes the launcher set up with COLLX_NODE_ID.
#include "edge_cases_per_rank.hpp"
#include "reference.hpp"
#include "p2p_checks.hpp"
#include "split_checks.hpp"

#include <mpi.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <collx/bootstrap/mpi.hpp>
#include <collx/collx.hpp>
#include <collx/transport/mpi.hpp>

namespace {

using std::size_t;
int g_rank = 0, g_failures = 0, g_checks = 0;

void check(bool ok, const std::string& what) {
  ++g_checks;
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

template <class T>
void check_same(std::span<const T> got, std::span<const T> want, const std::string& what) {
  const size_t d = ref::first_difference(got, want);
  check(d == ref::npos, what + (d == ref::npos ? "" : ": first difference at " + std::to_string(d) +
                                                         (d < got.size() && d < want.size()
                                                              ? ", got " + ref::show(got[d]) + ", want " + ref::show(want[d])
                                                              : std::string(" (sizes differ)"))));
}

template <class T, class Op>
std::vector<T> folded(const std::vector<std::vector<T>>& in, size_t from, size_t count, const Op& op = {}) {
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = ref::fold_left<T, Op>(static_cast<int>(in.size()), [&](int r) { return in[static_cast<size_t>(r)][from + i]; }, op);
  return out;
}

// Every collective with algorithm Algo on comm, against the reference.
template <class Algo>
void sweep(collx::communicator& c, const std::string& tag) {
  const int n = c.size(), r = c.rank();
  const size_t ur = static_cast<size_t>(r);
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{4099}, size_t{300001}}) {
    const std::string at = tag + " count " + std::to_string(count);
    {  // allreduce, int32 sum, out of place and in place
      const auto in = ref::gen_ranks<std::int32_t>(n, count, ref::flavor::general, 1);
      const auto want = folded<std::int32_t, collx::ops::sum>(in, 0, count);
      std::vector<std::int32_t> out = ref::poisoned<std::int32_t>(count);
      collx::allreduce<Algo>(c, std::span<const std::int32_t>(in[ur]), std::span<std::int32_t>(out));
      check_same<std::int32_t>(out, want, at + " allreduce");
      std::vector<std::int32_t> buf = in[ur];
      collx::allreduce<Algo>(c, std::span<std::int32_t>(buf));
      check_same<std::int32_t>(buf, want, at + " allreduce in place");
    }
    {  // allreduce, half avg (fp32 partials, rounded once)
      const auto in = ref::gen_ranks<collx::half>(n, count, ref::flavor::exact, 2);
      const auto want = folded<collx::half, collx::ops::avg>(in, 0, count);
      std::vector<collx::half> out = ref::poisoned<collx::half>(count);
      collx::allreduce<Algo>(c, std::span<const collx::half>(in[ur]), std::span<collx::half>(out), collx::ops::avg{});
      check_same<collx::half>(out, want, at + " allreduce half avg");
    }
    {  // broadcast and reduce from the last rank
      const int root = n - 1;
      const auto in = ref::gen_ranks<double>(n, count, ref::flavor::exact, 3);
      std::vector<double> b = r == root ? in[ur] : ref::poisoned<double>(count);
      collx::broadcast<Algo, double>(c, std::span<double>(b), root);
      check_same<double>(b, in[static_cast<size_t>(root)], at + " broadcast");
      std::vector<double> out = ref::poisoned<double>(count);
      collx::reduce<Algo, double>(c, std::span<const double>(in[ur]), std::span<double>(out), root, collx::ops::max{});
      if (r == root) check_same<double>(out, folded<double, collx::ops::max>(in, 0, count), at + " reduce max");
    }
  }
  // reduce_scatter_v and all_gather_v with uneven blocks (zeros included).
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) counts[static_cast<size_t>(k)] = static_cast<size_t>((k * 37 + 11) % 53) * (k % 3 == 1 ? 0 : 1) + 1000 * static_cast<size_t>(k);
  std::vector<size_t> off(counts.size() + 1);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  {
    const auto in = ref::gen_ranks<std::uint64_t>(n, off.back(), ref::flavor::general, 4);
    std::vector<std::uint64_t> out = ref::poisoned<std::uint64_t>(counts[ur]);
    collx::reduce_scatter_v<Algo>(c, std::span<const std::uint64_t>(in[ur]), std::span<std::uint64_t>(out),
                                  std::span<const size_t>(counts), collx::ops::bxor{});
    check_same<std::uint64_t>(out, folded<std::uint64_t, collx::ops::bxor>(in, off[ur], counts[ur]), tag + " reduce_scatter_v");
  }
  {
    std::vector<std::vector<float>> in;
    for (int k = 0; k < n; ++k) in.push_back(ref::gen_vec<float>(k, counts[static_cast<size_t>(k)], ref::flavor::general, 5));
    std::vector<float> out = ref::poisoned<float>(off.back()), want;
    for (const auto& v : in) want.insert(want.end(), v.begin(), v.end());
    collx::all_gather_v<Algo>(c, std::span<const float>(in[ur]), std::span<float>(out), std::span<const size_t>(counts));
    check_same<float>(out, want, tag + " all_gather_v");
  }
}

// Over-aligned elements (alignas 32, 64) in MPI's pieces (5000 bytes here, so element offsets
// drift) reach the op at their alignment (an AVX op faulted on them).
void over_aligned(collx::communicator& c) {
  ref::misaligned_operands = 0;
  const long wrong = ref::over_aligned_errors<32, collx::algo::ring>(c) + ref::over_aligned_errors<64, collx::algo::tree>(c) +
                     ref::over_aligned_errors<32, collx::algo::direct>(c);
  check(wrong == 0, "over-aligned elements summed right (" + std::to_string(wrong) + " wrong)");
  check(ref::misaligned_operands == 0,
        "over-aligned operands reach the op aligned (" + std::to_string(ref::misaligned_operands.load()) + " misaligned)");
}

void transport_only(collx::communicator& c) {
  sweep<collx::algo::ring>(c, "mpi ring");
  sweep<collx::algo::tree>(c, "mpi tree");
  sweep<collx::algo::direct>(c, "mpi direct");
  const int n = c.size(), r = c.rank();
  const size_t ur = static_cast<size_t>(r);
  {  // a non-commutative op, rank order
    const auto in = ref::gen_ranks<ref::mat2>(n, 777, ref::flavor::general, 6);
    std::vector<ref::mat2> out(777);
    collx::allreduce<collx::algo::tree, ref::mat2, ref::mat_mul>(c, std::span<const ref::mat2>(in[ur]), std::span<ref::mat2>(out));
    check_same<ref::mat2>(out, folded<ref::mat2, ref::mat_mul>(in, 0, 777), "mpi mat_mul allreduce");
  }
  {  // all_to_all_v
    std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      sc[static_cast<size_t>(p)] = static_cast<size_t>(r * 3 + p + 1);
      rc[static_cast<size_t>(p)] = static_cast<size_t>(p * 3 + r + 1);
    }
    std::vector<int> send(std::accumulate(sc.begin(), sc.end(), size_t{0})), recv(std::accumulate(rc.begin(), rc.end(), size_t{0}), -1);
    for (size_t i = 0, p = 0, k = 0; i < send.size(); ++i, ++k) {
      while (k >= sc[p]) k = 0, ++p;
      send[i] = r * 1000000 + static_cast<int>(p) * 1000 + static_cast<int>(k);
    }
    collx::all_to_all_v(c, std::span<const int>(send), std::span<const size_t>(sc), std::span<int>(recv), std::span<const size_t>(rc));
    bool ok = true;
    for (size_t i = 0, p = 0, k = 0; i < recv.size(); ++i, ++k) {
      while (k >= rc[p]) k = 0, ++p;
      ok = ok && recv[i] == static_cast<int>(p) * 1000000 + r * 1000 + static_cast<int>(k);
    }
    check(ok, "mpi all_to_all_v");
  }
  {  // send/recv around a ring, a message of many pieces
    std::vector<double> out = ref::gen_vec<double>(r, 200000, ref::flavor::general, 7), in(200000);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r % 2 == 0) {
      collx::send(c, std::span<const double>(out), next);
      collx::recv(c, std::span<double>(in), prev);
    } else {
      collx::recv(c, std::span<double>(in), prev);
      collx::send(c, std::span<const double>(out), next);
    }
    check_same<double>(in, ref::gen_vec<double>(prev, 200000, ref::flavor::general, 7), "mpi send/recv");
  }
  {  // async: two all-reduces in flight, then a blocking one
    std::vector<long> a(5000, r + 1), b(7000, 2 * r);
    auto qa = collx::allreduce_async(c, std::span<long>(a));
    auto qb = collx::allreduce_async(c, std::span<long>(b));
    collx::barrier(c);
    qa.wait();
    qb.wait();
    const long s = static_cast<long>(n) * (n + 1) / 2;
    check(a[4999] == s && b[6999] == 2 * (s - n), "mpi async allreduce");
  }
}

/// edge::every_case on c with Algo; its failures (printed by each rank) count as this rank's.
template <class Algo>
void edge_cases(collx::communicator& c, const std::string& where) {
  const int failed = edge::every_case<Algo>(c);
  check(failed == 0, "edge cases, " + where + ": " + std::to_string(failed) + " failed (above)");
}

void hierarchical(collx::communicator& c, int expected_nodes) {
  collx::hierarchy* h = c.get_hierarchy();
  check(h != nullptr, "connect_hierarchical attaches a hierarchy");
  if (!h) return;
  if (expected_nodes > 0)
    check(h->layout.node_count == expected_nodes, "node count " + std::to_string(h->layout.node_count) + ", launcher set up " +
                                                     std::to_string(expected_nodes));
  check(h->node.get_transport().name() == "shm", "node communicator over shared memory");
  check(h->cross.get_transport().name() == "mpi", "cross-node communicator over MPI");
  using H = collx::algo::hierarchical<collx::algo::ring, collx::algo::direct>;
  sweep<H>(c, "hierarchical<ring,direct>");
  sweep<collx::algo::automatic>(c, "automatic (hierarchical)");
  const int n = c.size();
  const size_t ur = static_cast<size_t>(c.rank());
  if (h->layout.contiguous) {  // custom non-commutative op across nodes, rank order
    const auto in = ref::gen_ranks<ref::mat2>(n, 5001, ref::flavor::general, 8);
    std::vector<ref::mat2> out(5001);
    collx::allreduce<collx::algo::hierarchical<collx::algo::tree, collx::algo::direct>, ref::mat2, ref::mat_mul>(
        c, std::span<const ref::mat2>(in[ur]), std::span<ref::mat2>(out));
    check_same<ref::mat2>(out, folded<ref::mat2, ref::mat_mul>(in, 0, 5001), "hierarchical mat_mul allreduce");
    // reduce_scatter_v and reduce (root in the last node) with the same op.
    std::vector<size_t> counts(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) counts[static_cast<size_t>(k)] = static_cast<size_t>(k % 2 ? 700 : 3 + k);
    std::vector<size_t> off(counts.size() + 1);
    std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
    const auto rs_in = ref::gen_ranks<ref::mat2>(n, off.back(), ref::flavor::general, 10);
    std::vector<ref::mat2> rs_out(counts[ur]);
    collx::reduce_scatter_v<collx::algo::hierarchical<collx::algo::direct, collx::algo::tree>, ref::mat2, ref::mat_mul>(
        c, std::span<const ref::mat2>(rs_in[ur]), std::span<ref::mat2>(rs_out), std::span<const size_t>(counts));
    check_same<ref::mat2>(rs_out, folded<ref::mat2, ref::mat_mul>(rs_in, off[ur], counts[ur]), "hierarchical mat_mul reduce_scatter_v");
    std::vector<ref::mat2> red(5001);
    collx::reduce<collx::algo::hierarchical<collx::algo::tree, collx::algo::tree>, ref::mat2, ref::mat_mul>(
        c, std::span<const ref::mat2>(in[ur]), std::span<ref::mat2>(red), n - 1);
    if (c.rank() == n - 1) check_same<ref::mat2>(red, folded<ref::mat2, ref::mat_mul>(in, 0, 5001), "hierarchical mat_mul reduce");
  }
  {  // a custom commutative struct reduction (min-loc) across nodes
    using L = ref::loc64;
    const auto in = ref::gen_ranks<L>(n, 3001, ref::flavor::general, 9);
    std::vector<L> out(3001);
    collx::allreduce<collx::algo::hierarchical<>, L, ref::min_loc>(c, std::span<const L>(in[ur]), std::span<L>(out));
    check_same<L>(out, folded<L, ref::min_loc>(in, 0, 3001), "hierarchical min_loc allreduce");
  }
}

// Rank 1 passes another count: every rank must fail with errc::mismatch, quickly.
void mismatch(collx::communicator& c) {
  std::vector<int> v(c.rank() == 1 ? 100 : 64, 1);
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  try {
    collx::allreduce<collx::algo::direct>(c, std::span<int>(v));
  } catch (const collx::error& e) {
    code = e.code();
    if (g_rank == 0) std::printf("mismatch as reported on rank 0: %s\n", e.what());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::mismatch, "count mismatch reported as errc::mismatch (got " + std::to_string(static_cast<int>(code)) + ")");
  check(s < 10.0, "mismatch reported in " + std::to_string(s) + " s (timeout is 60 s)");
}

// Every MPI duplicate of a healthy communicator this process destroyed has been freed or, where a
// peer's failed, given up (closing_duplicates): once every rank has destroyed it, the peers' close
// messages arrive. Failed communicators keep theirs (mpi_transport's destructor says why) and are
// not counted.
void duplicates_freed(const std::string& after) {
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has destroyed its communicators: the closes are sent
  auto& closing = collx::mpi::closing_duplicates::instance();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (closing.kept() != 0 && std::chrono::steady_clock::now() < until) {
    closing.free_finished();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  check(closing.kept() == 0, "MPI duplicates freed after " + after + ": " + std::to_string(closing.kept()) + " kept");
}

// Rank 0 exchanges with rank 1 point to point while every other rank, rank 1 too, calls a barrier:
// every rank fails with errc::mismatch, and the text names a point-to-point call against the
// barrier (the message carries no call number: before, rank 1 compared it with an empty record and
// named an "allreduce #0 (0 elements of a 0-byte type)" nobody called).
void p2p_against_collective(collx::communicator& c) {
  const int r = c.rank();
  collx::errc code = collx::errc::internal;
  std::string what;
  try {
    std::vector<float> out(8, float(r)), in(8);
    if (r == 0) collx::send_recv(c, std::span<const float>(out), 1, std::span<float>(in), 1);
    else collx::barrier(c);
  } catch (const collx::error& e) {
    code = e.code();
    what = e.what();
  }
  if (r <= 1) std::printf("point-to-point against a barrier, as reported on rank %d: %s\n", r, what.c_str());
  check(code == collx::errc::mismatch, "send_recv against a barrier: errc::mismatch (got " + std::to_string(static_cast<int>(code)) + ")");
  check(what.find("0-byte type") == std::string::npos, "send_recv against a barrier names a call nobody made: " + what);
  if (r == 1) check(what.find("point-to-point call") != std::string::npos && what.find("barrier") != std::string::npos,
                    "rank 1's text names a point-to-point call and barrier: " + what);
}

// Rank 0 receives from rank 1 while every other rank calls an all-reduce, whose message reaches
// rank 0's recv: a mismatch on every rank at once (the recv waited 2 s for an answer to a query
// no peer could answer before).
void recv_against_collective(collx::communicator& c) {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  try {
    std::vector<float> v(8, 1.f);
    if (c.rank() == 0) collx::recv(c, std::span<float>(v), 1);
    else collx::allreduce<collx::algo::direct>(c, std::span<float>(v));
  } catch (const collx::error& e) {
    code = e.code();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::mismatch, "recv against an all-reduce: errc::mismatch (got " + std::to_string(static_cast<int>(code)) + ")");
  check(s < 1.0, "recv against an all-reduce failed after " + std::to_string(s) + " s (at once expected)");
}

// Rank 1 passes count 0: it returns at once, sending nothing, while the others wait for its data.
// Then, after `pause`, it makes a barrier call (or, with `then_call` false, none: it goes on as
// if the call had worked). Every rank that calls again must get errc::mismatch naming the count,
// quickly, and so must the waiting ranks. With the direct algorithm, messages of the two calls
// meet out of step (each side names the field: rank 1 from its own record of call 1, the others
// by asking rank 1); with the tree, rank 1's signature, sent to every peer as it moves nothing,
// tells the waiting ranks, whatever rank 1 does next.
template <class Algo>
void silent_mismatch(collx::communicator& c, std::chrono::milliseconds pause, bool then_call = true) {
  std::vector<int> v(c.rank() == 1 ? 0 : 64, 1);
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string what;
  try {
    collx::allreduce<Algo>(c, std::span<int>(v));
    if (c.rank() == 1) {
      if (!then_call) return;  // no error to see here: rank 1 moved nothing and never calls again
      std::this_thread::sleep_for(pause);
      collx::barrier(c);
    }
  } catch (const collx::error& e) {
    code = e.code();
    what = e.what();
    if (g_rank <= 1) std::printf("silent mismatch as reported on rank %d: %s\n", g_rank, e.what());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::mismatch, "count 0 against 64 reported as errc::mismatch (got " + std::to_string(static_cast<int>(code)) + ")");
  check(what.find("count differs") != std::string::npos, "the message names the count: " + what);
  check(what.rfind("rank " + std::to_string(g_rank) + "/", 0) == 0, "the message names the rank and call first: " + what);
  check(s < 10.0, "silent mismatch reported in " + std::to_string(s) + " s (timeout is 60 s)");
}

// A correct program with a slow rank: the last rank sleeps 120 ms before each call, so the others
// wait past the query threshold (50 ms) and ask it, in calls where it sends nothing to some peers
// (count 0 everywhere, a root that only sends, a v-form block of 0) and around point-to-point
// messages, over a plain MPI communicator and a hierarchical one. The queries must not read as a
// mismatch: every call succeeds with the reference result.
void slow_but_correct(collx::communicator& c) {
  const int n = c.size(), r = c.rank();
  const size_t ur = static_cast<size_t>(r);
  auto slow = [&] {
    if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(120));
  };
  try {
    const auto in = ref::gen_ranks<std::int32_t>(n, 777, ref::flavor::general, 31);
    std::vector<std::int32_t> out(777);
    slow();
    collx::allreduce<collx::algo::tree>(c, std::span<const std::int32_t>(in[ur]), std::span<std::int32_t>(out));
    check_same<std::int32_t>(out, folded<std::int32_t, collx::ops::sum>(in, 0, 777), "slow rank: allreduce");
    std::vector<std::int32_t> none;
    slow();
    collx::allreduce(c, std::span<std::int32_t>(none));  // count 0 on every rank
    std::vector<std::int32_t> b = in[ur];
    slow();
    collx::broadcast<collx::algo::direct>(c, std::span<std::int32_t>(b), n - 1);  // the slow rank only sends
    check_same<std::int32_t>(b, in[static_cast<size_t>(n - 1)], "slow rank: broadcast from it");
    b = in[ur];
    slow();
    collx::broadcast<collx::algo::direct>(c, std::span<std::int32_t>(b), 0);
    check_same<std::int32_t>(b, in[0], "slow rank: broadcast to it");
    std::vector<size_t> counts(static_cast<size_t>(n), 5);
    counts[0] = 0;  // rank 0's block is empty
    std::vector<std::int32_t> mine(counts[ur], r + 1), all(5 * static_cast<size_t>(n - 1));
    slow();
    collx::all_gather_v(c, std::span<const std::int32_t>(mine), std::span<std::int32_t>(all), std::span<const size_t>(counts));
    bool gathered = true;
    for (size_t i = 0; i < all.size(); ++i) gathered = gathered && all[i] == static_cast<std::int32_t>(i / 5 + 2);
    check(gathered, "slow rank: all_gather_v with an empty block");
    if (n >= 2 && r < 2) {  // point-to-point between collectives, ranks 0 and 1 only
      std::vector<std::int32_t> msg(10, 7);
      if (r == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(120));
        collx::send(c, std::span<const std::int32_t>(msg), 1);
      } else {
        std::vector<std::int32_t> got(10);
        collx::recv(c, std::span<std::int32_t>(got), 0);
        check(got == msg, "slow rank: send/recv");
      }
    }
    slow();
    collx::barrier(c);
    check(true, "slow rank: no call failed");
  } catch (const collx::error& e) {
    check(false, std::string("slow rank: a correct call failed: ") + e.what());
  }
}

// Rank 0 waits for a message nobody sends; another thread aborts its communicator.
void abort_wakes(collx::communicator& c) {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::thread aborter;
  if (c.rank() == 0) aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      c.abort();
    });
  try {
    std::vector<int> v(10);
    // Nothing here ever arrives: rank 1 receives too (its barrier's message would reach rank 0's
    // receive and read as a mismatch on 2 ranks); the others wait in a barrier rank 0 never joins.
    if (c.rank() == 0) collx::recv(c, std::span<int>(v), 1);
    else if (c.rank() == 1) collx::recv(c, std::span<int>(v), 0);
    else collx::barrier(c);
  } catch (const collx::error& e) {
    code = e.code();
  }
  if (aborter.joinable()) aborter.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::aborted, "abort() reported as errc::aborted (got " + std::to_string(static_cast<int>(code)) + ")");
  check(s < 10.0, "abort seen in " + std::to_string(s) + " s");
}

// A chain of waits: rank 0 receives from rank 2, which (as every rank above it) receives from rank
// 1, which is busy outside collx for 2.5 s. Rank 0 (timeout 1 s) times out first,
// naming rank 2, and every rank adopts that notice; rank 2's own message must still name rank 1,
// the rank it had waited for (before, no rank's message named it). 3 ranks or more.
void timeout_chain_names_the_late_rank() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n < 3) return;
  collx::communicator_options o;
  o.timeout = g_rank == 0 ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(10000);
  collx::errc code = collx::errc::internal;
  std::string why;
  try {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, o);
    std::vector<int> v(3);
    if (c.rank() == 0) {
      collx::recv(c, std::span<int>(v), 2);
    } else if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      collx::recv(c, std::span<int>(v), 0);  // (a send could go out eagerly before the notice is read)
    } else {
      collx::recv(c, std::span<int>(v), 1);
    }
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  check(code == collx::errc::timeout, "every rank reads rank 0's timeout (got " + std::to_string(static_cast<int>(code)) + "): " + why);
  // Rank 2 answered rank 0's whereabouts query from inside its wait (before, rank 0 said only "the
  // peer is late, stuck, dead, or called something else").
  if (g_rank == 0)
    check(why.find("waiting for a message from rank 2 (rank 2 has made no collective call on this communicator yet; it "
                   "waits for a message from rank 1)") != std::string::npos,
          "rank 0 names rank 2 and what rank 2 waits for: " + why);
  if (g_rank == 2)
    check(why.find("rank 0 failed: timed out") != std::string::npos &&
              why.find("; rank 2 had itself waited ") != std::string::npos &&
              why.find(" ms for a message from rank 1") != std::string::npos,
          "rank 2 reads rank 0's timeout and names the rank it had waited for: " + why);
}

// Rank 1 makes the first all-reduce, then is busy outside collx (1.5 s) while rank 0 (timeout
// 600 ms) waits for it in the second: rank 1 cannot answer rank 0's whereabouts query, and rank 0's
// timeout says so. Rank 2, when there is one, is in the second call too and answers: rank 0
// waits for the ranks of the direct all-reduce in rank order, so it asked rank 1 only. The other
// ranks then read rank 0's timeout; rank 1 may find every message of its call there already and
// complete it.
void timeout_names_a_peer_outside_collx() {
  collx::communicator_options o;
  o.timeout = g_rank == 0 ? std::chrono::milliseconds(600) : std::chrono::milliseconds(10000);
  collx::errc code = collx::errc::internal;
  std::string why;
  try {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, o);
    std::vector<std::int64_t> v(5, g_rank);
    collx::allreduce<collx::algo::direct>(c, std::span<std::int64_t>(v));
    if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    collx::allreduce<collx::algo::direct>(c, std::span<std::int64_t>(v));
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  if (g_rank != 1 || code != collx::errc::internal)
    check(code == collx::errc::timeout, "ranks read rank 0's timeout (got " + std::to_string(static_cast<int>(code)) + "): " + why);
  if (g_rank == 0)
    check(why.find("timed out after 600 ms waiting for a message from rank 1 (rank 1 did not answer in ") != std::string::npos &&
              why.find(" ms: it is in no call on this communicator (busy in its own code, or waiting on another "
                       "communicator), stopped, or dead)") != std::string::npos,
          "rank 0 says rank 1 did not answer: " + why);
}

// Rank 0 rejects a hierarchical broadcast (a root outside the communicator) before any level
// runs, which fails only the whole communicator; the others are inside the call, waiting on the
// node or cross-node level: they must learn of it there (the levels watch each other), well
// before the timeout.
void rejection_reaches_levels(collx::communicator& c) {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  try {
    std::vector<int> v(64, c.rank());
    collx::broadcast<collx::algo::hierarchical<>>(c, std::span<int>(v), c.rank() == 0 ? 99 : 0);
  } catch (const collx::error& e) {
    code = e.code();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::invalid_argument,
        "a call rank 0 rejected ends the hierarchical call on every rank (got " + std::to_string(static_cast<int>(code)) + ")");
  check(s < 10.0, "rejection seen on every level in " + std::to_string(s) + " s");
}

// Rank 1 names another root for a hierarchical broadcast than the others. Over MPI a small
// root's sends complete without a receiver, so every rank may finish the call, rank 1 with other
// data, and no level call ever sees the difference. The next world call (a flat barrier) must fail
// with the root named on every rank: each message carries a digest of the sender's earlier calls.
// A large root's sends (MPI's rendezvous protocol) wait for a receiver that never comes: the
// ranks waiting in a level must learn of the disagreement too (the world's records, sent after
// 50 ms), not wait for their timeout (before: 60 s, a timeout).
void hierarchical_root_disagreement(collx::communicator& c, std::size_t count) {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string why;
  try {
    std::vector<int> v(count, c.rank());
    collx::broadcast<collx::algo::hierarchical<>>(c, std::span<int>(v), c.rank() == 1 ? 1 : 0);
    collx::barrier(c);
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::mismatch,
        "a root that differs in a hierarchical call fails the next call (got " + std::to_string(static_cast<int>(code)) + ")");
  check(why.find("root differs") != std::string::npos, "the root is named: " + why);
  check(s < 10.0, "the root disagreement (" + std::to_string(count) + " elements) seen in " + std::to_string(s) + " s");
}

// As above, with the last rank passing root 1 and a hierarchical all-reduce next: on 2 nodes x 2
// ranks the last rank waits on its cross-node level for rank 1, which went on to the all-reduce and
// sends it that call's level message first. Every rank must still learn "root differs" (the
// whole call's records, compared once a level fails with a mismatch), not the levels'
// "collective differs: rank 0 called allreduce, rank 1 called broadcast".
void hierarchical_root_disagreement_then_hierarchical_call(collx::communicator& c) {
  std::string why;
  try {
    std::vector<float> v(1024, static_cast<float>(c.rank()));
    collx::broadcast<collx::algo::hierarchical<>>(c, std::span<float>(v), c.rank() == c.size() - 1 ? 1 : 0);
    collx::allreduce<collx::algo::hierarchical<>>(c, std::span<float>(v));
  } catch (const collx::error& e) {
    why = e.what();
  }
  check(why.find("root differs") != std::string::npos, "a hierarchical call after one whose root differs names the root: " + why);
}

// World rank 3 passes count 0 to a hierarchical all-reduce, the others 64, then all call a flat
// barrier. Rank 3 moves nothing and reaches the barrier, whose wait finds its node's records
// disagree: that node-level failure, in the node's numbering (rank 3 is its rank 1), reaches the
// whole communicator there. Every rank's error must name world rank 3 or come with the legend; world
// rank 1 used to read it as its own ("count differs: rank 0 has 64, rank 1 has 0").
void level_failure_names_world_ranks() {
  for (int round = 0; round < 5; ++round) {
    collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
    std::vector<float> v(g_rank == 3 ? 0 : 64, 1.0f);
    std::string why;
    try {
      collx::allreduce<collx::algo::hierarchical<collx::algo::ring, collx::algo::tree>>(c, std::span<float>(v));
      collx::barrier(c);
    } catch (const collx::error& e) {
      why = e.what();
    }
    check(!why.empty(), "count 0 on rank 3 of a hierarchical all-reduce fails every rank");
    // Rank 3 named in world ranks, or a level's rank with its world rank or the level's legend
    // (its node: world ranks 2, 3; its cross-node communicator: world ranks 1, 3).
    check(why.find("rank 3 has 0") != std::string::npos || why.find("world rank 3") != std::string::npos ||
              why.find("are world ranks 2, 3") != std::string::npos || why.find("are world ranks 1, 3") != std::string::npos,
          "the rank that passed 0 is named as world rank 3: " + why);
  }
}

// The last rank passes count 0 to a hierarchical reduce, the others 64, and then calls nothing
// more on the communicator. It makes no level call at all, so nothing on a level tells the
// waiting ranks; its record, sent on the whole communicator as a flat call's is, must: a mismatch
// within seconds, not a timeout.
void hierarchical_count_zero() {
  collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
  const int last = c.size() - 1;
  std::vector<float> in(c.rank() == last ? 0 : 64, 1.0f), out(in.size());
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string what;
  try {
    collx::reduce<collx::algo::hierarchical<>>(c, std::span<const float>(in), std::span<float>(out), 0);
  } catch (const collx::error& e) {
    code = e.code();
    what = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The root waits for every node; ranks that only send may return without seeing it.
  if (c.rank() == 0)
    check(code == collx::errc::mismatch, "hierarchical reduce, count 0 on the last rank: errc::mismatch at the root (got " +
                                             std::to_string(static_cast<int>(code)) + "): " + what);
  check(code != collx::errc::timeout && s < 10.0,
        "the count 0 of a hierarchical reduce seen in " + std::to_string(s) + " s (timeout is 60 s): " + what);
  MPI_Barrier(MPI_COMM_WORLD);  // the last rank's communicator stays until the others have seen it
}

// Rank 0's broadcast of 32 MiB in 5000-byte pieces (eager messages, sent from its buffer) is
// aborted by another thread before the peers reach it; the call returns and rank 0 unmaps the
// buffer. MPI must not read from it afterwards: it once wrote the remaining pieces out of the
// unmapped buffer during a later MPI call ("writev error: Bad address"), which killed the job.
void failed_call_releases_buffer() {
  collx::mpi::mpi_options small;
  small.piece_bytes = 5000;
  collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, {}, small);
  const std::size_t bytes = std::size_t{32} << 20;
  collx::errc code = collx::errc::internal;
  if (g_rank == 0) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    check(p != MAP_FAILED, "mmap of the broadcast buffer");
    if (p == MAP_FAILED) return;
    std::memset(p, 7, bytes);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort();
    });
    try {
      collx::broadcast<collx::algo::direct>(c, std::span<std::uint8_t>(static_cast<std::uint8_t*>(p), bytes), 0);
    } catch (const collx::error& e) {
      code = e.code();
    }
    aborter.join();
    ::munmap(p, bytes);  // the call returned: the buffer is the caller's
  } else {  // well inside rank 0's 2 s for its sends, so that they all finish
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::vector<std::uint8_t> b(bytes);
    try {  // the data may all be there before the notice (TCP keeps order): then the next call fails
      collx::broadcast<collx::algo::direct>(c, std::span<std::uint8_t>(b), 0);
      collx::barrier(c);
    } catch (const collx::error& e) {
      code = e.code();
    }
  }
  check(code == collx::errc::aborted, "a broadcast aborted by rank 0 fails with errc::aborted (got " +
                                          std::to_string(static_cast<int>(code)) + ")");
  MPI_Barrier(MPI_COMM_WORLD);  // MPI progresses here, with rank 0's buffer gone
}

// Rank 0 broadcasts 32 MiB in 1 MiB pieces (sent from its buffer once a receiver matches them) to
// ranks that never call: they destroy their communicator healthy at once, and its close
// handshake must not receive rank 0's data. Rank 0 times out, gets its buffer back, unmaps it, and
// only then destroys its failed communicator (its failed-close comes last). Before, the others'
// drain received the pieces: Open MPI read them from the unmapped buffer ("writev error: Bad
// address") and the drain hung, here caught by a watchdog.
void stale_data_not_drained() {
  collx::communicator_options opt;
  opt.timeout = std::chrono::milliseconds(500);
  const std::size_t bytes = std::size_t{32} << 20;
  std::optional<collx::communicator> c(collx::mpi::connect(MPI_COMM_WORLD, opt));
  if (g_rank == 0) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    check(p != MAP_FAILED, "mmap of the broadcast buffer");
    if (p == MAP_FAILED) std::abort();
    collx::errc code = collx::errc::internal;
    try {
      collx::broadcast<collx::algo::direct>(*c, std::span<std::uint8_t>(static_cast<std::uint8_t*>(p), bytes), 0);
    } catch (const collx::error& e) {
      code = e.code();
    }
    check(code == collx::errc::timeout, "a broadcast nobody receives times out (got " + std::to_string(static_cast<int>(code)) + ")");
    ::munmap(p, bytes);  // the call returned: the buffer is the caller's
  } else {
    c.reset();  // healthy: its close handshake waits for rank 0's close
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's pieces are announced to the others by now
  if (g_rank != 0) {
    std::atomic<bool> done{false};
    std::thread watchdog([&] {
      for (int i = 0; i < 300 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (done.load()) return;
      std::fprintf(stderr, "rank %d: FAILED: the close handshake hung on a failed peer's data\n", g_rank);
      std::_Exit(1);
    });
    collx::mpi::closing_duplicates::instance().free_finished();
    MPI_Barrier(MPI_COMM_WORLD);  // rank 0 drives MPI here: a drained piece would be read now
    done = true;
    watchdog.join();
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
  }
  c.reset();  // rank 0's failed communicator: keeps its duplicate, sends the failed-close
  duplicates_freed("a failed peer's data was left undrained");
}

// Rank 1's own code throws between two all-reduces, destroying its communicator on the way out.
// The others' second all-reduce must fail with errc::aborted naming rank 1, well before the
// timeout: before, over MPI, nothing told them rank 1 had left, and they waited the timeout out.
void left_by_exception() {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string why;
  bool threw_own = false;
  try {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
    std::vector<int> v(64, c.rank());
    collx::allreduce(c, std::span<int>(v));
    if (c.rank() == 1) throw std::runtime_error("the user's code on rank 1");
    collx::allreduce(c, std::span<int>(v));
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  } catch (const std::runtime_error&) {
    threw_own = true;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_rank == 1) {
    check(threw_own, "rank 1 got its own exception back");
    return;
  }
  check(code == collx::errc::aborted, "a peer that left by an exception is errc::aborted (got " + std::to_string(static_cast<int>(code)) + ")");
  check(why.find("rank 1 failed: it left its communicator while an exception was propagating") != std::string::npos,
        "the rank that left is named: " + why);
  check(s < 10.0, "the departure seen in " + std::to_string(s) + " s");
}


// Rank 1 destroys its communicator (no exception: it simply leaves) after the first all-reduce;
// the others' second all-reduce must fail naming rank 1, in seconds: before, nothing but the
// timeout ended it, though rank 1's close message had come. `on_group`: the same on the group of
// world ranks 0 and 2 of a split by parity (ranks 0 and 1 there), where world rank 2 leaves and
// both ranks are named with their world ranks.
void left_quietly(bool on_group) {
  const auto t0 = std::chrono::steady_clock::now();
  const int leaver = on_group ? 2 : 1;
  collx::errc code = collx::errc::internal;
  std::string why;
  try {
    collx::communicator world = collx::mpi::connect(MPI_COMM_WORLD);
    std::optional<collx::communicator> group;
    if (on_group) group = collx::split(world, g_rank % 2, g_rank);
    if (!on_group || g_rank % 2 == 0) {
      collx::communicator& c = on_group ? *group : world;
      std::vector<int> v(64, c.rank());
      collx::allreduce(c, std::span<int>(v));
      if (g_rank != leaver) collx::allreduce(c, std::span<int>(v));
    }
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_rank == leaver || (on_group && g_rank % 2 == 1)) {
    check(why.empty(), "rank " + std::to_string(g_rank) + " left (or had no part) without an error: " + why);
    return;
  }
  check(code == collx::errc::transport, "a peer that closed its communicator is errc::transport (got " +
                                            std::to_string(static_cast<int>(code)) + "): " + why);
  const std::string named = on_group ? "rank 1 (world rank 2) closed its communicator while rank 0 (world rank 0) waits"
                                     : "rank 1 closed its communicator while rank";
  check(why.find(named) != std::string::npos, "the rank that left is named: " + why);
  check(s < 10.0, "the departure seen in " + std::to_string(s) + " s");
}


// A healthy job: root 0 broadcasts 8 MiB (direct: rank 0 sends to every rank), rank 1 receives it
// and closes its communicator at once, the last rank joins 3 s late. Rank 0, waiting for its send
// to the last rank, must not take rank 1's close (its send to rank 1 done) for a reason to fail.
void closed_after_receiving() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::string why;
  try {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
    std::vector<float> v(std::size_t{2} << 20, g_rank == 0 ? 1.0f : 0.0f);
    if (g_rank == n - 1) std::this_thread::sleep_for(std::chrono::seconds(3));
    collx::broadcast<collx::algo::direct>(c, std::span<float>(v), 0);
    check(v.front() == 1.0f && v.back() == 1.0f, "the broadcast's data arrived");
  } catch (const collx::error& e) {
    why = e.what();
  }
  check(why.empty(), "a peer that closed after receiving everything fails nobody: " + why);
}

// Rank 1 calls connect (or connect_hierarchical) 2.5 s after the others, past their connect
// timeout (1 s): MPI collectives have no timeout, and the others waited in MPI for ever for a rank
// that never came (or that waited in another MPI call on the communicator). They must fail with
// errc::timeout at about 1 s; rank 1, whose first exchange then completes at once (the others'
// contributions are there), must time out in its next step (the duplicate; the node ids), which
// the others never reach. On a duplicate of MPI_COMM_WORLD, which the test then drains if rank 1
// failed so: the others' matching step completes rank 1's, still pending in MPI.
void connect_without_every_rank(bool hierarchical) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  collx::mpi::mpi_options opt;
  opt.connect_timeout = std::chrono::milliseconds(1000);
  const bool late = g_rank == 1;
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  std::atomic<bool> done{false};
  std::thread watchdog([&] {  // a connect that waits in MPI for ever ends the job, failed
    for (int i = 0; i < 300 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done) {
      std::fprintf(stderr, "rank %d: FAILED: connect still waits 30 s after a late rank's peers gave up\n", g_rank);
      std::_Exit(1);
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string why;
  try {
    if (hierarchical) (void)collx::mpi::connect_hierarchical(c, {}, collx::mpi::intra_node::shm, opt);
    else (void)collx::mpi::connect(c, {}, opt);
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  done = true;
  watchdog.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string tag = hierarchical ? "connect_hierarchical: " : "connect: ";
  check(code == collx::errc::timeout, tag + "a connect that not every rank joins in time is errc::timeout (got " +
                                          std::to_string(static_cast<int>(code)) + "): " + why);
  const std::string step = !late          ? "MPI_Iallgather(how each rank connects)"
                           : hierarchical ? "MPI_Iallgather(node ids)"
                                          : "MPI_Comm_idup (its duplicate)";
  const bool named = why.find("timed out after 1000 ms waiting for every rank of the MPI communicator (") != std::string::npos &&
                     why.find(" ranks) in " + step) != std::string::npos;
  check(named, tag + "the timeout names the step it waited in: " + why);
  check(s > 0.9 && s < 5.0, tag + "the connect failed after " + std::to_string(s) + " s (connect timeout 1 s)");
  // Rank 1 has failed now. Only if it failed in that step do the others join it (otherwise the
  // drain would wait for ever, and the checks above have failed already).
  int drain = late && named;
  MPI_Bcast(&drain, 1, MPI_INT, 1, MPI_COMM_WORLD);
  if (drain && !late) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Comm x = MPI_COMM_NULL;
    int n = 0;
    MPI_Comm_size(c, &n);
    std::vector<char> ids(256 * static_cast<std::size_t>(n)), mine(256);
    if (hierarchical) MPI_Iallgather(mine.data(), 256, MPI_CHAR, ids.data(), 256, MPI_CHAR, c, &r);
    else MPI_Comm_idup(c, &x, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    if (x != MPI_COMM_NULL) MPI_Comm_free(&x);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1's MPI drives its pending step here
}


// The last rank reaches split 3 s after the others timed out in its exchange (timeout 1 s; their
// data came to it before their failure notices, so its exchange could end well): it must fail,
// not go on into MPI_Comm_split and wait there for ever (a watchdog ends the job after 30 s).
void late_split() {
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(1);
  const bool late = g_rank == [] { int n = 0; MPI_Comm_size(MPI_COMM_WORLD, &n); return n - 1; }();
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 300 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done) {
      std::fprintf(stderr, "rank %d: FAILED: split still waits 30 s after a late rank's peers failed\n", g_rank);
      std::_Exit(1);
    }
  });
  collx::errc code = collx::errc::internal;
  std::string why;
  double s = 0;
  try {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, o);
    if (late) std::this_thread::sleep_for(std::chrono::seconds(4));
    const auto t0 = std::chrono::steady_clock::now();
    try {
      auto g = collx::split(c, 0, 0);
    } catch (const collx::error& e) {
      code = e.code();
      why = e.what();
    }
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const collx::error& e) {
    why = std::string("connect: ") + e.what();
  }
  done = true;
  watchdog.join();
  check(code == collx::errc::timeout, "a split whose exchange timed out somewhere fails on every rank with timeout (got " +
                                          std::to_string(static_cast<int>(code)) + "): " + why);
  check(s < 5.0, "the split ended in " + std::to_string(s) + " s");
}

// The last rank is stopped (SIGSTOP: a debugger, a paused job) inside a direct all-reduce of
// 800 KB, 200 ms after it began, its sends posted: each is a rendezvous over TCP (passes launch
// Open MPI with `--mca btl self,tcp`), whose data needs the sender to drive MPI. The others call
// 400 ms late and find its first messages waiting: before, a peer then sat in a blocking
// MPI_Mrecv past every timeout; now every peer's call fails within seconds. Rank 0's thread stops
// the rank, and resumes it (SIGCONT) once every other rank's call returned (ranks 1..n-2 tell it
// on MPI_COMM_WORLD) or after 10 s whatever happened, so that a regression fails here, not hangs.
// Only where every rank runs on this machine (pids are sent to kill()).
void stopped_sender() {
  constexpr int returned_tag = 4242;
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  int on_host = 0;
  MPI_Comm_size(host, &on_host);
  MPI_Comm_free(&host);
  if (on_host != n || n < 2) return;
  std::vector<int> pids(static_cast<std::size_t>(n));
  const int pid = static_cast<int>(::getpid());
  MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD);
  const auto stopped_pid = static_cast<pid_t>(pids.back());
  collx::communicator_options o;
  o.timeout = std::chrono::seconds(1);
  collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, o);
  const bool stopped = g_rank == n - 1;
  MPI_Barrier(MPI_COMM_WORLD);
  std::atomic<bool> own_returned{false};
  std::thread stop_and_resume;
  if (g_rank == 0)
    stop_and_resume = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::kill(stopped_pid, SIGSTOP);
      std::vector<MPI_Request> told(static_cast<std::size_t>(n - 2), MPI_REQUEST_NULL);  // ranks 1..n-2
      std::vector<int> sink(told.size());
      for (int r = 1; r < n - 1; ++r)
        MPI_Irecv(&sink[static_cast<std::size_t>(r - 1)], 1, MPI_INT, r, returned_tag, MPI_COMM_WORLD,
                  &told[static_cast<std::size_t>(r - 1)]);
      int all = 0;
      for (int i = 0; i < 1000 && !(all && own_returned); ++i) {
        MPI_Testall(static_cast<int>(told.size()), told.data(), &all, MPI_STATUSES_IGNORE);
        if (!(all && own_returned)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::kill(stopped_pid, SIGCONT);
      if (!all) MPI_Waitall(static_cast<int>(told.size()), told.data(), MPI_STATUSES_IGNORE);  // those still waiting return now
    });
  // Whatever ends this scope, the stopped rank goes on and the thread is joined.
  struct resume_at_exit {
    std::thread& t;
    std::atomic<bool>& own;
    ~resume_at_exit() {
      own = true;
      if (t.joinable()) t.join();
    }
  } resume_guard{stop_and_resume, own_returned};
  if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  std::vector<float> v(200000), out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(g_rank * 3 + static_cast<int>(i % 5));
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string why = "it returned";
  try {
    collx::allreduce<collx::algo::direct>(c, std::span<const float>(v), std::span<float>(out));
  } catch (const collx::error& e) {
    code = e.code();
    why = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_rank == 0) {
    own_returned = true;
  } else if (!stopped) {
    const int one = 1;
    MPI_Send(&one, 1, MPI_INT, 0, returned_tag, MPI_COMM_WORLD);
  }
  if (!stopped) {
    check(code == collx::errc::timeout || code == collx::errc::aborted,
          "a peer stopped with its sends in flight: the call fails (got " + std::to_string(static_cast<int>(code)) + "): " + why);
    check(s < 6.0, "a peer stopped with its sends in flight: rank " + std::to_string(g_rank) + "'s call ended after " +
                       std::to_string(s) + " s (timeout 1 s): " + why);
  }
}

}  // namespace

// Sums every rank's failed checks, prints them on rank 0 ("test_mpi<mode>: ..."), finalizes MPI and
// returns the process's exit status. `late`, when given, is a communicator kept past MPI_Finalize:
// a call on it then must throw collx::error, a rejected call too, and abort() must return, none
// of them aborting the job (any MPI call would), and it may still be destroyed.
int finish(const std::string& mode, collx::communicator* late = nullptr) {
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("test_mpi%s: %d checks per rank, %d failed in total\n", mode.c_str(), g_checks, failures);
  MPI_Finalize();
  if (late) {
    std::vector<int> v(4, g_rank);
    try {
      collx::allreduce(*late, v);
      std::fprintf(stderr, "rank %d: FAILED: an allreduce after MPI_Finalize returned\n", g_rank);
      return 1;
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::transport || std::string(e.what()).find("MPI was finalized") == std::string::npos) {
        std::fprintf(stderr, "rank %d: FAILED: an allreduce after MPI_Finalize: %s\n", g_rank, e.what());
        return 1;
      }
    }
    // Rejected arguments and abort() fail the communicator, which tells the peers over MPI: not now.
    std::vector<int> gathered(4);
    try {
      collx::all_gather_v(*late, std::span<const int>(v.data(), 1), gathered, {1, -1});
      std::fprintf(stderr, "rank %d: FAILED: an all_gather_v with a negative count after MPI_Finalize returned\n", g_rank);
      return 1;
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument) {
        std::fprintf(stderr, "rank %d: FAILED: a rejected call after MPI_Finalize: %s\n", g_rank, e.what());
        return 1;
      }
    }
    late->abort();
  }
  // MPI_Finalize waits for the peers' close messages of the last communicators and frees their
  // duplicates (MPICH with UCX warned of every close message left unreceived).
  if (const std::size_t kept = collx::mpi::closing_duplicates::instance().kept(); kept != 0) {
    std::fprintf(stderr, "rank %d: FAILED: %zu MPI duplicates still kept after MPI_Finalize\n", g_rank, kept);
    return 1;
  }
  return failures == 0 ? 0 : 1;
}

// Rank 1's send of 4 MiB (1 MiB pieces, sent by rendezvous) to rank 0 fails while rank 0 is 3 s
// late: by its own timeout (500 ms), or, with `third_aborts`, by rank 2's abort() 20 ms in (rank 1
// then sends no notice of its own: rank 2's went to every rank). The failed call must wait 2 s for
// its sends (it waited only its timeout), then returns with them unmatched; rank 1 makes the buffer
// unreadable (mprotect, as freeing it would unmap it) and all wait in MPI_Barrier, where MPI drives
// rank 1's sends. Rank 0's recv, which finds the first message (a copy collx owns) at once, must
// fail without posting receives for the later pieces: matched, they make MPI read the buffer (Open
// MPI's single-copy path from rank 0: "Read -1 ... errno = 14", then SIGSEGV; over TCP rank 1's
// MPI would send from it).
void late_receiver_case(bool third_aborts) {
  collx::communicator_options o;
  o.timeout = std::chrono::milliseconds(500);
  const std::size_t bytes = std::size_t{4} << 20;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  check(mem != MAP_FAILED, "mmap");
  if (mem == MAP_FAILED) std::abort();  // (the other ranks would wait in MPI_Barrier)
  const std::span<float> buf(static_cast<float*>(mem), bytes / sizeof(float));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i % 1000);
  const collx::errc want = third_aborts ? collx::errc::aborted : collx::errc::timeout;
  const std::string culprit = third_aborts ? "rank 2" : "rank 1";
  const std::string what = third_aborts ? "a send failed by rank 2's abort()" : "a send that timed out";
  collx::errc code = collx::errc::internal;
  std::string why = "it returned";
  double s = 0;
  {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, o);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (g_rank == 1) collx::send(c, std::span<const float>(buf), 0);
      if (g_rank == 0) {
        std::this_thread::sleep_for(std::chrono::seconds(3));
        collx::recv(c, buf, 1);
      }
      if (g_rank == 2 && third_aborts) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // before rank 1 would query it (50 ms)
        c.abort();
      }
    } catch (const collx::error& e) {
      code = e.code();
      why = e.what();
    }
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (g_rank == 1) ::mprotect(mem, bytes, PROT_NONE);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (g_rank == 1) {
    check(code == want, what + ": rank 1's call fails with " + std::to_string(static_cast<int>(want)) + ": " + why);
    check(s > 2.0, what + ": the failed call waited " + std::to_string(s) + " s: 2 s for its sends after it failed");
  } else if (g_rank == 0) {
    check(code == want && why.find(culprit) != std::string::npos,
          what + ": the late receiver fails with " + culprit + "'s failure: " + why);
  }
  // The failed call's sends stay posted (unmatched) until MPI_Finalize: their memory is kept.
  if (g_rank == 1) ::mprotect(mem, bytes, PROT_READ);
  else ::munmap(mem, bytes);
}

int late_receiver() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  check(n == 3, "late-receiver runs on 3 ranks");
  if (n == 3) {
    // As a program that used a non-blocking collective before: Open MPI progresses otherwise
    // then, and one probe did not find the sender's failure notice (the receiver's single-copy
    // read of the protected buffer crashed 3 runs in 3).
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    late_receiver_case(false);
    late_receiver_case(true);
  }
  return finish(" late-receiver");
}

// Under MPI_THREAD_SERIALIZED only the thread making the calls may call MPI: rank 0's abort() from
// a helper thread, while its main thread computes, is told to the peers when the main thread next
// calls collx or destroys the communicator (1 s later here). Rank 1, waiting in an all-reduce
// with a 20 s timeout, must learn of the abort then, not at its timeout (before: at it). First,
// an *_async call (MPI from the progress thread) is refused there: it ran before, unchecked.
int serialized_abort() {
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(20);
  {  // *_async needs MPI_THREAD_MULTIPLE: refused on every rank, the communicator still usable
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, opt);
    std::vector<float> v(16, 1.0f);
    collx::errc refused = collx::errc::internal;
    std::string why = "it ran";
    try {
      collx::allreduce_async(c, std::span<float>(v)).wait();
    } catch (const collx::error& e) {
      refused = e.code();
      why = e.what();
    }
    check(refused == collx::errc::invalid_argument && why.find("MPI_THREAD_SERIALIZED") != std::string::npos &&
              why.find("needs MPI_THREAD_MULTIPLE") != std::string::npos,
          "an async call under MPI_THREAD_SERIALIZED is refused: " + why);
    collx::allreduce(c, std::span<float>(v));
    check(v[0] == static_cast<float>(c.size()), "the communicator works after the refused async call");
  }
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  {
    collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, opt);
    collx::barrier(c);
    if (g_rank == 0) {
      std::thread helper([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        c.abort();
      });
      std::this_thread::sleep_for(std::chrono::seconds(1));  // computing, no collx call
      helper.join();
    } else {
      std::vector<float> v(16, 1.0f);
      try {
        collx::allreduce(c, std::span<float>(v));
      } catch (const collx::error& e) {
        code = e.code();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      check(code == collx::errc::aborted, "rank 0's abort() reached rank 1 (errc " + std::to_string(static_cast<int>(code)) + ")");
      check(s < 10.0, "rank 0's abort() reached rank 1 in " + std::to_string(s) + " s (timeout 20 s)");
    }
  }
  return finish(" serialized-abort");
}

// Rank 0's COLLX_NODE_ID is unusable: connect_hierarchical fails on every rank at once, naming it,
// instead of the others waiting in the node-id exchange.
int bad_node_id() {
  const auto t0 = std::chrono::steady_clock::now();
  collx::errc code = collx::errc::internal;
  std::string what;
  try {
    collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
  } catch (const collx::error& e) {
    code = e.code();
    what = e.what();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(code == collx::errc::invalid_argument && what.find("rank 0 has no usable node id") != std::string::npos &&
            what.find("COLLX_NODE_ID") != std::string::npos,
        "a bad node id on rank 0 fails every rank with invalid_argument naming it: " + what);
  check(s < 10.0, "the bad node id seen in " + std::to_string(s) + " s");
  return finish(" bad-node-id");
}

// 4 MiB in 8-byte pieces: one MPI_Isend per piece made half a million sends in flight, and MPICH
// aborted the process ("Assertion failed in mpir_request.h: req != NULL"; Open MPI took a minute
// for 8 MiB). A message is now cut into at most detail::max_pieces pieces.
void tiny_pieces() {
  namespace d = collx::mpi::detail;
  const std::uint64_t big = std::uint64_t{4} << 20;
  check(d::later_pieces(big, d::piece_for(8, 8, big)) + 1 <= d::max_pieces, "4 MiB in 8-byte pieces: at most max_pieces");
  check(d::piece_for(8, 8, 4096) == 8 && d::piece_for(5001, 8, big) == 5000, "piece_bytes kept where the count allows");
  check(d::piece_for(8, 12, big) % 12 == 0 && d::piece_for(1, 3, 2) == 3, "pieces of whole elements");
  // A message sent while many sends are posted (a call to many peers) gets fewer, larger pieces.
  const std::uint64_t block = 65536;  // 8192 pieces of 8 bytes
  check(d::piece_for(8, 8, block, 0) == 8 && d::piece_for(8, 8, block, d::max_sends_in_flight - d::max_pieces) == 8,
        "no larger pieces while the sends in flight leave room");
  const std::size_t squeezed = d::piece_for(8, 8, block, d::max_sends_in_flight - 384);
  check(squeezed % 8 == 0 && d::later_pieces(block, squeezed) + 1 <= 384 && squeezed < 256,
        "pieces just large enough for the room left");
  check(d::piece_for(8, 8, block, d::max_sends_in_flight) == block / d::min_pieces &&
            d::piece_for(8, 8, block, 10 * d::max_sends_in_flight) == block / d::min_pieces,
        "min_pieces once the room is used up");
  collx::mpi::mpi_options tiny;
  tiny.piece_bytes = 8;
  collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, {}, tiny);
  const int n = c.size(), next = (g_rank + 1) % n, prev = (g_rank + n - 1) % n;
  const std::size_t count = (big / sizeof(double)) + 3;
  std::vector<double> out(count), in(count, -1.0);
  for (std::size_t i = 0; i < count; ++i) out[i] = g_rank * 1e7 + static_cast<double>(i);
  collx::send_recv(c, std::span<const double>(out), next, std::span<double>(in), prev);
  bool same = true;
  for (std::size_t i = 0; i < count && same; ++i) same = in[i] == prev * 1e7 + static_cast<double>(i);
  check(same, "send_recv of 4 MiB in 8-byte pieces");
  // The all-reduce on 512 KiB (+3): its messages to each peer need more than max_pieces pieces, as
  // 4 MiB's did, and with 4 ranks MPICH took 13-26 s for 4 MiB, 3-4 s for this.
  const std::size_t reduced = (std::size_t{512} << 10) / sizeof(double) + 3;
  collx::allreduce<collx::algo::direct>(c, std::span<double>(out).first(reduced));
  same = true;
  for (std::size_t i = 0; i < reduced && same; ++i) same = out[i] == 1e7 * (n * (n - 1) / 2) + n * static_cast<double>(i);
  for (std::size_t i = reduced; i < count && same; ++i) same = out[i] == g_rank * 1e7 + static_cast<double>(i);
  check(same, "direct all-reduce of 512 KiB in 8-byte pieces, the elements past it untouched");
  // All-to-all posts every peer's message at once: with 4 ranks the third is sent after 16384
  // pieces and goes in 16 (the receiver takes each message's piece size from its header).
  const std::size_t per = block / sizeof(double);
  std::vector<double> send(per * static_cast<std::size_t>(n)), recv(send.size(), -1.0);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = g_rank * 1e7 + static_cast<double>(i);
  collx::all_to_all<collx::algo::direct>(c, std::span<const double>(send), std::span<double>(recv));
  same = true;
  for (int p = 0; p < n && same; ++p)
    for (std::size_t i = 0; i < per && same; ++i)
      same = recv[static_cast<std::size_t>(p) * per + i] == p * 1e7 + static_cast<double>(static_cast<std::size_t>(g_rank) * per + i);
  check(same, "direct all-to-all of 64 KiB blocks in 8-byte pieces, the last peers' in larger ones");
}

// The text of the invalid_argument that `connect_fn` throws ("returned" when it throws nothing,
// "code N" for another error code).
template <class F>
std::string invalid_argument_of(F connect_fn) {
  try {
    connect_fn();
  } catch (const collx::error& e) {
    return e.code() == collx::errc::invalid_argument ? e.what() : "code " + std::to_string(static_cast<int>(e.code()));
  }
  return "returned";
}

// connect and connect_hierarchical both refuse `comm` with a message that contains `why`.
void both_connects_refuse(MPI_Comm comm, const std::string& why, const std::string& label) {
  for (const bool hierarchical : {false, true}) {
    const std::string what = invalid_argument_of([&] {
      if (hierarchical) (void)collx::mpi::connect_hierarchical(comm);
      else (void)collx::mpi::connect(comm);
    });
    check(what.find(why) != std::string::npos,
          std::string(hierarchical ? "connect_hierarchical" : "connect") + " on " + label + ": " + what);
  }
}

// An *_async call still running when its rank calls MPI_Finalize (a porting mistake: no wait()
// first): MPI_Finalize fails it, and wait() throws collx::error saying so, where the progress
// thread used to go on calling MPI during and after MPI_Finalize (both MPIs crashed the process).
// Rank 1 makes no call, so that rank 0's calls (one on each of two communicators, each on its own
// progress thread) are surely waiting at MPI_Finalize; rank 1's idle communicators are failed
// quietly (a call after MPI_Finalize says MPI was finalized). Every rank checks on its own: MPI is
// gone for a sum of the failures.
int async_at_finalize() {
  collx::communicator_options opt;
  opt.timeout = std::chrono::seconds(30);
  collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, opt);
  collx::communicator other = collx::mpi::connect(MPI_COMM_WORLD, opt);
  std::vector<double> v(1 << 16, 1.0), w(1 << 10, 2.0);
  std::optional<collx::request> pending, pending_other;
  if (g_rank == 0) {
    pending.emplace(collx::allreduce_async(c, std::span<double>(v)));
    pending_other.emplace(collx::allreduce_async(other, std::span<double>(w)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Finalize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status = 0;
  const auto expect_error = [&](const std::function<void()>& call, const std::string& text, const char* what) {
    try {
      call();
      std::fprintf(stderr, "rank %d: FAILED: %s returned\n", g_rank, what);
      status = 1;
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::transport || std::string(e.what()).find(text) == std::string::npos) {
        std::fprintf(stderr, "rank %d: FAILED: %s: %s\n", g_rank, what, e.what());
        status = 1;
      }
    }
  };
  if (pending) {
    expect_error([&] { pending->wait(); }, "MPI_Finalize was called during a call on this communicator",
                 "wait() on the async call MPI_Finalize interrupted");
    expect_error([&] { pending_other->wait(); }, "MPI_Finalize was called during a call on this communicator",
                 "wait() on the other communicator's async call");
    if (s > 10.0) {
      std::fprintf(stderr, "rank %d: FAILED: MPI_Finalize took %.1f s with the async call running\n", g_rank, s);
      status = 1;
    }
  } else {
    expect_error([&] { collx::barrier(c); }, "MPI was finalized while this communicator was alive",
                 "a barrier after MPI_Finalize");
  }
  if (g_rank == 0 && status == 0) std::printf("test_mpi async-at-finalize: MPI_Finalize took %.2f s, wait() threw\n", s);
  return status;
}

int main(int argc, char** argv) {
  const bool serialized = argc > 1 && std::string(argv[1]) == "serialized-abort";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  if (serialized) return serialized_abort();
  if (argc > 1 && std::string(argv[1]) == "bad-node-id") return bad_node_id();
  if (argc > 1 && std::string(argv[1]) == "async-at-finalize") return async_at_finalize();
  if (argc > 1 && std::string(argv[1]) == "late-receiver") return late_receiver();
  const int expected_nodes = argc > 1 ? std::atoi(argv[1]) : 0;
  std::optional<collx::communicator> late;
  try {
    check(provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE provided");
    // MPI_COMM_NULL (a rank in no group of an MPI_Comm_split): an error, not MPI aborting the job.
    both_connects_refuse(MPI_COMM_NULL, "the MPI communicator is MPI_COMM_NULL", "MPI_COMM_NULL");
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    // An intercommunicator (the even and the odd ranks): an error, before any collective (its
    // MPI_Allgather would fill the other group's sizes into this group's buffer).
    if (world >= 2) {
      MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
      MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
      MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, g_rank % 2 == 0 ? 1 : 0, 77, &inter);
      both_connects_refuse(inter, "the MPI communicator is an intercommunicator", "an intercommunicator");
      MPI_Comm_free(&inter);
      MPI_Comm_free(&half);
    }
    // Ranks that connect with different functions (or intra_node choices) run MPI collectives that
    // do not match, with no timeout: they must all get invalid_argument instead of waiting there.
    // "ranks 0, 2" / "rank 1": the ranks of one parity, as the message lists them.
    const auto ranks_of_parity = [world](int parity) {
      std::string s;
      int n = 0;
      for (int r = parity; r < world; r += 2) s.append(n++ ? ", " : "").append(std::to_string(r));
      return (n == 1 ? "rank " : "ranks ") + s;
    };
    for (const bool intra_differs : {false, true}) {
      if (world < 2) break;
      const std::string what = invalid_argument_of([&] {
        namespace cm = collx::mpi;
        if (g_rank % 2 == 0) (void)cm::connect_hierarchical(MPI_COMM_WORLD);
        else if (intra_differs) (void)cm::connect_hierarchical(MPI_COMM_WORLD, {}, cm::intra_node::mpi);
        else (void)cm::connect(MPI_COMM_WORLD);
      });
      const std::string odd = intra_differs ? "connect_hierarchical (intra_node::mpi)" : "connect";
      const std::string want = "the ranks did not all call the same function: " + ranks_of_parity(0) +
                               " called connect_hierarchical (intra_node::shm); " + ranks_of_parity(1) + " called " + odd +
                               "; every rank";
      check(what.find(want) != std::string::npos, "ranks connecting with different functions: " + what + " (want: " + want + ")");
    }
    {
      collx::mpi::mpi_options small;
      small.piece_bytes = 5000;  // many pieces per message, and pieces that are not powers of two
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, {}, small);
      check(c.get_transport().name() == "mpi", "transport name");
      transport_only(c);
      over_aligned(c);
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      hierarchical(c, expected_nodes);
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      const int failed = split_checks::run(c);
      check(failed == 0, "collx::split over MPI: " + std::to_string(failed) + " checks failed (above)");
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      const int failed = p2p_checks::run(c);
      check(failed == 0, "collx::send_recv over MPI: " + std::to_string(failed) + " checks failed (above)");
    }
    // The cases of docs/edge-cases.md, each rank checking its own results (edge_cases_per_rank.hpp):
    // over MPI with ring, tree and direct forced and automatic's choice, then hierarchically.
    for (const auto a : {collx::algorithm::ring, collx::algorithm::tree, collx::algorithm::direct}) {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD, ref::forcing(a));
      edge_cases<collx::algo::automatic>(c, std::string("MPI, ") + std::string(collx::algorithm_name(a)));
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      edge_cases<collx::algo::automatic>(c, "MPI, automatic");
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      edge_cases<collx::algo::hierarchical<>>(c, "hierarchical");
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      mismatch(c);
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      mismatch(c);
    }
    duplicates_freed("a communicator that failed on every rank");
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      p2p_against_collective(c);
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      recv_against_collective(c);
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      slow_but_correct(c);
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      slow_but_correct(c);
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      silent_mismatch<collx::algo::direct>(c, std::chrono::milliseconds(0));
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      silent_mismatch<collx::algo::tree>(c, std::chrono::milliseconds(300));
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      silent_mismatch<collx::algo::ring>(c, std::chrono::milliseconds(0), false);
    }
    {
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      abort_wakes(c);
    }
    timeout_chain_names_the_late_rank();
    timeout_names_a_peer_outside_collx();
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      rejection_reaches_levels(c);
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      hierarchical_root_disagreement(c, 64);
    }
    {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD);
      hierarchical_root_disagreement(c, std::size_t{1} << 20);
    }
    for (const auto intra : {collx::mpi::intra_node::shm, collx::mpi::intra_node::mpi}) {
      collx::communicator c = collx::mpi::connect_hierarchical(MPI_COMM_WORLD, {}, intra);
      hierarchical_root_disagreement_then_hierarchical_call(c);
    }
    if (expected_nodes == 2) level_failure_names_world_ranks();  // 2 nodes x 2 ranks
    hierarchical_count_zero();
    tiny_pieces();
    failed_call_releases_buffer();
    duplicates_freed("the failed calls above (a communicator that failed on some ranks only, too)");
    stale_data_not_drained();
    left_by_exception();
    left_quietly(false);
    left_quietly(true);
    closed_after_receiving();
    late_split();
    connect_without_every_rank(false);
    connect_without_every_rank(true);
    stopped_sender();
    {  // a healthy communicator destroyed just before MPI_Finalize: its duplicate is freed there (finish)
      collx::communicator c = collx::mpi::connect(MPI_COMM_WORLD);
      collx::barrier(c);
    }
    late.emplace(collx::mpi::connect(MPI_COMM_WORLD));  // used after MPI_Finalize, by mistake (finish)
    collx::barrier(*late);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected exception: %s\n", g_rank, e.what());
    ++g_failures;
  }
  return finish("", late ? &*late : nullptr);
}
