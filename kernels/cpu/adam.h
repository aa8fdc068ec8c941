// Fused Adam / AdamW update over contiguous fp32 arrays, next to its scalar
// reference.
//
// For each element, with g = grad * grad_scale (PyTorch torch.optim.Adam and
// torch.optim.AdamW documentation, "foreach=False" algorithm):
//   AdamW: p = p * (1 - lr * weight_decay)          (decoupled decay, torch's mul_)
//   Adam:  g = g + weight_decay * p                 (L2 decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   p = p - (lr / bias_correction1) * m / (sqrt(v) / sqrt(bias_correction2) + eps)
// (AdamW's factor 1 - lr*weight_decay is computed in double and rounded to
// float once per step, as torch does with a Python float scalar.)
// where bias_correction{1,2} = 1 - beta{1,2}^step.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// Per-step scalars of an Adam/AdamW update (already bias-corrected).
struct AdamScalars {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;
  float decay_factor = 1;      ///< AdamW: (float)(1 - (double)lr * weight_decay)
  float bias_correction1 = 1;  ///< 1 - beta1^step
  float bias_correction2 = 1;  ///< 1 - beta2^step
  float grad_scale = 1;        ///< multiplies every gradient element first
  bool decoupled = true;       ///< true: AdamW, false: Adam (L2)
};

/// Scalar reference: one element at a time, in the order written above.
/// param, exp_avg, exp_avg_sq: n floats updated in place; grad: n floats.
void adam_update_reference(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                           std::size_t n, const AdamScalars& s);

/// The kernel the engine calls; bitwise equal to the reference (same
/// operations in the same order per element, vectorised by the compiler).
/// Arrays must not overlap. Thread safety: touches only its arguments.
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                 const AdamScalars& s);

}  // namespace zeroshard::kernels
