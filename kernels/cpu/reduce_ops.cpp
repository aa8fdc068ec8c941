#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/reduce_ops.h"

#include "core/dtype.h"
#include "kernels/cpu/grad_check.h"
#include "kernels/cpu/thread_pool.h"

namespace zeroshard::kernels {

namespace {

void add_range(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void accumulate(float* dst, const float* src, std::size_t n) {
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) { add_range(dst + b, src + b, e - b); });
}

void accumulate_reference(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
}

double sum_of_squares(const float* x, std::size_t n) {
  return check_gradients(x, DType::f32, n, 1.0f).sum_of_squares;
}

double sum_of_squares_reference(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zeroshard::kernels
