// Element-wise helpers the engine runs over gradient shards: accumulation
// and the squared L2 norm used for global-norm clipping, each next to its
// scalar reference.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// dst[i] += src[i] for i < n (fp32). Arrays must not overlap. Split over
/// kernel_pool() threads (thread_pool.h); each element is computed alone, so
/// the result is the same for any thread count. Thread safety: touches only
/// its arguments.
void accumulate(float* dst, const float* src, std::size_t n);

/// Scalar reference of accumulate.
void accumulate_reference(float* dst, const float* src, std::size_t n);

/// Sum of x[i]^2 in double precision, in the fixed order of grad_check.h
/// (fixed parts, 16 lanes each, combined in a fixed order), so the result
/// depends only on the data, not on the thread count or SIMD width; equals
/// check_gradients(x, DType::f32, n, 1.0f).sum_of_squares. Vectorised and split
/// over kernel_pool() threads. Thread safety: read-only.
double sum_of_squares(const float* x, std::size_t n);

/// Scalar reference of sum_of_squares as a plain sum: one double
/// accumulator, in order (agrees with sum_of_squares to rounding, not
/// bitwise; grad_check_reference is the bitwise definition).
double sum_of_squares_reference(const float* x, std::size_t n);

}  // namespace zeroshard::kernels
