// libtorch models and a training run for the zeroshard_torch tests: a
// model with a weight tied between two units, a bias-free layer and a
// module used twice in one forward, built the same way sharded or not.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <torch/nn/functional/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/utils.h>

#include "libtorch/optimizer.h"
#include "libtorch/shard.h"
#include "libtorch/state_dict.h"
#include "tests/support/test_world.h"

namespace zeroshard::testing {

/// A linear layer whose weight is another module's (the embedding's),
/// registered as its own parameter: a weight tied between two units.
struct TiedHeadImpl : ::torch::nn::Module {
  TiedHeadImpl(const at::Tensor& tied, std::int64_t out) {
    weight = register_parameter("weight", tied);
    bias = register_parameter("bias", ::torch::zeros({out}));
  }
  at::Tensor forward(const at::Tensor& x) { return ::torch::nn::functional::linear(x, weight, bias); }
  at::Tensor weight, bias;
};

/// tokens [B, T] -> logits [B, T, kVocab]: embedding (tied with the head),
/// a linear layer used twice, a bias-free linear, a layer norm, the tied
/// head. Every submodule is a Unit wrapper (it runs at every stage).
struct TiedNetImpl : ::torch::nn::Module {
  static constexpr std::int64_t kVocab = 11;
  static constexpr std::int64_t kDim = 7;
  torch::Unit<::torch::nn::EmbeddingImpl> wte{nullptr};
  torch::Unit<::torch::nn::Linear> shared{nullptr};  // a holder type wraps its Impl
  torch::Unit<::torch::nn::LinearImpl> nobias{nullptr};
  torch::Unit<::torch::nn::LayerNormImpl> norm{nullptr};
  torch::Unit<TiedHeadImpl> head{nullptr};

  TiedNetImpl() {
    wte = register_module("wte", torch::Unit<::torch::nn::EmbeddingImpl>(kVocab, kDim));
    shared = register_module("shared", torch::Unit<::torch::nn::Linear>(kDim, kDim));
    nobias = register_module("nobias",
                             torch::Unit<::torch::nn::LinearImpl>(::torch::nn::LinearOptions(kDim, kDim).bias(false)));
    norm = register_module("norm", torch::Unit<::torch::nn::LayerNormImpl>(
                                       ::torch::nn::LayerNormOptions(std::vector<std::int64_t>{kDim})));
    head = register_module("head", torch::Unit<TiedHeadImpl>(wte->weight, kVocab));
  }
  at::Tensor forward(const at::Tensor& tokens) {
    at::Tensor x = wte(tokens);
    x = ::torch::tanh(shared(x));
    x = ::torch::tanh(shared(x));  // the same module, used twice
    x = norm(nobias(x));
    return head(x);
  }
};

/// A fresh TiedNet with the values of libtorch's generator seeded with 7
/// (the same on every rank).
inline std::shared_ptr<TiedNetImpl> make_tied_net() {
  ::torch::manual_seed(7);
  return std::make_shared<TiedNetImpl>();
}

/// Micro-batch `step` of `rank`: tokens and targets [3, 5] in [0, kVocab).
inline std::pair<at::Tensor, at::Tensor> tied_net_batch(int rank, int step) {
  ::torch::manual_seed(1000 + 97 * step + rank);
  at::Tensor tokens = ::torch::randint(0, TiedNetImpl::kVocab, {3, 5}, ::torch::kLong);
  at::Tensor targets = ::torch::randint(0, TiedNetImpl::kVocab, {3, 5}, ::torch::kLong);
  return {tokens, targets};
}

/// Mean cross-entropy of logits [..., V] (any float dtype, taken in fp32).
inline at::Tensor tied_net_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return ::torch::nn::functional::cross_entropy(logits.reshape({-1, TiedNetImpl::kVocab}).to(::torch::kFloat),
                                                targets.reshape({-1}));
}

/// AdamW (lr 0.02, weight decay 0.1) at `stage`, gradients clipped to 1.
inline EngineConfig tied_net_config(int stage, DType dtype = DType::f32) {
  OptimizerHyper h;
  h.lr = 0.02;
  h.weight_decay = 0.1;
  EngineConfig c = make_config(stage, h, 1, 1.0);
  c.compute_dtype = dtype;
  return c;
}

/// Whether two tensors have the same dtype, shape and bytes.
inline bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

/// TiedNet sharded over world() with `config`, and its optimizer. Not
/// copyable or movable (the optimizer refers to the module).
struct TiedNetRun {
  explicit TiedNetRun(const EngineConfig& config)
      : model(make_tied_net()), engine(config, world()), sharded(torch::shard(model, engine, world())), opt(sharded) {}
  TiedNetRun(const TiedNetRun&) = delete;
  TiedNetRun& operator=(const TiedNetRun&) = delete;

  /// The forward of this rank's micro-batch `step`: its loss.
  at::Tensor loss(int step) {
    auto [tokens, targets] = tied_net_batch(world().rank(), step);
    return tied_net_loss(sharded(tokens), targets);
  }
  /// Forward, backward and optimizer step of micro-batch `step`.
  void train_step(int step) {
    loss(step).backward();
    opt.step();
  }

  std::shared_ptr<TiedNetImpl> model;
  Engine engine;
  torch::Sharded<TiedNetImpl> sharded;
  torch::Optimizer opt;
};

/// What a training run leaves: the gathered state dict and the losses.
struct TrainResult {
  ::torch::OrderedDict<std::string, at::Tensor> state;
  std::vector<float> losses;
  torch::ShardStats stats;
};

/// `steps` steps of TiedNet under zeroshard with `config` on world(), each
/// rank on its own micro-batch; `on_forward` sees the sharded module after
/// every forward (before the backward).
template <class F>
TrainResult train_tied_net(const EngineConfig& config, int steps, F on_forward) {
  TiedNetRun run(config);
  TrainResult r;
  for (int step = 0; step < steps; ++step) {
    run.opt.zero_grad();
    at::Tensor loss = run.loss(step);
    on_forward(run.sharded);
    loss.backward();
    run.opt.step();
    r.losses.push_back(loss.item<float>());
  }
  r.state = torch::gather_state_dict(run.sharded);
  r.stats = run.sharded.stats();
  return r;
}

inline TrainResult train_tied_net(const EngineConfig& config, int steps) {
  return train_tied_net(config, steps, [](torch::ShardedModule&) {});
}

}  // namespace zeroshard::testing
