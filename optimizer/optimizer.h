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
// its scalar reference; optimizer_update dispatches to their vectorised,
// multi-threaded forms (Highway + kernels/cpu/thread_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/sgd.h"

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

/// The per-call scalars of an Adam/AdamW update at 1-based `step`, derived
/// by kernels::make_adam_scalars as torch does (1 - beta, 1 - lr*wd,
/// lr / (1 - beta1^step), sqrt(1 - beta2^step) in double, rounded to float
/// once). The hyper-parameters here are floats, so they enter as the doubles
/// float(beta) etc.: bitwise torch parity holds for torch given those same
/// values (e.g. betas=(float32(0.9), float32(0.999)) as Python floats); what optimizer_update passes to kernels/cpu/adam.h and the
/// engine's CUDA path to kernels/cuda/adam.h.
kernels::AdamScalars adam_scalars(const OptimizerHyper& h, float lr, float weight_decay, std::int64_t step,
                                  float grad_scale);
/// The per-call scalars of an SGD update at 1-based `step` (first_step
/// when step == 1).
kernels::SgdScalars sgd_scalars(const OptimizerHyper& h, float lr, float weight_decay, std::int64_t step,
                                float grad_scale);

/// Applies one update to n contiguous elements.
///  - param: fp32 values, updated in place (the master weights);
///  - grad: fp32 gradients, multiplied by grad_scale before use (the engine
///    folds averaging over ranks/micro-batches and clipping into it);
///  - states: optimizer_state_count(hyper) arrays of n floats, zero before
///    the first step;
///  - lr, weight_decay: this parameter group's values;
///  - step: 1-based optimizer step count after this update (for bias
///    correction and SGD's first-step momentum initialisation).
/// The work is vectorised and split over the kernel thread pool
/// (kernels::num_threads(), ZS_NUM_THREADS); the result is bitwise that of
/// optimizer_update_reference for any thread count.
/// Thread safety: touches only the given arrays. Throws InvariantError if
/// step < 1, and ConfigError on first use if ZS_NUM_THREADS is malformed.
void optimizer_update(const OptimizerHyper& hyper, float lr, float weight_decay, std::int64_t step,
                      float grad_scale, float* param, const float* grad, float* const* states,
                      std::size_t n);

/// The same update computed by the scalar reference kernels; bitwise the
/// definition optimizer_update is tested against.
void optimizer_update_reference(const OptimizerHyper& hyper, float lr, float weight_decay,
                                std::int64_t step, float grad_scale, float* param,
                                const float* grad, float* const* states, std::size_t n);

/// Mixed-precision form of optimizer_update, one fused pass: grad holds n
/// elements of grad_dtype (f32, bf16 or f16, converted exactly to fp32);
/// when param_copy is not null it receives the updated fp32 parameters
/// rounded to nearest even in copy_dtype (bf16 or f16), e.g. the model's
/// compute copy of this shard. Other arguments as optimizer_update; bitwise
/// equal to optimizer_update_mixed_reference. Throws InvariantError on an
/// unsupported dtype or step < 1.
void optimizer_update_mixed(const OptimizerHyper& hyper, float lr, float weight_decay,
                            std::int64_t step, float grad_scale, float* param, const void* grad,
                            DType grad_dtype, float* const* states, void* param_copy,
                            DType copy_dtype, std::size_t n);

/// The same update computed by the scalar reference kernels.
void optimizer_update_mixed_reference(const OptimizerHyper& hyper, float lr, float weight_decay,
                                      std::int64_t step, float grad_scale, float* param,
                                      const void* grad, DType grad_dtype, float* const* states,
                                      void* param_copy, DType copy_dtype, std::size_t n);

}  // namespace zeroshard
