// Argument checks shared by the multi-tensor optimizer entry points
// (kernels/cuda/optimizers/adam.cpp, sgd.cpp). Internal to kernels/cuda, host
// compiler only (uses ZS_CHECK; see [Note: .cu / .cpp split] in
// kernels/cuda/launchers.h).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"

namespace zeroshard::kernels::gpu::detail {

/// Checks a multi-tensor optimizer call named `fn` and returns whether
/// param_copy is written: grad_dtype must be f32, bf16 or f16; every tensor
/// with n > 0 must satisfy has_pointers(t) (its required device pointers are
/// not null; `pointer_rule` is appended to that error, e.g. what momentum
/// needs); param_copy must be given to all non-empty tensors or none, and
/// when given copy_dtype must be bf16 or f16. Tensor: has n and param_copy.
/// Throws InvariantError naming `fn` and the first rule broken.
template <class Tensor, class HasPointers>
bool check_optimizer_tensors(std::string_view fn, std::span<const Tensor> tensors, DType grad_dtype,
                             DType copy_dtype, HasPointers has_pointers,
                             std::string_view pointer_rule = {}) {
  ZS_CHECK(grad_dtype == DType::f32 || grad_dtype == DType::bf16 || grad_dtype == DType::f16,
           "{}: gradient dtype {} is not f32, bf16 or f16", fn, dtype_name(grad_dtype));
  std::size_t with_copy = 0;
  std::size_t nonempty = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    ZS_CHECK(t.n == 0 || has_pointers(t), "{}: tensor {} of {} elements has a null pointer{}", fn, k,
             t.n, pointer_rule);
    if (t.n == 0) continue;
    ++nonempty;
    if (t.param_copy != nullptr) ++with_copy;
  }
  ZS_CHECK(with_copy == 0 || with_copy == nonempty,
           "{}: {} of {} non-empty tensors have param_copy; give it to all or none", fn, with_copy,
           nonempty);
  const bool copy = with_copy != 0;
  ZS_CHECK(!copy || copy_dtype == DType::bf16 || copy_dtype == DType::f16,
           "{}: low-precision param dtype {} is not bf16 or f16", fn, dtype_name(copy_dtype));
  return copy;
}

}  // namespace zeroshard::kernels::gpu::detail
