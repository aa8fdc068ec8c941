// Fused multi-tensor SGD (momentum, dampening, Nesterov, L2 weight decay)
// on the GPU, with the same optional bf16/fp16 copy of the new weights as
// kernels/cuda/optimizers/adam.h.
//
// The arithmetic is kernels/cpu/update/sgd.h's, operation for operation (see
// [Note: bitwise GPU kernels] in kernels/cuda/device_math.cuh): with the
// same SgdScalars and inputs, param / momentum_buffer / param_copy come out
// bitwise equal to the mixed-precision sgd_update_reference() (NaN payloads
// aside). The header needs no CUDA headers.
#pragma once

#include <cstddef>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/update/sgd.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// One tensor (or shard) of a multi-tensor SGD update. Every pointer is
/// device memory of n elements; the arrays must not overlap.
struct SgdTensor {
  float* param = nullptr;            ///< fp32 master weights, updated in place
  const void* grad = nullptr;        ///< gradients, of the call's grad_dtype
  float* momentum_buffer = nullptr;  ///< fp32, updated; may be null when momentum == 0
  void* param_copy = nullptr;         ///< written with the new param in copy_dtype, or null
  std::size_t n = 0;                 ///< elements (not bytes)
};

/// Enqueues the SGD update of every tensor on `stream` (null: legacy
/// default stream) in as few launches as multi-tensor packing allows;
/// returns without waiting. grad_dtype: f32, bf16 or f16. copy_dtype: bf16
/// or f16, used only when the non-empty tensors have param_copy (all or none).
/// Errors: InvariantError for an unsupported dtype, a null pointer with
/// n > 0 (momentum_buffer counts when s.momentum != 0) or mixed param_copy;
/// DeviceError if a launch fails. Thread safety: touches only its arguments.
void sgd_update_multi_tensor(std::span<const SgdTensor> tensors, const SgdScalars& s,
                             DType grad_dtype, DType copy_dtype, CUstream_st* stream);

/// sgd_update_multi_tensor over one tensor.
void sgd_update(const SgdTensor& tensor, const SgdScalars& s, DType grad_dtype, DType copy_dtype,
                CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
