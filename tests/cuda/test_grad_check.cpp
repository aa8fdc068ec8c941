// The fused gradient pass against kernels/cpu/grad_check.h's
// grad_check_reference: unscaled gradients bitwise (NaN payloads aside),
// the Inf/NaN flag exactly, the double sum to relative 1e-12 (the GPU sums
// in a different fixed order), and the same bits on every run.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/grad_check.h"
#include "kernels/cuda/grad_check.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

struct Run {
  kernels::GradCheck result;
  std::vector<std::uint8_t> grad;  // the gradient after the pass
};

Run run_gpu(const std::vector<std::uint8_t>& bytes, DType dtype, std::size_t n, float scale,
            bool write_back) {
  DeviceBuffer grad = upload(bytes);
  DeviceBuffer result(sizeof(kernels::GradCheck));
  DeviceBuffer workspace(kernels::gpu::grad_check_workspace_bytes());
  auto* out = result.as<kernels::GradCheck>();
  if (write_back) {
    kernels::gpu::unscale_and_check(grad.as<float>(), n, scale, out, workspace.data(), nullptr);
  } else {
    kernels::gpu::check_gradients(grad.data(), dtype, n, scale, out, workspace.data(), nullptr);
  }
  Run run;
  run.result = download<kernels::GradCheck>(result.data(), 1)[0];
  run.grad = download<std::uint8_t>(grad.data(), bytes.size());
  return run;
}

std::vector<float> make_values(std::size_t n, bool with_nonfinite) {
  std::vector<float> g = random_floats(n, 31 + n, 1000.0f);
  if (with_nonfinite && n >= 7) {
    g[1] = std::numeric_limits<float>::infinity();
    g[n / 2] = std::numeric_limits<float>::quiet_NaN();
    g[n - 1] = -std::numeric_limits<float>::infinity();
  }
  return g;
}

// f32 bytes bitwise equal, except that a NaN only has to stay a NaN: an
// IEEE multiply of a NaN returns the canonical NaN on the GPU but the
// operand's payload on x86.
void check_unscaled(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want) {
  std::vector<float> g(got.size() / 4);
  std::vector<float> w(want.size() / 4);
  REQUIRE(g.size() == w.size());
  if (!g.empty()) {
    std::memcpy(g.data(), got.data(), got.size());
    std::memcpy(w.data(), want.data(), want.size());
  }
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) && std::isnan(g[i])) g[i] = w[i];
  }
  check_bitwise(g, w, "unscaled gradient");
}

}  // namespace

TEST_CASE("cuda grad check: equals grad_check_reference") {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool write_back : {false, true}) {
      if (write_back && dtype != DType::f32) continue;
      for (const float scale : {1.0f, 1.0f / 1024.0f, 3.0f}) {
        for (const bool nonfinite : {false, true}) {
          for (const std::size_t n : kSizes) {
            INFO(dtype_name(dtype) << " n=" << n << " scale=" << scale
                                   << (write_back ? " in place" : " read only")
                                   << (nonfinite ? " with Inf/NaN" : ""));
            std::vector<std::uint8_t> want = gradient_bytes(make_values(n, nonfinite), dtype);
            const Run got = run_gpu(want, dtype, n, scale, write_back);
            const kernels::GradCheck ref =
                kernels::grad_check_reference(want.data(), dtype, n, scale, write_back);
            if (write_back) {
              check_unscaled(got.grad, want);
            } else {
              CHECK(got.grad == want);
            }
            CHECK(got.result.found_inf_or_nan == ref.found_inf_or_nan);
            if (!ref.found_inf_or_nan) {
              const double a = got.result.sum_of_squares;
              const double b = ref.sum_of_squares;
              CHECK(std::fabs(a - b) <= 1e-12 * std::fabs(b));
            } else {
              CHECK(!std::isfinite(got.result.sum_of_squares));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cuda grad check: the sum is the same bits on every run") {
  const std::size_t n = 3'000'001;
  const std::vector<std::uint8_t> grad = gradient_bytes(make_values(n, false), DType::f32);
  const Run first = run_gpu(grad, DType::f32, n, 1.0f, false);
  for (int i = 0; i < 3; ++i) {
    const Run again = run_gpu(grad, DType::f32, n, 1.0f, false);
    CHECK(std::memcmp(&again.result.sum_of_squares, &first.result.sum_of_squares,
                      sizeof(double)) == 0);
  }
}
