// A small MLP for engine tests: L square layers (h x h weight, h bias), tanh
// between layers, mean-over-batch 0.5*squared-error loss. Written with plain
// loops so the unsharded reference and the engine run the same arithmetic.
// The first and the last layer share weight and bias (tied).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace zeroshard::testing {

/// Shape of the test MLP.
struct TinyMlpShape {
  int hidden = 4;   ///< h: every layer is h -> h
  int layers = 10;  ///< layer l uses parameter set owner(l)
  /// Parameter set used by layer l: the last layer reuses the first's.
  int owner(int l) const { return l == layers - 1 ? 0 : l; }
  int param_sets() const { return layers - 1; }
};

/// out[b, j] = act(sum_i in[b, i] * W[j, i] + bias[j]) for b < batch.
inline void layer_forward(std::span<const float> w, std::span<const float> bias, const float* in,
                          float* out, int batch, int h, bool activate) {
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < h; ++j) {
      float acc = bias[j];
      for (int i = 0; i < h; ++i) acc += in[b * h + i] * w[j * h + i];
      out[b * h + j] = activate ? std::tanh(acc) : acc;
    }
  }
}

/// Backward of layer_forward given its output `out` and dL/d(out) `dout`:
/// adds dL/dW into dw and dL/dbias into dbias, writes dL/d(in) into din.
inline void layer_backward(std::span<const float> w, const float* in, const float* out,
                           const float* dout, std::span<float> dw, std::span<float> dbias,
                           float* din, int batch, int h, bool activate) {
  std::vector<float> dz(static_cast<std::size_t>(batch) * h);
  for (int k = 0; k < batch * h; ++k) dz[k] = activate ? dout[k] * (1.0f - out[k] * out[k]) : dout[k];
  for (int j = 0; j < h; ++j) {
    for (int b = 0; b < batch; ++b) {
      dbias[j] += dz[b * h + j];
      for (int i = 0; i < h; ++i) dw[j * h + i] += dz[b * h + j] * in[b * h + i];
    }
  }
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < h; ++i) {
      float acc = 0;
      for (int j = 0; j < h; ++j) acc += dz[b * h + j] * w[j * h + i];
      din[b * h + i] = acc;
    }
  }
}

/// Deterministic inputs/targets for `count` samples starting at `first`.
inline void make_samples(int first, int count, int h, std::vector<float>& x, std::vector<float>& t) {
  x.resize(static_cast<std::size_t>(count) * h);
  t.resize(static_cast<std::size_t>(count) * h);
  for (int s = 0; s < count; ++s) {
    for (int i = 0; i < h; ++i) {
      const int k = (first + s) * h + i;
      x[s * h + i] = std::sin(0.37f * k + 0.1f);
      t[s * h + i] = 0.5f * std::cos(0.23f * k);
    }
  }
}

/// Initial values of parameter set p: weight (h*h) then bias (h).
inline void init_params(int p, int h, std::vector<float>& w, std::vector<float>& b) {
  std::mt19937_64 rng(1234 + p);
  std::uniform_real_distribution<float> d(-1.0f / std::sqrt(static_cast<float>(h)),
                                          1.0f / std::sqrt(static_cast<float>(h)));
  w.resize(static_cast<std::size_t>(h) * h);
  b.resize(h);
  for (auto& v : w) v = d(rng);
  for (auto& v : b) v = d(rng);
}

/// Runs forward and backward over a batch. `weight(p)`, `bias(p)` give the
/// parameter set p's values and `dweight(p)`, `dbias(p)` its gradient
/// accumulators; `before_use(l, backward)` and `after_use(l, backward)` are
/// called around each layer (the engine unshards/reshards/reduces there).
/// Returns the mean loss over the batch.
template <class Weight, class Bias, class DWeight, class DBias, class Before, class After>
double forward_backward(const TinyMlpShape& shape, const std::vector<float>& x,
                        const std::vector<float>& t, int batch, Weight weight, Bias bias,
                        DWeight dweight, DBias dbias, Before before_use, After after_use) {
  const int h = shape.hidden, L = shape.layers;
  std::vector<std::vector<float>> acts(L + 1, std::vector<float>(static_cast<std::size_t>(batch) * h));
  acts[0] = x;
  for (int l = 0; l < L; ++l) {
    before_use(l, false);
    const int p = shape.owner(l);
    layer_forward(weight(p), bias(p), acts[l].data(), acts[l + 1].data(), batch, h, l != L - 1);
    after_use(l, false);
  }
  double loss = 0;
  std::vector<float> grad(static_cast<std::size_t>(batch) * h), din(grad.size());
  for (int k = 0; k < batch * h; ++k) {
    const float diff = acts[L][k] - t[k];
    loss += 0.5 * static_cast<double>(diff) * diff;
    grad[k] = diff / static_cast<float>(batch);
  }
  for (int l = L - 1; l >= 0; --l) {
    before_use(l, true);
    const int p = shape.owner(l);
    layer_backward(weight(p), acts[l].data(), acts[l + 1].data(), grad.data(), dweight(p), dbias(p),
                   din.data(), batch, h, l != L - 1);
    grad.swap(din);
    after_use(l, true);
  }
  return loss / batch;
}

}  // namespace zeroshard::testing
