// Multi-tensor SGD kernels; see kernels/cuda/optimizers/sgd.h and [Note: .cu / .cpp
// split] in kernels/cuda/launchers.h.
#include <array>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/optimizer_launch.cuh"

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

  // kernels/cpu/update/sgd.cpp sgd_element, operation for operation.
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

// Slots 0-2 of a tensor, in SgdOp's order (momentum_buffer null without momentum).
std::array<void*, 3> sgd_slots(const SgdTensor& t) {
  return {t.param, const_cast<void*>(t.grad), t.momentum_buffer};
}

}  // namespace

cudaError_t launch_sgd(std::span<const SgdTensor> tensors, const SgdDeviceScalars& s,
                       DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream) {
  return launch_optimizer<SgdOp, 3>(tensors, s, grad_dtype, copy, copy_dtype, stream, sgd_slots);
}

}  // namespace zeroshard::kernels::gpu::detail
