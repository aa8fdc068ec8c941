// Fused Adagrad update over contiguous fp32 arrays (gradient in fp32, bf16 or
// fp16; optional bf16/fp16 copy of the updated parameter written in the same
// pass), next to its scalar reference.
//
// Duchi, Hazan & Singer 2011, "Adaptive Subgradient Methods for Online
// Learning and Stochastic Optimization", as torch.optim.Adagrad computes it
// (torch/optim/adagrad.py, _single_tensor_adagrad, dense float32 tensors on
// CPU), one tensor op at a time. For each element, with g = grad * grad_scale:
//   g = g + f(wd) * p                 (grad.add(param, alpha=wd); only when wd != 0)
//   s = s + g * g                     (state_sum.addcmul_(grad, grad, value=1))
//   std = sqrt(s) + f(eps)            (state_sum.sqrt().add_(eps))
//   p = p + (f(-clr) * g) / std       (param.addcdiv_(grad, std, value=-clr))
// with clr = lr / (1 + (step - 1) * lr_decay) computed in double and f()
// rounding a double to float once, as torch's Python floats meet a float32
// tensor (make_adagrad_scalars). Every other operation is one float32
// operation, rounded to nearest, without FMA (see [Note: strict floating
// point in kernels] in fp_strict.h); the association of addcmul_ (value * t1
// * t2, value 1 exact) and addcdiv_ (value * t1 / t2) is that of torch's CPU
// kernels, as for the step in kernels/cpu/adam/adam.h. Unlike exp_avg_sq's
// addcmul_ there (fused, checked against torch's own numbers), the sum's is
// left unfused: no torch output has been compared with it.
//
// torch starts state_sum at full(initial_accumulator_value). The engine's
// state arrays start at zero (optimizer_update's contract), so at step 1 the
// kernel reads f(initial_accumulator_value) in place of the stored sum: the
// same float torch starts from (as SGD's first step ignores its buffer).
//
// DeepSpeedCPUAdagrad (csrc/adagrad/cpu_adagrad.cpp) divides the gradient
// before weight decay and multiplies the quotient by -lr; this kernel follows
// torch, the documented definition, instead.
//
// Mixed precision as in kernels/cpu/adam/adam.h: a bf16/fp16 gradient is converted exactly to
// fp32 first; the optional parameter copy is the updated p rounded to nearest
// even (core/dtype.h).
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// Per-step float scalars of an Adagrad update, as torch rounds them; build
/// with make_adagrad_scalars.
struct AdagradScalars {
  float neg_clr = 0;          ///< f(-(lr / (1 + (step - 1) * lr_decay))): addcdiv_ value
  float eps = 1e-10f;         ///< f(eps)
  float weight_decay = 0;     ///< f(weight_decay): grad.add alpha (skipped when 0, as torch)
  float initial_sum = 0;      ///< f(initial_accumulator_value): the sum read in place of state_sum at step 1
  float grad_scale = 1;       ///< multiplies every gradient element first
  bool first_step = false;    ///< step == 1: the state sum starts at initial_sum
};

/// The scalars torch's single-tensor Adagrad uses at 1-based `step` (>= 1)
/// from Python-float (double) hyper-parameters: clr = lr / (1 + (step - 1) *
/// lr_decay) in double, then -clr, eps, weight_decay and
/// initial_accumulator_value each rounded to float once. grad_scale
/// multiplies each gradient element first. Throws InvariantError when
/// step < 1. Thread safety: pure.
AdagradScalars make_adagrad_scalars(double lr, double lr_decay, double eps, double weight_decay,
                                    double initial_accumulator_value, long long step,
                                    float grad_scale = 1.0f);

/// Scalar reference: one element at a time, the operations written above.
/// param, state_sum: n floats updated in place (state_sum zero before step
/// 1); grad: n elements of grad_dtype (f32, bf16 or f16); param_copy, when
/// not null, receives n elements of copy_dtype (bf16 or f16) = the updated
/// param rounded to nearest even. Throws InvariantError on any other dtype.
void adagrad_update_reference(float* param, const void* grad, DType grad_dtype, float* state_sum,
                              void* param_copy, DType copy_dtype, std::size_t n,
                              const AdagradScalars& s);

/// The kernel the engine calls: one fused pass, vectorised with Highway
/// (target chosen at run time) and split over kernel_pool() threads
/// (thread_pool.h); bitwise equal to adagrad_update_reference for any thread
/// count and target (NaN payloads aside, see fp_strict.h). Arrays must not
/// overlap; no alignment required. Memory traffic per element: reads 8 +
/// dtype_size(grad_dtype) bytes, writes 8 (+ 2 with a copy). Throws
/// InvariantError on an unsupported dtype.
/// Thread safety: touches only its arguments (may be called concurrently).
void adagrad_update(float* param, const void* grad, DType grad_dtype, float* state_sum,
                    void* param_copy, DType copy_dtype, std::size_t n, const AdagradScalars& s);

}  // namespace zeroshard::kernels
