// Internal: the raw kernel launchers of kernels/cuda, defined in the .cu
// files and called by the .cpp wrappers behind the public headers
// (optimizers/: adam.h, adam8bit.h, adam_bf16_state.h, sgd.h; convert.h,
// grad_check.h, symmetric_quant.h).
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
#include "kernels/cuda/grad_check.h"
#include "kernels/cuda/optimizers/adam.h"
#include "kernels/cuda/optimizers/adam8bit.h"
#include "kernels/cuda/optimizers/adam_bf16_state.h"
#include "kernels/cuda/optimizers/sgd.h"
#include "kernels/quant/symmetric_quant.h"

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

/// The AdamDeviceScalars of make_adam_scalars' AdamScalars (the same
/// values: what adam_update_reference uses).
inline AdamDeviceScalars adam_device_scalars(const AdamScalars& s) {
  AdamDeviceScalars d{};
  d.neg_step_size = s.neg_step_size;
  d.bc2_sqrt = s.bc2_sqrt;
  d.lerp_coeff = s.lerp_coeff;
  d.lerp_small = s.lerp_small;
  d.beta2 = s.beta2;
  d.one_minus_beta2 = s.one_minus_beta2;
  d.eps = s.eps;
  d.weight_decay = s.weight_decay;
  d.decay_factor = s.decay_factor;
  d.grad_scale = s.grad_scale;
  d.decoupled = s.decoupled;
  return d;
}

/// The dynamic tree map constants one 8-bit kernel launch needs
/// (kernels/cpu/adam/quant_map.h detail::QuantTables, decode and the
/// arithmetic encode), for the signed map [0] and the unsigned map [1].
struct QuantDeviceTables {
  float dec_r[2][16];
  float dec_c[2][16];
  float enc_next[2][8];
  float enc_scale[2][8];
  float enc_offset[2][8];
  int lmax[2];
};

/// Launches the 8-bit-state Adam kernel over one tensor: one thread block
/// per quantization block of `block` elements (a power of two in [64,
/// 4096]). Returns the launch error.
cudaError_t launch_adam8bit(const Adam8bitTensor& t, std::size_t block,
                            const QuantDeviceTables& tables, const AdamDeviceScalars& s,
                            DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream);

/// The stochastic-rounding parameters of a bf16-state launch.
struct Bf16StateDeviceRounding {
  bool stochastic;
  std::uint32_t key_lo, key_hi;  ///< stochastic_key(seed, step)
};

/// Launches the multi-tensor bf16-state Adam kernels. Returns the first
/// launch error.
cudaError_t launch_adam_bf16_state(std::span<const AdamBf16StateTensor> tensors,
                                   const AdamDeviceScalars& s, const Bf16StateDeviceRounding& r,
                                   DType grad_dtype, bool copy, DType copy_dtype,
                                   cudaStream_t stream);

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

/// Launches symmetric block quantization of n elements of x (dtype f32,
/// bf16 or f16) into `chunk` (kernels/quant/symmetric_quant.h), with error
/// feedback into `residual` when it is not null. Returns the first error.
cudaError_t launch_sym_quantize(const void* x, DType dtype, float* residual, std::size_t n, SymQuantFormat f,
                                void* chunk, cudaStream_t stream);

/// Launches dequantization of the chunk's n elements into y (dtype), or,
/// when acc is not null, their accumulation into acc (fp32). Returns the
/// launch error.
cudaError_t launch_sym_dequantize(const void* chunk, std::size_t n, SymQuantFormat f, void* y, DType dtype,
                                  float* acc, cudaStream_t stream);

/// Launches the two-pass scale / Inf-NaN check / sum of squares over grad
/// (f32, bf16 or f16; write_back only for f32). Returns the first launch
/// error.
cudaError_t launch_grad_check(void* grad, DType dtype, bool write_back, std::size_t n,
                              float scale, GradCheck* result, void* workspace,
                              cudaStream_t stream);

/// Workspace bytes launch_grad_check needs (a constant).
std::size_t grad_check_workspace_size();

}  // namespace zeroshard::kernels::gpu::detail
