// Argument checks of the conversion kernels; see kernels/cuda/convert.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include "kernels/cuda/convert.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

namespace {

void check_args(const void* src, DType src_dtype, const void* dst, DType dst_dtype, std::size_t n,
                const char* what) {
  check_kernel_dtype(src_dtype, what);
  check_kernel_dtype(dst_dtype, what);
  ZS_CHECK(n == 0 || (src != nullptr && dst != nullptr), "{}: null src or dst with n = {} elements",
           what, n);
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
             CUstream_st* stream) {
  check_args(src, src_dtype, dst, dst_dtype, n, "convert");
  ZS_CUDA_CHECK(detail::launch_convert(src, src_dtype, dst, dst_dtype, n, stream));
}

void convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                    float scale, CUstream_st* stream) {
  check_args(src, src_dtype, dst, dst_dtype, n, "convert_scaled");
  ZS_CUDA_CHECK(detail::launch_convert_scaled(src, src_dtype, dst, dst_dtype, n, scale, stream));
}

void accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
                       float scale, CUstream_st* stream) {
  check_args(src, src_dtype, dst, dst_dtype, n, "accumulate_scaled");
  ZS_CUDA_CHECK(detail::launch_accumulate_scaled(src, src_dtype, dst, dst_dtype, n, scale, stream));
}

}  // namespace zeroshard::kernels::gpu
