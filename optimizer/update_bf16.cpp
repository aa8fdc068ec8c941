// Adam / AdamW with bf16 states: see optimizer/update_bf16.h.
#include "optimizer/update_bf16.h"

#include "core/error.h"

namespace zeroshard {

kernels::Bf16StateRounding bf16_state_rounding(const StateFormat& f, std::int64_t step, std::uint64_t first_index) {
  return kernels::Bf16StateRounding{
      .mode = f.rounding == StateRounding::stochastic ? kernels::StateRounding::stochastic
                                                       : kernels::StateRounding::nearest_even,
      .seed = f.seed,
      .step = static_cast<std::uint64_t>(step),
      .first_index = first_index};
}

void optimizer_update_bf16(const OptimizerHyper& h, double lr, double weight_decay, std::int64_t step,
                           float grad_scale, float* param, const void* grad, DType grad_dtype,
                           std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq, void* copy, DType copy_dtype,
                           std::size_t n, std::uint64_t first_index) {
  ZS_CHECK(h.kind == OptimizerKind::adam || h.kind == OptimizerKind::adamw,
           "bf16 optimizer states are implemented for Adam and AdamW, not {}", optimizer_name(h.kind));
  const kernels::AdamScalars s = adam_scalars(h, lr, weight_decay, step, grad_scale);  // checks step >= 1
  kernels::adam_bf16_state_update(param, grad, grad_dtype, exp_avg, exp_avg_sq, copy, copy_dtype, n, s,
                                  bf16_state_rounding(h.states, step, first_index));
}

}  // namespace zeroshard
