// Host-side planning for collx's CUDA kernels (collx/cuda/launch_geometry.hpp, vector_plan.hpp):
// plain C++, no CUDA needed. Every case is checked against an independent computation: a simulated
// grid-stride loop and a brute-force search over head lengths on real addresses. (The device
// collectives' staging plan is device_plan.hpp, tested by test_cuda_device_plan.)
#include <catch2/catch.hpp>

#include <collx/cuda/launch_geometry.hpp>
#include <collx/cuda/vector_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpu = collx::gpu;

namespace {

const std::size_t awkward_counts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 65537};

// Runs the grid-stride loop of `g` over `items` on the host: every item must be visited exactly once,
// and the busiest thread must make exactly g.iterations passes.
void check_grid_stride_covers(const gpu::launch_geometry& g, std::size_t items) {
  std::vector<unsigned char> seen(items, 0);
  std::size_t busiest = 0;
  for (std::size_t t = 0; t < g.total_threads(); ++t) {
    std::size_t passes = 0;
    for (std::size_t i = t; i < items; i += g.total_threads()) {
      ++seen[i];
      ++passes;
    }
    busiest = std::max(busiest, passes);
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<std::ptrdiff_t>(items));
  CHECK(busiest == g.iterations);
}

}  // namespace

TEST_CASE("launch geometry: every item gets exactly one thread, with no idle block or warp", "[cuda_plan]") {
  for (const int sms : {1, 3, 108, 132}) {
    for (const unsigned tpb : {32u, 256u, 1024u}) {
      const gpu::device_limits dev{sms, 1024, 2147483647ull};
      const gpu::launch_policy pol{tpb, 4};
      for (const std::size_t items : awkward_counts) {
        CAPTURE(sms, tpb, items);
        const gpu::launch_geometry g = gpu::plan_launch(items, dev, pol);
        if (items == 0) {
          CHECK(g.empty());
          CHECK(g.total_threads() == 0);
          continue;
        }
        REQUIRE(g.blocks >= 1);
        CHECK(g.threads_per_block % 32 == 0);
        CHECK(g.threads_per_block <= tpb);
        CHECK(g.blocks <= static_cast<unsigned>(sms) * pol.blocks_per_sm);
        // No warp of a block without work: a smaller block would have been chosen.
        CHECK(g.threads_per_block - 32 < items);
        // No block without work unless the grid is at its cap.
        CHECK((std::size_t(g.blocks) - 1) * g.threads_per_block < items);
        check_grid_stride_covers(g, items);
      }
    }
  }
}

TEST_CASE("launch geometry: known figures", "[cuda_plan]") {
  const gpu::device_limits h100{132};
  auto g = gpu::plan_launch(1, h100);
  CHECK((g.blocks == 1 && g.threads_per_block == 32 && g.iterations == 1));
  g = gpu::plan_launch(33, h100);
  CHECK((g.blocks == 1 && g.threads_per_block == 64 && g.iterations == 1));
  g = gpu::plan_launch(1025, h100);
  CHECK((g.blocks == 5 && g.threads_per_block == 256 && g.iterations == 1));
  // 2^30 items: capped at 8 blocks per SM x 132 SMs = 1056 blocks of 256 = 270336 threads.
  g = gpu::plan_launch(std::size_t(1) << 30, h100);
  CHECK((g.blocks == 1056 && g.threads_per_block == 256));
  CHECK(g.iterations == 3972);  // ceil(1073741824 / 270336)
  // More items than a 32-bit grid could index: the grid stays capped, the loop runs longer.
  g = gpu::plan_launch(std::size_t(1) << 40, h100);
  CHECK(g.blocks == 1056);
  CHECK(g.iterations * g.total_threads() >= (std::size_t(1) << 40));
  CHECK((g.iterations - 1) * g.total_threads() < (std::size_t(1) << 40));
  // A device grid limit below the policy's cap wins.
  g = gpu::plan_launch(100000, gpu::device_limits{132, 1024, 3});
  CHECK((g.blocks == 3 && g.threads_per_block == 256));
  check_grid_stride_covers(g, 100000);
}

TEST_CASE("launch geometry: bad inputs are invalid_argument", "[cuda_plan]") {
  const auto invalid = [](auto f) {
    try {
      f();
    } catch (const collx::error& e) {
      return e.code() == collx::errc::invalid_argument;
    }
    return false;
  };
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{0}); }));
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{-1}); }));
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{1}, gpu::launch_policy{48, 1}); }));
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{1}, gpu::launch_policy{0, 1}); }));
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{1, 512}, gpu::launch_policy{1024, 1}); }));
  CHECK(invalid([] { gpu::plan_launch(10, gpu::device_limits{1}, gpu::launch_policy{256, 0}); }));
  CHECK(invalid([] { gpu::plan_launch(0, gpu::device_limits{0}); }));  // checked even with nothing to do
}

namespace {

// A 64-byte aligned arena, so that offsets from its start are the misalignments under test.
struct arena {
  alignas(64) std::byte bytes[4096];
  std::uintptr_t at(std::size_t offset) const { return reinterpret_cast<std::uintptr_t>(bytes + offset); }
};

// Independent reference: try every head length h on the real addresses.
gpu::vector_plan brute_force_plan(std::size_t count, std::initializer_list<gpu::buffer_ref> bufs) {
  std::size_t widest = 0;
  for (const auto& b : bufs) {
    if (b.element_size > 16 || 16 % b.element_size != 0) return gpu::scalar_plan(count);
    widest = std::max(widest, b.element_size);
  }
  const std::size_t w = 16 / widest;
  if (w < 2) return gpu::scalar_plan(count);
  for (std::size_t h = 0; h < w; ++h) {
    bool all = true;
    for (const auto& b : bufs) all = all && (b.address + h * b.element_size) % (w * b.element_size) == 0;
    if (all) {
      if (count < h + w) return gpu::scalar_plan(count);
      const std::size_t v = (count - h) / w;
      return gpu::vector_plan{static_cast<unsigned>(w), h, v, count - h - v * w};
    }
  }
  return gpu::scalar_plan(count);
}

void check_plan(std::size_t count, std::initializer_list<gpu::buffer_ref> bufs) {
  const gpu::vector_plan p = gpu::plan_vectors(count, bufs);
  CHECK(p == brute_force_plan(count, bufs));
  CHECK(p.count() == count);
  if (p.scalar()) {
    CHECK((p.head == 0 && p.tail == 0 && p.vectors == count));
    return;
  }
  CHECK(p.head < p.width);
  CHECK(p.tail < p.width);
  CHECK(p.vectors >= 1);
  for (const auto& b : bufs) {  // first and last vector are aligned to their full size in every buffer
    const std::size_t vbytes = p.width * b.element_size;
    CHECK((b.address + p.vector_begin(0) * b.element_size) % vbytes == 0);
    CHECK((b.address + p.vector_begin(p.vectors - 1) * b.element_size) % vbytes == 0);
    CHECK(vbytes <= gpu::max_vector_bytes);
  }
}

}  // namespace

TEST_CASE("vector plan: matches a brute-force search on real misaligned addresses", "[cuda_plan]") {
  static arena mem;
  // dst = op(a, b) with three buffers of one element size, every pair of byte offsets in [0, 16).
  for (const std::size_t s : {1u, 2u, 4u, 8u, 12u, 16u, 32u}) {
    for (std::size_t oa = 0; oa < 16; ++oa) {
      for (std::size_t od = 0; od < 16; ++od) {
        for (const std::size_t count : awkward_counts) {
          CAPTURE(s, oa, od, count);
          check_plan(count, {{mem.at(od), s}, {mem.at(1024 + oa), s}, {mem.at(2048 + oa), s}});
        }
      }
    }
  }
  // Mixed sizes: fp16 inputs into an fp32 partial result, and back.
  for (std::size_t oh = 0; oh < 16; oh += 2) {
    for (std::size_t of = 0; of < 16; of += 2) {
      for (const std::size_t count : awkward_counts) {
        CAPTURE(oh, of, count);
        check_plan(count, {{mem.at(of), 4}, {mem.at(1024 + oh), 2}, {mem.at(2048 + oh), 2}});
        check_plan(count, {{mem.at(oh), 2}, {mem.at(1024 + of), 4}});
      }
    }
  }
}

TEST_CASE("vector plan: known figures", "[cuda_plan]") {
  static arena mem;
  const auto f = [&](std::size_t byte_offset) { return gpu::buffer_ref{mem.at(byte_offset), sizeof(float)}; };
  using P = gpu::vector_plan;
  CHECK(gpu::plan_vectors(1023, {f(0), f(64), f(128)}) == P{4, 0, 255, 3});
  CHECK(gpu::plan_vectors(1025, {f(4), f(68), f(132)}) == P{4, 3, 255, 2});    // one float past alignment
  CHECK(gpu::plan_vectors(1025, {f(4), f(64)}) == gpu::scalar_plan(1025));     // misaligned differently
  CHECK(gpu::plan_vectors(1025, {f(2), f(2)}) == gpu::scalar_plan(1025));      // not even float-aligned
  CHECK(gpu::plan_vectors(7, {f(4)}) == P{4, 3, 1, 0});
  CHECK(gpu::plan_vectors(6, {f(4)}) == gpu::scalar_plan(6));                  // no whole vector after the head
  CHECK(gpu::plan_vectors(3, {f(0)}) == gpu::scalar_plan(3));
  CHECK(gpu::plan_vectors(0, {f(0)}) == gpu::scalar_plan(0));
  CHECK(gpu::plan_vectors(65537, {{mem.at(3), 1}, {mem.at(19), 1}}) == P{16, 13, 4095, 4});
  CHECK(gpu::plan_vectors(100, {{mem.at(0), 16}}) == gpu::scalar_plan(100));   // one element per 16 bytes
  CHECK(gpu::plan_vectors(100, {{mem.at(0), 12}}) == gpu::scalar_plan(100));   // 12-byte struct
  CHECK(gpu::plan_vectors(100, {{mem.at(0), 2}, {mem.at(64), 4}}) == P{4, 0, 25, 0});
  // Typed convenience.
  alignas(16) static float xs[8];
  CHECK(gpu::plan_vectors(5, {gpu::buffer_ref::of(xs + 1)}) == gpu::scalar_plan(5));
  CHECK(gpu::plan_vectors(7, {gpu::buffer_ref::of(xs + 1)}) == P{4, 3, 1, 0});
  try {
    gpu::plan_vectors(4, {{mem.at(0), 0}});
    FAIL("element_size 0 accepted");
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::invalid_argument);
  }
}
