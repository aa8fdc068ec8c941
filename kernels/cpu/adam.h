// Fused Adam / AdamW update over contiguous fp32 arrays (gradient in fp32,
// bf16 or fp16; optional bf16/fp16 copy of the updated parameter written in
// the same pass), next to its scalar reference.
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
// Kingma & Ba 2015, "Adam"; Loshchilov & Hutter 2019, "Decoupled Weight Decay
// Regularization" (AdamW).
//
// Mixed precision: a bf16/fp16 gradient element is first converted exactly to
// fp32 (core/dtype.h); the optional parameter copy is the updated fp32 p
// rounded to nearest even by float_to_bf16 / float_to_f16.
#pragma once

#include <cstddef>

#include "core/dtype.h"

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

/// Scalar reference of the mixed-precision update: grad holds n elements of
/// grad_dtype (f32, bf16 or f16); param_copy, when not null, receives n
/// elements of copy_dtype (bf16 or f16) = the updated param rounded.
/// Throws InvariantError on any other dtype.
void adam_update_reference(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                           float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                           const AdamScalars& s);

/// The kernel the engine calls: one fused pass, vectorised with Highway
/// (AVX-512 or AVX2 chosen at run time) and split over kernel_pool()
/// threads (thread_pool.h); bitwise equal to adam_update_reference for any
/// thread count and target (NaN payloads aside, see fp_strict.h). Arrays
/// must not overlap; no alignment required.
/// Thread safety: touches only its arguments (may be called concurrently).
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                 const AdamScalars& s);

/// Mixed-precision form of adam_update (see the reference above for the
/// arguments); bitwise equal to that reference. Memory traffic per element:
/// reads 12 + dtype_size(grad_dtype) bytes, writes 12 (+ 2 with a copy).
/// Throws InvariantError on an unsupported dtype.
void adam_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                 const AdamScalars& s);

}  // namespace zeroshard::kernels
