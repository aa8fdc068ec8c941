// The launch scaffolding the multi-tensor optimizer kernels (adam.cu,
// sgd.cu) share: dispatch on the gradient dtype and on the optional
// low-precision parameter copy, packing of each tensor's device pointers
// into multi_tensor_apply's TensorPtrs. Internal to kernels/cuda (.cu files
// only; see [Note: .cu / .cpp split] in kernels/cuda/launchers.h).
#pragma once

#include <array>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/multi_tensor_apply.cuh"

namespace zeroshard::kernels::gpu::detail {

/// Launches Op<G, kCopy, L> over `tensors`, a multi_tensor_apply Op over
/// kSlots pointer slots plus, when kCopy, slot kSlots for param_copy.
/// slots(t) gives a tensor's kSlots device pointers in the Op's slot order;
/// t.param_copy and t.n are read directly. Returns the first launch error.
template <template <DType, bool, DType> class Op, int kSlots, DType G, bool kCopy, DType L,
          class Tensor, class Scalars, class Slots>
cudaError_t launch_optimizer_typed(std::span<const Tensor> tensors, const Scalars& s,
                                   cudaStream_t stream, Slots slots) {
  constexpr int D = kCopy ? kSlots + 1 : kSlots;
  std::vector<TensorPtrs<D>> ptrs;
  ptrs.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    TensorPtrs<D> p;
    const std::array<void*, kSlots> a = slots(t);
    for (int k = 0; k < kSlots; ++k) p.ptr[k] = a[static_cast<std::size_t>(k)];
    if constexpr (kCopy) p.ptr[kSlots] = t.param_copy;
    p.n = t.n;
    ptrs.push_back(p);
  }
  return multi_tensor_apply<D>(std::span<const TensorPtrs<D>>(ptrs), Op<G, kCopy, L>{s}, stream);
}

/// launch_optimizer_typed for gradient dtype G, dispatched on the copy.
template <template <DType, bool, DType> class Op, int kSlots, DType G, class Tensor, class Scalars,
          class Slots>
cudaError_t launch_optimizer_grad(std::span<const Tensor> tensors, const Scalars& s, bool copy,
                                  DType copy_dtype, cudaStream_t stream, Slots slots) {
  if (!copy) {
    return launch_optimizer_typed<Op, kSlots, G, false, DType::f32>(tensors, s, stream, slots);
  }
  if (copy_dtype == DType::bf16) {
    return launch_optimizer_typed<Op, kSlots, G, true, DType::bf16>(tensors, s, stream, slots);
  }
  return launch_optimizer_typed<Op, kSlots, G, true, DType::f16>(tensors, s, stream, slots);
}

/// The launcher of a multi-tensor optimizer: Op<G, kCopy, L> for gradient
/// dtype grad_dtype (f32, bf16 or f16) and, when copy, param_copy written
/// in copy_dtype (bf16 or f16); see launch_optimizer_typed for Op, kSlots
/// and slots. Arguments are trusted (the .cpp wrappers check them).
/// Returns the first launch error.
template <template <DType, bool, DType> class Op, int kSlots, class Tensor, class Scalars,
          class Slots>
cudaError_t launch_optimizer(std::span<const Tensor> tensors, const Scalars& s, DType grad_dtype,
                             bool copy, DType copy_dtype, cudaStream_t stream, Slots slots) {
  switch (grad_dtype) {
    case DType::bf16:
      return launch_optimizer_grad<Op, kSlots, DType::bf16>(tensors, s, copy, copy_dtype, stream, slots);
    case DType::f16:
      return launch_optimizer_grad<Op, kSlots, DType::f16>(tensors, s, copy, copy_dtype, stream, slots);
    default:
      return launch_optimizer_grad<Op, kSlots, DType::f32>(tensors, s, copy, copy_dtype, stream, slots);
  }
}

}  // namespace zeroshard::kernels::gpu::detail
