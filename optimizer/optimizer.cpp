#include "optimizer/optimizer.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/update/adagrad.h"
#include "kernels/cpu/update/lion.h"
#include "kernels/cpu/update/sgd.h"

namespace zeroshard {

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adam: return "Adam";
    case OptimizerKind::adamw: return "AdamW";
    case OptimizerKind::sgd: return "SGD";
    case OptimizerKind::lion: return "Lion";
    case OptimizerKind::adagrad: return "Adagrad";
    case OptimizerKind::muon: return "Muon";
  }
  return "?";
}

std::string optimizer_type_name(const OptimizerHyper& hyper) {
  std::string name(optimizer_name(hyper.kind));
  if (hyper.states.dtype == StateDtype::q8) name += "8bit";
  return name;
}

int optimizer_state_count(const OptimizerHyper& hyper) {
  switch (hyper.kind) {
    case OptimizerKind::sgd: return hyper.momentum != 0.0 ? 1 : 0;
    case OptimizerKind::lion:
    case OptimizerKind::adagrad: return 1;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
    case OptimizerKind::muon: break;
  }
  return 2;
}

std::string_view optimizer_state_name(const OptimizerHyper& hyper, int index) {
  ZS_CHECK(index >= 0 && index < optimizer_state_count(hyper), "optimizer state index {} out of range",
           index);
  if (hyper.kind == OptimizerKind::sgd) return "momentum_buffer";
  if (hyper.kind == OptimizerKind::adagrad) return "sum";
  return index == 0 ? "exp_avg" : "exp_avg_sq";
}

OptimizerHyper element_wise_hyper(const OptimizerHyper& h) {
  OptimizerHyper out = h;
  if (h.kind == OptimizerKind::muon) out.kind = OptimizerKind::adamw;
  return out;
}

kernels::AdamScalars adam_scalars(const OptimizerHyper& h, double lr, double wd, std::int64_t step,
                                  float grad_scale) {
  return kernels::make_adam_scalars(lr, h.beta1, h.beta2, h.eps, wd, step,
                                    h.kind == OptimizerKind::adamw, grad_scale);
}

kernels::SgdScalars sgd_scalars(const OptimizerHyper& h, double lr, double wd, std::int64_t step,
                                float grad_scale) {
  // Each Python float rounded once where it meets the float32 tensor:
  // param.add_(grad, alpha=-lr), buf.mul_(momentum),
  // buf.add_(grad, alpha=1 - dampening), grad.add(param, alpha=weight_decay).
  kernels::SgdScalars s;
  s.lr = static_cast<float>(lr);
  s.momentum = static_cast<float>(h.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - h.dampening);
  s.weight_decay = static_cast<float>(wd);
  s.grad_scale = grad_scale;
  s.nesterov = h.nesterov;
  s.first_step = step == 1;
  return s;
}

kernels::LionScalars lion_scalars(const OptimizerHyper& h, double lr, double wd, std::int64_t step,
                                  float grad_scale) {
  ZS_CHECK(step >= 1, "lion_scalars: step must be >= 1, got {}", step);
  // lion-pytorch: p.data.mul_(1. - lr * wd), p.add_(sign, alpha=-lr); the
  // betas as DeepSpeed's kernels take them (floats; 1 - beta in float).
  kernels::LionScalars s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.weight_decay = static_cast<float>(wd);
  s.decay_factor = static_cast<float>(1.0 - lr * wd);
  s.grad_scale = grad_scale;
  return s;
}

kernels::AdagradScalars adagrad_scalars(const OptimizerHyper& h, double lr, double wd,
                                        std::int64_t step, float grad_scale) {
  return kernels::make_adagrad_scalars(lr, h.lr_decay, h.eps, wd, h.initial_accumulator_value, step,
                                       grad_scale);
}

namespace {

// The arrays of one update (optimizer_update_mixed's arguments).
struct UpdateArgs {
  float* param;
  const void* grad;
  DType grad_dtype;
  void* copy;
  DType copy_dtype;
  std::size_t n;
};

// One update rule's kernel pair over (param, grad, grad_dtype, its states,
// copy, copy_dtype, n, scalars): the vectorised kernel and its scalar
// reference (kernels/cpu/adam/*.h, kernels/cpu/update/*.h; the overloads of
// that shape).
template <class Scalars, class... States>
struct RuleKernels {
  using Fn = void (*)(float*, const void*, DType, States..., void*, DType, std::size_t, const Scalars&);
  Fn kernel;
  Fn reference;
};

template <class Scalars, class... States>
void apply(const RuleKernels<Scalars, States...>& k, bool reference, const Scalars& s, const UpdateArgs& a,
           States... states) {
  (reference ? k.reference : k.kernel)(a.param, a.grad, a.grad_dtype, states..., a.copy, a.copy_dtype, a.n, s);
}

// Every kind through one dispatch: its scalars (rounded as torch rounds
// them) and its kernel or reference.
void update(bool reference, const OptimizerHyper& h, double lr, double wd, std::int64_t step, float grad_scale,
            const UpdateArgs& a, float* const* states) {
  ZS_CHECK(step >= 1, "optimizer step must be >= 1, got {}", step);
  if (a.n == 0) return;
  switch (h.kind) {
    case OptimizerKind::sgd:
      return apply(RuleKernels<kernels::SgdScalars, float*>{kernels::sgd_update, kernels::sgd_update_reference},
                   reference, sgd_scalars(h, lr, wd, step, grad_scale), a, h.momentum != 0.0 ? states[0] : nullptr);
    case OptimizerKind::lion:
      return apply(RuleKernels<kernels::LionScalars, float*>{kernels::lion_update, kernels::lion_update_reference},
                   reference, lion_scalars(h, lr, wd, step, grad_scale), a, states[0]);
    case OptimizerKind::adagrad:
      return apply(
          RuleKernels<kernels::AdagradScalars, float*>{kernels::adagrad_update, kernels::adagrad_update_reference},
          reference, adagrad_scalars(h, lr, wd, step, grad_scale), a, states[0]);
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return apply(
          RuleKernels<kernels::AdamScalars, float*, float*>{kernels::adam_update, kernels::adam_update_reference},
          reference, adam_scalars(h, lr, wd, step, grad_scale), a, states[0], states[1]);
    case OptimizerKind::muon:
      throw InvariantError(
          "optimizer update: Muon's update is whole-matrix (runtime/update/muon_step.h); element-wise updates "
          "take element_wise_hyper()");
  }
  throw InvariantError(fmt::format("optimizer update: unknown optimizer kind {}", static_cast<int>(h.kind)));
}

}  // namespace

void optimizer_update(const OptimizerHyper& hyper, double lr, double weight_decay,
                      std::int64_t step, float grad_scale, float* param, const float* grad, float* const* states,
                      std::size_t n) {
  update(false, hyper, lr, weight_decay, step, grad_scale, {param, grad, DType::f32, nullptr, DType::bf16, n}, states);
}

void optimizer_update_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                std::int64_t step, float grad_scale, float* param,
                                const float* grad, float* const* states, std::size_t n) {
  update(true, hyper, lr, weight_decay, step, grad_scale, {param, grad, DType::f32, nullptr, DType::bf16, n}, states);
}

void optimizer_update_mixed(const OptimizerHyper& hyper, double lr, double weight_decay,
                            std::int64_t step, float grad_scale, float* param, const void* grad,
                            DType grad_dtype, float* const* states, void* param_copy,
                            DType copy_dtype, std::size_t n) {
  update(false, hyper, lr, weight_decay, step, grad_scale, {param, grad, grad_dtype, param_copy, copy_dtype, n},
         states);
}

void optimizer_update_mixed_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                      std::int64_t step, float grad_scale, float* param,
                                      const void* grad, DType grad_dtype, float* const* states,
                                      void* param_copy, DType copy_dtype, std::size_t n) {
  update(true, hyper, lr, weight_decay, step, grad_scale, {param, grad, grad_dtype, param_copy, copy_dtype, n},
         states);
}

}  // namespace zeroshard
