// parallel::sgemm (parallel/gemm.h): every transpose pair against an fp64
// product, the strided form bitwise equal to the contiguous one whatever
// the strides (the attention's per-head numbers rely on it), the empty
// cases, and strides below a row's length refused.
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "parallel/gemm.h"

using namespace zeroshard;
using namespace zeroshard::parallel;

namespace {

std::vector<float> random_matrix(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Copies a rows x cols contiguous matrix into a wider array with stride ld
// (the other columns hold 7s, which a correct call never reads).
std::vector<float> widen(const std::vector<float>& a, std::size_t rows, std::size_t cols, std::size_t ld) {
  std::vector<float> w(rows * ld, 7.0f);
  for (std::size_t i = 0; i < rows; ++i) std::memcpy(&w[i * ld], &a[i * cols], cols * 4);
  return w;
}

}  // namespace

TEST_CASE("sgemm: every transpose pair matches an fp64 product; strides do not change a bit") {
  using Shape = std::array<std::size_t, 3>;
  for (const Shape& shape : {Shape{64, 64, 32}, Shape{7, 57, 1}, Shape{1, 1, 10001}, Shape{57, 7, 13}}) {
    const std::size_t m = shape[0], n = shape[1], k = shape[2];
    for (const Trans ta : {Trans::no, Trans::yes}) {
      for (const Trans tb : {Trans::no, Trans::yes}) {
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        const std::size_t ar = ta == Trans::yes ? k : m;
        const std::size_t ac = ta == Trans::yes ? m : k;
        const std::size_t br = tb == Trans::yes ? n : k;
        const std::size_t bc = tb == Trans::yes ? k : n;
        const std::vector<float> a = random_matrix(ar * ac, 1);
        const std::vector<float> b = random_matrix(br * bc, 2);
        // beta = 0 never reads C: NaNs there must not reach the result.
        std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
        sgemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.0f, c.data());
        double worst = 0;
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n; ++j) {
            double want = 0;
            for (std::size_t l = 0; l < k; ++l) {
              const double x = ta == Trans::yes ? a[l * ac + i] : a[i * ac + l];
              const double y = tb == Trans::yes ? b[j * bc + l] : b[l * bc + j];
              want += x * y;
            }
            const double err = std::fabs(c[i * n + j] - 0.5 * want) / std::sqrt(double(k));
            worst = std::isnan(err) ? 1.0 : std::max(worst, err);
          }
        }
        CHECK(worst <= 1e-6);
        // The same operands inside wider rows (as a head's q inside qkv rows).
        const std::size_t lda = ac + 5;
        const std::size_t ldb = bc + 96;
        const std::size_t ldc = n + 3;
        const std::vector<float> wa = widen(a, ar, ac, lda);
        const std::vector<float> wb = widen(b, br, bc, ldb);
        std::vector<float> wc(m * ldc, -1.0f);
        sgemm(ta, tb, m, n, k, 0.5f, wa.data(), lda, wb.data(), ldb, 0.0f, wc.data(), ldc);
        int differ = 0;
        for (std::size_t i = 0; i < m; ++i) {
          differ += std::memcmp(&wc[i * ldc], &c[i * n], n * 4) != 0;
          for (std::size_t j = n; j < ldc; ++j) differ += wc[i * ldc + j] != -1.0f;
        }
        CHECK(differ == 0);
      }
    }
  }
}

TEST_CASE("sgemm: empty sizes, k = 0 and bad strides") {
  std::vector<float> c(6, 2.0f);
  sgemm(Trans::no, Trans::no, 0, 3, 4, 1.0f, nullptr, nullptr, 0.0f, c.data());
  CHECK(c == std::vector<float>(6, 2.0f));
  // k = 0: C = beta C, and with a stride the gap is left alone.
  sgemm(Trans::no, Trans::no, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 3);
  CHECK(c == std::vector<float>{1, 1, 2, 1, 1, 2});
  sgemm(Trans::no, Trans::no, 2, 3, 0, 1.0f, nullptr, nullptr, 0.0f, c.data());
  CHECK(c == std::vector<float>(6, 0.0f));
  const std::vector<float> a(6, 1.0f);
  CHECK_THROWS_AS(sgemm(Trans::no, Trans::no, 2, 2, 3, 1.0f, a.data(), 2, a.data(), 2, 0.0f, c.data(), 2),
                  InvariantError);  // lda 2 < k 3
  CHECK_THROWS_AS(sgemm(Trans::no, Trans::no, 2, 2, 1, 1.0f, a.data(), 1, a.data(), 2, 0.0f, c.data(), 1),
                  InvariantError);  // ldc 1 < n 2
}
