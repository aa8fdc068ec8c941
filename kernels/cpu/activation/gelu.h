// The GELU activation in the tanh form GPT-2 uses (Hendrycks & Gimpel, 2016,
// "Gaussian Error Linear Units"; torch.nn.GELU(approximate='tanh')):
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = c (x + a x^3),  c = sqrt(2/pi), a = 0.044715
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2),  t = tanh(u)
// as an fp32 vector kernel beside its fp64 scalar reference ([Note: GELU in
// fp32]). Thread safety: pure functions of their arguments; no allocation.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

// [Note: GELU in fp32]
// The kernel evaluates the same function through the identity
// 0.5 (1 + tanh(u)) = s = 1 / (1 + e), e = exp(-2u), and
// 0.5 (1 - t^2) = 2 s (1 - s) = 2 s (e s):
//   gelu(x)  = x s
//   gelu'(x) = s + 2 x s (e s) c (1 + 3 a x^2)
// in fp32 with Highway's Exp (1 ulp). The sigmoid form has no cancellation
// where tanh(u) nears -1 (x below about -3, where 1 + tanh(u) loses its
// digits in fp32, and in fp64 below x = -6). Each result is within
// (16 + 8 |u|) 2^-24 relative of the fp64 value where |gelu(x)| >= 1e-30:
// a few ulp where |x| < 2, more where exp amplifies the rounding of u (1e-5
// at x = -9); torch's fp32 tanh form loses every digit there. Below 1e-30
// (x < -9, where s is subnormal) within 1e-35 absolutely. -2u is clamped to 88 so
// that e stays finite (e s = 1 - s then holds for every finite x, where an
// infinite e would make 0 * Inf); an infinite x gives gelu(x) = x, and a
// gradient that is NaN. Every element goes
// through the same vector code, the tail of an array through a padded
// vector, so an element's result does not depend on its position, the
// array's length or how a tensor-parallel split cuts it: bitwise the same
// wherever the same x is. The SIMD target does not change the bits either
// among those with FMA (AVX2, AVX-512): the operations are the same per
// lane. The portable fallback (EMU128, no FMA) rounds Exp's multiply-adds
// twice and may differ in the last bits.

/// y[i] = gelu(x[i]) for i < n, fp32 ([Note: GELU in fp32]); y may alias x
/// (then exactly), otherwise the arrays must not overlap. NaN gives NaN.
void gelu_tanh_forward(const float* x, float* y, std::size_t n);

/// dx[i] = dy[i] * gelu'(x[i]) for i < n from forward's input x, fp32; dx
/// may alias dy (or x). NaN in x or dy gives NaN.
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n);

/// y[i] = gelu(x[i]) and slope[i] = gelu'(x[i]) for i < n, fp32, in one
/// pass: the forward of a layer whose backward then needs only dy * slope
/// (no second exp). y bitwise equals gelu_tanh_forward's, and dy[i] *
/// slope[i] in fp32 bitwise equals gelu_tanh_backward's dx[i]. slope may
/// alias x (each element is read before it is written); y must not overlap
/// x or slope.
void gelu_tanh_forward_slope(const float* x, float* y, float* slope, std::size_t n);

/// The fp64 references: the note's sigmoid form evaluated in double,
/// rounded once to fp32 (the tanh form's 1 + tanh(u) cancels in double too,
/// below x = -6); the kernels are within the note's bounds of them.
void gelu_tanh_forward_reference(const float* x, float* y, std::size_t n);
void gelu_tanh_backward_reference(const float* x, const float* dy, float* dx, std::size_t n);

}  // namespace zeroshard::kernels
