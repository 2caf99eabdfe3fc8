// The ring forms of collx's device collectives (collx/cuda/ring_plan.hpp): plain C++, no CUDA.
// Ring orders are checked; every element of a call lies in exactly one piece of one channel, each
// channel with its own blocks and part of the slot; and the protocol is played on the host, with
// one channel and several, block by block in random orders, with the kernel's rules (ring_kernel and
// barrier in cuda/device_collectives.cuh): each step's reads and writes of the staging slots, its
// flags, and the barrier peers ring_barrier_peers gives, over sequences of ring and direct calls.
// Every slot cell carries the epoch it was staged at, so a read that finds another epoch (a slot
// overwritten before its reader got there) is caught, and every output is compared with an
// independent fold in the ring's order of combination (a non-commutative op, so a wrong order
// shows). Three mutations must be caught: the call's first barrier meeting only the neighbours,
// blocks placing partials (wider than elements) outside their own bytes of a slot, and a channel
// with fewer chunks ending before the call's last chunk.
#include <catch2/catch.hpp>

#include <collx/cuda/ring_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace gpu = collx::gpu;

TEST_CASE("device ring order: a permutation of the ranks, or the rank order", "[cuda]") {
  const gpu::ring_order id = gpu::make_ring_order({}, 4);
  for (int k = 0; k < 4; ++k) CHECK(id.at(k) == k);
  CHECK(id.at(-1) == 3);
  CHECK(id.at(5) == 1);
  const gpu::ring_order r = gpu::make_ring_order({2, 0, 3, 1}, 4);
  CHECK(r.position_of(3) == 2);
  CHECK(r.at(r.position_of(0) + 1) == 3);
  auto message_of = [](const std::vector<int>& v, int world) {
    try {
      (void)gpu::make_ring_order(v, world);
    } catch (const collx::error& e) {
      CHECK(e.code() == collx::errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message_of({0, 1, 1}, 3).find("rank 1 twice") != std::string::npos);
  CHECK(message_of({0, 3, 1}, 3).find("holds rank 3") != std::string::npos);
  CHECK(message_of({0, 1}, 3).find("lists 2 ranks") != std::string::npos);
  CHECK(message_of({}, 17).find("17 ranks") != std::string::npos);
}

TEST_CASE("device ring by default: the rank order, or a ring whose every hop has peer access", "[cuda]") {
  // reach[a] bit b, symmetric here; every rank reaches itself.
  const auto reach_of = [](int n, const std::vector<std::pair<int, int>>& pairs) {
    std::vector<std::uint64_t> r(static_cast<std::size_t>(n));
    for (int a = 0; a < n; ++a) r[static_cast<std::size_t>(a)] |= std::uint64_t{1} << a;
    for (const auto& [a, b] : pairs) r[static_cast<std::size_t>(a)] |= std::uint64_t{1} << b, r[static_cast<std::size_t>(b)] |= std::uint64_t{1} << a;
    return r;
  };
  const auto hops_ok = [](const gpu::ring_order& ring, const std::vector<std::uint64_t>& reach) {
    std::vector<int> ranks(ring.order, ring.order + ring.world);
    std::sort(ranks.begin(), ranks.end());
    for (int k = 0; k < ring.world; ++k) {
      if (ranks[static_cast<std::size_t>(k)] != k) return false;  // a permutation
      const int a = ring.at(k), b = ring.at(k + 1);
      if (!((reach[static_cast<std::size_t>(a)] >> b) & 1u) || !((reach[static_cast<std::size_t>(b)] >> a) & 1u)) return false;
    }
    return true;
  };
  const auto is_identity = [](const gpu::ring_order& r) {
    for (int k = 0; k < r.world; ++k)
      if (r.order[k] != k) return false;
    return true;
  };
  // Every pair: the rank order.
  std::vector<std::pair<int, int>> all;
  for (int a = 0; a < 8; ++a)
    for (int b = a + 1; b < 8; ++b) all.push_back({a, b});
  CHECK(is_identity(gpu::ring_through_reach(reach_of(8, all), 8)));
  // The DGX-1 (peer access = NVLink: 0-1,0-2,0-3,0-4, 1-2,1-3,1-5, 2-3,2-6, 3-7, 4-5,4-6,4-7, 5-6,5-7,
  // 6-7): the rank order's 3-4 and 7-0 hops lack it; the ring found has none.
  const std::vector<std::pair<int, int>> dgx1{{0, 1}, {0, 2}, {0, 3}, {0, 4}, {1, 2}, {1, 3}, {1, 5}, {2, 3},
                                              {2, 6}, {3, 7}, {4, 5}, {4, 6}, {4, 7}, {5, 6}, {5, 7}, {6, 7}};
  const auto dgx = reach_of(8, dgx1);
  CHECK_FALSE(hops_ok(gpu::ring_order::identity(8), dgx));
  const gpu::ring_order found = gpu::ring_through_reach(dgx, 8);
  CHECK(hops_ok(found, dgx));
  CHECK(found.order[0] == 0);
  // Ranks 0, 1, 2, 3 on DGX-1 GPUs 0, 5, 1, 4 (the bootstrap test's): 0-1 and 2-3 lack peer access.
  const auto four = reach_of(4, {{0, 2}, {0, 3}, {1, 2}, {1, 3}});
  const gpu::ring_order r4 = gpu::ring_through_reach(four, 4);
  CHECK(hops_ok(r4, four));
  CHECK(std::vector<int>(r4.order, r4.order + 4) == std::vector<int>{0, 2, 1, 3});
  // A partial reach that the rank order already satisfies: kept.
  CHECK(is_identity(gpu::ring_through_reach(reach_of(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}), 4)));
  // No such ring (two islands; a star): the rank order. Two ranks: the rank order.
  CHECK(is_identity(gpu::ring_through_reach(reach_of(4, {{0, 1}, {2, 3}}), 4)));
  CHECK(is_identity(gpu::ring_through_reach(reach_of(5, {{0, 1}, {0, 2}, {0, 3}, {0, 4}}), 5)));
  CHECK(is_identity(gpu::ring_through_reach(reach_of(2, {}), 2)));
  // One-way access is not enough (the ring's flags go both ways).
  auto one_way = reach_of(3, {{0, 1}, {1, 2}});
  one_way[0] |= std::uint64_t{1} << 2;  // 0 reaches 2, 2 does not reach 0
  CHECK(is_identity(gpu::ring_through_reach(one_way, 3)));
  // The search gives up after max_steps extensions: the rank order.
  CHECK(is_identity(gpu::ring_through_reach(dgx, 8, 2)));
  // Every reach of 5 ranks (symmetric, 2^10 of them): a ring with all hops reachable whenever one
  // exists (checked by trying all 24 rings through rank 0), the rank order otherwise.
  std::vector<std::pair<int, int>> pairs5;
  for (int a = 0; a < 5; ++a)
    for (int b = a + 1; b < 5; ++b) pairs5.push_back({a, b});
  for (unsigned mask = 0; mask < (1u << pairs5.size()); ++mask) {
    std::vector<std::pair<int, int>> chosen;
    for (std::size_t i = 0; i < pairs5.size(); ++i)
      if ((mask >> i) & 1u) chosen.push_back(pairs5[i]);
    const auto reach = reach_of(5, chosen);
    std::vector<int> perm{1, 2, 3, 4};
    bool exists = false;
    do {
      gpu::ring_order r;
      r.world = 5;
      r.order[0] = 0;
      for (int k = 0; k < 4; ++k) r.order[k + 1] = perm[static_cast<std::size_t>(k)];
      exists = exists || hops_ok(r, reach);
    } while (std::next_permutation(perm.begin(), perm.end()));
    const gpu::ring_order got = gpu::ring_through_reach(reach, 5);
    INFO("reach mask " << mask);
    CHECK(hops_ok(got, reach) == exists);
    if (!exists) CHECK(is_identity(got));
  }
}

TEST_CASE("device ring plans: every element in one piece, pieces on vector boundaries, steps as the ring needs", "[cuda]") {
  for (auto phase : {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather})
    for (int n : {2, 3, 5, 8})
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}, std::size_t{100003}})
        for (std::size_t vector : {std::size_t{1}, std::size_t{4}}) {
          INFO("phase " << static_cast<int>(phase) << " world " << n << " count " << count << " vector " << vector);
          const gpu::ring_order ring = gpu::make_ring_order({}, n);
          const gpu::ring_plan p = gpu::plan_ring(phase, ring, n - 1, count, 4, vector, 4096, 64);
          CHECK(p.prev == n - 2);
          CHECK(p.next == 0);
          CHECK(p.piece * 4 <= 4096);
          const bool blocked = phase != gpu::ring_phase::all_reduce;
          std::vector<int> hits(blocked ? count * static_cast<std::size_t>(n) : count, 0);
          for (std::size_t c = 0; c < p.chunks; ++c)
            for (int k = 0; k < n; ++k) {
              const gpu::piece_span s = p.span(c, k);
              CHECK(s.length <= p.piece);
              // Vector-aligned pieces (the blocked phases: where the block size allows 16-byte
              // accesses at all; otherwise the kernel runs its scalar path).
              if (s.length > 0 && (!blocked || count % vector == 0)) CHECK(s.offset % vector == 0);
              for (std::size_t i = s.offset; i < s.offset + s.length; ++i) ++hits.at(i);
              // Blocks cover the piece once, inside their chunk-0 offsets.
              std::size_t covered = 0;
              for (unsigned b = 0; b < p.blocks; ++b) {
                const gpu::block_range r = p.range(s.length, b);
                CHECK(r.begin <= r.end);
                CHECK(r.end <= s.length);
                covered += r.end - r.begin;
              }
              CHECK(covered == s.length);
            }
          CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
          // Steps: each position's piece is completed (written to the output) exactly where the
          // phase says, and every staged step but the last is followed by a barrier.
          CHECK(p.steps() == (phase == gpu::ring_phase::all_reduce ? 2u * (n - 1) : n - 1u));
          for (int pos = 0; pos < n; ++pos) {
            gpu::ring_plan q = p;
            q.position = pos;
            std::vector<int> written(static_cast<std::size_t>(n), 0);
            for (unsigned s = 0; s <= q.steps(); ++s) {
              const gpu::ring_step st = q.step(s);
              CHECK(st.stage == (s < q.steps()));
              CHECK(st.read_prev == (s > 0));
              if (st.write_output) ++written[static_cast<std::size_t>(st.piece)];
            }
            for (int k = 0; k < n; ++k)
              CHECK(written[static_cast<std::size_t>(k)] == (phase == gpu::ring_phase::reduce_scatter ? (k == pos) : 1));
          }
        }
  CHECK_THROWS_AS(gpu::plan_ring(gpu::ring_phase::all_reduce, gpu::make_ring_order({}, 1), 0, 10, 4, 1, 4096, 8), collx::error);
  CHECK_THROWS_AS(gpu::plan_ring(gpu::ring_phase::all_reduce, gpu::make_ring_order({}, 2), 0, 10, 4096, 4, 4096, 8), collx::error);
}

TEST_CASE("device ring calls over channels: each element in one channel's piece, each channel its blocks and slot part", "[cuda]") {
  constexpr std::size_t slot = 16384, elem = 4;
  for (auto phase : {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather})
    for (int n : {2, 3, 5, 8})
      for (int wanted : {1, 2, 3, 6, 8})
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4099}, std::size_t{100003}})
          for (std::size_t vector : {std::size_t{1}, std::size_t{4}})
            for (unsigned cap : {4u, 64u}) {
              INFO("phase " << static_cast<int>(phase) << " world " << n << " channels " << wanted << " count " << count << " vector "
                            << vector << " cap " << cap);
              // Channel c: the rank order turned by c, every other one reversed.
              std::vector<std::vector<int>> lists;
              for (int c = 0; c < wanted; ++c) {
                lists.emplace_back();
                for (int k = 0; k < n; ++k) lists.back().push_back(c % 2 ? (c + n - k) % n : (c + k) % n);
              }
              const gpu::ring_channels rings = gpu::make_ring_channels(lists, n);
              const int rank = n - 1;
              const gpu::ring_call call = gpu::plan_ring_call(phase, rings, rank, count, elem, vector, slot, cap);
              REQUIRE(call.channels >= 1);
              CHECK(call.channels <= std::min<int>(wanted, static_cast<int>(cap)));
              const std::size_t vectors = (count + vector - 1) / vector;
              if (vectors >= static_cast<std::size_t>(wanted) && cap >= static_cast<unsigned>(wanted)) CHECK(call.channels == wanted);
              if (call.channels == 1) {  // one channel: plan_ring's plan
                const gpu::ring_plan one = gpu::plan_ring(phase, rings.ring[0], rank, count, elem, vector, slot, cap);
                CHECK(call.channel[0].piece == one.piece);
                CHECK(call.channel[0].chunks == one.chunks);
                CHECK(call.channel[0].blocks == one.blocks);
                CHECK(call.channel[0].offset == 0);
                CHECK(call.channel[0].slot_offset == 0);
              }
              const bool blocked = phase != gpu::ring_phase::all_reduce;
              std::vector<int> hits(blocked ? count * static_cast<std::size_t>(n) : count, 0);
              unsigned next_block = 0;
              std::size_t most_chunks = 0, slot_end = 0;
              for (int c = 0; c < call.channels; ++c) {
                const gpu::ring_plan& p = call.channel[c];
                // Its own ring, its own blocks after the previous channel's, its own part of the slot.
                CHECK(p.ring.position_of(rank) == rings.ring[c].position_of(rank));
                CHECK(p.prev == rings.ring[c].at(p.position - 1));
                CHECK(p.next == rings.ring[c].at(p.position + 1));
                CHECK(p.first_block == next_block);
                for (unsigned b = p.first_block; b < p.first_block + p.blocks; ++b) CHECK(call.channel_of(b) == c);
                next_block += p.blocks;
                CHECK(p.slot_offset >= slot_end);
                CHECK(p.slot_offset % 256 == 0);
                slot_end = p.slot_offset + p.piece * elem;
                CHECK(slot_end <= slot);
                CHECK(p.region_offset(p.blocks - 1) + (p.piece - p.region_first(p.blocks - 1)) * elem <= slot_end);
                CHECK(p.offset % vector == 0);
                CHECK(p.count > 0);
                most_chunks = std::max(most_chunks, p.chunks);
                for (std::size_t ch = 0; ch < p.chunks; ++ch)
                  for (int k = 0; k < n; ++k) {
                    const gpu::piece_span s = p.span(ch, k);
                    for (std::size_t i = s.offset; i < s.offset + s.length; ++i) ++hits.at(i);
                  }
              }
              CHECK(call.blocks == next_block);
              CHECK(call.blocks <= cap);
              CHECK(call.chunks == most_chunks);
              CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
              // owner_of finds every element's channel and position.
              for (std::size_t i : {std::size_t{0}, hits.size() / 2, hits.size() - 1}) {
                const gpu::ring_piece_owner o = gpu::owner_of(call, i);
                REQUIRE(o.channel >= 0);
                const gpu::ring_plan& p = call.channel[o.channel];
                bool inside = false;
                for (std::size_t ch = 0; ch < p.chunks; ++ch) {
                  const gpu::piece_span s = p.span(ch, o.position);
                  inside = inside || (i >= s.offset && i < s.offset + s.length);
                }
                CHECK(inside);
              }
              CHECK(gpu::owner_of(call, hits.size()).channel == -1);
            }
  // Rings: at most max_device_channels, each a permutation, the channel named.
  CHECK(gpu::make_ring_channels({}, 3).count == 1);
  CHECK_THROWS_WITH(gpu::make_ring_channels({{0, 1, 2}, {0, 2, 2}}, 3), Catch::Contains("ring of channel 1"));
  CHECK_THROWS_WITH(gpu::make_ring_channels({{0, 1, 2}, {}}, 3), Catch::Contains("channel 1 is empty"));
  CHECK_THROWS_WITH(gpu::make_ring_channels({{}}, 3), Catch::Contains("channel 0 is empty"));
  CHECK_THROWS_WITH(gpu::make_ring_channels({{0, 1, 1}}, 3), "gpu: the ring of channel 0: it lists rank 1 twice (every rank once)");
  // Rotations and repeated rings are rings too (more channels over the same links).
  CHECK(gpu::make_ring_channels({{2, 0, 1}, {2, 0, 1}}, 3).count == 2);
  CHECK_THROWS_WITH(gpu::make_ring_channels(std::vector<std::vector<int>>(gpu::max_device_channels + 1, {0, 1}), 2),
                    Catch::Contains("at most 8 channels"));
  CHECK_THROWS_AS(gpu::plan_ring_call(gpu::ring_phase::all_reduce, gpu::ring_channels{}, 0, 10, 4, 1, 4096, 8), collx::error);
}

namespace {
// Seconds of a ring call as its plan runs it (an independent count of what ring_crossover_bytes
// models in closed form): one call's fixed cost, a barrier after every staged step of every chunk,
// and the bytes this rank reads from its predecessor, summed step by step over the plan's pieces.
double ring_seconds_by_plan(gpu::ring_phase phase, int world, std::size_t vector_bytes, std::size_t slot_bytes,
                            const gpu::direct_cost& d, const gpu::ring_cost& r) {
  const std::size_t count = phase == gpu::ring_phase::all_reduce ? vector_bytes : vector_bytes / static_cast<std::size_t>(world);
  const gpu::ring_plan p = gpu::plan_ring(phase, gpu::ring_order::identity(world), 0, count, 1, 1, slot_bytes, 1);
  double barriers = 0, read = 0;
  for (std::size_t c = 0; c < p.chunks; ++c)
    for (unsigned s = 0; s <= p.steps(); ++s) {
      const gpu::ring_step st = p.step(s);
      if (st.stage) barriers += 1;
      if (st.read_prev) read += static_cast<double>(p.span(c, st.piece).length);
    }
  return d.call_seconds + barriers * r.step_seconds + read / r.hop_bytes_per_second;
}
// The direct forms' seconds: all-reduce the faster of one-shot (every peer's whole input) and
// two-shot (every peer's piece twice, two calls); the halves one call reading every peer's block.
double direct_seconds(gpu::ring_phase phase, int world, std::size_t vector_bytes, const gpu::direct_cost& d) {
  const double n = static_cast<double>(vector_bytes), peers = world - 1, rate = d.peer_read_bytes_per_second;
  if (phase != gpu::ring_phase::all_reduce) return d.call_seconds + peers * (n / world) / rate;
  return std::min(d.call_seconds + peers * n / rate, 2 * d.call_seconds + 2 * peers * (n / world) / rate);
}
}  // namespace

TEST_CASE("device ring or direct: the ring from the size where its hops' speed pays for its barriers", "[cuda]") {
  const std::size_t slot = 4 << 20;
  const gpu::direct_cost nvswitch{};
  const gpu::ring_cost nvswitch_hops{18 * 20.6e9, 1.6e-6};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto phase : {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather}) {
    // NVSwitch: a hop gets what a rank reads from all its peers, so the ring never pays.
    for (int world = 1; world <= 8; ++world) CHECK(gpu::ring_crossover_bytes(phase, world, slot, nvswitch, nvswitch_hops) == SIZE_MAX);
    // All through host memory: the same per byte either way, so never either.
    CHECK(gpu::ring_crossover_bytes(phase, 8, slot, gpu::host_memory_direct_cost, gpu::host_memory_ring_cost) == SIZE_MAX);
    // The default hop rate is not known (0): the direct figures' rate, on device memory or mixed.
    for (const bool device : {true, false}) CHECK(gpu::ring_crossover_bytes_where(phase, 8, slot, device, nvswitch, true, {}) == SIZE_MAX);
    // Figures that are not finite and positive never choose the ring.
    for (const gpu::ring_cost bad : {gpu::ring_cost{0, 1e-6}, gpu::ring_cost{-40e9, 1e-6}, gpu::ring_cost{nan, 1e-6},
                                     gpu::ring_cost{40e9, nan}, gpu::ring_cost{40e9, -1.0}})
      CHECK(gpu::ring_crossover_bytes(phase, 8, slot, gpu::host_memory_direct_cost, bad) == SIZE_MAX);
    CHECK(gpu::ring_crossover_bytes(phase, 8, slot, gpu::direct_cost{nan, 12e9}, gpu::ring_cost{40e9, 1e-6}) == SIZE_MAX);
    CHECK(gpu::ring_crossover_bytes(phase, 8, 0, gpu::host_memory_direct_cost, gpu::ring_cost{40e9, 1e-6}) == SIZE_MAX);
    CHECK(gpu::predict_ring(phase, 1000, 1, slot, nvswitch, nvswitch_hops) == std::numeric_limits<double>::infinity());
    CHECK(gpu::predict_ring(phase, 0, 8, 0, nvswitch, nvswitch_hops) == std::numeric_limits<double>::infinity());  // 0 x inf: nan unguarded
  }
  // A DGX-1-like machine: the direct forms stage through host memory, the ring's hops are NVLink.
  const gpu::ring_cost nvlink{2 * 20e9, 2e-6};
  for (const auto phase : {gpu::ring_phase::all_reduce, gpu::ring_phase::reduce_scatter, gpu::ring_phase::all_gather})
    for (int world : {2, 3, 4, 8}) {
      INFO("phase " << static_cast<int>(phase) << ", world " << world);
      const std::size_t x = gpu::ring_crossover_bytes(phase, world, slot, gpu::host_memory_direct_cost, nvlink);
      REQUIRE(x != SIZE_MAX);
      // The break-even size of the closed form, to the byte.
      CHECK(gpu::predict_ring(phase, x, world, slot, gpu::host_memory_direct_cost, nvlink) <=
            gpu::predict_direct_call(phase, x, world, gpu::host_memory_direct_cost));
      if (x > 1)
        CHECK(gpu::predict_ring(phase, x - 1, world, slot, gpu::host_memory_direct_cost, nvlink) >
              gpu::predict_direct_call(phase, x - 1, world, gpu::host_memory_direct_cost));
      // The plan's own steps and reads agree: the direct forms win at a quarter of it, the ring
      // at four times it (sizes rounded to whole pieces).
      const std::size_t w = static_cast<std::size_t>(world);
      for (const std::size_t bytes : {x / 4 / w * w, (4 * x + w - 1) / w * w}) {
        if (bytes == 0) continue;
        INFO(bytes << " B");
        const double ring = ring_seconds_by_plan(phase, world, bytes, slot, gpu::host_memory_direct_cost, nvlink);
        const double direct = direct_seconds(phase, world, bytes, gpu::host_memory_direct_cost);
        CHECK((bytes < x ? ring > direct : ring < direct));
      }
    }
  // Slower barriers or a slower hop move the crossover up; a hop at the direct rate never pays.
  const auto ar = [&](const gpu::ring_cost& r) {
    return gpu::ring_crossover_bytes(gpu::ring_phase::all_reduce, 8, slot, gpu::host_memory_direct_cost, r);
  };
  CHECK(ar({2 * 20e9, 20e-6}) > ar(nvlink));
  CHECK(ar({20e9, 2e-6}) > ar(nvlink));
  CHECK(ar({12e9, 2e-6}) == SIZE_MAX);
  // On 8 ranks with the figures above the ring's 14 barriers of 2 us cost 18 us more than
  // two-shot's second call of 10 us; reading at 40 GB/s instead of 12 pays for them at ~180 KB.
  CHECK(ar(nvlink) > (64u << 10));
  CHECK(ar(nvlink) < (1u << 20));
  // Sizes as the calls count them: blocks x count x element size, saturating.
  CHECK(gpu::call_vector_bytes(9001, 1, 4) == 36004);
  CHECK(gpu::call_vector_bytes(3000, 3, 4) == 36000);
  CHECK(gpu::call_vector_bytes(SIZE_MAX / 4, 8, 4) == SIZE_MAX);
  CHECK(gpu::call_vector_bytes(SIZE_MAX / 2, 1, 4) == SIZE_MAX);
  CHECK(gpu::call_vector_bytes(0, 8, 4) == 0);
}

TEST_CASE("device ring signatures: never a direct or two-shot call's, whatever the count", "[cuda]") {
  // A separate hash of the count would let 1 count in 64 pass a ring call off as a direct one
  // (the direct rank would fold partial sums); flipping count bits cannot.
  using collx::collective;
  int checked = 0;
  for (int n : {2, 3, 8})
    for (std::size_t count = 1; count <= 5000; ++count) {
      const auto direct = gpu::device_signature::make(collective::allreduce, "float16", 2, "sum", -1, count);
      const gpu::v_layout pieces = gpu::two_shot_pieces(count, n, 8);
      const auto rs = gpu::device_signature::make(collective::allreduce, "float16", 2, "sum", -1, pieces.longest, gpu::two_shot_layout(pieces, 0));
      const auto ag = gpu::device_signature::make(collective::allreduce, "float16", 2, "sum", -1, pieces.longest, gpu::two_shot_layout(pieces, 1));
      const auto ring = gpu::ring_signature(direct, {rs, ag});
      CHECK(ring.bits != direct.bits);
      CHECK(ring.bits != rs.bits);
      CHECK(ring.bits != ag.bits);
      CHECK(ring.bits != gpu::rejected_signature_bits);
      CHECK(gpu::device_signature::differing_fields(ring, direct) == "count (or window and offset, or algorithm)");
      ++checked;
    }
  CHECK(checked == 15000);
  // Every count field value but the reserved one is reachable, and the flips stay in that field.
  const gpu::device_signature d{gpu::rejected_signature_bits ^ (1u << 18)};
  CHECK(gpu::ring_signature(d).bits != gpu::rejected_signature_bits);
}

namespace {

// The op of the played calls: a * K + x, wrapping. Not commutative, so the order of combination
// shows in the result.
std::uint64_t fold(std::uint64_t a, std::uint64_t x) { return a * 1000003u + x; }
std::uint64_t input(int rank, std::size_t i, int call) {
  return (static_cast<std::uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull ^ (i * 7919u + static_cast<std::uint64_t>(call) * 104729u);
}
constexpr std::uint64_t poison = 0xa5a5a5a5a5a5a5a5ull;

enum class call_kind { ring_all_reduce, ring_reduce_scatter, ring_all_gather, direct_all_reduce };

struct cell {
  std::uint64_t value = 0, epoch = 0;
};

struct outcome {
  bool completed = false;
  std::string problem;  // first corruption seen ("" if none)
};

// Plays `calls` on `n` ranks (the channels' `rings`), each call's blocks interleaved at random: a rank's
// next call starts once every block of its last one ended (a kernel after a kernel on a stream).
// Elements are 4 bytes and partial folds 8 (as half and its fp32 accumulator), placed in the slots
// byte for byte as the kernel places them; blocks are of 512 threads, one element each.
struct play_options {
  // Mutations of the kernel's rules, to show that the play catches what they break.
  bool full_first_barrier = true;    // false: meet only the neighbours at a call's first epoch
  bool own_regions = true;           // false: place element j at j x its size (before region_offset)
  bool short_channels_stop = false;  // true: a channel with fewer chunks ends there, meeting nobody
  // A block the scheduler seldom runs (1 time in 16 it is picked), so that the others run ahead.
  int lag_rank = -1;
  unsigned lag_block = 0;
};
outcome play(int n, const std::vector<std::vector<int>>& ring_lists, const std::vector<std::pair<call_kind, std::size_t>>& calls,
             std::uint64_t seed, const play_options& opt = {}) {
  constexpr std::size_t slot_bytes = 16384, elem = 4, acc = 8;
  constexpr unsigned cap = 4;
  const gpu::ring_channels rings = gpu::make_ring_channels(ring_lists, n);
  const std::size_t N = static_cast<std::size_t>(n);
  // slots[rank][parity][byte]: the epoch each byte was staged at, and the element starting there.
  std::vector<std::vector<std::vector<cell>>> slots(N, std::vector<std::vector<cell>>(2, std::vector<cell>(slot_bytes)));
  auto stage = [&](std::size_t r, std::uint64_t e, std::size_t at, std::size_t size, std::uint64_t v) {
    auto& slot = slots[r][e & 1];
    for (std::size_t k = at; k < at + size; ++k) slot.at(k) = {k == at ? v : 0, e};
  };
  std::vector<std::vector<std::vector<std::uint64_t>>> flags(N, std::vector<std::vector<std::uint64_t>>(cap, std::vector<std::uint64_t>(N, 0)));
  // outputs[rank][call]
  std::vector<std::vector<std::vector<std::uint64_t>>> outputs(N);
  struct agent {
    std::size_t call = 0, chunk = 0;
    unsigned step = 0;
    bool waiting = false, done_call = false;
    std::uint64_t wait_epoch = 0;
    std::uint32_t wait_peers = 0;
  };
  std::vector<std::vector<agent>> agents(N, std::vector<agent>(cap));
  std::vector<std::uint64_t> base(N, 0);  // counters[0]
  outcome out;
  auto note = [&](const std::string& p) {
    if (out.problem.empty()) out.problem = p;
  };
  // Per call: the ring call (ring kinds) or the direct plan, its epochs and blocks.
  auto phase_of = [](call_kind k) {
    return k == call_kind::ring_reduce_scatter ? gpu::ring_phase::reduce_scatter
           : k == call_kind::ring_all_gather  ? gpu::ring_phase::all_gather
                                              : gpu::ring_phase::all_reduce;
  };
  auto ring_call_of = [&](std::size_t ci, int rank) {
    const bool reduces = calls[ci].first != call_kind::ring_all_gather;
    return gpu::plan_ring_call(phase_of(calls[ci].first), rings, rank, calls[ci].second, reduces ? acc : elem, 1, slot_bytes, cap);
  };
  auto direct_plan_of = [&](std::size_t ci) { return gpu::plan_chunks(calls[ci].second, elem, 1, 1, slot_bytes, cap); };
  auto is_ring = [&](std::size_t ci) { return calls[ci].first != call_kind::direct_all_reduce; };
  auto blocks_of = [&](std::size_t ci) { return is_ring(ci) ? ring_call_of(ci, 0).blocks : direct_plan_of(ci).blocks; };
  auto epochs_of = [&](std::size_t ci) {
    if (!is_ring(ci)) return static_cast<std::uint64_t>(direct_plan_of(ci).chunks);
    const gpu::ring_call call = ring_call_of(ci, 0);
    return static_cast<std::uint64_t>(call.chunks * call.channel[0].steps());
  };
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t ci = 0; ci < calls.size(); ++ci) {
      const std::size_t len = calls[ci].first == call_kind::ring_all_gather ? N * calls[ci].second : calls[ci].second;
      outputs[r].emplace_back(len, poison);
    }
  auto in_of = [&](std::size_t ci, int rank, std::size_t i) {
    // reduce_scatter inputs are n blocks; all_gather sends its own block: index i of it.
    return input(rank, i, static_cast<int>(ci));
  };
  std::mt19937_64 rng(seed);
  for (int idle = 0; idle < 4000;) {
    const std::size_t r = static_cast<std::size_t>(rng() % N);
    const unsigned b = static_cast<unsigned>(rng() % cap);
    if (static_cast<int>(r) == opt.lag_rank && b == opt.lag_block && rng() % 16 != 0) continue;
    agent& a = agents[r][b];
    const int me = static_cast<int>(r);
    bool moved = false;
    if (a.call < calls.size() && !a.done_call) {
      const std::size_t ci = a.call;
      const std::uint64_t b0 = base[r];
      if (b >= blocks_of(ci)) {
        a.done_call = moved = true;
      } else if (a.waiting) {  // barrier: every peer in the mask at the epoch
        bool pass = true;
        for (std::size_t p = 0; p < N; ++p)
          if (((a.wait_peers >> p) & 1u) && flags[r][b][p] < a.wait_epoch) pass = false;
        if (pass) {
          a.waiting = false;
          moved = true;
        }
      } else if (is_ring(ci)) {
        const gpu::ring_call call = ring_call_of(ci, me);
        const gpu::ring_plan& p = call.channel[call.channel_of(b)];
        const unsigned cb = b - p.first_block, steps = p.steps();  // the block within its channel
        if (a.chunk >= (opt.short_channels_stop ? p.chunks : call.chunks)) {
          a.done_call = moved = true;
        } else {
          const gpu::ring_step st = p.step(a.step);
          // Past the channel's own chunks: no elements, only the barriers.
          const gpu::piece_span sp = a.chunk < p.chunks ? p.span(a.chunk, st.piece) : gpu::piece_span{};
          const gpu::block_range br = sp.length > 0 ? p.range(sp.length, cb) : gpu::block_range{};
          const std::uint64_t e = b0 + a.chunk * steps + a.step + 1;
          const auto& prev = slots[static_cast<std::size_t>(p.prev)][(e - 1) & 1];
          auto& outv = outputs[r][ci];
          const bool reduces = calls[ci].first != call_kind::ring_all_gather;
          // Where element j of the piece sits in the block's region, staged as `size` bytes.
          auto at = [&](std::size_t j, std::size_t size) {
            return opt.own_regions ? p.region_offset(cb) + (j - p.region_first(cb)) * size : j * size;
          };
          for (std::size_t j = br.begin; j < br.end; ++j) {
            std::uint64_t v = 0;
            if (st.read_prev) {  // the predecessor staged a partial fold in the reduce-scatter steps
              const std::size_t size = reduces && st.read_input ? acc : elem, o = at(j, size);
              for (std::size_t k = o; k < o + size; ++k)
                if (prev.at(k).epoch != e - 1)
                  note("rank " + std::to_string(me) + " block " + std::to_string(b) + " read epoch " +
                       std::to_string(prev.at(k).epoch) + " where it needed " + std::to_string(e - 1));
              v = prev.at(o).value;
            }
            if (st.read_input) {
              const std::uint64_t x = in_of(ci, me, p.input_offset(a.chunk, st.piece) + j);
              v = !reduces ? x : st.read_prev ? fold(v, x) : x;
            }
            if (st.write_output) outv.at(p.output_offset(a.chunk, st.piece) + j) = v;
            if (st.stage) stage(r, e, at(j, st.partial ? acc : elem), st.partial ? acc : elem, v);
          }
          if (st.stage) {
            const std::uint32_t peers = opt.full_first_barrier ? gpu::ring_barrier_peers(p, me, e, b0 + 1)
                                                               : gpu::ring_barrier_peers(p, me, e, ~std::uint64_t{0});
            for (std::size_t q = 0; q < N; ++q)
              if ((peers >> q) & 1u) flags[q][b][r] = std::max(flags[q][b][r], e);
            a.waiting = true;
            a.wait_epoch = e;
            a.wait_peers = peers;
          }
          if (++a.step > steps) {
            a.step = 0;
            ++a.chunk;
          }
          moved = true;
        }
      } else {  // direct all_reduce: stage, barrier with everyone, fold every rank's slot
        const gpu::chunk_plan p = direct_plan_of(ci);
        if (a.chunk >= p.chunks) {
          a.done_call = moved = true;
        } else {
          const gpu::block_range br = gpu::range_in_chunk(p, a.chunk, b);
          const std::uint64_t e = b0 + a.chunk + 1;
          if (a.step == 0) {
            for (std::size_t j = br.begin; j < br.end; ++j) stage(r, e, j * elem, elem, in_of(ci, me, p.chunk_begin(a.chunk) + j));
            for (std::size_t q = 0; q < N; ++q) flags[q][b][r] = std::max(flags[q][b][r], e);
            a.waiting = true;
            a.wait_epoch = e;
            a.wait_peers = (1u << n) - 1;
            a.step = 1;
          } else {
            for (std::size_t j = br.begin; j < br.end; ++j) {
              std::uint64_t v = 0;
              for (std::size_t q = 0; q < N; ++q) {
                for (std::size_t k = j * elem; k < (j + 1) * elem; ++k)
                  if (slots[q][e & 1][k].epoch != e)
                    note("rank " + std::to_string(me) + " (direct) read epoch " + std::to_string(slots[q][e & 1][k].epoch) +
                         " of rank " + std::to_string(q) + " where it needed " + std::to_string(e));
                const std::uint64_t x = slots[q][e & 1][j * elem].value;
                v = q == 0 ? x : fold(v, x);
              }
              outputs[r][ci].at(p.chunk_begin(a.chunk) + j) = v;
            }
            a.step = 0;
            ++a.chunk;
          }
          moved = true;
        }
      }
      // The kernel ends when every block is done: the next call takes its epochs after this one's.
      if (std::all_of(agents[r].begin(), agents[r].end(), [&](const agent& x) { return x.call == ci && x.done_call; })) {
        base[r] = b0 + epochs_of(ci);
        for (agent& x : agents[r]) x = agent{ci + 1};
      }
    }
    bool all_done = true;
    for (const auto& ranks : agents)
      for (const agent& x : ranks) all_done = all_done && x.call >= calls.size();
    if (all_done) break;
    idle = moved ? 0 : idle + 1;
  }
  for (const auto& ranks : agents)
    for (const agent& x : ranks)
      if (x.call < calls.size()) return out;  // stuck
  out.completed = true;
  // Every output against the fold in the order of combination it promises.
  for (std::size_t ci = 0; ci < calls.size(); ++ci) {
    const std::size_t count = calls[ci].second;
    for (int me = 0; me < n; ++me) {
      const auto& got = outputs[static_cast<std::size_t>(me)][ci];
      const gpu::ring_call call = is_ring(ci) ? ring_call_of(ci, me) : gpu::ring_call{};
      auto ring_fold = [&](std::size_t at) {  // around the owner's channel, from the position after the owner's
        const gpu::ring_piece_owner o = gpu::owner_of(call, at);
        if (o.channel < 0) return poison;
        const gpu::ring_order& ring = call.channel[o.channel].ring;
        std::uint64_t v = in_of(ci, ring.at(o.position + 1), at);
        for (int m = 2; m <= n; ++m) v = fold(v, in_of(ci, ring.at(o.position + m), at));
        return v;
      };
      for (std::size_t i = 0; i < got.size(); ++i) {
        std::uint64_t want = 0;
        switch (calls[ci].first) {
          case call_kind::direct_all_reduce:
            want = in_of(ci, 0, i);
            for (int q = 1; q < n; ++q) want = fold(want, in_of(ci, q, i));
            break;
          case call_kind::ring_all_reduce: want = ring_fold(i); break;
          case call_kind::ring_reduce_scatter: want = ring_fold(static_cast<std::size_t>(me) * count + i); break;
          case call_kind::ring_all_gather: want = in_of(ci, static_cast<int>(i / count), i % count); break;
        }
        if (got[i] != want) {
          note("call " + std::to_string(ci) + " rank " + std::to_string(me) + " element " + std::to_string(i) + " is wrong");
          return out;
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("device ring protocol: every block order completes with every element right, beside direct calls", "[cuda]") {
  using K = call_kind;
  const std::vector<std::vector<std::pair<K, std::size_t>>> sequences = {
      {{K::ring_all_reduce, 5}},
      {{K::ring_all_reduce, 9001}, {K::ring_all_reduce, 3}},
      {{K::direct_all_reduce, 6000}, {K::ring_all_reduce, 6000}, {K::direct_all_reduce, 4097}},
      {{K::ring_reduce_scatter, 2049}, {K::ring_all_gather, 2049}, {K::ring_all_reduce, 1}},
      {{K::ring_all_gather, 7}, {K::direct_all_reduce, 2048}, {K::ring_reduce_scatter, 4500}},
  };
  // Per world: one ring in rank order, one in another order, and several channels (up to the
  // four blocks the play has, so a channel may have a single block).
  using rings = std::vector<std::vector<int>>;
  const std::vector<rings> sets[] = {{{}, {{0, 1}, {1, 0}}},
                                     {{}, {{2, 0, 1}}, {{0, 1, 2}, {2, 1, 0}, {1, 0, 2}}},
                                     {{}, {{1, 3, 0, 2}}, {{0, 1, 2, 3}, {1, 3, 0, 2}, {3, 2, 1, 0}, {2, 0, 3, 1}}},
                                     {{}, {{4, 2, 0, 1, 3}}, {{4, 2, 0, 1, 3}, {0, 1, 2, 3, 4}}}};
  int plays = 0;
  for (int n : {2, 3, 4, 5})
    for (const rings& given : sets[n - 2])
      for (const auto& calls : sequences)
        for (std::uint64_t seed = 0; seed < 6; ++seed) {
          INFO("world " << n << ", " << given.size() << " rings given, first call count " << calls[0].second << " seed " << seed);
          const outcome o = play(n, given, calls, seed);
          CHECK(o.completed);
          CHECK(o.problem == "");
          ++plays;
        }
  CHECK(plays == 6 * 5 * 11);
}

TEST_CASE("device ring protocol: meeting only the neighbours at a call's first barrier lets a slot be overwritten", "[cuda]") {
  // The mutation the first full barrier prevents: after a direct call, a rank that is not a ring
  // neighbour may still be reading this rank's slot when the ring stages into it two epochs on.
  using K = call_kind;
  const std::vector<std::pair<K, std::size_t>> calls = {{K::direct_all_reduce, 4096}, {K::ring_all_reduce, 40000}};
  int caught = 0;
  for (std::uint64_t seed = 0; seed < 200 && caught == 0; ++seed) {
    const outcome bad = play(5, {}, calls, seed, {.full_first_barrier = false});
    caught += !bad.problem.empty();
  }
  CHECK(caught > 0);
  for (std::uint64_t seed = 0; seed < 20; ++seed) CHECK(play(5, {}, calls, seed).problem == "");
}

TEST_CASE("device ring protocol: blocks staging 8-byte partials at j x 8 overwrite their neighbours' bytes", "[cuda]") {
  // The mutation ring_plan::region_offset prevents: a block's partials (8 bytes) and elements (4)
  // placed by element index reach the bytes of the next block, whose successor may still read them.
  using K = call_kind;
  const std::vector<std::pair<K, std::size_t>> calls = {{K::ring_all_reduce, 20000}};
  int caught = 0;
  for (std::uint64_t seed = 0; seed < 50 && caught == 0; ++seed) caught += !play(3, {}, calls, seed, {.own_regions = false}).problem.empty();
  CHECK(caught > 0);
  for (std::uint64_t seed = 0; seed < 10; ++seed) CHECK(play(3, {}, calls, seed).problem == "");
}

TEST_CASE("device ring protocol: a channel with fewer chunks meets its neighbours to the call's end", "[cuda]") {
  // The mutation the barrier-only chunks prevent: a reduce-scatter on two ranks (one step per
  // chunk, an odd count) whose channels have 2 and 1 chunks. Were the short channel to stop after
  // its own chunk, its last read would have the parity the next call stages first, and nothing
  // would hold the next call back until that read is over: a successor's block that lags there
  // reads what its predecessor's next call staged.
  using K = call_kind;
  const std::vector<std::vector<int>> rings = {{0, 1}, {1, 0}};
  const std::vector<std::pair<K, std::size_t>> calls = {{K::ring_reduce_scatter, 2049}, {K::ring_all_gather, 2049}};
  const gpu::ring_call rs = gpu::plan_ring_call(gpu::ring_phase::reduce_scatter, gpu::make_ring_channels(rings, 2), 0, 2049, 8, 1, 16384, 4);
  REQUIRE(rs.channels == 2);
  REQUIRE(rs.chunks == 2);
  const int short_channel = rs.channel[0].chunks < rs.chunks ? 0 : 1;
  REQUIRE(rs.channel[short_channel].chunks == 1);
  const unsigned lagging = rs.channel[short_channel].first_block;
  int caught = 0;
  for (std::uint64_t seed = 0; seed < 200 && caught == 0; ++seed)
    caught += !play(2, rings, calls, seed, {.short_channels_stop = true, .lag_rank = static_cast<int>(seed % 2), .lag_block = lagging})
                   .problem.empty();
  CHECK(caught > 0);
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    const outcome o = play(2, rings, calls, seed, {.lag_rank = static_cast<int>(seed % 2), .lag_block = lagging});
    CHECK(o.completed);
    CHECK(o.problem == "");
  }
}
