// LayerNorm and GELU (tanh form) against fp64 references of the torch
// formulas and a central finite-difference check of their backward. No
// communication (both are replicated / element-wise under tensor
// parallelism); every rank runs the same checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "parallel/gelu.h"
#include "parallel/layer_norm.h"
#include "parallel_test_util.h"

namespace zeroshard::parallel {
namespace {

using tptest::random_floats;

// sum_i r[i] y[i] in fp64: the scalar loss the finite differences use.
double dot(const std::vector<float>& r, const std::vector<float>& y) {
  double s = 0;
  for (std::size_t i = 0; i < r.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

// [Note: finite-difference tolerance]
// Central differences (L(p + h) - L(p - h)) / 2h of an fp32 layer with
// h = 1e-2: the truncation error is h^2/6 |L'''| (~2e-5 |L'''|) and the
// rounding noise about u sum|r y| / h (the fp32 outputs round differently
// at p +- h), a few 1e-5 at these sizes; the largest difference measured
// over these tests is 2.4e-5. The check |fd - analytic| <= 2e-3 |analytic|
// + 1e-4 leaves a fourfold margin on that and still catches a gradient term
// off by 1%.
int count_fd_outside(std::vector<float>& param, const std::vector<float>& analytic,
                     const std::function<double()>& loss, const std::string& what) {
  const float h = 1e-2f;
  int bad = 0;
  for (std::size_t i = 0; i < param.size(); ++i) {
    const float saved = param[i];
    param[i] = saved + h;
    const double up = loss();
    param[i] = saved - h;
    const double down = loss();
    param[i] = saved;
    const double fd = (up - down) / (2.0 * h);
    if (!(std::fabs(fd - analytic[i]) <= 2e-3 * std::fabs(analytic[i]) + 1e-4)) {
      if (bad == 0) FAIL_CHECK(what << "[" << i << "]: analytic " << analytic[i] << ", fd " << fd);
      ++bad;
    }
  }
  return bad;
}

TEST_CASE("LayerNorm matches torch's formula and its gradients pass a finite-difference check") {
  for (std::size_t dim : {1u, 7u, 57u}) {
    for (std::size_t tokens : {0u, 1u, 3u}) {
      const std::string what = fmt::format("layer_norm dim={} tokens={}", dim, tokens);
      const auto seed = static_cast<std::uint32_t>(100 * dim + tokens);
      std::vector<float> x = random_floats(tokens * dim, seed + 1, 2.0f);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += 0.5f;  // non-zero mean
      std::vector<float> gamma = random_floats(dim, seed + 2);
      std::vector<float> beta = random_floats(dim, seed + 3);
      const std::vector<float> r = random_floats(tokens * dim, seed + 4);
      LayerNorm ln(dim);
      std::vector<float> y(tokens * dim), mean(tokens), rstd(tokens);
      ln.forward(x, tokens, gamma, beta, y, mean, rstd);

      // fp64 reference; y's rounding error is a few u of |xhat gamma| + |beta|.
      int bad = 0;
      for (std::size_t t = 0; t < tokens; ++t) {
        double mu = 0, var = 0;
        for (std::size_t d = 0; d < dim; ++d) mu += x[t * dim + d];
        mu /= dim;
        for (std::size_t d = 0; d < dim; ++d) var += (x[t * dim + d] - mu) * (x[t * dim + d] - mu);
        var /= dim;
        const double rs = 1.0 / std::sqrt(var + 1e-5);
        for (std::size_t d = 0; d < dim; ++d) {
          const double xh = (x[t * dim + d] - mu) * rs;
          const double want = xh * gamma[d] + beta[d];
          const double mag = std::fabs(xh * gamma[d]) + std::fabs(beta[d]);
          bad += !(std::fabs(y[t * dim + d] - want) <= 8 * std::ldexp(1.0, -24) * mag + 1e-30);
        }
        CHECK(std::fabs(mean[t] - mu) <= 1e-6 * (std::fabs(mu) + 1));
        CHECK(std::fabs(rstd[t] - rs) <= 1e-6 * rs);
      }
      CHECK_MESSAGE(bad == 0, what);
      if (dim == 1) {
        // A single feature normalises to 0: y = beta exactly.
        for (std::size_t t = 0; t < tokens; ++t) CHECK(y[t] == beta[0]);
      }

      std::vector<float> dgamma0 = random_floats(dim, seed + 5, 0.25f);
      std::vector<float> dbeta0 = random_floats(dim, seed + 6, 0.25f);
      std::vector<float> dx(tokens * dim), dgamma = dgamma0, dbeta = dbeta0;
      ln.backward(x, r, tokens, gamma, mean, rstd, dx, dgamma, dbeta);
      for (std::size_t d = 0; d < dim; ++d) {
        dgamma[d] -= dgamma0[d];  // backward adds: keep only this call's part
        dbeta[d] -= dbeta0[d];
      }
      const auto loss = [&] {
        std::vector<float> yy(tokens * dim), mm(tokens), rr(tokens);
        ln.forward(x, tokens, gamma, beta, yy, mm, rr);
        return dot(r, yy);
      };
      CHECK(count_fd_outside(x, dx, loss, what + " dx") == 0);
      CHECK(count_fd_outside(gamma, dgamma, loss, what + " dgamma") == 0);
      CHECK(count_fd_outside(beta, dbeta, loss, what + " dbeta") == 0);
      // In place (dx aliasing dy) gives the same dx.
      std::vector<float> in_place = r, g2(dim), b2(dim);
      ln.backward(x, in_place, tokens, gamma, mean, rstd, in_place, g2, b2);
      CHECK_MESSAGE(in_place == dx, what);
    }
  }
  CHECK_THROWS_AS(LayerNorm(0), ConfigError);
  CHECK_THROWS_AS(LayerNorm(7, -1.0f), ConfigError);
  LayerNorm ln(7);
  std::vector<float> x(14), g(7), b(7), y(14), m(2), r(1);
  CHECK_THROWS_AS(ln.forward(x, 2, g, b, y, m, r), InvariantError);
}

TEST_CASE("GELU (tanh form) matches torch's formula and passes a finite-difference check") {
  std::vector<float> x = random_floats(57, 4242, 4.0f);
  x.push_back(0.0f);
  x.push_back(-10.0f);
  x.push_back(10.0f);
  std::vector<float> y(x.size());
  gelu_forward(x, y);
  const double c = std::sqrt(2.0 / M_PI);
  int bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
    // The fp32 kernel: within 64 half-ulps for |x| <= 4 ([Note: GELU in fp32]).
    bad += !(std::fabs(y[i] - want) <= std::ldexp(1.0, -18) * std::fabs(want) + 1e-30);
  }
  CHECK(bad == 0);
  CHECK(y[57] == 0.0f);
  CHECK(y[59] == 10.0f);  // gelu(x) -> x for large x
  CHECK(std::fabs(y[58]) < 1e-6f);

  const std::vector<float> r = random_floats(x.size(), 4343);
  std::vector<float> dx(x.size());
  gelu_backward(x, r, dx);
  const auto loss = [&] {
    std::vector<float> yy(x.size());
    gelu_forward(x, yy);
    return dot(r, yy);
  };
  CHECK(count_fd_outside(x, dx, loss, "gelu dx") == 0);
  std::vector<float> in_place = r;
  gelu_backward(x, in_place, in_place);
  CHECK(in_place == dx);
  std::vector<float> short_y(3);
  CHECK_THROWS_AS(gelu_forward(x, short_y), InvariantError);
}

}  // namespace
}  // namespace zeroshard::parallel
