// Vector Adam/AdamW kernel (Highway, compiled once per target and chosen at
// run time) and the public adam_update entry points, which split the range
// over kernel_pool() threads. Per lane it performs exactly the operations of
// detail::adam_element() (adam_element.h), in the same order: no FMA (see
// [Note: strict floating point in kernels] in fp_strict.h) except the lerp's
// and addcmul's, which are FusedMulAdd (convert-inl.h), one rounding on
// every target as std::fma.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam/adam_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam-inl.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/update/parallel_update.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// One Adam (kDecoupled: AdamW) update of Lanes elements of fp32 states.
template <bool kDecoupled, class DF>
struct AdamStep {
  // Elements [at, at + Lanes) (UpdateLoop's step).
  template <Fmt kGrad, Fmt kCopy>
  HWY_INLINE void Run(std::size_t at, std::size_t, float* HWY_RESTRICT p,
                      const void* HWY_RESTRICT g, void* HWY_RESTRICT copy, float* HWY_RESTRICT m,
                      float* HWY_RESTRICT v) const {
    auto pv = hn::LoadU(df, p + at);
    auto mv = hn::LoadU(df, m + at);
    auto vv = hn::LoadU(df, v + at);
    AdamVec<kDecoupled>(df, c, LoadAsF32<kGrad>(df, g, at), pv, mv, vv);
    hn::StoreU(pv, df, p + at);
    hn::StoreU(mv, df, m + at);
    hn::StoreU(vv, df, v + at);
    StoreFromF32<kCopy>(df, pv, copy, at);
  }

  DF df;
  AdamVecScalars<DF> c;
};

template <bool kDecoupled>
void AdamMode(float* p, const void* g, DType grad_dtype, float* m, float* v, void* copy,
              DType copy_dtype, std::size_t n, const AdamScalars& s) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const AdamStep<kDecoupled, DF> step{df, AdamVecScalars<DF>(df, s)};
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    UpdateLoop<kGrad, kCopy>(df, step, n, p, g, copy, m, v);
  });
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void AdamRange(float* p, const void* g, DType grad_dtype, float* m, float* v, void* copy,
               DType copy_dtype, std::size_t n, const AdamScalars& s) {
  if (s.decoupled) return AdamMode<true>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s);
  AdamMode<false>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(AdamRange);

void adam_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                 const AdamScalars& s) {
  parallel_update(HWY_DYNAMIC_DISPATCH(AdamRange), param, grad, grad_dtype, param_copy, copy_dtype,
                  n, s, exp_avg, exp_avg_sq);
}

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                 const AdamScalars& s) {
  adam_update(param, grad, DType::f32, exp_avg, exp_avg_sq, nullptr, DType::bf16, n, s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
