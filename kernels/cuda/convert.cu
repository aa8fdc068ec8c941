// fp32 / bf16 / fp16 conversion kernels; see kernels/cuda/convert.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

constexpr int kConvertThreads = 256;

// kMode 0: dst = convert(src); 1: dst = convert(src * scale); 2: dst =
// convert(dst + src * scale). The operations of kernels/cpu/convert.cpp's
// references, unfused.
template <DType S, DType T, int kMode>
__global__ void __launch_bounds__(kConvertThreads)
    convert_kernel(const typename Elem<S>::storage* __restrict__ src,
                   typename Elem<T>::storage* __restrict__ dst, std::int64_t n, float scale) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float x = Elem<S>::widen(src[i]);
    if (kMode != 0) x = mul(x, scale);
    if (kMode == 2) x = add(Elem<T>::widen(dst[i]), x);
    dst[i] = Elem<T>::narrow(x);
  }
}

template <DType S, DType T>
cudaError_t launch_typed(const void* src, void* dst, std::size_t n, float scale, int mode,
                         cudaStream_t stream) {
  const auto* s = static_cast<const typename Elem<S>::storage*>(src);
  auto* d = static_cast<typename Elem<T>::storage*>(dst);
  const auto count = static_cast<std::int64_t>(n);
  const unsigned blocks = elementwise_blocks(n, kConvertThreads);
  switch (mode) {
    case 0: convert_kernel<S, T, 0><<<blocks, kConvertThreads, 0, stream>>>(s, d, count, scale); break;
    case 1: convert_kernel<S, T, 1><<<blocks, kConvertThreads, 0, stream>>>(s, d, count, scale); break;
    default: convert_kernel<S, T, 2><<<blocks, kConvertThreads, 0, stream>>>(s, d, count, scale); break;
  }
  return cudaGetLastError();
}

template <DType S>
cudaError_t launch_from(const void* src, void* dst, DType dst_dtype, std::size_t n, float scale,
                        int mode, cudaStream_t stream) {
  switch (dst_dtype) {
    case DType::bf16: return launch_typed<S, DType::bf16>(src, dst, n, scale, mode, stream);
    case DType::f16: return launch_typed<S, DType::f16>(src, dst, n, scale, mode, stream);
    default: return launch_typed<S, DType::f32>(src, dst, n, scale, mode, stream);
  }
}

cudaError_t launch_mode(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                        float scale, int mode, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (src_dtype) {
    case DType::bf16: return launch_from<DType::bf16>(src, dst, dst_dtype, n, scale, mode, stream);
    case DType::f16: return launch_from<DType::f16>(src, dst, dst_dtype, n, scale, mode, stream);
    default: return launch_from<DType::f32>(src, dst, dst_dtype, n, scale, mode, stream);
  }
}

}  // namespace

cudaError_t launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                           std::size_t n, cudaStream_t stream) {
  if (n != 0 && src_dtype == dst_dtype) {
    return cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDeviceToDevice, stream);
  }
  return launch_mode(src, src_dtype, dst, dst_dtype, n, 1.0f, 0, stream);
}

cudaError_t launch_convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                  std::size_t n, float scale, cudaStream_t stream) {
  // Scale 1 skips the multiply, as the CPU reference does.
  if (scale == 1.0f) return launch_convert(src, src_dtype, dst, dst_dtype, n, stream);
  return launch_mode(src, src_dtype, dst, dst_dtype, n, scale, 1, stream);
}

cudaError_t launch_accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                     std::size_t n, float scale, cudaStream_t stream) {
  return launch_mode(src, src_dtype, dst, dst_dtype, n, scale, 2, stream);
}

}  // namespace zeroshard::kernels::gpu::detail
