// Fused multi-tensor Adam / AdamW on the GPU: one pass reads the fp32
// master weights, the gradients (fp32, bf16 or fp16) and both moments,
// writes the updated weights and moments and, optionally, a bf16/fp16
// copy of the new weights for the next forward pass (the mixed-precision
// cast back of the optimizer step, docs/design.md "One training step at
// stage 3", step 3, done in the same pass).
//
// The arithmetic is kernels/cpu/adam/adam.h's, operation for operation (see
// [Note: bitwise GPU kernels] in kernels/cuda/device_math.cuh): with the
// same AdamScalars and inputs, param / exp_avg / exp_avg_sq / param_copy
// come out bitwise equal to the mixed-precision adam_update_reference()
// (NaN payloads aside: the GPU's arithmetic returns the canonical NaN).
//
// The header needs no CUDA headers: CUstream_st* is cudaStream_t.
#pragma once

#include <cstddef>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// One tensor (or shard) of a multi-tensor Adam update. Every pointer is
/// device memory of n elements; the arrays must not overlap.
struct AdamTensor {
  float* param = nullptr;       ///< fp32 master weights, updated in place
  const void* grad = nullptr;   ///< gradients, of the call's grad_dtype
  float* exp_avg = nullptr;     ///< fp32 first moment m, updated in place
  float* exp_avg_sq = nullptr;  ///< fp32 second moment v, updated in place
  void* param_copy = nullptr;    ///< written with the new param in copy_dtype, or null
  std::size_t n = 0;            ///< elements (not bytes)
};

/// Enqueues the AdamW (s.decoupled) or Adam update of every tensor on
/// `stream` (null: legacy default stream), in as few kernel launches as
/// apex's multi_tensor_apply packing allows; returns without waiting.
/// grad_dtype: f32, bf16 or f16. copy_dtype: bf16 or f16, used only when the
/// non-empty tensors have param_copy (all of them or none must). Errors:
/// InvariantError for an unsupported dtype, null pointers with n > 0 or
/// mixed param_copy; DeviceError if a launch fails. Thread safety: touches
/// only its arguments; the device arrays must not be in use by other work
/// not ordered with `stream`.
void adam_update_multi_tensor(std::span<const AdamTensor> tensors, const AdamScalars& s,
                              DType grad_dtype, DType copy_dtype, CUstream_st* stream);

/// adam_update_multi_tensor over one tensor.
void adam_update(const AdamTensor& tensor, const AdamScalars& s, DType grad_dtype,
                 DType copy_dtype, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
