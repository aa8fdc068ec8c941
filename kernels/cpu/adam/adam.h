// Fused Adam / AdamW update over contiguous fp32 arrays (gradient in fp32,
// bf16 or fp16; optional bf16/fp16 copy of the updated parameter written in
// the same pass), next to its scalar reference.
// Details: [Note: AdamW operation order] below.
#pragma once

#include <cstddef>

#include "core/dtype.h"

// [Note: AdamW operation order]
// For each element, with g = grad * grad_scale, the arithmetic of torch's
// single-tensor AdamW / Adam (torch/optim/adam.py and adamw.py,
// _single_tensor_adam, foreach=False; float32 tensors on CPU), one tensor op
// at a time with the Python-float scalars computed in double and rounded to
// float once where they meet the float tensor (make_adam_scalars):
//   AdamW: p = p * f(1 - lr*wd)                     (param.mul_)
//   Adam:  g = g + f(wd) * p                        (grad.add(param, alpha=wd))
//   m = lerp(m, g, w), w = f(1 - beta1)             (exp_avg.lerp_(grad, 1 - beta1)):
//         |w| < 0.5 ? fma(w, g - m, m) : fma(w - 1, g - m, g)   (w - 1 in float)
//   v = fma(f(1 - beta2) * g, g, v * f(beta2))       (mul_(beta2).addcmul_(g, g, value))
//   denom = sqrt(v) / f(sqrt(1 - beta2^step)) + f(eps)
//   p = p + (f(-(lr / (1 - beta1^step))) * m) / denom  (param.addcdiv_(m, denom, value))
// where f() rounds a double to float, fma(a, b, c) is a*b + c rounded once
// (std::fma), and every other operation is one float32 operation, rounded to
// nearest. The lerp is torch's ATen lerp (aten/src/ATen/native/Lerp.h: the
// two branches on |weight| < 0.5, for accuracy near either end), fused as
// torch's CPU kernel computes it (aten/src/ATen/native/cpu/LerpKernel.cpp:
// its vector loop is one fmadd of coeff = weight or weight - 1 on end - self,
// added to self or end; its scalar loop, compiled for AVX2/AVX-512 with FMA,
// is contracted to the same). exp_avg_sq is torch's addcmul CPU kernel
// (aten/src/ATen/native/cpu/PointwiseOpsKernel.cpp: `self + value * t1 *
// t2`, scalar and vector loops alike), which its compiler contracts in the
// AVX2/AVX-512 builds: value * t1 rounded, then one fused multiply-add onto
// self (already v * f(beta2), rounded by mul_). This order reproduces all 97
// exp_avg_sq elements of torch 2.15's AdamW after 10 steps
// (tests/optimizer/data/torch-adamw-10steps.json); the unfused
// v + (value * g) * g matches 61 of them. Checked bitwise against torch in
// tests/optimizer/test_torch_parity.cpp. The other operations are torch's
// unfused scalar loops; its AVX2/AVX-512 vector loop for grad.add(alpha)
// uses a fused multiply-add (within 1 ulp of this per operation), its
// addcdiv_ vector loop associates as above.
// Kingma & Ba 2015, "Adam"; Loshchilov & Hutter 2019, "Decoupled Weight Decay
// Regularization" (AdamW).
//
// Mixed precision: a bf16/fp16 gradient element is first converted exactly to
// fp32 (core/dtype.h); the optional parameter copy is the updated fp32 p
// rounded to nearest even by float_to_bf16 / float_to_f16.

namespace zeroshard::kernels {

/// Per-step float scalars of an Adam/AdamW update, as torch rounds them;
/// build with make_adam_scalars, the one place they are derived.
struct AdamScalars {
  float beta2 = 0.999f;            ///< f(beta2): exp_avg_sq.mul_(beta2)
  float one_minus_beta1 = 0.1f;    ///< f(1 - beta1): the lerp_ weight w
  float lerp_coeff = 0.1f;         ///< w when lerp_small, else w - 1.0f (in float)
  bool lerp_small = true;          ///< |w| < 0.5: lerp = fma(w, g - m, m), else fma(w - 1, g - m, g)
  float one_minus_beta2 = 0.001f;  ///< f(1 - beta2): addcmul_ value
  float eps = 1e-8f;               ///< f(eps)
  float weight_decay = 0;          ///< f(weight_decay): Adam's grad.add alpha
  float decay_factor = 1;          ///< AdamW: f(1 - lr * weight_decay)
  float neg_step_size = 0;         ///< f(-(lr / (1 - beta1^step))): addcdiv_ value
  float bc2_sqrt = 1;              ///< f(sqrt(1 - beta2^step))
  float grad_scale = 1;            ///< multiplies every gradient element first
  bool decoupled = true;           ///< true: AdamW, false: Adam (L2)
};

/// The scalars torch's single-tensor Adam/AdamW uses at 1-based `step`
/// (>= 1), from Python-float (double) hyper-parameters: every derived value
/// (1 - beta1, 1 - beta2, 1 - lr*wd, lr / (1 - beta1^step),
/// sqrt(1 - beta2^step)) is computed in double and rounded to float once,
/// and so are beta2, eps and weight_decay themselves (torch passes each
/// Python float to a float32 tensor op, which rounds it once). decoupled: AdamW; grad_scale multiplies each gradient element first.
/// Throws InvariantError when step < 1. Thread safety: pure.
AdamScalars make_adam_scalars(double lr, double beta1, double beta2, double eps,
                              double weight_decay, long long step, bool decoupled,
                              float grad_scale = 1.0f);

/// Scalar reference: one element at a time, the operations written above.
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
