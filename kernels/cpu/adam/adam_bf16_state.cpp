#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/adam/adam_bf16_state.h"

#include "core/error.h"
#include "kernels/cpu/adam/adam_element.h"
#include "kernels/cpu/adam/stochastic_round.h"
#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

namespace detail {

void check_adam_bf16_state_args(const char* fn, const void* exp_avg, const void* exp_avg_sq,
                                DType grad_dtype, const void* param_copy, DType copy_dtype,
                                std::size_t n) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  ZS_CHECK(n == 0 || (exp_avg != nullptr && exp_avg_sq != nullptr),
           "{}: a bf16 state array of {} elements is null", fn, n);
}

}  // namespace detail

void adam_bf16_state_update_reference(float* param, const void* grad, DType grad_dtype,
                                      std::uint16_t* exp_avg, std::uint16_t* exp_avg_sq,
                                      void* param_copy, DType copy_dtype, std::size_t n,
                                      const AdamScalars& s, const Bf16StateRounding& r) {
  detail::check_adam_bf16_state_args("adam_bf16_state_update_reference", exp_avg, exp_avg_sq,
                                     grad_dtype, param_copy, copy_dtype, n);
  const StochasticKey key = stochastic_key(r.seed, r.step);
  for (std::size_t i = 0; i < n; ++i) {
    float m = bf16_to_float(exp_avg[i]);
    float v = bf16_to_float(exp_avg_sq[i]);
    detail::adam_element(param[i], load_as_float(grad, grad_dtype, i), m, v, s);
    if (param_copy != nullptr) store_from_float(param_copy, copy_dtype, i, param[i]);
    if (r.mode == StateRounding::stochastic) {
      const std::uint32_t bits = stochastic_bits(key, r.first_index + i);
      exp_avg[i] = float_to_bf16_stochastic(m, bits & 0xffffu);
      exp_avg_sq[i] = float_to_bf16_stochastic(v, bits >> 16);
    } else {
      exp_avg[i] = float_to_bf16(m);
      exp_avg_sq[i] = float_to_bf16(v);
    }
  }
}

}  // namespace zeroshard::kernels
