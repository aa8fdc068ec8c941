// Element-type conversion between fp32, bf16 and fp16 on the GPU, next to
// kernels/cpu/convert.h (whose convert_reference is the scalar reference).
//
// Bitwise equal to convert_reference: fp32 -> bf16/fp16 rounds to nearest
// even, overflows to Inf and keeps NaN payloads exactly as core/dtype.h's
// float_to_bf16 / float_to_f16; bf16/fp16 -> fp32 is exact; bf16 <-> fp16
// goes through fp32; equal dtypes copy. The header needs no CUDA headers.
#pragma once

#include <cstddef>

#include "core/dtype.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// Enqueues dst[i] = convert(src[i]) for i < n on `stream` (null: legacy
/// default stream) and returns without waiting. src and dst are device
/// arrays of n elements of f32, bf16 or f16 and must not overlap. Errors:
/// InvariantError for f64 or null pointers with n > 0; DeviceError if the
/// launch fails. Thread safety: touches only its arguments.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
             CUstream_st* stream);

/// Enqueues dst[i] = convert(src[i] * scale), as kernels/cpu/convert.h's
/// convert_scaled_reference (bitwise, NaN payloads aside: the GPU's multiply
/// returns the canonical NaN; scale 1 skips the multiply, so it is
/// convert()). Arguments, errors and thread safety as convert().
void convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                    float scale, CUstream_st* stream);

/// Enqueues dst[i] = convert(float(dst[i]) + float(src[i]) * scale), a
/// multiply then an add, never fused, rounded once to dst_dtype: bitwise
/// kernels/cpu/convert.h's accumulate_scaled_reference (NaN payloads
/// aside). src and dst must not overlap. Errors as convert().
void accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                       float scale, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
