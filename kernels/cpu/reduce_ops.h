// Element-wise helpers the engine runs over gradient shards: accumulation
// and the squared L2 norm used for global-norm clipping, each next to its
// scalar reference.
#pragma once

#include <cstddef>

namespace zeroshard::kernels {

/// dst[i] += src[i] for i < n. Arrays must not overlap.
void accumulate(float* dst, const float* src, std::size_t n);

/// Sum of x[i]^2 in double precision, summed in blocks of fixed size so the
/// result depends only on the data (not on thread count). Thread safety:
/// read-only.
double sum_of_squares(const float* x, std::size_t n);

/// Scalar reference of sum_of_squares: one double accumulator, in order.
double sum_of_squares_reference(const float* x, std::size_t n);

}  // namespace zeroshard::kernels
