// The 8-bit-state Adam / AdamW kernel; see kernels/cuda/optimizers/adam8bit.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h. One thread block
// per quantization block, of min(block, kThreads) threads: each thread
// decodes, updates and keeps kPer = block / threads elements of both states
// in registers (kPer a template argument, so that a 256-element block does
// not hold registers for 16); the block's new absmax is a shared-memory max
// of |x|'s bits (the order of non-negative floats; a NaN's bits exceed
// Inf's); then each thread encodes its elements. The code tables are copied
// into shared memory first: read from the kernel's parameters, their
// per-thread indices serialised a warp's loads (the kernel ran at 0.27 of
// the copy bandwidth on an H100). Decode and encode are the arithmetic of
// kernels/cpu/adam/quant_map.h's detail::QuantTables (quantize_magnitude_arith),
// whose decisions the CPU reference's thresholds are.
#include <cstdint>

#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/adam_math.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ std::uint32_t bits_of(float x) { return __float_as_uint(x); }

// value(u) of map k (0 signed, 1 unsigned): fma(u, 9, dec_c[i]) * dec_r[i].
__device__ __forceinline__ float decode_magnitude(const QuantDeviceTables& q, int k, unsigned u) {
  const float fu = static_cast<float>(u);  // exact
  const float t2 = fma_rn(fu, 2.0f, 1.0f);  // exact
  const unsigned i = (bits_of(t2) >> 23) & 15u;
  return mul(fma_rn(fu, 9.0f, q.dec_c[k][i]), q.dec_r[k][i]);
}

// dequantize_value.
template <bool kSigned>
__device__ __forceinline__ float decode(const QuantDeviceTables& q, std::uint8_t code, float absmax) {
  if constexpr (!kSigned) {
    return mul(decode_magnitude(q, 1, code), absmax);
  } else {
    const float v = mul(decode_magnitude(q, 0, code & 0x7fu), absmax);
    return __uint_as_float(bits_of(v) | ((code & 0x80u) != 0 ? 0x80000000u : 0u));
  }
}

// quantize_value (by quantize_magnitude_arith, which its thresholds encode).
template <bool kSigned>
__device__ __forceinline__ std::uint8_t encode(const QuantDeviceTables& q, float x, float inv) {
  constexpr int k = kSigned ? 0 : 1;
  const float y = mul(x, inv);
  float a = fabsf(y);
  if (a != a) a = 0.0f;
  a = a < 1.0f ? a : 1.0f;
  const int lmax = q.lmax[k];
  int base = lmax + 1 + ((static_cast<int>(bits_of(a) >> 23) - 127) * 1233 >> 12);
  base = base < 0 ? 0 : (base > lmax ? lmax : base);
  const int region = base + (a >= q.enc_next[k][base] ? 1 : 0);
  const unsigned u = static_cast<unsigned>(
      __float2int_rz(fma_rn(a, q.enc_scale[k][region], q.enc_offset[k][region])));
  if (kSigned && y < 0.0f) return static_cast<std::uint8_t>(u | 0x80u);
  return static_cast<std::uint8_t>(u);
}

// The stored absmax of a block from the max of |x|'s bits.
__device__ __forceinline__ float absmax_of_bits(unsigned b) {
  return b > 0x7f800000u ? __uint_as_float(0x7fc00000u) : __uint_as_float(b);
}

__device__ __forceinline__ float inverse_absmax(float am) { return am > 0.0f ? div(1.0f, am) : 0.0f; }

template <DType G, bool kCopy, DType L, int kPer>
__global__ void __launch_bounds__(kThreads)
    adam8bit_kernel(Adam8bitTensor t, int block, QuantDeviceTables tables, AdamDeviceScalars s) {
  __shared__ unsigned smax[2];
  __shared__ QuantDeviceTables q;
  static_assert(sizeof(QuantDeviceTables) % 4 == 0);
  const int threads = static_cast<int>(blockDim.x);  // a power of two >= 64 (block >= 64)
  for (unsigned w = threadIdx.x; w < sizeof(QuantDeviceTables) / 4; w += blockDim.x) {
    reinterpret_cast<unsigned*>(&q)[w] = reinterpret_cast<const unsigned*>(&tables)[w];
  }
  const std::int64_t b = blockIdx.x;
  const std::int64_t lo = b * block;
  const int len = static_cast<int>(min(static_cast<std::int64_t>(block), static_cast<std::int64_t>(t.n) - lo));
  const float am = t.state.exp_avg_absmax[b];
  const float av = t.state.exp_avg_sq_absmax[b];
  if (threadIdx.x == 0) smax[0] = smax[1] = 0u;
  __syncthreads();  // the tables are in shared memory
  float m[kPer], v[kPer];
  unsigned mx_m = 0, mx_v = 0;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = static_cast<int>(threadIdx.x) + k * threads;
    if (j < len) {
      const std::int64_t i = lo + j;
      float p = t.param[i];
      m[k] = decode<true>(q, t.state.exp_avg_code[i], am);
      v[k] = decode<false>(q, t.state.exp_avg_sq_code[i], av);
      adam_element(s, p, load_as_float<G>(t.grad, i), m[k], v[k]);
      t.param[i] = p;
      if constexpr (kCopy) store_from_float<L>(t.param_copy, i, p);
      mx_m = max(mx_m, bits_of(m[k]) & 0x7fffffffu);
      mx_v = max(mx_v, bits_of(v[k]) & 0x7fffffffu);
    }
  }
  // A warp's max first, then one shared atomic per warp.
  for (int off = 16; off > 0; off /= 2) {
    mx_m = max(mx_m, __shfl_xor_sync(0xffffffffu, mx_m, off));
    mx_v = max(mx_v, __shfl_xor_sync(0xffffffffu, mx_v, off));
  }
  if ((threadIdx.x & 31u) == 0) {
    atomicMax(&smax[0], mx_m);
    atomicMax(&smax[1], mx_v);
  }
  __syncthreads();
  const float new_am = absmax_of_bits(smax[0]);
  const float new_av = absmax_of_bits(smax[1]);
  if (threadIdx.x == 0) {
    t.state.exp_avg_absmax[b] = new_am;
    t.state.exp_avg_sq_absmax[b] = new_av;
  }
  const float inv_m = inverse_absmax(new_am), inv_v = inverse_absmax(new_av);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int j = static_cast<int>(threadIdx.x) + k * threads;
    if (j < len) {
      t.state.exp_avg_code[lo + j] = encode<true>(q, m[k], inv_m);
      t.state.exp_avg_sq_code[lo + j] = encode<false>(q, v[k], inv_v);
    }
  }
}

template <DType G, bool kCopy, DType L>
cudaError_t launch_typed(const Adam8bitTensor& t, std::size_t block, const QuantDeviceTables& q,
                         const AdamDeviceScalars& s, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(quant_block_count(t.n, block));
  const int b = static_cast<int>(block);
  const auto threads = static_cast<unsigned>(b < kThreads ? b : kThreads);
  static_assert(kQuantBlockMax / kThreads == 16);
  switch (b <= kThreads ? 1 : b / kThreads) {
    case 1: adam8bit_kernel<G, kCopy, L, 1><<<blocks, threads, 0, stream>>>(t, b, q, s); break;
    case 2: adam8bit_kernel<G, kCopy, L, 2><<<blocks, threads, 0, stream>>>(t, b, q, s); break;
    case 4: adam8bit_kernel<G, kCopy, L, 4><<<blocks, threads, 0, stream>>>(t, b, q, s); break;
    case 8: adam8bit_kernel<G, kCopy, L, 8><<<blocks, threads, 0, stream>>>(t, b, q, s); break;
    default: adam8bit_kernel<G, kCopy, L, 16><<<blocks, threads, 0, stream>>>(t, b, q, s); break;
  }
  return cudaGetLastError();
}

template <DType G>
cudaError_t launch_grad(const Adam8bitTensor& t, std::size_t block, const QuantDeviceTables& q,
                        const AdamDeviceScalars& s, bool copy, DType copy_dtype,
                        cudaStream_t stream) {
  if (!copy) return launch_typed<G, false, DType::f32>(t, block, q, s, stream);
  if (copy_dtype == DType::bf16) return launch_typed<G, true, DType::bf16>(t, block, q, s, stream);
  return launch_typed<G, true, DType::f16>(t, block, q, s, stream);
}

}  // namespace

cudaError_t launch_adam8bit(const Adam8bitTensor& t, std::size_t block,
                            const QuantDeviceTables& tables, const AdamDeviceScalars& s,
                            DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream) {
  if (t.n == 0) return cudaSuccess;
  switch (grad_dtype) {
    case DType::bf16: return launch_grad<DType::bf16>(t, block, tables, s, copy, copy_dtype, stream);
    case DType::f16: return launch_grad<DType::f16>(t, block, tables, s, copy, copy_dtype, stream);
    default: return launch_grad<DType::f32>(t, block, tables, s, copy, copy_dtype, stream);
  }
}

}  // namespace zeroshard::kernels::gpu::detail
