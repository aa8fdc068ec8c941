// Optimizer hyper-parameters, per-group overrides and the update entry point
// that the engine calls on each shard.
//
// The update rules are those of the PyTorch documentation:
//  - torch.optim.AdamW: decoupled weight decay p -= lr*wd*p, then Adam with
//    bias correction of both moments and eps added after the square root of
//    the bias-corrected second moment;
//  - torch.optim.Adam: L2 weight decay g += wd*p, then the same Adam update;
//  - torch.optim.SGD: g += wd*p; momentum buffer b = g on the first step,
//    b = momentum*b + (1-dampening)*g after; nesterov uses g + momentum*b.
// The element-wise kernels live in kernels/cpu (adam.h, sgd.h), each next to
// its scalar reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zeroshard {

/// Which update rule.
enum class OptimizerKind { adam, adamw, sgd };

/// Name as in torch.optim ("Adam", "AdamW", "SGD").
std::string_view optimizer_name(OptimizerKind kind);

/// Hyper-parameters shared by all parameter groups (lr and weight_decay are
/// the defaults that a group may override). Units: plain scalars.
struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;   ///< SGD only
  float dampening = 0.0f;  ///< SGD only
  bool nesterov = false;   ///< SGD only (requires momentum > 0, dampening 0)
};

/// Number of fp32 state arrays the optimizer keeps per parameter element:
/// 2 for Adam/AdamW (exp_avg, exp_avg_sq), 1 for SGD with momentum, 0 for
/// plain SGD.
int optimizer_state_count(const OptimizerHyper& hyper);

/// Names of those state arrays ("exp_avg", "exp_avg_sq", "momentum_buffer").
std::string_view optimizer_state_name(const OptimizerHyper& hyper, int index);

/// Applies one update to n contiguous elements.
///  - param: fp32 values, updated in place (the master weights);
///  - grad: fp32 gradients, multiplied by grad_scale before use (the engine
///    folds averaging over ranks/micro-batches and clipping into it);
///  - states: optimizer_state_count(hyper) arrays of n floats, zero before
///    the first step;
///  - lr, weight_decay: this parameter group's values;
///  - step: 1-based optimizer step count after this update (for bias
///    correction and SGD's first-step momentum initialisation).
/// Thread safety: touches only the given arrays. Throws nothing.
void optimizer_update(const OptimizerHyper& hyper, float lr, float weight_decay, std::int64_t step,
                      float grad_scale, float* param, const float* grad, float* const* states,
                      std::size_t n);

/// The same update computed by the scalar reference kernels; bitwise the
/// definition optimizer_update is tested against.
void optimizer_update_reference(const OptimizerHyper& hyper, float lr, float weight_decay,
                                std::int64_t step, float grad_scale, float* param,
                                const float* grad, float* const* states, std::size_t n);

}  // namespace zeroshard
