// Argument checks and host-side scalars of the multi-tensor Adam / AdamW
// kernels; see kernels/cuda/adam.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/adam.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

void adam_update_multi_tensor(std::span<const AdamTensor> tensors, const AdamScalars& s,
                              DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  ZS_CHECK(grad_dtype == DType::f32 || grad_dtype == DType::bf16 || grad_dtype == DType::f16,
           "adam_update_multi_tensor: gradient dtype {} is not f32, bf16 or f16",
           dtype_name(grad_dtype));
  std::size_t with_copy = 0;
  std::size_t nonempty = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const AdamTensor& t = tensors[k];
    ZS_CHECK(t.n == 0 || (t.param && t.grad && t.exp_avg && t.exp_avg_sq),
             "adam_update_multi_tensor: tensor {} of {} elements has a null pointer", k, t.n);
    if (t.n == 0) continue;
    ++nonempty;
    if (t.param_copy != nullptr) ++with_copy;
  }
  ZS_CHECK(with_copy == 0 || with_copy == nonempty,
           "adam_update_multi_tensor: {} of {} non-empty tensors have param_copy; give it "
           "to all or none",
           with_copy, nonempty);
  const bool copy = with_copy != 0;
  ZS_CHECK(!copy || copy_dtype == DType::bf16 || copy_dtype == DType::f16,
           "adam_update_multi_tensor: low-precision param dtype {} is not bf16 or f16",
           dtype_name(copy_dtype));

  // The scalars adam_update_reference uses (make_adam_scalars, kernels/cpu/adam.h).
  detail::AdamDeviceScalars d{};
  d.neg_step_size = s.neg_step_size;
  d.bc2_sqrt = s.bc2_sqrt;
  d.lerp_coeff = s.lerp_coeff;
  d.lerp_small = s.lerp_small;
  d.beta2 = s.beta2;
  d.one_minus_beta2 = s.one_minus_beta2;
  d.eps = s.eps;
  d.weight_decay = s.weight_decay;
  d.decay_factor = s.decay_factor;
  d.grad_scale = s.grad_scale;
  d.decoupled = s.decoupled;
  ZS_CUDA_CHECK(detail::launch_adam(tensors, d, grad_dtype, copy, copy_dtype, stream));
}

void adam_update(const AdamTensor& tensor, const AdamScalars& s, DType grad_dtype,
                 DType copy_dtype, CUstream_st* stream) {
  adam_update_multi_tensor(std::span<const AdamTensor>(&tensor, 1), s, grad_dtype, copy_dtype,
                           stream);
}

}  // namespace zeroshard::kernels::gpu
