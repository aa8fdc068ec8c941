// Vector SGD kernel (Highway, compiled once per target and chosen at run
// time) and the public sgd_update entry points, which split the range over
// kernel_pool() threads. Per lane it performs exactly the operations of
// sgd_element() in sgd.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/sgd_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/sgd.h"
#include "kernels/cpu/one_state_update.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

template <class DF>
struct SgdVecScalars {
  explicit SgdVecScalars(DF df, const SgdScalars& s)
      : lr(hn::Set(df, s.lr)),
        momentum(hn::Set(df, s.momentum)),
        one_minus_dampening(hn::Set(df, s.one_minus_dampening)),
        wd(hn::Set(df, s.weight_decay)),
        grad_scale(hn::Set(df, s.grad_scale)) {}
  hn::Vec<DF> lr, momentum, one_minus_dampening, wd, grad_scale;
};

// Elements [i, i + Lanes) of one update. kMomentum: a buffer is used;
// kFirst: it is initialised with g; kNesterov: g + momentum * b is applied.
template <Fmt kGrad, Fmt kCopy, bool kMomentum, bool kFirst, bool kNesterov, class DF>
HWY_INLINE void SgdStep(DF df, const SgdVecScalars<DF>& c, float* HWY_RESTRICT p,
                        const void* HWY_RESTRICT g, float* HWY_RESTRICT b,
                        void* HWY_RESTRICT copy, std::size_t i) {
  auto pv = hn::LoadU(df, p + i);
  auto gv = hn::Add(hn::Mul(LoadAsF32<kGrad>(df, g, i), c.grad_scale), hn::Mul(c.wd, pv));
  if constexpr (kMomentum) {
    const auto bv = kFirst ? gv
                           : hn::Add(hn::Mul(hn::LoadU(df, b + i), c.momentum),
                                     hn::Mul(c.one_minus_dampening, gv));
    hn::StoreU(bv, df, b + i);
    gv = kNesterov ? hn::Add(gv, hn::Mul(c.momentum, bv)) : bv;
  }
  pv = hn::Sub(pv, hn::Mul(c.lr, gv));
  hn::StoreU(pv, df, p + i);
  StoreFromF32<kCopy>(df, pv, copy, i);
}

template <Fmt kGrad, Fmt kCopy, bool kMomentum, bool kFirst, bool kNesterov>
void SgdLoop(float* p, const void* g, float* b, void* copy, std::size_t n, const SgdScalars& s) {
  const hn::ScalableTag<float> df;
  const SgdVecScalars<hn::ScalableTag<float>> c(df, s);
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    SgdStep<kGrad, kCopy, kMomentum, kFirst, kNesterov>(df, c, p, g, b, copy, i);
  }
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  TailBuffer tp, tg, tb, tc;
  float* bt = kMomentum ? static_cast<float*>(tb.load(b + i, r, 4)) : nullptr;
  SgdStep<kGrad, kCopy, kMomentum, kFirst, kNesterov>(
      df, c, static_cast<float*>(tp.load(p + i, r, 4)), tg.load(Advance(g, i, gs), r, gs), bt,
      kCopy == Fmt::none ? nullptr : tc.bytes, 0);
  tp.store(p + i, r, 4);
  if constexpr (kMomentum) tb.store(b + i, r, 4);
  if constexpr (kCopy != Fmt::none) tc.store(Advance(copy, i, cs), r, cs);
}

template <Fmt kGrad, Fmt kCopy>
void SgdMode(float* p, const void* g, float* b, void* copy, std::size_t n, const SgdScalars& s) {
  if (s.momentum == 0.0f) return SgdLoop<kGrad, kCopy, false, false, false>(p, g, b, copy, n, s);
  if (s.first_step) {
    if (s.nesterov) return SgdLoop<kGrad, kCopy, true, true, true>(p, g, b, copy, n, s);
    return SgdLoop<kGrad, kCopy, true, true, false>(p, g, b, copy, n, s);
  }
  if (s.nesterov) return SgdLoop<kGrad, kCopy, true, false, true>(p, g, b, copy, n, s);
  return SgdLoop<kGrad, kCopy, true, false, false>(p, g, b, copy, n, s);
}

template <Fmt kGrad>
void SgdCopy(float* p, const void* g, float* b, void* copy, DType copy_dtype, std::size_t n,
             const SgdScalars& s) {
  if (copy == nullptr) return SgdMode<kGrad, Fmt::none>(p, g, b, copy, n, s);
  if (copy_dtype == DType::bf16) return SgdMode<kGrad, Fmt::bf16>(p, g, b, copy, n, s);
  return SgdMode<kGrad, Fmt::f16>(p, g, b, copy, n, s);
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void SgdRange(float* p, const void* g, DType grad_dtype, float* b, void* copy, DType copy_dtype,
              std::size_t n, const SgdScalars& s) {
  switch (grad_dtype) {
    case DType::bf16: return SgdCopy<Fmt::bf16>(p, g, b, copy, copy_dtype, n, s);
    case DType::f16: return SgdCopy<Fmt::f16>(p, g, b, copy, copy_dtype, n, s);
    default: return SgdCopy<Fmt::f32>(p, g, b, copy, copy_dtype, n, s);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(SgdRange);

void sgd_update(float* param, const void* grad, DType grad_dtype, float* momentum_buffer,
                void* param_copy, DType copy_dtype, std::size_t n, const SgdScalars& s) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  ZS_CHECK(s.momentum == 0.0f || momentum_buffer != nullptr || n == 0,
           "SGD with momentum {} needs a momentum buffer", s.momentum);
  one_state_update(HWY_DYNAMIC_DISPATCH(SgdRange), param, grad, grad_dtype,
                   s.momentum != 0.0f ? momentum_buffer : nullptr, param_copy, copy_dtype, n, s);
}

void sgd_update(float* param, const float* grad, float* momentum_buffer, std::size_t n,
                const SgdScalars& s) {
  sgd_update(param, grad, DType::f32, momentum_buffer, nullptr, DType::bf16, n, s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
