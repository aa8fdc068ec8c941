#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/muon/newton_schulz.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace zeroshard::kernels {

namespace {

void check_shape(std::size_t rows, std::size_t cols, int steps) {
  ZS_CHECK(rows > 0 && cols > 0, "newton_schulz: a {} x {} matrix has no elements", rows, cols);
  ZS_CHECK(steps >= 0, "newton_schulz: steps must be >= 0, got {}", steps);
}

// x[i] rounded to bf16 and back (round to nearest even) when `bf16`.
void round_to(float* x, std::size_t n, bool bf16) {
  if (!bf16) return;
  for (std::size_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

// c = alpha * a[m x k] b^T (b: n x k) with fp32 accumulation: C = A B^T.
void gemm_nt(const float* a, const float* b, float* c, std::size_t m, std::size_t n, std::size_t k, float alpha) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
              alpha, a, static_cast<int>(k), b, static_cast<int>(k), 0.0f, c, static_cast<int>(n));
}

// c = a[m x k] b[k x n].
void gemm_nn(const float* a, const float* b, float* c, std::size_t m, std::size_t n, std::size_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

}  // namespace

void newton_schulz(const float* g, float* out, std::size_t rows, std::size_t cols, int steps,
                   NewtonSchulzPrecision precision, NewtonSchulzCoefficients k) {
  check_shape(rows, cols, steps);
  const bool bf16 = precision == NewtonSchulzPrecision::bf16;
  const bool transposed = rows > cols;
  const std::size_t m = std::min(rows, cols), n = std::max(rows, cols);
  std::vector<float> x(m * n), t(m * n), a(m * m), aa(m * m);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) (transposed ? x[j * n + i] : x[i * n + j]) = g[i * cols + j];
  }
  round_to(x.data(), x.size(), bf16);  // X = G.bfloat16()
  double squares = 0;
  for (float v : x) squares += static_cast<double>(v) * v;
  const float scale = static_cast<float>(std::sqrt(squares) + 1e-7);
  for (float& v : x) v /= scale;
  round_to(x.data(), x.size(), bf16);
  for (int s = 0; s < steps; ++s) {
    gemm_nt(x.data(), x.data(), a.data(), m, m, n, 1.0f);  // A = X X^T
    round_to(a.data(), a.size(), bf16);
    gemm_nn(a.data(), a.data(), aa.data(), m, m, m);  // A A
    round_to(aa.data(), aa.size(), bf16);
    for (std::size_t i = 0; i < a.size(); ++i) {  // B = b A + c (A A), into a
      float ba = k.b * a[i], caa = k.c * aa[i];
      if (bf16) ba = bf16_to_float(float_to_bf16(ba)), caa = bf16_to_float(float_to_bf16(caa));
      a[i] = ba + caa;
    }
    round_to(a.data(), a.size(), bf16);
    gemm_nn(a.data(), x.data(), t.data(), m, n, m);  // B X
    round_to(t.data(), t.size(), bf16);
    for (std::size_t i = 0; i < x.size(); ++i) {  // X = a X + B X
      float ax = k.a * x[i];
      if (bf16) ax = bf16_to_float(float_to_bf16(ax));
      x[i] = ax + t[i];
    }
    round_to(x.data(), x.size(), bf16);
  }
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) out[i * cols + j] = transposed ? x[j * n + i] : x[i * n + j];
  }
}

std::vector<double> newton_schulz_reference(const std::vector<double>& g, std::size_t rows, std::size_t cols,
                                            int steps, NewtonSchulzCoefficients k) {
  check_shape(rows, cols, steps);
  ZS_CHECK(g.size() == rows * cols, "newton_schulz_reference: {} elements for a {} x {} matrix", g.size(), rows,
           cols);
  const bool transposed = rows > cols;
  const std::size_t m = std::min(rows, cols), n = std::max(rows, cols);
  std::vector<double> x(m * n), t(m * n), a(m * m), aa(m * m);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) (transposed ? x[j * n + i] : x[i * n + j]) = g[i * cols + j];
  }
  double squares = 0;
  for (double v : x) squares += v * v;
  const double scale = std::sqrt(squares) + 1e-7;
  for (double& v : x) v /= scale;
  for (int s = 0; s < steps; ++s) {
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < m; ++j) {
        double sum = 0;
        for (std::size_t l = 0; l < n; ++l) sum += x[i * n + l] * x[j * n + l];
        a[i * m + j] = sum;
      }
    }
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < m; ++j) {
        double sum = 0;
        for (std::size_t l = 0; l < m; ++l) sum += a[i * m + l] * a[l * m + j];
        aa[i * m + j] = sum;
      }
    }
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = k.b * a[i] + k.c * aa[i];
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::size_t l = 0; l < m; ++l) sum += a[i * m + l] * x[l * n + j];
        t[i * n + j] = sum;
      }
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = k.a * x[i] + t[i];
  }
  std::vector<double> out(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) out[i * cols + j] = transposed ? x[j * n + i] : x[i * n + j];
  }
  return out;
}

}  // namespace zeroshard::kernels
