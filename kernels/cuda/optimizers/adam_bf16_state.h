// Multi-tensor AdamW with bf16 optimizer states on the GPU: the CPU
// kernel's definition (kernels/cpu/adam/adam_bf16_state.h: widen, torch-order
// Adam arithmetic, round to nearest even or stochastically with the
// counter-based stream of kernels/cpu/adam/stochastic_round.h). With the same
// inputs, param, param_copy and both states come out bitwise equal to
// adam_bf16_state_update_reference ([Note: bitwise GPU kernels]; NaN
// payloads of param aside), the stochastic bits included: they depend on
// (seed, step, global element index) only.
//
// The header needs no CUDA headers: CUstream_st* is cudaStream_t.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam_bf16_state.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// One tensor (or shard) of a bf16-state Adam update. Every pointer is
/// device memory of n elements; the arrays must not overlap.
struct AdamBf16StateTensor {
  float* param = nullptr;                 ///< fp32 master weights, updated in place
  const void* grad = nullptr;             ///< gradients, of the call's grad_dtype
  std::uint16_t* exp_avg = nullptr;       ///< bf16 first moment, updated in place
  std::uint16_t* exp_avg_sq = nullptr;    ///< bf16 second moment, updated in place
  void* param_copy = nullptr;             ///< written with the new param in copy_dtype, or null
  std::size_t n = 0;                      ///< elements
  std::uint64_t first_index = 0;          ///< stochastic rounding: global index of element 0
};

/// Enqueues the AdamW (s.decoupled) or Adam update of every tensor on
/// `stream` (null: the legacy default stream) in as few launches as
/// multi_tensor_apply allows; returns without waiting. mode: how the new
/// states are rounded; seed and step select the stochastic stream (element
/// i of tensor t draws the bits of global index t.first_index + i).
/// grad_dtype f32, bf16 or f16; copy_dtype bf16 or f16, used only when the
/// non-empty tensors have param_copy (all or none must). Errors:
/// InvariantError for a bad dtype, a null pointer with n > 0 or mixed
/// param_copy; DeviceError if a launch fails. Thread safety: touches only
/// its arguments.
void adam_bf16_state_update_multi_tensor(std::span<const AdamBf16StateTensor> tensors,
                                         const AdamScalars& s, StateRounding mode,
                                         std::uint64_t seed, std::uint64_t step,
                                         DType grad_dtype, DType copy_dtype, CUstream_st* stream);

/// adam_bf16_state_update_multi_tensor over one tensor.
void adam_bf16_state_update(const AdamBf16StateTensor& t, const AdamScalars& s, StateRounding mode,
                            std::uint64_t seed, std::uint64_t step, DType grad_dtype,
                            DType copy_dtype, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
