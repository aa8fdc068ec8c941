// Multi-tensor bf16-state Adam / AdamW kernels; see
// kernels/cuda/optimizers/adam_bf16_state.h and [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h.
#include <array>
#include <cstdint>

#include "kernels/cpu/adam/stochastic_round.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/optimizers/adam_math.cuh"
#include "kernels/cuda/optimizers/optimizer_launch.cuh"

namespace zeroshard::kernels::gpu::detail {

namespace {

// The scalars of one launch: the Adam ones and the rounding's.
struct Bf16StateScalars {
  AdamDeviceScalars adam;
  Bf16StateDeviceRounding round;
};

// Pointer slots: 0 param, 1 grad, 2 exp_avg, 3 exp_avg_sq, 4 the tensor's
// first global index (an integer carried in a pointer slot: the per-tensor
// values multi_tensor_apply passes are its slots), 5 param_copy.
template <DType G, bool kCopy, DType L>
struct Bf16StateOp {
  Bf16StateScalars s;
  struct Regs {
    float p, g, m, v;
    std::uint64_t index;
  };

  __device__ void load(void* const* a, std::int64_t i, Regs& r) const {
    r.p = static_cast<const float*>(a[0])[i];
    r.g = load_as_float<G>(a[1], i);
    r.m = bf16_to_float(static_cast<const std::uint16_t*>(a[2])[i]);
    r.v = bf16_to_float(static_cast<const std::uint16_t*>(a[3])[i]);
    r.index = reinterpret_cast<std::uintptr_t>(a[4]) + static_cast<std::uint64_t>(i);
  }

  __device__ void compute(Regs& r) const { adam_element(s.adam, r.p, r.g, r.m, r.v); }

  __device__ void store(void* const* a, std::int64_t i, const Regs& r) const {
    static_cast<float*>(a[0])[i] = r.p;
    std::uint16_t* m = static_cast<std::uint16_t*>(a[2]);
    std::uint16_t* v = static_cast<std::uint16_t*>(a[3]);
    if (s.round.stochastic) {
      const std::uint32_t bits =
          stochastic_bits(StochasticKey{s.round.key_lo, s.round.key_hi}, r.index);
      m[i] = float_to_bf16_stochastic(r.m, bits & 0xffffu);
      v[i] = float_to_bf16_stochastic(r.v, bits >> 16);
    } else {
      m[i] = float_to_bf16(r.m);
      v[i] = float_to_bf16(r.v);
    }
    if constexpr (kCopy) store_from_float<L>(a[5], i, r.p);
  }
};

std::array<void*, 5> bf16_state_slots(const AdamBf16StateTensor& t) {
  return {t.param, const_cast<void*>(t.grad), t.exp_avg, t.exp_avg_sq,
          reinterpret_cast<void*>(static_cast<std::uintptr_t>(t.first_index))};
}

}  // namespace

cudaError_t launch_adam_bf16_state(std::span<const AdamBf16StateTensor> tensors,
                                   const AdamDeviceScalars& s, const Bf16StateDeviceRounding& r,
                                   DType grad_dtype, bool copy, DType copy_dtype,
                                   cudaStream_t stream) {
  return launch_optimizer<Bf16StateOp, 5>(tensors, Bf16StateScalars{s, r}, grad_dtype, copy,
                                          copy_dtype, stream, bf16_state_slots);
}

}  // namespace zeroshard::kernels::gpu::detail
