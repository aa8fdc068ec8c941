// Internal: the raw kernel launchers of kernels/cuda, defined in the .cu
// files and called by the .cpp wrappers behind the public headers (adam.h,
// sgd.h, convert.h, grad_check.h).
//
// [Note: .cu / .cpp split]
// fmt 9 (behind core/error.h and ZS_CHECK) does not compile under nvcc in
// C++20 mode, so a .cu file includes no zeroshard header that uses fmt. Each
// kernel family is therefore two files: the .cpp checks the arguments with
// ZS_CHECK, derives the per-launch scalars on the host, calls the launcher
// here and turns the cudaError_t it returns into an exception with
// ZS_CUDA_CHECK; the .cu holds the kernels and a launcher that only
// dispatches on dtypes and launches. The launchers trust their arguments.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/cuda/adam.h"
#include "kernels/cuda/grad_check.h"
#include "kernels/cuda/sgd.h"

namespace zeroshard::kernels::gpu::detail {

/// Adam scalars as the kernel consumes them, derived on the host exactly as
/// adam_update_reference derives them.
struct AdamDeviceScalars {
  float neg_step_size;  ///< AdamScalars::neg_step_size
  float bc2_sqrt;       ///< AdamScalars::bc2_sqrt
  float lerp_coeff;     ///< AdamScalars::lerp_coeff
  float beta2, one_minus_beta2;
  float eps, weight_decay, decay_factor, grad_scale;
  bool lerp_small;      ///< AdamScalars::lerp_small (torch's lerp branch)
  bool decoupled;
};

/// SGD scalars as the kernel consumes them.
struct SgdDeviceScalars {
  float lr, momentum, one_minus_dampening, weight_decay, grad_scale;
  bool use_momentum, nesterov, first_step;
};

/// Launches the multi-tensor Adam kernels; `copy` says whether param_copy is
/// written (in copy_dtype). Returns the first launch error.
cudaError_t launch_adam(std::span<const AdamTensor> tensors, const AdamDeviceScalars& s,
                        DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream);

/// Launches the multi-tensor SGD kernels. Returns the first launch error.
cudaError_t launch_sgd(std::span<const SgdTensor> tensors, const SgdDeviceScalars& s,
                       DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream);

/// Launches an element-wise conversion between any two of f32, bf16, f16
/// (equal dtypes: an asynchronous device copy). Returns the launch error.
cudaError_t launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                           std::size_t n, cudaStream_t stream);

/// launch_convert with dst = convert(src * scale); scale 1 skips the
/// multiply. Returns the launch error.
cudaError_t launch_convert_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                  std::size_t n, float scale, cudaStream_t stream);

/// dst = convert(widen(dst) + widen(src) * scale), unfused. Returns the
/// launch error.
cudaError_t launch_accumulate_scaled(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                                     std::size_t n, float scale, cudaStream_t stream);

/// Launches the two-pass scale / Inf-NaN check / sum of squares over grad
/// (f32, bf16 or f16; write_back only for f32). Returns the first launch
/// error.
cudaError_t launch_grad_check(void* grad, DType dtype, bool write_back, std::size_t n,
                              float scale, GradCheck* result, void* workspace,
                              cudaStream_t stream);

/// Workspace bytes launch_grad_check needs (a constant).
std::size_t grad_check_workspace_size();

}  // namespace zeroshard::kernels::gpu::detail
