// zeroshard::torch::Optimizer (libtorch/optimizer.h).
#include "libtorch/optimizer.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "core/error.h"
#include "libtorch/shard_state.h"
#include "optimizer/optimizer.h"

namespace zeroshard::torch {

namespace {

// torch::optim's options for the config's optimizer with this lr and weight decay.
std::unique_ptr<::torch::optim::OptimizerOptions> options_for(const OptimizerHyper& h, double lr, double weight_decay) {
  switch (h.kind) {
    case OptimizerKind::adam:
      return std::make_unique<::torch::optim::AdamOptions>(
          ::torch::optim::AdamOptions(lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(weight_decay));
    case OptimizerKind::sgd:
      return std::make_unique<::torch::optim::SGDOptions>(::torch::optim::SGDOptions(lr)
                                                              .momentum(h.momentum)
                                                              .dampening(h.dampening)
                                                              .weight_decay(weight_decay)
                                                              .nesterov(h.nesterov));
    case OptimizerKind::adagrad:
      return std::make_unique<::torch::optim::AdagradOptions>(
          ::torch::optim::AdagradOptions(lr)
              .lr_decay(h.lr_decay)
              .weight_decay(weight_decay)
              .initial_accumulator_value(h.initial_accumulator_value)
              .eps(h.eps));
    case OptimizerKind::adamw:
    case OptimizerKind::lion:
    case OptimizerKind::muon: break;  // libtorch has no Lion or Muon options: AdamW's carry the group's lr
  }
  return std::make_unique<::torch::optim::AdamWOptions>(
      ::torch::optim::AdamWOptions(lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(weight_decay));
}

std::unique_ptr<::torch::optim::OptimizerOptions> defaults_of(ShardedModule& m) {
  const OptimizerHyper& h = m.engine().config().optimizer;
  return options_for(h, h.lr, h.weight_decay);
}

}  // namespace

Optimizer::Optimizer(ShardedModule& module)
    : ::torch::optim::Optimizer(std::vector<::torch::optim::OptimizerParamGroup>{}, defaults_of(module)),
      s_(module.shared_state()) {
  const ShardState& s = *s_;
  std::map<GroupId, std::vector<const ParamEntry*>> by_group;
  for (const auto& e : s.params()) by_group[e.group].push_back(&e);
  const OptimizerHyper& h = module.engine().config().optimizer;
  for (auto& [g, entries] : by_group) {
    std::sort(entries.begin(), entries.end(), [](const ParamEntry* a, const ParamEntry* b) { return a->id < b->id; });
    std::vector<at::Tensor> tensors;
    for (const ParamEntry* e : entries) tensors.push_back(e->param);
    // Groups other than the default (and Muon's) are shard()'s "no_decay" and "frozen".
    const double weight_decay = g == 0 ? h.weight_decay : g == module.engine().muon_group() ? h.muon.weight_decay : 0.0;
    add_param_group(
        ::torch::optim::OptimizerParamGroup(tensors, options_for(h, module.engine().current_lr(g), weight_decay)));
    groups_.push_back(g);
  }
  publish_lr();
}

void Optimizer::publish_lr() {
  published_lr_.clear();
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const double lr = s_->engine().current_lr(groups_[i]);
    param_groups_[i].options().set_lr(lr);
    published_lr_.push_back(lr);
  }
}

void Optimizer::check_groups() const {
  if (param_groups_.size() != groups_.size()) {
    throw InvariantError(
        fmt::format("zeroshard::torch::Optimizer: param_groups() has {} groups, the engine {}: the "
                    "engine's groups are shard()'s, parameters cannot be added",
                    param_groups_.size(), groups_.size()));
  }
  std::size_t params = 0;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    params += param_groups_[i].params().size();
    if (param_groups_[i].options().get_lr() != published_lr_[i]) {
      throw InvariantError(fmt::format(
          "zeroshard::torch::Optimizer: param_groups()[{}]'s lr was set to {} (the engine's is {}): the ds_config's "
          "optimizer.params.lr and scheduler decide the learning rate",
          i, param_groups_[i].options().get_lr(), published_lr_[i]));
    }
  }
  if (params != s_->params().size()) {
    throw InvariantError(
        fmt::format("zeroshard::torch::Optimizer: param_groups() hold {} tensors, the sharded module "
                    "{}: parameters cannot be added or removed",
                    params, s_->params().size()));
  }
}

at::Tensor Optimizer::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) loss = closure();
  check_groups();
  s_->check_idle("Optimizer::step()");
  last_ = s_->engine().step();
  s_->sync_micro_batch();
  publish_lr();
  return loss;
}

void Optimizer::zero_grad(bool /*set_to_none*/) {
  ShardState& s = *s_;
  s.check_idle("Optimizer::zero_grad()");
  if (s.gradients_pending()) {
    throw InvariantError(
        "zeroshard::torch::Optimizer: zero_grad() after a backward and before step(): the engine "
        "holds this micro-batch's gradients (stages 2/3 reduced them during the backward); call "
        "step() first, which also zeroes them");
  }
}

void Optimizer::save(::torch::serialize::OutputArchive& /*archive*/) const {
  throw InvariantError(
      "zeroshard::torch::Optimizer: the optimizer state is the engine's, sharded; save it with "
      "ShardedModule::save_checkpoint");
}

void Optimizer::load(::torch::serialize::InputArchive& /*archive*/) {
  throw InvariantError(
      "zeroshard::torch::Optimizer: the optimizer state is the engine's, sharded; load it with "
      "ShardedModule::load_checkpoint");
}

}  // namespace zeroshard::torch
