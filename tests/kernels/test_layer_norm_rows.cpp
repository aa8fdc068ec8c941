// kernels::layer_norm_forward / layer_norm_backward ([Note: vector
// LayerNorm]): a row's results are the same bits whatever its position and
// the number of rows, for widths around the vector lengths, on every SIMD
// target; in place (y = x, dx = dy); and against fp64 sums written out here.
// tests/parallel/test_layer_norm_gelu.cpp checks the layer's gradients.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include "kernel_test_util.h"
#include "kernels/cpu/activation/layer_norm.h"
#include "kernels/cpu/simd_targets.h"

using namespace zeroshard;
using zeroshard::testing::test_floats;

TEST_CASE("LayerNorm rows: position-free bits, in place, fp64 statistics") {
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    CAPTURE(std::string(hwy::TargetName(target)));
    for (const std::size_t dim : {1, 7, 8, 15, 16, 17, 57, 128}) {
      CAPTURE(dim);
      const std::size_t rows = 9;
      std::vector<float> x = test_floats(rows * dim, dim, 3.0f, 0);
      for (auto& v : x) v += 0.75f;
      const std::vector<float> gamma = test_floats(dim, dim + 1, 1.0f, 0);
      const std::vector<float> beta = test_floats(dim, dim + 2, 1.0f, 0);
      const std::vector<float> dy = test_floats(rows * dim, dim + 3, 1.0f, 0);
      std::vector<float> y(rows * dim), mean(rows), rstd(rows), dx(rows * dim), dg(dim, 0.5f), db(dim, -0.5f);
      kernels::layer_norm_forward(x.data(), rows, dim, gamma.data(), beta.data(), 1e-5f, y.data(), mean.data(),
                                  rstd.data());
      kernels::layer_norm_backward(x.data(), dy.data(), rows, dim, gamma.data(), mean.data(), rstd.data(), dx.data(),
                                   dg.data(), db.data());
      for (std::size_t t = 0; t < rows; ++t) {
        // Row t alone gives the same bits as inside the block of rows.
        std::vector<float> y1(dim), m1(1), r1(1), dx1(dim), dg1(dim, 0.0f), db1(dim, 0.0f);
        kernels::layer_norm_forward(x.data() + t * dim, 1, dim, gamma.data(), beta.data(), 1e-5f, y1.data(), m1.data(),
                                    r1.data());
        kernels::layer_norm_backward(x.data() + t * dim, dy.data() + t * dim, 1, dim, gamma.data(), m1.data(),
                                     r1.data(), dx1.data(), dg1.data(), db1.data());
        CHECK(std::memcmp(y1.data(), y.data() + t * dim, dim * 4) == 0);
        CHECK(std::memcmp(dx1.data(), dx.data() + t * dim, dim * 4) == 0);
        CHECK(m1[0] == mean[t]);
        CHECK(r1[0] == rstd[t]);
        // The statistics: fp64 sums rounded once.
        double mu = 0, var = 0;
        for (std::size_t d = 0; d < dim; ++d) mu += x[t * dim + d];
        mu /= static_cast<double>(dim);
        for (std::size_t d = 0; d < dim; ++d) var += (x[t * dim + d] - mu) * (x[t * dim + d] - mu);
        const double rs = 1.0 / std::sqrt(var / static_cast<double>(dim) + 1e-5);
        CHECK(mean[t] == static_cast<float>(mu));
        CHECK(std::fabs(rstd[t] - rs) <= std::ldexp(1.0, -23) * rs);
      }
      // dgamma and dbeta are added into: the rows' sums on top of 0.5 and -0.5.
      double sum_dy0 = 0;
      for (std::size_t t = 0; t < rows; ++t) sum_dy0 += dy[t * dim];
      CHECK(std::fabs(db[0] - (-0.5 + sum_dy0)) <= 1e-5);
      // In place.
      std::vector<float> xi = x;
      std::vector<float> mi(rows), ri(rows);
      kernels::layer_norm_forward(xi.data(), rows, dim, gamma.data(), beta.data(), 1e-5f, xi.data(), mi.data(),
                                  ri.data());
      CHECK(xi == y);
      std::vector<float> di = dy, dg2(dim, 0.5f), db2(dim, -0.5f);
      kernels::layer_norm_backward(x.data(), di.data(), rows, dim, gamma.data(), mean.data(), rstd.data(), di.data(),
                                   dg2.data(), db2.data());
      CHECK(di == dx);
      CHECK(dg2 == dg);
      CHECK(db2 == db);
    }
  }
  kernels::force_simd_target(0);
}
