// zeroshard::torch::Optimizer: torch::optim's interface over the Engine's
// optimizer, so that a libtorch loop written for torch::optim::AdamW
// changes one line. The update itself is the engine's (the ds_config's
// optimizer, learning-rate schedule, gradient clipping, loss scaling,
// fused kernels in torch.optim's float32 order; optimizer/optimizer.h),
// over each rank's shard.
#pragma once

#include <torch/optim/optimizer.h>

#include "libtorch/shard.h"
#include "runtime/engine/engine.h"

namespace zeroshard::torch {

/// A torch::optim::Optimizer whose step() is Engine::step(). Its
/// param_groups() are the engine's parameter groups (the defaults, then
/// "no_decay" and "frozen" as shard() made them) with the module's
/// parameters and options of the ds_config's optimizer type
/// (torch::optim::AdamWOptions for AdamW and Lion, AdamOptions,
/// SGDOptions, AdagradOptions), whose lr is the schedule's value for the
/// next step. state() stays empty: the engine holds the optimizer state,
/// sharded. It shares the ShardedModule's state (the module may be moved
/// or destroyed first; the engine must outlive both). Thread safety: as
/// the Engine.
class Optimizer : public ::torch::optim::Optimizer {
 public:
  explicit Optimizer(ShardedModule& module);

  /// Runs `closure` (forward and backward) if given, then Engine::step():
  /// at the accumulation boundary the reduction, clipping and update; in
  /// between, the end of a micro-batch (call it after every backward).
  /// Returns the closure's loss (undefined without a closure). Throws
  /// InvariantError when param_groups() were changed (groups or tensors
  /// added, an lr set: the ds_config's optimizer and scheduler decide),
  /// during a forward or backward, and what Engine::step() throws.
  at::Tensor step(LossClosure closure = nullptr) override;

  /// A no-op when no backward ran since the last step() (the engine zeroes
  /// the gradients at every step); torch's optimizer would zero .grad()
  /// here, which in zeroshard is the engine's buffer (stages 0/1) or
  /// already handed to the reduction (stages 2/3). Throws InvariantError
  /// after a backward and before step(): that micro-batch's gradients are
  /// the engine's (stages 2/3 reduce them during the backward). The flag
  /// is accepted for torch's signature; both values behave alike.
  void zero_grad(bool set_to_none = true);

  /// What the last step() did (the engine's StepResult).
  const StepResult& last_step() const { return last_; }

  /// The engine's checkpoints hold the optimizer state: refuse torch's
  /// archives with an InvariantError naming ShardedModule::save_checkpoint.
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  void check_groups() const;
  void publish_lr();

  std::shared_ptr<ShardState> s_;
  std::vector<GroupId> groups_;       ///< the engine's group of each param_groups() entry
  std::vector<double> published_lr_;  ///< the lr each group's options were given
  StepResult last_;
};

}  // namespace zeroshard::torch
