// Fused SGD (momentum, dampening, Nesterov, L2 weight decay) over contiguous
// fp32 arrays, next to its scalar reference. torch.optim.SGD documentation:
//   g = grad * grad_scale + weight_decay * p
//   momentum != 0:  b = g on the first step, else b = b * momentum + f(1 - dampening) * g
//                   g = nesterov ? g + momentum * b : b
//   p = p - lr * g
// torch single-tensor order: grad.add(param, alpha=wd), buf.mul_(momentum)
// .add_(grad, alpha=1 - dampening), grad.add(buf, alpha=momentum),
// param.add_(grad, alpha=-lr); f() rounds the double 1 - dampening to float
// once; each other step is one float32 operation without FMA (torch's scalar
// CPU loop; its vector loops for add(alpha) fuse, within 1 ulp per step).
// Sutskever et al. 2013, "On the importance of initialization and momentum
// in deep learning" (the momentum and Nesterov forms torch implements).
//
// Mixed precision as in kernels/cpu/adam/adam.h: a bf16/fp16 gradient is converted exactly to
// fp32 first; the optional parameter copy is the updated p rounded to nearest
// even (core/dtype.h).
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// Per-step scalars of an SGD update.
struct SgdScalars {
  float lr = 0;
  float momentum = 0;
  float one_minus_dampening = 1;  ///< f(1 - dampening), computed in double
  float weight_decay = 0;
  float grad_scale = 1;
  bool nesterov = false;
  bool first_step = false;  ///< initialise the momentum buffer with g
};

/// Scalar reference. param: n floats updated; grad: n floats;
/// momentum_buffer: n floats (may be null when momentum == 0).
void sgd_update_reference(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                          const SgdScalars& s);

/// Scalar reference of the mixed-precision update: grad holds n elements of
/// grad_dtype (f32, bf16 or f16); param_copy, when not null, receives n
/// elements of copy_dtype (bf16 or f16). Throws InvariantError on any other
/// dtype.
void sgd_update_reference(float* param, const void* grad, DType grad_dtype,
                          float* momentum_buffer, void* param_copy, DType copy_dtype,
                          std::size_t n, const SgdScalars& s);

/// The kernel the engine calls: one fused pass, vectorised with Highway
/// (target chosen at run time) and split over kernel_pool() threads; bitwise
/// equal to the reference for any thread count and target (NaN payloads
/// aside, see fp_strict.h). Arrays must not overlap; no alignment required.
/// Thread safety: touches only its arguments.
void sgd_update(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                const SgdScalars& s);

/// Mixed-precision form of sgd_update (arguments as in the reference above);
/// bitwise equal to that reference. Throws InvariantError on an unsupported
/// dtype.
void sgd_update(float* param, const void* grad, DType grad_dtype, float* momentum_buffer,
                void* param_copy, DType copy_dtype, std::size_t n, const SgdScalars& s);

}  // namespace zeroshard::kernels
