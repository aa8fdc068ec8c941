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

/// The decode constants of a map in registers (detail::QuantTables). With
/// 16 lanes the 16-entry tables are one register each; with fewer, the
/// first 8 entries only (index 7 then also stands for u = 0, whose value
/// the decoder zeroes instead: one lookup per table instead of two).
template <class DF>
struct DecodeTables {
  static constexpr std::size_t kEntries = hn::MaxLanes(DF()) >= 16 ? 16 : 8;
  DecodeTables(DF df, const detail::QuantTables& t) : r(df, t.dec_r), c(df, t.dec_c) {}
  RegTable<kEntries, DF> r, c;
};

/// The encode constants of a map in registers (detail::QuantTables).
template <class DF>
struct EncodeTables {
  using DI = hn::RebindToSigned<DF>;
  EncodeTables(DF df, const detail::QuantTables& t)
      : base(DI(), t.enc_base), bound(df, t.enc_bound), next(df, t.enc_next),
        scale(df, t.enc_scale), offset(df, t.enc_offset), lmax(t.lmax) {}
  RegTable<32, DI> base;
  RegTable<32, DF> bound;
  RegTable<8, DF> next, scale, offset;
  int lmax;
};

/// trunc(x) per lane for x in [0, 2^31) (what the encoder converts): the
/// bare VCVTTPS2DQ on x86 (Highway 1.0's ConvertTo adds four operations to
/// saturate out-of-range lanes, which never occur here), ConvertTo elsewhere.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> TruncInRange(DF df, hn::Vec<DF> x) {
  const hn::RebindToSigned<DF> di;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (hn::MaxLanes(DF()) == 16) return hn::Vec<decltype(di)>{_mm512_cvttps_epi32(x.raw)};
#elif HWY_TARGET == HWY_AVX2
  if constexpr (hn::MaxLanes(DF()) == 8) return hn::Vec<decltype(di)>{_mm256_cvttps_epi32(x.raw)};
#endif
  (void)df;
  return hn::ConvertTo(di, x);
}

/// Magnitudes u (int32 lanes, 0..255) -> map values (detail::QuantTables:
/// fma(u, 9, dec_c[i]) * dec_r[i], i from the exponent of 2u + 1).
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeMagnitude(DF df, const DecodeTables<DF>& t,
                                       hn::Vec<hn::RebindToSigned<DF>> u) {
  const hn::RebindToSigned<DF> di;
  constexpr int kMask = static_cast<int>(DecodeTables<DF>::kEntries) - 1;
  const auto fu = hn::ConvertTo(df, u);                                   // exact
  const auto t2 = hn::MulAdd(fu, hn::Set(df, 2.0f), hn::Set(df, 1.0f));  // exact
  const auto idx = hn::And(hn::ShiftRight<23>(hn::BitCast(di, t2)), hn::Set(di, kMask));
  const auto nu = hn::MulAdd(fu, hn::Set(df, 9.0f), t.c(df, idx));  // N_u, exact
  const auto value = hn::Mul(nu, t.r(df, idx));
  if constexpr (kMask == 15) {
    return value;  // u = 0: entry 15, value 0
  } else {
    return hn::IfThenZeroElse(hn::RebindMask(df, hn::Eq(u, hn::Zero(di))), value);
  }
}

/// Codes (int32 lanes holding 0..255) of a block with scale absmax -> fp32,
/// as dequantize_value.
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<DF> DecodeCodes(DF df, const DecodeTables<DF>& t,
                                   hn::Vec<hn::RebindToSigned<DF>> code, hn::Vec<DF> absmax) {
  const hn::RebindToSigned<DF> di;
  if constexpr (!kSigned) {
    return hn::Mul(DecodeMagnitude(df, t, code), absmax);
  } else {
    const auto v = hn::Mul(DecodeMagnitude(df, t, hn::And(code, hn::Set(di, 0x7f))), absmax);
    const auto sign = hn::ShiftLeft<24>(code);  // bit 7 -> the sign bit
    return hn::BitCast(df, hn::OrAnd(hn::BitCast(di, v), sign, hn::Set(di, INT32_MIN)));
  }
}

/// fp32 values x with inverse scale inv -> codes (int32 lanes), as
/// quantize_value, for blocks whose inv is a positive finite number (then
/// x * inv is finite: no NaN reaches the encoder; other blocks take the
/// scalar path, see VectorEncodable).
template <bool kSigned, class DF>
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> EncodeValues(DF df, const EncodeTables<DF>& t,
                                                        hn::Vec<DF> x, hn::Vec<DF> inv) {
  const hn::RebindToSigned<DF> di;
  const auto y = hn::Mul(x, inv);
  const auto a = hn::Min(hn::Abs(y), hn::Set(df, 1.0f));
  const auto e = hn::ShiftRight<23>(hn::BitCast(di, a));
  hn::Vec<decltype(di)> base;
  hn::Vec<DF> bound;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  // By binade: two 32-entry permutes reading the index's low 5 bits, which
  // for max(e, 96) are max(e, 96) - 96.
  const auto bi = hn::Max(e, hn::Set(di, 96));
  base = t.base(di, bi);
  bound = t.bound(df, bi);
#else
  // By arithmetic (detail::quant_region_base), then the next bound.
  base = hn::Add(hn::ShiftRight<12>(hn::Mul(hn::Sub(e, hn::Set(di, 127)), hn::Set(di, 1233))),
                 hn::Set(di, t.lmax + 1));
  base = hn::Min(hn::Max(base, hn::Zero(di)), hn::Set(di, t.lmax));
  bound = t.next(df, base);
#endif
  // region = base + (a >= bound): a true mask is -1 in integer lanes.
  const auto region = hn::Sub(base, hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(a, bound))));
  // pos >= 0.5: truncation rounds.
  auto u = TruncInRange(df, FusedMulAdd(df, a, t.scale(df, region), t.offset(df, region)));
  if constexpr (kSigned) {
    // Bit 7 for y < 0 (not for -0.0, as quantize_value).
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
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (hn::MaxLanes(DF()) == 16) {  // one VPMOVDB (Highway 1.0's DemoteTo packs 4 times)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(c.raw));
    return;
  }
#endif
  const hn::Rebind<std::uint8_t, DF> d8;
  hn::StoreU(hn::DemoteTo(d8, c), d8, p);
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
