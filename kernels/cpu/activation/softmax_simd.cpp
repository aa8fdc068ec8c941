// Vector softmax rows of causal attention (Highway, compiled once per target
// and chosen at run time): softmax.h.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/activation/softmax_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <limits>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

#include "kernels/cpu/activation/softmax.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using DF = hn::ScalableTag<float>;
using DD = hn::ScalableTag<double>;
using DFD = hn::Rebind<float, DD>;  // as many floats as DD has doubles

// v with lanes at and past n set to `fill`.
HWY_INLINE hn::Vec<DF> FirstNOr(hn::Vec<DF> v, std::size_t n, float fill) {
  const DF df;
  return hn::IfThenElse(hn::FirstN(df, n), v, hn::Set(df, fill));
}

// sum_{j < n} a_j (b_j when b is not null) in fp64: Lanes(DD) at a time,
// then the rest one by one, then the lanes (a fixed order for each n).
HWY_INLINE double SumWide(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, std::size_t n) {
  const DD dd;
  const DFD dfd;
  const std::size_t L = hn::Lanes(dd);
  auto acc = hn::Zero(dd);
  std::size_t j = 0;
  for (; j + L <= n; j += L) {
    auto v = hn::PromoteTo(dd, hn::LoadU(dfd, a + j));
    if (b != nullptr) v = hn::Mul(v, hn::PromoteTo(dd, hn::LoadU(dfd, b + j)));
    acc = hn::Add(acc, v);
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, acc));
  for (; j < n; ++j) s += b != nullptr ? static_cast<double>(a[j]) * b[j] : static_cast<double>(a[j]);
  return s;
}

}  // namespace

void CausalSoftmaxRow(float* row, std::size_t valid, std::size_t len) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  // The row's max, then exp in place; the last partial vector goes through
  // a padded copy (the same lanes' arithmetic).
  HWY_ALIGN float tail[hn::MaxLanes(df)] = {};
  auto vmax = hn::Set(df, -std::numeric_limits<float>::infinity());
  std::size_t j = 0;
  for (; j + L <= valid; j += L) vmax = hn::Max(vmax, hn::LoadU(df, row + j));
  const std::size_t rest = valid - j;
  if (rest > 0) {
    std::memcpy(tail, row + j, rest * sizeof(float));
    vmax = hn::Max(vmax, FirstNOr(hn::Load(df, tail), rest, -std::numeric_limits<float>::infinity()));
  }
  const auto m = hn::Set(df, hn::GetLane(hn::MaxOfLanes(df, vmax)));
  for (j = 0; j + L <= valid; j += L) hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, row + j), m)), df, row + j);
  if (rest > 0) {
    hn::Store(hn::Exp(df, hn::Sub(hn::Load(df, tail), m)), df, tail);
    std::memcpy(row + j, tail, rest * sizeof(float));
  }
  const double inv = 1.0 / SumWide(row, nullptr, valid);
  // e_j inv in fp64, rounded once (vector lanes and the rest alike).
  const DD dd;
  const DFD dfd;
  const auto vinv = hn::Set(dd, inv);
  const std::size_t LD = hn::Lanes(dd);
  for (j = 0; j + LD <= valid; j += LD) {
    hn::StoreU(hn::DemoteTo(dfd, hn::Mul(hn::PromoteTo(dd, hn::LoadU(dfd, row + j)), vinv)), dfd, row + j);
  }
  for (; j < valid; ++j) row[j] = static_cast<float>(row[j] * inv);
  std::fill(row + valid, row + len, 0.0f);
}

void SoftmaxBackwardRow(const float* p, float* dp, std::size_t valid, std::size_t len, float scale) {
  const DF df;
  const std::size_t L = hn::Lanes(df);
  const auto dot = static_cast<float>(SumWide(p, dp, valid));
  const auto d = hn::Set(df, dot);
  const auto s = hn::Set(df, scale);
  std::size_t j = 0;
  for (; j + L <= valid; j += L) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, p + j), hn::Sub(hn::LoadU(df, dp + j), d)), s), df, dp + j);
  }
  for (; j < valid; ++j) dp[j] = p[j] * (dp[j] - dot) * scale;
  std::fill(dp + valid, dp + len, 0.0f);
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(CausalSoftmaxRow);
HWY_EXPORT(SoftmaxBackwardRow);

void causal_softmax_row(float* row, std::size_t valid, std::size_t len) {
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxRow)(row, valid, len);
}

void softmax_backward_row(const float* p, float* dp, std::size_t valid, std::size_t len, float scale) {
  HWY_DYNAMIC_DISPATCH(SoftmaxBackwardRow)(p, dp, valid, len, scale);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
