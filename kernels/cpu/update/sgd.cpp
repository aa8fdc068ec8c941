#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/update/sgd.h"

#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

namespace {

// One element of the update: the definition. The vector kernel
// (sgd_simd.cpp) performs the same operations in the same order per lane.
inline void sgd_element(float& p, float graw, float* b, const SgdScalars& s) {
  float g = graw * s.grad_scale + s.weight_decay * p;
  if (b != nullptr) {
    *b = s.first_step ? g : *b * s.momentum + s.one_minus_dampening * g;
    g = s.nesterov ? g + s.momentum * *b : *b;
  }
  p = p - s.lr * g;
}

}  // namespace

void sgd_update_reference(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                          const SgdScalars& s) {
  sgd_update_reference(param, grad, DType::f32, momentum_buffer, nullptr, DType::bf16, n, s);
}

void sgd_update_reference(float* param, const void* grad, DType grad_dtype,
                          float* momentum_buffer, void* param_copy, DType copy_dtype,
                          std::size_t n, const SgdScalars& s) {
  const bool use_buf = s.momentum != 0.0f;
  reference_update(param, grad, grad_dtype, param_copy, copy_dtype, n, [&](std::size_t i, float g) {
    sgd_element(param[i], g, use_buf ? momentum_buffer + i : nullptr, s);
  });
}

}  // namespace zeroshard::kernels
