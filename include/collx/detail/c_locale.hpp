/// @file detail/c_locale.hpp
/// Decimal numbers read as the C locale writes them ("1.5"), whatever locale the program set:
/// std::strtod follows setlocale, so under a comma-decimal locale (de_DE) it read "1.5" as 1 and
/// stopped at the '.'. Environment values, topology files and nccl-tests tables use '.'.
#pragma once

#include <clocale>
#include <cstdlib>
#include <locale.h>
#include <stdlib.h>

namespace collx {
inline namespace v0 {
namespace detail {

/// std::strtod(s, end) in the "C" locale (strtod_l; std::strtod if the locale cannot be made).
inline double strtod_c(const char* s, char** end) noexcept {
  static const locale_t c_locale = ::newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return c_locale ? ::strtod_l(s, end, c_locale) : std::strtod(s, end);
}

/// std::atof(s) in the "C" locale.
inline double atof_c(const char* s) noexcept { return strtod_c(s, nullptr); }

}  // namespace detail
}  // namespace v0
}  // namespace collx
