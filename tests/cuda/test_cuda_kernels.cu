// collx's element-wise CUDA kernels (collx/cuda/reduce_kernel.cuh, convert.cuh) against the host
// path's arithmetic (collx::detail::reduction, as detail/executor.hpp applies it), for built-in and
// user ops, narrow floats, struct types, every role of the buffers (elements / partials), awkward
// counts and misaligned, aliased buffers. Every output starts poisoned (two different poison bytes,
// so a skipped element cannot match by chance), and 256 guard bytes on both sides of every buffer,
// plus the inputs themselves, must come back unchanged.
// Tagged [gpu]: without a device, gpu_test_main.cpp skips them (only the [cuda] host checks run).
#include <catch2/catch.hpp>

#include <collx/cuda/convert.cuh>
#include <collx/cuda/reduce_kernel.cuh>
#include <collx/cuda_types.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/ops.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <optional>
#include <cstdint>
#include <utility>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "custom_types.cuh"

namespace gpu = collx::gpu;
namespace ops = collx::ops;
using gpu::values;

// ---------------------------------------------------------------------------------------------
// User types and ops, run as device functors.

using collx_cuda_test::affine;
using collx_cuda_test::then_op;
using collx_cuda_test::triple;
using collx_cuda_test::triple_op;
static_assert(!collx::op_traits<then_op>::commutative);

// The vector widths the kernel picks: 16 bytes of the widest buffer, or scalar.
static_assert(gpu::reduce_vector_width<float, ops::sum, values::elements, values::elements, values::elements> == 4);
static_assert(gpu::reduce_vector_width<collx::half, ops::sum, values::elements, values::elements, values::elements> == 8);
static_assert(gpu::reduce_vector_width<collx::half, ops::sum, values::elements, values::elements, values::partials> == 4);
static_assert(gpu::reduce_vector_width<std::int8_t, ops::prod, values::elements, values::elements, values::elements> == 16);
static_assert(gpu::reduce_vector_width<affine, then_op, values::elements, values::elements, values::elements> == 2);
static_assert(gpu::reduce_vector_width<triple, triple_op, values::elements, values::elements, values::elements> == 1);

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorName(e) << " " << cudaGetErrorString(e));
}

// ---------------------------------------------------------------------------------------------
// Inputs.

template <class V>
bool is_nan_value(const V& v) {
  if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
  else if constexpr (collx::is_narrow_float_v<V>) return std::isnan(collx::narrow_float<V>::widen(v));
  else return false;
}

template <class V>
V from_bits_of(std::mt19937_64& rng) {
  static_assert(std::is_trivially_copyable_v<V>);
  unsigned char raw[sizeof(V)];
  for (auto& c : raw) c = static_cast<unsigned char>(rng());
  V v;
  std::memcpy(&v, raw, sizeof(V));
  return v;
}

// A value of type V for op kind `order` (true: min/max, which get NaN, +-0 and inf; false:
// arithmetic, which gets finite values in a range where sums and products stay interesting).
template <class V>
V random_value(std::mt19937_64& rng, bool order) {
  if constexpr (std::is_floating_point_v<V>) {
    const unsigned pick = rng() % 16;
    if (order && pick == 0) return from_bits_of<V>(rng);  // any encoding: NaNs with payloads, subnormals
    if (order && pick == 1) return std::numeric_limits<V>::quiet_NaN();
    if (order && pick == 2) return V(-0.0);
    if (order && pick == 3) return V(0.0);
    if (order && pick == 4) return -std::numeric_limits<V>::infinity();
    return static_cast<V>(std::uniform_real_distribution<double>(-300.0, 300.0)(rng));
  } else {
    return from_bits_of<V>(rng);  // integers, narrow floats (every encoding: NaN, inf, subnormals), structs
  }
}

// ---------------------------------------------------------------------------------------------
// A device buffer of `count` values at `offset` values past a 256-byte aligned start, with 256
// guard bytes before and after, every byte outside the values poisoned.

constexpr std::size_t guard_bytes = 256;

template <class V>
struct guarded {
  std::size_t count, offset;
  unsigned char poison;
  std::vector<unsigned char> image;  // the whole allocation as written
  unsigned char* base = nullptr;

  guarded(std::size_t n, std::size_t off, unsigned char p) : count(n), offset(off), poison(p) {
    image.assign(bytes(), poison);
    cuda_ok(cudaMalloc(&base, bytes()), "cudaMalloc");
  }
  ~guarded() { cudaFree(base); }
  guarded(const guarded&) = delete;
  guarded& operator=(const guarded&) = delete;

  std::size_t begin_byte() const { return guard_bytes + offset * sizeof(V); }
  std::size_t bytes() const { return begin_byte() + count * sizeof(V) + guard_bytes; }
  V* data() const { return reinterpret_cast<V*>(base + begin_byte()); }
  void set(const std::vector<V>& v) {
    if (count) std::memcpy(image.data() + begin_byte(), v.data(), count * sizeof(V));  // (data() may be null)
  }
  void upload() { cuda_ok(cudaMemcpy(base, image.data(), bytes(), cudaMemcpyHostToDevice), "upload"); }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> out(bytes());
    cuda_ok(cudaMemcpy(out.data(), base, bytes(), cudaMemcpyDeviceToHost), "download");
    return out;
  }
};

// Checks that `got` equals the buffer's image outside the values and `expected` inside; NaNs of
// arithmetic ops compare as NaN (payloads differ between x86 and GPU arithmetic), all else bitwise.
template <class V>
void check_image(const guarded<V>& buf, const std::vector<unsigned char>& got, const std::vector<V>& expected,
                 bool nan_is_nan, const char* what) {
  const std::size_t lo = buf.begin_byte(), hi = lo + buf.count * sizeof(V);
  std::size_t outside = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if ((i < lo || i >= hi) && got[i] != buf.image[i]) ++outside;
  CHECK(outside == 0);
  if (outside) UNSCOPED_INFO(what << ": " << outside << " guard/offset bytes changed");
  std::size_t wrong = 0, first = 0;
  for (std::size_t i = 0; i < buf.count; ++i) {
    V g;
    std::memcpy(&g, got.data() + lo + i * sizeof(V), sizeof(V));
    const bool same = std::memcmp(&g, &expected[i], sizeof(V)) == 0 ||
                      (nan_is_nan && is_nan_value(g) && is_nan_value(expected[i]));
    if (!same && wrong++ == 0) first = i;
  }
  if (wrong) FAIL_CHECK(what << ": " << wrong << " of " << buf.count << " values wrong, first at index " << first);
}

const std::size_t counts[] = {0, 1, 3, 1023, 1025, 65537};

struct offsets {
  std::size_t dst, a, b;
};
// Aligned, equally misaligned (vector path with a head), and differently misaligned (scalar path).
const offsets layouts[] = {{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 2}, {2, 0, 0}};

template <class Op>
constexpr bool is_order_op = std::is_same_v<Op, ops::min> || std::is_same_v<Op, ops::max>;

// The host path's arithmetic, as detail/executor.hpp's combine applies it.
template <class T, values A, values B, values D, class Op>
std::vector<gpu::value_t<T, Op, D>> host_reduce(const Op& op, const std::vector<gpu::value_t<T, Op, A>>& a,
                                                const std::vector<gpu::value_t<T, Op, B>>& b, int world_size) {
  using red = collx::detail::reduction<T, Op>;
  using acc = typename red::acc;
  std::vector<gpu::value_t<T, Op, D>> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    acc x, y;
    if constexpr (A == values::partials) x = a[i]; else x = red::widen(a[i]);
    if constexpr (B == values::partials) y = b[i]; else y = red::widen(b[i]);
    const acc r = red::combine(op, x, y);
    if constexpr (D == values::partials) out[i] = r; else out[i] = red::finalize(r, world_size);
  }
  return out;
}

// Runs gpu::reduce_elementwise for every count, layout and poison byte (and in place when dst and a
// hold the same type) and compares with host_reduce.
template <class T, values A, values B, values D, class Op>
void check_reduce(const Op& op, int world_size) {
  using VA = gpu::value_t<T, Op, A>;
  using VB = gpu::value_t<T, Op, B>;
  using VD = gpu::value_t<T, Op, D>;
  std::mt19937_64 rng(0xC0FFEEu + sizeof(T) * 131 + static_cast<unsigned>(A) * 7 + static_cast<unsigned>(D) * 3);
  const bool order = is_order_op<Op>;
  for (const std::size_t n : counts) {
    std::vector<VA> a(n);
    std::vector<VB> b(n);
    for (auto& x : a) x = random_value<VA>(rng, order);
    for (auto& x : b) x = random_value<VB>(rng, order);
    const std::vector<VD> expected = host_reduce<T, A, B, D>(op, a, b, world_size);
    for (const offsets& at : layouts) {
      for (const unsigned char poison : {0xA5, 0x5A}) {
        CAPTURE(n, at.dst, at.a, at.b, int(poison));
        guarded<VA> ga(n, at.a, poison);
        guarded<VB> gb(n, at.b, poison);
        guarded<VD> gd(n, at.dst, poison);
        ga.set(a);
        gb.set(b);
        ga.upload();
        gb.upload();
        gd.upload();
        gpu::reduce_elementwise<T, A, B, D>(gd.data(), ga.data(), gb.data(), n, op, world_size, cudaStream_t{});
        cuda_ok(cudaDeviceSynchronize(), "reduce_elementwise");
        check_image(gd, gd.download(), expected, !order, "dst");
        check_image(ga, ga.download(), a, false, "input a");
        check_image(gb, gb.download(), b, false, "input b");
      }
      if constexpr (std::is_same_v<VD, VA>) {  // in place: dst == a
        guarded<VA> ga(n, at.a, 0xA5);
        guarded<VB> gb(n, at.b, 0xA5);
        ga.set(a);
        gb.set(b);
        ga.upload();
        gb.upload();
        gpu::reduce_elementwise<T, A, B, D>(ga.data(), ga.data(), gb.data(), n, op, world_size, cudaStream_t{});
        cuda_ok(cudaDeviceSynchronize(), "reduce_elementwise in place");
        check_image(ga, ga.download(), expected, !order, "dst == a");
        check_image(gb, gb.download(), b, false, "input b (in place)");
      }
    }
  }
}

// gpu::convert against the host path's widen / finalise, same harness.
template <class T, values S, values D, class Op>
void check_convert(const Op& op, int world_size) {
  using VS = gpu::value_t<T, Op, S>;
  using VD = gpu::value_t<T, Op, D>;
  using red = collx::detail::reduction<T, Op>;
  std::mt19937_64 rng(0xFEEDu + sizeof(T));
  for (const std::size_t n : counts) {
    std::vector<VS> src(n);
    for (auto& x : src) x = random_value<VS>(rng, false);
    std::vector<VD> expected(n);
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (S == D) expected[i] = src[i];
      else if constexpr (D == values::partials) expected[i] = red::widen(src[i]);
      else expected[i] = red::finalize(src[i], world_size);
    }
    for (const offsets& at : layouts) {
      for (const unsigned char poison : {0xA5, 0x5A}) {
        CAPTURE(n, at.dst, at.a, int(poison));
        guarded<VS> gs(n, at.a, poison);
        guarded<VD> gd(n, at.dst, poison);
        gs.set(src);
        gs.upload();
        gd.upload();
        gpu::convert<T, S, D>(gd.data(), gs.data(), n, op, world_size, cudaStream_t{});
        cuda_ok(cudaDeviceSynchronize(), "convert");
        check_image(gd, gd.download(), expected, true, "dst");
        check_image(gs, gs.download(), src, false, "src");
      }
    }
  }
}

constexpr values E = values::elements;
constexpr values P = values::partials;

}  // namespace

TEST_CASE("gpu reduce: built-in ops on fp32, fp64 and integers", "[gpu][cuda]") {
  check_reduce<float, E, E, E>(ops::sum{}, 1);
  check_reduce<float, E, E, E>(ops::avg{}, 3);
  check_reduce<float, E, E, E>(ops::min{}, 1);
  check_reduce<float, E, E, E>(ops::max{}, 1);
  check_reduce<double, E, E, E>(ops::prod{}, 1);
  check_reduce<std::int32_t, E, E, E>(ops::sum{}, 1);          // wraps
  check_reduce<std::int8_t, E, E, E>(ops::prod{}, 1);          // wraps, 16 per vector
  check_reduce<std::uint8_t, E, E, E>(ops::min{}, 1);          // unsigned order
  check_reduce<std::int64_t, E, E, E>(ops::avg{}, 3);          // truncates toward zero
  check_reduce<std::uint32_t, E, E, E>(ops::bxor{}, 1);
}

TEST_CASE("gpu reduce: half and bfloat16 accumulate in fp32 and round once", "[gpu][cuda]") {
  check_reduce<collx::half, E, E, E>(ops::sum{}, 1);
  check_reduce<collx::half, E, E, E>(ops::max{}, 1);
  check_reduce<collx::half, E, E, P>(ops::avg{}, 5);           // first step: widened partials
  check_reduce<collx::half, P, E, P>(ops::avg{}, 5);           // middle step
  check_reduce<collx::half, P, P, E>(ops::avg{}, 5);           // last step: rounded once, divided
  check_reduce<collx::bfloat16, E, E, E>(ops::sum{}, 1);
  check_reduce<__half, E, E, E>(ops::prod{}, 1);
  check_reduce<__nv_bfloat16, E, E, E>(ops::min{}, 1);
}

namespace {
/// A user op taking floats (non-commutative): on half and bfloat16 it runs in fp32 as the built-ins
/// do (detail::op_runs_in_fp32), with fp32 partials between steps.
struct halve_then_add {
  __host__ __device__ float operator()(float a, float b) const { return a * 0.5f + b; }
};
static_assert(collx::detail::reduction<collx::half, halve_then_add>::widened &&
              collx::detail::reduction<__nv_bfloat16, halve_then_add>::widened);
}  // namespace

TEST_CASE("gpu reduce: user ops and struct types, a[i] the left operand", "[gpu][cuda]") {
  check_reduce<affine, E, E, E>(then_op{}, 1);                 // non-commutative, vector path
  check_reduce<triple, E, E, E>(triple_op{}, 1);               // 12-byte struct, scalar path
  check_reduce<collx::half, E, E, P>(halve_then_add{}, 1);     // a float op on half: fp32 partials
  check_reduce<collx::half, P, P, E>(halve_then_add{}, 1);     //   rounded once at the end
  check_reduce<__nv_bfloat16, E, E, E>(halve_then_add{}, 1);
}

TEST_CASE("gpu convert: widen, finalise and copy", "[gpu][cuda]") {
  check_convert<collx::half, E, P>(ops::sum{}, 1);
  check_convert<collx::bfloat16, P, E>(ops::avg{}, 3);
  check_convert<std::int32_t, P, E>(ops::avg{}, 3);
  check_convert<float, E, E>(ops::avg{}, 3);                   // a copy: no division
}

TEST_CASE("gpu reduce and convert: bad arguments fail before any CUDA call", "[cuda]") {
  // Host pointers are fine here: nothing is launched. Explicit limits: no device query either.
  static float buf[64];
  const gpu::device_limits limits{1};
  const auto code_of = [](auto f) -> std::optional<collx::errc> {  // nullopt: nothing thrown
    try {
      f();
    } catch (const collx::error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  using collx::errc;
  CHECK(code_of([&] { gpu::reduce_elementwise<float>(buf, buf + 1, buf + 2, 8, ops::sum{}, 0, cudaStream_t{}, limits); }) ==
        errc::invalid_argument);  // world_size 0
  CHECK(code_of([&] { gpu::reduce_elementwise<float>(buf + 1, buf, buf + 32, 8, ops::sum{}, 1, cudaStream_t{}, limits); }) ==
        errc::invalid_argument);  // dst overlaps a, not in place
  CHECK(code_of([&] { gpu::reduce_elementwise<float>(buf, buf + 32, buf + 4, 8, ops::sum{}, 1, cudaStream_t{}, limits); }) ==
        errc::invalid_argument);  // dst overlaps b
  CHECK(code_of([&] { gpu::reduce_elementwise<float>(nullptr, buf, buf + 32, 8, ops::sum{}, 1, cudaStream_t{}, limits); }) ==
        errc::invalid_argument);
  // Partials of half are floats: dst == a with different value types is not "in place".
  CHECK(code_of([&] {
          gpu::reduce_elementwise<collx::half, E, E, P>(buf, reinterpret_cast<const collx::half*>(buf),
                                                        reinterpret_cast<const collx::half*>(buf + 32), 8, ops::sum{}, 1,
                                                        cudaStream_t{}, limits);
        }) == errc::invalid_argument);
  CHECK(code_of([&] { gpu::convert<float, E, E>(buf + 1, buf, 8, ops::sum{}, 1, cudaStream_t{}); }) == errc::invalid_argument);
  CHECK(code_of([&] { gpu::convert<float, E, E>(buf, buf + 8, 8, ops::sum{}, 0, cudaStream_t{}); }) == errc::invalid_argument);
  // A negative count converted to size_t: rejected, not wrapped into a small byte count.
  CHECK(code_of([&] { gpu::convert<float, E, E>(buf, buf + 8, static_cast<std::size_t>(-8), ops::sum{}, 1, cudaStream_t{}); }) ==
        errc::invalid_argument);
  CHECK(code_of([&] { gpu::convert<float, E, P>(buf, buf + 8, SIZE_MAX / 4 + 3, ops::sum{}, 1, cudaStream_t{}); }) ==
        errc::invalid_argument);
  // The same for reduce_elementwise, in place (no overlap arithmetic runs) and not (the byte
  // counts of the overlap test would wrap to 4 and pass).
  CHECK(code_of([&] {
          gpu::reduce_elementwise<float>(buf, buf, buf, static_cast<std::size_t>(-8), ops::sum{}, 1, cudaStream_t{}, limits);
        }) == errc::invalid_argument);
  CHECK(code_of([&] {
          gpu::reduce_elementwise<float>(buf, buf + 1, buf + 2, (std::size_t{1} << 62) + 1, ops::sum{}, 1, cudaStream_t{},
                                         limits);
        }) == errc::invalid_argument);
  // Empty calls are no-ops, even on null pointers.
  CHECK(code_of([&] { gpu::reduce_elementwise<float>(nullptr, nullptr, nullptr, 0, ops::sum{}, 1, cudaStream_t{}); }) ==
        std::nullopt);
  CHECK(code_of([&] { gpu::convert<float, P, E>(nullptr, nullptr, 0, ops::avg{}, 2, cudaStream_t{}); }) == std::nullopt);
  // Without a driver or device (CI), a conversion names that cause, as the runtime gives it (CUB's
  // device query said "invalid device ordinal").
  int devices = 0;
  if (const cudaError_t found = cudaGetDeviceCount(&devices); found != cudaSuccess) {
    (void)cudaGetLastError();
    std::string what;
    try {
      gpu::convert<collx::half, E, P>(buf, reinterpret_cast<const collx::half*>(buf + 32), 8, ops::sum{}, 1, cudaStream_t{});
    } catch (const collx::error& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.find("gpu::convert: cudaGetDeviceCount (no device to convert on) failed: ") != std::string::npos);
    CHECK(what.find(cudaGetErrorName(found)) != std::string::npos);
  }
}

// cub::DeviceTransform reads cudaGetLastError() itself (CubDebug): an error an earlier call left
// unread used to come back from it as its own before anything was launched, and convert, seeing
// the same error before and after, returned as if it had enqueued the conversion.
namespace {
/// n random values of narrow type T (seeded) and what converting them to float gives.
template <class T>
std::pair<std::vector<T>, std::vector<float>> convert_input(std::size_t n, std::uint64_t seed) {
  using red = collx::detail::reduction<T, ops::sum>;
  std::mt19937_64 rng(seed);
  std::pair<std::vector<T>, std::vector<float>> io{std::vector<T>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    io.first[i] = random_value<T>(rng, false);
    io.second[i] = red::widen(io.first[i]);
  }
  return io;
}
}  // namespace

TEST_CASE("gpu convert: an error the caller left unread does not skip the conversion", "[gpu][cuda]") {
  constexpr std::size_t n = 1000;
  const auto [src, expected] = convert_input<collx::half>(n, 0xC0B);
  guarded<collx::half> gs(n, 0, 0xA5);
  guarded<float> gd(n, 0, 0xA5);
  gs.set(src);
  gs.upload();
  gd.upload();
  void* huge = nullptr;
  REQUIRE(cudaMalloc(&huge, std::size_t{1} << 62) == cudaErrorMemoryAllocation);  // left unread
  gpu::convert<collx::half, E, P>(gd.data(), gs.data(), n, ops::sum{}, 1, cudaStream_t{});
  CHECK(cudaGetLastError() == cudaSuccess);  // nothing of convert's (or CUB's) left pending
  cuda_ok(cudaDeviceSynchronize(), "convert");
  check_image(gd, gd.download(), expected, true, "dst");
}

// cudaStreamQuery on a stream being captured fails and invalidates the capture: convert must not
// query the stream, also when an error is left unread (the path that used to query it).
TEST_CASE("gpu convert: captured into a graph with an error left unread", "[gpu][cuda]") {
  constexpr std::size_t n = 4099;
  const auto [src, expected] = convert_input<collx::bfloat16>(n, 0xC0C);
  guarded<collx::bfloat16> gs(n, 1, 0x5A);
  guarded<float> gd(n, 3, 0x5A);
  gs.set(src);
  gs.upload();
  gd.upload();
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    cuda_ok(cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture");
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 1 << 20) != cudaSuccess);  // an error left unread, legal while capturing
    gpu::convert<collx::bfloat16, E, P>(gd.data(), gs.data(), n, ops::sum{}, 1, stream);
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture (the capture was invalidated)");
    cudaGraphExec_t exec = nullptr;
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check_image(gd, gd.download(), expected, true, "dst");
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(graph);
    gd.upload();  // poisoned again for the next mode
  }
  (void)cudaStreamDestroy(stream);
}
