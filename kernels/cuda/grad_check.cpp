// Argument checks of the fused gradient pass; see kernels/cuda/grad_check.h
// and [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include "kernels/cuda/grad_check.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

namespace {

void check_pointers(const void* grad, std::size_t n, const GradCheck* result,
                    const void* workspace, const char* fn) {
  ZS_CHECK(grad != nullptr || n == 0, "{}: grad is null with n = {} elements", fn, n);
  ZS_CHECK(result != nullptr && workspace != nullptr,
           "{}: result and workspace must be device pointers, got {} and {}", fn,
           static_cast<const void*>(result), workspace);
}

}  // namespace

std::size_t grad_check_workspace_bytes() { return detail::grad_check_workspace_size(); }

void unscale_and_check(float* grad, std::size_t n, float scale, GradCheck* result,
                       void* workspace, CUstream_st* stream) {
  check_pointers(grad, n, result, workspace, "unscale_and_check");
  ZS_CUDA_CHECK(detail::launch_grad_check(grad, DType::f32, true, n, scale, result, workspace,
                                          stream));
}

void check_gradients(const void* grad, DType dtype, std::size_t n, float scale,
                     GradCheck* result, void* workspace, CUstream_st* stream) {
  check_kernel_dtype(dtype, "check_gradients grad");
  check_pointers(grad, n, result, workspace, "check_gradients");
  ZS_CUDA_CHECK(detail::launch_grad_check(const_cast<void*>(grad), dtype, false, n, scale, result,
                                          workspace, stream));
}

}  // namespace zeroshard::kernels::gpu
