// BufferPool: a caching pool for the transient full-unit buffers of stages
// 2 and 3 (gathered parameters, full gradients before reduce-scatter,
// reduce-scatter receive buffers).
//
// Buffers are allocated once (pre-faulted, see core/aligned_buffer.h) and
// kept for reuse after release, so a steady-state step never allocates. A
// released buffer is handed out again for any request of the same or a
// smaller size within 2x; the cache keeps every buffer it ever allocated
// (the peak working set), which is what the ledger's peak shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "runtime/memory_ledger.h"

namespace zeroshard {

class BufferPool;

/// A float buffer leased from a BufferPool; returns itself on destruction.
/// Move-only. Thread safety: as the pool.
class PoolLease {
 public:
  PoolLease() = default;
  PoolLease(PoolLease&& o) noexcept { *this = std::move(o); }
  PoolLease& operator=(PoolLease&& o) noexcept;
  PoolLease(const PoolLease&) = delete;
  PoolLease& operator=(const PoolLease&) = delete;
  ~PoolLease() { release(); }

  float* data() const { return buf_ ? buf_->data() : nullptr; }
  /// Elements requested (the underlying buffer may be larger).
  std::size_t size() const { return n_; }
  std::span<float> span() const { return {data(), n_}; }
  bool valid() const { return buf_ != nullptr || pool_ != nullptr; }
  /// Returns the buffer to the pool now.
  void release();

 private:
  friend class BufferPool;
  BufferPool* pool_ = nullptr;
  std::unique_ptr<AlignedBuffer<float>> buf_;
  std::size_t n_ = 0;
};

/// Caching pool of float buffers, accounted in a MemoryLedger under
/// MemCategory::unsharded (bytes leased now; the peak is the working set).
/// Not thread safe: used by the thread driving the engine.
class BufferPool {
 public:
  explicit BufferPool(MemoryLedger& ledger) : ledger_(ledger) {}
  /// Leases a buffer of n floats; zeroed when `zero` is true. Throws
  /// std::bad_alloc.
  PoolLease acquire(std::size_t n, bool zero);
  /// Bytes of all buffers the pool owns (leased or cached).
  std::uint64_t reserved_bytes() const { return reserved_; }
  /// Frees every cached (not leased) buffer.
  void trim();

 private:
  friend class PoolLease;
  void give_back(std::unique_ptr<AlignedBuffer<float>> buf, std::size_t n);
  MemoryLedger& ledger_;
  std::vector<std::unique_ptr<AlignedBuffer<float>>> free_;
  std::uint64_t reserved_ = 0;
};

}  // namespace zeroshard
