// AVX2 loads and stores of 16 consecutive elements as two vectors in "split
// order" (A = elements 0-3 and 8-11, B = 4-7 and 12-15), the order in which
// in-lane unpacks widen 16 bf16 values and from which in-lane packs (or
// byte shuffles and 64-bit unpacks) narrow two vectors back to 16
// consecutive bf16 values ([Note: bf16 states in split order]).
// Element-wise kernels that run every array through these helpers compute
// each element as in natural order, so their results are bit for bit those
// of the one-vector loop. Highway's toggle guard for "-inl.h" headers, as
// convert-inl.h.
#if defined(ZEROSHARD_KERNELS_CPU_SPLIT_ORDER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZEROSHARD_KERNELS_CPU_SPLIT_ORDER_INL_H_
#undef ZEROSHARD_KERNELS_CPU_SPLIT_ORDER_INL_H_
#else
#define ZEROSHARD_KERNELS_CPU_SPLIT_ORDER_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2

// [Note: bf16 states in split order]
// On an AMD EPYC of family 25 (Zen 3, AVX2 only) the bf16-state AdamW step
// ran at 0.73x of the fp32 kernel at 1 thread (100M parameters), though it
// moves 20 bytes per parameter against 28: it is bound by computation, not
// memory. The fp32 step's square root and two divisions occupy one FP pipe
// for about 11 cycles per 8 elements (llvm-mca -mcpu=znver3 puts them, the
// lane-crossing shuffles and half the shifts on the same pipe; its totals
// matched the timings within 10%), and the fp32 kernel ran in cache at 12.2
// cycles per 8 elements. Widening bf16 with VPMOVZXWD (two uops) and
// narrowing it with a pack and a VPERMQ per state and vector took the
// bf16-state loop to 21.7 cycles. Widening 16 values at once with the
// in-lane VPUNPCKLWD / VPUNPCKHWD (a zero below each value) crosses no lane
// but yields the split order, and narrowing two vectors in that order
// with in-lane operations (VPACKUSDW, or byte shuffles and 64-bit unpacks)
// gives 16 values back in natural order; so only the fp32 arrays take the
// split order, as two 128-bit halves per vector. NaN lanes, which round
// differently, are found by one unordered compare per two vectors and are
// then rounded with the per-lane NaN handling; the other pairs round on
// 16-bit lanes (nine operations per 16 values instead of eleven). In cache
// the loop went from 21.7 to 16.4 cycles per 8 elements (3.2 GHz), and
// 100M parameters at 1 thread from 86 to 68-70 ms (fp32: 60-63 ms):
// 0.88-0.91x, short of the 1.0x issue 34 asks for. What is left is mostly
// the rounding (truncating instead ran at 13.5 cycles). Used by
// adam_bf16_state_simd.cpp for round-to-nearest; stochastic rounding
// hashes each element's index and keeps the one-vector loop.

/// Elements {0-3, 8-11} (half 0) or {4-7, 12-15} (half 1) of p[0, 16).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadSplitF32(DF, const float* HWY_RESTRICT p, int half) {
  return hn::Vec<DF>{_mm256_loadu2_m128(p + 8 + 4 * half, p + 4 * half)};
}

/// Stores a vector of half `half` back to its elements of p[0, 16).
template <class DF>
HWY_INLINE void StoreSplitF32(DF, hn::Vec<DF> v, float* HWY_RESTRICT p, int half) {
  _mm256_storeu2_m128(p + 8 + 4 * half, p + 4 * half, v.raw);
}

/// The 16 bf16 values at p widened to fp32 (exact), halves 0 and 1.
template <class DF>
HWY_INLINE void LoadSplitBf16(DF, const std::uint16_t* HWY_RESTRICT p, hn::Vec<DF>& a, hn::Vec<DF>& b) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i zero = _mm256_setzero_si256();
  a = hn::Vec<DF>{_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, x))};
  b = hn::Vec<DF>{_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, x))};
}

/// Halves 0 and 1 of 16 values of format F at element i of base as fp32
/// (f32 and bf16; fp16 arrays keep the one-vector loop).
template <Fmt F, class DF>
HWY_INLINE void LoadSplitAsF32(DF df, const void* HWY_RESTRICT base, std::size_t i, hn::Vec<DF>& a, hn::Vec<DF>& b) {
  if constexpr (F == Fmt::bf16) {
    LoadSplitBf16(df, static_cast<const std::uint16_t*>(base) + i, a, b);
  } else {
    static_assert(F == Fmt::f32);
    const float* f = static_cast<const float*>(base) + i;
    a = LoadSplitF32(df, f, 0);
    b = LoadSplitF32(df, f, 1);
  }
}

/// 16-bit values in the low half of each u32 lane of halves 0 and 1 ->
/// 16 consecutive values at p (one saturating pack: lanes hold <= 0xffff).
template <class DU>
HWY_INLINE void StoreSplitLow16(DU, hn::Vec<DU> a, hn::Vec<DU> b, std::uint16_t* HWY_RESTRICT p) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32(a.raw, b.raw));
}

/// fp32 values of halves 0 and 1 (none NaN) rounded to bf16, nearest even,
/// as zeroshard::float_to_bf16 -> 16 consecutive values at p. Rounds on
/// 16-bit lanes: each vector's low and high halves gathered in-lane (one
/// byte shuffle), the two vectors' 64-bit groups interleaved (natural
/// order), then hi + (lo + (hi & 1) > 0x8000).
template <class DF>
HWY_INLINE void StoreSplitBf16NotNaN(DF, hn::Vec<DF> a, hn::Vec<DF> b, std::uint16_t* HWY_RESTRICT p) {
  const __m256i halves = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                          0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i xa = _mm256_shuffle_epi8(_mm256_castps_si256(a.raw), halves);
  const __m256i xb = _mm256_shuffle_epi8(_mm256_castps_si256(b.raw), halves);
  const __m256i lo = _mm256_unpacklo_epi64(xa, xb);
  const __m256i hi = _mm256_unpackhi_epi64(xa, xb);
  const __m256i lo_lsb = _mm256_adds_epu16(lo, _mm256_and_si256(hi, _mm256_set1_epi16(1)));
  // lo + lsb > 0x8000 (unsigned) as a signed compare of lo + lsb - 0x8000.
  const __m256i up = _mm256_cmpgt_epi16(_mm256_xor_si256(lo_lsb, _mm256_set1_epi16(-0x8000)), _mm256_setzero_si256());
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_sub_epi16(hi, up));
}

/// Whether a lane of a or b is NaN (one unordered compare).
template <class V>
HWY_INLINE bool AnyNaN(V a, V b) {
  return _mm256_movemask_ps(_mm256_cmp_ps(a.raw, b.raw, _CMP_UNORD_Q)) != 0;
}

/// Halves 0 and 1 rounded to bf16 as zeroshard::float_to_bf16 -> 16
/// consecutive values at p: one unordered compare finds a NaN, and only
/// then the per-lane NaN handling (Bf16Bits) runs.
template <class DF>
HWY_INLINE void StoreSplitBf16(DF df, hn::Vec<DF> a, hn::Vec<DF> b, std::uint16_t* HWY_RESTRICT p) {
  if (HWY_LIKELY(!AnyNaN(a, b))) {
    StoreSplitBf16NotNaN(df, a, b, p);
  } else {
    StoreSplitLow16(hn::RebindToUnsigned<DF>(), Bf16Bits(df, a), Bf16Bits(df, b), p);
  }
}

#endif  // HWY_TARGET == HWY_AVX2

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_SPLIT_ORDER_INL_H_ toggle
