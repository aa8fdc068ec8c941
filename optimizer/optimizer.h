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
/// the defaults that a group may override). Units: plain scalars. Held in
/// double, as the Python floats torch.optim is given: every value derived
/// from them (1 - beta1, lr / (1 - beta1^step), ...) is computed in double
/// and rounded to float once where it meets a float32 tensor, as torch does
/// (adam_scalars, sgd_scalars).
struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;  ///< Adam: rounded to float once (torch adds it to a float32 tensor)
  double weight_decay = 0.0;
  double momentum = 0.0;   ///< SGD only
  double dampening = 0.0;  ///< SGD only
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
/// once) from this group's lr and weight_decay and h's betas and eps, all
/// doubles as torch's Python floats: bitwise torch parity for the values a
/// config gives (tests/runtime/test_torch_parity_engine.cpp). What
/// optimizer_update passes to kernels/cpu/adam.h and the engine's CUDA path
/// to kernels/cuda/adam.h. Throws InvariantError when step < 1. Pure.
kernels::AdamScalars adam_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                  std::int64_t step, float grad_scale);
/// The per-call scalars of an SGD update at 1-based `step` (first_step
/// when step == 1), as torch.optim.SGD rounds them: f(lr), f(momentum),
/// f(1 - dampening) (computed in double), f(weight_decay), f() rounding a
/// double to float once. Pure.
kernels::SgdScalars sgd_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                std::int64_t step, float grad_scale);

/// Applies one update to n contiguous elements.
///  - param: fp32 values, updated in place (the master weights);
///  - grad: fp32 gradients, multiplied by grad_scale before use (the engine
///    folds averaging over ranks/micro-batches and clipping into it);
///  - states: optimizer_state_count(hyper) arrays of n floats, zero before
///    the first step;
///  - lr, weight_decay: this parameter group's values (doubles, see
///    adam_scalars / sgd_scalars for where they are rounded);
///  - step: 1-based optimizer step count after this update (for bias
///    correction and SGD's first-step momentum initialisation).
/// The work is vectorised and split over the kernel thread pool
/// (kernels::num_threads(), ZS_NUM_THREADS); the result is bitwise that of
/// optimizer_update_reference for any thread count.
/// Thread safety: touches only the given arrays. Throws InvariantError if
/// step < 1, and ConfigError on first use if ZS_NUM_THREADS is malformed.
void optimizer_update(const OptimizerHyper& hyper, double lr, double weight_decay,
                      std::int64_t step, float grad_scale, float* param, const float* grad,
                      float* const* states, std::size_t n);

/// The same update computed by the scalar reference kernels; bitwise the
/// definition optimizer_update is tested against.
void optimizer_update_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                std::int64_t step, float grad_scale, float* param,
                                const float* grad, float* const* states, std::size_t n);

/// Mixed-precision form of optimizer_update, one fused pass: grad holds n
/// elements of grad_dtype (f32, bf16 or f16, converted exactly to fp32);
/// when param_copy is not null it receives the updated fp32 parameters
/// rounded to nearest even in copy_dtype (bf16 or f16), e.g. the model's
/// compute copy of this shard. Other arguments as optimizer_update; bitwise
/// equal to optimizer_update_mixed_reference. Throws InvariantError on an
/// unsupported dtype or step < 1.
void optimizer_update_mixed(const OptimizerHyper& hyper, double lr, double weight_decay,
                            std::int64_t step, float grad_scale, float* param, const void* grad,
                            DType grad_dtype, float* const* states, void* param_copy,
                            DType copy_dtype, std::size_t n);

/// The same update computed by the scalar reference kernels.
void optimizer_update_mixed_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                      std::int64_t step, float grad_scale, float* param,
                                      const void* grad, DType grad_dtype, float* const* states,
                                      void* param_copy, DType copy_dtype, std::size_t n);

}  // namespace zeroshard
