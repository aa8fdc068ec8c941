// Muon's element-wise parts (kernels/cpu/muon/muon_update.h) against the
// reference implementation's formulas computed in double: the momentum
// (plain and Nesterov) over 3 steps, the two scales, decoupled weight
// decay; a whole step on one matrix (momentum, Newton-Schulz, apply)
// against the same step in double; bad arguments refused.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/muon/muon_update.h"
#include "kernels/cpu/muon/newton_schulz.h"

using namespace zeroshard;
using kernels::MuonScale;

namespace {

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

TEST_CASE("muon_momentum: m = beta m + (1 - beta) g; Nesterov u = beta m + (1 - beta) g, 3 steps") {
  for (const bool nesterov : {false, true}) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{57}}) {
      CAPTURE(nesterov);
      CAPTURE(n);
      const float beta = 0.95f;
      std::vector<float> m(n, 0.0f), u(n);
      std::vector<double> md(n, 0.0);
      for (int step = 0; step < 3; ++step) {
        const auto g = random_values(n, 10 * n + static_cast<std::size_t>(step));
        kernels::muon_momentum(m.data(), g.data(), u.data(), n, beta, nesterov);
        for (std::size_t i = 0; i < n; ++i) {
          md[i] = double(beta) * md[i] + (1.0 - double(beta)) * g[i];
          const double ud = nesterov ? double(beta) * md[i] + (1.0 - double(beta)) * g[i] : md[i];
          CHECK(std::abs(m[i] - md[i]) <= 1e-6 * (1.0 + std::abs(md[i])));
          CHECK(std::abs(u[i] - ud) <= 1e-6 * (1.0 + std::abs(ud)));
        }
      }
    }
  }
  // update may alias grad, as the reference's grad.lerp_ does.
  std::vector<float> m(5, 0.5f), g = random_values(5, 3), m2 = m, u(5);
  kernels::muon_momentum(m2.data(), g.data(), u.data(), 5, 0.9f, true);
  kernels::muon_momentum(m.data(), g.data(), g.data(), 5, 0.9f, true);
  CHECK(g == u);
  CHECK(m == m2);
}

TEST_CASE("muon_scale: 0.2 sqrt(max(m, n)) and sqrt(max(1, m / n))") {
  CHECK(kernels::muon_scale(MuonScale::rms_match, 128, 512) == static_cast<float>(0.2 * std::sqrt(512.0)));
  CHECK(kernels::muon_scale(MuonScale::rms_match, 7, 3) == static_cast<float>(0.2 * std::sqrt(7.0)));
  CHECK(kernels::muon_scale(MuonScale::shape, 512, 128) == 2.0f);
  CHECK(kernels::muon_scale(MuonScale::shape, 128, 512) == 1.0f);
  CHECK_THROWS_AS(kernels::muon_scale(MuonScale::shape, 0, 4), InvariantError);
  CHECK_THROWS_AS(kernels::muon_momentum(nullptr, nullptr, nullptr, 0, 1.0f, true), InvariantError);
}

TEST_CASE("muon_apply: p (1 - lr wd) - lr scale o") {
  const std::size_t n = 57;
  auto p = random_values(n, 1), o = random_values(n, 2);
  const std::vector<float> p0 = p;
  kernels::muon_apply(p.data(), o.data(), n, 0.02f, 0.1f, 1.5f);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = p0[i] * (1.0 - 0.02 * 0.1) - 0.02 * 1.5 * o[i];
    CHECK(std::abs(p[i] - want) <= 1e-6 * (1.0 + std::abs(want)));
  }
}

TEST_CASE("one Muon step on a 7 x 13 matrix equals the same step in double") {
  const std::size_t rows = 7, cols = 13, n = rows * cols;
  auto p = random_values(n, 5);
  const auto g = random_values(n, 6);
  std::vector<float> m(n, 0.0f), u(n), o(n);
  const float lr = 0.02f, wd = 0.01f, beta = 0.95f;
  const float scale = kernels::muon_scale(MuonScale::rms_match, rows, cols);
  const std::vector<float> p0 = p;
  kernels::muon_momentum(m.data(), g.data(), u.data(), n, beta, true);
  kernels::newton_schulz(u.data(), o.data(), rows, cols, 5);
  kernels::muon_apply(p.data(), o.data(), n, lr, wd, scale);

  std::vector<double> ud(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double md = (1.0 - double(beta)) * g[i];
    ud[i] = double(beta) * md + (1.0 - double(beta)) * g[i];
  }
  const auto od = kernels::newton_schulz_reference(ud, rows, cols, 5);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = p0[i] * (1.0 - double(lr) * wd) - double(lr) * 0.2 * std::sqrt(13.0) * od[i];
    CHECK(std::abs(p[i] - want) <= 2e-6 * (1.0 + std::abs(want)));
  }
}
