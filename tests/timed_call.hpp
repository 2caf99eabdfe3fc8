/// @file timed_call.hpp
/// For tests whose ranks each make a call that must fail soon: what each rank's call gave (the
/// collx::error's code and text, and the seconds it took), checked after the rank threads are
/// joined (Catch2's assertions are not thread-safe).
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <collx/error.hpp>

/// What one rank's call gave.
struct outcome {
  std::optional<collx::errc> code;  ///< empty: no error
  std::string what;                 ///< the error's text ("" if none)
  double seconds = 0;               ///< how long the call took
};

/// Runs f(), recording the collx::error it throws (anything else passes through), and times it.
template <class F>
outcome timed_call(F&& f) {
  outcome out;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    f();
  } catch (const collx::error& e) {
    out.code = e.code();
    out.what = e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

/// CHECKs that the calls of ranks [0, ranks) failed with a text containing `text`, each in less
/// than `most_seconds` seconds.
inline void check_failed_soon(const std::vector<outcome>& outcomes, int ranks, const std::string& text,
                              double most_seconds) {
  for (int r = 0; r < ranks; ++r) {
    const outcome& o = outcomes.at(static_cast<std::size_t>(r));
    INFO("rank " << r << " after " << o.seconds << " s: " << o.what);
    CHECK(o.what.find(text) != std::string::npos);
    CHECK(o.seconds < most_seconds);
  }
}
