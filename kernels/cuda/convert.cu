// fp32 / bf16 / fp16 conversion kernels; see kernels/cuda/convert.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

constexpr int kConvertThreads = 256;

template <DType S, DType T>
__global__ void __launch_bounds__(kConvertThreads)
    convert_kernel(const typename Elem<S>::storage* __restrict__ src,
                   typename Elem<T>::storage* __restrict__ dst, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = Elem<T>::narrow(Elem<S>::widen(src[i]));
  }
}

template <DType S, DType T>
cudaError_t launch_typed(const void* src, void* dst, std::size_t n, cudaStream_t stream) {
  convert_kernel<S, T><<<elementwise_blocks(n, kConvertThreads), kConvertThreads, 0, stream>>>(
      static_cast<const typename Elem<S>::storage*>(src),
      static_cast<typename Elem<T>::storage*>(dst), static_cast<std::int64_t>(n));
  return cudaGetLastError();
}

template <DType S>
cudaError_t launch_from(const void* src, void* dst, DType dst_dtype, std::size_t n,
                        cudaStream_t stream) {
  switch (dst_dtype) {
    case DType::bf16: return launch_typed<S, DType::bf16>(src, dst, n, stream);
    case DType::f16: return launch_typed<S, DType::f16>(src, dst, n, stream);
    default: return launch_typed<S, DType::f32>(src, dst, n, stream);
  }
}

}  // namespace

cudaError_t launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                           std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (src_dtype == dst_dtype) {
    return cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDeviceToDevice, stream);
  }
  switch (src_dtype) {
    case DType::bf16: return launch_from<DType::bf16>(src, dst, dst_dtype, n, stream);
    case DType::f16: return launch_from<DType::f16>(src, dst, dst_dtype, n, stream);
    default: return launch_from<DType::f32>(src, dst, dst_dtype, n, stream);
  }
}

}  // namespace zeroshard::kernels::gpu::detail
