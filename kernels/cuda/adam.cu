// Multi-tensor Adam / AdamW kernels; see kernels/cuda/adam.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include <vector>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

// Pointer slots: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 param_copy.
template <DType G, bool kCopy, DType L>
struct AdamOp {
  AdamDeviceScalars s;
  struct Regs {
    float p, g, m, v;
  };

  __device__ void load(void* const* a, std::int64_t i, Regs& r) const {
    r.p = static_cast<const float*>(a[0])[i];
    r.g = load_as_float<G>(a[1], i);
    r.m = static_cast<const float*>(a[2])[i];
    r.v = static_cast<const float*>(a[3])[i];
  }

  // kernels/cpu/adam.cpp adam_element, operation for operation.
  __device__ void compute(Regs& r) const {
    float g = mul(r.g, s.grad_scale);
    if (s.decoupled) {
      r.p = mul(r.p, s.decay_factor);
    } else {
      g = add(g, mul(s.weight_decay, r.p));
    }
    r.m = fma_rn(s.lerp_coeff, sub(g, r.m), s.lerp_small ? r.m : g);
    r.v = add(mul(r.v, s.beta2), mul(mul(s.one_minus_beta2, g), g));
    const float denom = add(div(sqrt_rn(r.v), s.bc2_sqrt), s.eps);
    r.p = add(r.p, div(mul(s.neg_step_size, r.m), denom));
  }

  __device__ void store(void* const* a, std::int64_t i, const Regs& r) const {
    static_cast<float*>(a[0])[i] = r.p;
    static_cast<float*>(a[2])[i] = r.m;
    static_cast<float*>(a[3])[i] = r.v;
    if constexpr (kCopy) store_from_float<L>(a[4], i, r.p);
  }
};

template <DType G, bool kCopy, DType L>
cudaError_t launch_typed(std::span<const AdamTensor> tensors, const AdamDeviceScalars& s,
                         cudaStream_t stream) {
  constexpr int D = kCopy ? 5 : 4;
  std::vector<TensorPtrs<D>> ptrs;
  ptrs.reserve(tensors.size());
  for (const AdamTensor& t : tensors) {
    TensorPtrs<D> p;
    p.ptr[0] = t.param;
    p.ptr[1] = const_cast<void*>(t.grad);
    p.ptr[2] = t.exp_avg;
    p.ptr[3] = t.exp_avg_sq;
    if constexpr (kCopy) p.ptr[4] = t.param_copy;
    p.n = t.n;
    ptrs.push_back(p);
  }
  return multi_tensor_apply<D>(std::span<const TensorPtrs<D>>(ptrs), AdamOp<G, kCopy, L>{s},
                               stream);
}

template <DType G>
cudaError_t launch_grad(std::span<const AdamTensor> tensors, const AdamDeviceScalars& s, bool copy,
                        DType copy_dtype, cudaStream_t stream) {
  if (!copy) return launch_typed<G, false, DType::f32>(tensors, s, stream);
  if (copy_dtype == DType::bf16) return launch_typed<G, true, DType::bf16>(tensors, s, stream);
  return launch_typed<G, true, DType::f16>(tensors, s, stream);
}

}  // namespace

cudaError_t launch_adam(std::span<const AdamTensor> tensors, const AdamDeviceScalars& s,
                        DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream) {
  switch (grad_dtype) {
    case DType::bf16: return launch_grad<DType::bf16>(tensors, s, copy, copy_dtype, stream);
    case DType::f16: return launch_grad<DType::f16>(tensors, s, copy, copy_dtype, stream);
    default: return launch_grad<DType::f32>(tensors, s, copy, copy_dtype, stream);
  }
}

}  // namespace zeroshard::kernels::gpu::detail
