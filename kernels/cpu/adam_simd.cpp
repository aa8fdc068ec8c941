// Vector Adam/AdamW kernel (Highway, compiled once per target and chosen at
// run time) and the public adam_update entry points, which split the range
// over kernel_pool() threads. Per lane it performs exactly the operations of
// adam_element() in adam.cpp, in the same order: no FMA (see [Note: strict
// floating point in kernels] in fp_strict.h) except the lerp's, which is
// FusedMulAdd (convert-inl.h), one rounding on every target as std::fma.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/adam-inl.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// Elements [i, i + Lanes) of one update.
template <Fmt kGrad, Fmt kCopy, bool kDecoupled, class DF>
HWY_INLINE void AdamStep(DF df, const AdamVecScalars<DF>& c, float* HWY_RESTRICT p,
                         const void* HWY_RESTRICT g, float* HWY_RESTRICT m,
                         float* HWY_RESTRICT v, void* HWY_RESTRICT copy, std::size_t i) {
  auto pv = hn::LoadU(df, p + i);
  auto mv = hn::LoadU(df, m + i);
  auto vv = hn::LoadU(df, v + i);
  AdamVec<kDecoupled>(df, c, LoadAsF32<kGrad>(df, g, i), pv, mv, vv);
  hn::StoreU(pv, df, p + i);
  hn::StoreU(mv, df, m + i);
  hn::StoreU(vv, df, v + i);
  StoreFromF32<kCopy>(df, pv, copy, i);
}

template <Fmt kGrad, Fmt kCopy, bool kDecoupled>
void AdamLoop(float* p, const void* g, float* m, float* v, void* copy, std::size_t n,
              const AdamScalars& s) {
  const hn::ScalableTag<float> df;
  const AdamVecScalars<hn::ScalableTag<float>> c(df, s);
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) AdamStep<kGrad, kCopy, kDecoupled>(df, c, p, g, m, v, copy, i);
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  TailBuffer tp, tg, tm, tv, tc;
  AdamStep<kGrad, kCopy, kDecoupled>(
      df, c, static_cast<float*>(tp.load(p + i, r, 4)), tg.load(Advance(g, i, gs), r, gs),
      static_cast<float*>(tm.load(m + i, r, 4)), static_cast<float*>(tv.load(v + i, r, 4)),
      kCopy == Fmt::none ? nullptr : tc.bytes, 0);
  tp.store(p + i, r, 4);
  tm.store(m + i, r, 4);
  tv.store(v + i, r, 4);
  if constexpr (kCopy != Fmt::none) tc.store(Advance(copy, i, cs), r, cs);
}

template <Fmt kGrad, Fmt kCopy>
void AdamDecay(float* p, const void* g, float* m, float* v, void* copy, std::size_t n,
               const AdamScalars& s) {
  if (s.decoupled) {
    AdamLoop<kGrad, kCopy, true>(p, g, m, v, copy, n, s);
  } else {
    AdamLoop<kGrad, kCopy, false>(p, g, m, v, copy, n, s);
  }
}

template <Fmt kGrad>
void AdamCopy(float* p, const void* g, float* m, float* v, void* copy, DType copy_dtype,
              std::size_t n, const AdamScalars& s) {
  if (copy == nullptr) {
    AdamDecay<kGrad, Fmt::none>(p, g, m, v, copy, n, s);
  } else if (copy_dtype == DType::bf16) {
    AdamDecay<kGrad, Fmt::bf16>(p, g, m, v, copy, n, s);
  } else {
    AdamDecay<kGrad, Fmt::f16>(p, g, m, v, copy, n, s);
  }
}

}  // namespace

// Updates elements [0, n) of already offset arrays; dtypes validated by the caller.
void AdamRange(float* p, const void* g, DType grad_dtype, float* m, float* v, void* copy,
               DType copy_dtype, std::size_t n, const AdamScalars& s) {
  switch (grad_dtype) {
    case DType::bf16: return AdamCopy<Fmt::bf16>(p, g, m, v, copy, copy_dtype, n, s);
    case DType::f16: return AdamCopy<Fmt::f16>(p, g, m, v, copy, copy_dtype, n, s);
    default: return AdamCopy<Fmt::f32>(p, g, m, v, copy, copy_dtype, n, s);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(AdamRange);

void adam_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                 float* exp_avg_sq, void* param_copy, DType copy_dtype, std::size_t n,
                 const AdamScalars& s) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(AdamRange);
  const std::size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + b * cs;
    kernel(param + b, static_cast<const unsigned char*>(grad) + b * gs, grad_dtype, exp_avg + b,
           exp_avg_sq + b, copy, copy_dtype, e - b, s);
  });
}

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::size_t n,
                 const AdamScalars& s) {
  adam_update(param, grad, DType::f32, exp_avg, exp_avg_sq, nullptr, DType::bf16, n, s);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
