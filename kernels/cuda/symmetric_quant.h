// Symmetric block quantization on the GPU ([Note: symmetric block
// quantization] in kernels/quant/symmetric_quant.h): the same chunks, codes,
// scales and values as the CPU references, bit for bit (NaN payloads aside:
// the GPU's NaN results are canonical), so a GPU rank and a CPU rank read
// each other's chunks. One thread block per quantization block for the
// quantizers (shared-memory absmax), an element-wise kernel for the
// dequantizers. Every operation is spelled with the never-contracted
// round-to-nearest intrinsics ([Note: bitwise GPU kernels]). The header
// needs no CUDA headers.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "kernels/quant/symmetric_quant.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// Enqueues quantize_symmetric_reference's work on `stream` (null: the
/// legacy default stream): n elements of x (device array of f32, bf16 or
/// f16) into the device chunk (sym_quant_chunk_bytes(n, f) bytes, 4-byte
/// aligned, not overlapping x). Returns without waiting. Errors:
/// InvariantError for a bad format or dtype, a null pointer with n > 0 or a
/// misaligned chunk; DeviceError if the launch fails. Thread safety:
/// touches only its arguments.
void quantize_symmetric(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk,
                        CUstream_st* stream);

/// Enqueues quantize_symmetric_feedback_reference's work: v = x + residual
/// quantized, residual (n device floats) = v - y, 0 in a block whose scale
/// is NaN. As quantize_symmetric otherwise.
void quantize_symmetric_feedback(const void* x, DType dtype, std::size_t n, SymQuantFormat f, float* residual,
                                 void* chunk, CUstream_st* stream);

/// Enqueues dequantize_symmetric_reference's work: y (device, f32, bf16 or
/// f16) = the chunk's values. As quantize_symmetric otherwise.
void dequantize_symmetric(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype,
                          CUstream_st* stream);

/// Enqueues dequantize_accumulate_reference's work: acc (n device floats)
/// += the chunk's values, a multiply then an add, never fused. As
/// quantize_symmetric otherwise.
void dequantize_accumulate(const void* chunk, std::size_t n, SymQuantFormat f, float* acc, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
