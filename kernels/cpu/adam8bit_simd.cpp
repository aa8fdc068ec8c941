// Vector kernel of the 8-bit-state Adam / AdamW update (adam8bit.h):
// Highway, compiled per target and chosen at run time; the public entry
// point splits the blocks over kernel_pool() threads. Per block: pass 1
// decodes both states, runs the Adam arithmetic (adam-inl.h, the fp32
// kernel's operations), writes param (and its copy), keeps the updated states in
// a stack buffer and their absmax; pass 2 encodes them, interleaved with
// the next block's pass 1.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam8bit_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/adam-inl.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant_map-inl.h"
#include "kernels/cpu/thread_pool.h"

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

// A block updated by pass 1 whose states wait in a buffer for pass 2 (the
// encoding), which runs interleaved with the next block's pass 1 so that
// the encoder's arithmetic overlaps the update's square root and division.
template <class DF>
struct PendingBlock {
  explicit PendingBlock(DF df) : inv_m(hn::Zero(df)), inv_v(hn::Zero(df)) {}
  const float* m = nullptr;  // updated exp_avg, zero-padded to whole vectors
  const float* v = nullptr;  // updated exp_avg_sq
  std::uint8_t* cm = nullptr;
  std::uint8_t* cv = nullptr;
  std::size_t len = 0;   // elements; 0: nothing pending
  std::size_t nvec = 0;  // vectors, the last one partial when len % Lanes != 0
  hn::Vec<DF> inv_m, inv_v;
};

// Pass 2 for vector k of a pending block: its codes with the block's inverse scales.
template <class DF>
HWY_INLINE void EncodeVector(DF df, const EncodeTables<DF>& es, const EncodeTables<DF>& eu,
                             const PendingBlock<DF>& pb, std::size_t k) {
  const std::size_t lanes = hn::Lanes(df), i = k * lanes;
  const auto code_m = EncodeValues<true>(df, es, hn::Load(df, pb.m + i), pb.inv_m);
  const auto code_v = EncodeValues<false>(df, eu, hn::Load(df, pb.v + i), pb.inv_v);
  if (i + lanes <= pb.len) {
    StoreCodes(df, code_m, pb.cm + i);
    StoreCodes(df, code_v, pb.cv + i);
  } else {
    HWY_ALIGN std::uint8_t om[HWY_MAX_BYTES / 4];
    HWY_ALIGN std::uint8_t ov[HWY_MAX_BYTES / 4];
    StoreCodes(df, code_m, om);
    StoreCodes(df, code_v, ov);
    std::memcpy(pb.cm + i, om, pb.len - i);
    std::memcpy(pb.cv + i, ov, pb.len - i);
  }
}

// The codes of len updated values x of one state (a block) whose inverse
// scale is not vector-encodable (absmax 0, NaN, Inf or below 2^-128), by
// the scalar reference.
inline void EncodeScalar(QuantMap map, const float* x, std::size_t len, float inv,
                         std::uint8_t* codes) {
  for (std::size_t i = 0; i < len; ++i) codes[i] = quantize_value(map, x[i], inv);
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
  // Two buffers per state: block b's pass 1 writes one while block b - 1's
  // pass 2 reads the other.
  HWY_ALIGN float bm[2][kQuantBlockMax];
  HWY_ALIGN float bv[2][kQuantBlockMax];
  PendingBlock<DF> pend(df);
  for (std::size_t lo = 0, b = 0; lo < n; lo += block, ++b) {
    const std::size_t len = std::min(block, n - lo), full = len - len % lanes;
    float* tm = bm[b % 2];
    float* tv = bv[b % 2];
    float* pb = p + lo;
    const void* gb = Advance(g, lo, gs);
    void* copyb = Advance(copy, lo, cs);
    std::uint8_t* cm = st.exp_avg_code + lo;
    std::uint8_t* cv = st.exp_avg_sq_code + lo;
    const auto am = hn::Set(df, st.exp_avg_absmax[b]);
    const auto av = hn::Set(df, st.exp_avg_sq_absmax[b]);
    AbsMaxAcc<DF> acc_m(df), acc_v(df);
    std::size_t k = 0;  // vectors of the pending block encoded
    for (std::size_t i = 0; i < full; i += lanes) {
      Adam8Step<kGrad, kCopy, kDecoupled>(df, c, ts, tu, am, av, pb + i, Advance(gb, i, gs),
                                          cm + i, cv + i, Advance(copyb, i, cs), tm + i, tv + i,
                                          acc_m, acc_v);
      if (k < pend.nvec) EncodeVector(df, es, eu, pend, k++);
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
          kCopy == Fmt::none ? nullptr : tc.bytes, tm + full, tv + full, acc_m, acc_v);
      tp.store(pb + full, r, 4);
      if constexpr (kCopy != Fmt::none) tc.store(Advance(copyb, full, cs), r, cs);
    }
    for (; k < pend.nvec; ++k) EncodeVector(df, es, eu, pend, k);
    const float new_am = acc_m.result(df), new_av = acc_v.result(df);
    st.exp_avg_absmax[b] = new_am;
    st.exp_avg_sq_absmax[b] = new_av;
    const float inv_m = quant_inverse_absmax(new_am), inv_v = quant_inverse_absmax(new_av);
    if (VectorEncodable(inv_m) && VectorEncodable(inv_v)) {
      pend.m = tm;
      pend.v = tv;
      pend.cm = cm;
      pend.cv = cv;
      pend.len = len;
      pend.nvec = (len + lanes - 1) / lanes;
      pend.inv_m = hn::Set(df, inv_m);
      pend.inv_v = hn::Set(df, inv_v);
    } else {
      // Rare (a block of zeros, a non-finite or tiny state): both states by
      // the scalar reference now, nothing pending.
      EncodeScalar(QuantMap::signed_dynamic, tm, len, inv_m, cm);
      EncodeScalar(QuantMap::unsigned_dynamic, tv, len, inv_v, cv);
      pend.nvec = 0;
    }
  }
  for (std::size_t k = 0; k < pend.nvec; ++k) EncodeVector(df, es, eu, pend, k);
}

template <Fmt kGrad, Fmt kCopy>
void Adam8Decay(float* p, const void* g, const Adam8bitState& st, void* copy, std::size_t n,
                std::size_t block, const AdamScalars& s) {
  if (s.decoupled) {
    Adam8Blocks<kGrad, kCopy, true>(p, g, st, copy, n, block, s);
  } else {
    Adam8Blocks<kGrad, kCopy, false>(p, g, st, copy, n, block, s);
  }
}

template <Fmt kGrad>
void Adam8Copy(float* p, const void* g, const Adam8bitState& st, void* copy, DType copy_dtype,
               std::size_t n, std::size_t block, const AdamScalars& s) {
  if (copy == nullptr) {
    Adam8Decay<kGrad, Fmt::none>(p, g, st, copy, n, block, s);
  } else if (copy_dtype == DType::bf16) {
    Adam8Decay<kGrad, Fmt::bf16>(p, g, st, copy, n, block, s);
  } else {
    Adam8Decay<kGrad, Fmt::f16>(p, g, st, copy, n, block, s);
  }
}

}  // namespace

// Whole blocks of already offset arrays (n: a multiple of block except at
// the array's end); dtypes and block validated by the caller.
void Adam8Range(float* p, const void* g, DType grad_dtype, const Adam8bitState& st, void* copy,
                DType copy_dtype, std::size_t n, std::size_t block, const AdamScalars& s) {
  switch (grad_dtype) {
    case DType::bf16: return Adam8Copy<Fmt::bf16>(p, g, st, copy, copy_dtype, n, block, s);
    case DType::f16: return Adam8Copy<Fmt::f16>(p, g, st, copy, copy_dtype, n, block, s);
    default: return Adam8Copy<Fmt::f32>(p, g, st, copy, copy_dtype, n, block, s);
  }
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
  const std::size_t blocks = quant_block_count(n, block);
  kernel_pool().parallel_for(
      blocks, 1, std::max<std::size_t>(1, kMinChunkElements / block),
      [&](std::size_t, std::size_t b, std::size_t e) {
        const std::size_t lo = b * block, hi = std::min(n, e * block);
        if (lo >= hi) return;
        Adam8bitState sub{st.exp_avg_code + lo, st.exp_avg_absmax + b, st.exp_avg_sq_code + lo,
                          st.exp_avg_sq_absmax + b};
        void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + lo * cs;
        kernel(param + lo, static_cast<const unsigned char*>(grad) + lo * gs, grad_dtype, sub, copy,
               copy_dtype, hi - lo, block, s);
      });
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
