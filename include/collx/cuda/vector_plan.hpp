/// @file cuda/vector_plan.hpp
/// Whether an element-wise kernel can use 16-byte loads and stores on a set of buffers, and which
/// elements it must then handle one at a time. Plain C++ (no CUDA headers), unit-tested without a GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include <collx/error.hpp>

namespace collx {
inline namespace v0 {
namespace gpu {

/// The widest access collx kernels make: one 16-byte (128-bit) load or store per thread.
inline constexpr std::size_t max_vector_bytes = 16;

/// One buffer an element-wise kernel reads or writes: where it starts and how big its elements are
/// (buffers of one kernel may differ: fp16 inputs, fp32 partial results).
struct buffer_ref {
  std::uintptr_t address = 0;    ///< address of element 0
  std::size_t element_size = 0;  ///< sizeof its element type, >= 1

  /// The buffer `p` points into, with element type T.
  template <class T>
  static buffer_ref of(const T* p) noexcept {
    return {reinterpret_cast<std::uintptr_t>(p), sizeof(T)};
  }
};

/// How `count` elements, index 0 to count-1 in every buffer, are split between scalar and vector
/// accesses: [0, head) one at a time, then `vectors` groups of `width` consecutive elements each read
/// or written with one access of width x element_size bytes (aligned to that size in every buffer),
/// then `tail` elements one at a time. head + vectors * width + tail == count.
/// The scalar plan is width 1, head 0, vectors == count, tail 0.
struct vector_plan {
  unsigned width = 1;        ///< elements per vector access (1: scalar plan)
  std::size_t head = 0;      ///< leading elements accessed one at a time; < width
  std::size_t vectors = 0;   ///< whole vectors after the head
  std::size_t tail = 0;      ///< trailing elements accessed one at a time; < width

  /// Elements covered: head + vectors * width + tail.
  constexpr std::size_t count() const noexcept { return head + vectors * width + tail; }
  /// Index of the first element of vector v.
  constexpr std::size_t vector_begin(std::size_t v) const noexcept { return head + v * width; }
  /// Index of the first tail element.
  constexpr std::size_t tail_begin() const noexcept { return head + vectors * width; }
  /// True for the scalar plan.
  constexpr bool scalar() const noexcept { return width == 1; }
  /// Equal in every field (width, head, vectors, tail).
  friend constexpr bool operator==(const vector_plan&, const vector_plan&) = default;
};

/// The scalar plan for `count` elements.
constexpr vector_plan scalar_plan(std::size_t count) noexcept { return {1, 0, count, 0}; }

/// Plans `count` elements over `buffers`. The vector width is max_vector_bytes / the largest
/// element size, so the widest buffer gets 16-byte accesses and narrower ones proportionally fewer
/// bytes (fp16 next to fp32: 4 elements, 8 and 16 bytes). The vector plan is taken when
///  - every element size is a power of two <= max_vector_bytes and the width is at least 2,
///  - every address is a multiple of its element size, and
///  - one head length h < width aligns every buffer at once (address + h * element_size a multiple of
///    width * element_size): buffers whose misalignments differ cannot share vector accesses, and
///  - at least one whole vector follows the head;
/// otherwise the scalar plan. Buffers may alias (in place: dst == a): the plan only reads addresses.
/// @throws collx::error (errc::invalid_argument) when a buffer's element_size is 0.
inline vector_plan plan_vectors(std::size_t count, std::initializer_list<buffer_ref> buffers) {
  std::size_t widest = 0;
  bool sizes_vectorizable = true;
  for (const buffer_ref& b : buffers) {
    if (b.element_size == 0) COLLX_THROW(errc::invalid_argument, "plan_vectors: a buffer has element_size 0");
    widest = std::max(widest, b.element_size);
    const bool power_of_two = (b.element_size & (b.element_size - 1)) == 0;
    sizes_vectorizable = sizes_vectorizable && power_of_two && b.element_size <= max_vector_bytes;
  }
  if (!sizes_vectorizable || widest == 0 || max_vector_bytes / widest < 2) return scalar_plan(count);
  const std::size_t width = max_vector_bytes / widest;

  std::size_t head = width;  // "not decided yet"
  for (const buffer_ref& b : buffers) {
    if (b.address % b.element_size != 0) return scalar_plan(count);
    const std::size_t index_mod = (b.address / b.element_size) % width;  // element index within its vector
    const std::size_t h = (width - index_mod) % width;
    if (head == width) head = h;
    else if (h != head) return scalar_plan(count);
  }
  if (head == width || count < head + width) return scalar_plan(count);
  vector_plan p;
  p.width = static_cast<unsigned>(width);
  p.head = head;
  p.vectors = (count - head) / width;
  p.tail = count - head - p.vectors * width;
  return p;
}

}  // namespace gpu
}  // namespace v0
}  // namespace collx
