#include "kernels/cpu/sgd.h"

namespace zeroshard::kernels {

namespace {

// One element, shared by reference and kernel (see adam.cpp).
inline void sgd_element(float& p, float graw, float* b, const SgdScalars& s) {
  float g = graw * s.grad_scale + s.weight_decay * p;
  if (b != nullptr) {
    *b = s.first_step ? g : s.momentum * *b + (1.0f - s.dampening) * g;
    g = s.nesterov ? g + s.momentum * *b : *b;
  }
  p = p - s.lr * g;
}

}  // namespace

void sgd_update_reference(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                          const SgdScalars& s) {
  const bool use_buf = s.momentum != 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    sgd_element(param[i], grad[i], use_buf ? momentum_buffer + i : nullptr, s);
  }
}

void sgd_update(float* __restrict param, const float* __restrict grad,
                float* __restrict momentum_buffer, std::size_t n, const SgdScalars& s) {
  const SgdScalars c = s;
  if (c.momentum != 0.0f) {
#pragma GCC ivdep
    for (std::size_t i = 0; i < n; ++i) sgd_element(param[i], grad[i], momentum_buffer + i, c);
  } else {
#pragma GCC ivdep
    for (std::size_t i = 0; i < n; ++i) sgd_element(param[i], grad[i], nullptr, c);
  }
}

}  // namespace zeroshard::kernels
