// The multi-threaded driver shared by the optimizer kernels with one state
// array per element (SGD's momentum buffer, Lion's exp_avg, Adagrad's sum):
// splits [0, n) over kernel_pool() and hands each piece's offset arrays to
// the per-target range kernel its _simd.cpp chose (HWY_DYNAMIC_DISPATCH).
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "kernels/cpu/thread_pool.h"

namespace zeroshard::kernels {

/// Calls kernel(param + b, grad + b, grad_dtype, state + b (or nullptr),
/// copy + b (or nullptr), copy_dtype, e - b, s) for the pieces [b, e) of
/// [0, n) that parallel_for_elements makes; grad and param_copy advance by
/// their dtypes' sizes (elements). `state` and `param_copy` may be null.
/// The caller has validated the dtypes. Nothing is called for n == 0.
/// Thread safety: the pieces are disjoint; the arrays must not be touched
/// by anyone else meanwhile.
template <class Kernel, class Scalars>
void one_state_update(Kernel kernel, float* param, const void* grad, DType grad_dtype, float* state,
                      void* param_copy, DType copy_dtype, std::size_t n, const Scalars& s) {
  if (n == 0) return;
  const std::size_t gs = dtype_size(grad_dtype), cs = dtype_size(copy_dtype);
  parallel_for_elements(n, [&](std::size_t b, std::size_t e) {
    void* copy = param_copy == nullptr ? nullptr : static_cast<unsigned char*>(param_copy) + b * cs;
    kernel(param + b, static_cast<const unsigned char*>(grad) + b * gs, grad_dtype,
           state == nullptr ? nullptr : state + b, copy, copy_dtype, e - b, s);
  });
}

}  // namespace zeroshard::kernels
