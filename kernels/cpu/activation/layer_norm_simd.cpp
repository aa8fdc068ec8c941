// Vector LayerNorm rows (Highway, compiled once per target and chosen at run
// time): [Note: vector LayerNorm] in layer_norm.h.
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // before Highway: sets HWY_DISABLED_TARGETS

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/activation/layer_norm_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <cmath>

#include <hwy/highway.h>

#include "kernels/cpu/activation/layer_norm.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace {

using DD = hn::ScalableTag<double>;
using DFH = hn::Rebind<float, DD>;  // as many floats as DD has doubles

// Lanes(DD) floats at p, widened.
HWY_INLINE hn::Vec<DD> LoadWide(const float* HWY_RESTRICT p) { return hn::PromoteTo(DD(), hn::LoadU(DFH(), p)); }

// Sum over d < dim of f(d) (a double vector for d in the vector part, a
// double for the rest), in the note's fixed order.
template <class FV, class FS>
HWY_INLINE double RowSum(std::size_t dim, const FV& fv, const FS& fs) {
  const DD dd;
  const std::size_t L = hn::Lanes(dd);
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
  std::size_t d = 0;
  for (; d + 2 * L <= dim; d += 2 * L) {
    a0 = hn::Add(a0, fv(d));
    a1 = hn::Add(a1, fv(d + L));
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
  for (; d < dim; ++d) s += fs(d);
  return s;
}

}  // namespace

void LayerNormForward(const float* x, std::size_t tokens, std::size_t dim, const float* gamma, const float* beta,
                      float eps, float* y, float* mean, float* rstd) {
  const DD dd;
  const DFH dh;
  const std::size_t L = hn::Lanes(dd);
  const std::size_t vec_end = dim / (2 * L) * (2 * L);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* xr = x + t * dim;
    const double mu = RowSum(
                          dim, [&](std::size_t d) { return LoadWide(xr + d); },
                          [&](std::size_t d) { return static_cast<double>(xr[d]); }) /
                      static_cast<double>(dim);
    const auto vmu = hn::Set(dd, mu);
    const double var = RowSum(
        dim,
        [&](std::size_t d) {
          const auto c = hn::Sub(LoadWide(xr + d), vmu);
          return hn::Mul(c, c);
        },
        [&](std::size_t d) { return (xr[d] - mu) * (xr[d] - mu); });
    const double r = 1.0 / std::sqrt(var / static_cast<double>(dim) + static_cast<double>(eps));
    const auto vr = hn::Set(dd, r);
    float* yr = y + t * dim;
    std::size_t d = 0;
    for (; d < vec_end; d += L) {
      const auto xh = hn::Mul(hn::Sub(LoadWide(xr + d), vmu), vr);
      const auto v = hn::Add(hn::Mul(xh, LoadWide(gamma + d)), LoadWide(beta + d));
      hn::StoreU(hn::DemoteTo(dh, v), dh, yr + d);
    }
    for (; d < dim; ++d) yr[d] = static_cast<float>((xr[d] - mu) * r * gamma[d] + beta[d]);
    mean[t] = static_cast<float>(mu);
    rstd[t] = static_cast<float>(r);
  }
}

void LayerNormBackward(const float* x, const float* dy, std::size_t tokens, std::size_t dim, const float* gamma,
                       const float* mean, const float* rstd, float* dx, float* dgamma, float* dbeta) {
  const DD dd;
  const DFH dh;
  const std::size_t L = hn::Lanes(dd);
  const std::size_t vec_end = dim / (2 * L) * (2 * L);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float* xr = x + t * dim;
    const float* dyr = dy + t * dim;
    const double mu = mean[t];
    const double r = rstd[t];
    const auto vmu = hn::Set(dd, mu);
    const auto vr = hn::Set(dd, r);
    const auto xhat = [&](std::size_t d) { return hn::Mul(hn::Sub(LoadWide(xr + d), vmu), vr); };
    const auto g = [&](std::size_t d) { return hn::Mul(LoadWide(dyr + d), LoadWide(gamma + d)); };
    const double mean_g = RowSum(dim, g, [&](std::size_t d) { return static_cast<double>(dyr[d]) * gamma[d]; }) /
                          static_cast<double>(dim);
    const double mean_gx =
        RowSum(
            dim, [&](std::size_t d) { return hn::Mul(g(d), xhat(d)); },
            [&](std::size_t d) { return static_cast<double>(dyr[d]) * gamma[d] * ((xr[d] - mu) * r); }) /
        static_cast<double>(dim);
    // dgamma, dbeta first: dx may alias dy.
    std::size_t d = 0;
    for (; d < vec_end; d += L) {
      const auto dyd = LoadWide(dyr + d);
      const auto dg = hn::DemoteTo(dh, hn::Mul(dyd, xhat(d)));
      hn::StoreU(hn::Add(hn::LoadU(dh, dgamma + d), dg), dh, dgamma + d);
      hn::StoreU(hn::Add(hn::LoadU(dh, dbeta + d), hn::LoadU(dh, dyr + d)), dh, dbeta + d);
    }
    for (; d < dim; ++d) {
      dgamma[d] += static_cast<float>(dyr[d] * ((xr[d] - mu) * r));
      dbeta[d] += dyr[d];
    }
    const auto vmg = hn::Set(dd, mean_g);
    const auto vmgx = hn::Set(dd, mean_gx);
    float* dxr = dx + t * dim;
    for (d = 0; d < vec_end; d += L) {
      const auto v = hn::Mul(vr, hn::Sub(hn::Sub(g(d), vmg), hn::Mul(xhat(d), vmgx)));
      hn::StoreU(hn::DemoteTo(dh, v), dh, dxr + d);
    }
    for (; d < dim; ++d) {
      const double xh = (xr[d] - mu) * r;
      const double gd = static_cast<double>(dyr[d]) * gamma[d];
      dxr[d] = static_cast<float>(r * (gd - mean_g - xh * mean_gx));
    }
  }
}

}  // namespace zeroshard::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::kernels {

HWY_EXPORT(LayerNormForward);
HWY_EXPORT(LayerNormBackward);

void layer_norm_forward(const float* x, std::size_t tokens, std::size_t dim, const float* gamma, const float* beta,
                        float eps, float* y, float* mean, float* rstd) {
  HWY_DYNAMIC_DISPATCH(LayerNormForward)(x, tokens, dim, gamma, beta, eps, y, mean, rstd);
}

void layer_norm_backward(const float* x, const float* dy, std::size_t tokens, std::size_t dim, const float* gamma,
                         const float* mean, const float* rstd, float* dx, float* dgamma, float* dbeta) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackward)(x, dy, tokens, dim, gamma, mean, rstd, dx, dgamma, dbeta);
}

}  // namespace zeroshard::kernels
#endif  // HWY_ONCE
