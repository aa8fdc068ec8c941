#include "optimizer/optimizer.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/adagrad.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/lion.h"
#include "kernels/cpu/sgd.h"

namespace zeroshard {

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adam: return "Adam";
    case OptimizerKind::adamw: return "AdamW";
    case OptimizerKind::sgd: return "SGD";
    case OptimizerKind::lion: return "Lion";
    case OptimizerKind::adagrad: return "Adagrad";
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
    case OptimizerKind::adamw: break;
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

template <bool kReference>
void update(const OptimizerHyper& h, double lr, double wd, std::int64_t step, float grad_scale,
            float* param, const void* grad, DType grad_dtype, float* const* states,
            void* param_copy, DType copy_dtype, std::size_t n) {
  ZS_CHECK(step >= 1, "optimizer step must be >= 1, got {}", step);
  if (n == 0) return;
  if (h.kind == OptimizerKind::sgd) {
    const auto s = sgd_scalars(h, lr, wd, step, grad_scale);
    float* buf = h.momentum != 0.0 ? states[0] : nullptr;
    if constexpr (kReference) {
      if (grad_dtype == DType::f32 && param_copy == nullptr) {
        kernels::sgd_update_reference(param, static_cast<const float*>(grad), buf, n, s);
      } else {
        kernels::sgd_update_reference(param, grad, grad_dtype, buf, param_copy, copy_dtype, n, s);
      }
    } else {
      kernels::sgd_update(param, grad, grad_dtype, buf, param_copy, copy_dtype, n, s);
    }
    return;
  }
  if (h.kind == OptimizerKind::lion) {
    const auto s = lion_scalars(h, lr, wd, step, grad_scale);
    if constexpr (kReference) {
      kernels::lion_update_reference(param, grad, grad_dtype, states[0], param_copy, copy_dtype, n, s);
    } else {
      kernels::lion_update(param, grad, grad_dtype, states[0], param_copy, copy_dtype, n, s);
    }
    return;
  }
  if (h.kind == OptimizerKind::adagrad) {
    const auto s = adagrad_scalars(h, lr, wd, step, grad_scale);
    if constexpr (kReference) {
      kernels::adagrad_update_reference(param, grad, grad_dtype, states[0], param_copy, copy_dtype, n, s);
    } else {
      kernels::adagrad_update(param, grad, grad_dtype, states[0], param_copy, copy_dtype, n, s);
    }
    return;
  }
  const auto s = adam_scalars(h, lr, wd, step, grad_scale);
  if constexpr (kReference) {
    if (grad_dtype == DType::f32 && param_copy == nullptr) {
      kernels::adam_update_reference(param, static_cast<const float*>(grad), states[0], states[1],
                                     n, s);
    } else {
      kernels::adam_update_reference(param, grad, grad_dtype, states[0], states[1], param_copy,
                                     copy_dtype, n, s);
    }
  } else {
    kernels::adam_update(param, grad, grad_dtype, states[0], states[1], param_copy, copy_dtype, n,
                         s);
  }
}

}  // namespace

void optimizer_update(const OptimizerHyper& hyper, double lr, double weight_decay,
                      std::int64_t step, float grad_scale, float* param, const float* grad, float* const* states,
                      std::size_t n) {
  update<false>(hyper, lr, weight_decay, step, grad_scale, param, grad, DType::f32, states, nullptr,
                DType::bf16, n);
}

void optimizer_update_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                std::int64_t step, float grad_scale, float* param,
                                const float* grad, float* const* states, std::size_t n) {
  update<true>(hyper, lr, weight_decay, step, grad_scale, param, grad, DType::f32, states, nullptr,
               DType::bf16, n);
}

void optimizer_update_mixed(const OptimizerHyper& hyper, double lr, double weight_decay,
                            std::int64_t step, float grad_scale, float* param, const void* grad,
                            DType grad_dtype, float* const* states, void* param_copy,
                            DType copy_dtype, std::size_t n) {
  update<false>(hyper, lr, weight_decay, step, grad_scale, param, grad, grad_dtype, states,
                param_copy, copy_dtype, n);
}

void optimizer_update_mixed_reference(const OptimizerHyper& hyper, double lr, double weight_decay,
                                      std::int64_t step, float grad_scale, float* param,
                                      const void* grad, DType grad_dtype, float* const* states,
                                      void* param_copy, DType copy_dtype, std::size_t n) {
  update<true>(hyper, lr, weight_decay, step, grad_scale, param, grad, grad_dtype, states,
               param_copy, copy_dtype, n);
}

}  // namespace zeroshard
