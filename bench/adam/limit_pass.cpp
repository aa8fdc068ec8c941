// Highway kernel of the 4-read/3-write limit pass (see limit_pass.h).
#include "kernels/cpu/fp_strict.h"
#include "kernels/cpu/simd_targets.h"  // same Highway targets as the kernels

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/adam/limit_pass.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include "bench/adam/limit_pass.h"
#include "kernels/cpu/thread_pool.h"

HWY_BEFORE_NAMESPACE();
namespace zeroshard::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void LimitRange(float* HWY_RESTRICT a, const float* HWY_RESTRICT g, float* HWY_RESTRICT b,
                float* HWY_RESTRICT c, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t lanes = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto gv = hn::LoadU(d, g + i);
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), gv), d, a + i);
    hn::StoreU(hn::Add(hn::LoadU(d, b + i), gv), d, b + i);
    hn::StoreU(hn::Add(hn::LoadU(d, c + i), hn::Mul(gv, gv)), d, c + i);
  }
  for (; i < n; ++i) {
    a[i] += g[i];
    b[i] += g[i];
    c[i] += g[i] * g[i];
  }
}

}  // namespace zeroshard::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zeroshard::bench {

HWY_EXPORT(LimitRange);

void limit_pass_4r3w(float* a, const float* g, float* b, float* c, std::size_t n) {
  const auto kernel = HWY_DYNAMIC_DISPATCH(LimitRange);
  kernels::parallel_for_elements(n, [&](std::size_t lo, std::size_t hi) {
    kernel(a + lo, g + lo, b + lo, c + lo, hi - lo);
  });
}

}  // namespace zeroshard::bench
#endif  // HWY_ONCE
