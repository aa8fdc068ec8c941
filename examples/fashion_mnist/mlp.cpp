#include "examples/fashion_mnist/mlp.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "parallel/gemm.h"

namespace zeroshard::examples {
namespace {

/// Uniform float in [0, 1) from the top 24 bits of one 64-bit draw: exact in
/// fp32 and the same on every platform (std::uniform_real_distribution is
/// implementation-defined).
float uniform01(std::mt19937_64& rng) {
  return static_cast<float>(rng() >> 40) * (1.0f / 16777216.0f);
}

/// z[i, j] += b[j]; then max(z, 0) when relu.
void add_bias_activate(float* z, const float* b, std::size_t n, std::size_t out, bool relu) {
  for (std::size_t i = 0; i < n; ++i) {
    float* row = z + i * out;
    if (relu) {
      for (std::size_t j = 0; j < out; ++j) row[j] = std::max(row[j] + b[j], 0.0f);
    } else {
      for (std::size_t j = 0; j < out; ++j) row[j] += b[j];
    }
  }
}

}  // namespace

double softmax_cross_entropy_row(const float* logits, std::size_t classes, std::uint8_t label,
                                 float scale, float* dlogits) {
  float m = logits[0];
  for (std::size_t j = 1; j < classes; ++j) m = std::max(m, logits[j]);
  double sum = 0.0;
  for (std::size_t j = 0; j < classes; ++j) sum += std::exp(double(logits[j]) - double(m));
  const double log_sum = std::log(sum);
  if (dlogits != nullptr) {
    for (std::size_t j = 0; j < classes; ++j) {
      const double p = std::exp(double(logits[j]) - double(m) - log_sum);
      const double onehot = (j == label) ? 1.0 : 0.0;
      dlogits[j] = static_cast<float>((p - onehot) * double(scale));
    }
  }
  return double(m) + log_sum - double(logits[label]);
}

double softmax_cross_entropy_sum(const float* logits, const std::uint8_t* labels, std::size_t n,
                                 std::size_t classes, float scale, float* dlogits) {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += softmax_cross_entropy_row(logits + i * classes, classes, labels[i], scale,
                                     dlogits + i * classes);
  }
  return sum;
}

EvalCounts count_predictions(const float* logits, const std::uint8_t* labels, std::size_t n,
                             std::size_t classes) {
  EvalCounts counts;
  counts.samples = static_cast<std::int64_t>(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = logits + i * classes;
    counts.loss_sum += softmax_cross_entropy_row(row, classes, labels[i], 1.0f, nullptr);
    const auto best = std::size_t(std::max_element(row, row + classes) - row);
    if (best == labels[i]) ++counts.correct;
  }
  return counts;
}

Mlp::Mlp(Engine& engine, std::vector<std::int64_t> layer_sizes, std::size_t max_batch)
    : engine_(engine),
      dtype_(engine.compute_dtype()),
      sizes_(std::move(layer_sizes)),
      max_batch_(max_batch) {
  ZS_CHECK(sizes_.size() >= 2, "an MLP needs at least inputs and classes, got {} sizes",
           sizes_.size());
  for (auto s : sizes_) ZS_CHECK(s >= 1, "layer size {} must be >= 1", s);
  ZS_CHECK(sizes_.back() <= 256, "labels are uint8: at most 256 classes, got {}", sizes_.back());
  ZS_CHECK(max_batch_ >= 1, "max_batch must be >= 1");
  const GroupId no_decay =
      engine_.add_param_group("no_decay", {.lr = std::nullopt, .weight_decay = 0.0f});
  const int layers = static_cast<int>(sizes_.size()) - 1;
  for (int l = 0; l < layers; ++l) {
    const std::int64_t in = sizes_[std::size_t(l)];
    const std::int64_t out = sizes_[std::size_t(l) + 1];
    const std::string name = fmt::format("fc{}", l + 1);
    const UnitId u = engine_.add_unit(name);
    units_.push_back(u);
    weights_.push_back(engine_.add_parameter(u, name + ".weight", {out, in}));
    biases_.push_back(engine_.add_parameter(u, name + ".bias", {out}, no_decay));
    acts_.emplace_back(max_batch_ * std::size_t(out));
    widest_ = std::max({widest_, std::size_t(in), std::size_t(out)});
    largest_weight_ = std::max(largest_weight_, std::size_t(out * in));
  }
  delta_a_.resize(max_batch_ * widest_);
  delta_b_.resize(max_batch_ * widest_);
  if (dtype_ != DType::f32) {
    wide_w_.resize(largest_weight_);
    wide_gw_.resize(largest_weight_);
    wide_b_.resize(widest_);
    wide_gb_.resize(widest_);
  }
}

void Mlp::check_batch(const char* what, std::span<const float> x,
                      std::span<const std::uint8_t> labels, std::size_t n,
                      std::size_t min_n) const {
  const std::size_t inputs = std::size_t(sizes_.front());
  const std::size_t classes = std::size_t(sizes_.back());
  ZS_CHECK(n >= min_n && n <= max_batch_, "{} of {} samples, expected {}..{}", what, n, min_n,
           max_batch_);
  ZS_CHECK(x.size() >= n * inputs && labels.size() >= n,
           "{} buffers too small: {} inputs, {} labels for {} samples", what, x.size(),
           labels.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    ZS_CHECK(labels[i] < classes, "label {} of sample {} is not below {} classes", labels[i], i,
             classes);
  }
}

const float* Mlp::param_f32(ParamId p, std::vector<float>& wide) {
  if (dtype_ == DType::f32) return engine_.param(p).data();
  kernels::cast(wide.data(), DType::f32, engine_.param_data(p, dtype_), dtype_, engine_.layout().param(p).numel);
  return wide.data();
}

const float* Mlp::weight_f32(int l) { return param_f32(weights_[std::size_t(l)], wide_w_); }

const float* Mlp::bias_f32(int l) { return param_f32(biases_[std::size_t(l)], wide_b_); }

void Mlp::accumulate_grads(int l, const float* delta, const float* h_below, std::size_t n) {
  const std::size_t in = layer_in(l), out = layer_out(l);
  const ParamId w = weights_[std::size_t(l)];
  const ParamId b = biases_[std::size_t(l)];
  const bool fp32 = dtype_ == DType::f32;
  // fp32: straight into the engine's buffers (beta = 1 adds); else into scratch.
  float* gw = fp32 ? engine_.grad(w).data() : wide_gw_.data();
  float* gb = fp32 ? engine_.grad(b).data() : wide_gb_.data();
  // dW[out, in] (+)= delta[n, out]^T * h_below[n, in]
  parallel::sgemm(parallel::Trans::yes, parallel::Trans::no, out, in, n, 1.0f, delta, h_below, fp32 ? 1.0f : 0.0f, gw);
  // db[out] (+)= column sums of delta
  if (!fp32) std::fill_n(gb, out, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = delta + i * out;
    for (std::size_t j = 0; j < out; ++j) gb[j] += row[j];
  }
  if (!fp32) {
    kernels::accumulate_cast(engine_.grad_data(w, dtype_), dtype_, gw, DType::f32, out * in);
    kernels::accumulate_cast(engine_.grad_data(b, dtype_), dtype_, gb, DType::f32, out);
  }
}

std::size_t Mlp::num_parameters() const {
  std::size_t total = 0;
  for (std::size_t l = 0; l + 1 < sizes_.size(); ++l) {
    total += std::size_t(sizes_[l + 1]) * std::size_t(sizes_[l] + 1);
  }
  return total;
}

void Mlp::initialize(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> values;
  for (int l = 0; l < num_layers(); ++l) {
    const std::size_t in = layer_in(l), out = layer_out(l);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    for (const auto& [param, numel] :
         {std::pair{weights_[std::size_t(l)], out * in}, std::pair{biases_[std::size_t(l)], out}}) {
      values.resize(numel);
      for (float& v : values) v = bound * (2.0f * uniform01(rng) - 1.0f);
      engine_.set_parameter(param, values);
    }
  }
}

const float* Mlp::forward(const float* x, std::size_t n) {
  const float* h = x;
  forward_units([&](int l) {
    const std::size_t in = layer_in(l), out = layer_out(l);
    if (n > 0) {
      const auto span = engine_.trace("forward", engine_.layout().unit(unit(l)).name);
      const float* w = weight_f32(l);
      const float* b = bias_f32(l);
      float* z = acts_[std::size_t(l)].data();
      // z[n, out] = h[n, in] * W[out, in]^T
      parallel::sgemm(parallel::Trans::no, parallel::Trans::yes, n, out, in, 1.0f, h, w, 0.0f, z);
      add_bias_activate(z, b, n, out, /*relu=*/l + 1 < num_layers());
    }
    h = acts_[std::size_t(l)].data();
  });
  return h;
}

double Mlp::forward_backward(std::span<const float> x, std::span<const std::uint8_t> labels,
                             std::size_t n) {
  check_batch("micro-batch", x, labels, n, 1);
  const float* logits = forward(x.data(), n);

  // dL/dlogits of the mean loss, times the loss scale: (softmax - onehot) * scale / n.
  double loss_sum = 0.0;
  const float grad_scale = static_cast<float>(engine_.loss_scale() / static_cast<double>(n));
  float* delta = delta_a_.data();
  float* delta_below = delta_b_.data();
  {
    const auto span = engine_.trace("loss");
    loss_sum = softmax_cross_entropy_sum(logits, labels.data(), n, std::size_t(sizes_.back()),
                                         grad_scale, delta);
  }

  backward_units([&](int l) {
    const std::size_t in = layer_in(l), out = layer_out(l);
    const float* h_below = (l == 0) ? x.data() : acts_[std::size_t(l) - 1].data();
    const auto span = engine_.trace("backward", engine_.layout().unit(unit(l)).name);
    accumulate_grads(l, delta, h_below, n);
    if (l > 0) {
      // dh[n, in] = delta[n, out] * W[out, in]; through ReLU: zero where h <= 0.
      parallel::sgemm(parallel::Trans::no, parallel::Trans::no, n, in, out, 1.0f, delta, weight_f32(l), 0.0f,
                      delta_below);
      for (std::size_t k = 0; k < n * in; ++k) {
        if (!(h_below[k] > 0.0f)) delta_below[k] = 0.0f;
      }
    }
    std::swap(delta, delta_below);
  });
  return loss_sum / static_cast<double>(n);
}

EvalCounts Mlp::evaluate(std::span<const float> x, std::span<const std::uint8_t> labels,
                         std::size_t n) {
  check_batch("evaluation batch", x, labels, n, 0);
  const float* logits = forward(x.data(), n);
  return count_predictions(logits, labels.data(), n, std::size_t(sizes_.back()));
}

}  // namespace zeroshard::examples
