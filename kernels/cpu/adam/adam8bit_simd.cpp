// Vector kernel of the 8-bit-state Adam / AdamW update (adam8bit.h):
// Highway, compiled per target and chosen at run time; the public entry
// point splits the blocks over kernel_pool() threads. Per block: pass 1
// decodes both states, runs the Adam arithmetic (adam-inl.h, the fp32
// kernel's operations), writes param (and its copy), keeps the updated states in
// a stack buffer and their absmax; pass 2 encodes them, interleaved with
// the next group of blocks' pass 1 ([Note: 8-bit kernel groups]).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam/adam8bit_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

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

// Pass 1 over Lanes elements (every pointer at the first of them): decode,
// update, store param (and its copy) and the fp32 states to tm / tv.
template <Fmt kGrad, Fmt kCopy, bool kDecoupled, class DF>
HWY_INLINE void Adam8Step(DF df, const AdamVecScalars<DF>& c, const DecodeTables<DF>& ts,
                          const DecodeTables<DF>& tu, hn::Vec<DF> am, hn::Vec<DF> av,
                          float* HWY_RESTRICT p, const void* HWY_RESTRICT g,
                          const std::uint8_t* HWY_RESTRICT cm, const std::uint8_t* HWY_RESTRICT cv,
                          void* HWY_RESTRICT copy, float* HWY_RESTRICT tm, float* HWY_RESTRICT tv,
                          AbsMaxAcc<DF>& acc_m, AbsMaxAcc<DF>& acc_v) {
  auto m = DecodeCodes<true>(df, ts, LoadCodes(df, cm), am);
  auto v = DecodeCodes<false>(df, tu, LoadCodes(df, cv), av);
  auto pv = hn::LoadU(df, p);
  AdamVec<kDecoupled>(df, c, LoadAsF32<kGrad>(df, g, 0), pv, m, v);
  hn::StoreU(pv, df, p);
  StoreFromF32<kCopy>(df, pv, copy, 0);
  hn::Store(m, df, tm);
  hn::Store(v, df, tv);
  acc_m.add(df, m);
  acc_v.add(df, v);
}

// [Note: 8-bit kernel groups]
// Pass 1 runs over a group of whole blocks, kGroupElements elements or one
// block if larger, keeping each block's absmax; pass 2 encodes the group,
// interleaved with the next group's pass 1 so that the encoder's arithmetic
// overlaps the update's square root and division. Per block instead of per
// group, blocks of 64-1024 elements ran at about half the speed of blocks
// of 2048 out of cache with the param on 2 MiB pages (100M parameters, 1
// thread, AVX-512: 2.2-2.7 ns per parameter at block 256 against 1.2 at
// 2048; 1.4 with the param on 4 KiB pages), the short alternation of the
// two passes being the difference. Grouping changes no result: blocks are
// still scaled and encoded one by one.
constexpr std::size_t kGroupElements = 2048;
// Most blocks in a group: kGroupElements / kQuantBlockMin.
constexpr std::size_t kGroupBlocksMax = kGroupElements / kQuantBlockMin;
static_assert(kGroupElements <= kQuantBlockMax && kGroupElements % kQuantBlockMin == 0);

// A group updated by pass 1 whose states wait in a buffer for pass 2.
struct PendingGroup {
  const float* m = nullptr;  // updated exp_avg, zero-padded to whole vectors
  const float* v = nullptr;  // updated exp_avg_sq
  std::uint8_t* cm = nullptr;
  std::uint8_t* cv = nullptr;
  std::size_t len = 0;   // elements
  std::size_t nvec = 0;  // vectors, the last one partial when len % Lanes != 0
  int block_shift = 0;   // log2(block)
  // Per block of the group: the inverse scales (0 for a block left to the
  // scalar encoder), and the blocks the scalar encoder does.
  float inv_m[kGroupBlocksMax] = {};
  float inv_v[kGroupBlocksMax] = {};
  std::size_t scalar_blocks[kGroupBlocksMax] = {};
  std::size_t num_scalar = 0;
};

// Pass 2 for vector k of a pending group: its codes with its block's
// inverse scales.
template <class DF>
HWY_INLINE void EncodeVector(DF df, const EncodeTables<DF>& es, const EncodeTables<DF>& eu,
                             const PendingGroup& pg, std::size_t k) {
  const std::size_t lanes = hn::Lanes(df), i = k * lanes, j = i >> pg.block_shift;
  const auto code_m = EncodeValues<true>(df, es, hn::Load(df, pg.m + i), hn::Set(df, pg.inv_m[j]));
  const auto code_v = EncodeValues<false>(df, eu, hn::Load(df, pg.v + i), hn::Set(df, pg.inv_v[j]));
  if (i + lanes <= pg.len) {
    StoreCodes(df, code_m, pg.cm + i);
    StoreCodes(df, code_v, pg.cv + i);
  } else {
    HWY_ALIGN std::uint8_t om[HWY_MAX_BYTES / 4];
    HWY_ALIGN std::uint8_t ov[HWY_MAX_BYTES / 4];
    StoreCodes(df, code_m, om);
    StoreCodes(df, code_v, ov);
    std::memcpy(pg.cm + i, om, pg.len - i);
    std::memcpy(pg.cv + i, ov, pg.len - i);
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
  const DF df;
  const AdamVecScalars<DF> c(df, s);
  const DecodeTables<DF> ts(df, detail::quant_tables(QuantMap::signed_dynamic));
  const DecodeTables<DF> tu(df, detail::quant_tables(QuantMap::unsigned_dynamic));
  const EncodeTables<DF> es(df, detail::quant_tables(QuantMap::signed_dynamic));
  const EncodeTables<DF> eu(df, detail::quant_tables(QuantMap::unsigned_dynamic));
  const std::size_t lanes = hn::Lanes(df);
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  const std::size_t group = std::max(block, kGroupElements);
  int block_shift = 0;
  while ((std::size_t{1} << block_shift) < block) ++block_shift;
  // Two buffers per state: group q's pass 1 writes one while group q - 1's
  // pass 2 reads the other.
  HWY_ALIGN float bm[2][kQuantBlockMax];
  HWY_ALIGN float bv[2][kQuantBlockMax];
  PendingGroup pend[2];
  for (std::size_t glo = 0, q = 0; glo < n; glo += group, ++q) {
    PendingGroup& prev = pend[(q + 1) % 2];  // empty (nvec 0) for q = 0
    PendingGroup& cur = pend[q % 2];
    const std::size_t glen = std::min(group, n - glo);
    float* tm = bm[q % 2];
    float* tv = bv[q % 2];
    cur.m = tm;
    cur.v = tv;
    cur.cm = st.exp_avg_code + glo;
    cur.cv = st.exp_avg_sq_code + glo;
    cur.len = glen;
    cur.nvec = (glen + lanes - 1) / lanes;
    cur.block_shift = block_shift;
    cur.num_scalar = 0;
    std::size_t k = 0;  // vectors of the previous group encoded
    for (std::size_t lo = 0, j = 0; lo < glen; lo += block, ++j) {
      const std::size_t b = (glo + lo) >> block_shift;  // block index in the state
      const std::size_t len = std::min(block, glen - lo), full = len - len % lanes;
      float* pb = p + glo + lo;
      const void* gb = Advance(g, glo + lo, gs);
      void* copyb = Advance(copy, glo + lo, cs);
      const std::uint8_t* cm = cur.cm + lo;
      const std::uint8_t* cv = cur.cv + lo;
      const auto am = hn::Set(df, st.exp_avg_absmax[b]);
      const auto av = hn::Set(df, st.exp_avg_sq_absmax[b]);
      AbsMaxAcc<DF> acc_m(df), acc_v(df);
      for (std::size_t i = 0; i < full; i += lanes) {
        Adam8Step<kGrad, kCopy, kDecoupled>(df, c, ts, tu, am, av, pb + i, Advance(gb, i, gs),
                                            cm + i, cv + i, Advance(copyb, i, cs), tm + lo + i,
                                            tv + lo + i, acc_m, acc_v);
        if (k < prev.nvec) EncodeVector(df, es, eu, prev, k++);
      }
      if (full < len) {
        // The tail through zero-padded buffers: padding lanes update to
        // p = m = v = 0, which leaves the absmax as it is.
        const std::size_t r = len - full;
        TailBuffer tp, tg, tc, tcm, tcv;
        Adam8Step<kGrad, kCopy, kDecoupled>(
            df, c, ts, tu, am, av, static_cast<float*>(tp.load(pb + full, r, 4)),
            tg.load(Advance(gb, full, gs), r, gs),
            static_cast<const std::uint8_t*>(tcm.load(cm + full, r, 1)),
            static_cast<const std::uint8_t*>(tcv.load(cv + full, r, 1)),
            kCopy == Fmt::none ? nullptr : tc.bytes, tm + lo + full, tv + lo + full, acc_m, acc_v);
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
    for (; k < prev.nvec; ++k) EncodeVector(df, es, eu, prev, k);
    EncodeScalarBlocks(prev);
    prev.nvec = 0;
    prev.num_scalar = 0;
  }
  PendingGroup& last = pend[(quant_block_count(n, group) + 1) % 2];
  for (std::size_t k = 0; k < last.nvec; ++k) EncodeVector(df, es, eu, last, k);
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
