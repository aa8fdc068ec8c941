// Per-target (Highway) encoding and decoding of dynamic tree quantization
// codes (kernels/cpu/quant_map.h, [Note: dynamic tree quantization map]):
// the arithmetic of detail::QuantTables per lane, no gathers (small tables
// are read with in-register lookups). Bit for bit the scalar references:
// decoding computes the same N_u * R_L product as the value table, encoding
// the same region / fma / truncation as detail::quantize_magnitude_arith,
// whose decisions the reference's thresholds are. Highway's toggle guard
// for "-inl.h" headers, as convert-inl.h.
#if defined(ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_
#undef ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_
#else
#define ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/quant_map.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// log2 of a power of two (compile time).
constexpr int Log2Exact(std::size_t x) { return x <= 1 ? 0 : 1 + Log2Exact(x / 2); }

/// table[idx] per lane for a table of N entries (idx in [0, N); the table
/// array holds at least max(N, Lanes) entries): one in-register lookup per
/// Lanes entries, the pieces combined by the index's high bits. D: a tag of
/// 32-bit lanes (float or int32).
template <std::size_t N, class D>
HWY_INLINE hn::Vec<D> LookupSmall(D d, const hn::TFromD<D>* HWY_RESTRICT table,
                                  hn::Vec<hn::RebindToSigned<D>> idx) {
  constexpr std::size_t kL = hn::MaxLanes(D());
  const hn::RebindToSigned<D> di;
  if constexpr (N <= kL) {
    return hn::TableLookupLanes(hn::LoadU(d, table), hn::IndicesFromVec(d, idx));
  } else {
    const auto ind = hn::IndicesFromVec(d, hn::And(idx, hn::Set(di, static_cast<int>(kL - 1))));
    const auto piece = hn::ShiftRight<Log2Exact(kL)>(idx);
    auto r = hn::TableLookupLanes(hn::LoadU(d, table), ind);
    for (std::size_t c = 1; c * kL < N; ++c) {
      const auto in_c = hn::RebindMask(d, hn::Eq(piece, hn::Set(di, static_cast<int>(c))));
      r = hn::IfThenElse(in_c, hn::TableLookupLanes(hn::LoadU(d, table + c * kL), ind), r);
    }
    return r;
  }
}

/// Magnitudes u (int32 lanes, 0..255) -> map values (detail::QuantTables::dec_r).
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeMagnitude(DF df, const detail::QuantTables& t,
                                       hn::Vec<hn::RebindToSigned<DF>> u) {
  const hn::RebindToSigned<DF> di;
  const auto fu = hn::ConvertTo(df, u);  // exact
  const auto fbits = hn::BitCast(di, fu);
  const auto e = hn::ShiftRight<23>(fbits);  // 0 for u = 0, else 127 + L
  const auto idx = hn::Sub(hn::Max(e, hn::Set(di, 126)), hn::Set(di, 126));
  const auto r = LookupSmall<16>(df, t.dec_r, idx);
  // N_u = 9u + 9 - 8 * 2^L, every step exact in float (2^L: fu's exponent bits).
  const auto p2 = hn::BitCast(df, hn::And(fbits, hn::Set(di, 0x7f800000)));
  const auto nu = hn::Sub(hn::Add(hn::Mul(fu, hn::Set(df, 9.0f)), hn::Set(df, 9.0f)),
                          hn::Mul(p2, hn::Set(df, 8.0f)));
  return hn::Mul(nu, r);
}

/// Codes (int32 lanes holding 0..255) of a block with scale absmax -> fp32,
/// as dequantize_value.
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<DF> DecodeCodes(DF df, const detail::QuantTables& t,
                                   hn::Vec<hn::RebindToSigned<DF>> code, hn::Vec<DF> absmax) {
  const hn::RebindToSigned<DF> di;
  if constexpr (!kSigned) {
    return hn::Mul(DecodeMagnitude(df, t, code), absmax);
  } else {
    const auto v = hn::Mul(DecodeMagnitude(df, t, hn::And(code, hn::Set(di, 0x7f))), absmax);
    const auto sign = hn::ShiftLeft<24>(hn::And(code, hn::Set(di, 0x80)));
    return hn::BitCast(df, hn::Or(hn::BitCast(di, v), sign));
  }
}

/// fp32 values x with inverse scale inv (quant_inverse_absmax) -> codes
/// (int32 lanes), as quantize_value.
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeValues(DF df, const detail::QuantTables& t,
                                                        hn::Vec<DF> x, hn::Vec<DF> inv) {
  const hn::RebindToSigned<DF> di;
  const auto y = hn::Mul(x, inv);
  auto a = hn::Abs(y);
  a = hn::IfThenZeroElse(hn::IsNaN(a), a);
  a = hn::Min(a, hn::Set(df, 1.5f));
  const auto e = hn::ShiftRight<23>(hn::BitCast(di, a));
  const auto bi = hn::Sub(hn::Max(e, hn::Set(di, 96)), hn::Set(di, 96));
  const auto base = LookupSmall<32>(di, t.enc_base, bi);
  const auto bound = LookupSmall<32>(df, t.enc_bound, bi);
  // region = base + (a >= bound): a true mask is -1 in integer lanes.
  const auto region = hn::Sub(base, hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(a, bound))));
  const auto scale = LookupSmall<8>(df, t.enc_scale, region);
  const auto offset = LookupSmall<8>(df, t.enc_offset, region);
  const auto hi = LookupSmall<8>(di, t.enc_hi, region);
  const auto pos = FusedMulAdd(df, a, scale, offset);
  auto u = hn::Min(hn::ConvertTo(di, pos), hi);  // pos >= 0.5: truncation rounds
  if constexpr (kSigned) {
    const auto neg = hn::RebindMask(di, hn::Lt(y, hn::Zero(df)));
    u = hn::IfThenElse(neg, hn::Or(u, hn::Set(di, 0x80)), u);
  }
  return u;
}

/// Lanes(df) codes at p -> int32 lanes.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> LoadCodes(DF, const std::uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<std::uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, p)));
}

/// int32 lanes holding 0..255 -> Lanes(df) codes at p.
template <class DF>
HWY_INLINE void StoreCodes(DF, hn::Vec<hn::RebindToSigned<DF>> c, std::uint8_t* HWY_RESTRICT p) {
  const hn::Rebind<std::uint8_t, DF> d8;
  hn::StoreU(hn::DemoteTo(d8, c), d8, p);
}

/// Running absmax of a block in the vector kernels: the lanes' maxima of
/// |x| (a NaN never replaces them) and whether a NaN was seen, as
/// quant_block_absmax.
template <class DF>
struct AbsMaxAcc {
  explicit AbsMaxAcc(DF df) : max(hn::Zero(df)), nan(hn::Zero(df)) {}
  HWY_INLINE void add(DF df, hn::Vec<DF> x) {
    const auto a = hn::Abs(x);
    max = hn::IfThenElse(hn::Gt(a, max), a, max);
    nan = hn::Or(nan, hn::VecFromMask(df, hn::IsNaN(a)));
  }
  /// The block's absmax (the canonical quiet NaN if a NaN was seen).
  HWY_INLINE float result(DF df) const {
    if (!hn::AllFalse(df, hn::MaskFromVec(nan))) return std::numeric_limits<float>::quiet_NaN();
    return hn::GetLane(hn::MaxOfLanes(df, max));
  }
  hn::Vec<DF> max, nan;
};

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_ toggle
