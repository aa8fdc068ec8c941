// Optimizer hyper-parameters, per-group overrides and the update entry point
// that the engine calls on each shard.
//
// The update rules are those of the PyTorch documentation:
//  - torch.optim.AdamW: decoupled weight decay p -= lr*wd*p, then Adam with
//    bias correction of both moments and eps added after the square root of
//    the bias-corrected second moment;
//  - torch.optim.Adam: L2 weight decay g += wd*p, then the same Adam update;
//  - torch.optim.SGD: g += wd*p; momentum buffer b = g on the first step,
//    b = momentum*b + (1-dampening)*g after; nesterov uses g + momentum*b;
//  - Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
//    Algorithms"; DeepSpeed's FusedLion / DeepSpeedCPULion): decoupled
//    decay p *= 1 - lr*wd, p -= lr*sign(beta1*m + (1-beta1)*g),
//    m = beta2*m + (1-beta2)*g;
//  - torch.optim.Adagrad: g += wd*p, sum += g*g,
//    p -= clr*g / (sqrt(sum) + eps), clr = lr / (1 + (step-1)*lr_decay);
//  - Muon (Jordan et al. 2024; torch.optim.Muon): the 2-D matrices that
//    MuonHyper::params names get the whole-matrix update of
//    kernels/cpu/muon (runtime/update/muon_step.h), every other parameter
//    AdamW with the OptimizerHyper's lr, betas, eps and weight_decay
//    (optimizer.params.adamw).
// The element-wise kernels live in kernels/cpu (adam.h, sgd.h, lion.h,
// adagrad.h), each next to its scalar reference; optimizer_update dispatches to their vectorised,
// multi-threaded forms (Highway + kernels/cpu/thread_pool.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/muon/muon_update.h"
#include "kernels/cpu/muon/newton_schulz.h"
#include "kernels/cpu/update/adagrad.h"
#include "kernels/cpu/update/lion.h"
#include "kernels/cpu/update/sgd.h"
#include "optimizer/state_format.h"

namespace zeroshard {

/// Which update rule.
enum class OptimizerKind { adam, adamw, sgd, lion, adagrad, muon };

/// Name as in torch.optim and DeepSpeed's optimizer.type ("Adam", "AdamW",
/// "SGD", "Lion", "Adagrad", "Muon").
/// Thread safety: pure.
std::string_view optimizer_name(OptimizerKind kind);

/// Muon's own values (optimizer.type "Muon"; names and defaults of
/// torch.optim.Muon). Plain value.
struct MuonHyper {
  double lr = 1e-3;            ///< optimizer.params.lr: the Muon matrices' learning rate
  double weight_decay = 0.1;   ///< optimizer.params.weight_decay: decoupled, p *= 1 - lr * wd
  double momentum = 0.95;      ///< beta of momentum.lerp_(grad, 1 - beta), in [0, 1)
  bool nesterov = true;        ///< update = grad.lerp(momentum, beta), else the momentum
  int ns_steps = 5;            ///< Newton-Schulz iterations ([Note: Newton-Schulz iteration])
  kernels::MuonScale scale = kernels::MuonScale::shape;  ///< adjust_lr_fn: "original" (shape) / "match_rms_adamw"
  kernels::NewtonSchulzPrecision precision = kernels::NewtonSchulzPrecision::f32;  ///< ns_dtype
  /// optimizer.params.muon_params: fnmatch(3) patterns of the parameter
  /// names Muon updates; every other parameter trains with AdamW.
  std::vector<std::string> params;
};

/// Hyper-parameters shared by all parameter groups (lr and weight_decay are
/// the defaults that a group may override). Units: plain scalars. Held in
/// double, as the Python floats torch.optim is given: every value derived
/// from them (1 - beta1, lr / (1 - beta1^step), ...) is computed in double
/// and rounded to float once where it meets a float32 tensor, as torch does
/// (adam_scalars, sgd_scalars, lion_scalars, adagrad_scalars).
struct OptimizerHyper {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double beta1 = 0.9;   ///< Adam, Lion
  double beta2 = 0.999; ///< Adam, Lion
  double eps = 1e-8;  ///< Adam, Adagrad: rounded to float once (torch adds it to a float32 tensor)
  double weight_decay = 0.0;
  double momentum = 0.0;   ///< SGD only
  double dampening = 0.0;  ///< SGD only
  bool nesterov = false;   ///< SGD only (requires momentum > 0, dampening 0)
  double lr_decay = 0.0;   ///< Adagrad only: clr = lr / (1 + (step - 1) * lr_decay)
  double initial_accumulator_value = 0.0;  ///< Adagrad only: the state sum before step 1
  /// Muon only: its own values; lr, betas, eps and weight_decay above are
  /// then those of the AdamW parameters (optimizer.params.adamw).
  MuonHyper muon;
  /// How the states are stored (optimizer/state_format.h): fp32 unless
  /// optimizer.type is AdamW8bit / Adam8bit (8-bit, Adam and AdamW only)
  /// or optimizer.params.state_dtype says bf16.
  StateFormat states;
};

/// The optimizer.type a configuration names: optimizer_name(kind), with
/// "8bit" appended for 8-bit states ("AdamW8bit", "Adam8bit", as
/// bitsandbytes names them). Pure.
std::string optimizer_type_name(const OptimizerHyper& hyper);

/// Number of fp32 state arrays the optimizer keeps per parameter element:
/// 2 for Adam/AdamW (exp_avg, exp_avg_sq), 1 for SGD with momentum, 0 for
/// plain SGD, 1 for Lion (exp_avg) and 1 for Adagrad (sum); 2 for Muon
/// (AdamW's two; at Muon elements exp_avg holds Muon's momentum_buffer and
/// exp_avg_sq stays 0). Pure.
int optimizer_state_count(const OptimizerHyper& hyper);

/// Names of those state arrays, torch's state keys: "exp_avg",
/// "exp_avg_sq", "momentum_buffer", Lion's "exp_avg", Adagrad's "sum".
/// Throws InvariantError when index is out of range. Pure.
std::string_view optimizer_state_name(const OptimizerHyper& hyper, int index);

/// The per-call scalars of an Adam/AdamW update at 1-based `step`, derived
/// by kernels::make_adam_scalars as torch does (1 - beta, 1 - lr*wd,
/// lr / (1 - beta1^step), sqrt(1 - beta2^step) in double, rounded to float
/// once) from this group's lr and weight_decay and h's betas and eps, all
/// doubles as torch's Python floats: bitwise torch parity for the values a
/// config gives (tests/runtime/engine/test_torch_parity_engine.cpp). What
/// optimizer_update passes to kernels/cpu/adam/adam.h and the engine's CUDA path
/// to kernels/cuda/optimizers/adam.h. Throws InvariantError when step < 1. Pure.
kernels::AdamScalars adam_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                  std::int64_t step, float grad_scale);
/// The per-call scalars of an SGD update at 1-based `step` (first_step
/// when step == 1), as torch.optim.SGD rounds them: f(lr), f(momentum),
/// f(1 - dampening) (computed in double), f(weight_decay), f() rounding a
/// double to float once. Pure.
kernels::SgdScalars sgd_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                std::int64_t step, float grad_scale);
/// The per-call scalars of a Lion update (kernels/cpu/update/lion.h): f(lr),
/// f(beta1), f(beta2), f(weight_decay) and f(1 - lr * weight_decay) computed
/// in double, f() rounding a double to float once. Lion has no step
/// dependence; step is checked (InvariantError when < 1) for symmetry with
/// the others. Pure.
kernels::LionScalars lion_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                  std::int64_t step, float grad_scale);
/// The per-call scalars of an Adagrad update at 1-based `step`, derived by
/// kernels::make_adagrad_scalars as torch.optim.Adagrad does (clr in
/// double, -clr, eps, weight_decay, initial_accumulator_value rounded to
/// float once; first_step when step == 1). Throws InvariantError when
/// step < 1. Pure.
kernels::AdagradScalars adagrad_scalars(const OptimizerHyper& h, double lr, double weight_decay,
                                        std::int64_t step, float grad_scale);

/// Applies one update to n contiguous elements.
///  - param: fp32 values, updated in place (the master weights);
///  - grad: fp32 gradients, multiplied by grad_scale before use (the engine
///    folds averaging over ranks/micro-batches and clipping into it);
///  - states: optimizer_state_count(hyper) arrays of n floats, zero before
///    the first step;
///  - lr, weight_decay: this parameter group's values (doubles, see
///    adam_scalars / sgd_scalars / lion_scalars / adagrad_scalars for where
///    they are rounded);
///  - step: 1-based optimizer step count after this update (for bias
///    correction, SGD's first-step momentum initialisation, Adagrad's
///    lr_decay and initial accumulator).
/// The work is vectorised and split over the kernel thread pool
/// (kernels::num_threads(), ZS_NUM_THREADS); the result is bitwise that of
/// optimizer_update_reference for any thread count.
/// Thread safety: touches only the given arrays. Throws InvariantError if
/// step < 1, and ConfigError on first use if ZS_NUM_THREADS is malformed.
void optimizer_update(const OptimizerHyper& hyper, double lr, double weight_decay,
                      std::int64_t step, float grad_scale, float* param, const float* grad,
                      float* const* states, std::size_t n);

/// The AdamW that a Muon optimizer runs on its other parameters (kind
/// adamw, h's lr, betas, eps, weight_decay); h itself for other kinds. Pure.
OptimizerHyper element_wise_hyper(const OptimizerHyper& h);

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
