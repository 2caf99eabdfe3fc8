/// @file detail/type_name.hpp
/// Readable names of element types for messages, and a stable hash for call signatures.
#pragma once

#include <cstdint>
#include <string_view>

#include <collx/numeric.hpp>

namespace collx {
inline namespace v0 {
// A namespace no type lives in: g++ spells a type of the function's own namespace without it
// (collx's detail::split_entry as "split_entry", the name of a user's ::split_entry too).
namespace type_spelling {

/// The compiler's spelling of T (from __PRETTY_FUNCTION__), with its namespaces.
template <class T>
constexpr std::string_view pretty_type_name() noexcept {
  std::string_view p = __PRETTY_FUNCTION__;
  const auto b = p.find("T = ");
  if (b == std::string_view::npos) return "?";
  p.remove_prefix(b + 4);
  const auto e = p.find_first_of(";]");
  return p.substr(0, e);
}

}  // namespace type_spelling

namespace detail {

using type_spelling::pretty_type_name;

/// The name collx uses for T: "int8" ... "uint64", "float32", "float64", "float16", "bfloat16",
/// else the compiler's spelling.
template <class T>
constexpr std::string_view type_name() noexcept {
  if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, half>) return "float16";
  else if constexpr (std::is_same_v<T, bfloat16>) return "bfloat16";
  else return pretty_type_name<T>();
}

/// 64-bit FNV-1a hash.
constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
