#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/update/adagrad.h"

#include <cmath>

#include "core/error.h"

#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

AdagradScalars make_adagrad_scalars(double lr, double lr_decay, double eps, double weight_decay,
                                    double initial_accumulator_value, long long step,
                                    float grad_scale) {
  ZS_CHECK(step >= 1, "make_adagrad_scalars: step must be >= 1, got {}", step);
  AdagradScalars s;
  // torch: clr = lr / (1 + (step - 1) * lr_decay) with Python floats, then
  // param.addcdiv_(..., value=-clr) rounds -clr to float.
  const double clr = lr / (1.0 + static_cast<double>(step - 1) * lr_decay);
  s.neg_clr = static_cast<float>(-clr);
  s.eps = static_cast<float>(eps);
  s.weight_decay = static_cast<float>(weight_decay);
  s.initial_sum = static_cast<float>(initial_accumulator_value);
  s.grad_scale = grad_scale;
  s.first_step = step == 1;
  return s;
}

namespace {

// One element of the update: the definition (torch's op order, see
// adagrad.h). The vector kernel (adagrad_simd.cpp) performs the same
// operations in the same order per lane.
inline void adagrad_element(float& p, float graw, float& sum, const AdagradScalars& s) {
  float g = graw * s.grad_scale;
  if (s.weight_decay != 0.0f) g = g + s.weight_decay * p;
  sum = (s.first_step ? s.initial_sum : sum) + g * g;
  const float std_dev = std::sqrt(sum) + s.eps;
  p = p + (s.neg_clr * g) / std_dev;
}

}  // namespace

void adagrad_update_reference(float* param, const void* grad, DType grad_dtype, float* state_sum,
                              void* param_copy, DType copy_dtype, std::size_t n,
                              const AdagradScalars& s) {
  reference_update(param, grad, grad_dtype, param_copy, copy_dtype, n,
                   [&](std::size_t i, float g) { adagrad_element(param[i], g, state_sum[i], s); });
}

}  // namespace zeroshard::kernels
