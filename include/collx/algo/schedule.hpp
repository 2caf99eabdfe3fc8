/// @file algo/schedule.hpp
/// Schedules: what each rank does, as plain data. An algorithm (ring.hpp, tree.hpp, direct.hpp)
/// turns (collective, world size, rank, block layout) into an ordered list of steps; a transport's
/// executor carries the steps out; a symbolic checker in the tests proves them.
///
/// Execution model (every executor keeps it):
/// - `send` posts a send of a region and returns at once; the receiver may read the region any time
///   until the sender's next `wait_sends` returns, so the sender does not write it before then.
/// - `recv` / `recv_reduce` block until the matching send arrives. Messages between an ordered pair
///   of ranks match in order (the k-th send from a to b meets the k-th receive at b from a).
/// - `wait_sends` blocks until every send this rank posted has been consumed.
/// Element types follow the buffers: `input` and `output` hold the user's element type T, `scratch`
/// holds the reduction's accumulator type (fp32 for narrow floats, T otherwise). Data moving into
/// scratch is widened; a combined value or scratch data written to `output` is finalised (rounded,
/// divided by the world size for avg); T data copied to `output` is copied bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

/// `constexpr` on the schedule generators (a schedule can be built in a constant expression)
/// where std::vector is constexpr: not in libstdc++'s debug mode (_GLIBCXX_DEBUG), whose vector is
/// not (GCC 12), so that a program built with it compiles. `inline` there (constexpr implies it):
/// the generators are defined in headers.
#if defined(__cpp_lib_constexpr_vector) && __cpp_lib_constexpr_vector >= 201907L && !defined(_GLIBCXX_DEBUG)
#define COLLX_SCHEDULE_CONSTEXPR constexpr
#define COLLX_CONSTEXPR_SCHEDULES 1
#else
#define COLLX_SCHEDULE_CONSTEXPR inline
#define COLLX_CONSTEXPR_SCHEDULES 0
#endif

namespace collx {
inline namespace v0 {

/// The collectives collx implements.
enum class collective : std::uint8_t {
  allreduce,       ///< collx::allreduce
  reduce_scatter,  ///< collx::reduce_scatter and reduce_scatter_v
  all_gather,      ///< collx::all_gather and all_gather_v
  broadcast,       ///< collx::broadcast
  reduce,          ///< collx::reduce (to a root)
  all_to_all,      ///< collx::all_to_all and all_to_all_v
  barrier,         ///< collx::barrier
  send_recv,       ///< point-to-point: collx::send, recv and send_recv
};

/// Name of a collective as used in messages, benchmarks and environment variables.
constexpr std::string_view collective_name(collective c) noexcept {
  switch (c) {
    case collective::allreduce: return "allreduce";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::all_gather: return "all_gather";
    case collective::broadcast: return "broadcast";
    case collective::reduce: return "reduce";
    case collective::all_to_all: return "all_to_all";
    case collective::barrier: return "barrier";
    case collective::send_recv: return "send_recv";
  }
  return "?";
}

/// A concrete algorithm (what algo::automatic resolves to).
enum class algorithm : std::uint8_t {
  ring,    ///< algo::ring
  tree,    ///< algo::tree
  direct,  ///< algo::direct
};

/// Name of an algorithm ("ring", "tree", "direct").
constexpr std::string_view algorithm_name(algorithm a) noexcept {
  switch (a) {
    case algorithm::ring: return "ring";
    case algorithm::tree: return "tree";
    case algorithm::direct: return "direct";
  }
  return "?";
}

namespace schedule {

/// Which of a rank's buffers a region lives in.
enum class buffer : std::uint8_t {
  input,    ///< the user's send buffer (element type T; never written)
  output,   ///< the user's receive buffer (element type T)
  scratch,  ///< collx's per-communicator scratch (accumulator type)
};

/// A range of elements of one buffer. Offsets and counts are in elements of that buffer's type.
struct region {
  buffer buf = buffer::input;  ///< the buffer
  std::size_t offset = 0;      ///< first element, in elements from the buffer's start
  std::size_t count = 0;       ///< elements
  /// Same buffer, offset and count.
  constexpr bool operator==(const region&) const = default;
};

/// What a step does.
enum class step_kind : std::uint8_t {
  send,         ///< post a send of `a` to `peer`
  recv,         ///< receive `dst.count` elements from `peer` into `dst` (converted as the buffers say)
  recv_reduce,  ///< receive x from `peer`; dst = incoming_first ? op(x, a) : op(a, x)
  copy,         ///< dst = a (local; a no-op when a and dst are the same memory)
  reduce,       ///< dst = op(a, b) (local)
  wait_sends,   ///< wait until every posted send has been consumed
};

/// One step of one rank's schedule.
struct step {
  step_kind kind = step_kind::wait_sends;  ///< what the step does (which fields it reads)
  int peer = -1;               ///< the other rank (send, recv, recv_reduce)
  region a{};                  ///< source (send, copy) or left local operand (recv_reduce, reduce)
  region b{};                  ///< right local operand (reduce)
  region dst{};                ///< destination (recv, recv_reduce, copy, reduce)
  buffer wire = buffer::input; ///< recv/recv_reduce: the buffer the peer sends from (its type is the wire type)
  bool incoming_first = true;  ///< recv_reduce: the received value is the left operand
  /// Equal in every field (also the ones this kind does not use).
  constexpr bool operator==(const step&) const = default;
};

/// Where the block that belongs to rank c lives, in elements. Which fields matter depends on the
/// collective: allreduce/reduce/broadcast blocks are chunks of one vector (in == out == tmp offset
/// within the call's segment); reduce_scatter reads every block of `input` and writes only the rank's
/// own block to `output`; all_gather reads the rank's own block of `input` and writes every block of
/// `output`; all_to_all sends `count` elements from `in` to rank c and receives `recv_count` elements
/// from rank c into `out`.
struct block {
  std::size_t in = 0,   ///< offset of the block in `input`, elements
      out = 0,          ///< offset of the block in `output`, elements
      tmp = 0;          ///< offset of the block in `scratch`, elements
  std::size_t count = 0;       ///< elements in the block (all_to_all: sent to rank c)
  std::size_t recv_count = 0;  ///< all_to_all: elements received from rank c
  /// Equal in every field.
  friend constexpr bool operator==(const block&, const block&) = default;
};

/// Everything an algorithm needs to build one rank's schedule.
struct params {
  collective coll = collective::allreduce;  ///< the collective
  int world_size = 1;                       ///< ranks in the communicator
  int rank = 0;                             ///< the rank whose schedule is built, in [0, world_size)
  int root = 0;                  ///< broadcast and reduce
  bool one_shot = true;          ///< direct allreduce: one-shot (true) or two-shot (false)
  std::size_t slices = 1;        ///< ring broadcast: pipeline slices of the vector
  bool keep_empty = false;       ///< exchange zero-element messages too (all_to_all_v: so that
                                 ///< per-pair counts that disagree are caught, not waited on)
  std::vector<block> blocks;     ///< world_size blocks (see block)
  /// algo::ring: the ranks in ring order, each sending to the next (a permutation of [0, n));
  /// empty: 0 -> 1 -> ... -> n-1 -> 0. From communicator_options::ring_order, e.g. a ring that
  /// topo::search_rings found over the machine's links.
  std::vector<int> ring;
  /// Equal in every field, blocks and ring included.
  friend COLLX_SCHEDULE_CONSTEXPR bool operator==(const params&, const params&) = default;
};

/// One rank's schedule.
using steps = std::vector<step>;

/// Balanced split of `count` elements into `parts` chunks: chunk i starts at chunk_begin(i).
/// Every chunk has count/parts or count/parts + 1 elements; the larger ones come first.
constexpr std::size_t chunk_begin(std::size_t count, std::size_t parts, std::size_t i) noexcept {
  const std::size_t q = count / parts, r = count % parts;
  return q * i + (i < r ? i : r);
}

/// Blocks for a vector of `count` elements cut into world_size balanced chunks (allreduce, reduce,
/// broadcast); offsets start at 0 in every buffer. `b` becomes world_size blocks.
COLLX_SCHEDULE_CONSTEXPR void vector_blocks_into(std::vector<block>& b, std::size_t count, int world_size) {
  b.resize(static_cast<std::size_t>(world_size));  // reuses the caller's storage: no allocation per call
  // chunk_begin's split, with its two divisions done once (this runs on every small collective).
  const std::size_t parts = b.size(), q = count / parts, r = count % parts;
  std::size_t lo = 0;
  for (std::size_t c = 0; c < parts; ++c) {
    const std::size_t len = q + (c < r ? 1 : 0);
    b[c] = {lo, lo, lo, len, len};
    lo += len;
  }
}
/// vector_blocks_into, returning a new vector.
COLLX_SCHEDULE_CONSTEXPR std::vector<block> vector_blocks(std::size_t count, int world_size) {
  std::vector<block> b;
  vector_blocks_into(b, count, world_size);
  return b;
}

/// Total elements of all blocks.
COLLX_SCHEDULE_CONSTEXPR std::size_t total_count(const params& p) {
  std::size_t t = 0;
  for (const block& b : p.blocks) t += b.count;
  return t;
}

/// The whole vector in buffer `buf`: blocks are contiguous in rank order starting at block 0's offset.
COLLX_SCHEDULE_CONSTEXPR region whole(const params& p, buffer buf) {
  const block& b0 = p.blocks.front();
  return {buf, buf == buffer::input ? b0.in : buf == buffer::output ? b0.out : b0.tmp, total_count(p)};
}

/// Appends steps to a schedule, dropping transfers of zero elements (both ends of a transfer see
/// the same count, so both drop it).
struct builder {
  steps out;                ///< the schedule built so far
  bool keep_empty = false;  ///< keep sends and recvs of zero elements (params::keep_empty)
  // Room for a small world's schedule at once: one allocation per call instead of one per doubling
  // (the schedule is built per call, and small calls are latency-bound).
  /// An empty schedule, with room for 16 steps reserved.
  COLLX_SCHEDULE_CONSTEXPR builder() { out.reserve(16); }
  /// Appends a send of region `a` (counts in elements) to `peer`; dropped if `a` is empty, unless
  /// keep_empty.
  COLLX_SCHEDULE_CONSTEXPR void send(int peer, region a) {
    if (a.count || keep_empty) out.push_back({step_kind::send, peer, a, {}, {}, buffer::input, true});
  }
  /// Appends a receive from `peer` into `dst`, whose sender reads buffer `wire`; dropped if `dst`
  /// is empty, unless keep_empty.
  COLLX_SCHEDULE_CONSTEXPR void recv(int peer, buffer wire, region dst) {
    if (dst.count || keep_empty) out.push_back({step_kind::recv, peer, {}, {}, dst, wire, true});
  }
  /// Appends a receive of x from `peer` (sent from its buffer `wire`) with dst = incoming_first ?
  /// op(x, a) : op(a, x); dropped if `dst` is empty, keep_empty or not.
  COLLX_SCHEDULE_CONSTEXPR void recv_reduce(int peer, buffer wire, region a, region dst, bool incoming_first) {
    if (dst.count) out.push_back({step_kind::recv_reduce, peer, a, {}, dst, wire, incoming_first});
  }
  /// Appends dst = a (local); dropped if `dst` is empty or `a` == `dst`.
  COLLX_SCHEDULE_CONSTEXPR void copy(region a, region dst) {
    if (dst.count && !(a == dst)) out.push_back({step_kind::copy, -1, a, {}, dst, buffer::input, true});
  }
  /// Appends dst = op(a, b) (local); dropped if `dst` is empty.
  COLLX_SCHEDULE_CONSTEXPR void reduce(region a, region b, region dst) {
    if (dst.count) out.push_back({step_kind::reduce, -1, a, b, dst, buffer::input, true});
  }
  /// Appends a wait for every posted send; dropped if no send was appended since the last wait.
  COLLX_SCHEDULE_CONSTEXPR void wait_sends() {
    bool pending = false;  // only needed when a send was posted since the last wait
    for (auto it = out.rbegin(); it != out.rend() && it->kind != step_kind::wait_sends; ++it)
      pending |= it->kind == step_kind::send;
    if (pending) out.push_back({step_kind::wait_sends, -1, {}, {}, {}, buffer::input, true});
  }
};

/// (r + k) mod n for any integer k.
constexpr int mod(long long r, int n) noexcept { return static_cast<int>(((r % n) + n) % n); }

}  // namespace schedule
}  // namespace v0
}  // namespace collx
