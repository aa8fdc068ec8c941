// Layer normalisation of rows (parallel/layer_norm.h has the formulas and
// the layer): the per-row sums in fp64 over Highway vectors, results
// rounded to fp32. Thread safety: pure functions of their arguments; no
// allocation.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

// [Note: vector LayerNorm]
// Each row of dim features is read as doubles, Lanes(double) at a time with
// two accumulators, the rest (dim mod 2 Lanes) one by one, and the sums are
// reduced in a fixed order: every row takes the same path, so a row's
// results depend only on its values, dim and the SIMD target (the vector
// width orders the sums: AVX2 and AVX-512 may differ in the last bits),
// not on its position or the number of rows. Per element the operations
// are those of the scalar form, in fp64, no fused multiply-adds: y =
// ((x - mean) rstd) gamma + beta; backward xhat = (x - mean) rstd,
// g = dy gamma, dgamma += fp32(dy xhat), dbeta += dy (fp32 adds),
// dx = rstd (g - mean(g) - xhat mean(g xhat)).

/// Rows [0, tokens) of x [tokens, dim] -> y (may alias x), with mean and
/// rstd [tokens] (fp32 of the fp64 values). gamma, beta: [dim].
void layer_norm_forward(const float* x, std::size_t tokens, std::size_t dim, const float* gamma,
                        const float* beta, float eps, float* y, float* mean, float* rstd);

/// The gradient of layer_norm_forward: dx [tokens, dim] (may alias dy) from
/// forward's x, mean and rstd; adds into dgamma and dbeta [dim].
void layer_norm_backward(const float* x, const float* dy, std::size_t tokens, std::size_t dim,
                         const float* gamma, const float* mean, const float* rstd, float* dx,
                         float* dgamma, float* dbeta);

}  // namespace zeroshard::kernels
