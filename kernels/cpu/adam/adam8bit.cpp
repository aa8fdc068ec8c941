#include "kernels/cpu/fp_strict.h"  // first: see [Note: strict floating point in kernels]

#include "kernels/cpu/adam/adam8bit.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/adam/adam_element.h"
#include "kernels/cpu/convert.h"

namespace zeroshard::kernels {

namespace detail {

// Shared argument checks of adam8bit_update and its reference.
void check_adam8bit_args(const char* fn, const Adam8bitState& st, DType grad_dtype,
                         const void* param_copy, DType copy_dtype, std::size_t n,
                         std::size_t block) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  check_quant_block(block, fn);
  ZS_CHECK(n == 0 || (st.exp_avg_code != nullptr && st.exp_avg_absmax != nullptr &&
                      st.exp_avg_sq_code != nullptr && st.exp_avg_sq_absmax != nullptr),
           "{}: a state array of {} elements is null", fn, n);
}

}  // namespace detail

void adam8bit_update_reference(float* param, const void* grad, DType grad_dtype,
                               const Adam8bitState& st, void* param_copy, DType copy_dtype,
                               std::size_t n, std::size_t block, const AdamScalars& s) {
  detail::check_adam8bit_args("adam8bit_update_reference", st, grad_dtype, param_copy, copy_dtype,
                              n, block);
  std::vector<float> m(block), v(block);
  for (std::size_t lo = 0, b = 0; lo < n; lo += block, ++b) {
    const std::size_t len = std::min(block, n - lo);
    for (std::size_t j = 0; j < len; ++j) {
      const std::size_t i = lo + j;
      m[j] = dequantize_value(QuantMap::signed_dynamic, st.exp_avg_code[i], st.exp_avg_absmax[b]);
      v[j] = dequantize_value(QuantMap::unsigned_dynamic, st.exp_avg_sq_code[i],
                              st.exp_avg_sq_absmax[b]);
      detail::adam_element(param[i], load_as_float(grad, grad_dtype, i), m[j], v[j], s);
      if (param_copy != nullptr) store_from_float(param_copy, copy_dtype, i, param[i]);
    }
    st.exp_avg_absmax[b] = quant_block_absmax(m.data(), len);
    st.exp_avg_sq_absmax[b] = quant_block_absmax(v.data(), len);
    const float inv_m = quant_inverse_absmax(st.exp_avg_absmax[b]);
    const float inv_v = quant_inverse_absmax(st.exp_avg_sq_absmax[b]);
    for (std::size_t j = 0; j < len; ++j) {
      st.exp_avg_code[lo + j] = quantize_value(QuantMap::signed_dynamic, m[j], inv_m);
      st.exp_avg_sq_code[lo + j] = quantize_value(QuantMap::unsigned_dynamic, v[j], inv_v);
    }
  }
}

}  // namespace zeroshard::kernels
