// AlignedBuffer: the owning type for large host arrays.
//
// Page faults are expensive on these machines (about 12 us per fresh 4 KiB
// page), so every large buffer is allocated once, asked for transparent huge
// pages, pre-faulted by zero-filling it, and reused across steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <type_traits>

#include <sys/mman.h>

#include "core/dtype.h"

namespace zeroshard {

/// Alignment of every AlignedBuffer: 4 KiB, which also satisfies O_DIRECT.
inline constexpr std::size_t kBufferAlignment = 4096;

/// Owning, zero-initialised, 4 KiB-aligned array of n trivially copyable T.
/// Move-only. Thread safety: as a plain array. Throws std::bad_alloc.
template <class T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) : n_(n) {
    if (n == 0) return;
    const std::size_t bytes = round_up(n * sizeof(T));
    void* p = std::aligned_alloc(kBufferAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    if (bytes >= (std::size_t{2} << 20)) ::madvise(p, bytes, MADV_HUGEPAGE);
    std::memset(p, 0, bytes);  // pre-fault every page now, not in the step
    data_.reset(static_cast<T*>(p));
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  /// Elements (not bytes).
  std::size_t size() const { return n_; }
  std::size_t bytes() const { return n_ * sizeof(T); }
  bool empty() const { return n_ == 0; }
  T& operator[](std::size_t i) { return data_.get()[i]; }
  const T& operator[](std::size_t i) const { return data_.get()[i]; }
  std::span<T> span() { return {data(), n_}; }
  std::span<const T> span() const { return {data(), n_}; }
  /// Sets every element to zero bits.
  void zero() {
    if (n_ != 0) std::memset(data_.get(), 0, n_ * sizeof(T));
  }

 private:
  static std::size_t round_up(std::size_t b) {
    return (b + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  std::size_t n_ = 0;
};

/// An AlignedBuffer of `numel` elements of a run-time DType (fp32, bf16,
/// fp16 or f64). Move-only, zero-initialised. Throws std::bad_alloc.
class TypedBuffer {
 public:
  TypedBuffer() = default;
  TypedBuffer(std::size_t numel, DType dtype)
      : mem_(numel * dtype_size(dtype)), dtype_(dtype), numel_(numel) {}

  void* data() { return mem_.data(); }
  const void* data() const { return mem_.data(); }
  /// Address of element i.
  void* at(std::size_t i) { return mem_.data() + i * dtype_size(dtype_); }
  const void* at(std::size_t i) const { return mem_.data() + i * dtype_size(dtype_); }
  /// Typed pointer; T must be the storage type of dtype() (not checked).
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(mem_.data());
  }
  DType dtype() const { return dtype_; }
  /// Elements (not bytes).
  std::size_t numel() const { return numel_; }
  std::size_t bytes() const { return mem_.size(); }
  bool empty() const { return numel_ == 0; }
  void zero() { mem_.zero(); }

 private:
  AlignedBuffer<std::byte> mem_;
  DType dtype_ = DType::f32;
  std::size_t numel_ = 0;
};

}  // namespace zeroshard
