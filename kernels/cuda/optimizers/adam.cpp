// Argument checks and host-side scalars of the multi-tensor Adam / AdamW
// kernels; see kernels/cuda/optimizers/adam.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/optimizers/adam.h"

#include "core/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/optimizer_checks.h"

namespace zeroshard::kernels::gpu {

void adam_update_multi_tensor(std::span<const AdamTensor> tensors, const AdamScalars& s,
                              DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  const bool copy = detail::check_optimizer_tensors(
      "adam_update_multi_tensor", tensors, grad_dtype, copy_dtype, [](const AdamTensor& t) {
        return t.param && t.grad && t.exp_avg && t.exp_avg_sq;
      });

  // The scalars adam_update_reference uses (make_adam_scalars, kernels/cpu/adam/adam.h).
  const detail::AdamDeviceScalars d = detail::adam_device_scalars(s);
  ZS_CUDA_CHECK(detail::launch_adam(tensors, d, grad_dtype, copy, copy_dtype, stream));
}

void adam_update(const AdamTensor& tensor, const AdamScalars& s, DType grad_dtype,
                 DType copy_dtype, CUstream_st* stream) {
  adam_update_multi_tensor(std::span<const AdamTensor>(&tensor, 1), s, grad_dtype, copy_dtype,
                           stream);
}

}  // namespace zeroshard::kernels::gpu
