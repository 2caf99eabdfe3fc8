/// @file detail/streaming_store.hpp
/// Writing a large result with non-temporal (streaming) stores.
///
/// A plain store to memory that is not in cache first reads the line (read for ownership), so a
/// reduction d = a + x out of cache moves four streams, not three. Streaming stores write whole
/// lines without reading them and without evicting what the cache holds. They pay only when the
/// result would not stay in the last-level cache anyway: measured on the 2-core Zen 4 VM of
/// bench/results (two threads, float sum of 64 MiB each), 16.9-20.1 GB/s with plain stores
/// against 25.9-26.3 GB/s with a line at a time streamed (SSE2), 1.25-1.5x; below the cache size
/// they lose, because the next reader (a peer) must then fetch the line from memory.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace collx {
inline namespace v0 {
namespace detail {

/// The largest data/unified cache sysfs lists for CPU 0 (/sys/devices/system/cpu/cpu0/cache/),
/// bytes; 0 when sysfs says nothing.
inline std::size_t sysfs_last_level_cache_bytes() {
  std::size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size"), type_file(dir + "type");
    int level = 0;
    std::string size, type;
    if (!(level_file >> level) || !(size_file >> size) || !(type_file >> type)) break;
    if (type == "Instruction" || level < best_level) continue;
    std::size_t v = 0, k = 0;
    while (k < size.size() && size[k] >= '0' && size[k] <= '9') v = v * 10 + static_cast<std::size_t>(size[k++] - '0');
    const char unit = k < size.size() ? size[k] : 'B';
    v <<= unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0;
    if (v) best = v, best_level = level;
  }
  return best;
}

/// Bytes of the last-level cache that CPU 0 shares with its neighbours: sysfs, else sysconf, else
/// 32 MiB. sysfs first because glibc's sysconf may add up the L3 of every CCX of an AMD socket (it
/// says 320 MiB on the Zen 4 VM of bench/results, whose CPUs share one 32 MiB L3).
inline std::size_t last_level_cache_bytes() noexcept {
  static const std::size_t bytes = []() -> std::size_t {
    try {
      if (const std::size_t b = sysfs_last_level_cache_bytes()) return b;
    } catch (...) {  // out of memory for a path: as when sysfs says nothing
    }
    long v = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    v = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0) v = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return v > 0 ? static_cast<std::size_t>(v) : std::size_t{32} << 20;
  }();
  return bytes;
}

/// The smallest result (bytes per rank) that a reduction writes with streaming stores, by default
/// (communicator_options::streaming_min_bytes): from a quarter of the last-level cache on, the
/// node's working set (inputs and outputs of every rank) is well past the cache.
inline std::size_t default_streaming_min_bytes() noexcept { return last_level_cache_bytes() / 4; }

/// dst[i] = value(i) for i < n. With SSE2, whole 64-byte lines of dst go out as streaming stores
/// (each line computed into registers first; the rest with plain stores), then a store fence, so
/// that a flag the caller stores afterwards cannot be seen before the data. Without SSE2, or for
/// elements whose size does not divide 64, or a dst not aligned to its element size: plain stores.
/// `value(i)` may read dst[i] (in place): line i is computed whole before it is written.
template <class D, class F>
void store_streaming(D* dst, std::size_t n, F&& value) {
#if defined(__SSE2__)
  constexpr std::size_t line = 64;
  if constexpr (std::is_trivially_copyable_v<D> && sizeof(D) <= line && line % sizeof(D) == 0) {
    constexpr std::size_t per_line = line / sizeof(D);
    const auto addr = reinterpret_cast<std::uintptr_t>(dst);
    if (addr % sizeof(D) == 0) {
      std::size_t i = 0;
      const std::size_t head = ((line - addr % line) % line) / sizeof(D);
      for (; i < head && i < n; ++i) dst[i] = value(i);
      for (; i + per_line <= n; i += per_line) {
        alignas(line) unsigned char buf[line];  // bytes, not D[]: D need not be default-constructible
        for (std::size_t j = 0; j < per_line; ++j) {
          const D v = value(i + j);
          std::memcpy(buf + j * sizeof(D), &v, sizeof(D));
        }
        __m128i* out = reinterpret_cast<__m128i*>(dst + i);
        const __m128i* in = reinterpret_cast<const __m128i*>(buf);
        _mm_stream_si128(out, _mm_load_si128(in));
        _mm_stream_si128(out + 1, _mm_load_si128(in + 1));
        _mm_stream_si128(out + 2, _mm_load_si128(in + 2));
        _mm_stream_si128(out + 3, _mm_load_si128(in + 3));
      }
      for (; i < n; ++i) dst[i] = value(i);
      _mm_sfence();
      return;
    }
  }
#endif
  for (std::size_t i = 0; i < n; ++i) dst[i] = value(i);
}

/// Stores the 64 bytes at `src` to the 64-byte aligned `dst` with streaming stores (plain ones
/// without SSE2). Call stream_fence() after the last one, before anything that publishes the data.
inline void stream_line(void* dst, const void* src) noexcept {
#if defined(__SSE2__)
  __m128i* out = static_cast<__m128i*>(dst);
  const __m128i* in = static_cast<const __m128i*>(src);
  _mm_stream_si128(out, _mm_loadu_si128(in));
  _mm_stream_si128(out + 1, _mm_loadu_si128(in + 1));
  _mm_stream_si128(out + 2, _mm_loadu_si128(in + 2));
  _mm_stream_si128(out + 3, _mm_loadu_si128(in + 3));
#else
  std::memcpy(dst, src, 64);
#endif
}

/// Orders earlier streaming stores before later stores (a no-op without SSE2).
inline void stream_fence() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
