// Device-side element arithmetic that is bit-for-bit the CPU scalar
// reference's arithmetic. Internal to kernels/cuda (.cu files only).
//
// [Note: bitwise GPU kernels]
// The CPU references (kernels/cpu/*.cpp, core/dtype.h) use IEEE-754 binary32
// operations, each rounded to nearest even, with no fused multiply-add
// (ISO C++ mode compiles with -ffp-contract=off and without FMA
// instructions). nvcc would contract a * b + c into one FMA, so the kernels
// spell every operation with the intrinsics that are never contracted and
// always round to nearest: __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn,
// __fsqrt_rn. Same operations in the same order on the same inputs give the
// same bits, which is what tests/cuda checks (no tolerance). The 16-bit
// conversions are ports of core/dtype.h's integer code (NaN payloads
// included), not CUDA's __float2bfloat16_rn, which canonicalises NaNs.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zeroshard::kernels::gpu {

/// IEEE binary32 operations, rounded to nearest even, never fused.
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }

/// fp32 -> bf16 bits; port of core/dtype.h float_to_bf16.
__device__ __forceinline__ std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// bf16 bits -> fp32 (exact); port of core/dtype.h bf16_to_float.
__device__ __forceinline__ float bf16_bits_to_float(std::uint16_t h) {
  return __uint_as_float(static_cast<std::uint32_t>(h) << 16);
}

/// fp32 -> fp16 bits; port of core/dtype.h float_to_f16.
__device__ __forceinline__ std::uint16_t float_to_f16_bits(float f) {
  const std::uint32_t u = __float_as_uint(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    const std::uint32_t exp = a >> 23;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    const std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t v = a - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

/// fp16 bits -> fp32 (exact); port of core/dtype.h f16_to_float.
__device__ __forceinline__ float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return __uint_as_float(sign);
    const float f = mul(static_cast<float>(mant), 5.9604644775390625e-08f);
    return sign ? -f : f;
  }
  if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// Storage type of one element of T in device memory, and its exact
/// widening to / rounding from fp32. Defined for f32, bf16 and f16.
template <DType T>
struct Elem;

template <>
struct Elem<DType::f32> {
  using storage = float;
  __device__ static float widen(float x) { return x; }
  __device__ static float narrow(float x) { return x; }
};

template <>
struct Elem<DType::bf16> {
  using storage = std::uint16_t;
  __device__ static float widen(std::uint16_t x) { return bf16_bits_to_float(x); }
  __device__ static std::uint16_t narrow(float x) { return float_to_bf16_bits(x); }
};

template <>
struct Elem<DType::f16> {
  using storage = std::uint16_t;
  __device__ static float widen(std::uint16_t x) { return f16_bits_to_float(x); }
  __device__ static std::uint16_t narrow(float x) { return float_to_f16_bits(x); }
};

/// Reads element i of a T array as fp32.
template <DType T>
__device__ __forceinline__ float load_as_float(const void* p, std::int64_t i) {
  return Elem<T>::widen(static_cast<const typename Elem<T>::storage*>(p)[i]);
}

/// Writes fp32 x, rounded to T, to element i of a T array.
template <DType T>
__device__ __forceinline__ void store_from_float(void* p, std::int64_t i, float x) {
  static_cast<typename Elem<T>::storage*>(p)[i] = Elem<T>::narrow(x);
}

}  // namespace zeroshard::kernels::gpu
