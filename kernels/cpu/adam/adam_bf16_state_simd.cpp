// Vector kernel of the bf16-state Adam / AdamW update (adam_bf16_state.h):
// Highway, compiled per target and chosen at run time; the public entry
// point splits the range over kernel_pool() threads. Per lane: the states
// widened (LoadBf16, exact), the fp32 kernel's arithmetic (adam-inl.h), the
// states rounded to nearest even (StoreBf16, as float_to_bf16) or with the
// stochastic stream of stochastic_round.h computed per lane from the
// element's global index.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/adam/adam_bf16_state_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "kernels/cpu/adam/adam-inl.h"
#include "kernels/cpu/adam/adam_bf16_state.h"
#include "kernels/cpu/adam/split_order-inl.h"
#include "kernels/cpu/adam/stochastic_round.h"
#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/update/update_loop-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

/// fmix32 per lane.
template <class DU>
HWY_INLINE hn::Vec<DU> Fmix32(DU du, hn::Vec<DU> h) {
  h = hn::Xor(h, hn::ShiftRight<16>(h));
  h = hn::Mul(h, hn::Set(du, 0x85ebca6bu));
  h = hn::Xor(h, hn::ShiftRight<13>(h));
  h = hn::Mul(h, hn::Set(du, 0xc2b2ae35u));
  return hn::Xor(h, hn::ShiftRight<16>(h));
}

/// stochastic_bits(key, idx0 + lane) per lane: one fmix32 per lane; the
/// high half's hash is a scalar unless the vector crosses a multiple of
/// 2^32 (then the lanes past it take hi + 1's).
template <class DU>
HWY_INLINE hn::Vec<DU> StochasticBits(DU du, StochasticKey key, std::uint64_t idx0) {
  const std::uint32_t lo0 = static_cast<std::uint32_t>(idx0);
  const std::uint32_t hi0 = static_cast<std::uint32_t>(idx0 >> 32);
  const auto lo = hn::Add(hn::Set(du, lo0), hn::Iota(du, 0));  // modulo 2^32
  auto high = hn::Set(du, stochastic_high(key, hi0));
  if (lo0 > 0xffffffffu - static_cast<std::uint32_t>(hn::Lanes(du) - 1)) {
    const auto wrapped = hn::Lt(lo, hn::Set(du, lo0));
    high = hn::IfThenElse(wrapped, hn::Set(du, stochastic_high(key, hi0 + 1)), high);
  }
  return Fmix32(du, hn::Xor(hn::Xor(lo, hn::Set(du, key.lo)), high));
}

/// float_to_bf16_stochastic per lane (b: 16 random bits per u32 lane).
template <class DF>
HWY_INLINE void StoreBf16Stochastic(DF df, hn::Vec<DF> v, hn::Vec<hn::RebindToUnsigned<DF>> b,
                                    std::uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto is_nan = hn::RebindMask(du, hn::IsNaN(v));  // an unordered compare: no FP state
  const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x0040u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, b));
  StoreLow16(df, hn::IfThenElse(is_nan, nan, rounded), p);
}

// One Adam (kDecoupled: AdamW) update of Lanes elements of bf16 states,
// rounded to nearest even or (kStochastic) with the stream of the
// elements' global indices, first_index + index.
template <bool kDecoupled, bool kStochastic, class DF>
struct Bf16StateStep {
  // Elements [at, at + Lanes) (UpdateLoop's step).
  template <Fmt kGrad, Fmt kCopy>
  HWY_INLINE void Run(std::size_t at, std::size_t index, float* HWY_RESTRICT p,
                      const void* HWY_RESTRICT g, void* HWY_RESTRICT copy,
                      std::uint16_t* HWY_RESTRICT m, std::uint16_t* HWY_RESTRICT v) const {
    auto pv = hn::LoadU(df, p + at);
    auto mv = LoadBf16(df, m + at);
    auto vv = LoadBf16(df, v + at);
    AdamVec<kDecoupled>(df, c, LoadAsF32<kGrad>(df, g, at), pv, mv, vv);
    hn::StoreU(pv, df, p + at);
    StoreFromF32<kCopy>(df, pv, copy, at);
    if constexpr (kStochastic) {
      const hn::RebindToUnsigned<DF> du;
      const auto bits = StochasticBits(du, key, first_index + index);
      StoreBf16Stochastic(df, mv, hn::And(bits, hn::Set(du, 0xffffu)), m + at);
      StoreBf16Stochastic(df, vv, hn::ShiftRight<16>(bits), v + at);
    } else {
      (void)index;
      StoreBf16(df, mv, m + at);
      StoreBf16(df, vv, v + at);
    }
  }

  DF df;
  AdamVecScalars<DF> c;
  StochasticKey key;
  std::uint64_t first_index;  // the global index of element 0
};

#if HWY_TARGET == HWY_AVX2
// Round-to-nearest updates of elements [0, n - n % 16) in steps of 16, two
// vectors in split order ([Note: bf16 states in split order]); the same
// arithmetic per element as Bf16StateStep. c: a local copy (stores through
// the bf16 arrays could alias a caller's struct and force reloads).
template <bool kDecoupled, Fmt kGrad, Fmt kCopy, class DF>
std::size_t Bf16StatePairs(DF df, const AdamVecScalars<DF> c, std::size_t n, float* HWY_RESTRICT p,
                           const void* HWY_RESTRICT g, void* HWY_RESTRICT copy, std::uint16_t* HWY_RESTRICT m,
                           std::uint16_t* HWY_RESTRICT v) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    hn::Vec<DF> ma, mb, va, vb, ga, gb;
    LoadSplitBf16(df, m + i, ma, mb);
    LoadSplitBf16(df, v + i, va, vb);
    LoadSplitAsF32<kGrad>(df, g, i, ga, gb);
    auto pa = LoadSplitF32(df, p + i, 0);
    auto pb = LoadSplitF32(df, p + i, 1);
    AdamVec<kDecoupled>(df, c, ga, pa, ma, va);
    AdamVec<kDecoupled>(df, c, gb, pb, mb, vb);
    StoreSplitF32(df, pa, p + i, 0);
    StoreSplitF32(df, pb, p + i, 1);
    if constexpr (kCopy == Fmt::bf16) {
      StoreSplitBf16(df, pa, pb, static_cast<std::uint16_t*>(copy) + i);
    }
    StoreSplitBf16(df, ma, mb, m + i);
    StoreSplitBf16(df, va, vb, v + i);
  }
  return i;
}
#endif

template <bool kDecoupled, bool kStochastic>
void Bf16StateMode(float* p, const void* g, DType grad_dtype, std::uint16_t* m, std::uint16_t* v,
                   void* copy, DType copy_dtype, std::size_t n, const AdamScalars& s,
                   const Bf16StateRounding& r) {
  using DF = hn::ScalableTag<float>;
  const DF df;
  const Bf16StateStep<kDecoupled, kStochastic, DF> step{
      df, AdamVecScalars<DF>(df, s), stochastic_key(r.seed, r.step), r.first_index};
  DispatchFormats(grad_dtype, copy, copy_dtype, [&]<Fmt kGrad, Fmt kCopy>() {
    std::size_t done = 0;  // elements updated in split order (index 0 of the rest: unused then)
#if HWY_TARGET == HWY_AVX2
    if constexpr (!kStochastic && kGrad != Fmt::f16 && kCopy != Fmt::f16) {
      done = Bf16StatePairs<kDecoupled, kGrad, kCopy>(df, step.c, n, p, g, copy, m, v);
    }
#endif
    constexpr std::size_t gs = fmt_size(kGrad), cs = fmt_size(kCopy);
    UpdateLoop<kGrad, kCopy>(df, step, n - done, p + done, Advance(g, done, gs), Advance(copy, done, cs), m + done,
                             v + done);
  });
}

}  // namespace

// Elements [0, n) of already offset arrays (r.first_index: the global index
// of element 0); dtypes validated by the caller.
void Bf16StateRange(float* p, const void* g, DType grad_dtype, std::uint16_t* m,
                    std::uint16_t* v, void* copy, DType copy_dtype, std::size_t n,
                    const AdamScalars& s, const Bf16StateRounding& r) {
  const bool sr = r.mode == StateRounding::stochastic;
  if (s.decoupled) {
    if (sr) return Bf16StateMode<true, true>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s, r);
    return Bf16StateMode<true, false>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s, r);
  }
  if (sr) return Bf16StateMode<false, true>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s, r);
  Bf16StateMode<false, false>(p, g, grad_dtype, m, v, copy, copy_dtype, n, s, r);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(Bf16StateRange);

void adam_bf16_state_update(float* param, const void* grad, DType grad_dtype,
                            std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, void* param_copy,
                            DType copy_dtype, std::size_t n, const AdamScalars& s,
                            const Bf16StateRounding& rounding) {
  detail::check_adam_bf16_state_args("adam_bf16_state_update", exp_avg, exp_avg_sq, grad_dtype,
                                     param_copy, copy_dtype, n);
  if (n == 0) return;
  const auto kernel = HWY_DYNAMIC_DISPATCH(Bf16StateRange);
  const std::size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + b * cs;
    Bf16StateRounding r = rounding;
    r.first_index = rounding.first_index + b;
    kernel(param + b, static_cast<const unsigned char*>(grad) + b * gs, grad_dtype, exp_avg + b,
           exp_avg_sq + b, copy, copy_dtype, e - b, s, r);
  });
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
