// Per-target (Highway) encoding and decoding of dynamic tree quantization
// codes (kernels/cpu/adam/quant_map.h, [Note: dynamic tree quantization map]):
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
#include <cstring>
#include <limits>

#include <hwy/highway.h>

#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// log2 of a power of two (compile time).
constexpr int Log2Exact(std::size_t x) { return x <= 1 ? 0 : 1 + Log2Exact(x / 2); }

/// A table of N 32-bit entries (N a power of two) held in registers for a
/// kernel's loop (loaded once: the loops store bytes, which may alias any
/// table in memory, so lookups from memory would reload every iteration).
/// The array it is loaded from holds at least max(N, Lanes) entries. D: a
/// tag of 32-bit lanes (float or int32).
template <std::size_t N, class D>
struct RegTable {
  static constexpr std::size_t kL = hn::MaxLanes(D());
  static constexpr std::size_t kPieces = N <= kL ? 1 : N / kL;

  RegTable(D d, const hn::TFromD<D>* HWY_RESTRICT table) {
    for (std::size_t c = 0; c < kPieces; ++c) piece[c] = hn::LoadU(d, table + c * kL);
  }

  /// table[idx] per lane, idx in [0, N); on AVX-512 with N = 32 only the
  /// index's low 5 bits are read (one two-table permute: Highway 1.0 has
  /// no TwoTablesLookupLanes, hence the intrinsic). Elsewhere one
  /// in-register lookup per Lanes entries, combined by the index's high bits.
  HWY_INLINE hn::Vec<D> operator()(D d, hn::Vec<hn::RebindToSigned<D>> idx) const {
    const hn::RebindToSigned<D> di;
    if constexpr (kPieces == 1) {
      return hn::TableLookupLanes(piece[0], hn::IndicesFromVec(d, idx));
    } else {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
      if constexpr (kPieces == 2 && kL == 16) {
        if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {
          return hn::Vec<D>{_mm512_permutex2var_ps(piece[0].raw, idx.raw, piece[1].raw)};
        } else {
          return hn::Vec<D>{_mm512_permutex2var_epi32(piece[0].raw, idx.raw, piece[1].raw)};
        }
      }
#endif
      const auto ind = hn::IndicesFromVec(d, hn::And(idx, hn::Set(di, static_cast<int>(kL - 1))));
      const auto hi = hn::ShiftRight<Log2Exact(kL)>(idx);
      auto r = hn::TableLookupLanes(piece[0], ind);
      for (std::size_t c = 1; c < kPieces; ++c) {
        const auto in_c = hn::RebindMask(d, hn::Eq(hi, hn::Set(di, static_cast<int>(c))));
        r = hn::IfThenElse(in_c, hn::TableLookupLanes(piece[c], ind), r);
      }
      return r;
    }
  }

  hn::Vec<D> piece[kPieces];
};

// [Note: 8-bit vector encoder]
// The encoders of quantize_value's codes per target, all of them the
// steps of detail::quantize_magnitude_arith (QuantTables: the base region
// of a's binade, one compare with the bound above it, the region's line,
// a truncation) with three liberties that change no code:
// - a = |x * inv| is clamped to [2^-31, inf) instead of [0, 1]: below
//   2^-31 every code is 0 (as in all of binade 96), and above 1 there is
//   no need, as x * inv <= 1 + 2^-21 for x in the block whose absmax gave
//   inv (inv = 1 / absmax rounded, to a subnormal at worst), binade 127 is
//   in the top region, and its line truncates to the top code for every
//   a < 1.003. So the binade e(a) is 96..127, 5 bits.
// - AVX-512 reads the binade's bound and base region from one 32-entry
//   table (enc_bound_base, one two-table permute): the bound's low 4 bits
//   are replaced by the base (plus 8 for the unsigned map, whose region
//   lines sit at 8..15 of the 16-entry line tables shared by both maps), so
//   a compare and a masked add give the region as the low 4 bits of an
//   integer, which is all a 16-lane permute reads.
// - AVX2 and the portable targets, with 8-entry permutes, look up groups of
//   four binades (enc_group_lo / enc_group_hi): each holds at most two
//   bounds, the lower one carrying the group's base region in its low 3
//   bits, and region = base + (a >= lo) + (a >= hi).
// Moving a bound by up to 15 ulp changes the region only for a within 15
// ulp of the bound B = value(2^L - 1), a code value where both regions'
// lines are at 2^L - 0.5 and move by at most 2^(L-1) / 0.9 / B per unit of
// a (the steeper, lower one), so within 71 * 15 * 2^-23 < 2e-4 of it: both
// truncate to 2^L - 1. Both table schemes were checked against
// quantize_magnitude_arith for every float a in [0, 1.0035], and the tests
// check the encoders on every target for every float within 64 ulp of a
// threshold or a region bound.
// Per 16 values on AVX-512: a multiply, a range op (max(|y|, 2^-31)), a
// shift (the binade), a two-table permute, a compare, a masked add, two
// 16-entry permutes, a fused multiply-add and a conversion; the signed
// map's sign bit adds a compare and a masked or. AVX2 (8 values) takes an
// and and a max for a, a shift, two permutes and two compares with
// subtractions for the region, then the same last four. Decoding
// (value(u) * absmax) is the formula of QuantTables with 16- or 8-entry
// permutes indexed by the exponent of 2u + 1 (x86 permutes read only the
// index's low bits, so no mask); signed codes are sign-extended, which
// puts the code's sign bit in the float's. Codes are written four vectors
// at a time by two saturating packs and one permute (StoreCodes4) instead
// of a narrowing store each.

/// The lanes of a vector type (compile time; the kernels use full vectors).
template <class DF>
inline constexpr std::size_t kQuantLanes = hn::MaxLanes(DF());

/// Whether a target has the AVX-512 (16 lanes) or AVX2 (8 lanes) paths of
/// the encoder and decoder; other targets (EMU128, SCALAR) take the
/// portable Highway path, the same arithmetic.
template <class DF>
inline constexpr bool kQuantAvx512 =
    (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL) && kQuantLanes<DF> == 16;
template <class DF>
inline constexpr bool kQuantAvx2 = HWY_TARGET == HWY_AVX2 && kQuantLanes<DF> == 8;

/// table[idx] per lane for a table of Lanes(df) entries on x86 (a permute
/// that reads only the index's low log2(Lanes) bits).
template <class DF>
HWY_INLINE hn::Vec<DF> PermuteLow(DF df, hn::Vec<DF> table, hn::Vec<hn::RebindToSigned<DF>> idx) {
  (void)df;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQuantLanes<DF> == 16) return hn::Vec<DF>{_mm512_permutexvar_ps(idx.raw, table.raw)};
#elif HWY_TARGET == HWY_AVX2
  if constexpr (kQuantLanes<DF> == 8) {
    return hn::Vec<DF>{_mm256_permutevar8x32_ps(table.raw, idx.raw)};
  }
#endif
  static_assert(kQuantAvx512<DF> || kQuantAvx2<DF>, "x86 16- and 8-lane vectors only");
  (void)idx;
  return table;
}

/// a = ta[idx], b = tb[idx] per lane for two 8-entry tables, idx's low 3
/// bits (the higher ones are ignored): one permute each on AVX2, a masked
/// RegTable lookup elsewhere.
template <class DF>
HWY_INLINE void LookupLow3(DF df, const RegTable<8, DF>& ta, const RegTable<8, DF>& tb,
                           hn::Vec<hn::RebindToSigned<DF>> idx, hn::Vec<DF>& a, hn::Vec<DF>& b) {
  if constexpr (kQuantAvx2<DF>) {
    a = PermuteLow(df, ta.piece[0], idx);
    b = PermuteLow(df, tb.piece[0], idx);
  } else {
    idx = hn::And(idx, hn::Set(hn::RebindToSigned<DF>(), 7));
    a = ta(df, idx);
    b = tb(df, idx);
  }
}

/// The decode constants of a map (detail::QuantTables): the 16-entry
/// tables with 16 lanes, else their first 8 entries (see DecodeMagnitude).
template <class DF>
struct DecodeTables {
  static constexpr std::size_t kEntries = kQuantLanes<DF> >= 16 ? 16 : 8;
  DecodeTables(DF df, const detail::QuantTables& t) : r(df, t.dec_r), c(df, t.dec_c) {}
  RegTable<kEntries, DF> r, c;
};

/// The encode constants of a map (detail::QuantTables): on AVX-512 the
/// bound/base table of 32 binades (two registers) and the 16-entry region
/// lines of both maps; elsewhere the two bounds of each group of four
/// binades and this map's region lines (8 entries each).
template <class DF>
struct EncodeTables {
  EncodeTables(DF df, const detail::QuantTables& t)
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
      : bound_base(df, t.enc_bound_base), scale_both(df, t.enc_scale_both),
        offset_both(df, t.enc_offset_both),
#else
      :
#endif
        group_lo(df, t.enc_group_lo), group_hi(df, t.enc_group_hi), scale(df, t.enc_scale),
        offset(df, t.enc_offset) {
  }
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  RegTable<32, DF> bound_base;
  RegTable<16, DF> scale_both, offset_both;
#endif
  RegTable<8, DF> group_lo, group_hi, scale, offset;
};

/// trunc(x) per lane for x in [0, 2^31) (what the encoder converts): the
/// bare VCVTTPS2DQ on x86 (Highway 1.0's ConvertTo adds four operations to
/// saturate out-of-range lanes, which never occur here), ConvertTo elsewhere.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> TruncInRange(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQuantLanes<DF> == 16) return hn::Vec<decltype(di)>{_mm512_cvttps_epi32(x.raw)};
#elif HWY_TARGET == HWY_AVX2
  if constexpr (kQuantLanes<DF> == 8) return hn::Vec<decltype(di)>{_mm256_cvttps_epi32(x.raw)};
#endif
  (void)df;
  return hn::ConvertTo(di, x);
}

/// Magnitudes u (int32 lanes, 0..255) -> map values (detail::QuantTables:
/// fma(u, 9, dec_c[i]) * dec_r[i], i from the exponent of 2u + 1). With 8
/// entries, index 7 stands for both u = 0 and level 7: the signed map has
/// no level 7 (entry 7 is 0, and so is value(0)); the unsigned map's u = 0
/// lanes are zeroed.
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<DF> DecodeMagnitude(DF df, const DecodeTables<DF>& t,
                                       hn::Vec<hn::RebindToSigned<DF>> u) {
  const hn::RebindToSigned<DF> di;
  constexpr bool kZeroFix = !kSigned && DecodeTables<DF>::kEntries == 8;
  const auto fu = hn::ConvertTo(df, u);                                   // exact
  const auto t2 = hn::MulAdd(fu, hn::Set(df, 2.0f), hn::Set(df, 1.0f));  // exact
  auto idx = hn::ShiftRight<23>(hn::BitCast(di, t2));  // 127 + L, or 127 for u = 0
  hn::Vec<DF> value;
  if constexpr (kQuantAvx512<DF> || kQuantAvx2<DF>) {
    const auto nu = hn::MulAdd(fu, hn::Set(df, 9.0f), PermuteLow(df, t.c.piece[0], idx));  // exact
    value = hn::Mul(nu, PermuteLow(df, t.r.piece[0], idx));
  } else {
    idx = hn::And(idx, hn::Set(di, static_cast<int>(DecodeTables<DF>::kEntries) - 1));
    const auto nu = hn::MulAdd(fu, hn::Set(df, 9.0f), t.c(df, idx));  // N_u, exact
    value = hn::Mul(nu, t.r(df, idx));
  }
  if constexpr (kZeroFix) {
    return hn::IfThenZeroElse(hn::RebindMask(df, hn::Eq(u, hn::Zero(di))), value);
  } else {
    return value;  // u = 0: entry 15 (16 entries) or 7 (8, signed map), value 0
  }
}

/// Codes of a block with scale absmax -> fp32, as dequantize_value. code:
/// int32 lanes from LoadCodes<kSigned> (signed map: sign-extended, so the
/// lane's sign bit is the code's).
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<DF> DecodeCodes(DF df, const DecodeTables<DF>& t,
                                   hn::Vec<hn::RebindToSigned<DF>> code, hn::Vec<DF> absmax) {
  const hn::RebindToSigned<DF> di;
  if constexpr (!kSigned) {
    return hn::Mul(DecodeMagnitude<false>(df, t, code), absmax);
  } else {
    const auto v =
        hn::Mul(DecodeMagnitude<true>(df, t, hn::And(code, hn::Set(di, 0x7f))), absmax);
    return hn::BitCast(df, hn::OrAnd(hn::BitCast(di, v), code, hn::Set(di, INT32_MIN)));
  }
}

/// fp32 values x with inverse scale inv -> codes (int32 lanes), as
/// quantize_value, for blocks whose inv is a positive finite number (then
/// x * inv is finite: no NaN reaches the encoder; other blocks take the
/// scalar path, see VectorEncodable) and x in the block whose absmax gave
/// inv = quant_inverse_absmax(absmax), so that |x * inv| <= 1 + 2^-21
/// (codes are exact up to 1.003). [Note: 8-bit vector encoder].
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeValues(DF df, const EncodeTables<DF>& t,
                                                        hn::Vec<DF> x, hn::Vec<DF> inv) {
  const hn::RebindToSigned<DF> di;
  const auto y = hn::Mul(x, inv);
  hn::Vec<decltype(di)> u;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQuantLanes<DF> == 16) {
    // max(|y|, 2^-31) in one op (the larger magnitude, sign cleared): its
    // binade e is 96..127, whose low 5 bits, e - 96, are all the two-table
    // permute reads. a < 2^-31 has code 0 like all of binade 96, and
    // binade 127 (a in [1, 1 + 2^-21] here) has the top code.
    const __m512 a = _mm512_range_ps(y.raw, _mm512_castsi512_ps(_mm512_set1_epi32(0x30000000)), 0x0B);
    const __m512i e = _mm512_srli_epi32(_mm512_castps_si512(a), 23);
    const __m512 bb = _mm512_permutex2var_ps(t.bound_base.piece[0].raw, e, t.bound_base.piece[1].raw);
    const __m512i bbi = _mm512_castps_si512(bb);
    // Low 4 bits: base region (+ 8 unsigned), plus 1 at or above the bound.
    const __m512i region = _mm512_mask_add_epi32(bbi, _mm512_cmp_ps_mask(a, bb, _CMP_GE_OQ), bbi,
                                                 _mm512_set1_epi32(1));
    const __m512 pos = _mm512_fmadd_ps(a, _mm512_permutexvar_ps(region, t.scale_both.piece[0].raw),
                                       _mm512_permutexvar_ps(region, t.offset_both.piece[0].raw));
    __m512i code = _mm512_cvttps_epi32(pos);  // pos >= 0.5: truncation rounds
    if constexpr (kSigned) {
      // Bit 7 for y < 0 (not for -0.0, as quantize_value).
      code = _mm512_mask_or_epi32(code, _mm512_cmp_ps_mask(y.raw, _mm512_setzero_ps(), _CMP_LT_OQ),
                                  code, _mm512_set1_epi32(0x80));
    }
    return hn::Vec<decltype(di)>{code};
  }
#endif
  // max(|y|, 2^-31), binade 96..127: group (e - 96) / 4, the low 3 bits of
  // the exponent field's top 6.
  const auto a = hn::Max(hn::Abs(y), hn::BitCast(df, hn::Set(di, 0x30000000)));
  hn::Vec<DF> lo, hi, scale, offset;
  LookupLow3(df, t.group_lo, t.group_hi, hn::ShiftRight<25>(hn::BitCast(di, a)), lo, hi);
  // Low 3 bits: the group's base region (in lo's), plus 1 at or above each
  // bound (a true mask is -1 in integer lanes).
  auto region = hn::Sub(hn::BitCast(di, lo), hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(a, lo))));
  region = hn::Sub(region, hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(a, hi))));
  LookupLow3(df, t.scale, t.offset, region, scale, offset);
  u = TruncInRange(df, FusedMulAdd(df, a, scale, offset));  // pos >= 0.5: truncation rounds
  if constexpr (kSigned) {
    // Bit 7 for y < 0 (not for -0.0, as quantize_value).
    const auto neg = hn::VecFromMask(di, hn::RebindMask(di, hn::Lt(y, hn::Zero(df))));
    u = hn::OrAnd(u, neg, hn::Set(di, 0x80));
  }
  return u;
}

/// Lanes(df) codes at p -> int32 lanes: sign-extended for the signed map
/// (DecodeCodes<true> takes the sign bit from there), zero-extended else.
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> LoadCodes(DF, const std::uint8_t* HWY_RESTRICT p) {
  const hn::RebindToSigned<DF> di;
  if constexpr (kSigned) {
    const hn::Rebind<std::int8_t, DF> d8;
    return hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(p)));
  } else {
    const hn::Rebind<std::uint8_t, DF> d8;
    return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, p)));
  }
}

/// int32 lanes holding 0..255 -> Lanes(df) codes at p.
template <class DF>
HWY_INLINE void StoreCodes(DF, hn::Vec<hn::RebindToSigned<DF>> c, std::uint8_t* HWY_RESTRICT p) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQuantLanes<DF> == 16) {  // one VPMOVDB (Highway 1.0's DemoteTo packs 4 times)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c.raw));
    return;
  }
#endif
  const hn::Rebind<std::uint8_t, DF> d8;
  hn::StoreU(hn::DemoteTo(d8, c), d8, p);
}

/// Four vectors of int32 lanes holding 0..255, elements [0, 4 * Lanes) in
/// order -> 4 * Lanes codes at p. On x86 two saturating 32->16 packs, one
/// 16->8 pack and one permute that undoes the packs' per-128-bit-block
/// interleaving (4 operations instead of four narrowing stores of 2 each).
template <class DF>
HWY_INLINE void StoreCodes4(DF df, hn::Vec<hn::RebindToSigned<DF>> c0,
                            hn::Vec<hn::RebindToSigned<DF>> c1, hn::Vec<hn::RebindToSigned<DF>> c2,
                            hn::Vec<hn::RebindToSigned<DF>> c3, std::uint8_t* HWY_RESTRICT p) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kQuantLanes<DF> == 16) {
    // Block j of the byte pack holds c0..c3's elements 4j..4j+3, 4 bytes each.
    const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(c0.raw, c1.raw),
                                          _mm512_packus_epi32(c2.raw, c3.raw));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(p, _mm512_permutexvar_epi32(order, b));
    return;
  }
#elif HWY_TARGET == HWY_AVX2
  if constexpr (kQuantLanes<DF> == 8) {
    const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0.raw, c1.raw),
                                          _mm256_packus_epi32(c2.raw, c3.raw));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permutevar8x32_epi32(b, order));
    return;
  }
#endif
  const std::size_t lanes = hn::Lanes(df);
  StoreCodes(df, c0, p);
  StoreCodes(df, c1, p + lanes);
  StoreCodes(df, c2, p + 2 * lanes);
  StoreCodes(df, c3, p + 3 * lanes);
}

/// Running absmax of a block in the vector kernels, as quant_block_absmax:
/// the lanes' maxima of the bits of |x| as integers (the order of
/// non-negative floats; a NaN's bits exceed Inf's 0x7f800000).
template <class DF>
struct AbsMaxAcc {
  explicit AbsMaxAcc(DF df) : max(hn::Zero(hn::RebindToSigned<DF>())) { (void)df; }
  HWY_INLINE void add(DF df, hn::Vec<DF> x) {
    const hn::RebindToSigned<DF> di;
    max = hn::Max(max, hn::BitCast(di, hn::Abs(x)));
    (void)df;
  }
  /// The block's absmax (the canonical quiet NaN if a NaN was seen).
  HWY_INLINE float result(DF df) const {
    const hn::RebindToSigned<DF> di;
    const std::int32_t m = hn::GetLane(hn::MaxOfLanes(di, max));
    (void)df;
    if (m > 0x7f800000) return std::numeric_limits<float>::quiet_NaN();
    float f;
    std::memcpy(&f, &m, 4);
    return f;
  }
  hn::Vec<hn::RebindToSigned<DF>> max;
};

/// Whether a block with inverse scale inv is encoded by the vector code
/// (0 < inv < Inf); otherwise element by element with quantize_value.
inline bool VectorEncodable(float inv) {
  return inv > 0.0f && inv <= std::numeric_limits<float>::max();
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_QUANT_MAP_INL_H_ toggle
