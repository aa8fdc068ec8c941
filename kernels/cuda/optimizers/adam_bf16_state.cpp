// Argument checks and scalars of the multi-tensor bf16-state Adam kernels;
// see kernels/cuda/optimizers/adam_bf16_state.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/optimizers/adam_bf16_state.h"

#include "core/cuda_check.h"
#include "kernels/cpu/adam/stochastic_round.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/optimizer_checks.h"

namespace zeroshard::kernels::gpu {

void adam_bf16_state_update_multi_tensor(std::span<const AdamBf16StateTensor> tensors,
                                         const AdamScalars& s, StateRounding mode,
                                         std::uint64_t seed, std::uint64_t step,
                                         DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  const bool copy = detail::check_optimizer_tensors(
      "adam_bf16_state_update_multi_tensor", tensors, grad_dtype, copy_dtype,
      [](const AdamBf16StateTensor& t) {
        return t.param && t.grad && t.exp_avg && t.exp_avg_sq;
      });
  const StochasticKey key = stochastic_key(seed, step);
  const detail::Bf16StateDeviceRounding r{mode == StateRounding::stochastic, key.lo, key.hi};
  ZS_CUDA_CHECK(detail::launch_adam_bf16_state(tensors, detail::adam_device_scalars(s), r,
                                               grad_dtype, copy, copy_dtype, stream));
}

void adam_bf16_state_update(const AdamBf16StateTensor& t, const AdamScalars& s, StateRounding mode,
                            std::uint64_t seed, std::uint64_t step, DType grad_dtype,
                            DType copy_dtype, CUstream_st* stream) {
  adam_bf16_state_update_multi_tensor(std::span<const AdamBf16StateTensor>(&t, 1), s, mode, seed,
                                      step, grad_dtype, copy_dtype, stream);
}

}  // namespace zeroshard::kernels::gpu
