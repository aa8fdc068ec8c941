// The Adam / AdamW element update on the device, operation for operation
// kernels/cpu/adam/adam_element.h's detail::adam_element (torch's single-tensor
// float32 order; [Note: bitwise GPU kernels]), shared by the kernels of
// every state format (adam.cu: fp32, adam8bit.cu: 8-bit blockwise,
// adam_bf16_state.cu: bf16). Internal to kernels/cuda (.cu files only).
#pragma once

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu::detail {

/// Updates p, m, v in place from the widened gradient graw.
__device__ __forceinline__ void adam_element(const AdamDeviceScalars& s, float& p, float graw,
                                             float& m, float& v) {
  float g = mul(graw, s.grad_scale);
  if (s.decoupled) {
    p = mul(p, s.decay_factor);
  } else {
    g = add(g, mul(s.weight_decay, p));
  }
  m = fma_rn(s.lerp_coeff, sub(g, m), s.lerp_small ? m : g);
  v = fma_rn(mul(s.one_minus_beta2, g), g, mul(v, s.beta2));  // addcmul_, fused as on the CPU
  const float denom = add(div(sqrt_rn(v), s.bc2_sqrt), s.eps);
  p = add(p, div(mul(s.neg_step_size, m), denom));
}

}  // namespace zeroshard::kernels::gpu::detail
