// Device-side element arithmetic that is bit-for-bit the CPU scalar
// reference's arithmetic. Internal to kernels/cuda (.cu files only).
//
// [Note: bitwise GPU kernels]
// The CPU references (kernels/cpu/**/*.cpp, core/dtype.h) use IEEE-754 binary32
// operations, each rounded to nearest even, with no fused multiply-add
// (ISO C++ mode compiles with -ffp-contract=off and without FMA
// instructions). nvcc would contract a * b + c into one FMA, so the kernels
// spell every operation with the intrinsics that are never contracted and
// always round to nearest: __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn,
// __fsqrt_rn. Where a reference does fuse on purpose (std::fma: the Adam
// lerp, kernels/cpu/adam/adam.h), the kernel spells it __fmaf_rn, one rounding
// as std::fma. Same operations in the same order on the same inputs give the
// same bits, which is what tests/cuda checks (no tolerance). The 16-bit
// conversions are core/dtype.h's integer code itself, compiled for the
// device (NaN payloads kept), not CUDA's __float2bfloat16_rn, which
// canonicalises NaNs.
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
/// a * b + c rounded once to nearest even: std::fma(a, b, c).
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }

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
  __device__ static float widen(std::uint16_t x) { return bf16_to_float(x); }
  __device__ static std::uint16_t narrow(float x) { return float_to_bf16(x); }
};

template <>
struct Elem<DType::f16> {
  using storage = std::uint16_t;
  __device__ static float widen(std::uint16_t x) { return f16_to_float(x); }
  __device__ static std::uint16_t narrow(float x) { return float_to_f16(x); }
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
