// Multi-tensor SGD kernels; see kernels/cuda/sgd.h and [Note: .cu / .cpp
// split] in kernels/cuda/launchers.h.
#include <vector>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

// Pointer slots: 0 param, 1 grad, 2 momentum_buffer (null without
// momentum), 3 param_copy.
template <DType G, bool kCopy, DType L>
struct SgdOp {
  SgdDeviceScalars s;
  struct Regs {
    float p, g, b;
  };

  __device__ void load(void* const* a, std::int64_t i, Regs& r) const {
    r.p = static_cast<const float*>(a[0])[i];
    r.g = load_as_float<G>(a[1], i);
    r.b = (s.use_momentum && !s.first_step) ? static_cast<const float*>(a[2])[i] : 0.0f;
  }

  // kernels/cpu/sgd.cpp sgd_element, operation for operation.
  __device__ void compute(Regs& r) const {
    float g = add(mul(r.g, s.grad_scale), mul(s.weight_decay, r.p));
    if (s.use_momentum) {
      r.b = s.first_step ? g : add(mul(r.b, s.momentum), mul(s.one_minus_dampening, g));
      g = s.nesterov ? add(g, mul(s.momentum, r.b)) : r.b;
    }
    r.p = sub(r.p, mul(s.lr, g));
  }

  __device__ void store(void* const* a, std::int64_t i, const Regs& r) const {
    static_cast<float*>(a[0])[i] = r.p;
    if (s.use_momentum) static_cast<float*>(a[2])[i] = r.b;
    if constexpr (kCopy) store_from_float<L>(a[3], i, r.p);
  }
};

template <DType G, bool kCopy, DType L>
cudaError_t launch_typed(std::span<const SgdTensor> tensors, const SgdDeviceScalars& s,
                         cudaStream_t stream) {
  constexpr int D = kCopy ? 4 : 3;
  std::vector<TensorPtrs<D>> ptrs;
  ptrs.reserve(tensors.size());
  for (const SgdTensor& t : tensors) {
    TensorPtrs<D> p;
    p.ptr[0] = t.param;
    p.ptr[1] = const_cast<void*>(t.grad);
    p.ptr[2] = t.momentum_buffer;
    if constexpr (kCopy) p.ptr[3] = t.param_copy;
    p.n = t.n;
    ptrs.push_back(p);
  }
  return multi_tensor_apply<D>(std::span<const TensorPtrs<D>>(ptrs), SgdOp<G, kCopy, L>{s},
                               stream);
}

template <DType G>
cudaError_t launch_grad(std::span<const SgdTensor> tensors, const SgdDeviceScalars& s, bool copy,
                        DType copy_dtype, cudaStream_t stream) {
  if (!copy) return launch_typed<G, false, DType::f32>(tensors, s, stream);
  if (copy_dtype == DType::bf16) return launch_typed<G, true, DType::bf16>(tensors, s, stream);
  return launch_typed<G, true, DType::f16>(tensors, s, stream);
}

}  // namespace

cudaError_t launch_sgd(std::span<const SgdTensor> tensors, const SgdDeviceScalars& s,
                       DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream) {
  switch (grad_dtype) {
    case DType::bf16: return launch_grad<DType::bf16>(tensors, s, copy, copy_dtype, stream);
    case DType::f16: return launch_grad<DType::f16>(tensors, s, copy, copy_dtype, stream);
    default: return launch_grad<DType::f32>(tensors, s, copy, copy_dtype, stream);
  }
}

}  // namespace zeroshard::kernels::gpu::detail
