// The Adam / AdamW update with bf16 optimizer states (StateDtype::bf16,
// optimizer/state_format.h) at the optimizer layer: the scalars the fp32
// path uses (adam_scalars) and the rounding the configuration chose
// (StateFormat::rounding, seed), handed to the fused kernel
// (kernels/cpu/adam/adam_bf16_state.h).
//
// Stochastic rounding draws the random bits of an element from (seed,
// step, index), the index being the element's position in its unit's flat
// buffer; a caller passes the flat index of element 0 of the range, so the
// bits are the same however the buffer is sharded (ZeRO stage, world size)
// or cut into pieces (offload sub-groups, parameter groups).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/adam/adam_bf16_state.h"
#include "optimizer/optimizer.h"

namespace zeroshard {

/// The kernel rounding of a bf16-state update: f.rounding (nearest even or
/// stochastic), f.seed, the 1-based optimizer `step` and `first_index`, the
/// flat-buffer index of the range's element 0. Pure.
kernels::Bf16StateRounding bf16_state_rounding(const StateFormat& f, std::int64_t step, std::uint64_t first_index);

/// One Adam / AdamW update (hyper.kind adam or adamw) of n contiguous
/// elements with bf16 states:
///  - param: n fp32 values, updated in place (weights or master weights);
///  - grad: n elements of grad_dtype (f32, bf16, f16), times grad_scale;
///  - exp_avg, exp_avg_sq: n bf16 bit patterns each, zero before step 1,
///    updated in place and rounded as hyper.states says;
///  - copy: null, or n elements of copy_dtype (bf16, f16) receiving the
///    updated parameters rounded to nearest even;
///  - lr, weight_decay: this parameter group's values (adam_scalars);
///  - step: 1-based optimizer step after this update;
///  - first_index: flat-buffer index of element 0 (stochastic rounding).
/// The parameters come out bitwise those of optimizer_update_mixed on the
/// widened states. Vectorised and multi-threaded; bitwise the same for any
/// thread count. Throws InvariantError for another optimizer kind, step <
/// 1, a bad dtype or a null state array with n > 0.
/// Thread safety: touches only its arguments.
void optimizer_update_bf16(const OptimizerHyper& hyper, double lr, double weight_decay, std::int64_t step,
                           float grad_scale, float* param, const void* grad, DType grad_dtype,
                           std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, void* copy, DType copy_dtype,
                           std::size_t n, std::uint64_t first_index);

}  // namespace zeroshard
