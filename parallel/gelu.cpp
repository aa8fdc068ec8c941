#include "parallel/gelu.h"

#include <cmath>
#include <numbers>

#include "parallel/check_size.h"

namespace zeroshard::parallel {

namespace {
constexpr double kC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kA = 0.044715;
static_assert(kC * kC * std::numbers::pi > 1.999999999 && kC * kC * std::numbers::pi < 2.000000001);
}  // namespace

void gelu_forward(std::span<const float> x, std::span<float> y) {
  check_size("gelu_forward", "y", y.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(kC * (v + kA * v * v * v))));
  }
}

void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  check_size("gelu_backward", "dy", dy.size(), x.size());
  check_size("gelu_backward", "dx", dx.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double t = std::tanh(kC * (v + kA * v * v * v));
    const double d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kC * (1.0 + 3.0 * kA * v * v);
    dx[i] = static_cast<float>(dy[i] * d);
  }
}

}  // namespace zeroshard::parallel
