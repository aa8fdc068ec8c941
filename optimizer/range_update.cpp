// One optimizer update over a range in any state format: see
// optimizer/range_update.h.
#include "optimizer/range_update.h"

#include <array>
#include <cstdint>

#include "core/error.h"
#include "optimizer/update_8bit.h"
#include "optimizer/update_bf16.h"

namespace zeroshard {

void optimizer_update_range(const OptimizerHyper& hyper, std::int64_t step, float grad_scale, const RangeUpdate& u) {
  const std::span<void* const> arrays = u.states.arrays;
  for (const UpdateRun& r : u.runs) {
    ZS_CHECK(r.begin <= r.end && r.end <= u.n, "optimizer update: run [{}, {}) outside the range of {}", r.begin,
             r.end, u.n);
  }
  const std::size_t ge = dtype_size(u.grad_dtype), ce = u.copy != nullptr ? dtype_size(u.copy_dtype) : 0;
  auto grads_at = [&](std::size_t i) { return static_cast<const std::byte*>(u.grads) + i * ge; };
  auto copy_at = [&](std::size_t i) { return u.copy != nullptr ? static_cast<std::byte*>(u.copy) + i * ce : nullptr; };
  switch (u.states.dtype) {
    case StateDtype::fp32: {
      std::array<float*, 4> st{};
      ZS_CHECK(arrays.size() <= st.size(), "optimizer update: {} fp32 state arrays", arrays.size());
      for (const UpdateRun& r : u.runs) {
        if (r.begin == r.end) continue;
        for (std::size_t k = 0; k < arrays.size(); ++k) st[k] = static_cast<float*>(arrays[k]) + r.begin;
        optimizer_update_mixed(hyper, r.lr, r.weight_decay, step, grad_scale, u.weights + r.begin, grads_at(r.begin),
                               u.grad_dtype, st.data(), copy_at(r.begin), u.copy_dtype, r.end - r.begin);
      }
      return;
    }
    case StateDtype::bf16: {
      ZS_CHECK(arrays.size() == 2, "optimizer update: bf16 states with {} arrays (Adam keeps 2)", arrays.size());
      for (const UpdateRun& r : u.runs) {
        if (r.begin == r.end) continue;
        optimizer_update_bf16(hyper, r.lr, r.weight_decay, step, grad_scale, u.weights + r.begin, grads_at(r.begin),
                              u.grad_dtype, static_cast<std::uint16_t*>(arrays[0]) + r.begin,
                              static_cast<std::uint16_t*>(arrays[1]) + r.begin, copy_at(r.begin), u.copy_dtype,
                              r.end - r.begin, u.states.first_index + r.begin);
      }
      return;
    }
    case StateDtype::q8: {
      ZS_CHECK(arrays.size() == 4, "optimizer update: 8-bit states with {} arrays (Adam keeps 2 x 2)", arrays.size());
      const kernels::Adam8bitState q8{.exp_avg_code = static_cast<std::uint8_t*>(arrays[0]),
                                      .exp_avg_absmax = static_cast<float*>(arrays[1]),
                                      .exp_avg_sq_code = static_cast<std::uint8_t*>(arrays[2]),
                                      .exp_avg_sq_absmax = static_cast<float*>(arrays[3])};
      optimizer_update_8bit(hyper, step, grad_scale, u.weights, u.grads, u.grad_dtype, q8, u.copy, u.copy_dtype, u.n,
                            u.states.block, u.runs);
      return;
    }
  }
  throw InvariantError(fmt::format("optimizer update: unknown state format {}", static_cast<int>(u.states.dtype)));
}

}  // namespace zeroshard
