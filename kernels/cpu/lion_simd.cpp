// Vector Lion kernel (Highway, compiled once per target and chosen at run
// time) and the public lion_update entry point, which splits the range over
// kernel_pool() threads. Per lane it performs exactly the operations of
// lion_element() in lion.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/lion_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/lion.h"
#include "kernels/cpu/one_state_update.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

template <class DF>
struct LionVecScalars {
  explicit LionVecScalars(DF df, const LionScalars& s)
      : lr(hn::Set(df, s.lr)),
        beta1(hn::Set(df, s.beta1)),
        one_minus_beta1(hn::Set(df, 1.0f - s.beta1)),
        beta2(hn::Set(df, s.beta2)),
        one_minus_beta2(hn::Set(df, 1.0f - s.beta2)),
        decay(hn::Set(df, s.decay_factor)),
        grad_scale(hn::Set(df, s.grad_scale)) {}
  hn::Vec<DF> lr, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, grad_scale;
};

// Elements [i, i + Lanes) of one update.
template <Fmt kGrad, Fmt kCopy, class DF>
HWY_INLINE void LionStep(DF df, const LionVecScalars<DF>& c, float* HWY_RESTRICT p,
                         const void* HWY_RESTRICT g, float* HWY_RESTRICT m,
                         void* HWY_RESTRICT copy, std::size_t i) {
  const auto gv = hn::Mul(LoadAsF32<kGrad>(df, g, i), c.grad_scale);
  const auto mv = hn::LoadU(df, m + i);
  const auto cv = hn::Add(hn::Mul(c.beta1, mv), hn::Mul(c.one_minus_beta1, gv));
  const auto zero = hn::Zero(df);
  const auto sign = hn::IfThenElse(hn::Gt(cv, zero), hn::Set(df, 1.0f),
                                   hn::IfThenElse(hn::Lt(cv, zero), hn::Set(df, -1.0f), cv));
  const auto pv = hn::Sub(hn::Mul(hn::LoadU(df, p + i), c.decay), hn::Mul(c.lr, sign));
  hn::StoreU(pv, df, p + i);
  hn::StoreU(hn::Add(hn::Mul(c.beta2, mv), hn::Mul(c.one_minus_beta2, gv)), df, m + i);
  StoreFromF32<kCopy>(df, pv, copy, i);
}

template <Fmt kGrad, Fmt kCopy>
void LionLoop(float* p, const void* g, float* m, void* copy, std::size_t n, const LionScalars& s) {
  const hn::ScalableTag<float> df;
  const LionVecScalars<hn::ScalableTag<float>> c(df, s);
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) LionStep<kGrad, kCopy>(df, c, p, g, m, copy, i);
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  TailBuffer tp, tg, tm, tc;
  LionStep<kGrad, kCopy>(df, c, static_cast<float*>(tp.load(p + i, r, 4)),
                         tg.load(Advance(g, i, gs), r, gs),
                         static_cast<float*>(tm.load(m + i, r, 4)),
                         kCopy == Fmt::none ? nullptr : tc.bytes, 0);
  tp.store(p + i, r, 4);
  tm.store(m + i, r, 4);
  if constexpr (kCopy != Fmt::none) tc.store(Advance(copy, i, cs), r, cs);
}

template <Fmt kGrad>
void LionCopy(float* p, const void* g, float* m, void* copy, DType copy_dtype, std::size_t n,
              const LionScalars& s) {
  if (copy == nullptr) return LionLoop<kGrad, Fmt::none>(p, g, m, copy, n, s);
  if (copy_dtype == DType::bf16) return LionLoop<kGrad, Fmt::bf16>(p, g, m, copy, n, s);
  return LionLoop<kGrad, Fmt::f16>(p, g, m, copy, n, s);
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void LionRange(float* p, const void* g, DType grad_dtype, float* m, void* copy, DType copy_dtype,
               std::size_t n, const LionScalars& s) {
  switch (grad_dtype) {
    case DType::bf16: return LionCopy<Fmt::bf16>(p, g, m, copy, copy_dtype, n, s);
    case DType::f16: return LionCopy<Fmt::f16>(p, g, m, copy, copy_dtype, n, s);
    default: return LionCopy<Fmt::f32>(p, g, m, copy, copy_dtype, n, s);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(LionRange);

void lion_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 void* param_copy, DType copy_dtype, std::size_t n, const LionScalars& s) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  one_state_update(HWY_DYNAMIC_DISPATCH(LionRange), param, grad, grad_dtype, exp_avg, param_copy, copy_dtype, n,
                   s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
