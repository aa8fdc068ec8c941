// Vector gradient pass (unscale, Inf/NaN check, sum of squares; Highway,
// compiled once per target and chosen at run time), the vector Inf/NaN
// count, and the public entry points, which split the fixed parts of
// grad_check.h (or, for the count, the elements) over kernel_pool() threads. Lane structure and combination order are those of the reference
// (16 double lanes per part whatever the vector width), so the sum is bitwise
// equal to grad_check_reference.
//
// found_inf_or_nan is read off the sum: a y that is Inf or NaN makes its
// square, its lane, its part and the total Inf or NaN (squares are >= 0, so
// no Inf - Inf), while finite squares (<= 1.2e77) can never overflow a
// double sum. This is equivalent to the reference's per-element test.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/grad_check_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <atomic>
#include <cmath>

#include <hwy/highway.h>

#include "kernels/cpu/convert-inl.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/grad_check.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

// Combines the 16 lanes pairwise (w = 1, 2, 4, 8), as the reference.
double CombineLanes(double* lane) {
  for (std::size_t w = 1; w < 16; w *= 2) {
    for (std::size_t j = 0; j < 16; j += 2 * w) lane[j] += lane[j + w];
  }
  return lane[0];
}

#if HWY_TARGET == HWY_SCALAR
// One lane per vector: the 16 lanes are plain doubles, as in the reference.
template <Fmt kF, bool kWrite>
double PartSum(void* base, std::size_t len, float scale) {
  const hn::ScalableTag<float> df;
  const auto vscale = hn::Set(df, scale);
  double lane[16] = {};
  for (std::size_t j = 0; j < len; ++j) {
    const auto y = hn::Mul(LoadAsF32<kF>(df, base, j), vscale);
    if constexpr (kWrite) hn::StoreU(y, df, static_cast<float*>(base) + j);
    const double yd = hn::GetLane(y);
    lane[j % 16] += yd * yd;
  }
  return CombineLanes(lane);
}
#else
using DF16 = hn::CappedTag<float, 16>;                       // up to 16 float lanes
using DFH = hn::Half<DF16>;                                  // half of them
using DD = hn::Rebind<double, DFH>;                          // as doubles
constexpr std::size_t kFloatLanes = hn::MaxLanes(DF16());    // 4, 8 or 16
constexpr std::size_t kAccs = 32 / kFloatLanes;              // double vectors for 16 lanes
static_assert(16 % kFloatLanes == 0 && kFloatLanes >= 2, "16 lanes must tile the vectors");

// Adds the squares of elements [i, i + 16) to the 16 lanes held in acc
// (acc[a] holds lanes a*kFloatLanes/2 ...). kTail: only the first `valid`
// elements are real; the others (zero padding) add exactly +0.
template <Fmt kF, bool kWrite, bool kTail>
HWY_INLINE void SquareStep(hn::Vec<DF16> scale, void* base, std::size_t i, std::size_t valid,
                           hn::Vec<DD>* acc) {
  const DF16 df;
  const DFH dh;
  const DD dd;
  for (std::size_t k = 0; k < 16 / kFloatLanes; ++k) {
    auto y = hn::Mul(LoadAsF32<kF>(df, base, i + k * kFloatLanes), scale);
    if constexpr (kTail) {
      const std::size_t before = k * kFloatLanes;
      y = hn::IfThenElseZero(hn::FirstN(df, valid > before ? valid - before : 0), y);
    }
    if constexpr (kWrite) hn::StoreU(y, df, static_cast<float*>(base) + i + k * kFloatLanes);
    const auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, y));
    const auto hi = hn::PromoteTo(dd, hn::UpperHalf(dh, y));
    acc[2 * k] = hn::Add(acc[2 * k], hn::Mul(lo, lo));
    acc[2 * k + 1] = hn::Add(acc[2 * k + 1], hn::Mul(hi, hi));
  }
}

// Sum of squares of one part of len elements at base (already offset).
template <Fmt kF, bool kWrite>
double PartSum(void* base, std::size_t len, float scale) {
  const DF16 df;
  const DD dd;
  const auto vscale = hn::Set(df, scale);
  hn::Vec<DD> acc[kAccs];
  for (auto& a : acc) a = hn::Zero(dd);
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) SquareStep<kF, kWrite, false>(vscale, base, i, 16, acc);
  if (i < len) {
    constexpr std::size_t es = fmt_size(kF);
    const std::size_t r = len - i;
    TailBuffer t;
    void* at = Advance(base, i, es);
    SquareStep<kF, kWrite, true>(vscale, t.load(at, r, es), 0, r, acc);
    if constexpr (kWrite) t.store(at, r, es);
  }
  HWY_ALIGN double lane[16];
  for (std::size_t a = 0; a < kAccs; ++a) hn::Store(acc[a], dd, lane + a * (kFloatLanes / 2));
  return CombineLanes(lane);
}
#endif  // HWY_TARGET == HWY_SCALAR


template <Fmt kF, bool kWrite>
void Parts(void* base, std::size_t n, float scale, std::size_t p_begin, std::size_t p_end,
           double* part_sums) {
  constexpr std::size_t es = fmt_size(kF);
  for (std::size_t p = p_begin; p < p_end; ++p) {
    const std::size_t b = grad_check_part_begin(n, p), e = grad_check_part_begin(n, p + 1);
    part_sums[p] = b == e ? 0.0 : PartSum<kF, kWrite>(Advance(base, b, es), e - b, scale);
  }
}

// Inf/NaN elements among len elements at base (already offset).
template <Fmt kF>
std::size_t CountNonfiniteLoop(const void* base, std::size_t len) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t count = 0, i = 0;
  for (; i + lanes <= len; i += lanes) {
    count += hn::CountTrue(df, hn::Not(hn::IsFinite(LoadAsF32<kF>(df, base, i))));
  }
  if (i < len) {  // zero padding is finite: only the real elements can count
    constexpr std::size_t es = fmt_size(kF);
    TailBuffer t;
    const auto x = LoadAsF32<kF>(df, t.load(Advance(base, i, es), len - i, es), 0);
    count += hn::CountTrue(df, hn::Not(hn::IsFinite(x)));
  }
  return count;
}

}  // namespace

// Inf/NaN elements among n elements of dtype at data (validated by the
// caller; pointer already offset).
std::size_t CountNonfinite(const void* data, DType dtype, std::size_t n) {
  switch (dtype) {
    case DType::bf16: return CountNonfiniteLoop<Fmt::bf16>(data, n);
    case DType::f16: return CountNonfiniteLoop<Fmt::f16>(data, n);
    default: return CountNonfiniteLoop<Fmt::f32>(data, n);
  }
}

// Sums parts [p_begin, p_end) of the n-element array into part_sums[p];
// dtype validated by the caller (write_back only with f32).
void GradCheckParts(void* grad, DType dtype, std::size_t n, float scale, bool write_back,
                    std::size_t p_begin, std::size_t p_end, double* part_sums) {
  switch (dtype) {
    case DType::bf16: return Parts<Fmt::bf16, false>(grad, n, scale, p_begin, p_end, part_sums);
    case DType::f16: return Parts<Fmt::f16, false>(grad, n, scale, p_begin, p_end, part_sums);
    default:
      if (write_back) return Parts<Fmt::f32, true>(grad, n, scale, p_begin, p_end, part_sums);
      return Parts<Fmt::f32, false>(grad, n, scale, p_begin, p_end, part_sums);
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(GradCheckParts);
HWY_EXPORT(CountNonfinite);

namespace {

GradCheck run_grad_check(void* grad, DType dtype, std::size_t n, float scale, bool write_back) {
  GradCheck r;
  if (n == 0) return r;
  const auto kernel = HWY_DYNAMIC_DISPATCH(GradCheckParts);
  double part_sums[kGradCheckParts];
  // Split only when each thread gets at least kMinChunkElements elements.
  const std::size_t min_parts =
      n / kGradCheckParts == 0 ? kGradCheckParts
                               : (kMinChunkElements + n / kGradCheckParts - 1) / (n / kGradCheckParts);
  const auto body = [&](std::size_t, std::size_t pb, std::size_t pe) {
    kernel(grad, dtype, n, scale, write_back, pb, pe, part_sums);
  };
  kernel_pool().parallel_for(kGradCheckParts, 1, min_parts, body);
  double total = 0;
  for (const double s : part_sums) total += s;
  r.sum_of_squares = total;
  r.found_inf_or_nan = !std::isfinite(total);
  return r;
}

}  // namespace

GradCheck unscale_and_check(float* grad, std::size_t n, float scale) {
  return run_grad_check(grad, DType::f32, n, scale, true);
}

std::size_t count_nonfinite(const void* data, DType dtype, std::size_t n) {
  check_kernel_dtype(dtype, "count_nonfinite data");
  if (n == 0) return 0;
  const auto kernel = HWY_DYNAMIC_DISPATCH(CountNonfinite);
  const std::size_t es = dtype_size(dtype);
  std::atomic<std::size_t> count{0};
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    count.fetch_add(kernel(static_cast<const unsigned char*>(data) + b * es, dtype, e - b),
                    std::memory_order_relaxed);
  });
  return count.load();
}

GradCheck check_gradients(const void* grad, DType dtype, std::size_t n, float scale) {
  check_kernel_dtype(dtype, "grad");
  // Read only: the kernel never writes when write_back is false.
  return run_grad_check(const_cast<void*>(grad), dtype, n, scale, false);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
