// Vector Lion kernel (Highway, compiled once per target and chosen at run
// time) and the public lion_update entry point, which splits the range over
// kernel_pool() threads. Per lane it performs exactly the operations of
// lion_element() in lion.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/update/lion_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/update/lion.h"
#include "kernels/cpu/update/parallel_update.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// One Lion update of Lanes elements (lion_element per lane), with the
// scalars broadcast once per call.
template <class DF>
struct LionStep {
  explicit LionStep(DF d, const LionScalars& s)
      : df(d),
        lr(hn::Set(df, s.lr)),
        beta1(hn::Set(df, s.beta1)),
        one_minus_beta1(hn::Set(df, 1.0f - s.beta1)),
        beta2(hn::Set(df, s.beta2)),
        one_minus_beta2(hn::Set(df, 1.0f - s.beta2)),
        decay(hn::Set(df, s.decay_factor)),
        grad_scale(hn::Set(df, s.grad_scale)) {}

  // Elements [at, at + Lanes) (UpdateLoop's step).
  template <Fmt kGrad, Fmt kCopy>
  HWY_INLINE void Run(std::size_t at, std::size_t, float* HWY_RESTRICT p, const void* HWY_RESTRICT g,
                      void* HWY_RESTRICT copy, float* HWY_RESTRICT m) const {
    const auto gv = hn::Mul(LoadAsF32<kGrad>(df, g, at), grad_scale);
    const auto mv = hn::LoadU(df, m + at);
    const auto cv = hn::Add(hn::Mul(beta1, mv), hn::Mul(one_minus_beta1, gv));
    const auto zero = hn::Zero(df);
    const auto sign = hn::IfThenElse(hn::Gt(cv, zero), hn::Set(df, 1.0f),
                                     hn::IfThenElse(hn::Lt(cv, zero), hn::Set(df, -1.0f), cv));
    const auto pv = hn::Sub(hn::Mul(hn::LoadU(df, p + at), decay), hn::Mul(lr, sign));
    hn::StoreU(pv, df, p + at);
    hn::StoreU(hn::Add(hn::Mul(beta2, mv), hn::Mul(one_minus_beta2, gv)), df, m + at);
    StoreFromF32<kCopy>(df, pv, copy, at);
  }

  DF df;
  hn::Vec<DF> lr, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, grad_scale;
};

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void LionRange(float* p, const void* g, DType grad_dtype, float* m, void* copy, DType copy_dtype,
               std::size_t n, const LionScalars& s) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const LionStep<DF> step(df, s);
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    UpdateLoop<kGrad, kCopy>(df, step, n, p, g, copy, m);
  });
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(LionRange);

void lion_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 void* param_copy, DType copy_dtype, std::size_t n, const LionScalars& s) {
  parallel_update(HWY_DYNAMIC_DISPATCH(LionRange), param, grad, grad_dtype, param_copy, copy_dtype,
                  n, s, exp_avg);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
