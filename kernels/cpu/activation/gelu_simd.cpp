// Vector GELU (tanh form) forward and backward in fp32 (Highway, compiled
// once per target and chosen at run time): [Note: GELU in fp32] in gelu.h.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/activation/gelu_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <cstring>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/cpu/activation/gelu.h"
#include "kernels/cpu/convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace {

constexpr float kC = 0.7978845608028654f;               // sqrt(2 / pi)
constexpr float kCA = 0.7978845608028654f * 0.044715f;  // c a
constexpr float kMaxExponent = 88.0f;                   // exp(88) < FLT_MAX

using DF = hn::ScalableTag<float>;

// s = 1 / (1 + e) and e = exp(-2u) of x (the note's names).
HWY_INLINE void Sigmoid(DF df, hn::Vec<DF> x, hn::Vec<DF>& s, hn::Vec<DF>& e) {
  const auto x2 = hn::Mul(x, x);
  const auto u = hn::Mul(x, FusedMulAdd(df, x2, hn::Set(df, kCA), hn::Set(df, kC)));
  const auto arg = hn::Min(hn::Mul(u, hn::Set(df, -2.0f)), hn::Set(df, kMaxExponent));
  e = hn::Exp(df, arg);
  s = hn::Div(hn::Set(df, 1.0f), hn::Add(hn::Set(df, 1.0f), e));
}

HWY_INLINE hn::Vec<DF> Forward(DF df, hn::Vec<DF> x) {
  hn::Vec<DF> s, e;
  Sigmoid(df, x, s, e);
  return hn::Mul(x, s);
}

// gelu'(x) from x and its sigmoid terms.
HWY_INLINE hn::Vec<DF> Slope(DF df, hn::Vec<DF> x, hn::Vec<DF> s, hn::Vec<DF> e) {
  const auto x2 = hn::Mul(x, x);
  const auto du = FusedMulAdd(df, x2, hn::Set(df, 3.0f * kCA), hn::Set(df, kC));  // c (1 + 3 a x^2)
  const auto two_x_s = hn::Mul(hn::Mul(x, s), hn::Set(df, 2.0f));
  return FusedMulAdd(df, hn::Mul(two_x_s, hn::Mul(e, s)), du, s);
}

HWY_INLINE hn::Vec<DF> Backward(DF df, hn::Vec<DF> x, hn::Vec<DF> dy) {
  hn::Vec<DF> s, e;
  Sigmoid(df, x, s, e);
  return hn::Mul(dy, Slope(df, x, s, e));
}

}  // namespace

void GeluForward(const float* x, float* y, std::size_t n) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(Forward(df, hn::LoadU(df, x + i)), df, y + i);
  if (i == n) return;
  // The tail through one padded vector: the same operations per lane.
  HWY_ALIGN float buf[hn::MaxLanes(df)] = {};
  std::memcpy(buf, x + i, (n - i) * sizeof(float));
  hn::Store(Forward(df, hn::Load(df, buf)), df, buf);
  std::memcpy(y + i, buf, (n - i) * sizeof(float));
}

void GeluForwardSlope(const float* x, float* y, float* slope, std::size_t n) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  std::size_t i = 0;
  hn::Vec<DF> s, e;
  for (; i + L <= n; i += L) {
    const auto v = hn::LoadU(df, x + i);
    Sigmoid(df, v, s, e);
    hn::StoreU(hn::Mul(v, s), df, y + i);
    hn::StoreU(Slope(df, v, s, e), df, slope + i);
  }
  if (i == n) return;
  HWY_ALIGN float bx[hn::MaxLanes(df)] = {};
  std::memcpy(bx, x + i, (n - i) * sizeof(float));
  const auto v = hn::Load(df, bx);
  Sigmoid(df, v, s, e);
  HWY_ALIGN float by[hn::MaxLanes(df)];
  hn::Store(hn::Mul(v, s), df, by);
  hn::Store(Slope(df, v, s, e), df, bx);
  std::memcpy(y + i, by, (n - i) * sizeof(float));
  std::memcpy(slope + i, bx, (n - i) * sizeof(float));
}

void GeluBackward(const float* x, const float* dy, float* dx, std::size_t n) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(Backward(df, hn::LoadU(df, x + i), hn::LoadU(df, dy + i)), df, dx + i);
  }
  if (i == n) return;
  HWY_ALIGN float bx[hn::MaxLanes(df)] = {};
  HWY_ALIGN float bd[hn::MaxLanes(df)] = {};
  std::memcpy(bx, x + i, (n - i) * sizeof(float));
  std::memcpy(bd, dy + i, (n - i) * sizeof(float));
  hn::Store(Backward(df, hn::Load(df, bx), hn::Load(df, bd)), df, bd);
  std::memcpy(dx + i, bd, (n - i) * sizeof(float));
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(GeluForward);
HWY_EXPORT(GeluBackward);
HWY_EXPORT(GeluForwardSlope);

void gelu_tanh_forward(const float* x, float* y, std::size_t n) { HWY_DYNAMIC_DISPATCH(GeluForward)(x, y, n); }

void gelu_tanh_forward_slope(const float* x, float* y, float* slope, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluForwardSlope)(x, y, slope, n);
}
void gelu_tanh_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackward)(x, dy, dx, n);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
