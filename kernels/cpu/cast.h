// Element-type conversions over arrays, with an optional scale, as the
// engine needs them for mixed precision: fp32 <-> bf16/fp16 casts of
// gradient and parameter buffers, scaled accumulation of reduced gradient
// blocks, and the gradient statistics pass (sum of squares + Inf/NaN).
//
// Every element goes through float: dst = from_float<Dst>(to_float(src) *
// scale) (core/dtype.h: round to nearest even, NaN and Inf kept). With scale
// 1 the multiply is exact, so a cast is bitwise the scalar conversion.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// dst[i] = src[i] * scale, converted from src_type to dst_type. n elements.
/// Arrays must not overlap unless dst == src with equal types.
void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale = 1.0f);

/// dst[i] = dst[i] + src[i] * scale, computed in float and rounded to
/// dst_type once per element.
void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                     float scale = 1.0f);

/// Sum of squares (double) and count of non-finite elements of a buffer.
struct GradStats {
  double sum_of_squares = 0;
  std::size_t nonfinite = 0;
};

/// Statistics of n elements of type `type`. The sum is taken in fixed-size
/// blocks combined in a fixed order (deterministic).
GradStats grad_stats(const void* data, DType type, std::size_t n);

}  // namespace zeroshard::kernels
