// Fused unscale / Inf-NaN check / sum-of-squares kernels; see
// kernels/cuda/grad_check.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include <cub/block/block_reduce.cuh>

#include <algorithm>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu::detail {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxPartials = 1024;          // blocks of the first pass, at most
constexpr std::size_t kMinPerBlock = 4096;  // elements a first-pass block gets, at least

// Pass 1: block b reduces the contiguous range [b * per_block, ...) and
// writes its partial sum and whether it saw a non-finite value.
template <DType T, bool kWrite>
__global__ void __launch_bounds__(kThreads)
    grad_partials(void* grad, std::int64_t n, std::int64_t per_block, float scale,
                  double* partial_sum, int* partial_flag) {
  using SumReduce = cub::BlockReduce<double, kThreads>;
  using FlagReduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename SumReduce::TempStorage sum_tmp;
  __shared__ typename FlagReduce::TempStorage flag_tmp;

  const std::int64_t start = static_cast<std::int64_t>(blockIdx.x) * per_block;
  const std::int64_t end = min(start + per_block, n);
  double sum = 0;
  int flag = 0;
  for (std::int64_t i = start + threadIdx.x; i < end; i += kThreads) {
    const float y = mul(load_as_float<T>(grad, i), scale);
    if constexpr (kWrite) static_cast<float*>(grad)[i] = y;
    flag |= isfinite(y) ? 0 : 1;
    const double d = y;
    sum = __dadd_rn(sum, __dmul_rn(d, d));
  }
  const double block_sum = SumReduce(sum_tmp).Sum(sum);
  const int block_flag = FlagReduce(flag_tmp).Sum(flag);
  if (threadIdx.x == 0) {
    partial_sum[blockIdx.x] = block_sum;
    partial_flag[blockIdx.x] = block_flag;
  }
}

// Pass 2: one block reduces the partials in a fixed order.
__global__ void __launch_bounds__(kThreads)
    grad_finish(const double* partial_sum, const int* partial_flag, int partials,
                GradCheck* result) {
  using SumReduce = cub::BlockReduce<double, kThreads>;
  using FlagReduce = cub::BlockReduce<int, kThreads>;
  __shared__ typename SumReduce::TempStorage sum_tmp;
  __shared__ typename FlagReduce::TempStorage flag_tmp;
  double sum = 0;
  int flag = 0;
  for (int i = threadIdx.x; i < partials; i += kThreads) {
    sum = __dadd_rn(sum, partial_sum[i]);
    flag |= partial_flag[i];
  }
  const double total = SumReduce(sum_tmp).Sum(sum);
  const int any = FlagReduce(flag_tmp).Sum(flag);
  if (threadIdx.x == 0) {
    result->sum_of_squares = total;
    result->found_inf_or_nan = any != 0;
  }
}

template <DType T, bool kWrite>
void launch_partials(int blocks, void* grad, std::int64_t n, std::int64_t per_block, float scale,
                     double* partial_sum, int* partial_flag, cudaStream_t stream) {
  grad_partials<T, kWrite><<<blocks, kThreads, 0, stream>>>(grad, n, per_block, scale,
                                                            partial_sum, partial_flag);
}

}  // namespace

std::size_t grad_check_workspace_size() { return kMaxPartials * (sizeof(double) + sizeof(int)); }

cudaError_t launch_grad_check(void* grad, DType dtype, bool write_back, std::size_t n,
                              float scale, GradCheck* result, void* workspace,
                              cudaStream_t stream) {
  auto* partial_sum = static_cast<double*>(workspace);
  auto* partial_flag = reinterpret_cast<int*>(partial_sum + kMaxPartials);
  int blocks = 0;
  if (n > 0) {
    // The split depends on n only, so the summation order does too.
    const std::size_t want = (n + kMinPerBlock - 1) / kMinPerBlock;
    blocks = static_cast<int>(std::min<std::size_t>(want, kMaxPartials));
    const auto per_block = static_cast<std::int64_t>((n + blocks - 1) / blocks);
    const auto nn = static_cast<std::int64_t>(n);
    if (write_back) {
      launch_partials<DType::f32, true>(blocks, grad, nn, per_block, scale, partial_sum,
                                        partial_flag, stream);
    } else if (dtype == DType::bf16) {
      launch_partials<DType::bf16, false>(blocks, grad, nn, per_block, scale, partial_sum,
                                          partial_flag, stream);
    } else if (dtype == DType::f16) {
      launch_partials<DType::f16, false>(blocks, grad, nn, per_block, scale, partial_sum,
                                         partial_flag, stream);
    } else {
      launch_partials<DType::f32, false>(blocks, grad, nn, per_block, scale, partial_sum,
                                         partial_flag, stream);
    }
    if (const cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  }
  grad_finish<<<1, kThreads, 0, stream>>>(partial_sum, partial_flag, blocks, result);
  return cudaGetLastError();
}

}  // namespace zeroshard::kernels::gpu::detail
