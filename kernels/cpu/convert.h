// Array conversions between fp32 and the 16-bit formats bf16 and fp16, next
// to their scalar references (which apply the scalar functions of
// core/dtype.h element by element: round to nearest even, Inf kept, NaN kept
// as a quiet NaN, fp16 subnormals exact). Also the element access helpers the
// mixed-precision kernels' references use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace zeroshard::kernels {

/// dst[i] = float_to_bf16(src[i]) for i < n. Vectorised (Highway, chosen at
/// run time) and split over kernel_pool() threads; bitwise equal to the
/// reference. Arrays must not overlap. Thread safety: touches only its
/// arguments.
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
/// dst[i] = bf16_to_float(src[i]) (exact); as f32_to_bf16 otherwise.
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);
/// dst[i] = float_to_f16(src[i]); as f32_to_bf16 otherwise.
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
/// dst[i] = f16_to_float(src[i]) (exact); as f32_to_bf16 otherwise.
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);

/// Converts n elements between any two of f32, bf16, f16 (same dtype: a
/// copy; bf16 <-> f16 goes through fp32, which is exact on the way in).
/// Throws InvariantError for f64.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n);

/// Scalar reference of convert(): one element at a time with core/dtype.h.
void convert_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                       std::size_t n);

/// dst[i] = round_dst(float(src[i]) * scale) for i < n, between any two of
/// f32, bf16, f16 (the same dtype included): float() is the exact widening
/// and round_dst the narrowing of core/dtype.h; the product is one fp32
/// multiply, skipped when scale == 1 (so scale 1 is the plain conversion; an
/// equal 16-bit dtype then still goes through float, which quiets a
/// signalling NaN as float_to_bf16/float_to_f16 do, and f32 -> f32 is a
/// copy). dst may equal src when the dtypes are equal (in place); other
/// overlaps are not allowed. Vectorised (Highway, chosen at run time), split
/// over kernel_pool() threads, bitwise equal to the reference up to NaN
/// payloads (fp_strict.h). Throws InvariantError for f64. Thread safety:
/// touches only its arguments.
void convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                    float scale);

/// Scalar reference of convert_scaled().
void convert_scaled_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                              std::size_t n, float scale);

/// dst[i] = round_dst(float(dst[i]) + float(src[i]) * scale) for i < n, in
/// fp32 (one multiply, then one add; no fused multiply-add) and rounded to
/// dst_dtype once; dtypes any of f32, bf16, f16. src and dst must not
/// overlap. As convert_scaled otherwise (threads, dispatch, bitwise equal to
/// the reference up to NaN payloads, InvariantError for f64).
void accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                       std::size_t n, float scale);

/// Scalar reference of accumulate_scaled().
void accumulate_scaled_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                 std::size_t n, float scale);

/// Element i of an array of dtype t (f32, bf16 or f16) as fp32 (exact).
inline float load_as_float(const void* base, DType t, std::size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f64:
    case DType::u8: break;
  }
  ZS_CHECK(false, "kernel arrays must be f32, bf16 or f16, got {}", dtype_name(t));
  return 0.0f;
}

/// Stores v into element i of an array of dtype t (f32, bf16 or f16),
/// rounded as core/dtype.h.
inline void store_from_float(void* base, DType t, std::size_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(v); return;
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = float_to_f16(v); return;
    case DType::f64:
    case DType::u8: break;
  }
  ZS_CHECK(false, "kernel arrays must be f32, bf16 or f16, got {}", dtype_name(t));
}

/// Throws InvariantError unless t is f32, bf16 or f16 (`what` names the
/// argument in the message).
inline void check_kernel_dtype(DType t, const char* what) {
  ZS_CHECK(t == DType::f32 || t == DType::bf16 || t == DType::f16,
           "{} must be f32, bf16 or f16, got {}", what, dtype_name(t));
}

/// Throws InvariantError unless t is bf16 or f16 (low-precision copies).
inline void check_copy_dtype(DType t) {
  ZS_CHECK(t == DType::bf16 || t == DType::f16, "param_copy must be bf16 or f16, got {}",
           dtype_name(t));
}

/// The loop of the optimizers' scalar references: checks grad_dtype (f32,
/// bf16 or f16) and, with a param_copy, copy_dtype (bf16 or f16), then for
/// each i < n calls element(i, g), g = grad element i as fp32 (exact), which
/// updates param[i] and the states, and stores param[i] into param_copy
/// (when not null) rounded to copy_dtype. Throws InvariantError on a bad
/// dtype. Include kernels/cpu/fp_strict.h first where it is instantiated.
template <class Element>
void reference_update(float* param, const void* grad, DType grad_dtype, void* param_copy,
                      DType copy_dtype, std::size_t n, Element&& element) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  for (std::size_t i = 0; i < n; ++i) {
    element(i, load_as_float(grad, grad_dtype, i));
    if (param_copy != nullptr) store_from_float(param_copy, copy_dtype, i, param[i]);
  }
}

}  // namespace zeroshard::kernels
