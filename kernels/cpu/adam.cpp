#include "kernels/cpu/adam.h"

#include <cmath>

namespace zeroshard::kernels {

namespace {

// One element of the update; shared by the reference and the kernel so the
// two cannot drift apart. The kernel differs only in how the loop is
// compiled (restrict pointers, vectorisation), never in the arithmetic.
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

void adam_update(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                 float* __restrict exp_avg_sq, std::size_t n, const AdamScalars& s) {
  const AdamScalars c = s;
  const float step_size = c.lr / c.bias_correction1;
  const float sqrt_bc2 = std::sqrt(c.bias_correction2);
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) {
    adam_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], c, step_size, sqrt_bc2);
  }
}

}  // namespace zeroshard::kernels
