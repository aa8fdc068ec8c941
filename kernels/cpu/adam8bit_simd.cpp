// Vector kernel of the 8-bit-state Adam / AdamW update (adam8bit.h):
// Highway, compiled per target and chosen at run time; the public entry
// point splits the blocks over kernel_pool() threads. Per block: pass 1
// decodes both states, runs the Adam arithmetic (adam-inl.h, the fp32
// kernel's operations), writes param (and its copy), keeps the updated
// states in a stack buffer and their absmax; pass 2 encodes them.
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
HWY_INLINE void Adam8Step(DF df, const AdamVecScalars<DF>& c, const detail::QuantTables& ts,
                          const detail::QuantTables& tu, hn::Vec<DF> am, hn::Vec<DF> av,
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

template <Fmt kGrad, Fmt kCopy, bool kDecoupled>
void Adam8Blocks(float* p, const void* g, const Adam8bitState& st, void* copy, std::size_t n,
                 std::size_t block, const AdamScalars& s) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const AdamVecScalars<DF> c(df, s);
  const detail::QuantTables& ts = detail::quant_tables(QuantMap::signed_dynamic);
  const detail::QuantTables& tu = detail::quant_tables(QuantMap::unsigned_dynamic);
  const std::size_t lanes = hn::Lanes(df);
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  HWY_ALIGN float tm[kQuantBlockMax];
  HWY_ALIGN float tv[kQuantBlockMax];
  for (std::size_t lo = 0, b = 0; lo < n; lo += block, ++b) {
    const std::size_t len = std::min(block, n - lo), full = len - len % lanes;
    float* pb = p + lo;
    const void* gb = Advance(g, lo, gs);
    void* copyb = Advance(copy, lo, cs);
    std::uint8_t* cm = st.exp_avg_code + lo;
    std::uint8_t* cv = st.exp_avg_sq_code + lo;
    const auto am = hn::Set(df, st.exp_avg_absmax[b]);
    const auto av = hn::Set(df, st.exp_avg_sq_absmax[b]);
    AbsMaxAcc<DF> acc_m(df), acc_v(df);
    for (std::size_t i = 0; i < full; i += lanes) {
      Adam8Step<kGrad, kCopy, kDecoupled>(df, c, ts, tu, am, av, pb + i, Advance(gb, i, gs), cm + i,
                                          cv + i, Advance(copyb, i, cs), tm + i, tv + i, acc_m,
                                          acc_v);
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
    const float new_am = acc_m.result(df), new_av = acc_v.result(df);
    st.exp_avg_absmax[b] = new_am;
    st.exp_avg_sq_absmax[b] = new_av;
    const auto inv_m = hn::Set(df, quant_inverse_absmax(new_am));
    const auto inv_v = hn::Set(df, quant_inverse_absmax(new_av));
    for (std::size_t i = 0; i < full; i += lanes) {
      StoreCodes(df, EncodeValues<true>(df, ts, hn::Load(df, tm + i), inv_m), cm + i);
      StoreCodes(df, EncodeValues<false>(df, tu, hn::Load(df, tv + i), inv_v), cv + i);
    }
    if (full < len) {
      HWY_ALIGN std::uint8_t om[HWY_MAX_BYTES / 4];
      HWY_ALIGN std::uint8_t ov[HWY_MAX_BYTES / 4];
      StoreCodes(df, EncodeValues<true>(df, ts, hn::Load(df, tm + full), inv_m), om);
      StoreCodes(df, EncodeValues<false>(df, tu, hn::Load(df, tv + full), inv_v), ov);
      std::memcpy(cm + full, om, len - full);
      std::memcpy(cv + full, ov, len - full);
    }
  }
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
