// collx::nccl (collx/nccl/collectives.cuh) across GPUs: every collective against a host reference
// (tests/reference.hpp's folds), on NCCL's own path (float sum, small integers so any summation
// order is exact) and on collx's schedule path over grouped ncclSend/ncclRecv: a custom commutative
// struct op (ring), a non-commutative one (tree, rank order), and half sum forced onto algo::tree
// (fp32 partials, rounded once); the v-forms (groups of ncclBroadcast / ncclReduce, or one collx
// reduce per block); all_to_all and all_to_all_v (one group of ncclSend/ncclRecv); send, recv and
// send_recv; and options::check_calls_over's errors on every rank.
// A small segment_bytes makes the schedules run several segments.
// One rank per GPU, ranks as threads of this process (NCCL rejects two ranks of one communicator on
// one GPU): the [gpu] case needs 2 devices; nccl_test_main (gpu_test_main.cpp with
// COLLX_GPU_TEST_MIN_DEVICES=2) prints "SKIPPED: ..." and exits 77 with fewer.
#include <catch2/catch.hpp>

#include <collx/nccl/collectives.cuh>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../reference.hpp"
#include "custom_types.cuh"

namespace nc = collx::nccl;
namespace ops = collx::ops;

namespace {

using collx_cuda_test::affine;
using collx_cuda_test::then_op;
using collx_cuda_test::triple;
using collx_cuda_test::triple_op;

template <class T>
T gen(int rank, std::size_t i) {
  const std::uint64_t h = ref::hash(rank, i, 7);
  if constexpr (std::is_same_v<T, float>) return static_cast<float>(static_cast<int>(h % 2001) - 1000);
  else if constexpr (std::is_same_v<T, collx::half>) return collx::half(static_cast<float>(static_cast<int>(h % 201) - 100) / 8);
  else if constexpr (std::is_same_v<T, affine>) return {static_cast<std::uint32_t>(h) | 1u, static_cast<std::uint32_t>(h >> 32)};
  else return {static_cast<std::int32_t>(h), static_cast<std::uint32_t>(h >> 20), static_cast<std::int32_t>(h >> 33)};
}

template <class T>
bool same_bytes(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
struct device_buffer {
  T* p = nullptr;
  explicit device_buffer(std::size_t n) { collx::gpu::check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~device_buffer() { (void)cudaFree(p); }
  void put(const std::vector<T>& v) {
    if (!v.empty()) collx::gpu::check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<T> get(std::size_t n) const {
    std::vector<T> v(n);
    if (n) collx::gpu::check(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return v;
  }
};

struct failures {
  std::mutex m;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard<std::mutex> g(m);
    list.push_back(std::move(s));
  }
};

// allreduce, reduce_scatter and reduce of gen<T> under Op with Algo on rank c, against want(n, get).
template <class Algo, class T, class Op, class Want>
void check_reductions(nc::communicator& c, cudaStream_t s, std::size_t count, Want want, failures& f,
                      const std::string& label) {
  const int n = c.size(), r = c.rank();
  const auto un = static_cast<std::size_t>(n);
  std::vector<T> in(count * un);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = gen<T>(r, i);
  device_buffer<T> din(in.size()), dout(in.size());
  din.put(in);
  auto expect = [&](std::size_t i) { return want(n, [&](int q) { return gen<T>(q, i); }); };
  auto compare = [&](const char* coll, const std::vector<T>& got, std::size_t offset) {
    for (std::size_t j = 0; j < got.size(); ++j)
      if (!same_bytes(got[j], expect(offset + j))) {
        f.add(label + " " + coll + " count " + std::to_string(count) + ": rank " + std::to_string(r) + " element " +
              std::to_string(j) + " differs");
        return;
      }
  };
  nc::allreduce<Algo>(c, din.p, dout.p, count, Op{}, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  compare("allreduce", dout.get(count), 0);

  nc::allreduce<Algo>(c, dout.p, dout.p, 0, Op{}, s);  // count 0: nothing enqueued, nothing touched
  dout.put(in);
  nc::allreduce<Algo>(c, dout.p, dout.p, count, Op{}, s);  // in place
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  compare("allreduce in place", dout.get(count), 0);

  nc::reduce_scatter<Algo>(c, din.p, dout.p, count, Op{}, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  compare("reduce_scatter", dout.get(count), static_cast<std::size_t>(r) * count);

  // reduce_scatter_v, with two layouts: rank q's block ((q + 1) % 3) * count elements (on 2 ranks
  // two unequal blocks, the second at an offset; on 3 an empty one), and count on rank 0 only (the
  // others pass a literal nullptr). Out of place, then in place, where the rest of send must stay.
  for (int layout = 0; layout < 2; ++layout) {
    const std::string tag = " layout " + std::to_string(layout);
    const auto me = static_cast<std::size_t>(r);
    std::vector<std::size_t> vc(un), displ(un, 0);
    for (std::size_t q = 0; q < un; ++q) vc[q] = layout == 0 ? (q + 1) % 3 * count : q == 0 ? count : 0;
    for (std::size_t q = 1; q < un; ++q) displ[q] = displ[q - 1] + vc[q - 1];
    const std::size_t total = displ[un - 1] + vc[un - 1], mine = vc[me];
    std::vector<T> vin(total);
    for (std::size_t i = 0; i < total; ++i) vin[i] = gen<T>(r, i);
    device_buffer<T> vdin(total), vdout(mine);
    vdin.put(vin);
    if (mine) nc::reduce_scatter_v<Algo>(c, vdin.p, vdout.p, vc, Op{}, s);
    else nc::reduce_scatter_v<Algo>(c, vdin.p, nullptr, vc, Op{}, s);
    collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    compare(("reduce_scatter_v" + tag).c_str(), vdout.get(mine), displ[me]);
    nc::reduce_scatter_v<Algo>(c, vdin.p, vdin.p + displ[me], vc, Op{}, s);  // in place
    collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const std::vector<T> whole = vdin.get(total);
    const auto from = whole.begin() + static_cast<std::ptrdiff_t>(displ[me]);
    compare(("reduce_scatter_v in place" + tag).c_str(), std::vector<T>(from, from + static_cast<std::ptrdiff_t>(mine)),
            displ[me]);
    for (std::size_t i = 0; i < total; ++i)
      if ((i < displ[me] || i >= displ[me] + mine) && !same_bytes(whole[i], vin[i])) {
        f.add(label + " reduce_scatter_v in place" + tag + ": rank " + std::to_string(r) + " send element " +
              std::to_string(i) + ", outside its block, changed");
        break;
      }
  }

  const int root = n - 1;
  // Off the root, recv may be a literal nullptr (recv's type follows send's).
  if (r == root) nc::reduce<Algo>(c, din.p, dout.p, count, root, Op{}, s);
  else nc::reduce<Algo>(c, din.p, nullptr, count, root, Op{}, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (r == root) compare("reduce", dout.get(count), 0);
}

template <class T>
void check_moves(nc::communicator& c, cudaStream_t s, std::size_t count, failures& f, const std::string& label) {
  const int n = c.size(), r = c.rank();
  std::vector<T> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gen<T>(r, i);
  device_buffer<T> din(count), dout(count * static_cast<std::size_t>(n));
  din.put(in);
  nc::all_gather(c, din.p, dout.p, count, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const std::vector<T> all = dout.get(count * static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < count; ++i)
      if (!same_bytes(all[static_cast<std::size_t>(q) * count + i], gen<T>(q, i))) {
        f.add(label + " all_gather: rank " + std::to_string(r) + " block " + std::to_string(q) + " differs");
        q = n;
        break;
      }
  // all_gather_v, with reduce_scatter_v's two layouts (above), out of place into poisoned memory,
  // then in place.
  for (int layout = 0; layout < 2; ++layout) {
    const auto un = static_cast<std::size_t>(n), me = static_cast<std::size_t>(r);
    std::vector<std::size_t> vc(un), displ(un, 0);
    for (std::size_t q = 0; q < un; ++q) vc[q] = layout == 0 ? (q + 1) % 3 * count : q == 0 ? count : 0;
    for (std::size_t q = 1; q < un; ++q) displ[q] = displ[q - 1] + vc[q - 1];
    const std::size_t total = displ[un - 1] + vc[un - 1];
    std::vector<T> want, vjunk(total);
    for (std::size_t q = 0; q < un; ++q)
      for (std::size_t i = 0; i < vc[q]; ++i) want.push_back(gen<T>(static_cast<int>(q), i));
    std::memset(static_cast<void*>(vjunk.data()), 0xab, vjunk.size() * sizeof(T));
    std::vector<T> block(vc[me]);
    for (std::size_t i = 0; i < vc[me]; ++i) block[i] = gen<T>(r, i);
    device_buffer<T> vin(vc[me]), vout(total);
    vin.put(block);
    for (bool in_place : {false, true}) {
      if (in_place) {
        std::vector<T> mine_in_place(vjunk);
        std::copy(block.begin(), block.end(), mine_in_place.begin() + static_cast<std::ptrdiff_t>(displ[me]));
        vout.put(mine_in_place);
        nc::all_gather_v(c, vout.p + displ[me], vout.p, vc, s);
      } else {
        vout.put(vjunk);
        if (vc[me]) nc::all_gather_v(c, vin.p, vout.p, vc, s);
        else nc::all_gather_v(c, nullptr, vout.p, vc, s);
      }
      collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      const std::vector<T> got = vout.get(total);
      for (std::size_t i = 0; i < total; ++i)
        if (!same_bytes(got[i], want[i])) {
          f.add(label + " all_gather_v layout " + std::to_string(layout) + (in_place ? " in place" : "") + ": rank " +
                std::to_string(r) + " element " + std::to_string(i) + " differs");
          break;
        }
    }
    if (layout == 1) continue;
    // Counts of the wrong length, or a negative one, are refused on each rank before NCCL is called.
    std::vector<std::size_t> longer(vc);
    longer.push_back(count);
    std::vector<int> negative(un, 1);
    negative[un - 1] = -1;
    for (int bad = 0; bad < 2; ++bad)
      try {
        if (bad == 0) nc::all_gather_v(c, vin.p, vout.p, longer, s);
        else nc::all_gather_v(c, vin.p, vout.p, negative, s);
        f.add(label + " all_gather_v: rank " + std::to_string(r) + ": bad counts " + std::to_string(bad) + " did not throw");
      } catch (const collx::error& e) {
        const char* says = bad == 0 ? "one per rank" : "negative";
        if (e.code() != collx::errc::invalid_argument || std::string(e.what()).find(says) == std::string::npos)
          f.add(label + " all_gather_v bad counts: " + e.what());
      }
  }

  const int root = 1 % n;
  // Off the root, send may be a literal nullptr (send's type follows recv's).
  if (r == root) nc::broadcast(c, din.p, dout.p, count, root, s);
  else nc::broadcast(c, nullptr, dout.p, count, root, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const std::vector<T> b = dout.get(count);
  for (std::size_t i = 0; i < count; ++i)
    if (!same_bytes(b[i], gen<T>(root, i))) {
      f.add(label + " broadcast: rank " + std::to_string(r) + " element " + std::to_string(i) + " differs");
      break;
    }

  // all_to_all: element i of rank src's block for dst is gen(src, dst * stride + i); recv poisoned.
  const auto un = static_cast<std::size_t>(n);
  constexpr std::size_t stride = 1 << 20;
  auto value = [&](int src, std::size_t dst, std::size_t i) { return gen<T>(src, dst * stride + i); };
  auto poison = [](std::vector<T>& v) { std::memset(static_cast<void*>(v.data()), 0xab, v.size() * sizeof(T)); };
  std::vector<T> a2a(count * un), junk(count * un);
  for (std::size_t d = 0; d < un; ++d)
    for (std::size_t i = 0; i < count; ++i) a2a[d * count + i] = value(r, d, i);
  poison(junk);
  device_buffer<T> ain(count * un), aout(count * un);
  ain.put(a2a);
  aout.put(junk);
  nc::all_to_all(c, ain.p, aout.p, count, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const std::vector<T> got = aout.get(count * un);
  for (std::size_t q = 0; q < un; ++q)
    for (std::size_t i = 0; i < count; ++i)
      if (!same_bytes(got[q * count + i], value(static_cast<int>(q), static_cast<std::size_t>(r), i))) {
        f.add(label + " all_to_all: rank " + std::to_string(r) + " block " + std::to_string(q) + " differs");
        q = un;
        break;
      }

  // all_to_all_v: rank src sends dst ((src + 2 dst + 1) % 3) * count elements, the counts as int
  // (as MPI codes keep them). On 2 ranks: each sends itself count, rank 0 sends rank 1 nothing
  // while rank 1 sends rank 0 2 count (a pair with one side empty).
  auto sent = [&](int src, std::size_t dst) { return static_cast<std::size_t>((src + 2 * static_cast<int>(dst) + 1) % 3) * count; };
  std::vector<int> sc(un), rc(un);
  std::vector<T> vin, want;
  for (std::size_t q = 0; q < un; ++q) {
    sc[q] = static_cast<int>(sent(r, q));
    rc[q] = static_cast<int>(sent(static_cast<int>(q), static_cast<std::size_t>(r)));
    for (std::size_t i = 0; i < sent(r, q); ++i) vin.push_back(value(r, q, i));
    for (std::size_t i = 0; i < sent(static_cast<int>(q), static_cast<std::size_t>(r)); ++i)
      want.push_back(value(static_cast<int>(q), static_cast<std::size_t>(r), i));
  }
  std::vector<T> vjunk(want.size());
  poison(vjunk);
  device_buffer<T> vdin(vin.size()), vdout(want.size());
  vdin.put(vin);
  vdout.put(vjunk);
  nc::all_to_all_v(c, vdin.p, sc, vdout.p, rc, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const std::vector<T> vgot = vdout.get(want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!same_bytes(vgot[i], want[i])) {
      f.add(label + " all_to_all_v: rank " + std::to_string(r) + " element " + std::to_string(i) + " differs");
      break;
    }
  // A self count that differs between the lists is refused on that rank, before NCCL is called.
  std::vector<int> bad = sc;
  ++bad[static_cast<std::size_t>(r)];
  try {
    nc::all_to_all_v(c, vdin.p, bad, vdout.p, rc, s);
    f.add(label + " all_to_all_v: rank " + std::to_string(r) + ": a self count that differs did not throw");
  } catch (const collx::error& e) {
    if (e.code() != collx::errc::invalid_argument || std::string(e.what()).find("sends itself") == std::string::npos)
      f.add(label + " all_to_all_v self count: " + e.what());
  }
}

// Point-to-point: a ring shift by send_recv (block from rank r - 1), the same shift by send and
// recv ordered by rank parity, a halo of no_peer edges (no wrap-around), and a copy to this rank.
template <class T>
void check_p2p(nc::communicator& c, cudaStream_t s, std::size_t count, failures& f, const std::string& label) {
  const int n = c.size(), r = c.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<T> mine(count), junk(count);
  for (std::size_t i = 0; i < count; ++i) mine[i] = gen<T>(r, 500000 + i);
  std::memset(static_cast<void*>(junk.data()), 0xab, junk.size() * sizeof(T));
  device_buffer<T> din(count), dout(count);
  din.put(mine);
  auto expect_from = [&](const std::string& what, int from) {
    collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    const std::vector<T> got = dout.get(count);
    for (std::size_t i = 0; i < count; ++i)
      if (!same_bytes(got[i], gen<T>(from, 500000 + i))) {
        f.add(label + " " + what + ": rank " + std::to_string(r) + " element " + std::to_string(i) + " differs");
        return;
      }
  };
  dout.put(junk);
  nc::send_recv(c, din.p, count, next, dout.p, count, prev, s);
  expect_from("send_recv ring shift", prev);
  dout.put(junk);
  // Even ranks send first, odd ranks receive first; with an odd n the last rank (even) receives
  // first too, so that no cycle of sends waits.
  const bool send_first = r % 2 == 0 && !(n % 2 != 0 && r == n - 1);
  if (send_first) nc::send(c, din.p, count, next, s);
  nc::recv(c, dout.p, count, prev, s);
  if (!send_first) nc::send(c, din.p, count, next, s);
  expect_from("send then recv", prev);
  dout.put(junk);  // no wrap-around: rank 0 receives nothing, rank n - 1 sends nothing
  nc::send_recv(c, din.p, count, r == n - 1 ? collx::no_peer : next, dout.p, count, r == 0 ? collx::no_peer : prev, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (r == 0) {
    const std::vector<T> got = dout.get(count);
    if (std::memcmp(static_cast<const void*>(got.data()), junk.data(), count * sizeof(T)) != 0)
      f.add(label + " halo: rank 0's recv was written");
  } else {
    expect_from("halo", prev);
  }
  dout.put(junk);
  nc::send_recv(c, din.p, count, r, dout.p, count, r, s);  // a copy to itself
  expect_from("send_recv to itself", r);
  dout.put(junk);  // count 0 on every rank: nothing posted, nothing written
  nc::send_recv(c, din.p, 0, next, dout.p, 0, prev, s);
  nc::send(c, din.p, 0, next, s);
  nc::recv(c, dout.p, 0, prev, s);
  collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  if (std::memcmp(static_cast<const void*>(dout.get(count).data()), junk.data(), count * sizeof(T)) != 0)
    f.add(label + " count 0: rank " + std::to_string(r) + "'s recv was written");
}

/// The number of ranks the [gpu] cases run: one per GPU, at most 4 (at least 2 required).
int gpu_ranks() {
  int devices = 0;
  collx::gpu::check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int n = std::min(devices, 4);
  REQUIRE(n >= 2);
  return n;
}

/// Runs body(r, id, f) on n threads, thread r on GPU r, with an ncclUniqueId they share; an
/// exception becomes its rank's failure; then reports every failure (Catch2's assertions are not
/// thread-safe, so the ranks collect them in f).
template <class Body>
void run_on_gpus(int n, Body body) {
  ncclUniqueId id{};
  nc::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  failures f;
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      try {
        collx::gpu::check(cudaSetDevice(r), "cudaSetDevice");
        body(r, id, f);
      } catch (const std::exception& e) {
        f.add("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  for (auto& t : ranks) t.join();
  for (const std::string& s : f.list) FAIL_CHECK(s);
  CHECK(f.list.empty());
}

}  // namespace

TEST_CASE("nccl: which path each (type, op, algorithm) takes, and NCCL's names", "[nccl]") {
  using collx::algo::automatic;
  STATIC_REQUIRE(nc::detail::uses_native<automatic, float, ops::sum>);
  STATIC_REQUIRE(nc::detail::uses_native<automatic, __half, ops::avg>);
  STATIC_REQUIRE(nc::detail::uses_native<automatic, __nv_bfloat16, ops::max>);
  STATIC_REQUIRE_FALSE(nc::detail::uses_native<collx::algo::tree, float, ops::sum>);  // collx's numerics asked for
  STATIC_REQUIRE_FALSE(nc::detail::uses_native<automatic, affine, then_op>);
  STATIC_REQUIRE_FALSE(nc::detail::uses_native<automatic, int, ops::bxor>);
  CHECK(std::string(nc::detail::path_name<automatic, float, ops::sum>()) == "nccl");
  CHECK(std::string(nc::detail::path_name<automatic, affine, then_op>()) == "tree");
  CHECK(std::string(nc::detail::path_name<automatic, triple, triple_op>()) == "ring");
  CHECK(nc::to_nccl(nc::element_type_v<__half>) == ncclFloat16);
  CHECK(nc::to_nccl(nc::element_type_v<collx::bfloat16>) == ncclBfloat16);
  CHECK(nc::to_nccl(nc::element_type_v<std::uint64_t>) == ncclUint64);
  CHECK(nc::to_nccl(nc::red_op_v<ops::avg>) == ncclAvg);
  CHECK_THROWS_AS(nc::to_nccl(nc::data_type::none), collx::error);
  CHECK(nc::errc_of(ncclUnhandledCudaError) == collx::errc::cuda);
  CHECK(nc::errc_of(ncclSystemError) == collx::errc::transport);
  try {
    nc::check(ncclInvalidArgument, "ncclAllReduce");
    FAIL("no throw");
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::transport);
    CHECK_THAT(e.what(), Catch::Contains("ncclAllReduce failed: ") && Catch::Contains(ncclGetErrorString(ncclInvalidArgument)));
  }
}

TEST_CASE("nccl: without a usable CUDA device the communicator says so, naming its rank", "[nccl]") {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    SUCCEED("a CUDA device is present: the [gpu] cases run instead");
    return;
  }
  ncclUniqueId id{};  // not reached: the device is looked for first
  try {
    nc::communicator c(id, 1, 2);
    FAIL("no throw");
  } catch (const collx::error& e) {
    CHECK(e.code() == collx::errc::cuda);
    CHECK_THAT(e.what(), Catch::Contains("nccl::communicator rank 1/2: no usable CUDA device (cudaGetDevice: "));
  }
  // connect: every rank learns it before NCCL is called (two thread ranks of a host communicator).
  std::vector<std::string> said(2);
  collx::run_threads(2, [&](collx::communicator& host) {
    try {
      (void)nc::connect(host);
      said[static_cast<std::size_t>(host.rank())] = "no throw";
    } catch (const collx::error& e) {
      said[static_cast<std::size_t>(host.rank())] =
          (e.code() == collx::errc::cuda ? "" : "not errc::cuda: ") + std::string(e.what());
    }
  });
  for (const std::string& w : said)
    CHECK_THAT(w, Catch::StartsWith("nccl::connect: nccl::communicator rank ") && Catch::Contains("no usable CUDA device"));
}

TEST_CASE("nccl: every collective against the host reference, NCCL and schedule paths", "[gpu][nccl]") {
  const int n = gpu_ranks();
  run_on_gpus(n, [&](int r, const ncclUniqueId& id, failures& f) {
    nc::options o;
    o.segment_bytes = 1024;  // several segments for the larger counts
    nc::communicator c(id, r, n, o);
    cudaStream_t s = nullptr;
    collx::gpu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    const auto left = [](int k, auto get) { return ref::fold_left<float, ops::sum>(k, get); };
    const auto tree_half = [](int k, auto get) { return ref::fold_tree<collx::half, ops::sum>(k, get); };
    const auto then = [](int k, auto get) {
      affine a = get(0);
      for (int q = 1; q < k; ++q) a = then_op{}(a, get(q));
      return a;
    };
    const auto trip = [](int k, auto get) {
      triple a = get(0);
      for (int q = 1; q < k; ++q) a = triple_op{}(a, get(q));
      return a;
    };
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{3001}}) {
      check_reductions<collx::algo::automatic, float, ops::sum>(c, s, count, left, f, "float sum (NCCL)");
      check_reductions<collx::algo::automatic, affine, then_op>(c, s, count, then, f, "affine then (tree)");
      check_reductions<collx::algo::automatic, triple, triple_op>(c, s, count, trip, f, "triple (ring)");
      check_reductions<collx::algo::tree, collx::half, ops::sum>(c, s, count, tree_half, f, "half sum (tree)");
      check_moves<float>(c, s, count, f, "float");
      check_moves<triple>(c, s, count, f, "triple");
      check_p2p<float>(c, s, count, f, "float");
      check_p2p<triple>(c, s, count, f, "triple");
    }
    // The wrong current device is refused before anything is enqueued.
    collx::gpu::check(cudaSetDevice((r + 1) % n), "cudaSetDevice");
    try {
      nc::allreduce(c, static_cast<float*>(nullptr), static_cast<float*>(nullptr), 0, ops::sum{}, s);
      f.add("rank " + std::to_string(r) + ": a call on the wrong device did not throw");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument) f.add(std::string("wrong device: ") + e.what());
    }
    collx::gpu::check(cudaSetDevice(r), "cudaSetDevice");
    collx::gpu::check(cudaStreamDestroy(s), "cudaStreamDestroy");
  });
}

TEST_CASE("nccl: check_calls_over turns disagreeing calls into errors on every rank", "[gpu][nccl]") {
  // With options::check_calls_over, each call first compares the ranks' calls over a host
  // communicator (here thread ranks): a count that differs, a rank that refuses its arguments and
  // all_to_all_v counts whose pairs disagree each end in a collx::error on every rank, where NCCL
  // alone would hang; calls that agree run as before, and the NCCL communicator stays usable.
  const int n = gpu_ranks();
  collx::communicator_options ho;
  ho.timeout = std::chrono::seconds(20);
  std::vector<collx::communicator> hosts = collx::make_thread_communicators(n, ho);
  run_on_gpus(n, [&](int r, const ncclUniqueId& id, failures& f) {
    nc::options o;
    o.check_calls_over = &hosts[static_cast<std::size_t>((r + 1) % n)];  // another rank's: refused before NCCL
    try {
      nc::communicator wrong(id, r, n, o);
      f.add("rank " + std::to_string(r) + ": check_calls_over of another rank was taken");
    } catch (const collx::error& e) {
      if (e.code() != collx::errc::invalid_argument) f.add(std::string("check_calls_over of another rank: ") + e.what());
    }
    o.check_calls_over = &hosts[static_cast<std::size_t>(r)];
    {  // connect: options refused on rank 0 alone stop every rank before NCCL is called
      nc::options bad = o;
      if (r == 0) bad.segment_bytes = 100;
      try {
        (void)nc::connect(hosts[static_cast<std::size_t>(r)], bad);
        f.add("rank " + std::to_string(r) + ": connect with rank 0's options refused went on");
      } catch (const collx::error& e) {
        if (e.code() != collx::errc::invalid_argument ||
            std::string(e.what()).find(r == 0 ? "segment_bytes 100" : "rank 0 cannot join") == std::string::npos)
          f.add(std::string("connect with bad options: ") + e.what());
      }
    }
    nc::communicator c(id, r, n, o);
    cudaStream_t s = nullptr;
    collx::gpu::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    device_buffer<float> buf(64 * static_cast<std::size_t>(n)), out(64 * static_cast<std::size_t>(n));
    const auto expect = [&](const char* what, collx::errc code, const std::string& text, auto call) {
      try {
        call();
        f.add(std::string(what) + ": rank " + std::to_string(r) + " did not throw");
      } catch (const collx::error& e) {
        if (e.code() != code || std::string(e.what()).find(text) == std::string::npos)
          f.add(std::string(what) + ": rank " + std::to_string(r) + ": " + e.what());
      }
    };
    nc::allreduce(c, buf.p, out.p, 64, ops::sum{}, s);  // agreeing calls run
    expect("count differs", collx::errc::mismatch, "count", [&] {
      nc::allreduce(c, buf.p, out.p, r == 0 ? 32 : 64, ops::sum{}, s);
    });
    expect("a rank refuses", collx::errc::invalid_argument, r == 1 ? "null buffer" : "rank 1 refused its call", [&] {
      nc::broadcast(c, buf.p, r == 1 ? nullptr : out.p, 16, 0, s);
    });
    std::vector<std::size_t> sc(static_cast<std::size_t>(n), 2), rc(static_cast<std::size_t>(n), 2);
    if (r == 0) rc[1] = 3;  // rank 1 sends rank 0 only 2
    expect("all_to_all_v pairs", collx::errc::mismatch, r == 0 ? "rank 1 sends this rank 2" : "rank 0's recv_counts", [&] {
      nc::all_to_all_v(c, buf.p, sc, out.p, rc, s);
    });
    // Point-to-point calls are not checked: a ring shift that agrees runs as before.
    nc::send_recv(c, buf.p, 8, (r + 1) % n, out.p, 8, (r + n - 1) % n, s);
    nc::allreduce(c, buf.p, out.p, 64, ops::sum{}, s);  // and the communicators are still usable
    collx::gpu::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    collx::gpu::check(cudaStreamDestroy(s), "cudaStreamDestroy");
  });
}
