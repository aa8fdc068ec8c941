// Internal to cuda_mlp.cpp: the two element-wise kernels of the cuBLAS MLP
// that cuBLAS has no call for, defined in cuda_mlp_kernels.cu. As in
// kernels/cuda (see [Note: .cu / .cpp split] in kernels/cuda/launchers.h)
// the .cu file includes no header that uses fmt; the launchers trust their
// arguments and return the launch error for the caller to check with
// ZS_CUDA_CHECK. Only CUDA-enabled builds compile these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace zeroshard::examples::cuda_detail {

/// Enqueues, for the row-major device array z [n, out] and bias b [out]:
/// z[i, j] = z[i, j] + b[j], then (if relu) max(z[i, j], 0) with NaN kept,
/// exactly as the CPU MLP's add_bias_activate. Nothing for n * out == 0.
cudaError_t launch_add_bias_activate(float* z, const float* b, std::size_t n, std::size_t out,
                                     bool relu, cudaStream_t stream);

/// Enqueues delta[k] = 0 wherever !(h[k] > 0) (ReLU's derivative, with h the
/// layer's post-ReLU output), for k < count; delta and h are device arrays.
cudaError_t launch_relu_backward(float* delta, const float* h, std::size_t count,
                                 cudaStream_t stream);

}  // namespace zeroshard::examples::cuda_detail
