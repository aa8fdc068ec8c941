// Multi-tensor Adam / AdamW kernels; see kernels/cuda/optimizers/adam.h and
// [Note: .cu / .cpp split] in kernels/cuda/launchers.h.
#include <array>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/adam_math.cuh"
#include "kernels/cuda/optimizers/optimizer_launch.cuh"

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

  // kernels/cpu/adam/adam_element.h adam_element, operation for operation.
  __device__ void compute(Regs& r) const { adam_element(s, r.p, r.g, r.m, r.v); }

  __device__ void store(void* const* a, std::int64_t i, const Regs& r) const {
    static_cast<float*>(a[0])[i] = r.p;
    static_cast<float*>(a[2])[i] = r.m;
    static_cast<float*>(a[3])[i] = r.v;
    if constexpr (kCopy) store_from_float<L>(a[4], i, r.p);
  }
};

// Slots 0-3 of a tensor, in AdamOp's order.
std::array<void*, 4> adam_slots(const AdamTensor& t) {
  return {t.param, const_cast<void*>(t.grad), t.exp_avg, t.exp_avg_sq};
}

}  // namespace

cudaError_t launch_adam(std::span<const AdamTensor> tensors, const AdamDeviceScalars& s,
                        DType grad_dtype, bool copy, DType copy_dtype, cudaStream_t stream) {
  return launch_optimizer<AdamOp, 4>(tensors, s, grad_dtype, copy, copy_dtype, stream, adam_slots);
}

}  // namespace zeroshard::kernels::gpu::detail
