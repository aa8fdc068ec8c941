// Argument checks of the conversion kernels; see kernels/cuda/convert.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include "kernels/cuda/convert.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t n,
             CUstream_st* stream) {
  check_kernel_dtype(src_dtype, "convert src");
  check_kernel_dtype(dst_dtype, "convert dst");
  ZS_CHECK(n == 0 || (src != nullptr && dst != nullptr),
           "convert: null src or dst with n = {} elements", n);
  ZS_CUDA_CHECK(detail::launch_convert(src, src_dtype, dst, dst_dtype, n, stream));
}

}  // namespace zeroshard::kernels::gpu
