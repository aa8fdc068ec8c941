// The rows of causal attention's softmax and its gradient (parallel/
// parallel_attention.h, [Note: attention by matrix products]) as Highway
// kernels: exp in fp32 (Highway's Exp, 1 ulp), the row's sums in fp64.
// Thread safety: pure functions of their arguments; no allocation.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// row[0, valid) (scores, valid >= 1) -> their softmax: e_j = exp(row_j -
/// max), each entry rounded once to fp32 from e_j / sum_k e_k (the sum in
/// fp64, so the row sums to 1 within 2^-24); row[valid, len) = 0. A row's
/// bits depend on its values, valid and the SIMD target only.
void causal_softmax_row(float* row, std::size_t valid, std::size_t len);

/// The softmax's gradient on one row, in place: dp[0, valid) (the gradient
/// of the probabilities p) -> scale * p (dp - sum_k p_k dp_k) (the gradient
/// of the scores; the dot product in fp64), dp[valid, len) = 0.
void softmax_backward_row(const float* p, float* dp, std::size_t valid, std::size_t len, float scale);

}  // namespace zeroshard::kernels
