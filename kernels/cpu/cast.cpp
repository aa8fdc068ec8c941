// The engine's element-type conversions, on the vector kernels: cast and
// accumulate_cast are convert_scaled and accumulate_scaled (convert.h), and
// grad_stats is check_gradients plus count_nonfinite (grad_check.h), so each
// conversion and each reduction has one implementation (and one scalar
// reference, next to it).
#include "kernels/cpu/cast.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/grad_check.h"

namespace zeroshard::kernels {

void cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n, float scale) {
  check_kernel_dtype(src_type, "cast source");
  check_kernel_dtype(dst_type, "cast destination");
  convert_scaled(src, src_type, dst, dst_type, n, scale);
}

void accumulate_cast(void* dst, DType dst_type, const void* src, DType src_type, std::size_t n,
                     float scale) {
  check_kernel_dtype(src_type, "accumulate_cast source");
  check_kernel_dtype(dst_type, "accumulate_cast destination");
  accumulate_scaled(src, src_type, dst, dst_type, n, scale);
}

GradStats grad_stats(const void* data, DType type, std::size_t n) {
  check_kernel_dtype(type, "grad_stats data");
  const GradCheck check = check_gradients(data, type, n, 1.0f);
  GradStats st;
  st.sum_of_squares = check.sum_of_squares;
  // Finite squares never overflow the double sum, so the count is 0 unless
  // the sum is Inf or NaN.
  if (check.found_inf_or_nan) st.nonfinite = count_nonfinite(data, type, n);
  return st;
}

}  // namespace zeroshard::kernels
