// Symbolic proof of collx's schedules, independent of any transport.
//
// For every collective, algorithm, world size 1..16, a spread of awkward counts, roots, in-place and
// out-of-place, block layouts and segmentations, this file builds every rank's schedule with
// schedule::make_schedule (exactly as detail/dispatch.hpp lays the call out) and runs all ranks
// together on symbolic buffers under the execution model documented at the top of
// algo/schedule.hpp:
//   - every element holds a symbolic value: the contributions (rank, element index) in the order
//     they were combined, a structural hash of the bracketing, and how often it was finalised
//     (rounded to T / divided for avg: what happens when accumulator data is written to a T buffer);
//   - a send captures (rank, region); the k-th send from a to b meets the k-th receive at b from a and
//     reads the sender's memory as it is at the time of that receive; the content is also
//     snapshotted at send time, and any write to a sent region before the sender's next wait_sends
//     is a buffer hazard;
//   - ranks run round-robin until they block; no progress with ranks unfinished is a deadlock.
// Then the final state is checked: every output element the collective defines holds the exact
// value (every rank's contribution once, of the right element, in the algorithm's documented
// order and bracketing, finalised exactly once), everything else (input, non-root outputs, memory
// outside the output) is untouched.
//
// The outcome does not depend on the interleaving: sends never block, a receive matches by
// per-pair order, and the hazard rule (checked in program order of the writing rank) keeps a sent
// region unchanged until it is consumed. Two interleavings are used anyway.
//
// The checker itself is tested: the "checker catches broken schedules" cases mutate generated
// schedules (swapped operand order, dropped steps, reordered steps, wrong buffers) and require a
// failure with the right diagnosis.
#include <catch2/catch.hpp>

#include <collx/algo/build.hpp>
#include <collx/detail/counts.hpp>
#include <collx/detail/schedule_cache.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace cs = collx::schedule;
using collx::algorithm;
using collx::collective;

// ---------------------------------------------------------------------------------------------
// The generators are constexpr: a schedule can be built in a constant expression.
// 4-rank ring allreduce of 8 elements: (n-1) rounds of (send, recv_reduce, wait_sends) for the
// reduce-scatter, then (n-1) rounds of (send, recv, wait_sends) for the all-gather = 18 steps.
// This needs constexpr std::vector (__cpp_lib_constexpr_vector): g++ 12 and clang 14, both with
// libstdc++ 12, evaluate it. The guard (COLLX_CONSTEXPR_SCHEDULES) only skips it on a standard
// library without it, or in libstdc++'s debug mode.
namespace {
COLLX_SCHEDULE_CONSTEXPR std::size_t ring_allreduce_steps_4() {
  cs::params p;
  p.coll = collective::allreduce;
  p.world_size = 4;
  p.rank = 1;
  p.blocks = cs::vector_blocks(8, 4);
  const cs::steps s = cs::make_schedule(algorithm::ring, p, false);
  std::size_t recv_reduces = 0;
  for (const cs::step& st : s) recv_reduces += st.kind == cs::step_kind::recv_reduce;
  return s.size() * 100 + recv_reduces;
}
}  // namespace
#if COLLX_CONSTEXPR_SCHEDULES
static_assert(ring_allreduce_steps_4() == 18 * 100 + 3, "4-rank ring allreduce: 18 steps, 3 of them recv_reduce");
#endif

namespace {

constexpr int max_ranks = 16;

// ---------------------------------------------------------------------------------------------
// Symbolic values

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A contribution: rank r's element `index` (of its input).
constexpr std::uint32_t contrib(int rank, std::size_t index) {
  return static_cast<std::uint32_t>(rank) << 24 | static_cast<std::uint32_t>(index);
}
constexpr int contrib_rank(std::uint32_t c) { return static_cast<int>(c >> 24); }
constexpr std::size_t contrib_index(std::uint32_t c) { return c & 0xffffffu; }

/// One element's symbolic value. len == 0 is "never written" (poison).
struct sym {
  std::array<std::uint32_t, max_ranks> c{};  // contributions in the order they were combined
  std::uint64_t shape = 0;                   // structural hash of the bracketing (non-commutative)
  std::uint8_t len = 0;                      // number of contributions; 0 = poison
  std::uint8_t fin = 0;                      // times finalised (accumulator -> T)

  bool poison() const { return len == 0; }
  bool operator==(const sym& o) const {
    return len == o.len && fin == o.fin && shape == o.shape && std::equal(c.begin(), c.begin() + len, o.c.begin());
  }
};

sym leaf(int rank, std::size_t index) {
  sym s;
  s.c[0] = contrib(rank, index);
  s.len = 1;
  s.shape = mix64(0x1000000000ull + contrib(rank, index));
  return s;
}

/// op(a, b) as a value: contributions concatenated, bracketing recorded. The caller checks that
/// the result fits (more than max_ranks contributions is an error before this is called).
sym node(const sym& a, const sym& b) {
  sym s;
  s.len = static_cast<std::uint8_t>(a.len + b.len);
  std::copy(a.c.begin(), a.c.begin() + a.len, s.c.begin());
  std::copy(b.c.begin(), b.c.begin() + b.len, s.c.begin() + a.len);
  s.shape = mix64(a.shape * 31 + (b.shape << 17 | b.shape >> 47) + 0x2545f4914f6cdd1dull);
  return s;
}

std::string show(const sym& s) {
  if (s.poison()) return "<never written>";
  std::ostringstream o;
  o << "[";
  for (int i = 0; i < s.len; ++i) o << (i ? "," : "") << contrib_rank(s.c[i]) << ":" << contrib_index(s.c[i]);
  o << "] fin=" << int(s.fin) << " shape=" << std::hex << s.shape;
  return o.str();
}

/// Hash of a region's content (the send-time snapshot compared at the receive).
std::uint64_t content_hash(const std::vector<sym>& v) {
  std::uint64_t h = v.size();
  for (const sym& s : v) {
    h = mix64(h ^ s.shape) + s.len * 257u + s.fin;
    for (int i = 0; i < s.len; ++i) h = h * 1000003u + s.c[static_cast<std::size_t>(i)];
  }
  return h;
}

/// Left fold op(...op(op(x_{o0}, x_{o1}), x_{o2})...) of element `index` over ranks `order`.
sym left_fold(const std::vector<int>& order, std::size_t index) {
  sym s = leaf(order[0], index);
  for (std::size_t i = 1; i < order.size(); ++i) s = node(s, leaf(order[i], index));
  return s;
}

/// The binomial tree's value for ranks [r, r + 2^k) ∩ [0, n), as documented in algo/tree.hpp.
sym tree_fold(int r, int k, int n, std::size_t index) {
  if (k == 0) return leaf(r, index);
  const int half = 1 << (k - 1);
  const sym left = tree_fold(r, k - 1, n, index);
  if (r + half >= n) return left;
  return node(left, tree_fold(r + half, k - 1, n, index));
}

// ---------------------------------------------------------------------------------------------
// A call, laid out as detail/dispatch.hpp lays it out.

constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

struct config {
  collective coll = collective::allreduce;
  algorithm alg = algorithm::ring;
  int n = 1;
  bool in_place = false;                       // the user's call is in place (root only for reduce/broadcast)
  int root = 0;                                // broadcast, reduce
  bool one_shot = true;                        // direct allreduce
  std::size_t slices = 1;                      // ring broadcast
  std::size_t count = 0;                       // allreduce, reduce, broadcast
  std::vector<std::size_t> counts;             // reduce_scatter, all_gather: every rank's block
  std::vector<std::vector<std::size_t>> a2a;   // all_to_all: a2a[r][c] = elements r sends to c
  bool varying = false;                        // v-form call (all_to_all: keep_empty)
  bool contiguous_rs = false;                  // reduce_scatter: the tree's contiguous layout
  std::size_t seg_elems = unbounded;           // reductions: dispatcher segment bound in elements
  int order = 0;                               // interleaving: 0 greedy forward, 1 one step at a time, reverse
  std::vector<int> ring;                       // algo::ring's order (params::ring); empty: rank order
  // Checker tests only:
  bool claim_not_in_place = false;             // build with in_place = false although buffers alias
  std::function<void(int, cs::steps&)> mutate; // sabotage a rank's steps
};

std::string describe(const config& k) {
  std::ostringstream o;
  o << collx::collective_name(k.coll) << "/" << collx::algorithm_name(k.alg) << " n=" << k.n;
  switch (k.coll) {
    case collective::allreduce:
    case collective::reduce:
    case collective::broadcast: o << " count=" << k.count; break;
    case collective::reduce_scatter:
    case collective::all_gather:
      o << " counts=[";
      for (std::size_t i = 0; i < k.counts.size(); ++i) o << (i ? "," : "") << k.counts[i];
      o << "]";
      break;
    case collective::all_to_all:
      o << " a2a=[";
      for (std::size_t r = 0; r < k.a2a.size(); ++r) {
        o << (r ? ";" : "");
        for (std::size_t c = 0; c < k.a2a[r].size(); ++c) o << (c ? "," : "") << k.a2a[r][c];
      }
      o << "]";
      break;
    default: break;
  }
  if (k.coll == collective::broadcast || k.coll == collective::reduce) o << " root=" << k.root;
  if (k.in_place) o << " in-place";
  if (k.coll == collective::allreduce && k.alg == algorithm::direct) o << (k.one_shot ? " one-shot" : " two-shot");
  if (k.coll == collective::broadcast && k.alg == algorithm::ring) o << " slices=" << k.slices;
  if (k.seg_elems != unbounded) o << " seg=" << k.seg_elems;
  if (k.contiguous_rs) o << " contiguous";
  if (k.varying) o << " v-form";
  return o.str();
}

bool reduces(collective c) {
  return c == collective::allreduce || c == collective::reduce || c == collective::reduce_scatter;
}

struct segment {
  std::vector<cs::params> p;  // per rank
  std::size_t scratch = 0;    // scratch elements (the dispatcher sizes it per segment)
};

std::vector<std::size_t> prefix_of(const std::vector<std::size_t>& v) {
  std::vector<std::size_t> p(v.size() + 1, 0);
  for (std::size_t i = 0; i < v.size(); ++i) p[i + 1] = p[i] + v[i];
  return p;
}

/// The segments and per-rank params of a call, as run_collective builds them.
std::vector<segment> plan(const config& k) {
  const int n = k.n;
  auto base = [&](int r) {
    cs::params p;
    p.coll = k.coll;
    p.world_size = n;
    p.rank = r;
    p.root = k.root;
    p.one_shot = k.one_shot;
    p.slices = k.slices;
    p.ring = k.ring;
    p.blocks.resize(static_cast<std::size_t>(n));
    return p;
  };
  auto uniform = [&](std::vector<cs::block> blocks, std::size_t scratch) {
    segment s;
    for (int r = 0; r < n; ++r) {
      s.p.push_back(base(r));
      s.p.back().blocks = blocks;
    }
    s.scratch = scratch;
    return s;
  };
  std::vector<segment> out;
  switch (k.coll) {
    case collective::allreduce:
    case collective::reduce:
    case collective::broadcast: {
      const std::size_t total = k.count, step = reduces(k.coll) ? k.seg_elems : std::max<std::size_t>(total, 1);
      // The dispatcher returns before building anything for 0 elements; the schedules must be
      // sound for 0 anyway (one segment of 0).
      if (total == 0) out.push_back(uniform(cs::vector_blocks(0, n), 0));
      for (std::size_t b0 = 0; b0 < total; b0 += step) {
        const std::size_t len = std::min(step, total - b0);
        auto blocks = cs::vector_blocks(len, n);
        for (auto& b : blocks) b.in += b0, b.out += b0;
        out.push_back(uniform(blocks, reduces(k.coll) ? len : 0));
      }
      break;
    }
    case collective::reduce_scatter: {
      const auto prefix = prefix_of(k.counts);
      const std::size_t total = prefix.back();
      std::vector<cs::block> blocks(static_cast<std::size_t>(n));
      if (total == 0) out.push_back(uniform(blocks, 0));
      if (k.contiguous_rs) {
        for (std::size_t lo = 0; lo < total; lo += k.seg_elems) {
          const std::size_t hi = std::min(total, lo + std::min(k.seg_elems, total - lo));
          for (std::size_t c = 0; c < blocks.size(); ++c) {
            const std::size_t s = std::clamp(prefix[c], lo, hi), e = std::clamp(prefix[c + 1], lo, hi);
            blocks[c] = {s, s - std::min(s, prefix[c]), s - lo, e - s, e - s};
          }
          out.push_back(uniform(blocks, hi - lo));
        }
      } else if (total) {
        const std::size_t per_block = std::max<std::size_t>(1, k.seg_elems / static_cast<std::size_t>(n));
        const std::size_t longest = *std::max_element(k.counts.begin(), k.counts.end());
        for (std::size_t lo = 0; lo < longest; lo += per_block) {
          std::size_t t = 0;
          for (std::size_t c = 0; c < blocks.size(); ++c) {
            const std::size_t cnt = k.counts[c], s = std::min(cnt, lo), e = std::min(cnt, lo + per_block);
            blocks[c] = {prefix[c] + s, s, t, e - s, e - s};
            t += e - s;
          }
          out.push_back(uniform(blocks, t));
        }
      }
      break;
    }
    case collective::all_gather: {
      const auto prefix = prefix_of(k.counts);
      std::vector<cs::block> blocks(static_cast<std::size_t>(n));
      for (std::size_t c = 0; c < blocks.size(); ++c) blocks[c] = {0, prefix[c], 0, k.counts[c], k.counts[c]};
      out.push_back(uniform(blocks, 0));
      break;
    }
    case collective::all_to_all: {
      segment s;
      for (int r = 0; r < n; ++r) {
        cs::params p = base(r);
        std::size_t sp = 0, rp = 0;
        for (int c = 0; c < n; ++c) {
          const std::size_t sc = k.a2a[r][c], rc = k.a2a[c][r];
          p.blocks[c] = {sp, rp, 0, sc, rc};
          sp += sc;
          rp += rc;
        }
        p.keep_empty = k.varying;
        s.p.push_back(p);
      }
      out.push_back(s);
      break;
    }
    case collective::barrier:
    case collective::send_recv: out.push_back(uniform(std::vector<cs::block>(static_cast<std::size_t>(n)), 0)); break;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Buffers of one rank: input and output map into `mem` (the same cells when the call is in place);
// a null buffer (non-root's output of reduce, non-root's input of broadcast) must never be used.

struct rank_buffers {
  std::vector<sym> mem, initial, scratch;
  std::size_t in_base = 0, in_size = 0, out_base = 0, out_size = 0;
  bool in_null = false, out_null = false;
};

/// Sets up every rank's buffers for `k` with input element i of rank r = leaf(r, i).
std::vector<rank_buffers> make_buffers(const config& k) {
  const int n = k.n;
  std::vector<rank_buffers> bufs(static_cast<std::size_t>(n));
  const auto prefix = prefix_of(k.counts);
  for (int r = 0; r < n; ++r) {
    rank_buffers& b = bufs[static_cast<std::size_t>(r)];
    std::size_t in = 0, out = 0, delta = 0;  // sizes; in place: input starts at output + delta ...
    bool in_place = k.in_place, out_before_in = false;
    switch (k.coll) {
      case collective::allreduce: in = out = k.count; break;
      case collective::reduce:
        in = k.count, out = k.count;
        b.out_null = r != k.root;
        in_place = in_place && r == k.root;
        break;
      case collective::broadcast:
        in = k.count, out = k.count;
        b.in_null = r != k.root;
        in_place = in_place && r == k.root;
        break;
      case collective::reduce_scatter:  // in place: output = own block of input
        in = prefix.back(), out = k.counts[static_cast<std::size_t>(r)], delta = prefix[static_cast<std::size_t>(r)];
        in_place = in_place && out > 0;  // an empty own block makes the call out of place (reduce_scatter.hpp)
        break;
      case collective::all_gather:  // in place: input = own block of output
        in = k.counts[static_cast<std::size_t>(r)], out = prefix.back(), delta = prefix[static_cast<std::size_t>(r)];
        in_place = in_place && in > 0;  // likewise (all_gather.hpp)
        out_before_in = true;
        break;
      case collective::all_to_all:
        for (int c = 0; c < n; ++c) in += k.a2a[r][c], out += k.a2a[c][r];
        in_place = false;
        break;
      default: in_place = false; break;
    }
    if (b.in_null) in = 0;
    if (b.out_null) out = 0;
    b.in_size = in, b.out_size = out;
    if (in_place) {
      if (out_before_in) b.out_base = 0, b.in_base = delta, b.mem.assign(out, sym{});
      else b.in_base = 0, b.out_base = delta, b.mem.assign(in, sym{});
    } else {
      b.in_base = 0, b.out_base = in;
      b.mem.assign(in + out, sym{});
    }
    for (std::size_t i = 0; i < in; ++i) b.mem[b.in_base + i] = leaf(r, i);
    b.initial = b.mem;
  }
  return bufs;
}

// ---------------------------------------------------------------------------------------------
// The simulator

std::string show(cs::region g) {
  static const char* names[] = {"input", "output", "scratch"};
  return std::string(names[static_cast<int>(g.buf)]) + "[" + std::to_string(g.offset) + "+" + std::to_string(g.count) +
         "]";
}

std::string show(const cs::step& s) {
  std::ostringstream o;
  switch (s.kind) {
    case cs::step_kind::send: o << "send " << show(s.a) << " to " << s.peer; break;
    case cs::step_kind::recv: o << "recv " << show(s.dst) << " from " << s.peer << " (wire " << show({s.wire, 0, 0}) << ")"; break;
    case cs::step_kind::recv_reduce:
      o << "recv_reduce " << show(s.dst) << " = " << (s.incoming_first ? "op(x, " + show(s.a) + ")" : "op(" + show(s.a) + ", x)")
        << " from " << s.peer;
      break;
    case cs::step_kind::copy: o << "copy " << show(s.dst) << " = " << show(s.a); break;
    case cs::step_kind::reduce: o << "reduce " << show(s.dst) << " = op(" << show(s.a) << ", " << show(s.b) << ")"; break;
    case cs::step_kind::wait_sends: o << "wait_sends"; break;
  }
  return o.str();
}

struct message {
  cs::region a;
  std::uint64_t snap = 0;  // hash of the content when the send was posted
  std::uint32_t knows = 0;
  std::size_t step = 0;
};

struct pending_send {
  int storage;  // 0 mem, 1 scratch
  std::size_t lo, hi;
  int peer;
  std::size_t step;
};

struct result {
  std::string error;                          // empty: the schedules are correct
  std::vector<std::vector<sym>> outputs;      // every rank's output at the end
};

class simulator {
 public:
  explicit simulator(const config& k) : k_(k), n_(k.n), bufs_(make_buffers(k)) {
    knows_.resize(static_cast<std::size_t>(n_));
    for (int r = 0; r < n_; ++r) knows_[static_cast<std::size_t>(r)] = 1u << r;
  }

  result run() {
    result res;
    for (const segment& seg : plan(k_)) {
      run_segment(seg);
      if (!err_.empty()) break;
    }
    if (err_.empty()) check_final();
    res.error = err_;
    for (const rank_buffers& b : bufs_)
      res.outputs.emplace_back(b.mem.begin() + static_cast<std::ptrdiff_t>(b.out_base),
                               b.mem.begin() + static_cast<std::ptrdiff_t>(b.out_base + b.out_size));
    return res;
  }

 private:
  const config& k_;
  const int n_;
  std::vector<rank_buffers> bufs_;
  std::vector<std::uint32_t> knows_;  // ranks known (causally) to have entered the call
  std::string err_;
  // per segment
  std::vector<cs::steps> steps_;
  std::vector<std::size_t> pc_;
  std::vector<std::deque<message>> chan_;  // [from * n + to]: sent, not yet received
  std::vector<int> unconsumed_;            // per sender
  std::vector<std::vector<pending_send>> pending_;  // sent since the last wait_sends
  std::vector<int> ring_block_;                     // allreduce/reduce: block of each element
  std::vector<sym> va_, vb_, vx_, vv_;              // step operands (reused)
  std::vector<sym> expected_;                       // expected reductions by element index (lazy)

  rank_buffers& buf(int r) { return bufs_[static_cast<std::size_t>(r)]; }

  void fail(int r, const std::string& what) {
    if (!err_.empty()) return;
    std::ostringstream o;
    o << describe(k_) << ": rank " << r;
    if (!steps_.empty() && pc_[static_cast<std::size_t>(r)] < steps_[static_cast<std::size_t>(r)].size())
      o << " step " << pc_[static_cast<std::size_t>(r)] << " (" << show(steps_[static_cast<std::size_t>(r)][pc_[static_cast<std::size_t>(r)]])
        << ")";
    o << ": " << what;
    err_ = o.str();
  }

  /// Resolves a region of rank r to cells; false (and an error) if it may not be accessed.
  bool locate(int r, cs::region g, bool write, int& storage, std::size_t& lo) {
    rank_buffers& b = buf(r);
    storage = 0, lo = 0;
    if (g.count == 0) return true;
    switch (g.buf) {
      case cs::buffer::input:
        if (write) return fail(r, "writes the user's input buffer " + show(g)), false;
        if (b.in_null) return fail(r, "uses its input, which is null on this rank: " + show(g)), false;
        if (g.offset + g.count > b.in_size)
          return fail(r, show(g) + " is outside the input (" + std::to_string(b.in_size) + " elements)"), false;
        lo = b.in_base + g.offset;
        return true;
      case cs::buffer::output:
        if (b.out_null)
          return fail(r, std::string(write ? "writes" : "reads") + " its output, which this rank must not touch: " + show(g)),
                 false;
        if (g.offset + g.count > b.out_size)
          return fail(r, show(g) + " is outside the output (" + std::to_string(b.out_size) + " elements)"), false;
        lo = b.out_base + g.offset;
        return true;
      case cs::buffer::scratch:
        if (!reduces(k_.coll)) return fail(r, "uses scratch in a collective without an op: " + show(g)), false;
        if (g.offset + g.count > b.scratch.size())
          return fail(r, show(g) + " is outside the scratch (" + std::to_string(b.scratch.size()) + " elements)"), false;
        storage = 1, lo = g.offset;
        return true;
    }
    return fail(r, "bad buffer"), false;
  }

  std::vector<sym>& cells(int r, int storage) { return storage ? buf(r).scratch : buf(r).mem; }

  bool read(int r, cs::region g, std::vector<sym>& out) {
    int st;
    std::size_t lo;
    if (!locate(r, g, false, st, lo)) return false;
    const auto& c = cells(r, st);
    out.assign(c.begin() + static_cast<std::ptrdiff_t>(lo), c.begin() + static_cast<std::ptrdiff_t>(lo + g.count));
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i].poison()) return fail(r, "reads " + show(g) + " element " + std::to_string(i) + ", never written"), false;
    return true;
  }

  bool write(int r, cs::region g, const std::vector<sym>& v) {
    int st;
    std::size_t lo;
    if (!locate(r, g, true, st, lo)) return false;
    if (g.count == 0) return true;
    for (const pending_send& p : pending_[static_cast<std::size_t>(r)])
      if (p.storage == st && lo < p.hi && p.lo < lo + g.count) {
        fail(r, "buffer hazard: writes " + show(g) + " while its send at step " + std::to_string(p.step) + " to rank " +
                    std::to_string(p.peer) + " may still be read (no wait_sends in between)");
        return false;
      }
    auto& c = cells(r, st);
    std::copy(v.begin(), v.end(), c.begin() + static_cast<std::ptrdiff_t>(lo));
    return true;
  }

  /// Data moved from a buffer of kind `from` to one of kind `to` (scratch = accumulator type).
  bool convert(int r, std::vector<sym>& v, cs::buffer from, cs::buffer to) {
    if (from == cs::buffer::scratch && to != cs::buffer::scratch)
      for (sym& s : v) {
        if (s.len != n_)
          return fail(r, "writes a partial result to a T buffer (rounded/divided before it is complete): " + show(s)), false;
        ++s.fin;
      }
    return true;
  }

  bool combine(int r, const std::vector<sym>& left, const std::vector<sym>& right, cs::buffer dst, std::vector<sym>& out) {
    out.resize(left.size());
    for (std::size_t i = 0; i < left.size(); ++i) {
      const sym &a = left[i], &b = right[i];
      if (a.fin || b.fin)
        return fail(r, "combines a value that was already finalised: " + show(a) + " op " + show(b)), false;
      if (a.len + b.len > max_ranks) return fail(r, "more contributions than ranks: " + show(a) + " op " + show(b)), false;
      out[i] = node(a, b);
    }
    return convert(r, out, cs::buffer::scratch, dst);
  }

  /// Whether regions a and b of rank r are the very same cells (and, in `overlap`, whether they share any).
  bool same_cells(int r, cs::region a, cs::region b, bool& overlap) {
    int sa, sb;
    std::size_t la, lb;
    if (!locate(r, a, false, sa, la) || !locate(r, b, false, sb, lb)) return false;
    overlap = a.count && b.count && sa == sb && la < lb + b.count && lb < la + a.count;
    return a.count == b.count && sa == sb && la == lb;
  }

  /// Operands of an element-wise combine must be the same cells as dst or disjoint from it.
  bool check_alias(int r, cs::region operand, cs::region dst) {
    bool overlap = false;
    const bool same = same_cells(r, operand, dst, overlap);
    if (overlap && !same) return fail(r, show(operand) + " partially overlaps " + show(dst)), false;
    return err_.empty();
  }

  /// One step of rank r: false if it blocks (or failed).
  bool step(int r) {
    const std::size_t ur = static_cast<std::size_t>(r);
    const cs::step& s = steps_[ur][pc_[ur]];
    const bool is_xfer = s.kind == cs::step_kind::send || s.kind == cs::step_kind::recv || s.kind == cs::step_kind::recv_reduce;
    if (is_xfer && (s.peer < 0 || s.peer >= n_ || s.peer == r)) return fail(r, "bad peer " + std::to_string(s.peer)), false;
    if (s.kind != cs::step_kind::send && s.kind != cs::step_kind::wait_sends) {
      int st;
      std::size_t lo;
      if (!locate(r, s.dst, true, st, lo)) return false;  // may this rank write dst at all?
    }
    switch (s.kind) {
      case cs::step_kind::send: {
        message m;
        m.a = s.a;
        m.knows = knows_[ur];
        m.step = pc_[ur];
        if (!read(r, s.a, vx_)) return false;
        m.snap = content_hash(vx_);
        int st;
        std::size_t lo;
        locate(r, s.a, false, st, lo);
        if (s.a.count) pending_[ur].push_back({st, lo, lo + s.a.count, s.peer, pc_[ur]});
        chan_[ur * static_cast<std::size_t>(n_) + static_cast<std::size_t>(s.peer)].push_back(std::move(m));
        ++unconsumed_[ur];
        break;
      }
      case cs::step_kind::recv:
      case cs::step_kind::recv_reduce: {
        auto& ch = chan_[static_cast<std::size_t>(s.peer) * static_cast<std::size_t>(n_) + ur];
        if (ch.empty()) return false;  // blocks
        message& m = ch.front();
        if (m.a.buf != s.wire)
          return fail(r, "expects wire buffer " + show(cs::region{s.wire, 0, 0}) + " but rank " + std::to_string(s.peer) +
                             " sent " + show(m.a) + " (its step " + std::to_string(m.step) + ")"),
                 false;
        if (m.a.count != s.dst.count)
          return fail(r, "receives " + std::to_string(s.dst.count) + " elements but rank " + std::to_string(s.peer) +
                             " sent " + show(m.a) + " (its step " + std::to_string(m.step) + ")"),
                 false;
        std::vector<sym>& x = vx_;
        if (!read(s.peer, m.a, x)) return false;
        if (content_hash(x) != m.snap)
          return fail(r, "rank " + std::to_string(s.peer) + "'s " + show(m.a) + " changed between its send (step " +
                             std::to_string(m.step) + ") and this receive"),
                 false;
        std::vector<sym>& v = vv_;
        if (s.kind == cs::step_kind::recv) {
          v = std::move(x);
          if (!convert(r, v, s.wire, s.dst.buf)) return false;
        } else {
          if (!reduces(k_.coll)) return fail(r, "recv_reduce in a collective without an op"), false;
          if (s.a.count != s.dst.count) return fail(r, "operand and destination sizes differ"), false;
          std::vector<sym>& a = va_;
          if (!read(r, s.a, a) || !check_alias(r, s.a, s.dst)) return false;
          if (!(s.incoming_first ? combine(r, x, a, s.dst.buf, v) : combine(r, a, x, s.dst.buf, v))) return false;
        }
        if (!write(r, s.dst, v)) return false;
        knows_[ur] |= m.knows;
        ch.pop_front();
        --unconsumed_[static_cast<std::size_t>(s.peer)];
        break;
      }
      case cs::step_kind::copy: {
        if (s.a.count != s.dst.count) return fail(r, "copy sizes differ"), false;
        bool overlap = false;
        const bool same = same_cells(r, s.a, s.dst, overlap);
        if (!err_.empty()) return false;
        if (same && s.a.buf != cs::buffer::scratch && s.dst.buf != cs::buffer::scratch) {
          int st;
          std::size_t lo;
          if (!locate(r, s.dst, true, st, lo)) return false;  // still may not name the input as destination
          break;                                               // the same memory: a no-op (executor skips it)
        }
        std::vector<sym>& v = vv_;
        if (!read(r, s.a, v) || !convert(r, v, s.a.buf, s.dst.buf) || !write(r, s.dst, v)) return false;
        break;
      }
      case cs::step_kind::reduce: {
        if (!reduces(k_.coll)) return fail(r, "reduce in a collective without an op"), false;
        if (s.a.count != s.dst.count || s.b.count != s.dst.count) return fail(r, "reduce sizes differ"), false;
        std::vector<sym>&a = va_, &b = vb_, &v = vv_;
        if (!read(r, s.a, a) || !read(r, s.b, b) || !check_alias(r, s.a, s.dst) || !check_alias(r, s.b, s.dst)) return false;
        if (!combine(r, a, b, s.dst.buf, v) || !write(r, s.dst, v)) return false;
        break;
      }
      case cs::step_kind::wait_sends:
        if (unconsumed_[ur]) return false;  // blocks
        pending_[ur].clear();
        break;
    }
    ++pc_[ur];
    return true;
  }

  void run_segment(const segment& seg) {
    const std::size_t n = static_cast<std::size_t>(n_);
    steps_.assign(n, {});
    for (int r = 0; r < n_; ++r) {
      const cs::params& p = seg.p[static_cast<std::size_t>(r)];
      bool in_place = k_.in_place;
      if (k_.coll == collective::reduce || k_.coll == collective::broadcast) in_place = in_place && r == k_.root;
      if (k_.claim_not_in_place) in_place = false;
      steps_[static_cast<std::size_t>(r)] = cs::make_schedule(k_.alg, p, in_place);
      if (k_.mutate) k_.mutate(r, steps_[static_cast<std::size_t>(r)]);
      buf(r).scratch.assign(seg.scratch, sym{});  // stale scratch from an earlier segment is never valid
    }
    if (k_.coll == collective::allreduce || k_.coll == collective::reduce) {
      ring_block_.resize(k_.count, -1);
      const auto& blocks = seg.p.front().blocks;
      for (std::size_t c = 0; c < blocks.size(); ++c)
        for (std::size_t e = blocks[c].in; e < blocks[c].in + blocks[c].count && e < k_.count; ++e)
          ring_block_[e] = static_cast<int>(c);
    }
    pc_.assign(n, 0);
    chan_.resize(n * n);
    for (auto& c : chan_) c.clear();
    unconsumed_.assign(n, 0);
    pending_.assign(n, {});
    auto done = [&](int r) { return pc_[static_cast<std::size_t>(r)] >= steps_[static_cast<std::size_t>(r)].size(); };
    for (;;) {
      bool progress = false, all_done = true;
      for (int i = 0; i < n_; ++i) {
        const int r = k_.order == 0 ? i : n_ - 1 - i;
        while (!done(r) && step(r)) {
          progress = true;
          if (k_.order == 1) break;
        }
        if (!err_.empty()) return;
        all_done = all_done && done(r);
      }
      if (all_done) break;
      if (!progress) {
        std::ostringstream o;
        o << describe(k_) << ": deadlock:";
        for (int r = 0; r < n_; ++r) {
          o << " rank " << r;
          if (done(r)) o << " done;";
          else o << " at step " << pc_[static_cast<std::size_t>(r)] << " (" << show(steps_[static_cast<std::size_t>(r)][pc_[static_cast<std::size_t>(r)]]) << ");";
        }
        err_ = o.str();
        return;
      }
    }
    for (int r = 0; r < n_; ++r) {
      if (!pending_[static_cast<std::size_t>(r)].empty())
        return fail(r, "its schedule ends with sends not waited for (the caller may then write the buffer)");
      for (int to = 0; to < n_; ++to)
        if (!chan_[static_cast<std::size_t>(r) * n + static_cast<std::size_t>(to)].empty())
          return fail(r, std::to_string(chan_[static_cast<std::size_t>(r) * n + static_cast<std::size_t>(to)].size()) +
                             " message(s) to rank " + std::to_string(to) + " never received");
    }
  }

  // ---- expected results

  /// The exact value of element `index` of a full reduction whose ring block is `ring_block`.
  sym expected_reduction(std::size_t index, int ring_block) {
    // The value depends on the element only (the ring block is a function of it), so all ranks share it.
    if (index < expected_.size() && !expected_[index].poison()) return expected_[index];
    if (expected_.size() <= index) expected_.resize(index + 1);
    return expected_[index] = compute_expected(index, ring_block);
  }

  sym compute_expected(std::size_t index, int ring_block) const {
    if (n_ == 1) return leaf(0, index);
    sym s;
    switch (k_.alg) {
      case algorithm::direct: {
        std::vector<int> order(static_cast<std::size_t>(n_));
        std::iota(order.begin(), order.end(), 0);
        s = left_fold(order, index);
        break;
      }
      case algorithm::tree: {
        int levels = 0;
        while ((1 << levels) < n_) ++levels;
        s = tree_fold(0, levels, n_, index);
        break;
      }
      case algorithm::ring: {
        if (ring_block < 0) return sym{};  // matches nothing a schedule can write
        // Along the ring from the rank after the block's owner, ending with the owner.
        auto rank_at = [&](int q) { return k_.ring.empty() ? q : k_.ring[static_cast<std::size_t>(q)]; };
        int owner_pos = ring_block;
        for (int q = 0; q < n_; ++q)
          if (rank_at(q) == ring_block) owner_pos = q;
        std::vector<int> order;
        for (int i = 1; i <= n_; ++i) order.push_back(rank_at((owner_pos + i) % n_));
        s = left_fold(order, index);
        break;
      }
    }
    s.fin = 1;
    return s;
  }

  /// Ring block of element j of a vector collective: the block of its segment that holds it, as
  /// recorded from the params the schedules were built with (-1: in no block).
  int vector_ring_block(std::size_t j) const { return j < ring_block_.size() ? ring_block_[j] : -1; }

  bool check_reduced(int r, std::size_t j, const sym& got, const sym& want) {
    if (got == want) return true;
    std::ostringstream o;
    o << "output element " << j << " is " << show(got) << ", expected " << show(want);
    // Say which property failed.
    std::vector<int> ranks;
    bool right_index = true;
    for (int i = 0; i < got.len; ++i) {
      ranks.push_back(contrib_rank(got.c[i]));
      right_index = right_index && contrib_index(got.c[i]) == contrib_index(want.c[0]);
    }
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(static_cast<std::size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
    if (got.poison()) o << " (never written)";
    else if (sorted != all) o << " (not every rank's contribution exactly once)";
    else if (!right_index) o << " (combines different elements)";
    else if (got.fin != want.fin) o << " (finalised " << int(got.fin) << " times, expected " << int(want.fin) << ")";
    else if (k_.alg == algorithm::ring) o << " (not the documented ring order/bracketing)";
    else if (!std::equal(got.c.begin(), got.c.begin() + got.len, want.c.begin())) o << " (not in rank order)";
    else o << " (rank order, but not the documented bracketing)";
    fail(r, o.str());
    return false;
  }

  void check_final() {
    const auto prefix = prefix_of(k_.counts);
    for (int r = 0; r < n_ && err_.empty(); ++r) {
      const rank_buffers& b = buf(r);
      for (std::size_t cell = 0; cell < b.mem.size() && err_.empty(); ++cell) {
        const sym& got = b.mem[cell];
        const bool in_out = !b.out_null && cell >= b.out_base && cell < b.out_base + b.out_size;
        if (!in_out) {
          if (!(got == b.initial[cell]))
            fail(r, "memory outside its output (cell " + std::to_string(cell) + ") changed: " + show(got) + ", was " +
                        show(b.initial[cell]));
          continue;
        }
        const std::size_t j = cell - b.out_base;
        switch (k_.coll) {
          case collective::allreduce:
          case collective::reduce: check_reduced(r, j, got, expected_reduction(j, vector_ring_block(j))); break;
          case collective::reduce_scatter:
            check_reduced(r, j, got, expected_reduction(prefix[static_cast<std::size_t>(r)] + j, r));
            break;
          case collective::broadcast:
            if (!(got == leaf(k_.root, j)))
              fail(r, "output element " + std::to_string(j) + " is " + show(got) + ", expected root's element");
            break;
          case collective::all_gather: {
            std::size_t c = 0;
            while (prefix[c + 1] <= j) ++c;
            if (!(got == leaf(static_cast<int>(c), j - prefix[c])))
              fail(r, "output element " + std::to_string(j) + " is " + show(got) + ", expected rank " + std::to_string(c) +
                          "'s element " + std::to_string(j - prefix[c]));
            break;
          }
          case collective::all_to_all: {
            std::size_t c = 0, off = 0;
            while (off + k_.a2a[c][static_cast<std::size_t>(r)] <= j) off += k_.a2a[c][static_cast<std::size_t>(r)], ++c;
            std::size_t soff = 0;
            for (int d = 0; d < r; ++d) soff += k_.a2a[c][static_cast<std::size_t>(d)];
            const sym want = leaf(static_cast<int>(c), soff + (j - off));
            if (!(got == want))
              fail(r, "output element " + std::to_string(j) + " is " + show(got) + ", expected " + show(want));
            break;
          }
          default: break;
        }
      }
      if (k_.coll == collective::barrier && knows_[static_cast<std::size_t>(r)] != (1u << n_) - 1)
        fail(r, "leaves the barrier without knowing that every rank entered it (knows mask " +
                    std::to_string(knows_[static_cast<std::size_t>(r)]) + ")");
    }
  }
};

result simulate(const config& k) { return simulator(k).run(); }

// ---------------------------------------------------------------------------------------------
// Sweeps

/// Runs configurations, reports the first few failures in full, and checks the count at the end.
struct tally {
  int sims = 0, failures = 0;
  void run(const config& k) {
    ++sims;
    const std::string e = simulate(k).error;
    if (!e.empty() && ++failures <= 8) FAIL_CHECK(e);
  }
  void report() const {
    INFO(sims << " configurations simulated, " << failures << " failed");
    CHECK(failures == 0);
    CHECK(sims > 0);
  }
};

const algorithm all_algorithms[] = {algorithm::ring, algorithm::tree, algorithm::direct};

/// Awkward counts for world size n: 0, 1, n-1, n, n+1, primes, 2^k +- 1.
std::vector<std::size_t> awkward_counts(int n) {
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<std::size_t> c = {0, 1, un - 1, un, un + 1, 2 * un - 1, 2 * un + 1, 13, 97, 15, 17, 31, 33};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

/// Roots to try: every rank, except for n > 8 with longer vectors, where a sample (both ends, the
/// middle, and two in between) keeps the sanitizer run short.
std::vector<int> roots_for(int n, std::size_t count) {
  std::vector<int> r;
  if (n <= 8 || count <= 17) {
    for (int i = 0; i < n; ++i) r.push_back(i);
  } else {
    r = {0, 1, 5, n / 2, n - 2, n - 1};
  }
  return r;
}

/// Block counts for reduce_scatter / all_gather: uniform ones and uneven (v-form) patterns with zeros.
std::vector<std::pair<std::vector<std::size_t>, bool>> block_patterns(int n) {
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<std::pair<std::vector<std::size_t>, bool>> out;
  for (std::size_t c : {0, 1, 2, 3, 7, 13}) out.push_back({std::vector<std::size_t>(un, c), false});
  std::vector<std::size_t> a(un), b(un), c(un), d(un);
  for (std::size_t i = 0; i < un; ++i) {
    a[i] = i + 1;                 // [1,2,3,...]
    b[i] = (i * 7 + 3) % 5;       // with zeros
    c[i] = i + 1 == un ? 11 : 0;  // only the last rank has data
    d[i] = i == 0 ? 0 : 6 - i % 3;
  }
  for (auto* v : {&a, &b, &c, &d}) out.push_back({*v, true});
  return out;
}

}  // namespace

TEST_CASE("schedules: allreduce", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (std::size_t count : awkward_counts(n))
      for (algorithm alg : all_algorithms)
        for (bool one_shot : {true, false}) {
          if (!one_shot && alg != algorithm::direct) continue;
          for (bool in_place : {false, true})
            for (std::size_t seg : {unbounded, std::size_t{7}}) {
              config k;
              k.coll = collective::allreduce, k.alg = alg, k.n = n, k.count = count, k.one_shot = one_shot;
              k.in_place = in_place, k.seg_elems = seg, k.order = (n + static_cast<int>(count)) & 1;
              t.run(k);
            }
        }
  t.report();
}

TEST_CASE("schedules: reduce, every root", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (std::size_t count : awkward_counts(n))
      for (algorithm alg : all_algorithms)
        for (int root : roots_for(n, count))
          for (bool in_place : {false, true})
            for (std::size_t seg : {unbounded, std::size_t{7}}) {
              if (seg != unbounded && count <= seg) continue;  // the same single segment
              config k;
              k.coll = collective::reduce, k.alg = alg, k.n = n, k.count = count, k.root = root;
              k.in_place = in_place, k.seg_elems = seg, k.order = root & 1;
              t.run(k);
            }
  t.report();
}

TEST_CASE("schedules: broadcast, every root", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (std::size_t count : awkward_counts(n))
      for (algorithm alg : all_algorithms)
        for (int root : roots_for(n, count))
          for (bool in_place : {false, true})
            for (std::size_t slices : {1, 3, 40}) {
              if (slices != 1 && alg != algorithm::ring) continue;
              config k;
              k.coll = collective::broadcast, k.alg = alg, k.n = n, k.count = count, k.root = root;
              k.in_place = in_place, k.slices = slices, k.order = root & 1;
              t.run(k);
            }
  t.report();
}

TEST_CASE("schedules: reduce_scatter, both block layouts, v-form", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (const auto& [counts, varying] : block_patterns(n))
      for (algorithm alg : all_algorithms)
        for (bool contiguous : {false, true}) {
          if (alg == algorithm::tree && !contiguous) continue;  // the tree reduces whole vectors (dispatch.hpp)
          for (bool in_place : {false, true})
            for (std::size_t seg : {unbounded, std::size_t{5}, std::size_t{3} * static_cast<std::size_t>(n) + 1}) {
              config k;
              k.coll = collective::reduce_scatter, k.alg = alg, k.n = n, k.counts = counts, k.varying = varying;
              k.contiguous_rs = contiguous, k.in_place = in_place, k.seg_elems = seg, k.order = n & 1;
              t.run(k);
            }
        }
  t.report();
}

TEST_CASE("schedules: all_gather, v-form", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (const auto& [counts, varying] : block_patterns(n))
      for (algorithm alg : all_algorithms)
        for (bool in_place : {false, true}) {
          config k;
          k.coll = collective::all_gather, k.alg = alg, k.n = n, k.counts = counts, k.varying = varying;
          k.in_place = in_place, k.order = n & 1;
          t.run(k);
        }
  t.report();
}

TEST_CASE("schedules: all_to_all, v-form", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (int pattern = 0; pattern < 6; ++pattern)
      for (algorithm alg : {algorithm::ring, algorithm::direct}) {
        const std::size_t un = static_cast<std::size_t>(n);
        config k;
        k.coll = collective::all_to_all, k.alg = alg, k.n = n, k.order = pattern & 1;
        k.a2a.assign(un, std::vector<std::size_t>(un, 0));
        for (std::size_t r = 0; r < un; ++r)
          for (std::size_t c = 0; c < un; ++c) switch (pattern) {
              case 0: k.a2a[r][c] = 0; break;
              case 1: k.a2a[r][c] = 1; break;
              case 2: k.a2a[r][c] = 5; break;
              case 3: k.a2a[r][c] = (r * 3 + c * 5) % 4, k.varying = true; break;  // zeros among them
              case 4: k.a2a[r][c] = r == c ? 0 : r + 2 * c, k.varying = true; break;
              case 5: k.a2a[r][c] = (r + c) % 2 ? 0 : 3, k.varying = true; break;
            }
        t.run(k);
      }
  t.report();
}

TEST_CASE("schedules: barrier is a barrier", "[schedules]") {
  tally t;
  for (int n = 1; n <= max_ranks; ++n)
    for (algorithm alg : all_algorithms)
      for (int order : {0, 1}) {
        config k;
        k.coll = collective::barrier, k.alg = alg, k.n = n, k.order = order;
        t.run(k);
      }
  t.report();
}

TEST_CASE("schedules: ring over a permuted order (communicator_options::ring_order), every collective", "[schedules]") {
  tally t;
  for (int n = 2; n <= 9; ++n) {
    std::vector<int> reversed(static_cast<std::size_t>(n)), shuffled(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      reversed[static_cast<std::size_t>(i)] = n - 1 - i;
      const int step = n % 5 == 0 ? 3 : 5;  // coprime with n: i -> step * i + 3 is a permutation
      shuffled[static_cast<std::size_t>(i)] = (i * step + 3) % n;
    }
    for (const auto& ring : {reversed, shuffled}) {
      for (std::size_t count : {std::size_t{1}, static_cast<std::size_t>(n) + 1, std::size_t{31}})
        for (bool in_place : {false, true}) {
          config k;
          k.alg = algorithm::ring, k.n = n, k.count = count, k.in_place = in_place, k.ring = ring;
          k.coll = collective::allreduce;
          t.run(k);
          k.seg_elems = 7;
          t.run(k);
          k.seg_elems = unbounded;
          for (int root : {0, n / 2, n - 1}) {
            k.root = root;
            k.coll = collective::reduce;
            t.run(k);
            k.coll = collective::broadcast;
            for (std::size_t slices : {1, 3}) {
              k.slices = slices;
              t.run(k);
            }
            k.slices = 1;
          }
        }
      for (const auto& [counts, varying] : block_patterns(n)) {
        config k;
        k.alg = algorithm::ring, k.n = n, k.counts = counts, k.varying = varying, k.ring = ring;
        k.coll = collective::reduce_scatter;
        t.run(k);
        k.coll = collective::all_gather;
        t.run(k);
      }
    }
  }
  t.report();
}

TEST_CASE("schedules: direct reductions are the rank-order left fold whatever the count, shot and segmentation",
          "[schedules]") {
  // The simulator's final check already demands op(...op(op(x_0, x_1), x_2)..., x_{n-1}) for
  // direct; here the claim is made explicit: every variant gives bit-for-bit the same value.
  int compared = 0;
  for (int n = 1; n <= max_ranks; ++n)
    for (std::size_t count : {std::size_t{1}, std::size_t{13}, std::size_t{97}}) {
      std::vector<int> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      for (bool one_shot : {true, false})
        for (bool in_place : {false, true})
          for (std::size_t seg : {unbounded, std::size_t{1}, std::size_t{7}, std::size_t{50}}) {
            config k;
            k.coll = collective::allreduce, k.alg = algorithm::direct, k.n = n, k.count = count;
            k.one_shot = one_shot, k.in_place = in_place, k.seg_elems = seg;
            const result res = simulate(k);
            REQUIRE(res.error.empty());
            for (int r = 0; r < n; ++r)
              for (std::size_t j = 0; j < count; ++j) {
                sym want = left_fold(order, j);
                want.fin = n > 1;
                const sym& got = res.outputs[static_cast<std::size_t>(r)][j];
                if (!(got == want)) FAIL("n=" << n << " count=" << count << " rank " << r << " element " << j << ": " << show(got));
                ++compared;
              }
          }
      // reduce_scatter and reduce fold the same way
      config rs;
      rs.coll = collective::reduce_scatter, rs.alg = algorithm::direct, rs.n = n;
      rs.counts.assign(static_cast<std::size_t>(n), count), rs.seg_elems = 3;
      const result res = simulate(rs);
      REQUIRE(res.error.empty());
      for (int r = 0; r < n; ++r) {
        sym want = left_fold(order, static_cast<std::size_t>(r) * count);
        want.fin = n > 1;
        CHECK(res.outputs[static_cast<std::size_t>(r)][0] == want);
      }
    }
  CHECK(compared > 100000);
}

TEST_CASE("schedules: the symbolic values tell bracketings and orders apart", "[schedules]") {
  // Same contributions in the same order, different bracketing: a different value.
  CHECK_FALSE(tree_fold(0, 2, 4, 0) == left_fold({0, 1, 2, 3}, 0));
  CHECK(tree_fold(0, 1, 2, 0) == left_fold({0, 1}, 0));
  CHECK(tree_fold(0, 2, 3, 0) == left_fold({0, 1, 2}, 0));  // ((0,1),2)
  CHECK_FALSE(left_fold({1, 0}, 0) == left_fold({0, 1}, 0));
  CHECK_FALSE(left_fold({0, 1}, 0) == left_fold({0, 1}, 1));
  CHECK_FALSE(node(leaf(0, 0), leaf(1, 0)) == node(leaf(1, 0), leaf(0, 0)));
}

TEST_CASE("schedules: vector_blocks is a balanced partition, larger chunks first", "[schedules]") {
  for (int n = 1; n <= max_ranks; ++n)
    for (std::size_t count = 0; count <= 200; ++count) {
      const auto b = cs::vector_blocks(count, n);
      REQUIRE(b.size() == static_cast<std::size_t>(n));
      std::size_t next = 0;
      for (std::size_t c = 0; c < b.size(); ++c) {
        INFO("n=" << n << " count=" << count << " block " << c);
        REQUIRE(b[c].in == next);
        REQUIRE(b[c].out == next);
        REQUIRE(b[c].tmp == next);
        REQUIRE(b[c].count == b[c].recv_count);
        const std::size_t q = count / static_cast<std::size_t>(n);
        REQUIRE(b[c].count == q + (c < count % static_cast<std::size_t>(n) ? 1 : 0));
        next += b[c].count;
      }
      REQUIRE(next == count);
    }
}

// ---------------------------------------------------------------------------------------------
// The checker must be able to fail: broken schedules are caught, with the right diagnosis.

namespace {
config base_config(collective c, algorithm a, int n, std::size_t count) {
  config k;
  k.coll = c, k.alg = a, k.n = n, k.count = count;
  k.counts.assign(static_cast<std::size_t>(n), count);
  return k;
}

/// The unbroken configuration passes; the broken one fails: returns its diagnosis.
std::string must_fail(const config& k) {
  INFO(describe(k));
  config ok = k;
  ok.mutate = nullptr;
  ok.claim_not_in_place = false;
  REQUIRE(simulate(ok).error.empty());
  const std::string e = simulate(k).error;
  REQUIRE_FALSE(e.empty());
  return e;
}

/// Applies f to the i-th step of kind `kind` at rank `rank` (i < 0: every such step).
std::function<void(int, cs::steps&)> at(int rank, cs::step_kind kind, int i, std::function<void(cs::steps&, std::size_t)> f) {
  return [=](int r, cs::steps& s) {
    if (r != rank && rank >= 0) return;
    int seen = 0;
    for (std::size_t j = 0; j < s.size(); ++j)
      if (s[j].kind == kind && (i < 0 || seen++ == i)) {
        f(s, j);
        if (i >= 0) return;
      }
  };
}
}  // namespace

TEST_CASE("schedules: the checker catches broken schedules", "[schedules]") {
  using sk = cs::step_kind;
  SECTION("operand order swapped (tree, direct) is not rank order") {
    for (algorithm a : {algorithm::tree, algorithm::direct}) {
      config k = base_config(collective::allreduce, a, 5, 7);
      k.mutate = at(0, sk::recv_reduce, -1, [](cs::steps& s, std::size_t j) { s[j].incoming_first = !s[j].incoming_first; });
      CHECK_THAT(must_fail(k), Catch::Contains("rank order"));
    }
  }
  SECTION("operand order swapped in the ring is not the documented order") {
    config k = base_config(collective::reduce_scatter, algorithm::ring, 4, 3);
    k.mutate = at(2, sk::recv_reduce, 1, [](cs::steps& s, std::size_t j) { s[j].incoming_first = false; });
    CHECK_THAT(must_fail(k), Catch::Contains("documented ring order"));
  }
  SECTION("a dropped receive leaves a message unreceived or an element incomplete") {
    config k = base_config(collective::allreduce, algorithm::direct, 4, 5);
    k.mutate = at(2, sk::recv_reduce, 0, [](cs::steps& s, std::size_t j) { s.erase(s.begin() + static_cast<std::ptrdiff_t>(j)); });
    must_fail(k);
  }
  SECTION("receive before send around the ring deadlocks") {
    config k = base_config(collective::allreduce, algorithm::ring, 4, 8);
    k.mutate = [](int, cs::steps& s) { std::swap(s[0], s[1]); };
    CHECK_THAT(must_fail(k), Catch::Contains("deadlock"));
  }
  SECTION("in-place one-shot direct built as out-of-place overwrites input peers still read") {
    config k = base_config(collective::allreduce, algorithm::direct, 3, 4);
    k.in_place = true, k.claim_not_in_place = true;
    CHECK_THAT(must_fail(k), Catch::Contains("buffer hazard"));
  }
  SECTION("a dropped wait_sends is caught") {
    config k = base_config(collective::broadcast, algorithm::direct, 3, 4);
    k.mutate = at(0, sk::wait_sends, -1, [](cs::steps& s, std::size_t j) { s[j].kind = sk::copy, s[j].a = s[j].dst = {}; });
    CHECK_THAT(must_fail(k), Catch::Contains("not waited for"));
    config h = base_config(collective::allreduce, algorithm::direct, 3, 4);
    h.in_place = true;
    h.mutate = at(1, sk::wait_sends, 0, [](cs::steps& s, std::size_t j) { s.erase(s.begin() + static_cast<std::ptrdiff_t>(j)); });
    CHECK_THAT(must_fail(h), Catch::Contains("buffer hazard"));
  }
  SECTION("a barrier one round short is not a barrier") {
    config k = base_config(collective::barrier, algorithm::ring, 5, 0);
    k.mutate = [](int, cs::steps& s) { s.resize(s.size() - 3); };
    CHECK_THAT(must_fail(k), Catch::Contains("barrier"));
  }
  SECTION("a wrong wire type is caught") {
    config k = base_config(collective::allreduce, algorithm::tree, 4, 6);
    k.mutate = at(3, sk::recv, 0, [](cs::steps& s, std::size_t j) { s[j].wire = cs::buffer::scratch; });
    CHECK_THAT(must_fail(k), Catch::Contains("wire"));
  }
  SECTION("a non-root touching its output in reduce is caught") {
    config k = base_config(collective::reduce, algorithm::ring, 4, 6);
    k.root = 2;
    k.mutate = at(1, sk::wait_sends, 0, [](cs::steps& s, std::size_t j) {
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(j) + 1, cs::step{sk::copy, -1, {cs::buffer::input, 0, 1}, {}, {cs::buffer::output, 0, 1}});
    });
    CHECK_THAT(must_fail(k), Catch::Contains("must not touch"));
  }
  SECTION("writing the input is caught") {
    config k = base_config(collective::allreduce, algorithm::ring, 3, 6);
    k.mutate = at(1, sk::recv_reduce, 0, [](cs::steps& s, std::size_t j) { s[j].dst.buf = cs::buffer::input; });
    CHECK_THAT(must_fail(k), Catch::Contains("input buffer"));
  }
  SECTION("a partial result written to the output is caught") {
    config k = base_config(collective::allreduce, algorithm::tree, 4, 3);
    k.mutate = at(0, sk::recv_reduce, 0, [](cs::steps& s, std::size_t j) { s[j].dst.buf = cs::buffer::output; });
    CHECK_THAT(must_fail(k), Catch::Contains("partial result"));
  }
  SECTION("reading data never written is caught") {
    config k = base_config(collective::all_gather, algorithm::ring, 4, 2);
    k.mutate = at(0, sk::copy, 0, [](cs::steps& s, std::size_t j) { s.erase(s.begin() + static_cast<std::ptrdiff_t>(j)); });
    CHECK_THAT(must_fail(k), Catch::Contains("never written"));
  }
  SECTION("an output block left unwritten is caught") {
    config k = base_config(collective::all_to_all, algorithm::direct, 3, 0);
    k.a2a.assign(3, std::vector<std::size_t>(3, 2));
    k.mutate = at(1, sk::copy, 0, [](cs::steps& s, std::size_t j) { s.erase(s.begin() + static_cast<std::ptrdiff_t>(j)); });
    CHECK_THAT(must_fail(k), Catch::Contains("never written"));
  }
  SECTION("all_to_all_v whose pair counts disagree is caught, not waited on (keep_empty)") {
    config k = base_config(collective::all_to_all, algorithm::ring, 3, 0);
    k.a2a.assign(3, std::vector<std::size_t>(3, 1));
    k.varying = true;
    // rank 0 believes it sends 0 elements to rank 2; rank 2 still expects 1
    k.mutate = at(0, sk::send, -1, [](cs::steps& s, std::size_t j) {
      if (s[j].peer == 2) s[j].a.count = 0;
    });
    CHECK_THAT(must_fail(k), Catch::Contains("receives 1 elements but rank 0 sent"));
  }
}

TEST_CASE("schedule cache: equal parameters reuse the steps, any change rebuilds them", "[schedule]") {
  collx::detail::schedule_cache cache;
  auto set = [&](int n, int r, std::size_t count, int root, bool one_shot) {
    cs::params& p = cache.params();
    p.coll = collx::collective::allreduce;
    p.world_size = n;
    p.rank = r;
    p.root = root;
    p.one_shot = one_shot;
    p.slices = 1;
    p.keep_empty = false;
    p.ring.clear();
    cs::vector_blocks_into(p.blocks, count, n);
    return p;
  };
  const collx::algorithm algs[] = {collx::algorithm::direct, collx::algorithm::ring, collx::algorithm::tree};
  const cs::steps* first = nullptr;
  for (int round = 0; round < 2; ++round)
    for (int n : {2, 3})
      for (std::size_t count : {std::size_t{7}, std::size_t{8}})
        for (collx::algorithm a : algs)
          for (bool in_place : {false, true})
            for (bool one_shot : {true, false}) {
              const cs::params p = set(n, n - 1, count, 0, one_shot);
              const cs::steps& got = cache.steps(a, in_place);
              CHECK(got == cs::make_schedule(a, p, in_place));  // never a stale schedule
              if (!first) first = &got;
              CHECK(&got == first);  // one entry, reused storage
              // The same call again returns the cached steps unchanged.
              CHECK(cache.steps(a, in_place) == got);
            }
}

TEST_CASE("schedule cache: the cost model's choice is asked again whenever the query changes", "[schedule]") {
  collx::detail::schedule_cache cache;
  int asked = 0;
  const collx::cost_model model;
  auto choose = [&](const collx::selection_query& q) {
    ++asked;
    return model.choose(q);
  };
  std::vector<collx::selection_query> queries;
  for (collx::collective c : {collx::collective::allreduce, collx::collective::all_gather, collx::collective::broadcast})
    for (int n : {2, 5})
      for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20, std::size_t{1} << 30})
        for (bool commutative : {true, false}) queries.push_back({c, n, bytes, commutative});
  for (const auto& q : queries) {
    const int before = asked;
    CHECK(cache.choice(q, choose) == model.choose(q));
    CHECK(asked == before + 1);  // a new query is always asked
    CHECK(cache.choice(q, choose) == model.choose(q));
    CHECK(asked == before + 1);  // the same one again is not
  }
  // A chooser that throws leaves nothing remembered, not even the query before: asked again.
  CHECK_THROWS(cache.choice(queries.front(), [](const collx::selection_query&) -> collx::algorithm { throw 1; }));
  const int before = asked;
  CHECK(cache.choice(queries.back(), choose) == model.choose(queries.back()));
  CHECK(asked == before + 1);
}

TEST_CASE("count_array: counts kept inline up to its capacity, on the heap beyond", "[schedule]") {
  using collx::detail::count_array;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, count_array::inline_capacity,
                        count_array::inline_capacity + 1, std::size_t{1000}}) {
    count_array a(n, 41);
    REQUIRE(a.size() == n);
    REQUIRE(a.span().size() == n);
    for (std::size_t i = 0; i < n; ++i) CHECK(a[i] == 41);
    for (std::size_t i = 0; i < n; ++i) a[i] = i * 3 + 1;  // distinct per index
    const auto s = a.span();
    for (std::size_t i = 0; i < n; ++i) CHECK(s[i] == i * 3 + 1);
    const bool inside = reinterpret_cast<const std::byte*>(s.data()) >= reinterpret_cast<const std::byte*>(&a) &&
                        reinterpret_cast<const std::byte*>(s.data()) < reinterpret_cast<const std::byte*>(&a) + sizeof a;
    CHECK(inside == (n <= count_array::inline_capacity));
  }
  CHECK(count_array(3).span()[2] == 0);  // the default value
}
