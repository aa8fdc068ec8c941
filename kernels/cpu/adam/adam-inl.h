// Per-target (Highway) Adam / AdamW arithmetic on registers: the operations
// of detail::adam_element (kernels/cpu/adam/adam_element.h) per lane, in the same
// order, the fused multiply-adds of the lerp and of addcmul included
// (FusedMulAdd, one rounding on every target as std::fma). Shared by the vector kernels of every Adam
// state format (adam_simd.cpp: fp32, adam8bit_simd.cpp: 8-bit blockwise,
// adam_bf16_state_simd.cpp: bf16); Highway's toggle guard for "-inl.h"
// headers, as convert-inl.h.
#if defined(ZEROSHARD_KERNELS_CPU_ADAM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZEROSHARD_KERNELS_CPU_ADAM_INL_H_
#undef ZEROSHARD_KERNELS_CPU_ADAM_INL_H_
#else
#define ZEROSHARD_KERNELS_CPU_ADAM_INL_H_
#endif

#include <hwy/highway.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Per-step scalars broadcast once per call.
template <class DF>
struct AdamVecScalars {
  explicit AdamVecScalars(DF df, const AdamScalars& s)
      : grad_scale(hn::Set(df, s.grad_scale)),
        decay(hn::Set(df, s.decay_factor)),
        wd(hn::Set(df, s.weight_decay)),
        lerp_coeff(hn::Set(df, s.lerp_coeff)),
        beta2(hn::Set(df, s.beta2)),
        one_minus_beta2(hn::Set(df, s.one_minus_beta2)),
        eps(hn::Set(df, s.eps)),
        neg_step_size(hn::Set(df, s.neg_step_size)),
        bc2_sqrt(hn::Set(df, s.bc2_sqrt)),
        lerp_small(s.lerp_small) {}
  hn::Vec<DF> grad_scale, decay, wd, lerp_coeff, beta2, one_minus_beta2, eps, neg_step_size,
      bc2_sqrt;
  bool lerp_small;
};

/// The first part of AdamVec: from the widened gradient graw, p decayed
/// (AdamW) or the weight decay added to the gradient (Adam), and m, v
/// updated in place.
template <bool kDecoupled, class DF>
HWY_INLINE void AdamMomentsVec(DF df, const AdamVecScalars<DF>& c, hn::Vec<DF> graw,
                               hn::Vec<DF>& p, hn::Vec<DF>& m, hn::Vec<DF>& v) {
  auto g = hn::Mul(graw, c.grad_scale);
  if constexpr (kDecoupled) {
    p = hn::Mul(p, c.decay);
  } else {
    g = hn::Add(g, hn::Mul(c.wd, p));
  }
  m = FusedMulAdd(df, c.lerp_coeff, hn::Sub(g, m), c.lerp_small ? m : g);
  v = FusedMulAdd(df, hn::Mul(c.one_minus_beta2, g), g, hn::Mul(v, c.beta2));
}

/// The second part of AdamVec: p += (neg_step_size * m) / (sqrt(v) /
/// bc2_sqrt + eps), with p, m, v from AdamMomentsVec. A kernel may put
/// other work between the two parts (adam8bit_simd.cpp does).
template <class DF>
HWY_INLINE void AdamParamVec(DF df, const AdamVecScalars<DF>& c, hn::Vec<DF>& p, hn::Vec<DF> m,
                             hn::Vec<DF> v) {
  (void)df;
  const auto denom = hn::Add(hn::Div(hn::Sqrt(v), c.bc2_sqrt), c.eps);
  p = hn::Add(p, hn::Div(hn::Mul(c.neg_step_size, m), denom));
}

/// One Adam (kDecoupled: AdamW) update of Lanes(df) elements held in
/// registers: graw the widened gradient, p/m/v updated in place.
template <bool kDecoupled, class DF>
HWY_INLINE void AdamVec(DF df, const AdamVecScalars<DF>& c, hn::Vec<DF> graw, hn::Vec<DF>& p,
                        hn::Vec<DF>& m, hn::Vec<DF>& v) {
  AdamMomentsVec<kDecoupled>(df, c, graw, p, m, v);
  AdamParamVec(df, c, p, m, v);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_ADAM_INL_H_ toggle
