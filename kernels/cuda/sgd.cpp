// Argument checks and host-side scalars of the multi-tensor SGD kernels;
// see kernels/cuda/sgd.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include "kernels/cuda/sgd.h"

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/launchers.h"

namespace zeroshard::kernels::gpu {

void sgd_update_multi_tensor(std::span<const SgdTensor> tensors, const SgdScalars& s,
                             DType grad_dtype, DType copy_dtype, CUstream_st* stream) {
  ZS_CHECK(grad_dtype == DType::f32 || grad_dtype == DType::bf16 || grad_dtype == DType::f16,
           "sgd_update_multi_tensor: gradient dtype {} is not f32, bf16 or f16",
           dtype_name(grad_dtype));
  const bool use_momentum = s.momentum != 0.0f;
  std::size_t with_copy = 0;
  std::size_t nonempty = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const SgdTensor& t = tensors[k];
    ZS_CHECK(t.n == 0 || (t.param && t.grad && (t.momentum_buffer || !use_momentum)),
             "sgd_update_multi_tensor: tensor {} of {} elements has a null pointer (momentum "
             "{} needs a momentum_buffer)",
             k, t.n, s.momentum);
    if (t.n == 0) continue;
    ++nonempty;
    if (t.param_copy != nullptr) ++with_copy;
  }
  ZS_CHECK(with_copy == 0 || with_copy == nonempty,
           "sgd_update_multi_tensor: {} of {} non-empty tensors have param_copy; give it "
           "to all or none",
           with_copy, nonempty);
  const bool copy = with_copy != 0;
  ZS_CHECK(!copy || copy_dtype == DType::bf16 || copy_dtype == DType::f16,
           "sgd_update_multi_tensor: low-precision param dtype {} is not bf16 or f16",
           dtype_name(copy_dtype));

  // As sgd_update_reference (kernels/cpu/sgd.cpp) computes them.
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
