#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/adam/adam.h"

#include <cmath>

#include "core/error.h"

#include "kernels/cpu/adam/adam_element.h"
#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

AdamScalars make_adam_scalars(double lr, double beta1, double beta2, double eps,
                              double weight_decay, long long step, bool decoupled,
                              float grad_scale) {
  ZS_CHECK(step >= 1, "make_adam_scalars: step must be >= 1, got {}", step);
  AdamScalars s;
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.lerp_small = std::abs(s.one_minus_beta1) < 0.5f;
  s.lerp_coeff = s.lerp_small ? s.one_minus_beta1 : s.one_minus_beta1 - 1.0f;
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.weight_decay = static_cast<float>(weight_decay);
  s.decay_factor = static_cast<float>(1.0 - lr * weight_decay);
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  s.neg_step_size = static_cast<float>(-(lr / bc1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.grad_scale = grad_scale;
  s.decoupled = decoupled;
  return s;
}

void adam_update_reference(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                           std::size_t n, const AdamScalars& s) {
  adam_update_reference(param, grad, DType::f32, exp_avg, exp_avg_sq, nullptr, DType::bf16, n, s);
}

void adam_update_reference(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                           float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                           const AdamScalars& s) {
  reference_update(param, grad, grad_dtype, param_copy, copy_dtype, n, [&](std::size_t i, float g) {
    detail::adam_element(param[i], g, exp_avg[i], exp_avg_sq[i], s);
  });
}

}  // namespace zeroshard::kernels
