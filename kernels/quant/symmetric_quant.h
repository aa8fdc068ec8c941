// Symmetric block quantization of fp32 / bf16 / fp16 arrays to int8 or int4
// with one fp32 scale per block: the wire format of ZeRO++'s quantized
// weight all-gather (qwZ) and quantized gradient all-to-all (qgZ) (Wang et
// al., "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training", 2023, arXiv 2306.10209, sections 4.1 and 4.3), next to
// their scalar references. The CUDA kernels (kernels/cuda/symmetric_quant.h)
// are bitwise equal to these references.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

// [Note: symmetric block quantization]
// A format is a code width (int8: codes -127..127, qmax = 127; int4: codes
// -7..7, qmax = 7) and a block size B (a power of two, 16 to 8192
// elements). Block b of an array of n elements covers elements
// [b*B, min(n, (b+1)*B)); each element x is widened to fp32 exactly.
//  - scale: A = max |x| over the block; s = A / qmax (one fp32 division,
//    rounded to nearest even). When the block holds a NaN or an Inf, s is
//    the quiet NaN 0x7fc00000 (and every code 0), so dequantizing gives
//    NaN for the whole block: a non-finite value is never silently turned
//    into numbers (an fp16 overflow still reaches the loss scaler).
//  - code: 0 when s is 0 (a block of zeros) or NaN; otherwise
//    q = clamp(rint(x / s), -qmax, qmax), where x / s is one fp32 division
//    and rint rounds to the nearest integer, ties to even, computed as
//    (t + 1.5 * 2^23) - 1.5 * 2^23 in fp32 (exact for |t| < 2^22; Highway's
//    emulated Round is not, so every target uses this form).
//  - value: y = float(q) * s, one fp32 multiply; a 16-bit output is then
//    rounded to nearest even (core/dtype.h).
//  - dequantize-accumulate: acc = acc + float(q) * s, a multiply and an
//    add, each rounded, never fused.
// Error bound, for every element of a finite block with stored scale s:
//     |y - x| <= s * (1/2 + 2^-16) + qmax * 2^-149
// (s ~= A / 127 for int8, A / 7 for int4, so about A / 254 and A / 14); a
// bf16 output y adds 2^-8 |y|, an fp16 output 2^-10 |y| + 2^-25 (their
// rounding, measured from the rounded value). Derivation: s is
// within 2^-24 of A / qmax relatively (normal s), so |x / s| <= qmax (1 +
// 2^-23) and the clamp never acts; rounding the quotient costs at most
// 2^-24 (qmax + 1) and rint 1/2, in units of s, and the product q * s at
// most 2^-24 qmax s; with a subnormal s the clamp and s = 0 cost at most
// qmax * 2^-149 absolute. quant_error_bound() is this formula, and
// tests/kernels/test_symmetric_quant.cpp checks it on every element.
// Layout of one quantized array (a "chunk", what travels in a collective):
// the codes first, one byte per element (int8, two's complement) or one
// byte per two elements (int4: element 2j in the low nibble, 2j + 1 in the
// high one, two's complement nibbles), padded with zero bytes to a multiple
// of 4, then the ceil(n / B) scales as fp32. Blocks start on byte
// boundaries (B is even), so a chunk of whole blocks can be cut at any
// block boundary. quant_chunk_bytes() is its size.

namespace zeroshard::kernels {

/// Code width of a symmetric block format.
enum class QuantBits : std::uint8_t { int4 = 4, int8 = 8 };

/// Smallest, default and largest block size (elements; powers of two).
inline constexpr std::size_t kSymQuantBlockMin = 16;
inline constexpr std::size_t kSymQuantBlockDefault = 2048;
inline constexpr std::size_t kSymQuantBlockMax = 8192;

/// A symmetric block format ([Note: symmetric block quantization]).
struct SymQuantFormat {
  QuantBits bits = QuantBits::int8;
  std::size_t block = kSymQuantBlockDefault;  ///< elements per scale
};

/// Largest code magnitude: 127 (int8) or 7 (int4).
constexpr int sym_quant_qmax(QuantBits bits) { return bits == QuantBits::int8 ? 127 : 7; }

/// "int8" or "int4".
constexpr const char* quant_bits_name(QuantBits bits) { return bits == QuantBits::int8 ? "int8" : "int4"; }

/// Throws InvariantError naming `where` unless f.block is a power of two in
/// [kSymQuantBlockMin, kSymQuantBlockMax]. Pure.
void check_sym_quant_format(SymQuantFormat f, const char* where);

/// Scales of n elements: ceil(n / block).
constexpr std::size_t sym_quant_scale_count(std::size_t n, SymQuantFormat f) {
  return (n + f.block - 1) / f.block;
}
/// Code bytes of n elements: n (int8) or ceil(n / 2) (int4).
constexpr std::size_t sym_quant_code_bytes(std::size_t n, SymQuantFormat f) {
  return f.bits == QuantBits::int8 ? n : (n + 1) / 2;
}
/// Byte offset of the scales in a chunk: the code bytes rounded up to 4.
constexpr std::size_t sym_quant_scales_offset(std::size_t n, SymQuantFormat f) {
  return (sym_quant_code_bytes(n, f) + 3) / 4 * 4;
}
/// Bytes of a chunk of n elements (codes, padding, scales); a multiple of 4.
constexpr std::size_t sym_quant_chunk_bytes(std::size_t n, SymQuantFormat f) {
  return sym_quant_scales_offset(n, f) + 4 * sym_quant_scale_count(n, f);
}

/// The scale of a block whose largest magnitude is `absmax` (the note):
/// absmax / qmax in fp32 when every element of the block is finite
/// (`finite`), the quiet NaN 0x7fc00000 otherwise. Pure.
inline float sym_quant_block_scale(float absmax, bool finite, QuantBits bits) {
  if (!finite) return bits_float(0x7fc00000u);
  return absmax / static_cast<float>(sym_quant_qmax(bits));
}

/// The error bound of the note for one element whose block has stored
/// scale `scale` (finite, >= 0), dequantized to `out` (f32, bf16 or f16)
/// with value y (as stored in `out`): s (1/2 + 2^-16) + qmax 2^-149, plus
/// the 16-bit rounding term of |y|. Pure.
double sym_quant_error_bound(float scale, QuantBits bits, DType out, float y);

/// Quantizes n elements of x (dtype f32, bf16 or f16) into the chunk at
/// `chunk` (sym_quant_chunk_bytes(n, f) bytes, 4-byte aligned; must not
/// overlap x). Vectorised (Highway, target chosen at run time), split over
/// kernel_pool() by whole blocks; bitwise equal to the reference for any
/// target and thread count. Throws InvariantError for a bad format, dtype,
/// a null pointer with n > 0 or a misaligned chunk. Thread safety: touches
/// only its arguments. Allocates nothing.
void quantize_symmetric(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk);
/// Scalar reference of quantize_symmetric (the definition).
void quantize_symmetric_reference(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk);

/// Quantization with error feedback: v = float(x) + residual (fp32 add)
/// is quantized as quantize_symmetric quantizes it, and residual becomes
/// v - y (y its dequantized fp32 value); in a block whose scale is NaN
/// (a NaN or Inf in v) the residual becomes 0, so a skipped overflow step
/// leaves nothing behind. residual: n floats, in and out. As
/// quantize_symmetric otherwise (chunk must not overlap x or residual).
void quantize_symmetric_feedback(const void* x, DType dtype, std::size_t n, SymQuantFormat f, float* residual,
                                 void* chunk);
/// Scalar reference of quantize_symmetric_feedback.
void quantize_symmetric_feedback_reference(const void* x, DType dtype, std::size_t n, SymQuantFormat f,
                                           float* residual, void* chunk);

/// y[i] = float(q_i) * s_b, rounded to `dtype` (f32, bf16 or f16), for the
/// n elements of the chunk. As quantize_symmetric otherwise (y must not
/// overlap the chunk).
void dequantize_symmetric(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype);
/// Scalar reference of dequantize_symmetric.
void dequantize_symmetric_reference(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype);

/// acc[i] = acc[i] + float(q_i) * s_b in fp32 (multiply, then add; never
/// fused). As dequantize_symmetric otherwise.
void dequantize_accumulate(const void* chunk, std::size_t n, SymQuantFormat f, float* acc);
/// Scalar reference of dequantize_accumulate.
void dequantize_accumulate_reference(const void* chunk, std::size_t n, SymQuantFormat f, float* acc);

}  // namespace zeroshard::kernels
