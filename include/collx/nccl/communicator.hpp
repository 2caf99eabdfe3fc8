/// @file nccl/communicator.hpp
/// collx's handle on an NCCL communicator (one rank of an NCCL job, one GPU), NCCL error checking,
/// and the bootstrap that builds one over any collx host communicator. Host C++ with <nccl.h> and
/// the CUDA runtime (CMake: target collx::nccl); the collectives are in nccl/collectives.cuh.
///
/// What NCCL does not give, and collx adds only on request:
///  - no call-signature check across ranks by default: ranks that disagree on a collective, count,
///    type, op or root are not detected; they hang (or read garbage) until NCCL's own watchdog or
///    an ncclCommAbort ends the job. collx's host transports fail such calls with errc::mismatch;
///    with options::check_calls_over (a host communicator of the same ranks) this path's
///    collectives do too, before anything is enqueued (nccl/call_check.hpp), at the cost of a host
///    collective per call (point-to-point calls are not checked).
///  - no timeout: collx calls only enqueue work on a stream; a missing peer shows as a stream that
///    never completes. Call abort() (ncclCommAbort) from another thread to get out. With
///    check_calls_over, a call waits in its check until every rank makes it, and a rank that never
///    does gives the others the host communicator's timeout (abort() does not end that wait).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collx/all_gather.hpp>
#include <collx/broadcast.hpp>
#include <collx/communicator.hpp>
#include <collx/cuda/launch_geometry.hpp>
#include <collx/cuda/runtime.hpp>
#include <collx/cuda_types.hpp>
#include <collx/detail/type_name.hpp>
#include <collx/error.hpp>
#include <collx/nccl/call_check.hpp>
#include <collx/nccl/native.hpp>

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 13, 0)
#error "collx::nccl needs NCCL 2.13 or newer (ncclAvg, ncclBfloat16, ncclGetLastError)"
#endif

namespace collx {
inline namespace v0 {
namespace nccl {

/// CUDA's own 16-bit floats have NCCL's layout too.
template <>
struct element_type<__half> {
  static constexpr data_type value = data_type::float16;  ///< ncclFloat16
};
/// CUDA's bfloat16.
template <>
struct element_type<__nv_bfloat16> {
  static constexpr data_type value = data_type::bfloat16;  ///< ncclBfloat16
};

/// The collx error code for an NCCL result: errc::cuda for ncclUnhandledCudaError (a CUDA call
/// inside NCCL failed), errc::transport for every other failure.
constexpr errc errc_of(ncclResult_t r) noexcept {
  return r == ncclUnhandledCudaError ? errc::cuda : errc::transport;
}

/// Throws collx::error (errc_of(r)) naming `what`, ncclGetErrorString(r) and NCCL's last error text
/// (ncclGetLastError: process-wide in NCCL, so with several threads it may describe another
/// thread's failure), unless r is ncclSuccess.
inline void check(ncclResult_t r, const char* what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string msg = std::string(what) + " failed: " + ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last && *last) msg += std::string(" (") + last + ")";
  COLLX_THROW(errc_of(r), msg);
}

/// NCCL's ncclDataType_t for a collx data_type. @throws collx::error (errc::internal) for none.
inline ncclDataType_t to_nccl(data_type t) {
  switch (t) {
    case data_type::int8: return ncclInt8;
    case data_type::uint8: return ncclUint8;
    case data_type::int32: return ncclInt32;
    case data_type::uint32: return ncclUint32;
    case data_type::int64: return ncclInt64;
    case data_type::uint64: return ncclUint64;
    case data_type::float16: return ncclFloat16;
    case data_type::bfloat16: return ncclBfloat16;
    case data_type::float32: return ncclFloat32;
    case data_type::float64: return ncclFloat64;
    case data_type::none: break;
  }
  COLLX_THROW(errc::internal, "nccl::to_nccl: a type NCCL does not have");
}

/// NCCL's ncclRedOp_t for a collx red_op. @throws collx::error (errc::internal) for none.
inline ncclRedOp_t to_nccl(red_op o) {
  switch (o) {
    case red_op::sum: return ncclSum;
    case red_op::prod: return ncclProd;
    case red_op::min: return ncclMin;
    case red_op::max: return ncclMax;
    case red_op::avg: return ncclAvg;
    case red_op::none: break;
  }
  COLLX_THROW(errc::internal, "nccl::to_nccl: an op NCCL does not have");
}

/// Settings of a collx NCCL communicator. Every rank must pass the same values.
struct options {
  /// Device memory for the schedule path (custom types and ops), per communicator: a reduction is
  /// cut into segments of at most this many bytes of accumulator values, and the communicator
  /// holds one scratch buffer and one receive staging buffer of this size (allocated at the first
  /// schedule-path call). Larger segments mean fewer, longer NCCL groups.
  std::size_t segment_bytes = std::size_t{8} << 20;
  /// A host communicator with the same ranks (its size and this rank's number equal the NCCL
  /// communicator's), over which every collective call first checks that all ranks make the same
  /// call: the collective, type, op, path, root and counts (nccl/call_check.hpp; send, recv and
  /// send_recv are not checked: nccl/collectives.cuh, call_shape, says why). Ranks that disagree throw
  /// collx::error (errc::mismatch) on every rank, and a rank that refuses its arguments makes the
  /// others throw too, before anything is enqueued, instead of hanging in NCCL; a rank that never
  /// makes the call gives the others the host communicator's timeout (errc::timeout). A debugging
  /// aid: each call then blocks until every rank has made it and costs one host all-gather (two
  /// more for all_to_all_v's pairs); under CUDA graph capture it checks the captured calls, not
  /// the replays. Null (the default): no check, as NCCL. It must outlive the NCCL
  /// communicator and take no other call while an NCCL call checks over it (one thread at a time,
  /// as every collx communicator); every rank sets it or none does. nccl::connect(host, opt) with
  /// opt.check_calls_over = &host is the usual way.
  collx::communicator* check_calls_over = nullptr;
};

/// One rank of an NCCL communicator, with the device memory collx's schedules need on it.
/// Movable, not copyable. Collectives: nccl/collectives.cuh. Calls are stream-ordered: they enqueue
/// work and return; errors the host can see (bad arguments, an NCCL or CUDA call refused) throw
/// collx::error at once, faults in the enqueued work show at the stream's next synchronisation.
/// All ranks must make the same calls in the same order (NCCL's rule; checked only with
/// options::check_calls_over, see the file comment). The calling thread's current device must be
/// the communicator's (device()).
class communicator {
 public:
  /// Wraps an NCCL communicator the caller created (ncclCommInitRank, ncclCommSplit, ...). Not
  /// owned: the caller destroys it, after this handle.
  /// @throws collx::error (errc::invalid_argument) for a null comm or bad options (segment_bytes
  ///         below 256, check_calls_over with other ranks); (errc::transport/cuda) when NCCL
  ///         cannot report its rank, size or device.
  explicit communicator(ncclComm_t comm, options opt = {}) : comm_(comm), owned_(false), opt_(opt) { init(); }

  /// Creates rank `rank` of a `size`-rank NCCL communicator (ncclCommInitRank) on the calling
  /// thread's current device, from the ncclUniqueId rank 0 made with ncclGetUniqueId and gave every
  /// rank (see connect() and unique_id_over()). Blocks until all `size` ranks have joined. Owned:
  /// the destructor calls ncclCommDestroy.
  /// @throws collx::error (errc::invalid_argument) for rank outside [0, size) or bad options
  ///         (before NCCL is called); (errc::cuda) without a usable CUDA device (cudaGetDevice
  ///         fails: no GPU or driver); (errc::transport/cuda) when NCCL fails, naming the rank and
  ///         device.
  communicator(const ncclUniqueId& id, int rank, int size, options opt = {}) : owned_(true), opt_(opt) {
    if (size < 1 || rank < 0 || rank >= size)
      COLLX_THROW(errc::invalid_argument, "nccl::communicator: rank " + std::to_string(rank) + " outside [0, " +
                                              std::to_string(size) + ")");
    check_options(opt_, rank, size);  // before NCCL, so that every rank with bad options stops here
    const int device = usable_device(rank, size);  // "no GPU" before NCCL says less
    const std::string who = "nccl::communicator rank " + std::to_string(rank) + "/" + std::to_string(size);
    try {
      check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    } catch (const error& e) {
      COLLX_THROW(e.code(), who + " on CUDA device " + std::to_string(device) + ": " + e.what());
    }
    identity_ = collx::detail::fnv1a(std::string_view(id.internal, sizeof id.internal));
    try {
      init();
    } catch (...) {  // no destructor runs for a constructor that throws
      (void)ncclCommDestroy(comm_);
      throw;
    }
  }

  /// Not copyable: it owns its device memory (and an owned NCCL communicator).
  communicator(const communicator&) = delete;
  /// Not copyable: it owns its device memory (and an owned NCCL communicator).
  communicator& operator=(const communicator&) = delete;
  /// Takes over `o`'s NCCL communicator and device memory; `o` is left empty, with its options
  /// (so that a call on it still takes part in check_calls_over's check, and refuses there).
  communicator(communicator&& o) noexcept {
    swap(o);
    o.opt_ = opt_;
  }
  /// As the move constructor; what this held is released first.
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      communicator tmp(std::move(o));
      swap(tmp);
    }
    return *this;
  }
  /// Frees the device memory (cudaFree waits for the device) and destroys an owned NCCL
  /// communicator (ncclCommDestroy: after its enqueued work completes). Errors are ignored.
  ~communicator() {
    if (event_) (void)cudaEventDestroy(event_);
    if (memory_) (void)cudaFree(memory_);
    if (owned_ && comm_) (void)ncclCommDestroy(comm_);
  }

  /// This rank, in [0, size()).
  int rank() const noexcept { return rank_; }
  /// Number of ranks.
  int size() const noexcept { return size_; }
  /// The CUDA device this rank runs on (ncclCommCuDevice).
  int device() const noexcept { return device_; }
  /// The NCCL communicator.
  ncclComm_t get() const noexcept { return comm_; }
  /// The settings it was made with.
  const options& opts() const noexcept { return opt_; }
  /// Launch limits of device() (for collx's kernels).
  const gpu::device_limits& limits() const noexcept { return limits_; }
  /// The number of the next call checked over options::check_calls_over (from 1; for its messages).
  std::uint64_t next_call_number() noexcept { return ++checked_calls_; }
  /// A hash of the ncclUniqueId this communicator was made from, the same on its ranks and
  /// different for another communicator (0 for a wrapped ncclComm_t): check_calls_over's check
  /// compares it, so that calls on two NCCL communicators that share a host communicator are not
  /// taken for each other.
  std::uint64_t identity() const noexcept { return identity_; }

  /// The calling thread's current CUDA device, for rank `rank` of `size` (in the message).
  /// @throws collx::error (errc::cuda) "nccl::communicator rank R/N: no usable CUDA device" when
  ///         cudaGetDevice fails (no GPU, or no driver: CUDA then says the driver is insufficient).
  static int usable_device(int rank, int size) {
    int device = -1;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
      const char* hint = e == cudaErrorInsufficientDriver ? "; CUDA says so where no GPU driver is loaded" : "";
      COLLX_THROW(errc::cuda, "nccl::communicator rank " + std::to_string(rank) + "/" + std::to_string(size) +
                                  ": no usable CUDA device (cudaGetDevice: " + cudaGetErrorName(e) + ", " +
                                  cudaGetErrorString(e) + hint + ")");
    }
    return device;
  }

  /// Throws collx::error (errc::invalid_argument) for options that cannot serve rank `rank` of
  /// `size`: segment_bytes below 256, a check_calls_over with another size or rank.
  static void check_options(const options& o, int rank, int size) {
    if (o.segment_bytes < 256)
      COLLX_THROW(errc::invalid_argument, "nccl::options: segment_bytes " + std::to_string(o.segment_bytes) + " < 256");
    if (const collx::communicator* h = o.check_calls_over; h && (h->size() != size || h->rank() != rank))
      COLLX_THROW(errc::invalid_argument,
                  "nccl::options: check_calls_over is rank " + std::to_string(h->rank()) + " of " +
                      std::to_string(h->size()) + ", the NCCL communicator rank " + std::to_string(rank) + " of " +
                      std::to_string(size) + " (the host communicator needs the same ranks)");
  }

  /// Aborts the NCCL communicator (ncclCommAbort): pending and future work on it fails. For an
  /// owned communicator the handle is released; the destructor then only frees memory. May be
  /// called from another thread to end a hang (NCCL's rules on concurrent calls apply).
  void abort() noexcept {
    if (comm_) (void)ncclCommAbort(comm_);
    if (owned_) comm_ = nullptr;
  }

  /// The schedule path's device memory: scratch (segment_bytes) and staging (segment_bytes), both
  /// 256-byte aligned, allocated on first use with cudaMalloc on device(); and an event the path
  /// records after each call, so that calls on different streams do not share them concurrently.
  /// @throws collx::error (errc::cuda) when the allocation fails.
  std::pair<void*, void*> schedule_memory() {
    if (!memory_) {
      check_device("nccl::communicator::schedule_memory");
      gpu::check(cudaMalloc(&memory_, 2 * slot_bytes()), "cudaMalloc (collx::nccl scratch and staging)");
      gpu::check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    return {memory_, static_cast<std::byte*>(memory_) + slot_bytes()};
  }
  /// The event of schedule_memory() (null before its first call).
  cudaEvent_t schedule_event() const noexcept { return event_; }

  /// Throws collx::error (errc::invalid_argument) naming `what` unless the calling thread's
  /// current device is device(), or the handle is empty (moved from, or aborted).
  void check_device(const char* what) const {
    if (!comm_) COLLX_THROW(errc::invalid_argument, std::string(what) + ": empty or aborted nccl::communicator");
    int d = -1;
    gpu::check(cudaGetDevice(&d), "cudaGetDevice");
    if (d != device_)
      COLLX_THROW(errc::invalid_argument, std::string(what) + ": the current CUDA device is " + std::to_string(d) +
                                              ", the NCCL communicator's is " + std::to_string(device_) +
                                              " (cudaSetDevice first)");
  }

 private:
  void init() {
    if (!comm_) COLLX_THROW(errc::invalid_argument, "nccl::communicator: null ncclComm_t");
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank", comm_);
    check(ncclCommCount(comm_, &size_), "ncclCommCount", comm_);
    check(ncclCommCuDevice(comm_, &device_), "ncclCommCuDevice", comm_);
    check_options(opt_, rank_, size_);
    limits_ = gpu::device_limits_of(device_);
  }
  std::size_t slot_bytes() const noexcept { return (opt_.segment_bytes + 255) / 256 * 256; }
  void swap(communicator& o) noexcept {
    std::swap(comm_, o.comm_);
    std::swap(owned_, o.owned_);
    std::swap(opt_, o.opt_);
    std::swap(rank_, o.rank_);
    std::swap(size_, o.size_);
    std::swap(device_, o.device_);
    std::swap(limits_, o.limits_);
    std::swap(memory_, o.memory_);
    std::swap(event_, o.event_);
    std::swap(checked_calls_, o.checked_calls_);
    std::swap(identity_, o.identity_);
  }

  ncclComm_t comm_ = nullptr;
  bool owned_ = false;
  options opt_{};
  int rank_ = 0, size_ = 0, device_ = -1;
  gpu::device_limits limits_{1};
  void* memory_ = nullptr;
  cudaEvent_t event_ = nullptr;
  std::uint64_t checked_calls_ = 0;
  std::uint64_t identity_ = 0;
};

/// An ncclUniqueId made by `root` of the host communicator (ncclGetUniqueId) and broadcast to every
/// rank of it with collx::broadcast (its 128 bytes), over whatever transport `host` uses (threads,
/// shared memory, MPI). Collective over `host`.
/// @throws collx::error from ncclGetUniqueId (errc::transport) or the broadcast (host errors).
inline ncclUniqueId unique_id_over(collx::communicator& host, int root = 0) {
  ncclUniqueId id{};
  if (host.rank() == root) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  collx::broadcast(host, std::span<char>(id.internal, sizeof id.internal), root);
  return id;
}

/// An owned NCCL communicator with the ranks of `host` (same rank numbers), on the calling
/// thread's current device: the ranks agree that each has sound options and a usable CUDA device
/// (a host all-gather), then unique_id_over(host), then ncclCommInitRank. Collective over `host`.
/// @throws collx::error on every rank, before NCCL is called, when some rank's options are refused
///         (errc::invalid_argument, communicator::check_options) or it has no usable device
///         (errc::cuda, communicator::usable_device): that rank says why, the others name it with
///         its code; otherwise as unique_id_over() and communicator(id, rank, size).
inline communicator connect(collx::communicator& host, options opt = {}) {
  // A rank alone refusing would leave the others waiting in ncclCommInitRank.
  std::string why;
  int code = 0;
  try {
    communicator::check_options(opt, host.rank(), host.size());
    (void)communicator::usable_device(host.rank(), host.size());
  } catch (const error& e) {
    why = e.what();
    code = static_cast<int>(e.code());
  }
  std::vector<int> codes(static_cast<std::size_t>(host.size()));
  collx::all_gather(host, std::span<const int>(&code, 1), std::span<int>(codes));
  if (code) COLLX_THROW(static_cast<errc>(code), "nccl::connect: " + why);
  for (std::size_t q = 0; q < codes.size(); ++q)
    if (codes[q])
      COLLX_THROW(static_cast<errc>(codes[q]), "nccl::connect: rank " + std::to_string(q) +
                                                   " cannot join (its options or its CUDA device; its message says why)");
  const ncclUniqueId id = unique_id_over(host);
  return communicator(id, host.rank(), host.size(), opt);
}

}  // namespace nccl
}  // namespace v0
}  // namespace collx
