/// @file nullable_ptr.hpp
/// The parameter type of a buffer that may be null on some ranks (the GPU and NCCL collectives:
/// reduce's recv and broadcast's send off the root, a v-form's buffer of count 0).
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

namespace collx {
inline namespace v0 {

/// A pointer to T, or null, as a function parameter whose element type T comes from the call's
/// other buffer (the parameter is written `nullable_ptr<std::type_identity_t<T>>`, which deduces
/// nothing): so a literal `nullptr` (or 0) converts to it, where a plain `T*` parameter made
/// template deduction fail. It converts from exactly `T*` (and from `U*` where T is `const U`),
/// never from a pointer to another type or to a class derived from T: an array of those, read as
/// T's, would give wrong values without a word.
template <class T>
struct nullable_ptr {
  T* p = nullptr;  ///< the pointer passed (null for nullptr)

  /// A null buffer.
  constexpr nullable_ptr(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): converts by design
  /// A buffer of T (or of U, for a const T = const U).
  template <class U>
    requires std::same_as<std::remove_const_t<U>, std::remove_const_t<T>> && (std::is_const_v<T> || !std::is_const_v<U>)
  constexpr nullable_ptr(U* q) noexcept : p(q) {}  // NOLINT(google-explicit-constructor)
};

}  // namespace v0
}  // namespace collx
