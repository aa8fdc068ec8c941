// Newton-Schulz on cuBLAS (kernels/cuda/muon/newton_schulz.h) against the
// CPU's fp32 kernel and the double reference, on square and rectangular
// matrices of odd sizes: within 1e-4 of both per element (fp32 rounding
// through 5 iterations; cuBLAS sums in another order than OpenBLAS).
#include <cmath>
#include <vector>

#include <cublas_v2.h>
#include <doctest/doctest.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/muon/newton_schulz.h"
#include "kernels/cuda/muon/newton_schulz.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

TEST_CASE("cuBLAS Newton-Schulz equals the CPU fp32 kernel and the double reference within 1e-4") {
  cublasHandle_t handle = nullptr;
  ZS_CUDA_CHECK(cublasCreate(&handle));
  const std::size_t shapes[][2] = {{7, 13}, {13, 7}, {64, 64}, {100, 37}, {1, 57}, {1, 1}};
  for (const auto& shape : shapes) {
    const std::size_t rows = shape[0], cols = shape[1];
    INFO(rows << " x " << cols);
    const std::vector<float> g = random_floats(rows * cols, 17 + rows, 1.0f);
    DeviceBuffer d = upload(g);
    kernels::gpu::newton_schulz(handle, nullptr, static_cast<float*>(d.data()), rows, cols, 5);
    const std::vector<float> got = download<float>(d.data(), g.size());
    std::vector<float> cpu(g.size());
    kernels::newton_schulz(g.data(), cpu.data(), rows, cols, 5);
    const std::vector<double> ref =
        kernels::newton_schulz_reference(std::vector<double>(g.begin(), g.end()), rows, cols, 5);
    double worst_cpu = 0, worst_ref = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      worst_cpu = std::max(worst_cpu, std::fabs(double(got[i]) - cpu[i]));
      worst_ref = std::max(worst_ref, std::fabs(double(got[i]) - ref[i]));
    }
    CHECK(worst_cpu <= 1e-4);
    CHECK(worst_ref <= 1e-4);
  }
  CHECK_THROWS_AS(kernels::gpu::newton_schulz(handle, nullptr, nullptr, 0, 3, 5), InvariantError);
  CHECK_THROWS_AS(kernels::gpu::newton_schulz(handle, nullptr, nullptr, 3, 3, -1), InvariantError);
  cublasDestroy(handle);
}
