// Fused Lion update over contiguous fp32 arrays (gradient in fp32, bf16 or
// fp16; optional bf16/fp16 copy of the updated parameter written in the same
// pass), next to its scalar reference.
//
// Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Alg. 1,
// with decoupled weight decay. For each element, with g = grad * grad_scale:
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * weight_decay) - lr * sign(c)
//   m = beta2 * m + (1 - beta2) * g
// where sign(c) is 1 for c > 0, -1 for c < 0 and c itself otherwise (so +-0
// stays +-0 and NaN stays NaN, as torch.sign). The factor 1 - lr*weight_decay
// is computed in double and rounded to float once per step, as for AdamW
// (lion-pytorch's p.data.mul_(1. - lr * wd) with Python floats); 1 - beta1
// and 1 - beta2 are float operations on the rounded betas, as DeepSpeed's
// cpu_lion and FusedLion compute them (torch has no Lion). Each other
// operation is one float32 operation without FMA (fp_strict.h). DeepSpeed's
// kernels differ at c == 0 only (FusedLion moves p by +lr there, cpu_lion by
// -copysign(lr, c)); Chen et al.'s sign(0) = 0 leaves p at p * decay.
// Mixed precision as in kernels/cpu/adam/adam.h.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// Per-step scalars of a Lion update (optimizer.h's lion_scalars derives
/// them from the config's doubles).
struct LionScalars {
  float lr = 0;            ///< f(lr): p moves by exactly lr * sign(c)
  float beta1 = 0.9f;      ///< f(beta1)
  float beta2 = 0.99f;     ///< f(beta2)
  float weight_decay = 0;  ///< f(weight_decay) (informational: decay_factor applies it)
  float decay_factor = 1;  ///< (float)(1 - (double)lr * weight_decay)
  float grad_scale = 1;    ///< multiplies every gradient element first
};

/// Scalar reference, one element at a time in the order written above.
/// param, exp_avg: n floats updated in place; grad: n elements of grad_dtype
/// (f32, bf16 or f16); param_copy, when not null, receives n elements of
/// copy_dtype (bf16 or f16) = the updated param rounded to nearest even.
/// Throws InvariantError on any other dtype.
void lion_update_reference(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                           void* param_copy, DType copy_dtype, std::size_t n,
                           const LionScalars& s);

/// The kernel: one fused pass, vectorised with Highway (target chosen at run
/// time) and split over kernel_pool() threads; bitwise equal to the
/// reference for any thread count and target (NaN payloads aside, see
/// fp_strict.h). Arrays must not overlap; no alignment required.
/// Thread safety: touches only its arguments.
void lion_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 void* param_copy, DType copy_dtype, std::size_t n, const LionScalars& s);

}  // namespace zeroshard::kernels
