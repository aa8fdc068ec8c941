// The multi-threaded driver shared by the optimizer kernels over contiguous
// arrays (Adam's two fp32 states, SGD's momentum buffer, Lion's exp_avg,
// Adagrad's sum): checks the dtypes, splits [0, n) over kernel_pool() and
// hands each piece's offset arrays to the per-target range kernel its
// _simd.cpp chose (HWY_DYNAMIC_DISPATCH).
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/thread_pool.h"

namespace zeroshard::kernels {

/// Calls kernel(param + b, grad + b, grad_dtype, states + b..., copy + b,
/// copy_dtype, e - b, s) for the pieces [b, e) of [0, n) that
/// parallel_for_elements makes; grad and param_copy advance by their
/// dtypes' sizes (elements), a null state or param_copy stays null. First
/// throws InvariantError unless grad_dtype is f32, bf16 or f16 and (with a
/// param_copy) copy_dtype bf16 or f16. Nothing is called for n == 0.
/// Thread safety: the pieces are disjoint; the arrays must not be touched
/// by anyone else meanwhile.
template <class Kernel, class Scalars, class... State>
void parallel_update(Kernel kernel, float* param, const void* grad, DType grad_dtype,
                     void* param_copy, DType copy_dtype, std::size_t n, const Scalars& s,
                     State*... states) {
  check_kernel_dtype(grad_dtype, "grad");
  if (param_copy != nullptr) check_copy_dtype(copy_dtype);
  if (n == 0) return;
  const std::size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + b * cs;
    kernel(param + b, static_cast<const unsigned char*>(grad) + b * gs, grad_dtype,
           (states == nullptr ? nullptr : states + b)..., copy, copy_dtype, e - b, s);
  });
}

}  // namespace zeroshard::kernels
