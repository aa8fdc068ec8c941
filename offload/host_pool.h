// HostPool: a caching pool of aligned, pre-faulted host buffers for the
// offload tiers (staging buffers for swap in/out, host-resident shards),
// accounted in a MemoryLedger under MemTier::host.
//
// Like a caching allocator: a released buffer goes back to the pool and is
// handed out again for a later request of the same size class or one up to
// 2x smaller, so a steady-state training step never allocates (allocation
// and first touch are expensive here, see core/aligned_buffer.h). Memory
// comes from a HostAllocator, so a CUDA build can supply pinned memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "offload/host_allocator.h"
#include "core/memory_ledger.h"

namespace zeroshard {

struct HostPoolState;

/// A buffer leased from a HostPool: at least size() bytes at a 4 KiB
/// aligned address, capacity() usable (a multiple of 4096, so a request
/// padded for O_DIRECT fits). Contents are unspecified (a reused buffer
/// keeps old bytes). Returns itself to the pool on destruction or
/// release(). Move-only. May outlive the pool (its memory is then freed on
/// release). Thread safety: as a plain array; release may run on any
/// thread.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept = default;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { release(); }

  std::byte* data() const { return block_.data(); }
  /// Bytes requested.
  std::size_t size() const { return size_; }
  /// Bytes usable (>= size(), a multiple of 4096).
  std::size_t capacity() const { return block_.bytes(); }
  /// The requested bytes.
  std::span<std::byte> span() const { return {block_.data(), size_}; }
  /// All usable bytes, e.g. for a read of a file padded to 4 KiB.
  std::span<std::byte> capacity_span() const { return block_.span(); }
  /// The memory as an array of T (size() / sizeof(T) elements).
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(block_.data());
  }
  MemCategory category() const { return category_; }
  /// True when the buffer holds memory (false after release or for 0 bytes).
  bool valid() const { return block_.valid(); }
  /// Returns the buffer to its pool now. No-op when invalid.
  void release() noexcept;

 private:
  friend class HostPool;
  std::shared_ptr<HostPoolState> pool_;
  HostBlock block_;
  std::size_t size_ = 0;
  MemCategory category_ = MemCategory::unsharded;
};

/// Capacity of a cache entry: a HostPool's (capacity, block) pair or a
/// HostPoolSizes' capacity.
inline std::size_t host_cache_capacity(std::size_t capacity) { return capacity; }
template <class Block>
std::size_t host_cache_capacity(const std::pair<const std::size_t, Block>& entry) {
  return entry.first;
}

/// The reuse rule of HostPool::acquire, shared with HostPoolSizes: in
/// `cache` (an ordered multi-container keyed by capacity), the smallest
/// cached buffer of capacity >= need (need = host_block_bytes(bytes)) if
/// that capacity is at most 2 x need; else cache.end() (allocate `need`
/// bytes). Pure.
template <class Cache>
auto host_pool_pick(Cache& cache, std::size_t need) {
  auto it = cache.lower_bound(need);
  if (it != cache.end() && host_cache_capacity(*it) <= 2 * need) return it;
  return cache.end();
}

/// A HostPool lease as HostPoolSizes models it: bytes asked for, capacity
/// leased (0: none, for 0 bytes), category. Plain value.
struct HostLeaseSize {
  std::size_t bytes = 0;
  std::size_t capacity = 0;
  MemCategory category = MemCategory::unsharded;
  bool valid() const { return capacity > 0; }
};

/// A HostPool without memory: the same reuse rule (host_pool_pick) and the
/// same ledger records (capacity, of which capacity - bytes padding, on
/// MemTier::host), over capacities only. The memory estimate replays a
/// step's host staging with it (runtime/plan/memory_replay.h). Assumes the
/// allocator never fails (HostPool trims its cache and retries then).
/// Not thread safe.
class HostPoolSizes {
 public:
  /// `ledger` must outlive the model.
  explicit HostPoolSizes(MemoryLedger& ledger) : ledger_(ledger) {}
  /// As HostPool::acquire(bytes, category).
  HostLeaseSize acquire(std::size_t bytes, MemCategory category);
  /// As HostBuffer::release() of `lease`; resets it. No-op when invalid.
  void release(HostLeaseSize& lease);
  /// Bytes of all buffers the model owns (leased or cached).
  std::uint64_t reserved_bytes() const { return reserved_; }

 private:
  MemoryLedger& ledger_;
  std::multiset<std::size_t> free_;
  std::uint64_t reserved_ = 0;
};

/// The caching pool. Thread safety: every member is serialised by an
/// internal mutex (the ledger has its own).
class HostPool {
 public:
  /// `ledger` must outlive the pool. `allocator` defaults to pageable
  /// memory.
  explicit HostPool(MemoryLedger& ledger,
                    std::shared_ptr<HostAllocator> allocator = std::make_shared<PageableHostAllocator>());
  /// Frees the cached buffers. Buffers still leased stay valid and are
  /// freed when released; the ledger is no longer updated for them.
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  /// Leases a buffer of `bytes` bytes, recorded in the ledger as
  /// (category, MemTier::host): capacity() bytes of which capacity() - bytes
  /// padding. Reuses the smallest cached buffer of capacity in
  /// [host_block_bytes(bytes), 2 x that]; otherwise allocates (after
  /// freeing the cache and retrying once if the allocator fails). 0 bytes
  /// gives an invalid, empty buffer. Throws std::bad_alloc.
  HostBuffer acquire(std::size_t bytes, MemCategory category);

  /// Allocates `count` buffers of the size class of `bytes` into the cache
  /// now, so that later acquires of that size do not allocate. Throws
  /// std::bad_alloc.
  void reserve(std::size_t bytes, std::size_t count);

  /// Frees every cached (not leased) buffer.
  void trim();

  /// Bytes of all buffers the pool owns, leased or cached.
  std::uint64_t reserved_bytes() const;
  /// Bytes (capacity) of the buffers leased now.
  std::uint64_t leased_bytes() const;
  /// Number of cached (free) buffers.
  std::size_t cached_count() const;
  /// Every buffer the pool owns (leased or cached), for
  /// IoEngine::register_buffers. Valid until trim() or destruction.
  std::vector<std::span<std::byte>> blocks() const;
  /// The allocator (e.g. to ask whether memory is pinned).
  const HostAllocator& allocator() const;

 private:
  std::shared_ptr<HostPoolState> state_;
};

}  // namespace zeroshard
