#include "parallel/gemm.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include <cblas.h>

#include "core/error.h"

// OpenBLAS's name for its kernel set; a weak reference, null with another
// BLAS library.
extern "C" char* openblas_get_corename(void);
#pragma weak openblas_get_corename

namespace zeroshard::parallel {
namespace {

// Whether the BLAS zeroes C for beta == 0 one float at a time: OpenBLAS's
// Haswell and Zen kernel sets do (sgemm_beta; 5% of the GPT's step on an AMD
// EPYC), then accumulate into C as with beta == 1, so zeroing C here with
// memset and passing beta 1 is the same arithmetic, faster. Its AVX-512
// sets have a vector beta pass and beta-0 kernels of their own (direct and
// small-matrix ones), and other BLAS libraries are not known: C is left to
// them.
bool blas_zeroes_c_slowly() {
  static const bool slow = [] {
    if (&openblas_get_corename == nullptr) return false;  // not OpenBLAS
    const char* core = openblas_get_corename();
    const std::string_view name = core == nullptr ? "" : core;
    return name == "Haswell" || name == "Zen";
  }();
  return slow;
}

}  // namespace

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
  if (beta == 0.0f && blas_zeroes_c_slowly()) {
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
