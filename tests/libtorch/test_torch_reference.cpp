// zeroshard_torch against plain libtorch on one rank: the gradients autograd
// leaves unsharded, and the engine's AdamW kernel applied to them, bitwise
// at every stage; torch::optim::AdamW of the same libtorch after 20 steps,
// with the largest difference and its cause.
#include <cmath>
#include <map>

#include <fmt/format.h>

#include <torch/optim/adamw.h>
#include <torch/version.h>

#include "kernels/cpu/adam/adam.h"
#include "optimizer/optimizer.h"
#include "tests/libtorch/torch_test_models.h"

namespace zeroshard::testing {
namespace {

// The module's parameters once each (a tied weight is one tensor), with
// the no-decay rule of shard()'s default policy.
struct PlainGroups {
  std::vector<at::Tensor> decay, no_decay;
  std::map<const c10::TensorImpl*, std::string> names;
};

PlainGroups plain_groups(::torch::nn::Module& m) {
  PlainGroups g;
  for (const auto& item : m.named_parameters()) {
    if (!g.names.emplace(item.value().unsafeGetTensorImpl(), item.key()).second) continue;
    (torch::is_bias_or_norm(item.key(), item.value()) ? g.no_decay : g.decay).push_back(item.value());
  }
  return g;
}

constexpr double kLr = 0.02, kWd = 0.1, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

// AdamW at `stage` without clipping (tied_net_config's hyper-parameters).
EngineConfig adamw_config(int stage) {
  EngineConfig c = tied_net_config(stage);
  c.gradient_clipping = 0.0;
  return c;
}

// TiedNet trained unsharded by plain libtorch, `update` applied after each
// backward; the gradients of each step by parameter name.
template <class Update>
std::vector<std::map<std::string, at::Tensor>> train_plain(TiedNetImpl& plain, const PlainGroups& g, int steps,
                                                           Update update) {
  std::vector<std::map<std::string, at::Tensor>> grads(static_cast<std::size_t>(steps));
  for (int step = 1; step <= steps; ++step) {
    for (const auto& item : plain.named_parameters()) item.value().mutable_grad() = at::Tensor();
    auto [tokens, targets] = tied_net_batch(0, step);
    tied_net_loss(plain.forward(tokens), targets).backward();
    for (const auto& [impl, name] : g.names) {
      grads[static_cast<std::size_t>(step - 1)][name] = plain.named_parameters()[name].grad().clone();
    }
    const at::NoGradGuard no_grad;
    update(step);
  }
  return grads;
}

// Parameter `name`'s optimizer state `index` (exp_avg 0, exp_avg_sq 1) as a tensor.
at::Tensor engine_state(Engine& engine, torch::ShardedModule& m, const std::string& name, int index,
                        c10::IntArrayRef shape) {
  std::vector<float> s = engine.gather_optimizer_state(m.param_id(name), index);
  return ::torch::from_blob(s.data(), shape, ::torch::kFloat).clone();
}

TEST_CASE("one rank: libtorch's gradients through the engine's AdamW, bitwise at every stage") {
  ::torch::set_num_threads(1);
  if (world().world_size() != 1) return;
  constexpr int kSteps = 5;
  // Unsharded: plain libtorch's gradients, then the engine's kernel
  // (kernels/cpu/adam/adam.h, torch.optim's float32 AdamW order) on them.
  auto plain = make_tied_net();
  const PlainGroups g = plain_groups(*plain);
  std::map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> moments;
  const OptimizerHyper h = adamw_config(0).optimizer;
  const auto grads = train_plain(*plain, g, kSteps, [&](int step) {
    for (const auto* group : {&g.decay, &g.no_decay}) {
      const kernels::AdamScalars s = adam_scalars(h, kLr, group == &g.decay ? kWd : 0.0, step, 1.0f);
      for (const at::Tensor& p : *group) {
        auto& [m, v] = moments[p.unsafeGetTensorImpl()];
        if (!m.defined()) {
          m = ::torch::zeros_like(p);
          v = ::torch::zeros_like(p);
        }
        const at::Tensor grad = p.grad().contiguous();
        kernels::adam_update_reference(p.data_ptr<float>(), grad.data_ptr<float>(), m.data_ptr<float>(),
                                       v.data_ptr<float>(), static_cast<std::size_t>(p.numel()), s);
      }
    }
  });
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    TiedNetRun run(adamw_config(stage));
    auto& [model, engine, sharded, opt] = run;
    for (int step = 1; step <= kSteps; ++step) {
      run.loss(step).backward();
      if (stage < 2) {
        // .grad() is the engine's buffer; it holds what autograd left in
        // .grad() unsharded (equal values: a -0.0 lands as 0 + -0.0 = +0.0).
        for (const auto& [name, grad] : grads[static_cast<std::size_t>(step - 1)]) {
          INFO(name << " at step " << step);
          CHECK(::torch::equal(model->named_parameters()[name].grad(), grad));
        }
      }
      opt.step();
    }
    const auto state = torch::gather_state_dict(sharded);
    for (const auto& [impl, name] : g.names) {
      INFO(name);
      const at::Tensor p = plain->named_parameters()[name];
      CHECK(same_bits(state[name], p));
      CHECK(same_bits(engine_state(engine, sharded, name, 0, p.sizes()), moments[impl].first));
      CHECK(same_bits(engine_state(engine, sharded, name, 1, p.sizes()), moments[impl].second));
    }
  }
}

// Largest |a - b| and |a - b| / max|b| over two tensors.
std::pair<double, double> largest_difference(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor d = (a.to(::torch::kDouble) - b.to(::torch::kDouble)).abs();
  const double abs = d.max().item<double>();
  return {abs, abs / std::max(b.abs().max().item<double>(), 1e-30)};
}

TEST_CASE("one rank: AdamW against torch::optim::AdamW of the same libtorch") {
  ::torch::set_num_threads(1);
  if (world().world_size() != 1) return;
  constexpr int kSteps = 20;
  TiedNetRun run(adamw_config(0));
  auto& [model, engine, sharded, opt] = run;
  auto plain = make_tied_net();
  const PlainGroups g = plain_groups(*plain);
  ::torch::optim::AdamW adamw(
      {::torch::optim::OptimizerParamGroup(g.decay), ::torch::optim::OptimizerParamGroup(g.no_decay)},
      ::torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWd));
  static_cast<::torch::optim::AdamWOptions&>(adamw.param_groups()[1].options()).weight_decay(0.0);

  double worst = 0, worst_rel = 0, worst_m = 0, worst_v = 0;
  std::string worst_name;
  for (int step = 1; step <= kSteps; ++step) {
    run.train_step(step);
    auto [tokens, targets] = tied_net_batch(0, step);
    adamw.zero_grad();
    tied_net_loss(plain->forward(tokens), targets).backward();
    adamw.step();
    const auto state = torch::gather_state_dict(sharded);
    for (const auto& [impl, name] : g.names) {
      CAPTURE(name);
      CAPTURE(step);
      const at::Tensor p = plain->named_parameters()[name];
      const auto& ts =
          static_cast<const ::torch::optim::AdamWParamState&>(*adamw.state().at(c10::guts::to_string(impl)));
      const at::Tensor m = engine_state(engine, sharded, name, 0, p.sizes());
      const at::Tensor v = engine_state(engine, sharded, name, 1, p.sizes());
      if (step == 1) {
        // exp_avg = (1 - beta1) * g both ways at step 1: the same bits.
        CHECK(same_bits(state[name], p));
        CHECK(same_bits(m, ts.exp_avg()));
        CHECK(same_bits(v, ts.exp_avg_sq()));
      }
      if (step < kSteps) continue;
      const auto [abs, rel] = largest_difference(state[name], p);
      if (abs > worst) worst_name = name;
      worst = std::max(worst, abs);
      worst_rel = std::max(worst_rel, rel);
      worst_m = std::max(worst_m, largest_difference(m, ts.exp_avg()).first);
      worst_v = std::max(worst_v, largest_difference(v, ts.exp_avg_sq()).first);
      CHECK(rel < 1e-5);
    }
  }
  // libtorch 1.13's AdamW updates exp_avg as exp_avg.mul_(beta1).add_(grad,
  // 1 - beta1), two roundings; the engine as torch.optim's since 2.0,
  // exp_avg.lerp_(grad, 1 - beta1), one fused multiply-add. Equal at step
  // 1; from step 2 on exp_avg differs in its last bits, and so the update.
  MESSAGE(
      fmt::format("AdamW after {} steps vs torch::optim::AdamW of libtorch {}.{}: largest parameter difference "
                  "{:.3g} ({:.3g} of the tensor's largest value; {}), exp_avg {:.3g}, exp_avg_sq {:.3g}",
                  kSteps, TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, worst, worst_rel, worst_name, worst_m, worst_v));
}

}  // namespace
}  // namespace zeroshard::testing
