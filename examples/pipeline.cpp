// Pipeline parallelism (GPipe schedule) with collx point-to-point messages: a 4-layer MLP
// (16 -> 32 -> 32 -> 32 -> 4, tanh, mean squared error) split into stages, one per rank (4 ranks:
// one layer each). Each global batch is cut into micro-batches:
//
//   forward:  stage s receives micro-batch m's activations from stage s-1 (collx::recv), runs its
//             layers, and sends the result on to stage s+1 (collx::send_async, so stage 0 computes
//             micro-batch m+1 while m is in flight); the last stage computes the loss;
//   backward: after all forwards, the micro-batches' gradients flow back the same way, stage s+1
//             to stage s; every stage accumulates its layers' parameter gradients over the
//             micro-batches, in micro-batch order;
//   update:   each stage applies SGD to its own layers; the last stage broadcasts the batch loss.
//
// Because the micro-batches are visited in order and every gradient is accumulated sample by
// sample, each stage adds exactly the terms the unpipelined run (the whole batch through all four
// layers in one process) adds, in the same order: the losses and the final weights are
// bit-identical to it, which every rank checks for its own layers.
// Usage: pipeline [--ranks S (1..4)] [--steps T] [--micro-batches M]   (or collx-run -n 4 pipeline)
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
constexpr std::array<layer_shape, 4> shapes = {{{16, 32}, {32, 32}, {32, 32}, {32, 4}}};
constexpr int L = static_cast<int>(shapes.size());
constexpr std::size_t samples = 256, batch = 32;

std::vector<std::vector<float>> init_layers(std::uint64_t seed) {
  std::vector<std::vector<float>> w;
  ex::rng g(seed);
  for (const auto& s : shapes) {
    std::vector<float> p(s.params(), 0.0f);
    const float a = std::sqrt(6.0f / static_cast<float>(s.in + s.out));
    for (auto& v : p) v = g.uniform(-a, a);
    w.push_back(std::move(p));
  }
  return w;
}

// Layer l on n samples: out = act(W in + b) (tanh except on the last layer).
void forward(int l, const std::vector<float>& p, const float* in, float* out, std::size_t n) {
  const layer_shape& s = shapes[static_cast<std::size_t>(l)];
  const float* b = p.data() + static_cast<std::size_t>(s.out * s.in);
  for (std::size_t k = 0; k < n; ++k)
    for (int o = 0; o < s.out; ++o) {
      float acc = b[o];
      for (int i = 0; i < s.in; ++i) acc += p[static_cast<std::size_t>(o * s.in + i)] * in[k * static_cast<std::size_t>(s.in) + static_cast<std::size_t>(i)];
      out[k * static_cast<std::size_t>(s.out) + static_cast<std::size_t>(o)] = l + 1 < L ? std::tanh(acc) : acc;
    }
}
// Layer l on n samples, given its input `in` and the gradient at its output g_out (after the
// activation's derivative): accumulates the parameter gradient into grad, sample by sample, and
// writes the gradient at the previous layer's output, through tanh' (if l > 0).
void backward(int l, const std::vector<float>& p, const float* in, const float* g_out, std::vector<float>& grad,
              float* g_in, std::size_t n) {
  const layer_shape& s = shapes[static_cast<std::size_t>(l)];
  const std::size_t I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  for (std::size_t k = 0; k < n; ++k) {
    const float* x = in + k * I;
    const float* gz = g_out + k * O;
    for (std::size_t o = 0; o < O; ++o) {
      for (std::size_t i = 0; i < I; ++i) grad[o * I + i] += gz[o] * x[i];
      grad[O * I + o] += gz[o];
    }
    if (l > 0)
      for (std::size_t i = 0; i < I; ++i) {
        float acc = 0.0f;
        for (std::size_t o = 0; o < O; ++o) acc += p[o * I + i] * gz[o];
        g_in[k * I + i] = acc * (1.0f - x[i] * x[i]);  // x = tanh(.) of layer l-1
      }
  }
}

struct problem {
  std::vector<float> x, t;  // samples x 16, samples x 4
  problem() {
    ex::rng g(31337);
    x.resize(samples * 16);
    for (auto& v : x) v = g.uniform(-1.0f, 1.0f);
    t.resize(samples * 4);
    for (std::size_t k = 0; k < samples; ++k)  // a smooth target
      for (std::size_t j = 0; j < 4; ++j)
        t[k * 4 + j] = std::sin(x[k * 16 + j] * 2.0f + x[k * 16 + j + 4]) * 0.5f + x[k * 16 + j + 8] * x[k * 16 + j + 12];
  }
};

// 0.5 * squared error of n samples starting at sample `first`, added sample by sample to `loss`;
// writes d loss / d y.
void loss_grad(const problem& pb, std::size_t first, const float* y, float* g, std::size_t n, double& loss) {
  for (std::size_t i = 0; i < n * 4; ++i) {
    g[i] = y[i] - pb.t[first * 4 + i];
    loss += 0.5 * static_cast<double>(g[i]) * static_cast<double>(g[i]);
  }
}

constexpr float lr = 0.05f;

// The unpipelined run: the whole batch through all layers in one process. Returns per-step losses.
std::vector<double> train_unpipelined(const problem& pb, int steps, std::vector<std::vector<float>>& w) {
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const std::size_t first = (static_cast<std::size_t>(step) * batch) % samples;
    std::vector<std::vector<float>> act(L + 1);
    act[0].assign(pb.x.begin() + static_cast<std::ptrdiff_t>(first * 16), pb.x.begin() + static_cast<std::ptrdiff_t>((first + batch) * 16));
    for (int l = 0; l < L; ++l) {
      act[static_cast<std::size_t>(l) + 1].resize(batch * static_cast<std::size_t>(shapes[static_cast<std::size_t>(l)].out));
      forward(l, w[static_cast<std::size_t>(l)], act[static_cast<std::size_t>(l)].data(), act[static_cast<std::size_t>(l) + 1].data(), batch);
    }
    double loss = 0;
    std::vector<float> g(batch * 4), g_in;
    loss_grad(pb, first, act[L].data(), g.data(), batch, loss);
    for (int l = L - 1; l >= 0; --l) {
      const std::size_t ls = static_cast<std::size_t>(l);
      std::vector<float> grad(shapes[ls].params(), 0.0f);
      g_in.assign(batch * static_cast<std::size_t>(shapes[ls].in), 0.0f);
      backward(l, w[ls], act[ls].data(), g.data(), grad, g_in.data(), batch);
      for (std::size_t i = 0; i < grad.size(); ++i) w[ls][i] -= lr * (grad[i] / static_cast<float>(batch));
      g.swap(g_in);
    }
    losses.push_back(loss);
  }
  return losses;
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv, "[--ranks S (1..4)] [--steps T] [--micro-batches M]");
  const int ranks = opt.get_ranks(L, "one stage per layer");
  const int steps = static_cast<int>(opt.get_int("--steps", 24, 2, 100000, "the loss is checked to go down"));
  const auto micro = static_cast<std::size_t>(opt.get_int("--micro-batches", 8, 1, batch));
  opt.reject_unknown();
  if (batch % micro != 0) opt.fail("--micro-batches must divide the batch of " + std::to_string(batch));
  const std::size_t mb = batch / micro;  // samples per micro-batch
  const problem pb;

  return ex::run_ranks(ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4), [&](collx::communicator& comm) {
    const int S = comm.size(), s = comm.rank();
    if (S > L) throw std::runtime_error("at most " + std::to_string(L) + " stages (one layer each)");
    ex::checker check{s, 0};
    const ex::block mine = ex::split(L, S, s);  // this stage's layers
    const int l0 = static_cast<int>(mine.first), l1 = static_cast<int>(mine.first + mine.size);
    const bool first_stage = s == 0, last_stage = s == S - 1;
    const std::size_t width_in = static_cast<std::size_t>(shapes[static_cast<std::size_t>(l0)].in);
    const std::size_t width_out = static_cast<std::size_t>(shapes[static_cast<std::size_t>(l1 - 1)].out);
    auto w = init_layers(5);  // every stage builds the same model, keeps (uses) its layers
    const auto w0 = w;
    if (s == 0) {
      std::printf("pipeline: %d stage%s (layers", S, S == 1 ? "" : "s");
      for (int q = 0; q < S; ++q) {
        const ex::block b = ex::split(L, S, q);
        std::printf(" %zu-%zu", b.first, b.first + b.size - 1);
      }
      std::printf("), batch %zu = %zu micro-batches of %zu, %d steps, GPipe schedule\n", batch, micro, mb, steps);
    }

    const auto t0 = std::chrono::steady_clock::now();
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
      const std::size_t first = (static_cast<std::size_t>(step) * batch) % samples;
      // act[m][j]: input of local layer j (j = 0..mine.size) for micro-batch m; the last entry is the output.
      std::vector<std::vector<std::vector<float>>> act(micro, std::vector<std::vector<float>>(mine.size + 1));
      std::vector<std::vector<float>> g_last(micro), g_send(micro);
      std::vector<collx::request> sends;
      double loss = 0;
      // ---- forward, micro-batch by micro-batch
      for (std::size_t m = 0; m < micro; ++m) {
        auto& a = act[m];
        a[0].resize(mb * width_in);
        if (first_stage)
          std::copy(pb.x.begin() + static_cast<std::ptrdiff_t>((first + m * mb) * 16),
                    pb.x.begin() + static_cast<std::ptrdiff_t>((first + (m + 1) * mb) * 16), a[0].begin());
        else
          collx::recv(comm, std::span<float>(a[0]), s - 1);
        for (int l = l0; l < l1; ++l) {
          const std::size_t j = static_cast<std::size_t>(l - l0);
          a[j + 1].resize(mb * static_cast<std::size_t>(shapes[static_cast<std::size_t>(l)].out));
          forward(l, w[static_cast<std::size_t>(l)], a[j].data(), a[j + 1].data(), mb);
        }
        if (last_stage) {
          g_last[m].resize(mb * 4);
          loss_grad(pb, first + m * mb, a.back().data(), g_last[m].data(), mb, loss);
        } else {
          sends.push_back(collx::send_async(comm, std::span<const float>(a.back()), s + 1));
        }
      }
      // ---- backward, micro-batches in the same order (so gradients add up in sample order)
      std::vector<std::vector<float>> grad;
      for (int l = l0; l < l1; ++l) grad.emplace_back(shapes[static_cast<std::size_t>(l)].params(), 0.0f);
      for (std::size_t m = 0; m < micro; ++m) {
        std::vector<float> g = last_stage ? g_last[m] : std::vector<float>(mb * width_out);
        if (!last_stage) collx::recv(comm, std::span<float>(g), s + 1);
        for (int l = l1 - 1; l >= l0; --l) {
          const std::size_t j = static_cast<std::size_t>(l - l0);
          std::vector<float> g_in(l > 0 ? mb * static_cast<std::size_t>(shapes[static_cast<std::size_t>(l)].in) : 0);
          backward(l, w[static_cast<std::size_t>(l)], act[m][j].data(), g.data(), grad[j], g_in.data(), mb);
          g.swap(g_in);
        }
        if (!first_stage) {
          g_send[m] = std::move(g);
          sends.push_back(collx::send_async(comm, std::span<const float>(g_send[m]), s - 1));
        }
      }
      for (auto& q : sends) q.wait();
      for (int l = l0; l < l1; ++l) {
        auto& p = w[static_cast<std::size_t>(l)];
        const auto& gr = grad[static_cast<std::size_t>(l - l0)];
        for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr * (gr[i] / static_cast<float>(batch));
      }
      double lb[1] = {loss};
      collx::broadcast(comm, std::span<double>(lb), S - 1);  // the loss lives on the last stage
      losses.push_back(lb[0]);
    }
    const double seconds = ex::seconds_since(t0);

    // The unpipelined run, in this process; each stage checks its own layers, rank 0 the losses.
    auto ref_w = w0;
    const auto ref_losses = train_unpipelined(pb, steps, ref_w);
    for (int l = l0; l < l1; ++l)
      check(ex::same_bits(std::span<const float>(w[static_cast<std::size_t>(l)]), std::span<const float>(ref_w[static_cast<std::size_t>(l)])),
            "stage " + std::to_string(s) + ": layer " + std::to_string(l) + " differs from the unpipelined run");
    if (s == 0) {
      for (int step = 0; step < steps; ++step)
        if (step < 3 || step + 1 == steps || step % 8 == 7)
          std::printf("step %3d  pipelined loss %.9f  unpipelined %.9f\n", step + 1, losses[static_cast<std::size_t>(step)] / batch,
                      ref_losses[static_cast<std::size_t>(step)] / batch);
      const bool same = ex::same_bits(std::span<const double>(losses), std::span<const double>(ref_losses));
      std::printf("final loss %.9f pipelined, %.9f unpipelined -> losses of all %d steps %s (%.3f s)\n", losses.back() / batch,
                  ref_losses.back() / batch, steps, same ? "bit-identical" : "DIFFERENT", seconds);
      check(same, "pipelined losses differ from the unpipelined run");
      check(losses.back() < losses.front(), "the loss did not go down");
    }
    const int failures = check.total(comm);
    if (s == 0)
      std::printf("%s\n", failures ? "FAILED (the checks above say which)" : "OK: every stage's weights equal the unpipelined run's");
    return failures ? 1 : 0;
  });
}
