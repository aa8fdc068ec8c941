// One element of the Adam / AdamW update in torch's single-tensor float32
// operation order (the definition in kernels/cpu/adam/adam.h), shared by the
// scalar references of every Adam kernel: fp32 states (adam.cpp), 8-bit
// blockwise states (adam8bit.cpp) and bf16 states (adam_bf16_state.cpp).
// The vector kernels perform the same operations per lane (adam-inl.h).
//
// Include after kernels/cpu/fp_strict.h in a kernel translation unit (no
// contraction of a*b+c: see [Note: strict floating point in kernels]).
#pragma once

#include <cmath>

#include "kernels/cpu/adam/adam.h"

namespace zeroshard::kernels::detail {

/// Updates p, m, v in place from the raw gradient graw (fp32, already
/// widened), with the scalars s (make_adam_scalars). Pure; no allocation.
inline void adam_element(float& p, float graw, float& m, float& v, const AdamScalars& s) {
  float g = graw * s.grad_scale;
  if (s.decoupled) {
    p = p * s.decay_factor;
  } else {
    g = g + s.weight_decay * p;
  }
  // torch's lerp_(g, w): fma(w, g - m, m) or, for |w| >= 0.5, fma(w - 1, g - m, g).
  m = std::fma(s.lerp_coeff, g - m, s.lerp_small ? m : g);
  // torch's exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2): the
  // multiply rounded, then addcmul's `self + value * t1 * t2` with value * t1
  // rounded and the last multiply-add fused (kernels/cpu/adam/adam.h).
  v = std::fma(s.one_minus_beta2 * g, g, v * s.beta2);
  const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
  p = p + (s.neg_step_size * m) / denom;
}

}  // namespace zeroshard::kernels::detail
