// Tensor parallelism (Megatron-LM style) with collx:
//
//   1. Column-parallel linear layer Y = X W: W (K x N) is split by columns across the ranks (N is
//      not a multiple of the world size: uneven blocks). Rank i holds W_i (K x n_i), computes
//      Y_i = X W_i (M x n_i) and all_gather_v assembles Y. Y_i is stored column-major, so the
//      rank-order concatenation of the blocks is Y in column-major order with no reshuffling. Each
//      element is the same dot product as in the single-rank product, so Y is bit-identical to it.
//
//   2. The Megatron MLP block Z = gelu(X A) B: A split by columns and B by rows with the same
//      split, so rank i computes H_i = gelu(X A_i) and the partial product Z_i = H_i B_i with no
//      communication in between; one all-reduce (algo::direct) sums the partials. That sum adds
//      per-rank partial dot products, a different bracketing than one dot product over all of F, so
//      it differs from the single-rank product by rounding (reported, within a tolerance) and is
//      bit-identical to a single-rank product that sums the same blocks in rank order.
//
//   3. Two-dimensional parallelism: collx::split makes tensor-parallel groups of tp consecutive
//      ranks (tp = 2 for an even world size, else 1) and data-parallel groups of the ranks that
//      hold the same shard in each replica. Each replica runs the MLP block of 2. on its own rows
//      of X (all-reduce in its tensor-parallel group), and an all_gather_v in each data-parallel
//      group assembles Z for all rows: bit-identical to a single-rank product that sums the tp
//      blocks of F in order.
//
// Usage: tensor_parallel [--ranks N] [--tokens M]   (or collx-run -n N tensor_parallel)
#include "common.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

namespace ex = collx_examples;

namespace {

constexpr std::size_t K = 64;   // model width
constexpr std::size_t N = 70;   // output columns of layer 1 (uneven over 4 ranks)
constexpr std::size_t F = 90;   // MLP hidden width (uneven over 4 ranks)
constexpr std::size_t K2 = 24;  // MLP output width

std::vector<float> random_matrix(std::size_t rows, std::size_t cols, std::uint64_t seed, float scale) {
  std::vector<float> m(rows * cols);
  ex::rng g(seed);
  for (auto& v : m) v = g.uniform(-scale, scale);
  return m;
}

float gelu(float x) {  // tanh approximation
  return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x)));
}

// out (column-major, rows x (c1 - c0)) = X (rows x K, row-major) times columns [c0, c1) of W (K x cols).
void matmul_columns(const std::vector<float>& X, std::size_t rows, const std::vector<float>& W, std::size_t cols,
                    std::size_t c0, std::size_t c1, float* out) {
  for (std::size_t c = c0; c < c1; ++c)
    for (std::size_t m = 0; m < rows; ++m) {
      float acc = 0.0f;
      for (std::size_t k = 0; k < K; ++k) acc += X[m * K + k] * W[k * cols + c];
      out[(c - c0) * rows + m] = acc;
    }
}

// Z (rows x K2, row-major) = H[:, f0:f1] B[f0:f1, :]; H is rows x F row-major, B is F x K2.
void partial_product(const std::vector<float>& H, std::size_t rows, const std::vector<float>& B, std::size_t f0,
                     std::size_t f1, float* Z) {
  for (std::size_t m = 0; m < rows; ++m)
    for (std::size_t o = 0; o < K2; ++o) {
      float acc = 0.0f;
      for (std::size_t f = f0; f < f1; ++f) acc += H[m * F + f] * B[f * K2 + o];
      Z[m * K2 + o] = acc;
    }
}

// H (rows x F, row-major; only columns [f0, f1) filled) = gelu(X A[:, f0:f1]).
void hidden(const std::vector<float>& X, std::size_t rows, const std::vector<float>& A, std::size_t f0, std::size_t f1,
            std::vector<float>& H) {
  std::vector<float> cm(rows * (f1 - f0));
  matmul_columns(X, rows, A, F, f0, f1, cm.data());
  for (std::size_t f = f0; f < f1; ++f)
    for (std::size_t m = 0; m < rows; ++m) H[m * F + f] = gelu(cm[(f - f0) * rows + m]);
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--tokens M]");
  const int ranks = opt.get_ranks();
  const auto M = static_cast<std::size_t>(opt.get_int("--tokens", 48, 1, 1 << 16));
  opt.reject_unknown();

  // Every rank builds the same activations and full weights from fixed seeds and computes with its
  // slice of them only (a real model would load or initialise only its shard; the full matrices
  // here also give every rank the single-rank references).
  const auto X = random_matrix(M, K, 11, 1.0f);
  const auto W = random_matrix(K, N, 12, 0.2f);
  const auto A = random_matrix(K, F, 13, 0.2f);
  const auto B = random_matrix(F, K2, 14, 0.2f);

  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    ex::checker check{r, 0};
    const auto t0 = std::chrono::steady_clock::now();

    // ---- 1. column-parallel linear: Y = X W, W split by columns, Y all-gathered
    const ex::block cols = ex::split(N, n, r);
    std::vector<float> Yi(M * cols.size);
    matmul_columns(X, M, W, N, cols.first, cols.first + cols.size, Yi.data());
    std::vector<std::size_t> counts;
    for (std::size_t c : ex::split_counts(N, n)) counts.push_back(c * M);  // each rank's block: its columns
    std::vector<float> Y(M * N);
    collx::all_gather_v(comm, std::span<const float>(Yi), std::span<float>(Y), counts);

    // ---- 2. Megatron MLP: A by columns, B by rows, one all-reduce
    const ex::block fb = ex::split(F, n, r);
    std::vector<float> H(M * F, 0.0f), Z(M * K2);
    hidden(X, M, A, fb.first, fb.first + fb.size, H);
    partial_product(H, M, B, fb.first, fb.first + fb.size, Z.data());
    collx::allreduce<collx::algo::direct>(comm, std::span<float>(Z));

    // ---- 3. tensor parallel inside groups of tp ranks, data parallel across the groups
    // tp 2 where the world size is even; an odd one has a tensor-parallel group of 1 rank here (the
    // 2-D layout needs a world size with a factor: the 4-rank ctest runs it).
    const int tp = n % 2 == 0 ? 2 : 1, dp = n / tp;
    collx::communicator tp_group = *collx::split(comm, r / tp, r);  // one replica: ranks r/tp*tp ... +tp-1
    collx::communicator dp_group = *collx::split(comm, r % tp, r);  // the same shard in every replica
    const ex::block rows = ex::split(M, dp, dp_group.rank());      // this replica's rows of X
    const ex::block shard = ex::split(F, tp, tp_group.rank());     // this rank's columns of A, rows of B
    const std::vector<float> Xrows(X.begin() + static_cast<std::ptrdiff_t>(rows.first * K),
                                   X.begin() + static_cast<std::ptrdiff_t>((rows.first + rows.size) * K));
    std::vector<float> H2(rows.size * F, 0.0f), Z2(rows.size * K2);
    hidden(Xrows, rows.size, A, shard.first, shard.first + shard.size, H2);
    partial_product(H2, rows.size, B, shard.first, shard.first + shard.size, Z2.data());
    collx::allreduce<collx::algo::direct>(tp_group, std::span<float>(Z2));
    std::vector<std::size_t> row_counts;
    for (std::size_t c : ex::split_counts(M, dp)) row_counts.push_back(c * K2);
    std::vector<float> Z2d(M * K2);
    collx::all_gather_v(dp_group, std::span<const float>(Z2), std::span<float>(Z2d), row_counts);
    const double seconds = ex::seconds_since(t0);

    // Single-rank references, on every rank: every rank checks what it holds (Y, Z and the 2-D
    // Z are replicated), rank 0 prints.
    std::vector<float> Yref(M * N);
    matmul_columns(X, M, W, N, 0, N, Yref.data());
    const bool y_same = ex::same_bits(std::span<const float>(Y), std::span<const float>(Yref));
    check(y_same, "column-parallel Y differs from the single-rank product");

    std::vector<float> Hall(M * F, 0.0f), Zplain(M * K2);
    hidden(X, M, A, 0, F, Hall);
    partial_product(Hall, M, B, 0, F, Zplain.data());
    // The single-rank product with F cut into `parts` blocks as the ranks cut it, folded in order.
    auto blocks_folded = [&](int parts) {
      std::vector<float> z(M * K2), part(M * K2);
      for (int q = 0; q < parts; ++q) {
        const ex::block b = ex::split(F, parts, q);
        partial_product(Hall, M, B, b.first, b.first + b.size, q == 0 ? z.data() : part.data());
        if (q > 0)
          for (std::size_t i = 0; i < z.size(); ++i) z[i] = z[i] + part[i];
      }
      return z;
    };
    const std::vector<float> Zblocks = blocks_folded(n), Ztp = blocks_folded(tp);
    double zmax = 0;
    for (float v : Zplain) zmax = std::max(zmax, std::fabs(static_cast<double>(v)));
    const double diff = ex::max_abs_diff(std::span<const float>(Z), std::span<const float>(Zplain));
    const bool z_same = ex::same_bits(std::span<const float>(Z), std::span<const float>(Zblocks));
    check(z_same, "the all-reduced Z differs from the block-ordered single-rank product");
    check(diff <= 1e-5 * (zmax + 1.0), "the all-reduced Z is too far from the single-rank product");
    const bool same2d = ex::same_bits(std::span<const float>(Z2d), std::span<const float>(Ztp));
    check(same2d, "the 2-D Z differs from the block-ordered single-rank product");

    if (r == 0) {
      std::printf("tensor_parallel: %d rank%s, X %zu x %zu\n", n, n == 1 ? "" : "s", M, K);
      std::printf("1. column-parallel Y = X W, W %zu x %zu split by columns (", K, N);
      for (int q = 0; q < n; ++q) std::printf("%s%zu", q ? " " : "", ex::split(N, n, q).size);
      std::printf("), all_gather_v of Y_i\n   Y[0][0..3] = %.7g %.7g %.7g %.7g; single-rank X W: %.7g %.7g %.7g %.7g -> %s\n",
                  double(Y[0]), double(Y[M]), double(Y[2 * M]), double(Y[3 * M]), double(Yref[0]), double(Yref[M]),
                  double(Yref[2 * M]), double(Yref[3 * M]), y_same ? "bit-identical" : "DIFFERENT");
      std::printf("2. MLP Z = gelu(X A) B, A %zu x %zu by columns, B %zu x %zu by rows, all-reduce of partial Z_i\n", K, F, F,
                  K2);
      std::printf("   Z[0][0..2] = %.7g %.7g %.7g; single-rank: %.7g %.7g %.7g\n", double(Z[0]), double(Z[1]), double(Z[2]),
                  double(Zplain[0]), double(Zplain[1]), double(Zplain[2]));
      std::printf("   max |Z - Z_single| = %.3g (max |Z| %.3g: per-rank partial sums round differently); "
                  "single-rank with the same %d blocks folded in order -> %s\n",
                  diff, zmax, n, z_same ? "bit-identical" : "DIFFERENT");
      std::printf("3. 2-D: collx::split into %d tensor-parallel group%s of %d and %d data-parallel group%s of %d; MLP on "
                  "each replica's rows (",
                  dp, dp == 1 ? "" : "s", tp, tp, tp == 1 ? "" : "s", dp);
      for (int q = 0; q < dp; ++q) std::printf("%s%zu", q ? " " : "", ex::split(M, dp, q).size);
      std::printf("), all_gather_v of the rows\n   Z[0][0..2] = %.7g %.7g %.7g; single-rank with the same %d blocks "
                  "folded in order -> %s\n",
                  double(Z2d[0]), double(Z2d[1]), double(Z2d[2]), tp, same2d ? "bit-identical" : "DIFFERENT");
    }
    const int failures = check.total(comm);
    if (r == 0) std::printf("%s (%.3f s)\n", failures ? "FAILED" : "OK", seconds);
    return failures ? 1 : 0;
  });
}
