#include "kernels/cpu/reduce_ops.h"

namespace zeroshard::kernels {

void accumulate(float* __restrict dst, const float* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

double sum_of_squares(const float* x, std::size_t n) {
  // Eight independent double lanes (vectorisable); lanes are combined in a
  // fixed order so the value is deterministic.
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const double v = x[i + k];
      lane[k] += v * v;
    }
  }
  for (int k = 0; i < n; ++i, ++k) {
    const double v = x[i];
    lane[k] += v * v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double sum_of_squares_reference(const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zeroshard::kernels
