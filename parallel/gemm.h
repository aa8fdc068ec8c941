// The one matrix product the tensor-parallel layers use: a row-major fp32
// cblas_sgemm (OpenBLAS) that also accepts empty operands, which the layers
// meet whenever a rank's slice is empty ([Note: uneven split]) or a batch has
// no tokens. BLAS rejects a leading dimension of 0 even when nothing would be
// read, so the empty cases are handled here instead of being passed on.
#pragma once

#include <cstddef>

namespace zeroshard::parallel {

/// Whether an operand is used as stored or transposed.
enum class Trans { no, yes };

/// C = alpha * op(A) * op(B) + beta * C, every matrix row-major fp32:
/// op(A) is [m, k] (A stored [m, k], or [k, m] when ta == Trans::yes),
/// op(B) is [k, n] (B stored [k, n], or [n, k] when tb == Trans::yes), C is
/// [m, n]; every matrix is contiguous (its leading dimension is its stored
/// row length). As BLAS, beta == 0
/// overwrites C without reading it. m == 0 or n == 0 does nothing; k == 0
/// gives C = beta * C. Throws InvariantError when a size exceeds the BLAS
/// integer range. Thread safety: as cblas_sgemm (reentrant).
void sgemm(Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, const float* b,
           float beta, float* c);

/// As sgemm above with each matrix's leading dimension given (the stride, in
/// elements, between consecutive stored rows: at least the stored row
/// length), for operands that are column blocks of wider row-major arrays
/// (an attention head's q, k or v inside the fused qkv rows). The result's
/// bits do not depend on the strides. Throws InvariantError when a size or
/// stride exceeds the BLAS integer range or a stride is below its row length.
void sgemm(Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
           std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

}  // namespace zeroshard::parallel
