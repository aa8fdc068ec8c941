// Symmetric block quantization kernels; see kernels/cuda/symmetric_quant.h,
// [Note: symmetric block quantization] in kernels/quant/symmetric_quant.h
// and [Note: .cu / .cpp split] in kernels/cuda/launchers.h. Each operation
// is the scalar reference's (kernels/quant/symmetric_quant.cpp) with the
// round-to-nearest intrinsics of device_math.cuh.
#include <bit>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/multi_tensor_apply.cuh"
#include "kernels/quant/symmetric_quant.h"

namespace zeroshard::kernels::gpu::detail {

namespace {

constexpr int kQuantThreads = 256;
constexpr float kRint = 12582912.0f;  // 1.5 * 2^23: (t + kRint) - kRint = rint(t), ties to even

// The clamped code of v in a block of scale s (finite, > 0), as a float.
__device__ __forceinline__ float sym_code(float v, float s, float qmax) {
  const float t = div(v, s);
  const float r = sub(add(t, kRint), kRint);
  return fminf(fmaxf(r, -qmax), qmax);
}

// One thread block per quantization block: the absmax (and whether every
// value is finite) by a shared-memory reduction, then the codes.
template <DType S, int kBits, bool kFeedback>
__global__ void __launch_bounds__(kQuantThreads)
    sym_quantize_kernel(const typename Elem<S>::storage* __restrict__ x, float* __restrict__ residual,
                        std::int64_t n, int block, std::uint8_t* __restrict__ codes, float* __restrict__ scales) {
  __shared__ float s_max[kQuantThreads];
  __shared__ int s_bad[kQuantThreads];
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * block;
  const int len = static_cast<int>(n - lo < block ? n - lo : block);
  const float qmax = kBits == 8 ? 127.0f : 7.0f;
  float amax = 0.0f;
  int bad = 0;
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    float v = Elem<S>::widen(x[lo + i]);
    if (kFeedback) {
      v = add(v, residual[lo + i]);
      residual[lo + i] = v;
    }
    const float a = fabsf(v);
    if (!(a < __int_as_float(0x7f800000))) {
      bad = 1;
    } else {
      amax = fmaxf(amax, a);
    }
  }
  s_max[threadIdx.x] = amax;
  s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int half = kQuantThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      s_max[threadIdx.x] = fmaxf(s_max[threadIdx.x], s_max[threadIdx.x + half]);
      s_bad[threadIdx.x] |= s_bad[threadIdx.x + half];
    }
    __syncthreads();
  }
  const float s = s_bad[0] ? __int_as_float(0x7fc00000) : div(s_max[0], qmax);
  if (threadIdx.x == 0) scales[blockIdx.x] = s;
  std::uint8_t* bc = codes + (kBits == 8 ? lo : lo / 2);
  const int bytes = kBits == 8 ? len : (len + 1) / 2;
  if (!(s > 0.0f)) {
    // Codes 0; the residual stays v for a zero scale and becomes 0 for NaN.
    for (int j = threadIdx.x; j < bytes; j += blockDim.x) bc[j] = 0;
    if (kFeedback && s != s) {
      for (int i = threadIdx.x; i < len; i += blockDim.x) residual[lo + i] = 0.0f;
    }
    return;
  }
  const int per_byte = kBits == 8 ? 1 : 2;
  for (int j = threadIdx.x; j < bytes; j += blockDim.x) {
    unsigned byte = 0;
    for (int e = 0; e < per_byte; ++e) {
      const int i = j * per_byte + e;
      if (i >= len) break;
      const float v = kFeedback ? residual[lo + i] : Elem<S>::widen(x[lo + i]);
      const float c = sym_code(v, s, qmax);
      const int q = static_cast<int>(c);
      byte |= kBits == 8 ? static_cast<unsigned>(q) & 0xffu : (static_cast<unsigned>(q) & 0xfu) << (4 * e);
      if (kFeedback) residual[lo + i] = sub(v, mul(c, s));
    }
    bc[j] = static_cast<std::uint8_t>(byte);
  }
}

// Element-wise: y = q * s rounded to T, or acc = acc + q * s (kAccumulate).
// The block is a power of two, 2^block_shift: its scale's index is a shift,
// not a 64-bit division (which held the kernel to 0.23 of the copy
// bandwidth on an H100).
template <int kBits, bool kAccumulate, DType T>
__global__ void __launch_bounds__(kQuantThreads)
    sym_dequantize_kernel(const std::uint8_t* __restrict__ codes, const float* __restrict__ scales, std::int64_t n,
                          int block_shift, typename Elem<T>::storage* __restrict__ y, float* __restrict__ acc) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int q;
    if (kBits == 8) {
      q = static_cast<std::int8_t>(codes[i]);
    } else {
      const int nibble = (i % 2 == 0) ? codes[i / 2] & 0xf : codes[i / 2] >> 4;
      q = nibble >= 8 ? nibble - 16 : nibble;
    }
    const float v = mul(static_cast<float>(q), scales[i >> block_shift]);
    if (kAccumulate) {
      acc[i] = add(acc[i], v);
    } else {
      y[i] = Elem<T>::narrow(v);
    }
  }
}

template <DType S, int kBits>
void quantize_typed(const void* x, float* residual, std::int64_t n, int block, std::uint8_t* codes, float* scales,
                    unsigned blocks, cudaStream_t stream) {
  const auto* xs = static_cast<const typename Elem<S>::storage*>(x);
  if (residual != nullptr) {
    sym_quantize_kernel<S, kBits, true><<<blocks, kQuantThreads, 0, stream>>>(xs, residual, n, block, codes, scales);
  } else {
    sym_quantize_kernel<S, kBits, false><<<blocks, kQuantThreads, 0, stream>>>(xs, nullptr, n, block, codes, scales);
  }
}

template <int kBits>
void quantize_bits(const void* x, DType dtype, float* residual, std::int64_t n, int block, std::uint8_t* codes,
                   float* scales, unsigned blocks, cudaStream_t stream) {
  switch (dtype) {
    case DType::bf16: return quantize_typed<DType::bf16, kBits>(x, residual, n, block, codes, scales, blocks, stream);
    case DType::f16: return quantize_typed<DType::f16, kBits>(x, residual, n, block, codes, scales, blocks, stream);
    default: return quantize_typed<DType::f32, kBits>(x, residual, n, block, codes, scales, blocks, stream);
  }
}

template <int kBits, bool kAccumulate, DType T>
void dequantize_typed(const std::uint8_t* codes, const float* scales, std::int64_t n, int block, void* y, float* acc,
                      cudaStream_t stream) {
  const unsigned grid = elementwise_blocks(static_cast<std::size_t>(n), kQuantThreads);
  const int shift = std::countr_zero(static_cast<unsigned>(block));  // validated: a power of two
  sym_dequantize_kernel<kBits, kAccumulate, T><<<grid, kQuantThreads, 0, stream>>>(
      codes, scales, n, shift, static_cast<typename Elem<T>::storage*>(y), acc);
}

template <int kBits>
void dequantize_bits(const std::uint8_t* codes, const float* scales, std::int64_t n, int block, void* y, DType dtype,
                     float* acc, cudaStream_t stream) {
  if (acc != nullptr) return dequantize_typed<kBits, true, DType::f32>(codes, scales, n, block, nullptr, acc, stream);
  switch (dtype) {
    case DType::bf16: return dequantize_typed<kBits, false, DType::bf16>(codes, scales, n, block, y, nullptr, stream);
    case DType::f16: return dequantize_typed<kBits, false, DType::f16>(codes, scales, n, block, y, nullptr, stream);
    default: return dequantize_typed<kBits, false, DType::f32>(codes, scales, n, block, y, nullptr, stream);
  }
}

}  // namespace

cudaError_t launch_sym_quantize(const void* x, DType dtype, float* residual, std::size_t n, SymQuantFormat f,
                                void* chunk, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  auto* codes = static_cast<std::uint8_t*>(chunk);
  auto* scales = reinterpret_cast<float*>(codes + sym_quant_scales_offset(n, f));
  // The padding between codes and scales is zero, as the reference writes it.
  const std::size_t code_bytes = sym_quant_code_bytes(n, f);
  const cudaError_t pad = cudaMemsetAsync(codes + code_bytes, 0, sym_quant_scales_offset(n, f) - code_bytes, stream);
  if (pad != cudaSuccess) return pad;
  const auto blocks = static_cast<unsigned>(sym_quant_scale_count(n, f));
  const auto count = static_cast<std::int64_t>(n);
  const int block = static_cast<int>(f.block);
  if (f.bits == QuantBits::int8) {
    quantize_bits<8>(x, dtype, residual, count, block, codes, scales, blocks, stream);
  } else {
    quantize_bits<4>(x, dtype, residual, count, block, codes, scales, blocks, stream);
  }
  return cudaGetLastError();
}

cudaError_t launch_sym_dequantize(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype,
                                  float* acc, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto* codes = static_cast<const std::uint8_t*>(chunk);
  const auto* scales = reinterpret_cast<const float*>(codes + sym_quant_scales_offset(n, f));
  const auto count = static_cast<std::int64_t>(n);
  const int block = static_cast<int>(f.block);
  if (f.bits == QuantBits::int8) {
    dequantize_bits<8>(codes, scales, count, block, y, dtype, acc, stream);
  } else {
    dequantize_bits<4>(codes, scales, count, block, y, dtype, acc, stream);
  }
  return cudaGetLastError();
}

}  // namespace zeroshard::kernels::gpu::detail
