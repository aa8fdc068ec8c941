#include "parallel/gemm.h"

#include <algorithm>
#include <limits>

#include <cblas.h>

#include "core/error.h"

namespace zeroshard::parallel {

void sgemm(Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f) {
      std::fill_n(c, m * n, 0.0f);
    } else {
      for (std::size_t i = 0; i < m * n; ++i) c[i] *= beta;
    }
    return;
  }
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<int>::max());
  ZS_CHECK(m <= kMax && n <= kMax && k <= kMax, "sgemm: sizes m={} n={} k={} exceed the BLAS "
           "integer range", m, n, k);
  const auto M = static_cast<int>(m);
  const auto N = static_cast<int>(n);
  const auto K = static_cast<int>(k);
  const bool at = ta == Trans::yes;
  const bool bt = tb == Trans::yes;
  cblas_sgemm(CblasRowMajor, at ? CblasTrans : CblasNoTrans, bt ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, a, at ? M : K, b, bt ? K : N, beta, c, N);
}

}  // namespace zeroshard::parallel
