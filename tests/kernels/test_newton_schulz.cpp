// Newton-Schulz orthogonalization (kernels/cpu/muon/newton_schulz.h)
// against its closed form: for G = U diag(s) V^T built from random
// orthonormal U, V, the iteration maps each singular value through the
// quintic p five times and keeps U and V, so the result is
// U diag(p^5(s_i / ||G||_F)) V^T ([Note: Newton-Schulz iteration]). Checked
// for the double reference (1e-12), fp32 (2e-5 of the largest entry) and
// bf16 as the reference implementation runs it (8%, see below), on square,
// wide and tall matrices of odd sizes; the singular values of the result
// land in [0.68, 1.14] when every s_i / ||G||_F >= 0.01.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/muon/newton_schulz.h"

using namespace zeroshard;
using kernels::NewtonSchulzPrecision;

namespace {

// rows x k matrix (row-major) with orthonormal columns: Gram-Schmidt, twice,
// over Gaussian columns.
std::vector<double> orthonormal_columns(std::size_t rows, std::size_t k, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> q(rows * k);
  for (double& v : q) v = normal(rng);
  for (std::size_t j = 0; j < k; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t l = 0; l < j; ++l) {
        double dot = 0;
        for (std::size_t i = 0; i < rows; ++i) dot += q[i * k + j] * q[i * k + l];
        for (std::size_t i = 0; i < rows; ++i) q[i * k + j] -= dot * q[i * k + l];
      }
    }
    double norm = 0;
    for (std::size_t i = 0; i < rows; ++i) norm += q[i * k + j] * q[i * k + j];
    for (std::size_t i = 0; i < rows; ++i) q[i * k + j] /= std::sqrt(norm);
  }
  return q;
}

// U diag(s) V^T for U (rows x k), V (cols x k).
std::vector<double> compose(const std::vector<double>& u, const std::vector<double>& s, const std::vector<double>& v,
                            std::size_t rows, std::size_t cols) {
  const std::size_t k = s.size();
  std::vector<double> g(rows * cols, 0.0);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      for (std::size_t l = 0; l < k; ++l) g[i * cols + j] += u[i * k + l] * s[l] * v[j * k + l];
    }
  }
  return g;
}

double quintic(double x) {
  const kernels::NewtonSchulzCoefficients c;
  return c.a * x + c.b * x * x * x + c.c * x * x * x * x * x;
}

struct Case {
  std::vector<double> g, want;  // G and U diag(p^5(s / ||G||_F)) V^T
  std::vector<double> singular;  // p^5(s / ||G||_F)
};

// Singular values spread in [smallest, 1] x 3 (a Frobenius norm well above 1).
Case make_case(std::size_t rows, std::size_t cols, double smallest, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t k = std::min(rows, cols);
  const auto u = orthonormal_columns(rows, k, rng), v = orthonormal_columns(cols, k, rng);
  std::vector<double> s(k);
  for (std::size_t l = 0; l < k; ++l) s[l] = 3.0 * (k == 1 ? 1.0 : smallest + (1.0 - smallest) * double(l) / double(k - 1));
  double norm = 0;
  for (double x : s) norm += x * x;
  norm = std::sqrt(norm) + 1e-7;
  Case c;
  c.g = compose(u, s, v, rows, cols);
  for (double x : s) {
    double y = x / norm;
    for (int i = 0; i < 5; ++i) y = quintic(y);
    c.singular.push_back(y);
  }
  c.want = compose(u, c.singular, v, rows, cols);
  return c;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

template <class T>
double max_diff(const std::vector<T>& got, const std::vector<double>& want) {
  double m = 0;
  for (std::size_t i = 0; i < want.size(); ++i) m = std::max(m, std::abs(double(got[i]) - want[i]));
  return m;
}

const std::pair<std::size_t, std::size_t> kShapes[] = {{1, 1}, {1, 5}, {5, 1}, {7, 13}, {13, 7}, {64, 64}, {100, 37}, {37, 100}};

}  // namespace

TEST_CASE("newton_schulz: the double reference, fp32 and bf16 equal the closed form") {
  for (const auto& [r, c] : kShapes) {
    const std::size_t rows = r, cols = c;
    CAPTURE(rows);
    CAPTURE(cols);
    // Smallest normalized singular value above 0.01 for up to 100 of them.
    const Case k = make_case(rows, cols, 0.2, 31 * rows + cols);
    const double scale = max_abs(k.want);
    CHECK(max_diff(kernels::newton_schulz_reference(k.g, rows, cols, 5), k.want) <= 1e-12 * std::max(1.0, scale));

    std::vector<float> g(k.g.begin(), k.g.end()), out(rows * cols);
    kernels::newton_schulz(g.data(), out.data(), rows, cols, 5);
    CHECK(max_diff(out, k.want) <= 2e-5 * scale);

    // bf16: every tensor rounded to 8 significant bits (unit roundoff 2^-9)
    // as it is formed, about 8 roundings a step, amplified by p' (up to a =
    // 3.44 for small values) over 5 steps. Measured at most 6.0% of the
    // largest entry over these shapes (7 x 13); checked at 8%.
    kernels::newton_schulz(g.data(), out.data(), rows, cols, 5, NewtonSchulzPrecision::bf16);
    CHECK(max_diff(out, k.want) <= 0.08 * scale);

    // In place (out aliases g) gives the same bits.
    std::vector<float> in_place = g, separate(rows * cols);
    kernels::newton_schulz(g.data(), separate.data(), rows, cols, 5);
    kernels::newton_schulz(in_place.data(), in_place.data(), rows, cols, 5);
    CHECK(in_place == separate);
  }
}

TEST_CASE("newton_schulz: singular values of the result lie in [0.68, 1.14] when each is >= 0.01 of the norm") {
  // p^5 over the normalized values, the band the note states.
  for (double x = 0.01; x <= 1.0; x += 1e-4) {
    double y = x;
    for (int i = 0; i < 5; ++i) y = quintic(y);
    REQUIRE(y >= 0.68);
    REQUIRE(y <= 1.14);
  }
  // And in a matrix whose smallest normalized singular value is about 0.01.
  const Case k = make_case(40, 60, 0.05, 7);
  for (double s : k.singular) {
    CHECK(s >= 0.68);
    CHECK(s <= 1.14);
  }
}

TEST_CASE("newton_schulz: 0 steps is G / (||G||_F + 1e-7); bad shapes are refused") {
  const std::vector<float> g = {3.0f, 0.0f, 0.0f, 4.0f};
  std::vector<float> out(4);
  kernels::newton_schulz(g.data(), out.data(), 2, 2, 0);
  CHECK(out[0] == static_cast<float>(3.0f / static_cast<float>(5.0 + 1e-7)));
  CHECK(out[3] == static_cast<float>(4.0f / static_cast<float>(5.0 + 1e-7)));
  CHECK_THROWS_AS(kernels::newton_schulz(g.data(), out.data(), 0, 2, 5), InvariantError);
  CHECK_THROWS_AS(kernels::newton_schulz(g.data(), out.data(), 2, 2, -1), InvariantError);
  CHECK_THROWS_AS(kernels::newton_schulz_reference({1.0, 2.0}, 2, 2, 5), InvariantError);
}
