// kernels::gelu_tanh_forward / gelu_tanh_backward / gelu_tanh_forward_slope
// ([Note: GELU in fp32])
// against their fp64 references over a dense grid and random values, the
// same bits for the same x wherever it sits (sizes 0, 1, 7, 57, 10001 at
// every offset of a longer array), on every SIMD target with FMA, in place,
// and NaN / infinity.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include "kernel_test_util.h"
#include "kernels/cpu/activation/gelu.h"
#include "kernels/cpu/simd_targets.h"

using namespace zeroshard;
using namespace zeroshard::kernels;

namespace {

// The grid [-12, 12] in steps of 1/1024, and 0.
std::vector<float> grid() {
  std::vector<float> x;
  for (int i = -12 * 1024; i <= 12 * 1024; ++i) x.push_back(static_cast<float>(i) / 1024.0f);
  return x;
}

// |got - want| / |want| in units of 2^-24 (fp32's half ulp at 1), and 0
// when both are 0.
double rel_ulps(float got, float want) {
  if (got == want) return 0.0;
  return std::fabs(static_cast<double>(got) - want) / std::fabs(static_cast<double>(want)) * std::ldexp(1.0, 24);
}

bool fma_target() {
  const std::string name = kernels::simd_target_name();
  return name != "EMU128" && name != "SCALAR";
}

}  // namespace

TEST_CASE("GELU kernel: within a few ulp of its fp64 reference, forward and backward") {
  std::vector<float> x = grid();
  const std::vector<float> r = zeroshard::testing::test_floats(x.size(), 77, 1.0f, 0);
  std::vector<float> want_y(x.size()), want_dx(x.size()), y(x.size()), dx(x.size());
  gelu_tanh_forward_reference(x.data(), want_y.data(), x.size());
  gelu_tanh_backward_reference(x.data(), r.data(), want_dx.data(), x.size());
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    CAPTURE(std::string(hwy::TargetName(target)));
    gelu_tanh_forward(x.data(), y.data(), x.size());
    gelu_tanh_backward(x.data(), r.data(), dx.data(), x.size());
    double worst_y = 0, worst_dx = 0, worst_tiny = 0;
    std::size_t worst_at = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      // Below 1e-30 in magnitude (x below about -9), absolutely within 1e-35
      // (the note).
      if (std::fabs(want_y[i]) < 1e-30f) {
        worst_tiny = std::max(worst_tiny, std::fabs(static_cast<double>(y[i]) - want_y[i]));
      } else {
        // 16 half-ulps, plus the rounding of u amplified by exp(-2u): 4 |2u|.
        const double v = x[i];
        const double bound = 16.0 + 8.0 * std::fabs(0.7978845608028654 * (v + 0.044715 * v * v * v));
        if (rel_ulps(y[i], want_y[i]) / bound > worst_y) {
          worst_y = rel_ulps(y[i], want_y[i]) / bound;
          worst_at = i;
        }
      }
      // gelu' crosses 0 near x = -0.75: there the bound is relative to |dy|.
      const double scale = std::max(std::fabs(static_cast<double>(want_dx[i])), 0.1 * std::fabs(r[i]));
      if (scale > 1e-30) {
        worst_dx = std::max(worst_dx, std::fabs(static_cast<double>(dx[i]) - want_dx[i]) / scale * std::ldexp(1.0, 24));
      }
    }
    MESSAGE("worst forward ", worst_y, " of its bound (x = ", x[worst_at], ": ", y[worst_at], " vs ", want_y[worst_at],
            "), backward ", worst_dx, ", tiny ", worst_tiny);
    CHECK(worst_y <= 1.0);
    CHECK(worst_dx <= 16.0);
    CHECK(worst_tiny <= 1e-35);
    CHECK(y[12 * 1024] == 0.0f);                  // gelu(0) = 0
    CHECK(y.back() == 12.0f);                     // gelu(x) -> x
    CHECK(std::fabs(y.front()) < 1e-30f);         // gelu(-12) -> -0
    CHECK(dx[12 * 1024] == 0.5f * r[12 * 1024]);  // gelu'(0) = 1/2
  }
  kernels::force_simd_target(0);
}

TEST_CASE("GELU kernel: the same bits for the same x at any offset and length, on every FMA target") {
  const std::vector<float> big = zeroshard::testing::test_floats(10001 + 64, 4242, 6.0f, 0);
  const std::vector<float> dy = zeroshard::testing::test_floats(big.size(), 4343, 1.0f, 0);
  std::vector<float> first_y;  // the first FMA target's results
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    if (!fma_target()) continue;
    CAPTURE(std::string(hwy::TargetName(target)));
    std::vector<float> full_y(big.size()), full_dx(big.size());
    gelu_tanh_forward(big.data(), full_y.data(), big.size());
    gelu_tanh_backward(big.data(), dy.data(), full_dx.data(), big.size());
    if (first_y.empty()) first_y = full_y;
    CHECK(std::memcmp(first_y.data(), full_y.data(), big.size() * sizeof(float)) == 0);
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      for (std::size_t off = 0; off < 17 && off + n <= big.size(); ++off) {
        CAPTURE(n);
        CAPTURE(off);
        std::vector<float> y(n + 1, -1.0f), dx(n + 1, -1.0f);
        gelu_tanh_forward(big.data() + off, y.data(), n);
        gelu_tanh_backward(big.data() + off, dy.data() + off, dx.data(), n);
        CHECK(std::memcmp(y.data(), full_y.data() + off, n * sizeof(float)) == 0);
        CHECK(std::memcmp(dx.data(), full_dx.data() + off, n * sizeof(float)) == 0);
        CHECK(y[n] == -1.0f);  // nothing written past n
        CHECK(dx[n] == -1.0f);
      }
    }
    // In place: y = x, dx = dy.
    std::vector<float> in_place(big.begin(), big.begin() + 57);
    gelu_tanh_forward(in_place.data(), in_place.data(), in_place.size());
    CHECK(std::memcmp(in_place.data(), full_y.data(), 57 * sizeof(float)) == 0);
    std::vector<float> grad(dy.begin(), dy.begin() + 57);
    gelu_tanh_backward(big.data(), grad.data(), grad.data(), grad.size());
    CHECK(std::memcmp(grad.data(), full_dx.data(), 57 * sizeof(float)) == 0);
  }
  kernels::force_simd_target(0);
}

TEST_CASE("GELU kernel: NaN gives NaN, infinities their limits") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {nan, inf, -inf, 1.0f, 1.0f};
  const std::vector<float> dy = {1.0f, 1.0f, 1.0f, nan, 2.0f};
  std::vector<float> y(x.size()), dx(x.size());
  gelu_tanh_forward(x.data(), y.data(), x.size());
  gelu_tanh_backward(x.data(), dy.data(), dx.data(), x.size());
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == inf);
  CHECK(y[2] == -inf);  // x s with s subnormal
  CHECK(std::isnan(dx[0]));
  CHECK(std::isnan(dx[3]));
  CHECK(std::isfinite(dx[4]));
}

TEST_CASE("GELU kernel: forward with slope is bitwise forward, and dy * slope bitwise backward") {
  // memcmp may not be given the null data() of an empty vector, even for 0 bytes.
  const auto same_bits = [](const float* a, const float* b, std::size_t n) {
    return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
  };
  const std::vector<float> big = zeroshard::testing::test_floats(10001 + 64, 5151, 6.0f, 0);
  const std::vector<float> dy = zeroshard::testing::test_floats(big.size(), 5252, 1.0f, 0);
  for (const std::int64_t target : kernels::simd_targets()) {
    kernels::force_simd_target(target);
    CAPTURE(std::string(hwy::TargetName(target)));
    for (const std::size_t n : {0, 1, 7, 57, 10001}) {
      for (const std::size_t off : {0, 3, 16}) {
        CAPTURE(n);
        CAPTURE(off);
        const float* x = big.data() + off;
        std::vector<float> want_y(n), want_dx(n), y(n + 1, -1.0f), slope(n + 1, -1.0f);
        gelu_tanh_forward(x, want_y.data(), n);
        gelu_tanh_backward(x, dy.data() + off, want_dx.data(), n);
        gelu_tanh_forward_slope(x, y.data(), slope.data(), n);
        CHECK(same_bits(y.data(), want_y.data(), n));
        CHECK(y[n] == -1.0f);  // nothing written past n
        CHECK(slope[n] == -1.0f);
        std::size_t differ = 0;
        for (std::size_t i = 0; i < n; ++i) differ += (dy[off + i] * slope[i] != want_dx[i]) ? 1 : 0;
        CHECK(differ == 0);
        // In place: the slope over x.
        std::vector<float> in_place(x, x + n), y2(n);
        gelu_tanh_forward_slope(in_place.data(), y2.data(), in_place.data(), n);
        CHECK(same_bits(in_place.data(), slope.data(), n));
        CHECK(same_bits(y2.data(), want_y.data(), n));
      }
    }
  }
  kernels::force_simd_target(0);
}
