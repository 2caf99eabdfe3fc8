/// @file topo/nccl_tests.hpp
/// Reads the result table of an nccl-tests benchmark (all_reduce_perf and friends) as printed or
/// pasted: `#` header lines, data rows `size count type redop root time algbw busbw #wrong time
/// algbw busbw #wrong` (older versions without the root column; #wrong a count or N/A), an optional `N: ` rank prefix from
/// srun, the command line above the table (CUDA_VISIBLE_DEVICES=..., NCCL_P2P_DISABLE=1, -g N), CRLF.
/// A line that is none of these throws collx::error(invalid_argument) naming source:line:col.
#pragma once

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <collx/detail/c_locale.hpp>
#include <collx/topo/detail/xml.hpp>

namespace collx {
inline namespace v0 {
namespace topo {

/// One row of an nccl-tests table.
struct nccl_tests_row {
  std::size_t bytes = 0;        ///< size column, bytes
  std::size_t count = 0;        ///< elements
  std::string type;             ///< float, half, ...
  std::string redop;            ///< sum, ...
  double time_us[2] = {0, 0};   ///< out-of-place, in-place, microseconds
  double algbw[2] = {0, 0};     ///< GB/s
  double busbw[2] = {0, 0};     ///< GB/s
  double wrong[2] = {-1, -1};   ///< the #wrong columns: elements that failed nccl-tests' check (-1: N/A, not checked)
};

/// An nccl-tests table.
struct nccl_tests_table {
  std::string command;               ///< the command line, if the paste has one
  std::string binary;                ///< its *_perf program, without directories ("all_reduce_perf"; "" if absent)
  std::string visible_devices;       ///< CUDA_VISIBLE_DEVICES from the command line ("" if absent)
  bool p2p_disabled = false;         ///< NCCL_P2P_DISABLE=1 on the command line
  int gpus_flag = 0;                 ///< -g N from the command line (0 if absent or not a count of 1 to 1024)
  double avg_busbw = 0;              ///< "# Avg bus bandwidth" (0 if absent)
  std::vector<nccl_tests_row> rows;  ///< the data rows, in the order pasted

  /// Whether the table's figures fit an all-reduce over `ranks` ranks: on every row with both,
  /// busbw = algbw * 2 (ranks - 1) / ranks (as nccl-tests defines busbw) within the rounding of two
  /// printed decimals. True for a table without such rows. A table of another collective (whose
  /// busbw factor differs) does not fit.
  bool fits_allreduce_ranks(int ranks) const noexcept {
    if (ranks < 1) return false;
    const double factor = 2.0 * (ranks - 1) / ranks;
    for (const nccl_tests_row& r : rows)
      for (int k = 0; k < 2; ++k)
        if (r.algbw[k] > 0 && r.busbw[k] > 0 && std::abs(r.busbw[k] - r.algbw[k] * factor) > 0.0051 * (1 + factor)) return false;
    return true;
  }
  /// The largest busbw of any row, in or out of place, GB/s, leaving out results whose #wrong is
  /// above 0 (a run that computed wrong sums measured no all-reduce); 0 for no such result.
  double peak_busbw() const noexcept {
    double b = 0;
    for (const nccl_tests_row& r : rows)
      for (int k = 0; k < 2; ++k)
        if (!(r.wrong[k] > 0)) b = std::max(b, r.busbw[k]);
    return b;
  }
  /// How many results (a row has two: out of place and in place) have #wrong above 0.
  std::size_t wrong_results() const noexcept {
    std::size_t n = 0;
    for (const nccl_tests_row& r : rows)
      for (int k = 0; k < 2; ++k)
        if (r.wrong[k] > 0) ++n;
    return n;
  }
};

namespace detail {
/// A size, count, time or rate of an nccl-tests table: all of `token` a number, finite, 0 to 1e18
/// (a size of nan or -8 would reach a size_t conversion, a rate of inf a ratio).
/// @throws collx::error(invalid_argument) naming source:line:col otherwise.
inline double nccl_tests_number(const std::string& token, std::string_view source, text_pos at) {
  char* end = nullptr;
  const double v = collx::detail::strtod_c(token.c_str(), &end);
  // All of the token: a NUL byte inside it would end strtod's read early, unnoticed.
  if (end == token.c_str() || end != token.c_str() + token.size()) fail_at(source, at, "'" + token + "' is not a number");
  if (!std::isfinite(v) || v < 0 || v > 1e18) fail_at(source, at, "'" + token + "' is not a size, time or rate (finite, 0 to 1e18)");
  return v;
}

/// The N of an nccl-tests command line's `-g N` (GPUs per thread): digits only, 1 to 1024 (the
/// topology readers' device limit), else 0 as for no -g (a pasted `-g $NGPUS` is no reason to
/// refuse the table; atoi read "-1" and 20-digit numbers as whatever it gave).
inline int nccl_tests_gpu_count(const std::string& token) noexcept {
  const bool digits = !token.empty() && token.size() <= 4 &&
                      std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int n = digits ? std::atoi(token.c_str()) : 0;
  return n >= 1 && n <= 1024 ? n : 0;
}
}  // namespace detail

/// Reads an nccl-tests table. @throws collx::error(invalid_argument) naming source:line:col for a
/// line that is neither a comment, the command line, nor a well-formed data row, and for text with
/// no data row at all.
inline nccl_tests_table read_nccl_tests(std::string_view text, std::string_view source = "<nccl-tests>") {
  text = detail::utf8_text(text, source);
  using detail::fail_at;
  nccl_tests_table t;
  int no = 0;
  std::size_t b = 0, cr_run = 0;
  while (b <= text.size()) {
    const detail::line_span span = detail::line_at(text, b, cr_run);
    std::string line(text.substr(b, span.end - b));
    b = span.next;
    ++no;
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
    std::size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    {  // "0: " rank prefix
      std::size_t d = i;
      while (d < line.size() && std::isdigit(static_cast<unsigned char>(line[d]))) ++d;
      if (d > i && d < line.size() && line[d] == ':') {
        i = d + 1;
        while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      }
    }
    if (i >= line.size()) continue;
    if (line[i] == '#') {
      const std::string_view rest = std::string_view(line).substr(i);
      const std::size_t k = rest.find("Avg bus bandwidth");
      if (k != std::string_view::npos) {
        const std::size_t colon = rest.find(':', k);
        if (colon != std::string_view::npos) {  // "%g %s": the number, then OK or FAILED under NCCL_TESTS_MIN_BW
          std::size_t v = colon + 1;
          while (v < rest.size() && (rest[v] == ' ' || rest[v] == '\t')) ++v;
          std::size_t e = v;
          while (e < rest.size() && rest[e] != ' ' && rest[e] != '\t') ++e;
          t.avg_busbw = detail::nccl_tests_number(std::string(rest.substr(v, e - v)), source, {no, static_cast<int>(i + v) + 1});
        }
      }
      continue;
    }
    // Tokens with columns.
    std::vector<std::pair<std::string, int>> tk;
    for (std::size_t k = i; k < line.size();) {
      while (k < line.size() && (line[k] == ' ' || line[k] == '\t')) ++k;
      if (k >= line.size()) break;
      const std::size_t s = k;
      while (k < line.size() && line[k] != ' ' && line[k] != '\t') ++k;
      tk.emplace_back(line.substr(s, k - s), static_cast<int>(s) + 1);
    }
    if (tk.empty()) continue;  // not reached (line[i] starts a token), but tk[0] must not depend on that
    if (!std::isdigit(static_cast<unsigned char>(tk[0].first[0]))) {
      // The command line: env assignments, a *_perf binary, flags.
      bool is_cmd = false;
      for (std::size_t k = 0; k < tk.size(); ++k) {
        const std::string& w = tk[k].first;
        if (w.find("_perf") != std::string::npos && !is_cmd) {
          is_cmd = true;
          t.binary = w.substr(w.rfind('/') == std::string::npos ? 0 : w.rfind('/') + 1);
        }
        if (w.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) t.visible_devices = w.substr(21);
        if (w == "NCCL_P2P_DISABLE=1") t.p2p_disabled = true;
        if (w == "-g" && k + 1 < tk.size()) t.gpus_flag = detail::nccl_tests_gpu_count(tk[k + 1].first);
      }
      if (!is_cmd) fail_at(source, {no, tk[0].second}, "expected a data row or an *_perf command line, found '" + tk[0].first + "'");
      t.command = line.substr(i);
      continue;
    }
    const bool with_root = tk.size() == 13;
    if (tk.size() != 13 && tk.size() != 12)
      fail_at(source, {no, tk.back().second}, "data row has " + std::to_string(tk.size()) + " columns, expected 13 (or 12 without root)");
    auto num = [&](std::size_t k) { return detail::nccl_tests_number(tk[k].first, source, {no, tk[k].second}); };
    nccl_tests_row r;
    r.bytes = static_cast<std::size_t>(num(0));
    r.count = static_cast<std::size_t>(num(1));
    r.type = tk[2].first;
    r.redop = tk[3].first;
    const std::size_t o = with_root ? 5 : 4;
    for (int p = 0; p < 2; ++p) {
      const std::size_t at = o + 4 * static_cast<std::size_t>(p);
      r.time_us[p] = num(at);
      r.algbw[p] = num(at + 1);
      r.busbw[p] = num(at + 2);
      r.wrong[p] = tk[at + 3].first == "N/A" ? -1 : num(at + 3);  // N/A: run with -c 0
    }
    t.rows.push_back(std::move(r));
  }
  if (t.rows.empty()) fail_at(source, {no, 1}, "no nccl-tests data row found");
  return t;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
