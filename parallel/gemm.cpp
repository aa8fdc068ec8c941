#include "parallel/gemm.h"

#include <algorithm>
#include <limits>

#include <cblas.h>

#include "core/error.h"

namespace zeroshard::parallel {

void sgemm(Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
           std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  ZS_CHECK(ldc >= n, "sgemm: ldc={} is below the row length n={}", ldc, n);
  if (k == 0) {
    for (std::size_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.0f) {
        std::fill_n(row, n, 0.0f);
      } else {
        for (std::size_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  const bool at = ta == Trans::yes;
  const bool bt = tb == Trans::yes;
  ZS_CHECK(lda >= (at ? m : k) && ldb >= (bt ? k : n),
           "sgemm: lda={} or ldb={} is below its "
           "stored row length ({}, {})",
           lda, ldb, at ? m : k, bt ? k : n);
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<int>::max());
  ZS_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
           "sgemm: sizes m={} n={} k={} or strides {}, {}, {} exceed the BLAS integer range", m, n, k, lda, ldb, ldc);
  // beta == 0: C zeroed here and accumulated into (beta 1), the same
  // arithmetic as OpenBLAS's own beta == 0 path, which zeroes C first too,
  // but with scalar stores (sgemm_beta for Haswell/Zen: 5% of the GPT's step
  // on an AMD EPYC).
  if (beta == 0.0f) {
    if (ldc == n) {
      std::fill_n(c, m * n, 0.0f);
    } else {
      for (std::size_t i = 0; i < m; ++i) std::fill_n(c + i * ldc, n, 0.0f);
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, at ? CblasTrans : CblasNoTrans, bt ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

void sgemm(Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a, const float* b,
           float beta, float* c) {
  sgemm(ta, tb, m, n, k, alpha, a, ta == Trans::yes ? m : k, b, tb == Trans::yes ? k : n, beta, c, n);
}

}  // namespace zeroshard::parallel
