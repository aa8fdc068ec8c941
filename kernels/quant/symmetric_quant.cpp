// Scalar references of the symmetric block quantization kernels, their
// argument checks and the error bound; see kernels/quant/symmetric_quant.h,
// [Note: symmetric block quantization].
#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/quant/symmetric_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

void check_sym_quant_args(const void* data, DType dtype, std::size_t n, SymQuantFormat f, const void* chunk,
                          const char* what);

void check_sym_quant_format(SymQuantFormat f, const char* where) {
  const bool pow2 = f.block != 0 && (f.block & (f.block - 1)) == 0;
  ZS_CHECK(pow2 && f.block >= kSymQuantBlockMin && f.block <= kSymQuantBlockMax,
           "{}: quantization block size {} must be a power of two from {} to {} elements", where, f.block,
           kSymQuantBlockMin, kSymQuantBlockMax);
  ZS_CHECK(f.bits == QuantBits::int8 || f.bits == QuantBits::int4, "{}: quantization bits must be 8 or 4", where);
}

// The checks every entry point makes (the SIMD file calls it too).
void check_sym_quant_args(const void* data, DType dtype, std::size_t n, SymQuantFormat f, const void* chunk,
                          const char* what) {
  check_sym_quant_format(f, what);
  check_kernel_dtype(dtype, what);
  ZS_CHECK(n == 0 || (data != nullptr && chunk != nullptr), "{}: null array with n = {} elements", what, n);
  ZS_CHECK(reinterpret_cast<std::uintptr_t>(chunk) % 4 == 0, "{}: the quantized chunk must be 4-byte aligned",
           what);
}

double sym_quant_error_bound(float scale, QuantBits bits, DType out, float y) {
  const double qmax = sym_quant_qmax(bits);
  double bound = static_cast<double>(scale) * (0.5 + std::ldexp(1.0, -16)) + qmax * std::ldexp(1.0, -149);
  const double ay = std::fabs(static_cast<double>(y));
  if (out == DType::bf16) bound += ay * std::ldexp(1.0, -8);
  if (out == DType::f16) bound += ay * std::ldexp(1.0, -10) + std::ldexp(1.0, -25);
  return bound;
}

namespace {

// 1.5 * 2^23: (t + kRint) - kRint rounds |t| < 2^22 to the nearest
// integer, ties to even, in fp32 round-to-nearest arithmetic.
constexpr float kRint = 12582912.0f;

// The code of v in a block of scale s (finite, > 0).
int code_of(float v, float s, int qmax) {
  const float t = v / s;
  const float r = (t + kRint) - kRint;
  const float c = std::min(std::max(r, static_cast<float>(-qmax)), static_cast<float>(qmax));
  return static_cast<int>(c);
}

// Element i of a block's values: x widened, plus the residual when given.
float value_at(const void* x, DType t, const float* residual, std::size_t i) {
  const float v = load_as_float(x, t, i);
  return residual != nullptr ? v + residual[i] : v;
}

void put_code(std::uint8_t* codes, QuantBits bits, std::size_t i, int q) {
  if (bits == QuantBits::int8) {
    codes[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    return;
  }
  const auto nibble = static_cast<std::uint8_t>(q & 0xf);
  std::uint8_t& b = codes[i / 2];
  b = i % 2 == 0 ? static_cast<std::uint8_t>((b & 0xf0) | nibble) : static_cast<std::uint8_t>((b & 0x0f) | (nibble << 4));
}

int get_code(const std::uint8_t* codes, QuantBits bits, std::size_t i) {
  if (bits == QuantBits::int8) return static_cast<std::int8_t>(codes[i]);
  const int nibble = i % 2 == 0 ? codes[i / 2] & 0xf : codes[i / 2] >> 4;
  return nibble >= 8 ? nibble - 16 : nibble;
}

// quantize_symmetric(_feedback)_reference: residual null = no feedback.
void quantize_reference(const void* x, DType t, std::size_t n, SymQuantFormat f, float* residual, void* chunk) {
  auto* codes = static_cast<std::uint8_t*>(chunk);
  auto* scales = reinterpret_cast<float*>(codes + sym_quant_scales_offset(n, f));
  std::memset(codes, 0, sym_quant_scales_offset(n, f));
  const int qmax = sym_quant_qmax(f.bits);
  for (std::size_t lo = 0; lo < n; lo += f.block) {
    const std::size_t hi = std::min(n, lo + f.block);
    float absmax = 0.0f;
    bool finite = true;
    for (std::size_t i = lo; i < hi; ++i) {
      const float v = value_at(x, t, residual, i);
      if (!std::isfinite(v)) finite = false;
      absmax = std::max(absmax, std::fabs(v));
    }
    const float s = sym_quant_block_scale(absmax, finite, f.bits);
    scales[lo / f.block] = s;
    const bool coded = s > 0.0f;  // false for 0 and NaN
    for (std::size_t i = lo; i < hi; ++i) {
      const float v = value_at(x, t, residual, i);
      const int q = coded ? code_of(v, s, qmax) : 0;
      put_code(codes, f.bits, i, q);
      if (residual != nullptr) residual[i] = std::isnan(s) ? 0.0f : v - static_cast<float>(q) * s;
    }
  }
}

}  // namespace

void quantize_symmetric_reference(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk) {
  check_sym_quant_args(x, dtype, n, f, chunk, "quantize_symmetric");
  if (n > 0) quantize_reference(x, dtype, n, f, nullptr, chunk);
}

void quantize_symmetric_feedback_reference(const void* x, DType dtype, std::size_t n, SymQuantFormat f,
                                           float* residual, void* chunk) {
  check_sym_quant_args(x, dtype, n, f, chunk, "quantize_symmetric_feedback");
  ZS_CHECK(n == 0 || residual != nullptr, "quantize_symmetric_feedback: null residual with n = {} elements", n);
  if (n > 0) quantize_reference(x, dtype, n, f, residual, chunk);
}

void dequantize_symmetric_reference(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype) {
  check_sym_quant_args(y, dtype, n, f, chunk, "dequantize_symmetric");
  const auto* codes = static_cast<const std::uint8_t*>(chunk);
  const auto* scales = reinterpret_cast<const float*>(codes + sym_quant_scales_offset(n, f));
  for (std::size_t i = 0; i < n; ++i) {
    store_from_float(y, dtype, i, static_cast<float>(get_code(codes, f.bits, i)) * scales[i / f.block]);
  }
}

void dequantize_accumulate_reference(const void* chunk, std::size_t n, SymQuantFormat f, float* acc) {
  check_sym_quant_args(acc, DType::f32, n, f, chunk, "dequantize_accumulate");
  const auto* codes = static_cast<const std::uint8_t*>(chunk);
  const auto* scales = reinterpret_cast<const float*>(codes + sym_quant_scales_offset(n, f));
  for (std::size_t i = 0; i < n; ++i) {
    const float y = static_cast<float>(get_code(codes, f.bits, i)) * scales[i / f.block];
    acc[i] = acc[i] + y;
  }
}

}  // namespace zeroshard::kernels
