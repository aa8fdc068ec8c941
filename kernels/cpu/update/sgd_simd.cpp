// Vector SGD kernel (Highway, compiled once per target and chosen at run
// time) and the public sgd_update entry points, which split the range over
// kernel_pool() threads. Per lane it performs exactly the operations of
// sgd_element() in sgd.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/update/sgd_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/update/sgd.h"
#include "kernels/cpu/update/parallel_update.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// One SGD update of Lanes elements (sgd_element per lane), with the scalars
// broadcast once per call. kMomentum: a buffer is used; kFirst: it is
// initialised with g; kNesterov: g + momentum * b is applied.
template <bool kMomentum, bool kFirst, bool kNesterov, class DF>
struct SgdStep {
  explicit SgdStep(DF d, const SgdScalars& s)
      : df(d),
        lr(hn::Set(df, s.lr)),
        momentum(hn::Set(df, s.momentum)),
        one_minus_dampening(hn::Set(df, s.one_minus_dampening)),
        wd(hn::Set(df, s.weight_decay)),
        grad_scale(hn::Set(df, s.grad_scale)) {}

  // Elements [at, at + Lanes) (UpdateLoop's step); b is null without momentum.
  template <Fmt kGrad, Fmt kCopy>
  HWY_INLINE void Run(std::size_t at, std::size_t, float* HWY_RESTRICT p,
                      const void* HWY_RESTRICT g, void* HWY_RESTRICT copy,
                      float* HWY_RESTRICT b) const {
    auto pv = hn::LoadU(df, p + at);
    auto gv = hn::Add(hn::Mul(LoadAsF32<kGrad>(df, g, at), grad_scale), hn::Mul(wd, pv));
    if constexpr (kMomentum) {
      const auto bv = kFirst ? gv
                             : hn::Add(hn::Mul(hn::LoadU(df, b + at), momentum),
                                       hn::Mul(one_minus_dampening, gv));
      hn::StoreU(bv, df, b + at);
      gv = kNesterov ? hn::Add(gv, hn::Mul(momentum, bv)) : bv;
    }
    pv = hn::Sub(pv, hn::Mul(lr, gv));
    hn::StoreU(pv, df, p + at);
    StoreFromF32<kCopy>(df, pv, copy, at);
  }

  DF df;
  hn::Vec<DF> lr, momentum, one_minus_dampening, wd, grad_scale;
};

template <bool kMomentum, bool kFirst, bool kNesterov>
void SgdMode(float* p, const void* g, DType grad_dtype, float* b, void* copy, DType copy_dtype,
             std::size_t n, const SgdScalars& s) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const SgdStep<kMomentum, kFirst, kNesterov, DF> step(df, s);
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    UpdateLoop<kGrad, kCopy>(df, step, n, p, g, copy, b);
  });
}

}  // namespace

// Updates elements [0, n) of already offset arrays (b null without
// momentum); dtypes validated by the caller.
void SgdRange(float* p, const void* g, DType grad_dtype, float* b, void* copy, DType copy_dtype,
              std::size_t n, const SgdScalars& s) {
  if (s.momentum == 0.0f) {
    return SgdMode<false, false, false>(p, g, grad_dtype, b, copy, copy_dtype, n, s);
  }
  if (s.first_step) {
    if (s.nesterov) return SgdMode<true, true, true>(p, g, grad_dtype, b, copy, copy_dtype, n, s);
    return SgdMode<true, true, false>(p, g, grad_dtype, b, copy, copy_dtype, n, s);
  }
  if (s.nesterov) return SgdMode<true, false, true>(p, g, grad_dtype, b, copy, copy_dtype, n, s);
  return SgdMode<true, false, false>(p, g, grad_dtype, b, copy, copy_dtype, n, s);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(SgdRange);

void sgd_update(float* param, const void* grad, DType grad_dtype, float* momentum_buffer,
                void* param_copy, DType copy_dtype, std::size_t n, const SgdScalars& s) {
  ZS_CHECK(s.momentum == 0.0f || momentum_buffer != nullptr || n == 0,
           "SGD with momentum {} needs a momentum buffer", s.momentum);
  parallel_update(HWY_DYNAMIC_DISPATCH(SgdRange), param, grad, grad_dtype, param_copy, copy_dtype,
                  n, s, s.momentum != 0.0f ? momentum_buffer : nullptr);
}

void sgd_update(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                const SgdScalars& s) {
  sgd_update(param, grad, DType::f32, momentum_buffer, nullptr, DType::bf16, n, s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
