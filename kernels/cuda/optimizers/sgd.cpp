// Argument checks and host-side scalars of the multi-tensor SGD kernels;
// see kernels/cuda/optimizers/sgd.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/optimizers/sgd.h"

#include "core/cuda_check.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/optimizer_checks.h"

namespace zeroshard::kernels::gpu {

void sgd_update_multi_tensor(std::span<const SgdTensor> tensors, const SgdScalars& s,
                             DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  const bool use_momentum = s.momentum != 0.0f;
  const bool copy = detail::check_optimizer_tensors(
      "sgd_update_multi_tensor", tensors, grad_dtype, copy_dtype,
      [&](const SgdTensor& t) { return t.param && t.grad && (t.momentum_buffer || !use_momentum); },
      use_momentum ? " (momentum needs a momentum_buffer)" : "");

  // As sgd_update_reference (kernels/cpu/update/sgd.cpp) computes them.
  detail::SgdDeviceScalars d{};
  d.lr = s.lr;
  d.momentum = s.momentum;
  d.one_minus_dampening = s.one_minus_dampening;
  d.weight_decay = s.weight_decay;
  d.grad_scale = s.grad_scale;
  d.use_momentum = use_momentum;
  d.nesterov = s.nesterov;
  d.first_step = s.first_step;
  ZS_CUDA_CHECK(detail::launch_sgd(tensors, d, grad_dtype, copy, copy_dtype, stream));
}

void sgd_update(const SgdTensor& tensor, const SgdScalars& s, DType grad_dtype, DType copy_dtype,
                CUstream_st* stream) {
  sgd_update_multi_tensor(std::span<const SgdTensor>(&tensor, 1), s, grad_dtype, copy_dtype,
                          stream);
}

}  // namespace zeroshard::kernels::gpu
