#include "parallel/gelu.h"

#include "kernels/cpu/activation/gelu.h"
#include "parallel/check_size.h"

namespace zeroshard::parallel {

void gelu_forward(std::span<const float> x, std::span<float> y) {
  check_size("gelu_forward", "y", y.size(), x.size());
  kernels::gelu_tanh_forward(x.data(), y.data(), x.size());
}

void gelu_forward(std::span<const float> x, std::span<float> y, std::span<float> slope) {
  check_size("gelu_forward", "y", y.size(), x.size());
  check_size("gelu_forward", "slope", slope.size(), x.size());
  kernels::gelu_tanh_forward_slope(x.data(), y.data(), slope.data(), x.size());
}

void gelu_backward_slope(std::span<const float> slope, std::span<const float> dy, std::span<float> dx) {
  check_size("gelu_backward_slope", "dy", dy.size(), slope.size());
  check_size("gelu_backward_slope", "dx", dx.size(), slope.size());
  for (std::size_t i = 0; i < slope.size(); ++i) dx[i] = dy[i] * slope[i];
}

void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx) {
  check_size("gelu_backward", "dy", dy.size(), x.size());
  check_size("gelu_backward", "dx", dx.size(), x.size());
  kernels::gelu_tanh_backward(x.data(), dy.data(), dx.data(), x.size());
}

}  // namespace zeroshard::parallel
