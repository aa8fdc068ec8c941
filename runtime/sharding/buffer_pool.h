// BufferPool: a caching pool for the transient buffers of the engine (stage 3
// gathered parameters, full gradients before a reduce-scatter, receive and
// conversion buffers of reductions).
//
// Buffers live in the engine's compute device memory (runtime/sharding/device_ops.h:
// host memory, pre-faulted, or GPU memory). They are allocated once and
// kept for reuse after release, so a steady-state step never allocates. A
// released buffer is handed out again for any request of the same or a
// smaller size within 2x; the cache keeps every buffer it allocated (the
// peak working set, which is what the ledger's peak shows).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/memory_ledger.h"
#include "runtime/sharding/device_ops.h"

namespace zeroshard {

class BufferPool;

/// A buffer of `numel` elements of `dtype` leased from a BufferPool; it
/// returns itself to the pool on destruction. Move-only. Thread safety: as
/// the pool.
class PoolLease {
 public:
  PoolLease() = default;
  PoolLease(PoolLease&& o) noexcept { *this = std::move(o); }
  PoolLease& operator=(PoolLease&& o) noexcept;
  PoolLease(const PoolLease&) = delete;
  PoolLease& operator=(const PoolLease&) = delete;
  ~PoolLease() { release(); }

  /// Element 0, in the pool's DeviceOps memory space (nullptr for 0 elements).
  void* data() const { return buf_.data(); }
  /// Address of element i.
  void* at(std::size_t i) const { return static_cast<std::byte*>(data()) + i * dtype_size(dtype_); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data());
  }
  /// Elements requested (the underlying buffer may be larger).
  std::size_t numel() const { return n_; }
  DType dtype() const { return dtype_; }
  /// True between acquire() and release() (also for 0 elements).
  bool valid() const { return pool_ != nullptr; }
  /// Returns the buffer to the pool now.
  void release();

 private:
  friend class BufferPool;
  BufferPool* pool_ = nullptr;
  DeviceArray buf_;
  std::size_t n_ = 0;
  DType dtype_ = DType::f32;
  MemCategory category_ = MemCategory::unsharded;
};

/// Caching pool of byte buffers from a DeviceOps, accounted in a MemoryLedger under
/// the category each lease names (MemCategory::unsharded unless told:
/// bytes leased now; the peak is the working set).
/// Not thread safe: used by the thread driving the engine.
class BufferPool {
 public:
  /// `ledger` and `ops` must outlive the pool.
  BufferPool(MemoryLedger& ledger, DeviceOps& ops) : ledger_(ledger), ops_(ops) {}
  /// Leases numel elements of dtype, accounted under `category` on the
  /// device tier while leased; zeroed when `zero` is true. Throws what
  /// DeviceOps::allocate throws.
  PoolLease acquire(std::size_t numel, DType dtype, bool zero,
                    MemCategory category = MemCategory::unsharded);
  /// Bytes of all buffers the pool owns (leased or cached).
  std::uint64_t reserved_bytes() const { return reserved_; }
  /// Frees every cached (not leased) buffer.
  void trim();

 private:
  friend class PoolLease;
  void give_back(DeviceArray buf, std::uint64_t bytes, MemCategory category);
  MemoryLedger& ledger_;
  DeviceOps& ops_;
  std::vector<DeviceArray> free_;
  std::uint64_t reserved_ = 0;
};

}  // namespace zeroshard
