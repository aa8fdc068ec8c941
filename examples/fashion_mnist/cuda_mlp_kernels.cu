// The cuBLAS MLP's element-wise kernels; see cuda_mlp_kernels.h.
#include "examples/fashion_mnist/cuda_mlp_kernels.h"

#include <algorithm>

namespace zeroshard::examples::cuda_detail {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops: enough blocks to fill a GPU, never more than needed.
constexpr std::size_t kMaxBlocks = 4096;

unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::min(blocks, kMaxBlocks));
}

__global__ void add_bias_activate_kernel(float* z, const float* b, std::size_t count,
                                         std::size_t out, bool relu) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < count;
       k += std::size_t(gridDim.x) * blockDim.x) {
    const float v = z[k] + b[k % out];
    // std::max(v, 0.0f) of the CPU MLP: v unless v < 0 (a NaN stays NaN).
    z[k] = (relu && v < 0.0f) ? 0.0f : v;
  }
}

__global__ void relu_backward_kernel(float* delta, const float* h, std::size_t count) {
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < count;
       k += std::size_t(gridDim.x) * blockDim.x) {
    if (!(h[k] > 0.0f)) delta[k] = 0.0f;
  }
}

}  // namespace

cudaError_t launch_add_bias_activate(float* z, const float* b, std::size_t n, std::size_t out,
                                     bool relu, cudaStream_t stream) {
  const std::size_t count = n * out;
  if (count == 0) return cudaSuccess;
  add_bias_activate_kernel<<<blocks_for(count), kThreads, 0, stream>>>(z, b, count, out, relu);
  return cudaGetLastError();
}

cudaError_t launch_relu_backward(float* delta, const float* h, std::size_t count,
                                 cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  relu_backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(delta, h, count);
  return cudaGetLastError();
}

}  // namespace zeroshard::examples::cuda_detail
