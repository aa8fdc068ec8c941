// Sum of equal blocks in a fixed order: the local half of the rank-ordered
// reductions (comm/ordered_reduce.h). After an all-to-all, block j of a
// buffer holds rank j's contribution to the elements this rank reduces;
// this kernel adds them left to right, so every element's sum is
//     ((b_0 + b_1) + b_2) + ... + b_{k-1}
// whatever the SIMD target, thread count or the position of the element,
// which makes the result independent of how a collective is split into
// buckets and of which collective (all-reduce or reduce-scatter) carried it.
//
// Per dtype, each "+" is:
//   f32, f64: the IEEE add of the type (no fusing, no reassociation:
//             [Note: strict floating point in kernels] in fp_strict.h);
//   bf16, f16: round16(float(a) + float(b)), the pairwise rule of
//             [Note: 16-bit reductions] (comm/mpi/mpi_types.h), rounding
//             back to the 16-bit type after every add.
// Next to its scalar reference, which is the definition.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace zeroshard::kernels {

/// dst[i] = b_0[i] + b_1[i] + ... + b_{blocks-1}[i], summed left to right
/// (see the file comment for each dtype's add), for i < n, where block j is
/// the n elements at src + j * n (elements of dtype). dst may be src itself
/// (the sum replaces block 0) or must not overlap src[0 .. blocks * n).
/// Vectorised (Highway, target chosen at run time) and split over
/// kernel_pool() threads; bitwise equal to sum_blocks_reference for any
/// thread count and target (a NaN may carry another payload, fp_strict.h).
/// Throws InvariantError when blocks is 0 or the buffers are null with n > 0.
/// Thread safety: touches only its arguments. Allocates nothing.
void sum_blocks(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype);

/// Scalar reference of sum_blocks (same arguments, same errors).
void sum_blocks_reference(void* dst, const void* src, std::size_t blocks, std::size_t n, DType dtype);

}  // namespace zeroshard::kernels
