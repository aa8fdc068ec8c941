#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/update/lion.h"

#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

namespace {

// One element of the update: the definition. The vector kernel
// (lion_simd.cpp) performs the same operations in the same order per lane.
inline void lion_element(float& p, float graw, float& m, const LionScalars& s) {
  const float g = graw * s.grad_scale;
  const float c = s.beta1 * m + (1.0f - s.beta1) * g;
  const float sign = c > 0.0f ? 1.0f : (c < 0.0f ? -1.0f : c);
  p = p * s.decay_factor - s.lr * sign;
  m = s.beta2 * m + (1.0f - s.beta2) * g;
}

}  // namespace

void lion_update_reference(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                           void* param_copy, DType copy_dtype, std::size_t n,
                           const LionScalars& s) {
  reference_update(param, grad, grad_dtype, param_copy, copy_dtype, n,
                   [&](std::size_t i, float g) { lion_element(param[i], g, exp_avg[i], s); });
}

}  // namespace zeroshard::kernels
