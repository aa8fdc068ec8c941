// Tensors over memory the Engine owns: a storage whose data pointer
// zeroshard sets (and resets) without libtorch allocating or freeing
// anything, as torch::from_blob's but re-pointable ([Note: libtorch
// parameters over the engine], libtorch/shard.h). Header-only.
#pragma once

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Storage.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include "core/dtype.h"
#include "core/error.h"

namespace zeroshard::torch {

/// libtorch's scalar type of an engine dtype (f32, bf16, f16; f64).
/// Throws InvariantError for u8, which no parameter uses.
inline c10::ScalarType scalar_type_of(DType t) {
  switch (t) {
    case DType::f32: return c10::ScalarType::Float;
    case DType::bf16: return c10::ScalarType::BFloat16;
    case DType::f16: return c10::ScalarType::Half;
    case DType::f64: return c10::ScalarType::Double;
    case DType::u8: break;
  }
  throw InvariantError("zeroshard::torch: no parameter tensor of dtype u8");
}

/// A cpu storage of `numel` elements of `type` with no memory: its data
/// pointer is null until point_storage() sets it. Not resizable.
inline c10::intrusive_ptr<c10::StorageImpl> make_storage(std::int64_t numel, c10::ScalarType type) {
  const auto bytes = static_cast<std::size_t>(numel) * c10::elementSize(type);
  return c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), bytes,
                                               c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU)),
                                               /*allocator=*/nullptr, /*resizable=*/false);
}

/// Points `storage` at `data` (not owned; null: no memory, which no tensor
/// of non-zero size on it may then read). Every tensor on the storage,
/// autograd's saved ones included, sees the new memory.
inline void point_storage(c10::StorageImpl& storage, void* data) {
  storage.set_data_ptr_noswap(c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)));
}

/// A contiguous cpu tensor of `type` and `sizes` over all of `storage`
/// (no autograd history, requires_grad false).
inline at::Tensor tensor_on(const c10::intrusive_ptr<c10::StorageImpl>& storage, c10::ScalarType type,
                            c10::IntArrayRef sizes) {
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), c10::scalarTypeToTypeMeta(type));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace zeroshard::torch
