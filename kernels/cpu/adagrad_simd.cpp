// Vector Adagrad kernel (Highway, compiled once per target and chosen at run
// time) and the public adagrad_update entry point, which splits the range
// over kernel_pool() threads. Per lane it performs exactly the operations of
// adagrad_element() in adagrad.cpp, in the same order, without FMA (see
// [Note: strict floating point in kernels] in fp_strict.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adagrad_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/adagrad.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/one_state_update.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// Per-step scalars broadcast once per call.
template <class DF>
struct AdagradVecScalars {
  explicit AdagradVecScalars(DF df, const AdagradScalars& s)
      : neg_clr(hn::Set(df, s.neg_clr)),
        eps(hn::Set(df, s.eps)),
        wd(hn::Set(df, s.weight_decay)),
        initial_sum(hn::Set(df, s.initial_sum)),
        grad_scale(hn::Set(df, s.grad_scale)) {}
  hn::Vec<DF> neg_clr, eps, wd, initial_sum, grad_scale;
};

// Elements [i, i + Lanes) of one update. kDecay: weight_decay != 0;
// kFirst: the sum starts at initial_sum (step 1).
template <Fmt kGrad, Fmt kCopy, bool kDecay, bool kFirst, class DF>
HWY_INLINE void AdagradStep(DF df, const AdagradVecScalars<DF>& c, float* HWY_RESTRICT p,
                            const void* HWY_RESTRICT g, float* HWY_RESTRICT sum,
                            void* HWY_RESTRICT copy, std::size_t i) {
  auto pv = hn::LoadU(df, p + i);
  auto gv = hn::Mul(LoadAsF32<kGrad>(df, g, i), c.grad_scale);
  if constexpr (kDecay) gv = hn::Add(gv, hn::Mul(c.wd, pv));
  const auto s0 = kFirst ? c.initial_sum : hn::LoadU(df, sum + i);
  const auto sv = hn::Add(s0, hn::Mul(gv, gv));
  const auto std_dev = hn::Add(hn::Sqrt(sv), c.eps);
  pv = hn::Add(pv, hn::Div(hn::Mul(c.neg_clr, gv), std_dev));
  hn::StoreU(pv, df, p + i);
  hn::StoreU(sv, df, sum + i);
  StoreFromF32<kCopy>(df, pv, copy, i);
}

template <Fmt kGrad, Fmt kCopy, bool kDecay, bool kFirst>
void AdagradLoop(float* p, const void* g, float* sum, void* copy, std::size_t n,
                 const AdagradScalars& s) {
  const hn::ScalableTag<float> df;
  const AdagradVecScalars<hn::ScalableTag<float>> c(df, s);
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    AdagradStep<kGrad, kCopy, kDecay, kFirst>(df, c, p, g, sum, copy, i);
  }
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  TailBuffer tp, tg, ts, tc;
  AdagradStep<kGrad, kCopy, kDecay, kFirst>(
      df, c, static_cast<float*>(tp.load(p + i, r, 4)), tg.load(Advance(g, i, gs), r, gs),
      static_cast<float*>(ts.load(sum + i, r, 4)), kCopy == Fmt::none ? nullptr : tc.bytes, 0);
  tp.store(p + i, r, 4);
  ts.store(sum + i, r, 4);
  if constexpr (kCopy != Fmt::none) tc.store(Advance(copy, i, cs), r, cs);
}

template <Fmt kGrad, Fmt kCopy>
void AdagradMode(float* p, const void* g, float* sum, void* copy, std::size_t n,
                 const AdagradScalars& s) {
  const bool decay = s.weight_decay != 0.0f;
  if (s.first_step) {
    if (decay) return AdagradLoop<kGrad, kCopy, true, true>(p, g, sum, copy, n, s);
    return AdagradLoop<kGrad, kCopy, false, true>(p, g, sum, copy, n, s);
  }
  if (decay) return AdagradLoop<kGrad, kCopy, true, false>(p, g, sum, copy, n, s);
  return AdagradLoop<kGrad, kCopy, false, false>(p, g, sum, copy, n, s);
}

template <Fmt kGrad>
void AdagradCopy(float* p, const void* g, float* sum, void* copy, DType copy_dtype, std::size_t n,
                 const AdagradScalars& s) {
  if (copy == nullptr) return AdagradMode<kGrad, Fmt::none>(p, g, sum, copy, n, s);
  if (copy_dtype == DType::bf16) return AdagradMode<kGrad, Fmt::bf16>(p, g, sum, copy, n, s);
  return AdagradMode<kGrad, Fmt::f16>(p, g, sum, copy, n, s);
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void AdagradRange(float* p, const void* g, DType grad_dtype, float* sum, void* copy,
                  DType copy_dtype, std::size_t n, const AdagradScalars& s) {
  switch (grad_dtype) {
    case DType::bf16: return AdagradCopy<Fmt::bf16>(p, g, sum, copy, copy_dtype, n, s);
    case DType::f16: return AdagradCopy<Fmt::f16>(p, g, sum, copy, copy_dtype, n, s);
    default: return AdagradCopy<Fmt::f32>(p, g, sum, copy, copy_dtype, n, s);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(AdagradRange);

void adagrad_update(float* param, const void* grad, DType grad_dtype, float* state_sum,
                    void* param_copy, DType copy_dtype, std::size_t n, const AdagradScalars& s) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  one_state_update(HWY_DYNAMIC_DISPATCH(AdagradRange), param, grad, grad_dtype, state_sum, param_copy, copy_dtype,
                   n, s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
