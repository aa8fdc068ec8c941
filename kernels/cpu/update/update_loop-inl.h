// Per-target (Highway) skeleton of the optimizer kernels' vector loops,
// shared by adam_simd.cpp, adam_bf16_state_simd.cpp, sgd_simd.cpp,
// lion_simd.cpp, adagrad_simd.cpp (both) and adam8bit_simd.cpp
// (DispatchFormats): the gradient's and the parameter copy's storage formats
// made template arguments, and a pass over [0, n) one vector at a time whose
// last partial vector goes through zero-padded stack buffers, so that every
// element runs through the same vector code as the scalar reference's
// element function. Highway's toggle guard for "-inl.h" headers, as
// convert-inl.h.
#if defined(ZEROSHARD_KERNELS_CPU_UPDATE_LOOP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZEROSHARD_KERNELS_CPU_UPDATE_LOOP_INL_H_
#undef ZEROSHARD_KERNELS_CPU_UPDATE_LOOP_INL_H_
#else
#define ZEROSHARD_KERNELS_CPU_UPDATE_LOOP_INL_H_
#endif

#include <cstddef>
#include <utility>

#include <hwy/highway.h>

#include "core/dtype.h"
#include "kernels/cpu/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Calls body.template operator()<kGrad, kCopy>() with kGrad the format of
/// grad_dtype (bf16, f16, else f32) and kCopy that of the parameter copy
/// (none when copy is null, else bf16 or f16 by copy_dtype): the nine
/// instantiations of an update kernel. The caller has validated the dtypes.
template <class Body>
HWY_INLINE void DispatchFormats(DType grad_dtype, const void* copy, DType copy_dtype, Body&& body) {
  const auto with_grad = [&]<Fmt kGrad>() {
    if (copy == nullptr) return body.template operator()<kGrad, Fmt::none>();
    if (copy_dtype == DType::bf16) return body.template operator()<kGrad, Fmt::bf16>();
    return body.template operator()<kGrad, Fmt::f16>();
  };
  switch (grad_dtype) {
    case DType::bf16: return with_grad.template operator()<Fmt::bf16>();
    case DType::f16: return with_grad.template operator()<Fmt::f16>();
    default: return with_grad.template operator()<Fmt::f32>();
  }
}

/// One update over elements [0, n) of already offset arrays: p (fp32
/// parameters), g (the gradient in format kGrad), copy (the parameter copy
/// in format kCopy, null for none) and the kernel's state arrays (float or
/// std::uint16_t elements; a null one stays null). Calls
/// step.template Run<kGrad, kCopy>(at, index, p, g, copy, states...) for the
/// vectors at at = index = 0, Lanes, 2 Lanes, ...: `at` is where in the
/// passed arrays the vector starts, `index` the element it starts at (for
/// kernels whose arithmetic depends on it). The last n % Lanes elements go
/// through zero-padded stack copies of every array (at = 0, index = their
/// first element) and are copied back.
template <Fmt kGrad, Fmt kCopy, class DF, class Step, class... State>
HWY_INLINE void UpdateLoop(DF df, const Step& step, std::size_t n, float* p, const void* g,
                           void* copy, State*... states) {
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) step.template Run<kGrad, kCopy>(i, i, p, g, copy, states...);
  if (i == n) return;
  const std::size_t r = n - i;
  constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
  TailBuffer tp, tg, tc;
  TailBuffer ts[sizeof...(State)];
  [&]<std::size_t... k>(std::index_sequence<k...>) {
    step.template Run<kGrad, kCopy>(
        0, i, static_cast<float*>(tp.load(p + i, r, 4)), tg.load(Advance(g, i, gs), r, gs),
        kCopy == Fmt::none ? nullptr : tc.bytes,
        static_cast<State*>(ts[k].load(Advance(states, i, sizeof(State)), r, sizeof(State)))...);
    (ts[k].store(Advance(states, i, sizeof(State)), r, sizeof(State)), ...);
  }(std::index_sequence_for<State...>{});
  tp.store(p + i, r, 4);
  if constexpr (kCopy != Fmt::none) tc.store(Advance(copy, i, cs), r, cs);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ZEROSHARD_KERNELS_CPU_UPDATE_LOOP_INL_H_ toggle
