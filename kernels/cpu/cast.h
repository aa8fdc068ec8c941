// Element-type conversions over arrays, with an optional scale, as the
// engine needs them for mixed precision: fp32 <-> bf16/fp16 casts of
// gradient and parameter buffers, scaled accumulation of reduced gradient
// blocks, and the gradient statistics pass (sum of squares + Inf/NaN).
//
// Every element goes through float: dst = from_float<Dst>(to_float(src) *
// scale) (core/dtype.h: round to nearest even, NaN and Inf kept). With scale
// 1 the multiply is skipped, so a cast is bitwise the scalar conversion.
// These are the engine-facing names of the vector kernels in convert.h
// (convert_scaled, accumulate_scaled) and grad_check.h (check_gradients,
// count_nonfinite): Highway, target chosen at run time, split over
// kernel_pool() threads, bitwise equal to their scalar references (NaN
// payloads aside, see fp_strict.h) for any thread count and target.
// Element types: f32, bf16, f16; f64 (or any other) throws InvariantError
// naming the argument. Thread safety: each call touches only its arguments.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// dst[i] = src[i] * scale, converted from src_type to dst_type. n elements.
/// Arrays must not overlap unless dst == src with equal types.
void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale = 1.0f);

/// dst[i] = dst[i] + src[i] * scale, computed in float (a multiply, then an
/// add, never fused) and rounded to dst_type once per element. Arrays must
/// not overlap.
void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                     float scale = 1.0f);

/// Sum of squares (double) and count of non-finite elements of a buffer.
struct GradStats {
  double sum_of_squares = 0;
  std::size_t nonfinite = 0;
};

/// Statistics of n elements of type `type`: the sum of squares of the
/// values widened to double, in the fixed order of grad_check.h (fixed
/// parts, 16 lanes each, combined in a fixed order: deterministic, the same
/// for any thread count and SIMD target), and the number of Inf/NaN
/// elements (the sum is then Inf or NaN).
GradStats grad_stats(const void* data, DType type, std::size_t n);

}  // namespace zeroshard::kernels
