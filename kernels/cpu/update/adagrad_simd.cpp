// Vector Adagrad kernel (Highway, compiled once per target and chosen at run
// time) and the public adagrad_update entry point, which splits the range
// over kernel_pool() threads. Per lane it performs exactly the operations of
// adagrad_element() in adagrad.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/update/adagrad_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/update/adagrad.h"
#include "kernels/cpu/update/parallel_update.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// One Adagrad update of Lanes elements (adagrad_element per lane), with the
// scalars broadcast once per call. kDecay: weight_decay != 0; kFirst: the
// sum starts at initial_sum (step 1).
template <bool kDecay, bool kFirst, class DF>
struct AdagradStep {
  explicit AdagradStep(DF d, const AdagradScalars& s)
      : df(d),
        neg_clr(hn::Set(df, s.neg_clr)),
        eps(hn::Set(df, s.eps)),
        wd(hn::Set(df, s.weight_decay)),
        initial_sum(hn::Set(df, s.initial_sum)),
        grad_scale(hn::Set(df, s.grad_scale)) {}

  // Elements [at, at + Lanes) (UpdateLoop's step).
  template <Fmt kGrad, Fmt kCopy>
  HWY_INLINE void Run(std::size_t at, std::size_t, float* HWY_RESTRICT p,
                      const void* HWY_RESTRICT g, void* HWY_RESTRICT copy,
                      float* HWY_RESTRICT sum) const {
    auto pv = hn::LoadU(df, p + at);
    auto gv = hn::Mul(LoadAsF32<kGrad>(df, g, at), grad_scale);
    if constexpr (kDecay) gv = hn::Add(gv, hn::Mul(wd, pv));
    const auto s0 = kFirst ? initial_sum : hn::LoadU(df, sum + at);
    const auto sv = hn::Add(s0, hn::Mul(gv, gv));
    const auto std_dev = hn::Add(hn::Sqrt(sv), eps);
    pv = hn::Add(pv, hn::Div(hn::Mul(neg_clr, gv), std_dev));
    hn::StoreU(pv, df, p + at);
    hn::StoreU(sv, df, sum + at);
    StoreFromF32<kCopy>(df, pv, copy, at);
  }

  DF df;
  hn::Vec<DF> neg_clr, eps, wd, initial_sum, grad_scale;
};

template <bool kDecay, bool kFirst>
void AdagradMode(float* p, const void* g, DType grad_dtype, float* sum, void* copy,
                 DType copy_dtype, std::size_t n, const AdagradScalars& s) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const AdagradStep<kDecay, kFirst, DF> step(df, s);
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    UpdateLoop<kGrad, kCopy>(df, step, n, p, g, copy, sum);
  });
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void AdagradRange(float* p, const void* g, DType grad_dtype, float* sum, void* copy,
                  DType copy_dtype, std::size_t n, const AdagradScalars& s) {
  const bool decay = s.weight_decay != 0.0f;
  if (s.first_step) {
    if (decay) return AdagradMode<true, true>(p, g, grad_dtype, sum, copy, copy_dtype, n, s);
    return AdagradMode<false, true>(p, g, grad_dtype, sum, copy, copy_dtype, n, s);
  }
  if (decay) return AdagradMode<true, false>(p, g, grad_dtype, sum, copy, copy_dtype, n, s);
  return AdagradMode<false, false>(p, g, grad_dtype, sum, copy, copy_dtype, n, s);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(AdagradRange);

void adagrad_update(float* param, const void* grad, DType grad_dtype, float* state_sum,
                    void* param_copy, DType copy_dtype, std::size_t n, const AdagradScalars& s) {
  parallel_update(HWY_DYNAMIC_DISPATCH(AdagradRange), param, grad, grad_dtype, param_copy,
                  copy_dtype, n, s, state_sum);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
