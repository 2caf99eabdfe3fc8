// Data-parallel training on real data: a one-hidden-layer MLP (64 -> hidden -> 10, ReLU, softmax,
// cross-entropy, SGD with momentum) learns the UCI optical handwritten digits (1797 8x8 images,
// examples/data/digits.csv.gz) over N processes, the way PyTorch's DistributedDataParallel does it:
//
//   - every rank holds the whole model (initialised from one seed, then broadcast from rank 0);
//   - each global batch of B samples is cut into N contiguous shards, one per rank;
//   - each rank sums the per-sample gradients of its shard in sample order (a per-rank partial);
//   - the gradients are laid out in one flat buffer in the order backward produces them
//     (layer 2 first) and cut into buckets of at most --bucket-bytes; a bucket's all-reduce
//     starts (collx::allreduce_async) as soon as its last gradient is ready, so it overlaps with
//     the rest of the backward pass; all buckets are waited for before the optimizer step;
//   - the sum is divided by B and every rank applies the same update.
//
// The all-reduce uses collx::algo::direct, which folds every element in rank order:
// ((P_0 + P_1) + P_2) + ... So the N-rank run is bit-for-bit the 1-process run that computes the
// same N shard partials and folds them in shard order; rank 0 replays that reference after training
// and compares the weights bit by bit (and reports how far plain 1-process training, one sum over
// each whole batch, lands: same math, other rounding). `--ranks 1 --shards N` is that reference as
// a run of its own and prints the same checksum as an N-rank run.
//
// Usage: train_digits [--ranks N] [--epochs E] [--batch B] [--hidden H] [--lr LR] [--momentum M]
//                     [--bucket-bytes BYTES] [--no-overlap] [--shards S (1 rank only)]
//                     [--min-accuracy A] [--no-verify] [--data PATH] [--out FILE]
//   collx-run -n 4 build/examples/train_digits     (or: build/examples/train_digits --ranks 4)
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(COLLX_EXAMPLES_HAVE_ZLIB)
#include <zlib.h>
#endif

#ifndef COLLX_EXAMPLES_DATA_DIR
#define COLLX_EXAMPLES_DATA_DIR "examples/data"
#endif

namespace ex = collx_examples;

namespace {

constexpr int D = 64;  // 8x8 pixels
constexpr int C = 10;  // digits

// ---------------------------------------------------------------------------------------------
// Data

struct dataset {
  std::vector<float> x;  // size() x D, pixels scaled to [0, 1]
  std::vector<int> y;    // labels 0..9
  std::size_t size() const { return y.size(); }
  const float* row(std::size_t i) const { return x.data() + i * D; }
};

// The whole gzip file, decompressed.
std::string read_gzip(const std::string& path) {
  std::string out;
#if defined(COLLX_EXAMPLES_HAVE_ZLIB)
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  int err = Z_OK;
  const std::string msg = n < 0 ? gzerror(f, &err) : "";
  gzclose(f);
  if (n < 0) throw std::runtime_error("cannot decompress " + path + ": " + msg);
#else
  // No zlib at build time: let gzip(1) (always on Debian) decompress into a pipe.
  if (path.find('\'') != std::string::npos) throw std::runtime_error("data path must not contain a quote: " + path);
  FILE* p = ::popen(("gzip -dc -- '" + path + "'").c_str(), "r");
  if (!p) throw std::runtime_error("cannot run gzip -dc " + path);
  char buf[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (::pclose(p) != 0) throw std::runtime_error("gzip -dc " + path + " failed");
#endif
  return out;
}

// digits.csv.gz: one sample per line, 64 pixel values 0..16 then the label 0..9, no header.
dataset load_digits(const std::string& path) {
  const std::string text = read_gzip(path);
  dataset d;
  std::size_t pos = 0, line = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line;
    if (end > pos) {
      int field = 0;
      const char* s = text.c_str() + pos;
      const char* e = text.c_str() + end;
      while (s < e) {
        char* stop = nullptr;
        const long v = std::strtol(s, &stop, 10);
        if (stop == s) throw std::runtime_error(path + ":" + std::to_string(line) + ": not a number");
        if (field < D) {
          if (v < 0 || v > 16) throw std::runtime_error(path + ":" + std::to_string(line) + ": pixel out of 0..16");
          d.x.push_back(static_cast<float>(v) / 16.0f);
        } else if (field == D) {
          if (v < 0 || v >= C) throw std::runtime_error(path + ":" + std::to_string(line) + ": label out of 0..9");
          d.y.push_back(static_cast<int>(v));
        }
        ++field;
        s = stop;
        if (s < e && (*s == ',' || *s == '\r')) ++s;
      }
      if (field != D + 1)
        throw std::runtime_error(path + ":" + std::to_string(line) + ": " + std::to_string(field) + " fields, want 65");
    }
    pos = end + 1;
  }
  if (d.size() < 100) throw std::runtime_error(path + ": only " + std::to_string(d.size()) + " samples");
  return d;
}

// Fisher-Yates with splitmix64: the same permutation on every rank, run and platform.
std::vector<std::size_t> permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> p(n);
  std::iota(p.begin(), p.end(), std::size_t{0});
  ex::rng g(seed);
  for (std::size_t i = n; i > 1; --i) std::swap(p[i - 1], p[g.below(i)]);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Model: 64 -> H (ReLU) -> 10 (softmax). All parameters live in one flat vector, and so do their
// gradients, in the order backward finishes them (W2, b2, W1, b1), so that buckets are
// contiguous ranges of that vector, as in DDP (which buckets parameters in reverse order).

struct tensor {
  const char* name;
  std::size_t offset, size;
};

struct model {
  int H;
  tensor w2, b2, w1, b1;  // W2: H x C, b2: C, W1: D x H, b1: H (row-major)
  std::size_t total;
  explicit model(int hidden) : H(hidden) {
    std::size_t off = 0;
    auto add = [&](const char* name, std::size_t n) {
      tensor t{name, off, n};
      off += n;
      return t;
    };
    const std::size_t h = static_cast<std::size_t>(H);
    w2 = add("W2", h * C);
    b2 = add("b2", C);
    w1 = add("W1", D * h);
    b1 = add("b1", h);
    total = off;
  }
  std::vector<tensor> backward_order() const { return {w2, b2, w1, b1}; }

  std::vector<float> initial_parameters(std::uint64_t seed) const {
    std::vector<float> p(total, 0.0f);  // biases 0
    ex::rng g(seed);
    const float a1 = std::sqrt(6.0f / static_cast<float>(D + H)), a2 = std::sqrt(6.0f / static_cast<float>(H + C));
    for (std::size_t i = 0; i < w1.size; ++i) p[w1.offset + i] = g.uniform(-a1, a1);
    for (std::size_t i = 0; i < w2.size; ++i) p[w2.offset + i] = g.uniform(-a2, a2);
    return p;
  }

  // Forward pass of one sample: hidden pre-activations z1 (H), logits -> probabilities p (C).
  void forward(const float* params, const float* x, float* z1, float* h1, float* p) const {
    const float* W1 = params + w1.offset;
    const float* B1 = params + b1.offset;
    const float* W2 = params + w2.offset;
    const float* B2 = params + b2.offset;
    for (int j = 0; j < H; ++j) z1[j] = B1[j];
    for (int d = 0; d < D; ++d) {
      const float xd = x[d];
      if (xd == 0.0f) continue;  // most pixels are blank
      for (int j = 0; j < H; ++j) z1[j] += xd * W1[d * H + j];
    }
    for (int j = 0; j < H; ++j) h1[j] = z1[j] > 0.0f ? z1[j] : 0.0f;
    float mx = -INFINITY;
    for (int c = 0; c < C; ++c) {
      float z = B2[c];
      for (int j = 0; j < H; ++j) z += h1[j] * W2[j * C + c];
      p[c] = z;
      mx = std::max(mx, z);
    }
    float s = 0.0f;
    for (int c = 0; c < C; ++c) s += (p[c] = std::exp(p[c] - mx));
    for (int c = 0; c < C; ++c) p[c] /= s;
  }

  int predict(const float* params, const float* x) const {
    std::vector<float> z1(static_cast<std::size_t>(H)), h1(z1.size()), p(C);
    forward(params, x, z1.data(), h1.data(), p.data());
    return static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
  }
};

struct step_stats {
  double loss = 0;       // summed cross-entropy of the samples seen
  long long correct = 0; // samples whose argmax was right (before the update)
  long long samples = 0;
};

// Sum over samples idx[0..n) of the per-sample gradients, in sample order, into grad (zeroed
// first). Calls ready(k) when tensor k of backward_order() is final: W2 and b2 after the layer-2
// pass, W1 and b1 after the layer-1 pass. The N-rank run and the reference run both compute their
// shard partials with this one function, so the partials are the same bits.
template <class Ready>
void shard_gradient_sum(const model& m, const float* params, const dataset& data, const std::size_t* idx,
                        std::size_t n, float* grad, step_stats& st, Ready&& ready) {
  const std::size_t H = static_cast<std::size_t>(m.H);
  std::fill(grad, grad + m.total, 0.0f);
  std::vector<float> z1(n * H), h1(n * H), dz2(n * C), dh(H);
  // forward, keeping what backward needs
  for (std::size_t i = 0; i < n; ++i) {
    const int label = data.y[idx[i]];
    float* p = dz2.data() + i * C;
    m.forward(params, data.row(idx[i]), z1.data() + i * H, h1.data() + i * H, p);
    st.loss += -std::log(static_cast<double>(std::max(p[label], 1e-30f)));
    st.correct += (std::max_element(p, p + C) - p) == label;
    p[label] -= 1.0f;  // d loss / d logits = softmax - onehot
  }
  st.samples += static_cast<long long>(n);
  // layer 2: dW2[j][c] = sum_i h1[i][j] dz2[i][c], db2[c] = sum_i dz2[i][c]
  float* gW2 = grad + m.w2.offset;
  float* gb2 = grad + m.b2.offset;
  for (std::size_t i = 0; i < n; ++i) {
    const float* hi = h1.data() + i * H;
    const float* di = dz2.data() + i * C;
    for (std::size_t j = 0; j < H; ++j)
      for (std::size_t c = 0; c < C; ++c) gW2[j * C + c] += hi[j] * di[c];
    for (std::size_t c = 0; c < C; ++c) gb2[c] += di[c];
  }
  ready(0);
  ready(1);
  // layer 1: dh = (W2 dz2) * relu'(z1); dW1[d][j] = sum_i x[i][d] dh[i][j], db1[j] = sum_i dh[i][j]
  const float* W2 = params + m.w2.offset;
  float* gW1 = grad + m.w1.offset;
  float* gb1 = grad + m.b1.offset;
  for (std::size_t i = 0; i < n; ++i) {
    const float* di = dz2.data() + i * C;
    const float* zi = z1.data() + i * H;
    for (std::size_t j = 0; j < H; ++j) {
      float s = 0.0f;
      if (zi[j] > 0.0f)
        for (std::size_t c = 0; c < C; ++c) s += W2[j * C + c] * di[c];
      dh[j] = s;
    }
    const float* x = data.row(idx[i]);
    for (int d = 0; d < D; ++d) {
      const float xd = x[d];
      if (xd == 0.0f) continue;  // adds +-0: skipping changes no bit
      for (std::size_t j = 0; j < H; ++j) gW1[static_cast<std::size_t>(d) * H + j] += xd * dh[j];
    }
    for (std::size_t j = 0; j < H; ++j) gb1[j] += dh[j];
  }
  ready(2);
  ready(3);
}

// SGD with momentum on the mean gradient: v = mu v + sum / B; p -= lr v.
void sgd_step(std::vector<float>& params, std::vector<float>& velocity, const std::vector<float>& grad_sum,
              std::size_t batch, float lr, float mu) {
  const float b = static_cast<float>(batch);
  for (std::size_t i = 0; i < params.size(); ++i) {
    velocity[i] = mu * velocity[i] + grad_sum[i] / b;
    params[i] -= lr * velocity[i];
  }
}

struct config {
  int epochs = 20;
  std::size_t batch = 64;
  int hidden = 32;
  float lr = 0.1f, momentum = 0.9f;
  std::size_t bucket_bytes = 4096;
  bool overlap = true;
  std::uint64_t seed = 20240601;
};

// Buckets: consecutive tensors of backward_order(), closed before a tensor that would take the
// bucket past `bytes` (a tensor larger than that is a bucket of its own), like DDP's bucket_cap_mb.
struct bucket {
  std::size_t offset = 0, size = 0;  // range of the flat gradient
  std::vector<int> tensors;
};
std::vector<bucket> make_buckets(const model& m, std::size_t bytes) {
  std::vector<bucket> out;
  const auto order = m.backward_order();
  for (std::size_t k = 0; k < order.size(); ++k) {
    const tensor& t = order[k];
    if (out.empty() || (out.back().size + t.size) * sizeof(float) > bytes) out.push_back({t.offset, 0, {}});
    out.back().size += t.size;
    out.back().tensors.push_back(static_cast<int>(k));
  }
  return out;
}

// One epoch's batches (the same on every rank): a fresh permutation of the training set per epoch.
std::vector<std::size_t> epoch_order(const std::vector<std::size_t>& train, std::uint64_t seed, int epoch) {
  const auto p = permutation(train.size(), seed * 1000003u + static_cast<std::uint64_t>(epoch));
  std::vector<std::size_t> out(train.size());
  for (std::size_t i = 0; i < p.size(); ++i) out[i] = train[p[i]];
  return out;
}

// The reference: one process, the gradient of each batch folded from `shards` shard partials in
// shard order (shards = 1: plain training, one sum over each whole batch). Returns the weights.
std::vector<float> train_reference(const model& m, const dataset& data, const std::vector<std::size_t>& train,
                                   const config& cfg, int shards, std::vector<float> params) {
  std::vector<float> velocity(m.total, 0.0f), grad(m.total), partial(m.total);
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    const auto order = epoch_order(train, cfg.seed, epoch);
    for (std::size_t first = 0; first < order.size(); first += cfg.batch) {
      const std::size_t bsize = std::min(cfg.batch, order.size() - first);
      step_stats st;
      for (int s = 0; s < shards; ++s) {
        const ex::block b = ex::split(bsize, shards, s);
        float* out = s == 0 ? grad.data() : partial.data();
        shard_gradient_sum(m, params.data(), data, order.data() + first + b.first, b.size, out, st, [](int) {});
        if (s > 0)
          for (std::size_t i = 0; i < m.total; ++i) grad[i] = grad[i] + partial[i];  // = ops::sum, rank order
      }
      sgd_step(params, velocity, grad, bsize, cfg.lr, cfg.momentum);
    }
  }
  return params;
}

double accuracy(const model& m, const std::vector<float>& params, const dataset& data, const std::vector<std::size_t>& idx) {
  std::size_t ok = 0;
  for (std::size_t i : idx) ok += m.predict(params.data(), data.row(i)) == data.y[i];
  return idx.empty() ? 0.0 : static_cast<double>(ok) / static_cast<double>(idx.size());
}

}  // namespace

int main(int argc, char** argv) {
  ex::options opt(argc, argv,
                  "[--ranks N] [--epochs E] [--batch B] [--hidden H] [--lr LR] [--momentum M] [--bucket-bytes BYTES] "
                  "[--no-overlap] [--shards S] [--min-accuracy A] [--no-verify] [--data PATH] [--out FILE]");
  const int ranks = opt.get_ranks();
  config cfg;
  cfg.epochs = static_cast<int>(opt.get_int("--epochs", cfg.epochs, 1, 100000));
  cfg.batch = static_cast<std::size_t>(opt.get_int("--batch", static_cast<long long>(cfg.batch), 1, 1 << 20));
  cfg.hidden = static_cast<int>(opt.get_int("--hidden", cfg.hidden, 1, 1 << 16));
  cfg.lr = static_cast<float>(opt.get_double("--lr", static_cast<double>(cfg.lr), 0, 100));
  cfg.momentum = static_cast<float>(opt.get_double("--momentum", static_cast<double>(cfg.momentum), 0, 1));
  cfg.bucket_bytes =
      static_cast<std::size_t>(opt.get_int("--bucket-bytes", static_cast<long long>(cfg.bucket_bytes), 0, 1ll << 30));
  cfg.overlap = !opt.has("--no-overlap");
  const int shards_opt = static_cast<int>(opt.get_int("--shards", 0, 0, ex::max_ranks));
  const double min_accuracy = opt.get_double("--min-accuracy", 0.90, 0, 1);
  const bool verify = !opt.has("--no-verify");
  const std::string path = opt.get("--data", COLLX_EXAMPLES_DATA_DIR "/digits.csv.gz");
  const std::string out_path = opt.get("--out", "");
  opt.reject_unknown();

  // Every rank reads the file itself (it is small); a bad file fails before any rank starts.
  dataset data;
  try {
    data = load_digits(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
  // Fixed-seed shuffle, then the last 20% is the held-out test set.
  const auto perm = permutation(data.size(), 7);
  const std::size_t n_test = data.size() / 5;
  const std::vector<std::size_t> train(perm.begin(), perm.end() - static_cast<std::ptrdiff_t>(n_test));
  const std::vector<std::size_t> test(perm.end() - static_cast<std::ptrdiff_t>(n_test), perm.end());
  const model m(cfg.hidden);

  const int ranks_to_start = ranks > 0 ? ranks : (ex::started_by_launcher() ? 0 : 4);
  // Refused here, before forking, where the count is known (exit 2 once, not 1 from every rank);
  // under a launcher the world size is known in the ranks.
  if (shards_opt > 1 && ranks_to_start > 1) opt.fail("--shards S emulates S ranks in one process: run it with --ranks 1");
  return ex::run_ranks(ranks_to_start, [&](collx::communicator& comm) -> int {
    const int rank = comm.rank(), world = comm.size();
    if (shards_opt > 1 && world != 1)
      throw std::runtime_error("--shards S emulates S ranks in one process: run it with --ranks 1");
    const int shards = world == 1 && shards_opt > 1 ? shards_opt : world;
    ex::checker check{rank, 0};
    const bool lead = rank == 0;
    const auto buckets = make_buckets(m, cfg.bucket_bytes);
    if (lead) {
      std::printf("train_digits: %zu samples (%zu train, %zu test), MLP 64-%d-10 (%zu parameters), %d rank%s",
                  data.size(), train.size(), test.size(), cfg.hidden, m.total, world, world == 1 ? "" : "s");
      if (shards != world) std::printf(" emulating %d shards", shards);
      std::printf(", batch %zu, %d epochs\n", cfg.batch, cfg.epochs);
      std::printf("gradient buckets (cap %zu bytes, %s):", cfg.bucket_bytes,
                  cfg.overlap ? "all-reduce starts as soon as a bucket is ready" : "no overlap");
      for (const auto& b : buckets) {
        std::printf(" [");
        for (std::size_t k = 0; k < b.tensors.size(); ++k)
          std::printf("%s%s", k ? " " : "", m.backward_order()[static_cast<std::size_t>(b.tensors[k])].name);
        std::printf("] %zu B", b.size * sizeof(float));
      }
      std::printf("\n");
    }

    // DDP starts by broadcasting rank 0's weights; here every rank would build the same ones anyway.
    std::vector<float> params = m.initial_parameters(cfg.seed);
    const std::vector<float> initial = params;
    collx::broadcast(comm, std::span<float>(params), 0);
    std::vector<float> velocity(m.total, 0.0f), grad(m.total), partial(m.total);

    // Which bucket each tensor belongs to, and how many of its tensors are still pending.
    std::vector<int> bucket_of(4);
    for (std::size_t b = 0; b < buckets.size(); ++b)
      for (int t : buckets[b].tensors) bucket_of[static_cast<std::size_t>(t)] = static_cast<int>(b);
    std::vector<int> pending(buckets.size());
    std::vector<collx::request> requests(buckets.size());
    auto start_bucket = [&](std::size_t b) {
      requests[b] = collx::allreduce_async<collx::algo::direct>(
          comm, std::span<float>(grad.data() + buckets[b].offset, buckets[b].size));
    };

    double exposed_wait = 0, backward_time = 0;
    const auto t_start = std::chrono::steady_clock::now();
    for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
      const auto order = epoch_order(train, cfg.seed, epoch);
      step_stats st;
      for (std::size_t first = 0; first < order.size(); first += cfg.batch) {
        const std::size_t bsize = std::min(cfg.batch, order.size() - first);
        if (shards != world) {  // --ranks 1 --shards S: the reference, as a run of its own
          for (int s = 0; s < shards; ++s) {
            const ex::block b = ex::split(bsize, shards, s);
            float* out = s == 0 ? grad.data() : partial.data();
            shard_gradient_sum(m, params.data(), data, order.data() + first + b.first, b.size, out, st, [](int) {});
            if (s > 0)
              for (std::size_t i = 0; i < m.total; ++i) grad[i] = grad[i] + partial[i];
          }
        } else {
          const ex::block mine = ex::split(bsize, world, rank);
          for (std::size_t b = 0; b < buckets.size(); ++b) pending[b] = static_cast<int>(buckets[b].tensors.size());
          const auto t0 = std::chrono::steady_clock::now();
          shard_gradient_sum(m, params.data(), data, order.data() + first + mine.first, mine.size, grad.data(), st,
                             [&](int tensor_index) {
                               const int b = bucket_of[static_cast<std::size_t>(tensor_index)];
                               if (--pending[static_cast<std::size_t>(b)] == 0 && cfg.overlap)
                                 start_bucket(static_cast<std::size_t>(b));
                             });
          backward_time += ex::seconds_since(t0);
          if (!cfg.overlap)
            for (std::size_t b = 0; b < buckets.size(); ++b) start_bucket(b);
          const auto t1 = std::chrono::steady_clock::now();
          for (auto& r : requests) r.wait();  // every bucket summed before the optimizer step
          exposed_wait += ex::seconds_since(t1);
        }
        sgd_step(params, velocity, grad, bsize, cfg.lr, cfg.momentum);
      }
      // Epoch report: training loss/accuracy as seen during the epoch, summed over ranks, and the
      // held-out accuracy, each rank scoring its share of the test set.
      double loss_sum[1] = {st.loss};
      long long counts[3] = {st.correct, st.samples, 0};
      const ex::block tb = ex::split(test.size(), world, rank);
      for (std::size_t i = tb.first; i < tb.first + tb.size; ++i)
        counts[2] += m.predict(params.data(), data.row(test[i])) == data.y[test[i]];
      collx::allreduce(comm, std::span<double>(loss_sum));
      collx::allreduce(comm, std::span<long long>(counts));
      if (lead)
        std::printf("epoch %3d  loss %.4f  train accuracy %.2f%%  test accuracy %.2f%%\n", epoch + 1,
                    loss_sum[0] / static_cast<double>(counts[1]), 100.0 * static_cast<double>(counts[0]) / static_cast<double>(counts[1]),
                    100.0 * static_cast<double>(counts[2]) / static_cast<double>(test.size()));
    }
    const double train_seconds = ex::seconds_since(t_start);

    // Every rank must hold the same weights: min and max of the checksum over ranks agree.
    const std::uint64_t sum = ex::fnv1a(std::span<const float>(params));
    std::uint64_t lo[1] = {sum}, hi[1] = {sum};
    collx::allreduce(comm, std::span<std::uint64_t>(lo), collx::ops::min{});
    collx::allreduce(comm, std::span<std::uint64_t>(hi), collx::ops::max{});
    check(lo[0] == hi[0], "ranks ended with different weights");

    if (lead) {
      const double acc = accuracy(m, params, data, test);
      std::printf("trained in %.3f s on %d rank%s (rank 0: %.3f s in backward, %.3f s waiting for bucket all-reduces)\n",
                  train_seconds, world, world == 1 ? "" : "s", backward_time, exposed_wait);
      std::printf("final weights: fnv1a64 %016llx, held-out accuracy %.2f%% (%zu test samples)\n",
                  static_cast<unsigned long long>(sum), 100.0 * acc, test.size());
      check(acc > min_accuracy, "held-out accuracy " + std::to_string(acc) + " is not above " + std::to_string(min_accuracy));
      if (verify) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto ref = train_reference(m, data, train, cfg, shards, initial);
        const bool same = ex::same_bits(std::span<const float>(ref), std::span<const float>(params));
        std::printf("1-process reference, %d shard partial%s folded in shard order: fnv1a64 %016llx -> %s (%.3f s)\n",
                    shards, shards == 1 ? "" : "s", static_cast<unsigned long long>(ex::fnv1a(std::span<const float>(ref))),
                    same ? "bit-identical" : "DIFFERENT", ex::seconds_since(t0));
        check(same, "weights differ from the 1-process reference");
        if (shards > 1) {
          const auto plain = train_reference(m, data, train, cfg, 1, initial);
          std::printf("plain 1-process training (one sum per batch): max |w - w_plain| = %.3g, held-out accuracy %.2f%%"
                      " (other rounding order, same math)\n",
                      ex::max_abs_diff(std::span<const float>(plain), std::span<const float>(params)),
                      100.0 * accuracy(m, plain, data, test));
        }
      }
      if (!out_path.empty()) {
        if (FILE* f = std::fopen(out_path.c_str(), "w")) {
          std::fprintf(f, "ranks=%d\nshards=%d\nepochs=%d\nchecksum=%016llx\naccuracy=%.6f\n", world, shards, cfg.epochs,
                       static_cast<unsigned long long>(sum), acc);
          std::fclose(f);
        } else {
          check(false, "cannot write " + out_path);
        }
      }
      std::printf("%s\n", check.failures ? "FAILED" : "OK");
    }
    return check.failures ? 1 : 0;
  });
}
