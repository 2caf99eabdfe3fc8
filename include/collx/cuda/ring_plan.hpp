/// @file cuda/ring_plan.hpp
/// The host-side decisions of collx's ring collectives on device memory (gpu::all_reduce,
/// reduce_scatter and all_gather with algo::ring; ring_kernel in cuda/device_collectives.cuh), in
/// plain C++ so they are unit-tested without a GPU: the ring order, how a call is cut into chunks
/// and pieces, and what each step of a chunk does.
///
/// The ring (Patarasuk & Yuan, JPDC 2009; NCCL's ring) over the staging of cuda/device_plan.hpp:
/// a chunk of the call is cut into world pieces, one per ring position. In step s the rank at
/// position k reads, from its ring predecessor's staging slot, the piece the predecessor staged in
/// step s - 1, combines it with its own input, and stages the result in its own slot for its
/// successor; then it meets its two ring neighbours at a barrier (every rank at a call's first
/// epoch). Each rank so reads staging from one peer only, 2 (world - 1) / world of the vector per
/// all-reduce (the bandwidth-optimal amount; for half and bfloat16 the reduce-scatter half moves
/// fp32 partials, 3 (world - 1) / world of the vector's bytes), over the one link to its
/// predecessor, so a ring order that follows NVLink (topo::device_rings) keeps the bulk off
/// the slow pairs of machines whose GPUs are not all directly connected. (Flags go to every rank at
/// a call's first barrier, then to the ring neighbours only; the slots are where the communicator
/// put them: device_communicator::memory.)
///
/// Channels (NCCL's channels): a call may run several rings at once, each over its own blocks and
/// its own part of the staging slot, carrying its own contiguous part of the vector (all_reduce) or
/// of every rank's block (reduce_scatter, all_gather): plan_ring_call. Rings over different links
/// (topo::device_rings: a DGX-1's six NVLink rings) add up their links' bandwidth; on NVSwitch one
/// ring already reaches every link, and the blocks of one channel fill the GPU.
///
/// Order of combination: piece k is folded along its channel's ring starting at position k + 1,
/// op(...op(op(x_{k+1}, x_{k+2}), x_{k+3})..., x_k) (positions mod world), as collx's host ring
/// (algo/ring.hpp) folds its blocks: a commutative op is needed; for a given (world size, count,
/// element type, staging size, rings) the bits are the same on every rank and every run.
/// Partial results travel in the accumulator type (fp32 for half and bfloat16 under built-in ops).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <collx/cuda/device_plan.hpp>
#include <collx/detail/host_device.hpp>
#include <collx/detail/ring_order_check.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// Which collective a ring call runs.
enum class ring_phase : std::uint8_t {
  all_reduce,      ///< reduce-scatter then all-gather around the ring: 2 (world - 1) steps per chunk
  reduce_scatter,  ///< the reduce-scatter half: world - 1 steps per chunk
  all_gather,      ///< the all-gather half: world - 1 steps per chunk
};

/// A ring order: order[k] is the rank at ring position k (k < world); the rest unused.
struct ring_order {
  int order[max_device_world] = {};  ///< rank at each position
  int world = 0;                     ///< ranks in the ring

  /// The rank order 0, 1, ..., world - 1.
  static ring_order identity(int world) noexcept {
    ring_order r;
    r.world = world;
    for (int k = 0; k < world; ++k) r.order[k] = k;
    return r;
  }
  /// The position of `rank` (-1 when absent).
  COLLX_HOST_DEVICE constexpr int position_of(int rank) const noexcept {
    for (int k = 0; k < world; ++k)
      if (order[k] == rank) return k;
    return -1;
  }
  /// The rank at position k (any integer, taken mod world).
  COLLX_HOST_DEVICE constexpr int at(int k) const noexcept { return order[((k % world) + world) % world]; }
};

/// Checks that `ranks` is a permutation of 0 .. world - 1 (empty: the rank order) and returns it.
/// @throws collx::error (errc::invalid_argument) naming the first rank that is missing, repeated or
///         out of range, or when world is outside [1, max_device_world].
inline ring_order make_ring_order(const std::vector<int>& ranks, int world) {
  if (world < 1 || world > max_device_world)
    COLLX_THROW(errc::invalid_argument, "gpu: ring order for a world of " + std::to_string(world) + " ranks (1 to " +
                                            std::to_string(max_device_world) + ")");
  if (ranks.empty()) return ring_order::identity(world);
  if (const std::string why = detail::ring_order_problem(ranks, world); !why.empty())
    COLLX_THROW(errc::invalid_argument, "gpu: ring order: " + why);
  ring_order r;
  r.world = world;
  for (int k = 0; k < world; ++k) r.order[k] = ranks[static_cast<std::size_t>(k)];
  return r;
}

/// The device ring when neither the user names one (device_options::rings empty) nor the
/// machine's wiring gives one (device_options::discover_wiring, topo::device_wiring, which also
/// considers this ring): the rank order if
/// each of its hops joins two ranks whose GPUs reach each other both ways (`reach[a]` bit b: rank
/// a's GPU reads and writes rank b's device memory -- the same GPU or peer access, as
/// choose_workspace_memory takes it), else the first ring, in depth-first order from rank 0 trying
/// lower ranks first, whose every hop does; the rank order again when no such ring exists or the
/// search gives up after `max_steps` extensions. So where only some GPUs are peers (a DGX-1 across
/// its sockets, where peer access follows NVLink) the ring keeps every hop off host memory without
/// a topology file; topo::device_rings, which reads link speeds, can still do better. The
/// same reach gives the same ring on every rank.
/// Precondition: reach.size() >= world, 1 <= world <= max_device_world.
inline ring_order ring_through_reach(const std::vector<std::uint64_t>& reach, int world, long max_steps = 100000) {
  const ring_order rank_order = ring_order::identity(world);
  const auto reach_both = [&](int a, int b) {
    return ((reach[static_cast<std::size_t>(a)] >> b) & 1u) != 0 && ((reach[static_cast<std::size_t>(b)] >> a) & 1u) != 0;
  };
  bool all = true;
  for (int k = 0; k < world && all; ++k) all = reach_both(k, (k + 1) % world);
  if (all || world < 3) return rank_order;
  struct search {
    const decltype(reach_both)& peers;
    int world;
    long steps_left;
    int path[max_device_world] = {};
    bool extend(int depth, std::uint32_t used) {  // path[0 .. depth) is a chain of peers
      if (depth == world) return peers(path[world - 1], path[0]);
      for (int q = 1; q < world; ++q) {
        if (((used >> q) & 1u) != 0 || !peers(path[depth - 1], q)) continue;
        if (--steps_left < 0) return false;
        path[depth] = q;
        if (extend(depth + 1, used | (1u << q))) return true;
      }
      return false;
    }
  } s{reach_both, world, max_steps};
  if (!s.extend(1, 1u)) return rank_order;
  ring_order r;
  r.world = world;
  for (int k = 0; k < world; ++k) r.order[k] = s.path[k];
  return r;
}

/// Most channels a device ring call runs (device_options::rings): a DGX-1's six NVLink rings, with
/// room.
inline constexpr int max_device_channels = 8;

/// The rings of a device ring call's channels: channel c runs around ring[c] (c < count), every
/// ring over the same ranks.
struct ring_channels {
  ring_order ring[max_device_channels] = {};  ///< each channel's ring
  int count = 0;                              ///< channels, 1 .. max_device_channels

  /// One channel around `r`.
  static ring_channels single(const ring_order& r) noexcept {
    ring_channels c;
    c.ring[0] = r;
    c.count = 1;
    return c;
  }
  /// The rings as lists of ranks (device_options::rings' form).
  std::vector<std::vector<int>> lists() const {
    std::vector<std::vector<int>> out;
    for (int c = 0; c < count; ++c) out.emplace_back(ring[c].order, ring[c].order + ring[c].world);
    return out;
  }
};

/// Checks every ring of `rings` (each a permutation of 0 .. world - 1, as make_ring_order checks
/// it; any rotation; rings may repeat, giving more channels over the same links) and returns them
/// as channels; no rings: one channel in the rank order.
/// @throws collx::error (errc::invalid_argument) for more than max_device_channels rings, an empty
///         ring, a ring make_ring_order rejects (naming the channel), or world outside
///         [1, max_device_world].
inline ring_channels make_ring_channels(const std::vector<std::vector<int>>& rings, int world) {
  if (rings.empty()) return ring_channels::single(make_ring_order({}, world));
  if (rings.size() > static_cast<std::size_t>(max_device_channels))
    COLLX_THROW(errc::invalid_argument, "gpu: " + std::to_string(rings.size()) + " rings (at most " +
                                            std::to_string(max_device_channels) + " channels)");
  ring_channels c;
  for (const std::vector<int>& r : rings) {
    const std::string why = r.empty() ? " is empty" : detail::ring_order_problem(r, world);
    if (!why.empty())
      COLLX_THROW(errc::invalid_argument, "gpu: the ring of channel " + std::to_string(c.count) + (r.empty() ? why : ": " + why));
    c.ring[c.count++] = make_ring_order(r, world);
  }
  return c;
}

/// Where a piece of a call lies: `offset` elements into the buffer, `length` elements.
struct piece_span {
  std::size_t offset = 0;  ///< first element
  std::size_t length = 0;  ///< elements (0 for an empty piece)
};

/// What the rank at one ring position does in one step of a chunk (ring_plan::step).
struct ring_step {
  int piece = 0;            ///< ring position whose piece this step moves
  bool read_prev = false;   ///< reads what the predecessor staged in the previous step
  bool read_input = false;  ///< reads this rank's own input of the piece
  bool partial = false;     ///< the staged result is a partial fold (accumulator type), not a final element
  bool write_output = false;  ///< writes the piece's final elements to this rank's output
  bool stage = false;       ///< stages the result for the successor (followed by a barrier)
};

/// How one channel of a ring call moves (a call of one channel: the whole call): chunks of `world`
/// pieces, `steps()` ring steps per chunk, each step staging one piece per rank; blocks split every
/// piece alike (the same slot offsets in every step and chunk, as chunk_block_range keeps them).
struct ring_plan {
  ring_phase phase = ring_phase::all_reduce;  ///< the collective
  ring_order ring{};       ///< the channel's ring
  int position = 0;        ///< this rank's ring position
  int prev = 0;            ///< the rank before this one (whose slot it reads)
  int next = 0;            ///< the rank after this one (which reads this rank's slot)
  /// The channel's elements: all_reduce of the vector, reduce_scatter / all_gather of each rank's
  /// block, from `offset` on.
  std::size_t count = 0;
  std::size_t offset = 0;  ///< the channel's first element, in the vector or in each rank's block
  /// reduce_scatter / all_gather: elements of a rank's whole block (the call's count; blocks lie
  /// at rank x stride); all_reduce: unused.
  std::size_t stride = 0;
  std::size_t slot_offset = 0;  ///< bytes into each staging slot where the channel's part begins
  unsigned first_block = 0;     ///< the launch's block index of the channel's block 0
  std::size_t piece = 0;   ///< elements per piece of a full chunk (a multiple of vector; fills the channel's part of a slot)
  std::size_t chunks = 0;  ///< chunks of the channel (0 when count is 0)
  unsigned blocks = 0;     ///< thread blocks of the channel
  std::size_t vector = 1;  ///< elements per vector
  /// Bytes per element of the slot: the larger of the element and its accumulator (a slot holds
  /// partial folds in one step and elements in another).
  std::size_t cell_bytes = 0;

  /// Ring steps (barriers) per chunk; a chunk runs steps 0 .. steps(), the last one only reading.
  COLLX_HOST_DEVICE constexpr unsigned steps() const noexcept {
    const unsigned n = static_cast<unsigned>(ring.world);
    return phase == ring_phase::all_reduce ? 2 * (n - 1) : n - 1;
  }
  /// Elements of the call chunk i covers: all_reduce world pieces of the vector; the other phases
  /// one piece of every rank's block.
  COLLX_HOST_DEVICE constexpr std::size_t chunk_elements() const noexcept {
    return phase == ring_phase::all_reduce ? piece * static_cast<std::size_t>(ring.world) : piece;
  }
  /// Elements of chunk i (of the vector, or of each block).
  COLLX_HOST_DEVICE constexpr std::size_t chunk_size(std::size_t i) const noexcept {
    const std::size_t c = chunk_elements();
    return std::min(count, (i + 1) * c) - i * c;
  }
  /// Elements per piece of chunk i: all_reduce ceil(size / world) rounded up to the vector (the
  /// last pieces shorter or empty); the other phases the chunk's size.
  COLLX_HOST_DEVICE constexpr std::size_t piece_length(std::size_t i) const noexcept {
    const std::size_t c = chunk_size(i);
    if (phase != ring_phase::all_reduce) return c;
    const std::size_t n = static_cast<std::size_t>(ring.world);
    return ((c + n - 1) / n + vector - 1) / vector * vector;
  }
  /// The piece of ring position k in chunk i, in the buffer holding every rank's piece (all_reduce:
  /// the vector; reduce_scatter: the input, blocks in rank order; all_gather: the output, blocks in
  /// rank order).
  COLLX_HOST_DEVICE constexpr piece_span span(std::size_t i, int k) const noexcept {
    if (phase != ring_phase::all_reduce)
      return {static_cast<std::size_t>(ring.at(k)) * stride + offset + i * piece, chunk_size(i)};
    const std::size_t c = chunk_size(i), p = piece_length(i), base = offset + i * chunk_elements();
    const std::size_t b = std::min(c, static_cast<std::size_t>(k) * p), e = std::min(c, (static_cast<std::size_t>(k) + 1) * p);
    return {base + b, e - b};
  }
  /// Where this rank's input of position k's piece of chunk i starts (all_gather: its send buffer
  /// of stride elements, which holds only its own piece).
  COLLX_HOST_DEVICE constexpr std::size_t input_offset(std::size_t i, int k) const noexcept {
    return phase == ring_phase::all_gather ? offset + i * piece : span(i, k).offset;
  }
  /// Where this rank's output of position k's piece of chunk i starts (reduce_scatter: its recv
  /// buffer of stride elements, which receives only its own piece).
  COLLX_HOST_DEVICE constexpr std::size_t output_offset(std::size_t i, int k) const noexcept {
    return phase == ring_phase::reduce_scatter ? offset + i * piece : span(i, k).offset;
  }
  /// The channel's block b's range of a piece of `length` elements of chunk i (the offsets it has
  /// in chunk 0's pieces, clipped: chunk_block_range).
  COLLX_HOST_DEVICE constexpr block_range range(std::size_t length, unsigned b) const noexcept {
    return chunk_block_range(piece_length(0), length, blocks, b, vector);
  }
  /// Where the channel's block b's part of a slot starts, in bytes: the channel's part, then its
  /// chunk-0 range's first element times cell_bytes. A block stages partial folds (accumulator)
  /// and elements (T) from there on, packed (the j-th element of the piece at region + (j -
  /// region_first(b)) x size), so whatever it stages it stays inside its own region: a wider
  /// accumulator cannot reach the bytes of another block, whose successor may still be reading
  /// them (blocks meet only their own peers).
  COLLX_HOST_DEVICE constexpr std::size_t region_offset(unsigned b) const noexcept {
    return slot_offset + region_first(b) * cell_bytes;
  }
  /// The first element of the piece block b's region holds (its chunk-0 range's begin).
  COLLX_HOST_DEVICE constexpr std::size_t region_first(unsigned b) const noexcept { return range(piece_length(0), b).begin; }
  /// Step s (0 .. steps()) of the rank at `position` (see the file comment): reduce-scatter steps
  /// 0 .. world - 1 fold, all-gather steps copy.
  COLLX_HOST_DEVICE constexpr ring_step step(unsigned s) const noexcept {
    const int n = ring.world, k = position, si = static_cast<int>(s);
    const unsigned last = steps();
    ring_step st;
    if (phase == ring_phase::all_gather) {  // step s passes on the piece of position k - s
      st.piece = ((k - si) % n + n) % n;
      st.read_prev = s > 0;
      st.read_input = s == 0;
      st.write_output = true;
      st.stage = s < last;
      return st;
    }
    if (si < n - 1) {  // folding: stage the partial of position k - s - 1
      st.piece = ((k - si - 1) % n + n) % n;
      st.read_prev = s > 0;
      st.read_input = true;
      st.partial = true;
      st.stage = true;
      return st;
    }
    if (si == n - 1) {  // the last fold: this rank's piece is complete
      st.piece = k;
      st.read_prev = s > 0;
      st.read_input = true;
      st.write_output = true;
      st.stage = s < last;
      return st;
    }
    st.piece = ((k - (si - n + 1)) % n + n) % n;  // all-gather half of an all-reduce
    st.read_prev = true;
    st.write_output = true;
    st.stage = s < last;
    return st;
  }
};

/// Plans a ring call on rank `rank` of a ring `ring` (world >= 2): `count` as ring_plan::count,
/// staging slots of `slot_bytes` holding one piece of `slot_elem_bytes`-byte elements (the larger of
/// the element and its accumulator), vectors of `vector` elements, at most `block_cap` blocks
/// (as many as the first piece's vectors need, one per thread).
/// @throws collx::error (errc::invalid_argument) for a world outside [2, max_device_world], a rank
///         not in the ring, zero sizes, or a slot that cannot hold one vector.
inline ring_plan plan_ring(ring_phase phase, const ring_order& ring, int rank, std::size_t count, std::size_t slot_elem_bytes,
                           std::size_t vector, std::size_t slot_bytes, unsigned block_cap) {
  if (ring.world < 2 || ring.world > max_device_world)
    COLLX_THROW(errc::invalid_argument, "gpu::plan_ring: a ring of " + std::to_string(ring.world) + " ranks (2 to " +
                                            std::to_string(max_device_world) + ")");
  if (slot_elem_bytes == 0 || vector == 0 || block_cap == 0)
    COLLX_THROW(errc::invalid_argument, "gpu::plan_ring: zero element size, vector or block cap");
  ring_plan p;
  p.phase = phase;
  p.ring = ring;
  p.position = ring.position_of(rank);
  if (p.position < 0) COLLX_THROW(errc::invalid_argument, "gpu::plan_ring: rank " + std::to_string(rank) + " is not in the ring");
  p.prev = ring.at(p.position - 1);
  p.next = ring.at(p.position + 1);
  p.count = count;
  p.stride = count;
  p.vector = vector;
  p.cell_bytes = slot_elem_bytes;
  p.piece = slot_bytes / slot_elem_bytes / vector * vector;
  if (p.piece == 0)
    COLLX_THROW(errc::invalid_argument, "gpu: a staging slot of " + std::to_string(slot_bytes) + " bytes cannot hold " +
                                            std::to_string(vector) + " elements of " + std::to_string(slot_elem_bytes) + " bytes");
  p.chunks = count == 0 ? 0 : (count + p.chunk_elements() - 1) / p.chunk_elements();
  const std::size_t vectors = count == 0 ? 0 : (p.piece_length(0) + vector - 1) / vector;
  const std::size_t want = (vectors + device_threads_per_block - 1) / device_threads_per_block;
  p.blocks = static_cast<unsigned>(std::clamp<std::size_t>(want, 1, block_cap));
  return p;
}

/// A ring call over its channels: one ring_plan per channel (channel[c], c < channels), the
/// launch's blocks in channel order (channel c's from channel[c].first_block on).
struct ring_call {
  ring_plan channel[max_device_channels] = {};  ///< each channel's plan
  int channels = 0;                             ///< channels the call runs
  unsigned blocks = 0;                          ///< blocks of the launch, every channel's
  /// The most chunks of any channel: a chunk's epochs are the call's (steps() per chunk), so the
  /// call takes chunks x steps() epochs whichever channel runs short.
  std::size_t chunks = 0;

  /// The channel of the launch's block `block` (< blocks).
  COLLX_HOST_DEVICE constexpr int channel_of(unsigned block) const noexcept {
    int c = 0;
    while (c + 1 < channels && block >= channel[c + 1].first_block) ++c;
    return c;
  }
};

/// Where element `at` of the buffer a ring call's spans describe (ring_plan::span: the vector, or
/// every rank's block in rank order) is folded: its channel and the ring position whose piece
/// holds it, so that its value is op(...op(x_{k+1}, x_{k+2})..., x_k) around that channel's ring.
/// What a test checks a ring call's result against.
struct ring_piece_owner {
  int channel = -1;   ///< the channel (ring_call::channel)
  int position = -1;  ///< the ring position k whose piece holds the element
};
/// The channel and ring position whose piece of `call` holds element `at` (ring_piece_owner);
/// {-1, -1} where no piece holds it. Linear in the call's chunks x world x channels.
inline ring_piece_owner owner_of(const ring_call& call, std::size_t at) noexcept {
  for (int ch = 0; ch < call.channels; ++ch) {
    const ring_plan& p = call.channel[ch];
    for (std::size_t c = 0; c < p.chunks; ++c)
      for (int k = 0; k < p.ring.world; ++k) {
        const piece_span s = p.span(c, k);
        if (at >= s.offset && at < s.offset + s.length) return {ch, k};
      }
  }
  return {};
}

/// Plans a ring call of `phase` on rank `rank` over the channels `rings` (arguments as plan_ring,
/// `count` the call's): the vector (all_reduce) or every rank's block (reduce_scatter,
/// all_gather) cut into as many contiguous parts as channels run, each a whole number of vectors
/// (but the last), shared out evenly (fewer channels where `count` has fewer vectors, or where
/// `block_cap` or the slot cannot give each its own blocks and a 256-byte part of the slot);
/// channel c plans its part around rings.ring[c] with slot_bytes / channels (rounded down to 256
/// bytes) of the slot and block_cap / channels blocks. One channel plans as plan_ring does. The same arguments give the
/// same call on every rank but for the rank's own positions.
/// @throws collx::error (errc::invalid_argument) as plan_ring, or for a channel count outside
///         [1, max_device_channels].
inline ring_call plan_ring_call(ring_phase phase, const ring_channels& rings, int rank, std::size_t count, std::size_t slot_elem_bytes,
                                std::size_t vector, std::size_t slot_bytes, unsigned block_cap) {
  if (rings.count < 1 || rings.count > max_device_channels)
    COLLX_THROW(errc::invalid_argument, "gpu::plan_ring_call: " + std::to_string(rings.count) + " channels (1 to " +
                                            std::to_string(max_device_channels) + ")");
  if (slot_elem_bytes == 0 || vector == 0 || block_cap == 0)
    COLLX_THROW(errc::invalid_argument, "gpu::plan_ring_call: zero element size, vector or block cap");
  constexpr std::size_t part_align = 256;
  const std::size_t vectors = (count + vector - 1) / vector;
  std::size_t used = std::min({static_cast<std::size_t>(rings.count), static_cast<std::size_t>(block_cap),
                               std::max<std::size_t>(vectors, 1)});
  while (used > 1 && slot_bytes / used / part_align * part_align < slot_elem_bytes * vector) --used;
  // Channel c's first vector: the vectors shared out evenly, none left empty.
  const auto first_vector = [&](std::size_t c) { return c * (vectors / used) + std::min(c, vectors % used); };
  const std::size_t part_bytes = used == 1 ? slot_bytes : slot_bytes / used / part_align * part_align;
  ring_call call;
  call.channels = static_cast<int>(used);
  for (std::size_t c = 0; c < used; ++c) {
    const std::size_t begin = std::min(count, first_vector(c) * vector);
    const std::size_t end = c + 1 == used ? count : std::min(count, first_vector(c + 1) * vector);
    ring_plan p = plan_ring(phase, rings.ring[c], rank, end - begin, slot_elem_bytes, vector, part_bytes,
                            block_cap / static_cast<unsigned>(used));
    p.offset = begin;
    p.stride = count;
    p.slot_offset = c * part_bytes;
    p.first_block = call.blocks;
    call.blocks += p.blocks;
    call.chunks = std::max(call.chunks, p.chunks);
    call.channel[c] = p;
  }
  return call;
}

// ---------------------------------------------------------------------------------------------
// Direct or ring: from which size calls without an algorithm take the ring

/// The latency-bandwidth figures of the device ring (alpha-beta, as direct_cost for the direct
/// forms), which with direct_cost decide from which size calls without an algorithm take it
/// (ring_crossover_bytes, device_communicator::ring_min_bytes).
struct ring_cost {
  /// Bytes per second each rank reads from its ring predecessors (one per channel) while every
  /// rank does: the channels times the slowest channel's slowest hop. 0 (the default): not known,
  /// taken as the direct forms' read rate, so that the ring never takes over (it reads what
  /// two-shot reads, after more barriers). A device communicator fills it in from the machine's
  /// wiring where it can read it
  /// (device_options::discover_wiring); topo::device_ring_cost (collx/topo/device_cost.hpp) gives
  /// it for a topology file.
  double hop_bytes_per_second = 0;
  /// Seconds of one ring step apart from its bytes: a barrier with the two ring neighbours.
  /// Default 1.6 us, a flag round trip between two streams of one H200 (bench/results/h200-1gpu.md;
  /// across NVLink it is longer).
  double step_seconds = 1.6e-6;
};

/// The ring figures where a hop goes through shared host memory (workspace_memory host, or a
/// mixed ring with a hop between GPUs without peer access): NCCL's 12 GB/s for a PCIe link, and a
/// flag round trip through host memory per step taken as host_memory_direct_cost's 10 us.
/// Estimates: not measured.
inline constexpr ring_cost host_memory_ring_cost{12e9, 10e-6};

namespace ring_detail {
/// The ring's line for `phase` on `world` ranks (world >= 2): one call's fixed cost, every step's
/// barrier once per chunk (a chunk is world slots of the vector, counted as 1 + bytes / (world x
/// slot_bytes), within one chunk of plan_ring's), and 2 (world - 1) / world of the vector read
/// from the predecessor for all_reduce, (world - 1) / world for its halves.
inline cost_line ring_line(ring_phase phase, int world, std::size_t slot_bytes, const direct_cost& d, const ring_cost& r) noexcept {
  const double w = static_cast<double>(world);
  const double steps = (phase == ring_phase::all_reduce ? 2 : 1) * (w - 1);
  const double share = steps / w;
  return {d.call_seconds + steps * r.step_seconds,
          share / r.hop_bytes_per_second + steps * r.step_seconds / (w * static_cast<double>(slot_bytes))};
}

/// The direct forms' lines for `phase`: all_reduce one-shot and two-shot (predict_direct);
/// reduce_scatter and all_gather one call reading (world - 1) / world of the vector. Returns how
/// many of `out` it filled. Simpler than the ring's line in two ways that pull apart: a direct
/// call's per-chunk barriers are not counted (one call_seconds whatever the size), and with
/// host_memory_direct_cost every byte is taken at host memory's rate, though only the pairs
/// without peer access go through it.
inline int direct_lines(ring_phase phase, int world, const direct_cost& d, cost_line (&out)[2]) noexcept {
  if (phase != ring_phase::all_reduce) {
    const double w = static_cast<double>(world);
    out[0] = {d.call_seconds, (w - 1) / w / d.peer_read_bytes_per_second};
    return 1;
  }
  out[0] = direct_line(direct_form::one_shot, world, d);
  out[1] = direct_line(direct_form::two_shot, world, d);
  return 2;
}
}  // namespace ring_detail

/// Predicted seconds of a ring call of `phase` moving a vector of `bytes` (as nccl-tests' size:
/// all_reduce count x element size, reduce_scatter the send buffer, all_gather the receive
/// buffer) on `world` ranks (>= 2) with staging slots of `slot_bytes`: one call's fixed cost
/// (d.call_seconds), a barrier (r.step_seconds) per step of every chunk, and the bytes read from
/// the predecessor at r.hop_bytes_per_second. Partials of half and bfloat16, which travel as fp32,
/// are not counted. Infinity for fewer than two ranks or slot_bytes 0 (no ring to run).
inline double predict_ring(ring_phase phase, std::size_t bytes, int world, std::size_t slot_bytes, const direct_cost& d,
                           const ring_cost& r) noexcept {
  if (world < 2 || slot_bytes == 0) return std::numeric_limits<double>::infinity();
  return ring_detail::ring_line(phase, world, slot_bytes, d, r).at(static_cast<double>(bytes));
}

/// Predicted seconds of the direct form of `phase` for a vector of `bytes` (as predict_ring): for
/// all_reduce the faster of one-shot and two-shot (predict_direct), for reduce_scatter and
/// all_gather one call reading the world - 1 peers' blocks.
inline double predict_direct_call(ring_phase phase, std::size_t bytes, int world, const direct_cost& d) noexcept {
  cost_line lines[2];
  const int n = ring_detail::direct_lines(phase, world, d, lines);
  double best = lines[0].at(static_cast<double>(bytes));
  for (int i = 1; i < n; ++i) best = std::min(best, lines[i].at(static_cast<double>(bytes)));
  return best;
}

/// The vector size, in bytes (as predict_ring), from which the figures predict the ring of
/// `phase` no slower than every direct form (the break-even size, rounded up): SIZE_MAX when it
/// never is (fewer than two ranks, slot_bytes 0, a hop no faster per byte than the direct forms'
/// reads, as on NVSwitch, or figures that are not finite and positive -- an unknown hop rate of 0
/// among them), at least 1. The ring reads as many bytes as two-shot (and as reduce-scatter and
/// all-gather's direct forms) in more barriers, so it takes over only where its channels read
/// faster than a rank reads from all its peers at once: where some pairs stage through host
/// memory and the rings' hops do not (a DGX-1 across its sockets), or where several rings use
/// more of each GPU's links than the direct forms' reads do (by the topology model, a DGX-1's
/// GPUs 0-3, from 447 KiB: predicted, not measured).
inline std::size_t ring_crossover_bytes(ring_phase phase, int world, std::size_t slot_bytes, const direct_cost& d,
                                        const ring_cost& r) noexcept {
  const auto rate = [](double x) { return std::isfinite(x) && x > 0; };
  const auto seconds = [](double x) { return std::isfinite(x) && x >= 0; };
  if (world < 2 || slot_bytes == 0 || !rate(d.peer_read_bytes_per_second) || !rate(r.hop_bytes_per_second) ||
      !seconds(d.call_seconds) || !seconds(r.step_seconds))
    return SIZE_MAX;
  const cost_line ring = ring_detail::ring_line(phase, world, slot_bytes, d, r);
  cost_line lines[2];
  const int n = ring_detail::direct_lines(phase, world, d, lines);
  double bytes = 0;
  for (int i = 0; i < n; ++i) {
    if (!(ring.per_byte < lines[i].per_byte)) return SIZE_MAX;
    bytes = std::max(bytes, (ring.fixed - lines[i].fixed) / (lines[i].per_byte - ring.per_byte));
  }
  if (!(bytes < 1e18)) return SIZE_MAX;
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(bytes)));
}

/// The vector size of a call as device_options::ring_min_bytes counts it (nccl-tests' size):
/// `blocks` blocks of `count` elements of `element_bytes` each (all_reduce: 1 block of the
/// vector; reduce_scatter and all_gather: size() blocks), SIZE_MAX where that overflows, 0 for
/// blocks <= 0 or element_bytes 0.
constexpr std::size_t call_vector_bytes(std::size_t count, int blocks, std::size_t element_bytes) noexcept {
  if (blocks <= 0 || element_bytes == 0) return 0;
  const std::size_t per_block = count > SIZE_MAX / element_bytes ? SIZE_MAX : count * element_bytes;
  const std::size_t b = static_cast<std::size_t>(blocks);
  return per_block > SIZE_MAX / b ? SIZE_MAX : per_block * b;
}

/// ring_crossover_bytes with the figures of where the bytes go: `d` when every workspace is in
/// device memory (`direct_on_device`: workspace_memory device), else host_memory_direct_cost (the
/// direct forms read some peer through host memory); `r` when every hop of the ring joins GPUs
/// with peer access (`hops_on_device`), else host_memory_ring_cost. A hop rate of 0 in `r` (not
/// known) is the direct figures' read rate, so that the ring takes over only with a machine's
/// own figures (topo::device_ring_cost). What device_communicator decides
/// device_options::ring_min_bytes = 0 by.
inline std::size_t ring_crossover_bytes_where(ring_phase phase, int world, std::size_t slot_bytes, bool direct_on_device,
                                              const direct_cost& d, bool hops_on_device, const ring_cost& r) noexcept {
  const direct_cost& direct = direct_cost_where(direct_on_device, d);
  ring_cost hops = hops_on_device ? r : host_memory_ring_cost;
  if (hops.hop_bytes_per_second == 0) hops.hop_bytes_per_second = direct.peer_read_bytes_per_second;
  return ring_crossover_bytes(phase, world, slot_bytes, direct, hops);
}

/// The signature of a ring call whose direct form (the same collective and arguments, no
/// algorithm) signs `direct`: `direct` with bits of its count field flipped, the fewest that make
/// it differ from `direct`, from each of `others` (for all_reduce: two-shot's two launches) and
/// from the reserved rejected signature, and keeping the count field off count 0's value
/// (device_signature::empty_count_bits). A ring call met by a direct or two-shot one therefore
/// fails with errc::mismatch whatever the count (a hash of its own would collide 1 time in 64).
inline device_signature ring_signature(device_signature direct, std::initializer_list<device_signature> others = {}) noexcept {
  const unsigned shift = device_signature::fields[4].shift;
  for (std::uint32_t m = 1; m < 64; ++m) {
    const std::uint32_t bits = direct.bits ^ (m << shift);
    bool clash = bits == rejected_signature_bits || ((bits >> shift) & 63u) == device_signature::empty_count_bits;
    for (const device_signature o : others) clash = clash || bits == o.bits;
    if (!clash) return {bits};
  }
  return {direct.bits ^ (1u << shift)};  // not reached: at most four values are excluded
}

/// The peers a ring barrier at chunk epoch `epoch` waits for, as a bit mask of ranks: every rank at
/// the call's first epoch `first` (a rank not next to this one in the ring may still be reading
/// this rank's slot from the call before, whatever it was), the ring neighbours after it (only the
/// successor reads this rank's slot, only the predecessor writes what it reads).
COLLX_HOST_DEVICE constexpr std::uint32_t ring_barrier_peers(const ring_plan& p, int rank, std::uint64_t epoch,
                                                             std::uint64_t first) noexcept {
  if (epoch == first) return (p.ring.world >= 32 ? ~0u : (1u << p.ring.world) - 1u);
  return (1u << rank) | (1u << p.prev) | (1u << p.next);
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
