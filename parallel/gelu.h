// The GELU activation in the tanh form GPT-2 uses (Hendrycks & Gimpel, 2016,
// "Gaussian Error Linear Units"; torch.nn.GELU(approximate='tanh')):
//   gelu(x) = 0.5 x (1 + tanh(c (x + a x^3))),  c = sqrt(2/pi), a = 0.044715
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2),  t = tanh(...)
// Element-wise, so in a Megatron MLP it runs on each rank's column-parallel
// slice of the hidden activations with no communication. Computed in fp32
// by the vector kernel of kernels/cpu/activation/gelu.h ([Note: GELU in
// fp32]: within a few ulp of the fp64 value, the same bits for the same x
// wherever it sits). Thread safety: pure functions.
#pragma once

#include <span>

namespace zeroshard::parallel {

/// y[i] = gelu(x[i]) for every element; y may alias x. Throws
/// InvariantError when the sizes differ.
void gelu_forward(std::span<const float> x, std::span<float> y);

/// y[i] = gelu(x[i]) and slope[i] = gelu'(x[i]) in one pass, for a
/// backward that then needs no exp (gelu_backward_slope); the same bits as
/// gelu_forward and gelu_backward. slope may alias x; y must not. Throws
/// InvariantError when the sizes differ.
void gelu_forward(std::span<const float> x, std::span<float> y, std::span<float> slope);
/// dx[i] = dy[i] * slope[i] from gelu_forward's slope: bitwise gelu_backward's
/// dx. dx may alias dy. Throws InvariantError when the sizes differ.
void gelu_backward_slope(std::span<const float> slope, std::span<const float> dy, std::span<float> dx);
/// dx[i] = dy[i] * gelu'(x[i]) from forward's input x; dx may alias dy.
/// Throws InvariantError when the sizes differ.
void gelu_backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx);

}  // namespace zeroshard::parallel
