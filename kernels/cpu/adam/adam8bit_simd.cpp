// Vector kernel of the 8-bit-state Adam / AdamW update (adam8bit.h):
// Highway, compiled per target and chosen at run time; the public entry
// point splits the blocks over kernel_pool() threads. Per group of blocks:
// pass 1 decodes both states, runs the Adam arithmetic (adam-inl.h, the
// fp32 kernel's operations), writes param (and its copy), keeps the
// updated states in a stack buffer and their absmax; pass 2 encodes them,
// interleaved with the next group's pass 1 ([Note: 8-bit kernel groups]),
// which prefetches ahead ([Note: 8-bit kernel prefetch]).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam/adam8bit_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/adam/adam-inl.h"
#include "kernels/cpu/adam/adam8bit.h"
#include "kernels/cpu/adam/quant_map-inl.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// Pass 1 over Lanes elements, in two parts so that a kernel can put other
// work between them ([Note: 8-bit kernel groups]). The first decodes both
// states, updates them (AdamMomentsVec) and the decayed param, stores the
// states to tm / tv and adds them to the block's absmax; the second
// (Adam8Param) updates param and stores it (and its copy). Every pointer
// at the first of the Lanes elements.
template <class DF>
struct Adam8Lanes {
  hn::Vec<DF> p, m, v;
};

template <Fmt kGrad, bool kDecoupled, class DF>
HWY_INLINE Adam8Lanes<DF> Adam8Moments(DF df, const AdamVecScalars<DF>& c,
                                       const DecodeTables<DF>& ts, const DecodeTables<DF>& tu,
                                       hn::Vec<DF> am, hn::Vec<DF> av, const float* HWY_RESTRICT p,
                                       const void* HWY_RESTRICT g,
                                       const std::uint8_t* HWY_RESTRICT cm,
                                       const std::uint8_t* HWY_RESTRICT cv, float* HWY_RESTRICT tm,
                                       float* HWY_RESTRICT tv, AbsMaxAcc<DF>& acc_m,
                                       AbsMaxAcc<DF>& acc_v) {
  Adam8Lanes<DF> r{hn::LoadU(df, p), DecodeCodes<true>(df, ts, LoadCodes<true>(df, cm), am),
                   DecodeCodes<false>(df, tu, LoadCodes<false>(df, cv), av)};
  AdamMomentsVec<kDecoupled>(df, c, LoadAsF32<kGrad>(df, g, 0), r.p, r.m, r.v);
  hn::Store(r.m, df, tm);
  hn::Store(r.v, df, tv);
  acc_m.add(df, r.m);
  acc_v.add(df, r.v);
  return r;
}

template <Fmt kCopy, class DF>
HWY_INLINE void Adam8Param(DF df, const AdamVecScalars<DF>& c, Adam8Lanes<DF> r,
                           float* HWY_RESTRICT p, void* HWY_RESTRICT copy) {
  AdamParamVec(df, c, r.p, r.m, r.v);
  hn::StoreU(r.p, df, p);
  StoreFromF32<kCopy>(df, r.p, copy, 0);
}

// [Note: 8-bit kernel groups]
// Pass 1 runs over a group of whole blocks, kGroupElements elements or one
// block if larger, keeping each block's absmax; pass 2 encodes the group,
// interleaved with the next group's pass 1 so that the encoder's
// arithmetic overlaps the update's square roots and divisions: one unit
// of pass 2 (kUnitVectors vectors, whose codes StoreCodes4 packs and
// stores at once) per kUnitVectors vectors of pass 1, in this order: the
// first part of pass 1 (decoding and the moments) for the unit's vectors,
// the encoder, then the second part (the divisions and param). In cache
// (AVX-512, 32K elements, a loop of this shape alone) that order ran at
// 0.66 ns per element, against 0.75 for each vector's pass 1 followed by
// its share of the encoder and 0.71 for the encoder after both parts: the
// square roots and divisions of the unit start together and the encoder's
// independent operations fill the wait for them. Per block instead of per
// group, blocks of 64-1024 elements ran at about half the speed of blocks
// of 2048 out of cache with the param on 2 MiB pages (100M parameters, 1
// thread, AVX-512: 2.2-2.7 ns per parameter at block 256 against 1.2 at
// 2048; 1.4 with the param on 4 KiB pages), the short alternation of the
// two passes being the difference. Grouping changes no result: blocks are
// still scaled and encoded one by one (a unit never spans two blocks, as
// blocks are multiples of 64 elements).
constexpr std::size_t kGroupElements = 2048;
// Most blocks in a group: kGroupElements / kQuantBlockMin.
constexpr std::size_t kGroupBlocksMax = kGroupElements / kQuantBlockMin;
// Vectors per unit of pass 2 (at most 64 elements on every target: one
// block or less).
constexpr std::size_t kUnitVectors = 4;
static_assert(kGroupElements <= kQuantBlockMax && kGroupElements % kQuantBlockMin == 0);
static_assert(kUnitVectors * HWY_MAX_BYTES / 4 <= kQuantBlockMin);

// [Note: 8-bit kernel buffers]
// Pass 1 stores unit k of group q at the same offset of its buffers from
// which pass 2 then loads unit k of group q - 1. With the four buffers
// kQuantBlockMax floats (16 KiB) apart those loads and stores shared their
// address's low 12 bits, and on an AMD EPYC (Zen 3) each load waited on
// the store before it as if it might read it (4K aliasing): 10M parameters
// at 1 thread took 25.0 ms, and 17.9 ms once the buffers were 1 KiB more
// apart (48 floats apart: 18.8 ms, 16: 25.0, 144 and 400: 17.8-17.9). At
// 100M, whose arrays lie elsewhere against the stack, it gained only 2-3%
// (179-180 ms to 175-176 at 1 thread, in alternating runs; 2 threads
// within noise; in cache, 16384 elements, no change): how much a step
// loses to aliasing depends on where the arrays and the spilled registers
// fall, and this removes the part that does not.
constexpr std::size_t kBufferPad = 256;

// A group updated by pass 1 whose states wait in a buffer for pass 2.
struct PendingGroup {
  const float* m = nullptr;  // updated exp_avg, zero-padded to whole units
  const float* v = nullptr;  // updated exp_avg_sq
  std::uint8_t* cm = nullptr;
  std::uint8_t* cv = nullptr;
  std::size_t len = 0;     // elements
  std::size_t nunits = 0;  // units of pass 2, the last one partial when len % unit != 0
  int block_shift = 0;     // log2(block)
  // Per block of the group: the inverse scales (0 for a block left to the
  // scalar encoder), and the blocks the scalar encoder does.
  float inv_m[kGroupBlocksMax] = {};
  float inv_v[kGroupBlocksMax] = {};
  std::size_t scalar_blocks[kGroupBlocksMax] = {};
  std::size_t num_scalar = 0;
};

// Pass 2 for unit k of a pending group: the codes of its kUnitVectors
// vectors with their block's inverse scales.
template <class DF>
HWY_INLINE void EncodeUnit(DF df, const EncodeTables<DF>& es, const EncodeTables<DF>& eu,
                           const PendingGroup& pg, std::size_t k) {
  const std::size_t lanes = hn::Lanes(df), unit = kUnitVectors * lanes, i = k * unit;
  const std::size_t j = i >> pg.block_shift;
  const auto inv_m = hn::Set(df, pg.inv_m[j]);
  const auto inv_v = hn::Set(df, pg.inv_v[j]);
  const float* HWY_RESTRICT m = pg.m + i;
  const float* HWY_RESTRICT v = pg.v + i;
  const auto m0 = EncodeValues<true>(df, es, hn::Load(df, m), inv_m);
  const auto v0 = EncodeValues<false>(df, eu, hn::Load(df, v), inv_v);
  const auto m1 = EncodeValues<true>(df, es, hn::Load(df, m + lanes), inv_m);
  const auto v1 = EncodeValues<false>(df, eu, hn::Load(df, v + lanes), inv_v);
  const auto m2 = EncodeValues<true>(df, es, hn::Load(df, m + 2 * lanes), inv_m);
  const auto v2 = EncodeValues<false>(df, eu, hn::Load(df, v + 2 * lanes), inv_v);
  const auto m3 = EncodeValues<true>(df, es, hn::Load(df, m + 3 * lanes), inv_m);
  const auto v3 = EncodeValues<false>(df, eu, hn::Load(df, v + 3 * lanes), inv_v);
  if (i + unit <= pg.len) {
    StoreCodes4(df, m0, m1, m2, m3, pg.cm + i);
    StoreCodes4(df, v0, v1, v2, v3, pg.cv + i);
  } else {
    HWY_ALIGN std::uint8_t om[kUnitVectors * HWY_MAX_BYTES / 4];
    HWY_ALIGN std::uint8_t ov[kUnitVectors * HWY_MAX_BYTES / 4];
    StoreCodes4(df, m0, m1, m2, m3, om);
    StoreCodes4(df, v0, v1, v2, v3, ov);
    std::memcpy(pg.cm + i, om, pg.len - i);
    std::memcpy(pg.cv + i, ov, pg.len - i);
  }
}

// [Note: 8-bit kernel prefetch]
// Out of cache the 8-bit step also waited on memory, though it moves only
// 16 B per element (the fp32 step 28): the hardware prefetchers did not
// keep far enough ahead of a loop with this much arithmetic per byte.
// Prefetching param, gradient and both codes kPrefetchElements ahead, one
// unit per unit of pass 1, took 100M parameters (AVX-512, block 256, Intel
// Xeon) from 110 to 90 ms at 1 thread and from 57 to 46 ms at 2 threads
// when it was added (before the order of [Note: 8-bit kernel groups]);
// 256-1024 elements ahead did about equally well, 2048 and more worse (the
// group buffers and the lines in flight crowd the L1); leaving the codes
// out of it made no difference.
constexpr std::size_t kPrefetchElements = 1024;

// Prefetches `unit` elements of param, gradient and both codes (p, cm, cv
// at the first of them, the gradient at element gi of g).
template <Fmt kGrad>
HWY_INLINE void PrefetchUnit(const float* p, const void* g, std::size_t gi, const std::uint8_t* cm,
                             const std::uint8_t* cv, std::size_t unit) {
  constexpr std::size_t gs = fmt_size(kGrad);
  for (std::size_t b = 0; b < unit * 4; b += 64) {
    hwy::Prefetch(reinterpret_cast<const char*>(p) + b);
  }
  for (std::size_t b = 0; b < unit * gs; b += 64) {
    hwy::Prefetch(static_cast<const char*>(g) + gi * gs + b);
  }
  for (std::size_t b = 0; b < unit; b += 64) {
    hwy::Prefetch(cm + b);
    hwy::Prefetch(cv + b);
  }
}

// The codes of the pending group's blocks whose inverse scale is not
// vector-encodable (absmax 0, NaN, Inf or below 2^-128), by the scalar
// reference; they overwrite what the vector encoder wrote there.
inline void EncodeScalarBlocks(const PendingGroup& pg) {
  const std::size_t block = std::size_t{1} << pg.block_shift;
  for (std::size_t s = 0; s < pg.num_scalar; ++s) {
    const std::size_t lo = pg.scalar_blocks[s] * block, len = std::min(block, pg.len - lo);
    const float inv_m = pg.inv_m[pg.scalar_blocks[s]], inv_v = pg.inv_v[pg.scalar_blocks[s]];
    for (std::size_t i = lo; i < lo + len; ++i) {
      pg.cm[i] = quantize_value(QuantMap::signed_dynamic, pg.m[i], inv_m);
      pg.cv[i] = quantize_value(QuantMap::unsigned_dynamic, pg.v[i], inv_v);
    }
  }
}

template <Fmt kGrad, Fmt kCopy, bool kDecoupled>
void Adam8Blocks(float* p, const void* g, const Adam8bitState& st, void* copy, std::size_t n,
                 std::size_t block, const AdamScalars& s) {
  using DF = hn::ScalableTag<float>;
  using DI = hn::RebindToSigned<DF>;
  const DF df;
  const AdamVecScalars<DF> c(df, s);
  const DecodeTables<DF> ts(df, detail::quant_tables(QuantMap::signed_dynamic));
  const DecodeTables<DF> tu(df, detail::quant_tables(QuantMap::unsigned_dynamic));
  const EncodeTables<DF> es(df, detail::quant_tables(QuantMap::signed_dynamic));
  const EncodeTables<DF> eu(df, detail::quant_tables(QuantMap::unsigned_dynamic));
  const std::size_t lanes = hn::Lanes(df), unit = kUnitVectors * lanes;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  const std::size_t group = std::max(block, kGroupElements);
  int block_shift = 0;
  while ((std::size_t{1} << block_shift) < block) ++block_shift;
  // Two buffers per state: group q's pass 1 writes one while group q - 1's
  // pass 2 reads the other; kBufferPad apart ([Note: 8-bit kernel buffers]).
  HWY_ALIGN float bufs[4][kQuantBlockMax + kBufferPad];
  float* bm[2] = {bufs[0], bufs[2]};
  float* bv[2] = {bufs[1], bufs[3]};
  PendingGroup pend[2];
  for (std::size_t glo = 0, q = 0; glo < n; glo += group, ++q) {
    PendingGroup& prev = pend[(q + 1) % 2];  // empty (nunits 0) for q = 0
    PendingGroup& cur = pend[q % 2];
    const std::size_t glen = std::min(group, n - glo);
    float* tm = bm[q % 2];
    float* tv = bv[q % 2];
    cur.m = tm;
    cur.v = tv;
    cur.cm = st.exp_avg_code + glo;
    cur.cv = st.exp_avg_sq_code + glo;
    cur.len = glen;
    cur.nunits = (glen + unit - 1) / unit;
    cur.block_shift = block_shift;
    cur.num_scalar = 0;
    std::size_t k = 0;  // units of the previous group encoded
    for (std::size_t lo = 0, j = 0; lo < glen; lo += block, ++j) {
      const std::size_t b = (glo + lo) >> block_shift;  // block index in the state
      const std::size_t len = std::min(block, glen - lo), full = len - len % lanes;
      const std::size_t full_units = len - len % unit;
      float* pb = p + glo + lo;
      const void* gb = Advance(g, glo + lo, gs);
      void* copyb = Advance(copy, glo + lo, cs);
      const std::uint8_t* cm = cur.cm + lo;
      const std::uint8_t* cv = cur.cv + lo;
      float* tmb = tm + lo;
      float* tvb = tv + lo;
      const auto am = hn::Set(df, st.exp_avg_absmax[b]);
      const auto av = hn::Set(df, st.exp_avg_sq_absmax[b]);
      AbsMaxAcc<DF> acc_m(df), acc_v(df);
      std::size_t i = 0;
      // Units with a unit of the previous group to encode. That unit is in
      // a whole group (only the last group can be partial, and it is
      // encoded after the loop) and in one block.
      for (; i < full_units && k < prev.nunits; i += unit, ++k) {
        if (glo + lo + i + kPrefetchElements + unit <= n) {
          const std::size_t f = i + kPrefetchElements;
          PrefetchUnit<kGrad>(pb + f, gb, f, cm + f, cv + f, unit);
        }
        Adam8Lanes<DF> r[kUnitVectors];
        for (std::size_t u = 0; u < kUnitVectors; ++u) {
          const std::size_t e = i + u * lanes;
          r[u] = Adam8Moments<kGrad, kDecoupled>(df, c, ts, tu, am, av, pb + e, Advance(gb, e, gs),
                                                 cm + e, cv + e, tmb + e, tvb + e, acc_m, acc_v);
        }
        const std::size_t pi = k * unit;
        const auto inv_m = hn::Set(df, prev.inv_m[pi >> block_shift]);
        const auto inv_v = hn::Set(df, prev.inv_v[pi >> block_shift]);
        const float* HWY_RESTRICT pm = prev.m + pi;
        const float* HWY_RESTRICT pv = prev.v + pi;
        hn::Vec<DI> em[kUnitVectors], ev[kUnitVectors];
        for (std::size_t u = 0; u < kUnitVectors; ++u) {
          em[u] = EncodeValues<true>(df, es, hn::Load(df, pm + u * lanes), inv_m);
          ev[u] = EncodeValues<false>(df, eu, hn::Load(df, pv + u * lanes), inv_v);
        }
        StoreCodes4(df, em[0], em[1], em[2], em[3], prev.cm + pi);
        StoreCodes4(df, ev[0], ev[1], ev[2], ev[3], prev.cv + pi);
        for (std::size_t u = 0; u < kUnitVectors; ++u) {
          const std::size_t e = i + u * lanes;
          Adam8Param<kCopy>(df, c, r[u], pb + e, Advance(copyb, e, cs));
        }
      }
      for (; i < full_units; i += unit) {  // the first group's
        Adam8Lanes<DF> r[kUnitVectors];
        for (std::size_t u = 0; u < kUnitVectors; ++u) {
          const std::size_t e = i + u * lanes;
          r[u] = Adam8Moments<kGrad, kDecoupled>(df, c, ts, tu, am, av, pb + e, Advance(gb, e, gs),
                                                 cm + e, cv + e, tmb + e, tvb + e, acc_m, acc_v);
        }
        for (std::size_t u = 0; u < kUnitVectors; ++u) {
          const std::size_t e = i + u * lanes;
          Adam8Param<kCopy>(df, c, r[u], pb + e, Advance(copyb, e, cs));
        }
      }
      for (; i < full; i += lanes) {  // the array's last block only
        const auto r = Adam8Moments<kGrad, kDecoupled>(df, c, ts, tu, am, av, pb + i,
                                                       Advance(gb, i, gs), cm + i, cv + i, tmb + i,
                                                       tvb + i, acc_m, acc_v);
        Adam8Param<kCopy>(df, c, r, pb + i, Advance(copyb, i, cs));
      }
      if (full < len) {
        // The tail through zero-padded buffers: padding lanes update to
        // p = m = v = 0, which leaves the absmax as it is.
        const std::size_t r = len - full;
        TailBuffer tp, tg, tc, tcm, tcv;
        float* tpb = static_cast<float*>(tp.load(pb + full, r, 4));
        const auto rt = Adam8Moments<kGrad, kDecoupled>(
            df, c, ts, tu, am, av, tpb, tg.load(Advance(gb, full, gs), r, gs),
            static_cast<const std::uint8_t*>(tcm.load(cm + full, r, 1)),
            static_cast<const std::uint8_t*>(tcv.load(cv + full, r, 1)), tmb + full, tvb + full,
            acc_m, acc_v);
        Adam8Param<kCopy>(df, c, rt, tpb, kCopy == Fmt::none ? nullptr : tc.bytes);
        tp.store(pb + full, r, 4);
        if constexpr (kCopy != Fmt::none) tc.store(Advance(copyb, full, cs), r, cs);
      }
      const float new_am = acc_m.result(df), new_av = acc_v.result(df);
      st.exp_avg_absmax[b] = new_am;
      st.exp_avg_sq_absmax[b] = new_av;
      const float inv_m = quant_inverse_absmax(new_am), inv_v = quant_inverse_absmax(new_av);
      cur.inv_m[j] = inv_m;
      cur.inv_v[j] = inv_v;
      // Rare (a block of zeros, a non-finite or tiny state): both states by
      // the scalar reference after the vector encoder.
      if (!(VectorEncodable(inv_m) && VectorEncodable(inv_v))) cur.scalar_blocks[cur.num_scalar++] = j;
    }
    // Zeros after the group's last vector, up to a whole unit (the array's
    // last group only), so pass 2 reads defined values there.
    const std::size_t written = (glen + lanes - 1) / lanes * lanes;
    std::fill(tm + written, tm + cur.nunits * unit, 0.0f);
    std::fill(tv + written, tv + cur.nunits * unit, 0.0f);
    for (; k < prev.nunits; ++k) EncodeUnit(df, es, eu, prev, k);
    EncodeScalarBlocks(prev);
    prev.nunits = 0;
    prev.num_scalar = 0;
  }
  PendingGroup& last = pend[(quant_block_count(n, group) + 1) % 2];
  for (std::size_t k = 0; k < last.nunits; ++k) EncodeUnit(df, es, eu, last, k);
  EncodeScalarBlocks(last);
}

}  // namespace

// Whole blocks of already offset arrays (n: a multiple of block except at
// the array's end); dtypes and block validated by the caller.
void Adam8Range(float* p, const void* g, DType grad_dtype, const Adam8bitState& st, void* copy,
                DType copy_dtype, std::size_t n, std::size_t block, const AdamScalars& s) {
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    if (s.decoupled) return Adam8Blocks<kGrad, kCopy, true>(p, g, st, copy, n, block, s);
    Adam8Blocks<kGrad, kCopy, false>(p, g, st, copy, n, block, s);
  });
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(Adam8Range);

void adam8bit_update(float* param, const void* grad, DType grad_dtype, const Adam8bitState& st,
                     void* param_copy, DType copy_dtype, std::size_t n, std::size_t block,
                     const AdamScalars& s) {
  detail::check_adam8bit_args("adam8bit_update", st, grad_dtype, param_copy, copy_dtype, n, block);
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(Adam8Range);
  const std::size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  parallel_for_blocks(n, block, [&](std::size_t b, std::size_t lo, std::size_t hi) {
    Adam8bitState sub{st.exp_avg_code + lo, st.exp_avg_absmax + b, st.exp_avg_sq_code + lo,
                      st.exp_avg_sq_absmax + b};
    void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + lo * cs;
    kernel(param + lo, static_cast<const unsigned char*>(grad) + lo * gs, grad_dtype, sub, copy,
           copy_dtype, hi - lo, block, s);
  });
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
