// AdamW with 8-bit blockwise optimizer states on the GPU: the CPU
// kernel's definition (kernels/cpu/adam/adam8bit.h: dequantize with the dynamic
// tree maps, torch-order Adam arithmetic, per-block absmax, requantize to
// the nearest code; maps and layout in kernels/cpu/adam/quant_map.h), one
// thread block per quantization block. With the same inputs, param,
// param_copy, codes and absmax come out bitwise equal to
// adam8bit_update_reference ([Note: bitwise GPU kernels]; NaN payloads of
// param aside).
//
// The header needs no CUDA headers: CUstream_st* is cudaStream_t.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/adam8bit.h"

struct CUstream_st;

namespace zeroshard::kernels::gpu {

/// One tensor (or shard chunk starting at a block boundary) of an 8-bit
/// Adam update. Every pointer is device memory: param, grad (of the call's
/// grad_dtype) and param_copy n elements, the state's codes n bytes each
/// and its absmax arrays quant_block_count(n, block) floats each.
struct Adam8bitTensor {
  float* param = nullptr;        ///< fp32 master weights, updated in place
  const void* grad = nullptr;    ///< gradients
  Adam8bitState state;           ///< codes and absmax of exp_avg, exp_avg_sq (device memory)
  void* param_copy = nullptr;    ///< written with the new param in copy_dtype, or null
  std::size_t n = 0;             ///< elements
};

/// Enqueues the AdamW (s.decoupled) or Adam update of t on `stream` (null:
/// the legacy default stream); returns without waiting. block: the
/// quantization block (check_quant_block); grad_dtype f32, bf16 or f16;
/// copy_dtype bf16 or f16 when t.param_copy is given. Errors:
/// InvariantError for a bad dtype or block size or a null pointer with n >
/// 0; DeviceError if the launch fails. Thread safety: touches only its
/// arguments; the arrays must not be in use by work not ordered with
/// `stream`.
void adam8bit_update(const Adam8bitTensor& t, std::size_t block, const AdamScalars& s,
                     DType grad_dtype, DType copy_dtype, CUstream_st* stream);

}  // namespace zeroshard::kernels::gpu
