#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/grad_check.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

std::size_t grad_check_part_begin(std::size_t n, std::size_t p) {
  const std::size_t blocks = (n + 63) / 64;
  // blocks * p / P without overflow for any realistic n.
  const std::size_t b = blocks / kGradCheckParts * p + blocks % kGradCheckParts * p / kGradCheckParts;
  const std::size_t begin = b * 64;
  return begin < n ? begin : n;
}

GradCheck grad_check_reference(void* grad, DType dtype, std::size_t n, float scale,
                               bool write_back) {
  check_kernel_dtype(dtype, "grad");
  ZS_CHECK(!write_back || dtype == DType::f32, "in-place unscale needs an f32 gradient, got {}",
           dtype_name(dtype));
  GradCheck r;
  double total = 0;
  for (std::size_t p = 0; p < kGradCheckParts; ++p) {
    const std::size_t b = grad_check_part_begin(n, p), e = grad_check_part_begin(n, p + 1);
    double lane[16] = {};
    for (std::size_t j = b; j < e; ++j) {
      const float y = load_as_float(grad, dtype, j) * scale;
      if (write_back) static_cast<float*>(grad)[j] = y;
      if (!std::isfinite(y)) r.found_inf_or_nan = true;
      lane[(j - b) % 16] += static_cast<double>(y) * static_cast<double>(y);
    }
    for (std::size_t w = 1; w < 16; w *= 2) {
      for (std::size_t i = 0; i < 16; i += 2 * w) lane[i] += lane[i + w];
    }
    total += lane[0];
  }
  r.sum_of_squares = total;
  return r;
}

std::size_t count_nonfinite_reference(const void* data, DType dtype, std::size_t n) {
  check_kernel_dtype(dtype, "count_nonfinite data");
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) count += !std::isfinite(load_as_float(data, dtype, i));
  return count;
}

}  // namespace zeroshard::kernels
