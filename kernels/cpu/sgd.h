// Fused SGD (momentum, dampening, Nesterov, L2 weight decay) over contiguous
// fp32 arrays, next to its scalar reference. torch.optim.SGD documentation:
//   g = grad * grad_scale + weight_decay * p
//   momentum != 0:  b = g on the first step, else b = momentum * b + (1 - dampening) * g
//                   g = nesterov ? g + momentum * b : b
//   p = p - lr * g
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// Per-step scalars of an SGD update.
struct SgdScalars {
  float lr = 0;
  float momentum = 0;
  float dampening = 0;
  float weight_decay = 0;
  float grad_scale = 1;
  bool nesterov = false;
  bool first_step = false;  ///< initialise the momentum buffer with g
};

/// Scalar reference. param: n floats updated; grad: n floats;
/// momentum_buffer: n floats (may be null when momentum == 0).
void sgd_update_reference(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                          const SgdScalars& s);

/// The kernel the engine calls; bitwise equal to the reference.
/// Arrays must not overlap. Thread safety: touches only its arguments.
void sgd_update(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                const SgdScalars& s);

}  // namespace zeroshard::kernels
