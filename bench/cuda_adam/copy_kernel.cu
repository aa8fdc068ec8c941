// Device-to-device copy kernel, the limit bench/cuda_adam measures against;
// see copy_kernel.h.
#include "bench/cuda_adam/copy_kernel.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace zeroshard::bench {

namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads)
    copy_kernel(const float4* __restrict__ src, float4* __restrict__ dst, std::int64_t n4) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += stride) {
    dst[i] = src[i];
  }
}

__global__ void copy_tail(const float* __restrict__ src, float* __restrict__ dst,
                          std::int64_t begin, std::int64_t n) {
  const std::int64_t i = begin + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

}  // namespace

int launch_copy(const float* src, float* dst, std::size_t n, CUstream_st* stream) {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return static_cast<int>(cudaGetLastError());
  }
  const auto n4 = static_cast<std::int64_t>(n / 4);
  if (n4 > 0) {
    copy_kernel<<<sms * 4, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(src),
                                                  reinterpret_cast<float4*>(dst), n4);
  }
  if (n % 4 != 0) copy_tail<<<1, 4, 0, stream>>>(src, dst, n4 * 4, static_cast<std::int64_t>(n));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace zeroshard::bench
