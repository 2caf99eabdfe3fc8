// Expert parallelism, the mixture-of-experts layer's pattern, with collx::all_to_all_v: every rank
// holds a batch of tokens and E experts of the layer's n * E; a gate sends each token to its top 2
// experts, wherever they live. One layer forward:
//   1. route: each token's gate scores against every expert, its 2 best, their softmax weights;
//   2. count: how many token rows this rank sends each rank, then all_to_all of those counts, so
//      that each rank learns how many rows it receives from each (only the sender knows: as MPI
//      codes call MPI_Alltoall before MPI_Alltoallv);
//   3. dispatch: all_to_all_v of the rows (d floats each) and of their expert ids, grouped by
//      destination rank;
//   4. experts: each received row through its expert's feed-forward network, relu(x W1) W2;
//   5. combine: all_to_all_v back, the counts reversed, so every row returns to its token's rank in
//      the order it left; each token's output is the weighted sum of its 2 experts' outputs.
// Capacity (--capacity-factor F > 0, as GShard and the Switch Transformer): each rank sends each
// expert at most C = ceil(F * T * 2 / experts) of its T tokens' rows, top-1 choices first in token
// order, then top-2 choices (GShard's priority); a row past C is dropped, and its token's output
// lacks that expert's term (a model's residual connection carries the token on). F = 0 (the
// default): no limit. The per-expert load and the rows dropped are printed.
//
// Each row's expert output is computed by the same code from the same values wherever it runs, and
// each token combines its two outputs in the same order, so every rank's outputs are bit-identical
// to the layer computed on that rank alone with every expert's weights (which rank r checks for its
// own tokens; the weights are generated alike on every rank).
// Usage: moe_dispatch [--ranks N] [--tokens T] [--dim D] [--hidden H] [--experts-per-rank E]
//        [--capacity-factor F]
//        (or collx-run -n 4 moe_dispatch)
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace ex = collx_examples;

namespace {

constexpr int top_k = 2;
constexpr std::size_t top_k_rows = top_k;  // rows per token

struct settings {
  std::size_t tokens = 257, dim = 16, hidden = 32;
  int experts_per_rank = 2;
  double capacity_factor = 0;  // 0: no limit
};

/// Every expert's weights and the gate's, the same on every rank (generated from fixed seeds).
struct layer {
  std::size_t dim, hidden;
  int experts;
  std::vector<float> gate;    // experts x dim
  std::vector<float> w1, w2;  // per expert: dim x hidden, then hidden x dim

  layer(const settings& s, int world) : dim(s.dim), hidden(s.hidden), experts(world * s.experts_per_rank) {
    ex::rng g(42);
    const float a = 1.0f / std::sqrt(static_cast<float>(dim)), b = 1.0f / std::sqrt(static_cast<float>(hidden));
    gate.resize(static_cast<std::size_t>(experts) * dim);
    for (auto& v : gate) v = g.uniform(-a, a);
    w1.resize(static_cast<std::size_t>(experts) * dim * hidden);
    for (auto& v : w1) v = g.uniform(-a, a);
    w2.resize(static_cast<std::size_t>(experts) * hidden * dim);
    for (auto& v : w2) v = g.uniform(-b, b);
  }

  /// Expert e's feed-forward network on one row: out = relu(x W1_e) W2_e (d floats in, d out).
  void expert(int e, const float* x, float* out) const {
    const float* W1 = &w1[static_cast<std::size_t>(e) * dim * hidden];
    const float* W2 = &w2[static_cast<std::size_t>(e) * hidden * dim];
    std::vector<float> h(hidden, 0.0f);
    for (std::size_t i = 0; i < dim; ++i)
      for (std::size_t j = 0; j < hidden; ++j) h[j] += x[i] * W1[i * hidden + j];
    std::fill_n(out, dim, 0.0f);
    for (std::size_t j = 0; j < hidden; ++j) {
      const float hj = std::max(h[j], 0.0f);
      for (std::size_t i = 0; i < dim; ++i) out[i] += hj * W2[j * dim + i];
    }
  }
};

/// A token's route: its top_k experts, best first (ties: the lower id), and their gate weights.
struct route {
  int expert[top_k];
  float weight[top_k];
};

route gate_token(const layer& L, const float* x) {
  route r{};
  float chosen[top_k] = {};  // the chosen experts' scores, best first
  int have = 0;
  for (int e = 0; e < L.experts; ++e) {
    float score = 0;
    for (std::size_t i = 0; i < L.dim; ++i) score += x[i] * L.gate[static_cast<std::size_t>(e) * L.dim + i];
    int pos = have;  // where e goes among the chosen: after every score at least as high (ties: lower id first)
    while (pos > 0 && score > chosen[pos - 1]) --pos;
    if (pos >= top_k) continue;
    for (int j = std::min(have, top_k - 1); j > pos; --j) r.expert[j] = r.expert[j - 1], chosen[j] = chosen[j - 1];
    r.expert[pos] = e;
    chosen[pos] = score;
    have = std::min(have + 1, top_k);
  }
  // Softmax over the chosen scores, shifted by the best for range.
  float total = 0;
  for (int k = 0; k < top_k; ++k) total += r.weight[k] = std::exp(chosen[k] - chosen[0]);
  for (float& w : r.weight) w /= total;
  return r;
}

/// Which of the tokens' rows (token t's k-th choice at t * top_k + k) fit their expert's capacity
/// from this rank: ceil(factor * tokens * top_k / experts) rows per expert, top-1 choices first in
/// token order, then top-2 (GShard); every row when factor is 0.
std::vector<char> fit_capacity(const std::vector<route>& routes, int experts, double factor) {
  std::vector<char> kept(routes.size() * top_k_rows, 1);
  if (factor <= 0) return kept;
  const auto cap = static_cast<std::size_t>(std::ceil(factor * static_cast<double>(routes.size() * top_k_rows) / experts));
  std::vector<std::size_t> taken(static_cast<std::size_t>(experts), 0);
  for (int k = 0; k < top_k; ++k)
    for (std::size_t t = 0; t < routes.size(); ++t) {
      std::size_t& n = taken[static_cast<std::size_t>(routes[t].expert[k])];
      kept[t * top_k_rows + static_cast<std::size_t>(k)] = n < cap;
      n += n < cap;
    }
  return kept;
}

/// This rank's tokens (tokens x dim), distinct on every rank.
std::vector<float> make_tokens(const settings& s, int rank) {
  ex::rng g(1000 + static_cast<std::uint64_t>(rank));
  std::vector<float> x(s.tokens * s.dim);
  for (auto& v : x) v = g.uniform(-1.0f, 1.0f);
  return x;
}

/// Output row t: the weighted sum of its experts' outputs, in route order; a dropped row's
/// (outs[k] null) term left out.
void combine(const route& r, const float* const outs[top_k], float* y, std::size_t dim) {
  for (std::size_t i = 0; i < dim; ++i) {
    float v = 0;
    for (int k = 0; k < top_k; ++k)
      if (outs[k]) v += r.weight[k] * outs[k][i];
    y[i] = v;
  }
}

/// The layer on this rank's tokens without communication: the reference. Its rows dropped for
/// capacity in `dropped`.
std::vector<float> forward_alone(const layer& L, const settings& s, const std::vector<float>& x, std::size_t& dropped) {
  std::vector<route> routes(s.tokens);
  for (std::size_t t = 0; t < s.tokens; ++t) routes[t] = gate_token(L, &x[t * L.dim]);
  const std::vector<char> kept = fit_capacity(routes, L.experts, s.capacity_factor);
  dropped = static_cast<std::size_t>(std::count(kept.begin(), kept.end(), 0));
  std::vector<float> y(s.tokens * L.dim), o(top_k_rows * L.dim);
  for (std::size_t t = 0; t < s.tokens; ++t) {
    const float* outs[top_k];
    for (int k = 0; k < top_k; ++k) {
      const auto at = static_cast<std::size_t>(k) * L.dim;
      outs[k] = kept[t * top_k_rows + static_cast<std::size_t>(k)] ? &o[at] : nullptr;
      if (outs[k]) L.expert(routes[t].expert[k], &x[t * L.dim], &o[at]);
    }
    combine(routes[t], outs, &y[t * L.dim], L.dim);
  }
  return y;
}

struct result {
  std::vector<float> y;                    // tokens x dim
  std::vector<std::size_t> expert_load;    // rows each of this rank's experts processed
  std::size_t rows_received = 0;
  std::size_t rows_sent = 0;               // this rank's rows kept (not dropped for capacity)
};

/// The layer with the experts spread over the ranks of `comm` (expert e on rank e / E).
result forward_expert_parallel(collx::communicator& comm, const layer& L, const settings& s, const std::vector<float>& x) {
  const int n = comm.size(), me = comm.rank(), E = s.experts_per_rank;
  const std::size_t d = L.dim, T = s.tokens;
  auto owner = [&](int e) { return e / E; };

  // 1-2. Route every token, drop the rows past capacity, then count the rows for each rank.
  std::vector<route> routes(T);
  for (std::size_t t = 0; t < T; ++t) routes[t] = gate_token(L, &x[t * d]);
  const std::vector<char> kept = fit_capacity(routes, L.experts, s.capacity_factor);
  std::vector<std::size_t> send_rows(static_cast<std::size_t>(n), 0);
  for (std::size_t t = 0; t < T; ++t)
    for (int k = 0; k < top_k; ++k)
      if (kept[t * top_k_rows + static_cast<std::size_t>(k)]) ++send_rows[static_cast<std::size_t>(owner(routes[t].expert[k]))];
  std::vector<std::size_t> recv_rows(static_cast<std::size_t>(n));
  collx::all_to_all(comm, send_rows, recv_rows);  // one count per rank each way

  // 3. Pack rows grouped by destination rank (tokens in order within each), remembering where each
  // (token, k) went so that its output can be found when it comes back.
  std::vector<std::size_t> first(static_cast<std::size_t>(n) + 1, 0);
  std::partial_sum(send_rows.begin(), send_rows.end(), first.begin() + 1);
  std::vector<std::size_t> next(first.begin(), first.end() - 1), slot(T * top_k_rows);
  std::vector<float> send_x(first.back() * d);
  std::vector<std::int32_t> send_e(first.back());
  for (std::size_t t = 0; t < T; ++t)
    for (int k = 0; k < top_k; ++k) {
      if (!kept[t * top_k_rows + static_cast<std::size_t>(k)]) continue;
      const int e = routes[t].expert[k];
      const std::size_t row = next[static_cast<std::size_t>(owner(e))]++;
      slot[t * top_k_rows + static_cast<std::size_t>(k)] = row;
      std::copy_n(&x[t * d], d, &send_x[row * d]);
      send_e[row] = e;
    }
  auto times = [](std::vector<std::size_t> v, std::size_t f) {
    for (auto& c : v) c *= f;
    return v;
  };
  const std::size_t got_rows = std::accumulate(recv_rows.begin(), recv_rows.end(), std::size_t{0});
  std::vector<float> recv_x(got_rows * d);
  std::vector<std::int32_t> recv_e(got_rows);
  collx::all_to_all_v(comm, send_x, times(send_rows, d), recv_x, times(recv_rows, d));
  collx::all_to_all_v(comm, send_e, send_rows, recv_e, recv_rows);

  // 4. The experts, row by row.
  result res;
  res.rows_received = got_rows;
  res.rows_sent = first.back();
  res.expert_load.assign(static_cast<std::size_t>(E), 0);
  std::vector<float> out_x(got_rows * d);
  for (std::size_t row = 0; row < got_rows; ++row) {
    const int e = recv_e[row];
    if (owner(e) != me) throw std::runtime_error("row for expert " + std::to_string(e) + " reached rank " + std::to_string(me));
    ++res.expert_load[static_cast<std::size_t>(e - me * E)];
    L.expert(e, &recv_x[row * d], &out_x[row * d]);
  }

  // 5. Back to the tokens' ranks, the counts reversed; rows return to the slots they left.
  std::vector<float> back(send_x.size());
  collx::all_to_all_v(comm, out_x, times(recv_rows, d), back, times(send_rows, d));
  res.y.resize(T * d);
  for (std::size_t t = 0; t < T; ++t) {
    const float* outs[top_k];
    for (int k = 0; k < top_k; ++k) {
      const std::size_t i = t * top_k_rows + static_cast<std::size_t>(k);
      outs[k] = kept[i] ? &back[slot[i] * d] : nullptr;
    }
    combine(routes[t], outs, &res.y[t * d], d);
  }
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--tokens T] [--dim D] [--hidden H] [--experts-per-rank E] [--capacity-factor F]");
  const int ranks = opt.get_ranks();
  settings s;
  s.tokens = static_cast<std::size_t>(opt.get_int("--tokens", static_cast<long long>(s.tokens), 0, 1 << 20));
  s.dim = static_cast<std::size_t>(opt.get_int("--dim", static_cast<long long>(s.dim), 1, 4096));
  s.hidden = static_cast<std::size_t>(opt.get_int("--hidden", static_cast<long long>(s.hidden), 1, 4096));
  s.experts_per_rank = static_cast<int>(opt.get_int("--experts-per-rank", s.experts_per_rank, 1, 64));
  s.capacity_factor = opt.get_double("--capacity-factor", s.capacity_factor, 0, 64);
  opt.reject_unknown();
  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    if (n * s.experts_per_rank < top_k) {  // every rank says why: a launcher may stop the others first
      std::fprintf(stderr, "rank %d: %d expert%s in all (%d per rank): each token needs %d to choose from (raise --experts-per-rank)\n",
                   me, n * s.experts_per_rank, n * s.experts_per_rank == 1 ? "" : "s", s.experts_per_rank, top_k);
      return 2;
    }
    // Every rank holds every expert's weights: refuse sizes that would take more than 1 GiB a rank.
    const double weight_bytes = 8.0 * n * s.experts_per_rank * static_cast<double>(s.dim) * static_cast<double>(s.hidden);
    const double token_bytes = 4.0 * static_cast<double>(s.tokens) * static_cast<double>(s.dim);
    if (weight_bytes > 0x1p30 || token_bytes > 0x1p30) {
      std::fprintf(stderr, "rank %d: %.2f GiB of expert weights and %.2f GiB of tokens per rank: more than the example's 1 GiB "
                   "each (lower --dim, --hidden, --experts-per-rank or --tokens)\n",
                   me, weight_bytes / 0x1p30, token_bytes / 0x1p30);
      return 2;
    }
    ex::checker check{me, 0};
    const layer L(s, n);
    const std::vector<float> x = make_tokens(s, me);
    const auto t0 = std::chrono::steady_clock::now();
    const result got = forward_expert_parallel(comm, L, s, x);
    const double seconds = ex::seconds_since(t0);

    std::size_t dropped = 0;
    const std::vector<float> want = forward_alone(L, s, x, dropped);
    check(got.rows_sent + dropped == s.tokens * top_k_rows,
          std::to_string(got.rows_sent) + " rows sent and " + std::to_string(dropped) + " dropped of " +
              std::to_string(s.tokens * top_k_rows));
    // Every row dispatched was received once: the totals over ranks agree.
    std::uint64_t rows[3] = {got.rows_received, got.rows_sent, dropped};
    collx::allreduce(comm, std::span<std::uint64_t>(rows));
    check(rows[0] == rows[1], "rows received over all ranks " + std::to_string(rows[0]) + ", sent " + std::to_string(rows[1]));
    // The experts' loads, gathered to rank 0 for the report; under a capacity, no expert takes more
    // than C rows from each rank.
    std::vector<std::uint64_t> load(got.expert_load.begin(), got.expert_load.end()), all_load(static_cast<std::size_t>(L.experts));
    collx::all_gather(comm, load, all_load);
    if (s.capacity_factor > 0) {
      const double cap = std::ceil(s.capacity_factor * static_cast<double>(s.tokens * top_k_rows) / L.experts);
      for (std::size_t e = 0; e < all_load.size(); ++e)
        check(static_cast<double>(all_load[e]) <= cap * n,
              "expert " + std::to_string(e) + " took " + std::to_string(all_load[e]) + " rows, past " + std::to_string(n) +
                  " ranks x capacity " + std::to_string(static_cast<long long>(cap)));
    }

    const std::span<const float> g(got.y), w(want);
    check(ex::same_bits(g, w), "outputs differ from this rank's own layer (largest difference " +
                                   std::to_string(ex::max_abs_diff(g, w)) + ")");
    const int failures = check.total(comm);
    if (me == 0) {
      const auto [lo, hi] = std::minmax_element(all_load.begin(), all_load.end());
      std::printf("moe_dispatch: %d experts on %d rank%s, top-%d of %zu tokens per rank (dim %zu, hidden %zu): "
                  "%llu rows dispatched, %llu dropped for capacity, expert load %llu..%llu rows, %.3f s, rank 0's outputs "
                  "fnv1a64 %016llx\n",
                  L.experts, n, n == 1 ? "" : "s", top_k, s.tokens, s.dim, s.hidden, static_cast<unsigned long long>(rows[1]),
                  static_cast<unsigned long long>(rows[2]),
                  static_cast<unsigned long long>(*lo), static_cast<unsigned long long>(*hi), seconds,
                  static_cast<unsigned long long>(ex::fnv1a(g)));
      std::printf("%s\n", failures ? "FAILED" : "OK: every rank's outputs bit-identical to its own layer computed alone");
    }
    return failures ? 1 : 0;
  });
}
