// Per-target (Highway) conversions between fp32 vectors and bf16/fp16 bits,
// bit for bit those of the scalar functions in core/dtype.h (round to nearest
// even, NaN kept as a quiet NaN, Inf kept, fp16 subnormals exact), none of
// them depending on MXCSR (rounding mode, FTZ/DAZ).
// Included by the kernels' *_simd.cpp files inside their per-target pass;
// the toggle guard below is Highway's idiom for such "-inl.h" headers.
// fp16 uses F16C instructions on AVX2/AVX-512 (see kHardwareF16); every
// other path is integer operations.
//
// Also: Fmt (the storage format of an array as a template argument),
// helpers that move a tail of fewer than one vector through a zero-padded
// stack buffer so that every element goes through the vector code, and
// FusedMulAdd, std::fma per lane on every target.
#if defined(ZEROSHARD_KERNELS_CPU_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZEROSHARD_KERNELS_CPU_CONVERT_INL_H_
#undef ZEROSHARD_KERNELS_CPU_CONVERT_INL_H_
#else
#define ZEROSHARD_KERNELS_CPU_CONVERT_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Storage format of an array a kernel reads or writes (none: absent).
enum class Fmt { none, f32, bf16, f16 };

/// Bytes per element of a format.
constexpr std::size_t fmt_size(Fmt f) { return f == Fmt::f32 ? 4 : (f == Fmt::none ? 0 : 2); }

/// Lanes(df) bf16 values at p -> fp32 (exact: the bits shifted up by 16).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadBf16(DF df, const std::uint16_t* p) {
  const hn::Rebind<std::uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}

/// x86 targets with F16C (Highway's AVX2 and AVX3 require it) convert fp16
/// in hardware: VCVTPH2PS is exact (up to a signalling NaN's quiet bit,
/// fixed up in LoadF16), and VCVTPS2PH with an immediate
/// round-to-nearest-even (Highway passes _MM_FROUND_NO_EXC, rounding bits 0)
/// gives exactly float_to_f16: overflow to Inf, subnormals kept, a NaN
/// keeps its top payload bits and gets the quiet bit. Both ignore MXCSR's
/// FTZ/DAZ (tested with them set). Other targets use the integer code below.
constexpr bool kHardwareF16 = HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3;

/// Lanes(df) fp16 values at p -> fp32 (exact), as zeroshard::f16_to_float.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF16(DF df, const std::uint16_t* p) {
  const hn::Rebind<std::uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du;
  if constexpr (kHardwareF16) {
    // VCVTPH2PS sets the quiet bit of a signalling NaN; f16_to_float keeps
    // the bits as they are, so clear it again in those lanes.
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto raw = hn::LoadU(d16, p);
    const auto f = hn::BitCast(du, hn::PromoteTo(df, hn::BitCast(dh, raw)));
    const auto h = hn::PromoteTo(du, raw);
    const auto snan = hn::And(hn::Eq(hn::And(h, hn::Set(du, 0x7e00u)), hn::Set(du, 0x7c00u)),
                              hn::Not(hn::Eq(hn::And(h, hn::Set(du, 0x1ffu)), hn::Zero(du))));
    return hn::BitCast(df, hn::IfThenElse(snan, hn::AndNot(hn::Set(du, 0x00400000u), f), f));
  }
  const hn::RebindToSigned<DF> di;
  const auto h = hn::PromoteTo(du, hn::LoadU(d16, p));
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto exp = hn::And(hn::ShiftRight<10>(h), hn::Set(du, 0x1fu));
  const auto mant = hn::And(h, hn::Set(du, 0x3ffu));
  const auto mant_bits = hn::ShiftLeft<13>(mant);
  const auto normal =
      hn::Or(sign, hn::Or(hn::ShiftLeft<23>(hn::Add(exp, hn::Set(du, 112u))), mant_bits));
  const auto inf_nan = hn::Or(sign, hn::Or(hn::Set(du, 0x7f800000u), mant_bits));
  // Zero and subnormals: mant * 2^-24 (exact), then the sign (-f == f | sign bit).
  const auto sub_abs = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mant)),
                               hn::Set(df, 5.9604644775390625e-08f));
  const auto sub = hn::Or(hn::BitCast(du, sub_abs), sign);
  const auto r = hn::IfThenElse(hn::Eq(exp, hn::Zero(du)), sub,
                                hn::IfThenElse(hn::Eq(exp, hn::Set(du, 31u)), inf_nan, normal));
  return hn::BitCast(df, r);
}

/// Stores the low 16 bits of each u32 lane (all lanes hold values <= 0xffff).
template <class DF>
HWY_INLINE void StoreLow16(DF, hn::Vec<hn::RebindToUnsigned<DF>> v, std::uint16_t* p) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint16_t, DF> d16;
  hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, v)), d16, p);
}

/// fp32 -> bf16 bits per lane, as zeroshard::float_to_bf16, in the low 16
/// bits of each u32 lane (the high 16 are 0).
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> Bf16Bits(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  (void)df;
  const auto u = hn::BitCast(du, v);
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));  // an unordered compare: no FP state
  const auto hi = hn::ShiftRight<16>(u);
  const auto nan = hn::Or(hi, hn::Set(du, 0x0040u));
  const auto bias = hn::Add(hn::Set(du, 0x7fffu), hn::And(hi, hn::Set(du, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, bias));
  return hn::IfThenElse(is_nan, nan, rounded);
}

/// fp32 -> bf16 bits, as zeroshard::float_to_bf16.
template <class DF>
HWY_INLINE void StoreBf16(DF df, hn::Vec<DF> v, std::uint16_t* p) {
  StoreLow16(df, Bf16Bits(df, v), p);
}

/// fp32 -> fp16 bits, as zeroshard::float_to_f16 (same cases, same order).
template <class DF>
HWY_INLINE void StoreF16(DF df, hn::Vec<DF> v, std::uint16_t* p) {
  if constexpr (kHardwareF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
    return;
  }
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto a = hn::And(u, hn::Set(du, 0x7fffffffu));
  const auto ai = hn::BitCast(di, a);  // a < 2^31: signed compares are exact
  const auto one = hn::Set(du, 1u);
  const auto nan = hn::Or(sign, hn::Or(hn::Set(du, 0x7e00u),
                                       hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3ffu))));
  const auto inf = hn::Or(sign, hn::Set(du, 0x7c00u));
  // Normal: rebias the exponent, round the mantissa to 10 bits.
  auto vn = hn::Sub(a, hn::Set(du, 0x38000000u));
  vn = hn::Add(vn, hn::Add(hn::Set(du, 0xfffu), hn::And(hn::ShiftRight<13>(vn), one)));
  const auto normal = hn::Or(sign, hn::ShiftRight<13>(vn));
  // Subnormal: q = mant >> shift rounded to nearest even, shift = 126 - exp
  // (14..24 in range; clamped there so out-of-range lanes stay defined).
  const auto exp = hn::BitCast(di, hn::ShiftRight<23>(a));
  const auto shift_i = hn::Min(hn::Max(hn::Sub(hn::Set(di, 126), exp), hn::Set(di, 14)),
                               hn::Set(di, 24));
  const auto shift = hn::BitCast(du, shift_i);
  const auto mant = hn::Or(hn::And(a, hn::Set(du, 0x7fffffu)), hn::Set(du, 0x800000u));
  const auto q = mant >> shift;
  const auto rem = hn::And(mant, hn::Sub(one << shift, one));
  const auto half = one << hn::Sub(shift, one);
  const auto remi = hn::BitCast(di, rem), halfi = hn::BitCast(di, half);
  const auto odd = hn::Eq(hn::And(q, one), one);
  const auto up = hn::Or(hn::RebindMask(du, hn::Gt(remi, halfi)),
                         hn::And(hn::RebindMask(du, hn::Eq(remi, halfi)), odd));
  const auto sub = hn::Or(sign, hn::IfThenElse(up, hn::Add(q, one), q));
  auto r = normal;
  const auto is_small = hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000)));
  const auto is_tiny = hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x33000000)));
  r = hn::IfThenElse(is_small, hn::IfThenElse(is_tiny, sign, sub), r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477fefff))), inf, r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7f800000))), nan, r);
  StoreLow16(df, r, p);
}

/// Loads Lanes(df) elements [i, i + Lanes) of an array in format F as fp32.
template <Fmt F, class DF>
HWY_INLINE hn::Vec<DF> LoadAsF32(DF df, const void* base, std::size_t i) {
  if constexpr (F == Fmt::f32) {
    return hn::LoadU(df, static_cast<const float*>(base) + i);
  } else if constexpr (F == Fmt::bf16) {
    return LoadBf16(df, static_cast<const std::uint16_t*>(base) + i);
  } else {
    static_assert(F == Fmt::f16);
    return LoadF16(df, static_cast<const std::uint16_t*>(base) + i);
  }
}

/// Stores an fp32 vector into elements [i, i + Lanes) of an array in format F
/// (Fmt::none: stores nothing).
template <Fmt F, class DF>
HWY_INLINE void StoreFromF32(DF df, hn::Vec<DF> v, void* base, std::size_t i) {
  if constexpr (F == Fmt::f32) {
    hn::StoreU(v, df, static_cast<float*>(base) + i);
  } else if constexpr (F == Fmt::bf16) {
    StoreBf16(df, v, static_cast<std::uint16_t*>(base) + i);
  } else if constexpr (F == Fmt::f16) {
    StoreF16(df, v, static_cast<std::uint16_t*>(base) + i);
  }
}

/// A zero-padded stack copy of the last r (< one vector) elements of an
/// array, so the tail runs through the same vector code as the body.
struct TailBuffer {
  // At least 64 bytes: the reduction kernels step over 16 floats at a time.
  HWY_ALIGN unsigned char bytes[HWY_MAX_BYTES > 64 ? HWY_MAX_BYTES : 64] = {};

  /// Copies r elements of `elem` bytes from src (may be null) and returns
  /// the buffer (or null when src is null).
  void* load(const void* src, std::size_t r, std::size_t elem) {
    if (src == nullptr) return nullptr;
    std::memcpy(bytes, src, r * elem);
    return bytes;
  }
  /// Copies r elements back to dst (no-op when dst is null).
  void store(void* dst, std::size_t r, std::size_t elem) const {
    if (dst != nullptr) std::memcpy(dst, bytes, r * elem);
  }
};

/// mul * x + add per lane, computed exactly and rounded once to nearest
/// even: std::fma(mul[i], x[i], add[i]). hn::MulAdd is one FMA instruction
/// where the target has one (HWY_NATIVE_FMA: AVX2, AVX-512) but a multiply
/// and an add, each rounded, elsewhere (SSSE3/SSE4, EMU128, SCALAR); there
/// this falls back to std::fma lane by lane: slower, the same bits. For
/// kernels whose scalar reference fuses on purpose (torch's lerp,
/// kernels/cpu/adam/adam.h). D: a float or double tag. Pure.
template <class D>
HWY_INLINE hn::Vec<D> FusedMulAdd(D d, hn::Vec<D> mul, hn::Vec<D> x, hn::Vec<D> add) {
#if HWY_NATIVE_FMA
  (void)d;
  return hn::MulAdd(mul, x, add);
#else
  using T = hn::TFromD<D>;
  constexpr std::size_t kMax = hn::MaxLanes(D());
  HWY_ALIGN T a[kMax];
  HWY_ALIGN T b[kMax];
  HWY_ALIGN T c[kMax];
  hn::Store(mul, d, a);
  hn::Store(x, d, b);
  hn::Store(add, d, c);
  for (std::size_t i = 0; i < hn::Lanes(d); ++i) a[i] = std::fma(a[i], b[i], c[i]);
  return hn::Load(d, a);
#endif
}

/// Byte offset helper for untyped arrays (null stays null).
HWY_INLINE const void* Advance(const void* p, std::size_t elems, std::size_t elem) {
  return p == nullptr ? nullptr : static_cast<const unsigned char*>(p) + elems * elem;
}
HWY_INLINE void* Advance(void* p, std::size_t elems, std::size_t elem) {
  return p == nullptr ? nullptr : static_cast<unsigned char*>(p) + elems * elem;
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_CONVERT_INL_H_ toggle
