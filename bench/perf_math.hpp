/// @file bench/perf_math.hpp
/// nccl-tests' size, count and bandwidth arithmetic (its doc/PERFORMANCE.md and the
/// *GetCollByteCount / *GetBw functions of its src/*.cu), shared by collx-perf, mpi-perf and the
/// unit test of case P1. No dependencies: the MPI drivers compile it too.
///
/// A benchmark "size" S (the -b/-e sweep, bytes) is turned into an element count
/// count = S / sizeof(T) and then into per-collective counts:
///
///   collective      send count      recv count      count column  bytes S in algbw = S / t   busbw factor
///   allreduce       count           count           count         count * ts                2 (n-1) / n
///   reduce_scatter  (count/n) * n   count/n         count/n       n * (count/n) * ts        (n-1) / n
///   all_gather      count/n         (count/n) * n   count/n       n * (count/n) * ts        (n-1) / n
///   broadcast       count           count           count         count * ts                1
///   reduce          count           count           count         count * ts                1
///   all_to_all      (count/n) * n   (count/n) * n   count/n       n * (count/n) * ts        (n-1) / n
///   sendrecv        count           count           count         count * ts                1
///
/// The "size" column is max(send bytes, recv bytes); algbw and busbw are in GB/s with GB = 1e9 B;
/// times are in microseconds. With one rank the (n-1)/n factors make busbw 0.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace collx_perf {

enum class coll { allreduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, sendrecv };

inline constexpr std::array<coll, 7> all_colls = {coll::allreduce, coll::reduce_scatter, coll::all_gather,
                                                  coll::broadcast, coll::reduce,         coll::all_to_all,
                                                  coll::sendrecv};

constexpr std::string_view coll_name(coll c) noexcept {
  switch (c) {
    case coll::allreduce: return "allreduce";
    case coll::reduce_scatter: return "reduce_scatter";
    case coll::all_gather: return "all_gather";
    case coll::broadcast: return "broadcast";
    case coll::reduce: return "reduce";
    case coll::all_to_all: return "all_to_all";
    case coll::sendrecv: return "sendrecv";
  }
  return "?";
}

/// Parses a collective's name; nccl-tests' binary names (all_reduce, alltoall, ...) are accepted too.
constexpr std::optional<coll> parse_coll(std::string_view s) noexcept {
  for (coll c : all_colls)
    if (s == coll_name(c)) return c;
  if (s == "all_reduce") return coll::allreduce;
  if (s == "reducescatter") return coll::reduce_scatter;
  if (s == "allgather") return coll::all_gather;
  if (s == "bcast") return coll::broadcast;
  if (s == "alltoall") return coll::all_to_all;
  return std::nullopt;
}

/// Whether the collective folds values with an op (its redop column names the op, else "none").
constexpr bool reduces(coll c) noexcept {
  return c == coll::allreduce || c == coll::reduce_scatter || c == coll::reduce;
}
/// Whether the collective has a root (its root column shows it, else -1).
constexpr bool rooted(coll c) noexcept { return c == coll::broadcast || c == coll::reduce; }

/// Element counts of one call, as nccl-tests' *GetCollByteCount computes them. The in-place
/// offsets are per rank: rank r's send (recv) buffer starts send_inplace_offset * r
/// (recv_inplace_offset * r) elements into the shared buffer.
struct call_counts {
  std::size_t send_count = 0;           ///< elements this rank sends (its send buffer)
  std::size_t recv_count = 0;           ///< elements this rank receives (its recv buffer)
  std::size_t param_count = 0;          ///< the count passed to the call; the "count" column
  std::size_t send_inplace_offset = 0;  ///< per rank, elements
  std::size_t recv_inplace_offset = 0;  ///< per rank, elements
};

/// count = size in bytes / element size; n = number of ranks (>= 1).
constexpr call_counts counts_for(coll c, std::size_t count, int n) noexcept {
  const std::size_t nn = static_cast<std::size_t>(n < 1 ? 1 : n);
  const std::size_t per = count / nn;
  call_counts k;
  switch (c) {
    case coll::allreduce:
    case coll::broadcast:
    case coll::reduce:
    case coll::sendrecv:
      k.send_count = k.recv_count = k.param_count = count;
      break;
    case coll::reduce_scatter:
      k.send_count = per * nn;
      k.recv_count = k.param_count = per;
      k.recv_inplace_offset = per;
      break;
    case coll::all_gather:
      k.send_count = k.param_count = per;
      k.recv_count = per * nn;
      k.send_inplace_offset = per;
      break;
    case coll::all_to_all:
      k.send_count = k.recv_count = per * nn;
      k.param_count = per;
      break;
  }
  return k;
}

/// The "size" column: max(send bytes, recv bytes).
constexpr std::size_t size_column_bytes(const call_counts& k, std::size_t type_size) noexcept {
  return std::max(k.send_count, k.recv_count) * type_size;
}

/// S, the bytes algbw divides by the time, from the count column (param_count).
constexpr double algbw_bytes(coll c, std::size_t param_count, std::size_t type_size, int n) noexcept {
  const double b = static_cast<double>(param_count) * static_cast<double>(type_size);
  switch (c) {
    case coll::reduce_scatter:
    case coll::all_gather:
    case coll::all_to_all:
      return b * n;
    default:
      return b;
  }
}

/// busbw / algbw (doc/PERFORMANCE.md of nccl-tests).
constexpr double bus_factor(coll c, int n) noexcept {
  if (n < 1) return 0.0;
  const double nn = n;
  switch (c) {
    case coll::allreduce: return 2.0 * (nn - 1) / nn;
    case coll::reduce_scatter:
    case coll::all_gather:
    case coll::all_to_all: return (nn - 1) / nn;
    case coll::broadcast:
    case coll::reduce:
    case coll::sendrecv: return 1.0;
  }
  return 0.0;
}

/// Algorithm bandwidth in GB/s (1e9 bytes per second): S / t.
constexpr double algbw_GBps(double bytes, double seconds) noexcept {
  return seconds > 0 ? bytes / 1.0e9 / seconds : 0.0;
}

struct bandwidth {
  double algbw = 0;  ///< GB/s
  double busbw = 0;  ///< GB/s
};

/// algbw and busbw of one call of collective c over n ranks that took `seconds`.
constexpr bandwidth bandwidth_for(coll c, std::size_t param_count, std::size_t type_size, int n,
                                  double seconds) noexcept {
  bandwidth b;
  b.algbw = algbw_GBps(algbw_bytes(c, param_count, type_size, n), seconds);
  b.busbw = b.algbw * bus_factor(c, n);
  return b;
}

}  // namespace collx_perf
