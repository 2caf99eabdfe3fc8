// The body of collx's CUDA reduction kernel run on the CPU: plan_reduce picks the vector or scalar
// plan and the grid exactly as gpu::reduce_elementwise does, then reduce_thread runs for every thread
// of that grid in turn (threads do not interact, so this is what the GPU computes, minus the device
// arithmetic, which tests/cuda/test_cuda_kernels.cu covers on a GPU). Checks, without a GPU, that the
// head/vector/tail split gives every index exactly once and never touches a byte outside the buffers:
// misaligned and in-place buffers, awkward counts, grids with many grid-stride passes, poisoned
// outputs (two poison bytes) and 64 guard bytes on both sides, against the host path's arithmetic.
#include <catch2/catch.hpp>

#include <collx/cuda/launch_geometry.hpp>
#include <collx/cuda/reduce_thread.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/ops.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <random>
#include <type_traits>
#include <vector>

namespace gpu = collx::gpu;
namespace ops = collx::ops;
using gpu::values;

namespace {

constexpr values E = values::elements;
constexpr values P = values::partials;

// Non-commutative, 8 bytes (two per vector): composition of affine maps modulo 2^32.
struct affine {
  std::uint32_t mul, add;
};
struct then_op {
  affine operator()(const affine& f, const affine& g) const { return {f.mul * g.mul, f.add * g.mul + g.add}; }
};
// 12 bytes: scalar path only.
struct triple {
  std::int32_t x, y, z;
};
struct triple_op {
  triple operator()(const triple& p, const triple& q) const {
    return {p.x < q.x ? p.x : q.x, static_cast<std::int32_t>(static_cast<std::uint32_t>(p.y) ^ static_cast<std::uint32_t>(q.y)),
            p.z > q.z ? p.z : q.z};
  }
};

constexpr std::size_t guard = 64;

template <class V>
bool is_nan(const V& v) {
  if constexpr (std::is_floating_point_v<V>) return v != v;
  else if constexpr (collx::is_narrow_float_v<V>) return collx::narrow_float<V>::widen(v) != collx::narrow_float<V>::widen(v);
  else return false;
}

// `count` values at `offset` values past a 64-byte aligned start, 64 guard bytes each side, all
// bytes outside the values poisoned.
template <class V>
struct guarded {
  std::size_t count, offset;
  std::vector<unsigned char> expected_image;
  unsigned char* base;

  guarded(std::size_t n, std::size_t off, unsigned char poison)
      : count(n), offset(off), expected_image(bytes(), poison),
        base(static_cast<unsigned char*>(::operator new(bytes(), std::align_val_t{64}))) {
    std::memset(base, poison, bytes());
  }
  ~guarded() { ::operator delete(base, std::align_val_t{64}); }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;

  std::size_t begin_byte() const { return guard + offset * sizeof(V); }
  std::size_t bytes() const { return begin_byte() + count * sizeof(V) + guard; }
  V* data() const { return reinterpret_cast<V*>(base + begin_byte()); }
  void fill(const std::vector<V>& v) {
    if (count) std::memcpy(base + begin_byte(), v.data(), count * sizeof(V));  // (data() may be null)
  }
  void expect(const std::vector<V>& v) {
    if (count) std::memcpy(expected_image.data() + begin_byte(), v.data(), count * sizeof(V));
  }
  // Offset of the first byte that differs from the expected image, or bytes() if none. Two NaNs
  // are equal: x86 keeps a payload of one operand, and which one depends on how the compiler
  // ordered a commutative addition (a NaN + NaN differs from the reference in ~1 of 65536).
  std::size_t first_difference() const {
    const std::size_t lo = begin_byte(), hi = lo + count * sizeof(V);
    for (std::size_t i = 0; i < bytes(); ++i) {
      if (i >= lo && i < hi && (i - lo) % sizeof(V) == 0) {
        V got, want;
        std::memcpy(static_cast<void*>(&got), base + i, sizeof(V));
        std::memcpy(static_cast<void*>(&want), expected_image.data() + i, sizeof(V));
        if (is_nan(got) && is_nan(want)) {
          i += sizeof(V) - 1;
          continue;
        }
      }
      if (base[i] != expected_image[i]) return i;
    }
    return bytes();
  }
};

template <class V>
std::vector<V> random_values(std::size_t n, std::mt19937_64& rng) {
  std::vector<V> v(n);
  for (auto& x : v) {
    unsigned char raw[sizeof(V)];
    for (auto& c : raw) c = static_cast<unsigned char>(rng());
    std::memcpy(&x, raw, sizeof(V));
  }
  return v;
}

template <class T, values A, values B, values D, class Op>
std::vector<gpu::value_t<T, Op, D>> host_reduce(const Op& op, const std::vector<gpu::value_t<T, Op, A>>& a,
                                                const std::vector<gpu::value_t<T, Op, B>>& b, int world_size) {
  using red = collx::detail::reduction<T, Op>;
  std::vector<gpu::value_t<T, Op, D>> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    typename red::acc x, y;
    if constexpr (A == P) x = a[i]; else x = red::widen(a[i]);
    if constexpr (B == P) y = b[i]; else y = red::widen(b[i]);
    const auto r = red::combine(op, x, y);
    if constexpr (D == P) out[i] = r; else out[i] = red::finalize(r, world_size);
  }
  return out;
}

// gpu::reduce_elementwise with the GPU replaced by a loop over the grid's threads.
template <class T, values A, values B, values D, class Op>
gpu::reduce_launch run_on_cpu(gpu::value_t<T, Op, D>* dst, const gpu::value_t<T, Op, A>* a,
                              const gpu::value_t<T, Op, B>* b, std::size_t count, const Op& op, int world_size,
                              const gpu::device_limits& limits, const gpu::launch_policy& policy) {
  constexpr unsigned width = gpu::reduce_vector_width<T, Op, A, B, D>;
  const gpu::reduce_launch l = gpu::plan_reduce<T, Op, A, B, D>(dst, a, b, count, limits, policy);
  for (std::size_t t = 0; t < l.grid.total_threads(); ++t) {
    if (l.plan.scalar()) gpu::reduce_thread<T, Op, A, B, D, 1>(t, l.grid.total_threads(), dst, a, b, l.plan, op, world_size);
    else gpu::reduce_thread<T, Op, A, B, D, width>(t, l.grid.total_threads(), dst, a, b, l.plan, op, world_size);
  }
  return l;
}

struct layout {
  std::size_t dst, a, b;
};

template <class T, values A, values B, values D, class Op>
void check(const Op& op, int world_size) {
  using VA = gpu::value_t<T, Op, A>;
  using VB = gpu::value_t<T, Op, B>;
  using VD = gpu::value_t<T, Op, D>;
  constexpr unsigned width = gpu::reduce_vector_width<T, Op, A, B, D>;
  std::mt19937_64 rng(12345u + sizeof(VA) + 3 * sizeof(VD));
  // A full-size grid, and one of a single warp, which makes thousands of grid-stride passes.
  const std::pair<gpu::device_limits, gpu::launch_policy> grids[] = {{gpu::device_limits{132}, gpu::launch_policy{}},
                                                                     {gpu::device_limits{1}, gpu::launch_policy{32, 1}}};
  for (const std::size_t n : {0u, 1u, 3u, 17u, 1023u, 1025u, 65537u}) {
    const std::vector<VA> a = random_values<VA>(n, rng);
    const std::vector<VB> b = random_values<VB>(n, rng);
    const std::vector<VD> expected = host_reduce<T, A, B, D>(op, a, b, world_size);
    for (const layout at : {layout{0, 0, 0}, layout{1, 1, 1}, layout{3, 3, 3}, layout{0, 1, 2}, layout{2, 0, 0}}) {
      for (const auto& [limits, policy] : grids) {
        for (const unsigned char poison : {0xA5, 0x5A}) {
          CAPTURE(n, at.dst, at.a, at.b, policy.threads_per_block, int(poison));
          guarded<VA> ga(n, at.a, poison);
          guarded<VB> gb(n, at.b, poison);
          guarded<VD> gd(n, at.dst, poison);
          ga.fill(a), ga.expect(a), gb.fill(b), gb.expect(b), gd.expect(expected);
          const gpu::reduce_launch l = run_on_cpu<T, A, B, D>(gd.data(), ga.data(), gb.data(), n, op, world_size, limits, policy);
          CHECK(gd.first_difference() == gd.bytes());
          CHECK(ga.first_difference() == ga.bytes());
          CHECK(gb.first_difference() == gb.bytes());
          // Buffers at the same element index within a vector (all start 64-byte aligned) take the
          // vector path whenever a whole vector fits after the head; the others never do.
          const bool same_misalignment = at.dst % width == at.a % width && at.a % width == at.b % width;
          if (width > 1 && same_misalignment && n >= (width - at.a % width) % width + width) CHECK(l.plan.width == width);
          if (!same_misalignment) CHECK(l.plan.scalar());
        }
        if constexpr (std::is_same_v<VD, VA>) {  // in place: dst == a
          CAPTURE(n, at.a, at.b, policy.threads_per_block, "in place");
          guarded<VA> ga(n, at.a, 0xA5);
          guarded<VB> gb(n, at.b, 0xA5);
          ga.fill(a), gb.fill(b), gb.expect(b), ga.expect(expected);
          run_on_cpu<T, A, B, D>(ga.data(), ga.data(), gb.data(), n, op, world_size, limits, policy);
          CHECK(ga.first_difference() == ga.bytes());
          CHECK(gb.first_difference() == gb.bytes());
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("reduction kernel body on the CPU: every index once, nothing outside the buffers", "[cuda_plan]") {
  check<float, E, E, E>(ops::sum{}, 1);
  check<float, E, E, E>(ops::avg{}, 3);
  check<double, E, E, E>(ops::max{}, 1);
  check<std::int8_t, E, E, E>(ops::prod{}, 1);          // 16 per vector: heads up to 15
  check<std::uint16_t, E, E, E>(ops::min{}, 1);
  check<std::int64_t, E, E, E>(ops::avg{}, 3);
  check<collx::half, E, E, E>(ops::sum{}, 1);
  check<collx::half, E, E, P>(ops::avg{}, 5);           // fp16 in, fp32 partials out: 8- and 16-byte accesses
  check<collx::half, P, E, P>(ops::avg{}, 5);
  check<collx::bfloat16, P, P, E>(ops::avg{}, 5);       // fp32 in, rounded bf16 out
  check<affine, E, E, E>(then_op{}, 1);                 // non-commutative struct, a[i] on the left
  check<triple, E, E, E>(triple_op{}, 1);               // 12-byte struct, scalar path
}

TEST_CASE("reduction kernel body: the vector widths the kernel is instantiated with", "[cuda_plan]") {
  STATIC_REQUIRE(gpu::reduce_vector_width<float, ops::sum, E, E, E> == 4);
  STATIC_REQUIRE(gpu::reduce_vector_width<collx::half, ops::sum, E, E, E> == 8);
  STATIC_REQUIRE(gpu::reduce_vector_width<collx::half, ops::sum, E, E, P> == 4);
  STATIC_REQUIRE(gpu::reduce_vector_width<std::int8_t, ops::prod, E, E, E> == 16);
  STATIC_REQUIRE(gpu::reduce_vector_width<double, ops::sum, E, E, E> == 2);
  STATIC_REQUIRE(gpu::reduce_vector_width<affine, then_op, E, E, E> == 2);
  STATIC_REQUIRE(gpu::reduce_vector_width<triple, triple_op, E, E, E> == 1);
}
