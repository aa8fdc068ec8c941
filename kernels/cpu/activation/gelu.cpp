// The fp64 scalar references of kernels/cpu/activation/gelu.h.
#include "kernels/cpu/fp_strict.h"

#include "kernels/cpu/activation/gelu.h"

#include <cmath>
#include <numbers>

namespace zeroshard::kernels {

namespace {
constexpr double kC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kA = 0.044715;
static_assert(kC * kC * std::numbers::pi > 1.999999999 && kC * kC * std::numbers::pi < 2.000000001);
}  // namespace

// The tanh form through the sigmoid identity of [Note: GELU in fp32], in
// double: 1 + tanh(u) itself cancels in double too once u < -18.
void gelu_tanh_forward_reference(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double s = 1.0 / (1.0 + std::exp(-2.0 * kC * (v + kA * v * v * v)));
    y[i] = static_cast<float>(v * s);
  }
}

void gelu_tanh_backward_reference(const float* x, const float* dy, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double e = std::exp(-2.0 * kC * (v + kA * v * v * v));
    const double s = 1.0 / (1.0 + e);
    const double d = s + 2.0 * v * s * (e * s) * kC * (1.0 + 3.0 * kA * v * v);
    dx[i] = static_cast<float>(dy[i] * d);
  }
}

}  // namespace zeroshard::kernels
