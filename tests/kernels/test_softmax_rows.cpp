// kernels::causal_softmax_row / softmax_backward_row (kernels/cpu/activation/
// softmax.h) against fp64 softmax and its gradient, on every SIMD target,
// valid lengths 1-65 around the vector widths: rows sum to 1 within 2^-24,
// entries past `valid` are 0, and a row's bits do not depend on the row
// length it sits in.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include "kernel_test_util.h"
#include "kernels/cpu/activation/softmax.h"
#include "kernels/cpu/simd_targets.h"

using namespace zeroshard;
using zeroshard::testing::test_floats;

TEST_CASE("softmax rows: fp64 reference, sums, zeros past valid, length-free bits") {
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    CAPTURE(std::string(hwy::TargetName(target)));
    for (std::size_t valid = 1; valid <= 65; ++valid) {
      CAPTURE(valid);
      const std::vector<float> s = test_floats(valid, valid, 8.0f, 0);
      const std::vector<float> g = test_floats(valid, valid + 100, 1.0f, 0);
      std::vector<float> p(valid + 7, 5.0f);
      std::copy(s.begin(), s.end(), p.begin());
      kernels::causal_softmax_row(p.data(), valid, p.size());
      double m = s[0], sum = 0, total = 0, worst = 0;
      for (float v : s) m = std::max(m, static_cast<double>(v));
      for (float v : s) sum += std::exp(v - m);
      for (std::size_t j = 0; j < valid; ++j) {
        // exp's 1 ulp, the rounding of s_j - max in fp32 (|s_j - max| 2^-24
        // relative after exp) and the final rounding.
        const double want = std::exp(s[j] - m) / sum;
        const double bound = (4.0 + std::fabs(s[j] - m)) * std::ldexp(1.0, -24);
        worst = std::max(worst, std::fabs(p[j] - want) / want / bound);
        total += p[j];
      }
      CHECK(worst <= 1.0);
      CHECK(std::fabs(total - 1.0) <= std::ldexp(1.0, -24) * 2);
      for (std::size_t j = valid; j < p.size(); ++j) CHECK(p[j] == 0.0f);
      // The same row inside a longer one: the same bits.
      std::vector<float> q(valid + 40, -3.0f);
      std::copy(s.begin(), s.end(), q.begin());
      kernels::causal_softmax_row(q.data(), valid, q.size());
      CHECK(std::memcmp(q.data(), p.data(), valid * 4) == 0);
      // Backward: scale p (g - p.g).
      std::vector<float> d(valid + 7, 9.0f);
      std::copy(g.begin(), g.end(), d.begin());
      kernels::softmax_backward_row(p.data(), d.data(), valid, d.size(), 0.5f);
      double dot = 0;
      for (std::size_t j = 0; j < valid; ++j) dot += static_cast<double>(p[j]) * g[j];
      for (std::size_t j = 0; j < valid; ++j) {
        const double want = 0.5 * p[j] * (g[j] - dot);
        CHECK(std::fabs(d[j] - want) <= 1e-6 * (std::fabs(p[j]) + 1e-30) * 4);
      }
      for (std::size_t j = valid; j < d.size(); ++j) CHECK(d[j] == 0.0f);
    }
  }
  kernels::force_simd_target(0);
}
