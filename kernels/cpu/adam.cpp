#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/adam.h"

#include <cmath>

#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

namespace {

// One element of the update: the definition. The vector kernel
// (adam_simd.cpp) performs the same operations in the same order per lane.
inline void adam_element(float& p, float graw, float& m, float& v, const AdamScalars& s,
                         float step_size, float sqrt_bc2) {
  float g = graw * s.grad_scale;
  if (s.decoupled) {
    p = p * s.decay_factor;
  } else {
    g = g + s.weight_decay * p;
  }
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  const float denom = std::sqrt(v) / sqrt_bc2 + s.eps;
  p = p - step_size * (m / denom);
}

}  // namespace

void adam_update_reference(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                           std::size_t n, const AdamScalars& s) {
  const float step_size = s.lr / s.bias_correction1;
  const float sqrt_bc2 = std::sqrt(s.bias_correction2);
  for (std::size_t i = 0; i < n; ++i) {
    adam_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s, step_size, sqrt_bc2);
  }
}

void adam_update_reference(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                           float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                           const AdamScalars& s) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  const float step_size = s.lr / s.bias_correction1;
  const float sqrt_bc2 = std::sqrt(s.bias_correction2);
  for (std::size_t i = 0; i < n; ++i) {
    adam_element(param[i], load_as_float(grad, grad_dtype, i), exp_avg[i], exp_avg_sq[i], s,
                 step_size, sqrt_bc2);
    if (param_copy != nullptr) store_from_float(param_copy, copy_dtype, i, param[i]);
  }
}

}  // namespace zeroshard::kernels
