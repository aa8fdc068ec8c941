// Newton-Schulz on cuBLAS: see kernels/cuda/muon/newton_schulz.h.
#include "kernels/cuda/muon/newton_schulz.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/device_buffer.h"
#include "core/error.h"

namespace zeroshard::kernels::gpu {

void newton_schulz(cublasContext* handle, CUstream_st* stream, float* g, std::size_t rows, std::size_t cols, int steps,
                   NewtonSchulzCoefficients k) {
  ZS_CHECK(rows >= 1 && cols >= 1, "newton_schulz: a {} x {} matrix", rows, cols);
  ZS_CHECK(steps >= 0, "newton_schulz: {} steps", steps);
  const bool wide = rows <= cols;  // X = G (m = rows) or G^T (m = cols)
  const int m = static_cast<int>(wide ? rows : cols), n = static_cast<int>(wide ? cols : rows);
  ZS_CUDA_CHECK(cublasSetStream(handle, stream));
  ZS_CUDA_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  // X / (||X||_F + 1e-7).
  float norm = 0;
  ZS_CUDA_CHECK(cublasSnrm2(handle, m * n, g, 1, &norm));
  const float inv = 1.0f / (norm + 1e-7f);
  ZS_CUDA_CHECK(cublasSscal(handle, m * n, &inv, g, 1));
  if (steps == 0) return;
  const auto mn = static_cast<std::size_t>(m) * static_cast<std::size_t>(n);
  const auto mm = static_cast<std::size_t>(m) * static_cast<std::size_t>(m);
  DeviceBuffer work((mn + 2 * mm) * sizeof(float));
  float* old = static_cast<float*>(work.data());  // X before the step
  float* a = old + mn;                            // A = X X^T
  float* b = a + mm;                              // B = b A + c A A
  const float one = 1.0f, zero = 0.0f;
  // As cuBLAS sees the buffer (column-major): wide: Y = X^T, n x m, ld n;
  // tall: X itself, m x n, ld m.
  for (int s = 0; s < steps; ++s) {
    ZS_CUDA_CHECK(cudaMemcpyAsync(old, g, mn * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    if (wide) {
      ZS_CUDA_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, &one, old, n, old, n, &zero, a, m));
    } else {
      ZS_CUDA_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, m, m, n, &one, old, m, old, m, &zero, a, m));
    }
    // B = c (A A) + b A.
    ZS_CUDA_CHECK(cudaMemcpyAsync(b, a, mm * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    ZS_CUDA_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &k.c, a, m, a, m, &k.b, b, m));
    // X = a X + B X (B symmetric: Y = a Y + Y B for the wide case).
    if (wide) {
      ZS_CUDA_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, &one, old, n, b, m, &k.a, g, n));
    } else {
      ZS_CUDA_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, m, &one, b, m, old, m, &k.a, g, m));
    }
  }
  // The workspace is freed with the buffer: wait for the products first.
  ZS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace zeroshard::kernels::gpu
