// Halo exchange, the stencil codes' pattern, with collx::send_recv: the 2-D heat equation solved by
// Jacobi iteration on a rows x cols grid whose rows are cut into contiguous blocks, one per rank
// (columns wrap around within a row). Each rank keeps one halo row above and one below its block.
// Every step it sends its first row up while it receives the row below its block from the rank
// below, then its last row down while it receives the row above from the rank above: two
// send_recv calls, in which every rank sends at once without deadlock. At the top and bottom
// edges the neighbour is collx::no_peer, so those halo rows keep the grid's fixed boundary values
// (1 above, 0 below); --periodic wraps the rows around instead (a ring shift; over one rank a
// copy). Every --check-every steps an all-reduce with ops::max of the largest change tells every
// rank whether the grid has converged.
//
// Each cell's update reads the same five values in the same order as the single-process solver,
// and a max is exact in any order, so the final grid (gathered with all_gather_v) and the number
// of steps are bit-identical to the single-process run, which rank 0 checks.
// Usage: heat_halo [--ranks N] [--rows R] [--cols C] [--max-steps S] [--check-every K] [--periodic]
//        (or collx-run -n 4 heat_halo)
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace ex = collx_examples;

namespace {

constexpr float alpha = 0.2f;       // diffusion number (stable below 0.25)
constexpr float tolerance = 1e-4f;  // stop once no cell changes by more than this in a step
constexpr float top_value = 1.0f, bottom_value = 0.0f;

/// The starting grid's row `row` (global index): a few hot spots, the same on every rank.
std::vector<float> initial_row(std::size_t row, std::size_t cols) {
  std::vector<float> v(cols);
  for (std::size_t j = 0; j < cols; ++j) v[j] = ((row * 7 + j * 3) % 29 == 0) ? 1.0f : 0.0f;
  return v;
}

/// One Jacobi step on `n` rows stored with a halo row above and below (u: (n + 2) x cols): writes
/// rows 1..n of `out`, returns the largest change. The single-process solver and every rank run
/// this same code, so each cell is computed with the same operations in the same order.
float jacobi_rows(const std::vector<float>& u, std::vector<float>& out, std::size_t n, std::size_t cols) {
  float largest = 0;
  for (std::size_t i = 1; i <= n; ++i) {
    const float* up = &u[(i - 1) * cols];
    const float* mid = &u[i * cols];
    const float* down = &u[(i + 1) * cols];
    float* o = &out[i * cols];
    for (std::size_t j = 0; j < cols; ++j) {
      const float left = mid[j == 0 ? cols - 1 : j - 1], right = mid[j + 1 == cols ? 0 : j + 1];
      o[j] = mid[j] + alpha * (up[j] + down[j] + left + right - 4.0f * mid[j]);
      largest = std::max(largest, std::fabs(o[j] - mid[j]));
    }
  }
  return largest;
}

struct settings {
  std::size_t rows = 64, cols = 96;
  int max_steps = 5000, check_every = 10;
  bool periodic = false;
};

struct solution {
  std::vector<float> grid;  // rows x cols
  int steps = 0;
  float last_change = 0;  ///< the largest change at the last convergence check
  bool checked = false;   ///< a convergence check ran (not with --check-every above the steps)
};

/// The single-process reference: the whole grid as one block.
solution solve_alone(const settings& s) {
  const std::size_t R = s.rows, C = s.cols;
  std::vector<float> u((R + 2) * C), next((R + 2) * C);
  for (std::size_t i = 0; i < R; ++i) std::ranges::copy(initial_row(i, C), u.begin() + static_cast<std::ptrdiff_t>((i + 1) * C));
  solution sol;
  for (sol.steps = 1; sol.steps <= s.max_steps; ++sol.steps) {
    if (s.periodic) {  // the halos are the other end's rows
      std::copy_n(&u[R * C], C, &u[0]);
      std::copy_n(&u[C], C, &u[(R + 1) * C]);
    } else {
      std::fill_n(&u[0], C, top_value);
      std::fill_n(&u[(R + 1) * C], C, bottom_value);
    }
    sol.last_change = jacobi_rows(u, next, R, C);
    std::swap(u, next);
    if (sol.steps % s.check_every == 0 && sol.last_change < tolerance) break;
  }
  sol.steps = std::min(sol.steps, s.max_steps);
  sol.grid.assign(u.begin() + static_cast<std::ptrdiff_t>(C), u.begin() + static_cast<std::ptrdiff_t>((R + 1) * C));
  return sol;
}

/// The same solve over the ranks of `comm`, each on its block of rows; every rank returns the
/// whole grid (all_gather_v).
solution solve_together(collx::communicator& comm, const settings& s) {
  const int r = comm.rank(), n = comm.size();
  const std::size_t C = s.cols;
  const ex::block mine = ex::split(s.rows, n, r);
  const std::size_t R = mine.size;
  // Neighbours: the rank above holds the rows before this block. At the grid's edges there is
  // none (no_peer: the halo keeps its boundary value), unless the rows wrap around.
  const int above = r > 0 ? r - 1 : (s.periodic ? n - 1 : collx::no_peer);
  const int below = r + 1 < n ? r + 1 : (s.periodic ? 0 : collx::no_peer);

  std::vector<float> u((R + 2) * C), next((R + 2) * C);
  for (std::size_t i = 0; i < R; ++i)
    std::ranges::copy(initial_row(mine.first + i, C), u.begin() + static_cast<std::ptrdiff_t>((i + 1) * C));
  // Fixed boundaries, in both buffers: no_peer leaves these halo rows as they are.
  for (auto* g : {&u, &next}) {
    std::fill_n(g->begin(), C, top_value);
    std::fill_n(g->begin() + static_cast<std::ptrdiff_t>((R + 1) * C), C, bottom_value);
  }
  auto row = [&](std::size_t i) { return std::span<float>(&u[i * C], C); };

  solution sol;
  for (sol.steps = 1; sol.steps <= s.max_steps; ++sol.steps) {
    // First row up, the row below this block into the bottom halo; then last row down, the row
    // above into the top halo. Every rank sends first in both calls: send_recv keeps that safe.
    collx::send_recv(comm, std::span<const float>(row(1)), above, row(R + 1), below);
    collx::send_recv(comm, std::span<const float>(row(R)), below, row(0), above);
    float change = jacobi_rows(u, next, R, C);
    std::swap(u, next);
    if (sol.steps % s.check_every == 0) {
      collx::allreduce(comm, std::span<float>(&change, 1), collx::ops::max{});
      sol.last_change = change;
      sol.checked = true;
      if (change < tolerance) break;
    }
  }
  sol.steps = std::min(sol.steps, s.max_steps);
  sol.grid.resize(s.rows * C);
  std::vector<std::size_t> counts = ex::split_counts(s.rows, n);
  for (auto& c : counts) c *= C;
  collx::all_gather_v(comm, std::span<const float>(&u[C], R * C), std::span<float>(sol.grid), counts);
  return sol;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--rows R] [--cols C] [--max-steps S] [--check-every K] [--periodic]");
  const int ranks = opt.get_ranks();
  settings s;
  s.rows = static_cast<std::size_t>(opt.get_int("--rows", static_cast<long long>(s.rows), 1, 1 << 20));
  s.cols = static_cast<std::size_t>(opt.get_int("--cols", static_cast<long long>(s.cols), 1, 1 << 20));
  s.max_steps = static_cast<int>(opt.get_int("--max-steps", s.max_steps, 1, 1 << 24));
  s.check_every = static_cast<int>(opt.get_int("--check-every", s.check_every, 1, 1 << 24));
  s.periodic = opt.has("--periodic");
  opt.reject_unknown();
  if (ranks > 0 && s.rows < static_cast<std::size_t>(ranks)) opt.fail("--rows must be at least --ranks (every rank needs a row to send)");
  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    if (s.rows < static_cast<std::size_t>(comm.size())) {  // every rank needs a row to send
      // Every rank says why: a launcher stops the others when the first exits, maybe before rank 0 spoke.
      std::fprintf(stderr, "rank %d: --rows must be at least the number of ranks (%d)\n", comm.rank(), comm.size());
      return 2;
    }
    ex::checker check{comm.rank(), 0};
    const auto t0 = std::chrono::steady_clock::now();
    const solution got = solve_together(comm, s);
    const double seconds = ex::seconds_since(t0);
    if (comm.rank() == 0) {
      char change[96] = "no convergence check ran";  // --check-every above the steps: no change was measured
      if (got.checked)
        std::snprintf(change, sizeof change, "%s, largest change %.3g at the last check",
                      got.last_change < tolerance ? "converged" : "not converged", static_cast<double>(got.last_change));
      std::printf("heat_halo: %zu x %zu grid, rows %s, over %d rank%s: %d steps (%s), %.3f s, grid fnv1a64 %016llx\n",
                  s.rows, s.cols, s.periodic ? "periodic" : "between fixed edges", comm.size(), comm.size() == 1 ? "" : "s", got.steps,
                  change, seconds, static_cast<unsigned long long>(ex::fnv1a(std::span<const float>(got.grid))));
      const solution want = solve_alone(s);
      check(got.steps == want.steps, "steps: " + std::to_string(got.steps) + " against the single process's " +
                                         std::to_string(want.steps));
      const std::span<const float> g(got.grid), w(want.grid);
      check(ex::same_bits(g, w), "grid differs from the single-process run (largest difference " +
                                     std::to_string(ex::max_abs_diff(g, w)) + ")");
    }
    const int failures = check.total(comm);
    if (comm.rank() == 0) std::printf("%s\n", failures ? "FAILED" : "OK: bit-identical to the single-process run");
    return failures ? 1 : 0;
  });
}
