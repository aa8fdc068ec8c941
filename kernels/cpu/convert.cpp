#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/convert.h"

#include <cstring>

namespace zeroshard::kernels {

void convert_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                       std::size_t n) {
  check_kernel_dtype(src_dtype, "convert source");
  check_kernel_dtype(dst_dtype, "convert destination");
  if (src_dtype == dst_dtype) {
    if (n != 0) std::memmove(dst, src, n * dtype_size(src_dtype));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    store_from_float(dst, dst_dtype, i, load_as_float(src, src_dtype, i));
  }
}

void convert_scaled_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                              std::size_t n, float scale) {
  check_kernel_dtype(src_dtype, "convert_scaled source");
  check_kernel_dtype(dst_dtype, "convert_scaled destination");
  for (std::size_t i = 0; i < n; ++i) {
    const float x = load_as_float(src, src_dtype, i);
    store_from_float(dst, dst_dtype, i, scale == 1.0f ? x : x * scale);
  }
}

void accumulate_scaled_reference(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                 std::size_t n, float scale) {
  check_kernel_dtype(src_dtype, "accumulate_scaled source");
  check_kernel_dtype(dst_dtype, "accumulate_scaled destination");
  for (std::size_t i = 0; i < n; ++i) {
    const float x = load_as_float(src, src_dtype, i) * scale;
    store_from_float(dst, dst_dtype, i, load_as_float(dst, dst_dtype, i) + x);
  }
}

}  // namespace zeroshard::kernels
