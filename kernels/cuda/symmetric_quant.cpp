// Argument checks of the GPU symmetric quantization kernels; see
// kernels/cuda/symmetric_quant.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/symmetric_quant.h"

#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

namespace {

void check_args(const void* data, DType dtype, std::size_t n, SymQuantFormat f, const void* chunk, const char* what) {
  check_sym_quant_format(f, what);
  check_kernel_dtype(dtype, what);
  ZS_CHECK(n == 0 || (data != nullptr && chunk != nullptr), "{}: null array with n = {} elements", what, n);
  ZS_CHECK(reinterpret_cast<std::uintptr_t>(chunk) % 4 == 0, "{}: the quantized chunk must be 4-byte aligned",
           what);
}

}  // namespace

void quantize_symmetric(const void* x, DType dtype, std::size_t n, SymQuantFormat f, void* chunk,
                        CUstream_st* stream) {
  check_args(x, dtype, n, f, chunk, "gpu::quantize_symmetric");
  ZS_CUDA_CHECK(detail::launch_sym_quantize(x, dtype, nullptr, n, f, chunk, stream));
}

void quantize_symmetric_feedback(const void* x, DType dtype, std::size_t n, SymQuantFormat f, float* residual,
                                 void* chunk, CUstream_st* stream) {
  check_args(x, dtype, n, f, chunk, "gpu::quantize_symmetric_feedback");
  ZS_CHECK(n == 0 || residual != nullptr, "gpu::quantize_symmetric_feedback: null residual with n = {} elements", n);
  ZS_CUDA_CHECK(detail::launch_sym_quantize(x, dtype, residual, n, f, chunk, stream));
}

void dequantize_symmetric(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype,
                          CUstream_st* stream) {
  check_args(y, dtype, n, f, chunk, "gpu::dequantize_symmetric");
  ZS_CUDA_CHECK(detail::launch_sym_dequantize(chunk, n, f, y, dtype, nullptr, stream));
}

void dequantize_accumulate(const void* chunk, std::size_t n, SymQuantFormat f, float* acc, CUstream_st* stream) {
  check_args(acc, DType::f32, n, f, chunk, "gpu::dequantize_accumulate");
  ZS_CUDA_CHECK(detail::launch_sym_dequantize(chunk, n, f, nullptr, DType::f32, acc, stream));
}

}  // namespace zeroshard::kernels::gpu
