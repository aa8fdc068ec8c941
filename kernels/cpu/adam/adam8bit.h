// Fused Adam / AdamW with 8-bit blockwise optimizer states (Dettmers et al.
// 2022, "8-bit Optimizers via Block-wise Quantization"; bitsandbytes'
// AdamW8bit): exp_avg is stored as codes of the signed dynamic tree map and
// exp_avg_sq as codes of the unsigned one, each block of `block` elements
// with one fp32 absmax (layout, maps, rounding and error bound:
// kernels/cpu/adam/quant_map.h). One pass per block:
//   1. dequantize: m = value_signed(code_m) * absmax_m[b],
//                  v = value_unsigned(code_v) * absmax_v[b];
//   2. the Adam / AdamW update of p, m, v from g, exactly the operations of
//      the fp32 kernel (kernels/cpu/adam/adam.h: torch's single-tensor order,
//      make_adam_scalars' scalars, decoupled weight decay for AdamW, bias
//      corrections), so param comes out bitwise equal to adam_update on the
//      dequantized states;
//   3. requantize: absmax_m[b] = max |m|, absmax_v[b] = max |v| over the
//      block's updated values, then the nearest codes.
// Parameters stay fp32 (master weights); the gradient may be f32, bf16 or
// f16, and a bf16/f16 copy of the updated parameter may be written in the
// same pass, as adam_update.
//
// Memory traffic per element (fp32 gradient, no copy): reads p, g (8 B) and
// two codes (2 B), writes p and two codes (6 B), plus 2 * 4 / block bytes of
// absmax each way: 16 + 16 / block bytes, against 28 for fp32 states.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam.h"
#include "kernels/cpu/adam/quant_map.h"

namespace zeroshard::kernels {

/// The 8-bit state arrays of one tensor or shard chunk. exp_avg_code and
/// exp_avg_sq_code: n bytes each; exp_avg_absmax and exp_avg_sq_absmax:
/// quant_block_count(n, block) floats each. A chunk of a longer state
/// starts at a block boundary: codes + k * block, absmax + k.
struct Adam8bitState {
  std::uint8_t* exp_avg_code = nullptr;     ///< signed dynamic map codes
  float* exp_avg_absmax = nullptr;          ///< per-block scale of exp_avg
  std::uint8_t* exp_avg_sq_code = nullptr;  ///< unsigned dynamic map codes
  float* exp_avg_sq_absmax = nullptr;       ///< per-block scale of exp_avg_sq
};

/// Scalar reference: block by block, element by element, the three steps
/// above. grad: n elements of grad_dtype (f32, bf16, f16); param_copy, when
/// not null, n elements of copy_dtype (bf16, f16). block: see
/// check_quant_block. Throws InvariantError on a bad dtype, block size, or
/// a null state array with n > 0.
void adam8bit_update_reference(float* param, const void* grad, DType grad_dtype,
                               const Adam8bitState& state, void* param_copy, DType copy_dtype,
                               std::size_t n, std::size_t block, const AdamScalars& s);

/// The kernel an engine calls: vectorised with Highway (AVX-512 or AVX2
/// chosen at run time), split over kernel_pool() threads by whole blocks
/// (a block is never split between threads); bitwise equal to
/// adam8bit_update_reference in param, param_copy, codes and absmax for
/// any thread count and target (NaN payloads of param aside, see
/// fp_strict.h). Arrays must not overlap. Errors as the reference.
/// Thread safety: touches only its arguments.
void adam8bit_update(float* param, const void* grad, DType grad_dtype, const Adam8bitState& state,
                     void* param_copy, DType copy_dtype, std::size_t n, std::size_t block,
                     const AdamScalars& s);

namespace detail {
/// The argument checks of adam8bit_update and its reference (`fn` names
/// the caller in the InvariantError).
void check_adam8bit_args(const char* fn, const Adam8bitState& state, DType grad_dtype,
                         const void* param_copy, DType copy_dtype, std::size_t n,
                         std::size_t block);
}  // namespace detail

}  // namespace zeroshard::kernels
