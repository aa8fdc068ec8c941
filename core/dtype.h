// Element types and scalar conversions between fp32 and the 16-bit formats.
//
// bf16 is the upper half of an IEEE-754 binary32; fp16 is IEEE-754 binary16.
// Conversions from fp32 round to nearest, ties to even, keep Inf, and keep
// NaN as a (quiet) NaN. These scalar functions are the reference that every
// vectorised conversion kernel is tested against bit for bit. The same
// functions compile for the GPU (ZS_HOST_DEVICE), so the CUDA kernels use
// this one integer code too (kernels/cuda/device_math.cuh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

/// Marks the scalar conversions below as callable from host and device code
/// when nvcc compiles the including file; empty for the host compiler.
#if defined(__CUDACC__)
#define ZS_HOST_DEVICE __host__ __device__
#else
#define ZS_HOST_DEVICE
#endif

namespace zeroshard {

/// Element type of a buffer handed to a communicator or kernel. u8: raw
/// bytes (the codes of 8-bit optimizer states, kernels/cpu/adam/quant_map.h);
/// storage only, never a compute, gradient or communication dtype.
enum class DType : std::uint8_t { f32, f64, bf16, f16, u8 };

/// Size of one element in bytes.
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

/// Lower-case name ("f32", "f64", "bf16", "f16", "u8").
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::u8: return "u8";
  }
  return "?";
}

/// Storage type of one bf16 element (bits only; convert with the functions
/// below). Layout-compatible with uint16_t.
struct bf16 {
  std::uint16_t bits;
};
/// Storage type of one IEEE binary16 element.
struct f16 {
  std::uint16_t bits;
};

/// The DType of a storage type: float, double, bf16, f16 or std::uint8_t.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<f16>() { return DType::f16; }
template <>
constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

/// Bits of a float, and back (on the device: CUDA's reinterpreting
/// intrinsics, which compile to no instruction).
ZS_HOST_DEVICE inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ZS_HOST_DEVICE inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// fp32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet bit set).
ZS_HOST_DEVICE inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

/// bf16 bits -> fp32 (exact).
ZS_HOST_DEVICE inline float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

/// fp32 -> fp16 bits, round to nearest even, overflow to Inf, subnormals
/// kept; NaN stays NaN (quiet bit set).
ZS_HOST_DEVICE inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {
    // Result is subnormal (or zero) in fp16: value = a * 2^24 in units of 2^-24.
    if (a < 0x33000000u) return sign;  // below half of the smallest subnormal
    const std::uint32_t exp = a >> 23;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    // value = mant * 2^(exp-150); in units of 2^-24 that is mant >> (126 - exp),
    // a shift of 14..24 for exp in [102, 112].
    const std::uint32_t shift = 126u - exp;
    const std::uint32_t q = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    std::uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias exponent (127 -> 15) and round the mantissa to 10 bits.
  std::uint32_t v = a - 0x38000000u;  // exponent - 112
  v += 0xfffu + ((v >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (v >> 13));
}

/// fp16 bits -> fp32 (exact).
ZS_HOST_DEVICE inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: mant * 2^-24
    float f = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// Element value as float (exact for every DType but f64, which rounds).
inline float to_float(float v) { return v; }
inline float to_float(double v) { return static_cast<float>(v); }
inline float to_float(bf16 v) { return bf16_to_float(v.bits); }
inline float to_float(f16 v) { return f16_to_float(v.bits); }

/// float to a storage type, rounding to nearest even.
template <class T>
inline T from_float(float v);
template <>
inline float from_float<float>(float v) { return v; }
template <>
inline double from_float<double>(float v) { return v; }
template <>
inline bf16 from_float<bf16>(float v) { return bf16{float_to_bf16(v)}; }
template <>
inline f16 from_float<f16>(float v) { return f16{float_to_f16(v)}; }

}  // namespace zeroshard
