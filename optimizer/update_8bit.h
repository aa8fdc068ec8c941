// The 8-bit Adam / AdamW update of a range that holds several parameter
// groups (runs with their own lr and weight_decay): whole blocks of one run
// go to the fused kernel (kernels/cpu/adam/adam8bit.h); a block that two runs
// share is dequantized, updated run by run with the fp32 kernel and
// requantized, which gives the bits the fused kernel gives for a block of
// one run (the fused kernel is bitwise adam_update on the dequantized
// states followed by quantize_blockwise; kernels/cpu/adam/adam8bit.h), so
// grouping never changes a block's arithmetic, only its scalars.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam8bit.h"
#include "optimizer/optimizer.h"
#include "optimizer/range_update.h"

namespace zeroshard {

/// One Adam / AdamW update (hyper.kind adam or adamw; adam_scalars) of the
/// elements the runs cover inside a range of n elements whose element 0
/// is a block boundary: param (fp32, n), grad (n of grad_dtype: f32, bf16,
/// f16), copy (null, or n of copy_dtype bf16 / f16 receiving the rounded
/// parameters), state: codes of n bytes, absmax of quant_block_count(n,
/// block) floats (array k of the state starts at the range's element 0 /
/// block 0). runs: sorted, disjoint, inside [0, n); adjacent runs with the
/// same lr and weight_decay are merged. Elements outside every run keep
/// their parameter and, unless their block is shared with a run, their
/// codes (padding is zero and stays so). Vectorised and multi-threaded as
/// adam8bit_update; bitwise the same for any thread count. Throws
/// InvariantError for another optimizer kind, a bad block size, or runs
/// out of order or outside the range.
/// Thread safety: touches only its arguments.
void optimizer_update_8bit(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, float* param,
                           const void* grad, DType grad_dtype, const kernels::Adam8bitState& state, void* copy,
                           DType copy_dtype, std::size_t n, std::size_t block, std::span<const UpdateRun> runs);

}  // namespace zeroshard
