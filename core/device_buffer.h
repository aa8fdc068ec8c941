// Owning types for GPU memory: a device buffer, a pinned host buffer, and a
// caching device allocator whose live bytes are reported to a MemoryLedger
// under MemTier::device.
//
// [Note: caching device allocator]
// cudaMalloc and cudaFree are slow (cudaFree synchronises the device), so a
// training step must not call them. CachingDeviceAllocator is the simplest
// real form of PyTorch's CUDACachingAllocator: a request is rounded up to a
// multiple of 512 bytes; a released block goes to a free list keyed by
// (stream, size) instead of back to the driver; a later request on the same
// stream takes the smallest cached block that fits and wastes at most a
// quarter of the request, else calls cudaMalloc. If cudaMalloc runs out of
// memory, every cached block is freed and the call retried once. Blocks are
// never split or merged. A block is reused only on the stream it was
// allocated for, so stream order alone makes reuse safe; a caller that
// uses a block on another stream must make the allocating stream wait for
// that work (CudaEvent::make_wait) before releasing the block.
//
// Only CUDA-enabled builds compile this file's implementation; the header
// names no CUDA type (CUstream_st* is cudaStream_t).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

struct CUstream_st;

namespace zeroshard {

class MemoryLedger;
enum class MemCategory : int;

/// Where a CudaAllocation's memory lives: device memory (cudaMalloc /
/// cudaFree on the device current at construction) or page-locked host
/// memory (cudaMallocHost / cudaFreeHost), which asynchronous copies to and
/// from the device need to run at full PCIe/NVLink-C2C speed.
enum class CudaMemoryKind { device, pinned_host };

/// Owning CUDA allocation of `bytes()` bytes of the given kind, freed on
/// destruction (cudaFree waits for the device). Move-only. Contents are
/// uninitialised. Thread safety: as a plain pointer. Errors:
/// DeviceOutOfMemoryError / DeviceError (core/cuda_check.h).
template <CudaMemoryKind Kind>
class CudaAllocation {
 public:
  /// Empty: data() == nullptr, bytes() == 0.
  CudaAllocation() = default;
  /// Allocates `bytes` bytes (none for 0).
  explicit CudaAllocation(std::size_t bytes);
  /// Frees the memory. Never throws.
  ~CudaAllocation();
  CudaAllocation(CudaAllocation&& other) noexcept;
  CudaAllocation& operator=(CudaAllocation&& other) noexcept;
  CudaAllocation(const CudaAllocation&) = delete;
  CudaAllocation& operator=(const CudaAllocation&) = delete;

  /// Device or host pointer (nullptr when empty).
  void* data() const { return ptr_; }
  /// The pointer as T* (no conversion of the contents).
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  /// Size in bytes.
  std::size_t bytes() const { return bytes_; }
  /// True when no memory is held.
  bool empty() const { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Device memory (see CudaAllocation).
using DeviceBuffer = CudaAllocation<CudaMemoryKind::device>;
/// Page-locked host memory (see CudaAllocation).
using PinnedHostBuffer = CudaAllocation<CudaMemoryKind::pinned_host>;

/// Free and total memory of the current device in bytes (cudaMemGetInfo).
struct DeviceMemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// cudaMemGetInfo on the current device. Throws DeviceError.
/// Thread safety: safe from any thread.
DeviceMemoryInfo device_memory_info();

class CachingDeviceAllocator;

/// A block handed out by CachingDeviceAllocator; releasing it (release() or
/// the destructor) returns it to the allocator's cache, not to CUDA.
/// Move-only. May outlive the allocator object (the cache is shared).
/// Thread safety: as the allocator (one thread).
class DeviceBlock {
 public:
  /// Empty block.
  DeviceBlock() = default;
  /// Returns the block to the cache. Never throws.
  ~DeviceBlock() { release(); }
  DeviceBlock(DeviceBlock&& other) noexcept;
  DeviceBlock& operator=(DeviceBlock&& other) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;

  /// Device pointer (nullptr when empty), 512-byte aligned or better.
  void* data() const { return ptr_; }
  /// The pointer as T*.
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  /// Bytes requested.
  std::size_t bytes() const { return bytes_; }
  /// Bytes the block really holds (>= bytes(); what the ledger is told).
  std::size_t capacity() const { return capacity_; }
  /// True when no memory is held.
  bool empty() const { return ptr_ == nullptr; }
  /// Returns the block to the cache now; the handle becomes empty.
  void release() noexcept;

 private:
  friend class CachingDeviceAllocator;
  struct Pool;
  std::shared_ptr<Pool> pool_;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t capacity_ = 0;
  MemCategory category_{};
  CUstream_st* stream_ = nullptr;
};

/// Counters of a CachingDeviceAllocator, in bytes unless named otherwise.
struct DeviceAllocatorStats {
  std::uint64_t allocated_bytes = 0;  ///< capacity of the live blocks
  std::uint64_t cached_bytes = 0;     ///< capacity of the free, cached blocks
  std::uint64_t peak_reserved = 0;    ///< highest allocated + cached
  std::uint64_t cuda_mallocs = 0;     ///< cudaMalloc calls that succeeded
  std::uint64_t cache_hits = 0;       ///< requests served from the cache
  std::uint64_t live_blocks = 0;      ///< blocks handed out and not released
};

/// The caching allocator of [Note: caching device allocator], for the
/// device current at construction. Each live block's capacity is added to
/// `ledger` (if given) under (category, MemTier::device) when handed out
/// and removed when released; cached blocks are counted in stats() only.
/// Thread safety: not thread safe; use it and its blocks from one thread
/// (the ledger is not thread safe either). The ledger must outlive every
/// block. Errors: DeviceOutOfMemoryError when even an emptied cache cannot
/// satisfy a request; DeviceError for other CUDA failures; InvariantError
/// if called while another device is current.
class CachingDeviceAllocator {
 public:
  /// An allocator for the current device reporting to `ledger` (nullable).
  explicit CachingDeviceAllocator(MemoryLedger* ledger = nullptr);
  /// Frees the cached blocks; blocks still live keep the pool alive and go
  /// to cudaFree when released. Never throws.
  ~CachingDeviceAllocator();
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  /// A block of at least `bytes` bytes (empty for 0) for use in order on
  /// `stream` (null: legacy default stream), recorded in the ledger under
  /// `category`.
  DeviceBlock allocate(std::size_t bytes, MemCategory category, CUstream_st* stream = nullptr);
  /// cudaFree every cached (free) block, as torch.cuda.empty_cache().
  void empty_cache() noexcept;
  /// Current counters.
  DeviceAllocatorStats stats() const;
  /// The capacity a request of `bytes` is rounded up to (multiple of 512).
  static std::size_t round_size(std::size_t bytes);

 private:
  std::shared_ptr<DeviceBlock::Pool> pool_;
};

}  // namespace zeroshard
