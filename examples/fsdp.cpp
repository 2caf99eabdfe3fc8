// Sharded data parallel (the FSDP / ZeRO-3 pattern): a 3-layer MLP (13 -> 29 -> 17 -> 3, tanh,
// mean squared error against a fixed random "teacher" network) whose parameters are sharded
// across the ranks. Each rank keeps only its shard of every layer's flat parameter vector (W then b)
// and of its gradient; the layer sizes (406, 510 and 54 parameters) are not all multiples of the
// world size (none of them of 4, the default), so the shards are uneven and the collectives are
// the _v forms:
//
//   forward,  layer by layer: all_gather_v the layer's shards into the full layer (the next
//             layer's gather is started with all_gather_v_async while this one computes), run it
//             on this rank's share of the global batch, free the full layer again;
//   backward, from the last layer: gather the layer again, compute its gradient summed over this
//             rank's samples in sample order, start reduce_scatter_v_async (algo::direct, ops::sum):
//             each rank receives the sum over ranks of its own shard of the gradient while the
//             next layer's backward runs; wait before the update;
//   update:   each rank applies SGD to its shard only.
//
// algo::direct folds the ranks' partial gradients in rank order, so the sharded run is bit-for-bit
// the unsharded one-process run that folds the same per-shard partials in shard order; rank 0 runs
// that reference and compares the gathered final weights and the losses bit by bit.
// Usage: fsdp [--ranks N] [--epochs E] [--batch B]   (or collx-run -n N fsdp)
#include "common.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

namespace ex = collx_examples;

namespace {

struct layer_shape {
  int in, out;
  constexpr std::size_t params() const { return static_cast<std::size_t>(out) * static_cast<std::size_t>(in + 1); }
};
constexpr std::array<layer_shape, 3> shapes = {{{13, 29}, {29, 17}, {17, 3}}};
constexpr int L = static_cast<int>(shapes.size());

// z = W x + b for one sample (W: out x in, row-major, then b).
void layer_forward(const layer_shape& s, const float* p, const float* x, float* z) {
  const float* b = p + static_cast<std::size_t>(s.out) * static_cast<std::size_t>(s.in);
  for (int o = 0; o < s.out; ++o) {
    float acc = b[o];
    for (int i = 0; i < s.in; ++i) acc += p[o * s.in + i] * x[i];
    z[o] = acc;
  }
}
// Accumulates one sample's parameter gradient into gp; gx = W^T gz (if gx).
void layer_backward(const layer_shape& s, const float* p, const float* x, const float* gz, float* gp, float* gx) {
  float* gb = gp + static_cast<std::size_t>(s.out) * static_cast<std::size_t>(s.in);
  for (int o = 0; o < s.out; ++o) {
    for (int i = 0; i < s.in; ++i) gp[o * s.in + i] += gz[o] * x[i];
    gb[o] += gz[o];
  }
  if (gx)
    for (int i = 0; i < s.in; ++i) {
      float acc = 0.0f;
      for (int o = 0; o < s.out; ++o) acc += p[o * s.in + i] * gz[o];
      gx[i] = acc;
    }
}

std::vector<std::vector<float>> init_layers(std::uint64_t seed) {
  std::vector<std::vector<float>> w;
  ex::rng g(seed);
  for (const auto& s : shapes) {
    std::vector<float> p(s.params(), 0.0f);
    const float a = std::sqrt(6.0f / static_cast<float>(s.in + s.out));
    for (std::size_t i = 0; i < static_cast<std::size_t>(s.in * s.out); ++i) p[i] = g.uniform(-a, a);
    for (std::size_t i = static_cast<std::size_t>(s.in * s.out); i < p.size(); ++i) p[i] = g.uniform(-0.1f, 0.1f);
    w.push_back(std::move(p));
  }
  return w;
}

// Forward of a set of samples through one layer: out[k] = act(layer(in[k])).
void forward_layer(int l, const float* p, const std::vector<float>& in, std::vector<float>& out, std::size_t n) {
  const layer_shape& s = shapes[static_cast<std::size_t>(l)];
  out.assign(n * static_cast<std::size_t>(s.out), 0.0f);
  for (std::size_t k = 0; k < n; ++k) {
    float* z = out.data() + k * static_cast<std::size_t>(s.out);
    layer_forward(s, p, in.data() + k * static_cast<std::size_t>(s.in), z);
    if (l + 1 < L)
      for (int o = 0; o < s.out; ++o) z[o] = std::tanh(z[o]);
  }
}
// Backward of a set of samples through one layer: grad (zeroed here) = sum over samples in order;
// g_in = gradient w.r.t. the layer's input pre-activation of the previous layer (if l > 0).
void backward_layer(int l, const float* p, const std::vector<float>& in, const std::vector<float>& g_out,
                    std::vector<float>& g_in, float* grad, std::size_t n) {
  const layer_shape& s = shapes[static_cast<std::size_t>(l)];
  std::fill(grad, grad + s.params(), 0.0f);
  g_in.assign(l > 0 ? n * static_cast<std::size_t>(s.in) : 0, 0.0f);
  for (std::size_t k = 0; k < n; ++k) {
    const float* x = in.data() + k * static_cast<std::size_t>(s.in);
    float* gx = l > 0 ? g_in.data() + k * static_cast<std::size_t>(s.in) : nullptr;
    layer_backward(s, p, x, g_out.data() + k * static_cast<std::size_t>(s.out), grad, gx);
    if (gx)
      for (int i = 0; i < s.in; ++i) gx[i] *= 1.0f - x[i] * x[i];  // x = tanh(z) of the layer below
  }
}

struct problem {
  std::size_t samples = 384;
  std::vector<float> x, t;  // inputs (samples x 13), targets (samples x 3)
  problem() {
    ex::rng g(4242);
    x.resize(samples * 13);
    for (auto& v : x) v = g.uniform(-1.0f, 1.0f);
    const auto teacher = init_layers(777);
    std::vector<float> a = x, b;
    for (int l = 0; l < L; ++l) {
      forward_layer(l, teacher[static_cast<std::size_t>(l)].data(), a, b, samples);
      a.swap(b);
    }
    t = a;
  }
  // Inputs and targets of samples [first, first + n) of the (fixed-order) data set.
  std::vector<float> inputs(std::size_t first, std::size_t n) const {
    return {x.begin() + static_cast<std::ptrdiff_t>(first * 13), x.begin() + static_cast<std::ptrdiff_t>((first + n) * 13)};
  }
};

// Loss (0.5 * squared error, summed) of samples [first, first+n) given the network output y, and
// the gradient w.r.t. y.
double loss_and_grad(const problem& pb, std::size_t first, std::size_t n, const std::vector<float>& y, std::vector<float>& g) {
  g.assign(y.size(), 0.0f);
  double loss = 0;
  for (std::size_t k = 0; k < n * 3; ++k) {
    g[k] = y[k] - pb.t[first * 3 + k];
    loss += 0.5 * static_cast<double>(g[k]) * static_cast<double>(g[k]);
  }
  return loss;
}

struct config {
  int epochs = 6;
  std::size_t batch = 32;
  float lr = 0.05f;
};

// All-layer gradient of samples [first, first+n), each layer's gradient summed in sample order.
double shard_gradients(const problem& pb, const std::vector<std::vector<float>>& w, std::size_t first, std::size_t n,
                       std::vector<std::vector<float>>& grad) {
  std::vector<std::vector<float>> acts(L + 1);
  acts[0] = pb.inputs(first, n);
  for (int l = 0; l < L; ++l) forward_layer(l, w[static_cast<std::size_t>(l)].data(), acts[static_cast<std::size_t>(l)], acts[static_cast<std::size_t>(l) + 1], n);
  std::vector<float> g, g_in;
  const double loss = loss_and_grad(pb, first, n, acts[L], g);
  for (int l = L - 1; l >= 0; --l) {
    const std::size_t ls = static_cast<std::size_t>(l);
    backward_layer(l, w[ls].data(), acts[ls], g, g_in, grad[ls].data(), n);
    g.swap(g_in);
  }
  return loss;
}

// The unsharded reference: every parameter in one process, each batch's gradient folded from
// `shards` shard partials in shard order. Returns the weights; the per-epoch loss sums go to `losses`.
std::vector<std::vector<float>> train_unsharded(const problem& pb, const config& cfg, int shards, std::vector<double>& losses) {
  auto w = init_layers(1);
  std::vector<std::vector<float>> grad, part;
  for (const auto& s : shapes) grad.emplace_back(s.params()), part.emplace_back(s.params());
  for (int e = 0; e < cfg.epochs; ++e) {
    std::vector<double> shard_loss(static_cast<std::size_t>(shards), 0.0);  // what each rank sums
    for (std::size_t first = 0; first < pb.samples; first += cfg.batch) {
      const std::size_t bsize = std::min(cfg.batch, pb.samples - first);
      for (int s = 0; s < shards; ++s) {
        const ex::block b = ex::split(bsize, shards, s);
        shard_loss[static_cast<std::size_t>(s)] += shard_gradients(pb, w, first + b.first, b.size, s == 0 ? grad : part);
        if (s > 0)
          for (int l = 0; l < L; ++l)
            for (std::size_t i = 0; i < grad[static_cast<std::size_t>(l)].size(); ++i)
              grad[static_cast<std::size_t>(l)][i] = grad[static_cast<std::size_t>(l)][i] + part[static_cast<std::size_t>(l)][i];
      }
      for (int l = 0; l < L; ++l)
        for (std::size_t i = 0; i < w[static_cast<std::size_t>(l)].size(); ++i)
          w[static_cast<std::size_t>(l)][i] -= cfg.lr * (grad[static_cast<std::size_t>(l)][i] / static_cast<float>(bsize));
    }
    // Rank order, as direct folds; 0.0 + x is x, so the bits are those of shard 0 + shard 1 + ...
    // (shard_loss[0] first instead: g++ -O3 warns of a null dereference, not seeing shards >= 1).
    double loss = 0.0;
    for (const double part_loss : shard_loss) loss = loss + part_loss;
    losses.push_back(loss);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks N] [--epochs E] [--batch B]");
  const int ranks = opt.get_ranks();
  config cfg;
  cfg.epochs = static_cast<int>(opt.get_int("--epochs", cfg.epochs, 2, 100000, "the loss is checked to go down"));
  cfg.batch = static_cast<std::size_t>(opt.get_int("--batch", static_cast<long long>(cfg.batch), 1, 1 << 20));
  opt.reject_unknown();
  const problem pb;

  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    ex::checker check{r, 0};
    const auto t0 = std::chrono::steady_clock::now();

    // This rank's shards. (A real FSDP initialises each shard in place; here every rank builds the
    // full initial weights from the seed and keeps its slice, which gives the same bits.)
    std::vector<std::vector<std::size_t>> counts;
    std::vector<std::vector<float>> shard, grad_shard, full(L), grad_full(L);
    {
      const auto w0 = init_layers(1);
      for (int l = 0; l < L; ++l) {
        const std::size_t P = shapes[static_cast<std::size_t>(l)].params();
        counts.push_back(ex::split_counts(P, n));
        const ex::block b = ex::split(P, n, r);
        const auto& w = w0[static_cast<std::size_t>(l)];
        shard.emplace_back(w.begin() + static_cast<std::ptrdiff_t>(b.first), w.begin() + static_cast<std::ptrdiff_t>(b.first + b.size));
        grad_shard.emplace_back(b.size);
      }
    }
    if (r == 0) {
      std::printf("fsdp: MLP 13-29-17-3 over %d rank%s, %zu samples, batch %zu, %d epochs\n", n, n == 1 ? "" : "s", pb.samples,
                  cfg.batch, cfg.epochs);
      std::size_t total = 0, mine = 0;
      for (int l = 0; l < L; ++l) {
        std::printf("  layer %d: %zu parameters, shards", l, shapes[static_cast<std::size_t>(l)].params());
        for (auto c : counts[static_cast<std::size_t>(l)]) std::printf(" %zu", c);
        std::printf("\n");
        total += shapes[static_cast<std::size_t>(l)].params();
        mine += shard[static_cast<std::size_t>(l)].size();
      }
      std::printf("  rank 0 stores %zu of %zu parameters (plus one gathered layer at a time)\n", mine, total);
    }
    auto gather = [&](int l) {  // starts gathering layer l into full[l]
      const std::size_t ls = static_cast<std::size_t>(l);
      full[ls].resize(shapes[ls].params());
      return collx::all_gather_v_async(comm, std::span<const float>(shard[ls]), std::span<float>(full[ls]),
                                       counts[ls]);
    };
    auto release = [&](int l) {  // reshard: drop the gathered layer
      std::vector<float>().swap(full[static_cast<std::size_t>(l)]);
    };

    std::vector<double> losses;
    for (int e = 0; e < cfg.epochs; ++e) {
      double loss = 0;
      for (std::size_t first = 0; first < pb.samples; first += cfg.batch) {
        const std::size_t bsize = std::min(cfg.batch, pb.samples - first);
        const ex::block mine = ex::split(bsize, n, r);  // this rank's samples of the global batch
        std::vector<std::vector<float>> acts(L + 1);
        acts[0] = pb.inputs(first + mine.first, mine.size);
        // forward: gather layer l (prefetching l + 1), compute, release
        collx::request next = gather(0);
        for (int l = 0; l < L; ++l) {
          next.wait();
          if (l + 1 < L) next = gather(l + 1);
          const std::size_t ls = static_cast<std::size_t>(l);
          forward_layer(l, full[ls].data(), acts[ls], acts[ls + 1], mine.size);
          release(l);
        }
        std::vector<float> g, g_in;
        loss += loss_and_grad(pb, first + mine.first, mine.size, acts[L], g);
        // backward: gather layer l again (prefetching l - 1), gradient, reduce-scatter in the background
        std::vector<collx::request> scatters;
        next = gather(L - 1);
        for (int l = L - 1; l >= 0; --l) {
          next.wait();
          if (l > 0) next = gather(l - 1);
          const std::size_t ls = static_cast<std::size_t>(l);
          grad_full[ls].resize(shapes[ls].params());
          backward_layer(l, full[ls].data(), acts[ls], g, g_in, grad_full[ls].data(), mine.size);
          g.swap(g_in);
          release(l);
          scatters.push_back(collx::reduce_scatter_v_async<collx::algo::direct>(
              comm, std::span<const float>(grad_full[ls]), std::span<float>(grad_shard[ls]),
              counts[ls]));
        }
        for (auto& q : scatters) q.wait();
        // update: each rank its own shard
        for (int l = 0; l < L; ++l) {
          const std::size_t ls = static_cast<std::size_t>(l);
          for (std::size_t i = 0; i < shard[ls].size(); ++i) shard[ls][i] -= cfg.lr * (grad_shard[ls][i] / static_cast<float>(bsize));
        }
      }
      double total[1] = {loss};
      collx::allreduce<collx::algo::direct>(comm, std::span<double>(total));  // same fold as the reference's
      losses.push_back(total[0]);
      if (r == 0) std::printf("epoch %d  mean loss %.6f\n", e + 1, total[0] / static_cast<double>(pb.samples));
    }
    const double seconds = ex::seconds_since(t0);

    // Gather the final weights everywhere (what a checkpoint would do) and compare on rank 0.
    std::vector<std::vector<float>> final_w(L);
    for (int l = 0; l < L; ++l) {
      const std::size_t ls = static_cast<std::size_t>(l);
      final_w[ls].resize(shapes[ls].params());
      collx::all_gather_v(comm, std::span<const float>(shard[ls]), std::span<float>(final_w[ls]),
                          counts[ls]);
    }
    if (r == 0) {
      std::vector<float> flat;
      for (const auto& w : final_w) flat.insert(flat.end(), w.begin(), w.end());
      std::vector<double> ref_losses, plain_losses;
      const auto ref = train_unsharded(pb, cfg, n, ref_losses);
      std::vector<float> ref_flat;
      for (const auto& w : ref) ref_flat.insert(ref_flat.end(), w.begin(), w.end());
      const bool same_w = ex::same_bits(std::span<const float>(flat), std::span<const float>(ref_flat));
      const bool same_l = ex::same_bits(std::span<const double>(losses), std::span<const double>(ref_losses));
      std::printf("sharded run: %.3f s; final loss %.6f, weights fnv1a64 %016llx\n", seconds,
                  losses.back() / static_cast<double>(pb.samples), static_cast<unsigned long long>(ex::fnv1a(std::span<const float>(flat))));
      std::printf("unsharded 1-process run (%d shard partial%s folded in order): final loss %.6f, weights fnv1a64 %016llx -> "
                  "weights %s, losses %s\n",
                  n, n == 1 ? "" : "s", ref_losses.back() / static_cast<double>(pb.samples),
                  static_cast<unsigned long long>(ex::fnv1a(std::span<const float>(ref_flat))),
                  same_w ? "bit-identical" : "DIFFERENT", same_l ? "bit-identical" : "DIFFERENT");
      const auto plain = train_unsharded(pb, cfg, 1, plain_losses);
      std::vector<float> plain_flat;
      for (const auto& w : plain) plain_flat.insert(plain_flat.end(), w.begin(), w.end());
      std::printf("plain unsharded run (one sum per batch): max |w - w_plain| = %.3g (rounding order only)\n",
                  ex::max_abs_diff(std::span<const float>(flat), std::span<const float>(plain_flat)));
      check(same_w, "sharded weights differ from the unsharded reference");
      check(same_l, "sharded losses differ from the unsharded reference");
      // That the model learns (the weights really change), not how fast: that is the
      // hyperparameters' business (halving the loss, checked here once, failed at --batch 384).
      check(losses.back() < losses.front(), "the loss did not go down");
    }
    const int failures = check.total(comm);
    if (r == 0) std::printf("%s\n", failures ? "FAILED" : "OK");
    return failures ? 1 : 0;
  });
}
