// Device and pinned buffers and the caching device allocator; see
// core/device_buffer.h and [Note: caching device allocator] there.
#include "core/device_buffer.h"

#include <cuda_runtime_api.h>

#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/memory_ledger.h"

namespace zeroshard {

// ---- CudaAllocation --------------------------------------------------------

template <CudaMemoryKind Kind>
CudaAllocation<Kind>::CudaAllocation(std::size_t bytes) {
  if (bytes == 0) return;
  if constexpr (Kind == CudaMemoryKind::device) {
    ZS_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  } else {
    ZS_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
  }
  bytes_ = bytes;
}

template <CudaMemoryKind Kind>
CudaAllocation<Kind>::~CudaAllocation() {
  if (ptr_ == nullptr) return;
  if constexpr (Kind == CudaMemoryKind::device) {
    cudaFree(ptr_);
  } else {
    cudaFreeHost(ptr_);
  }
}

template <CudaMemoryKind Kind>
CudaAllocation<Kind>::CudaAllocation(CudaAllocation&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

template <CudaMemoryKind Kind>
CudaAllocation<Kind>& CudaAllocation<Kind>::operator=(CudaAllocation&& other) noexcept {
  if (this != &other) {
    CudaAllocation old(std::move(*this));
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

template class CudaAllocation<CudaMemoryKind::device>;
template class CudaAllocation<CudaMemoryKind::pinned_host>;

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo info;
  ZS_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

// ---- CachingDeviceAllocator ------------------------------------------------

namespace {

constexpr std::size_t kMinBlock = 512;

}  // namespace

// The shared state of an allocator and its blocks. Free lists are one
// ordered map keyed by (stream, capacity), so lower_bound finds the
// smallest cached block of that stream that fits.
struct DeviceBlock::Pool {
  using Key = std::pair<CUstream_st*, std::size_t>;

  MemoryLedger* ledger = nullptr;
  int device = -1;
  std::multimap<Key, void*> free_blocks;
  DeviceAllocatorStats stats;

  ~Pool() { free_cached(); }

  void free_cached() noexcept {
    for (auto& [key, ptr] : free_blocks) cudaFree(ptr);
    free_blocks.clear();
    stats.cached_bytes = 0;
  }

  void note_reserved() {
    const std::uint64_t reserved = stats.allocated_bytes + stats.cached_bytes;
    if (reserved > stats.peak_reserved) stats.peak_reserved = reserved;
  }

  // Takes a cached block of `stream` with capacity in [capacity,
  // capacity * 5/4], or returns nullptr.
  void* take_cached(CUstream_st* stream, std::size_t capacity, std::size_t& got) {
    auto it = free_blocks.lower_bound(Key{stream, capacity});
    if (it == free_blocks.end() || it->first.first != stream) return nullptr;
    if (it->first.second > capacity + capacity / 4) return nullptr;
    got = it->first.second;
    void* ptr = it->second;
    free_blocks.erase(it);
    stats.cached_bytes -= got;
    return ptr;
  }

  void* malloc_with_retry(std::size_t capacity) {
    void* ptr = nullptr;
    cudaError_t rc = cudaMalloc(&ptr, capacity);
    if (rc == cudaErrorMemoryAllocation && !free_blocks.empty()) {
      cudaGetLastError();
      free_cached();
      rc = cudaMalloc(&ptr, capacity);
    }
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_b = 0;
      std::size_t total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw DeviceOutOfMemoryError(fmt::format(
          "CachingDeviceAllocator: cudaMalloc of {} on CUDA device {} failed after emptying "
          "the cache; {} held in {} live blocks, device free {} of {}; lower the memory "
          "need (ZeRO stage, bucket sizes, offload tier) or the micro-batch",
          format_bytes(capacity), device, format_bytes(stats.allocated_bytes),
          stats.live_blocks, format_bytes(free_b), format_bytes(total_b)));
    }
    ZS_CUDA_CHECK(rc);
    ++stats.cuda_mallocs;
    return ptr;
  }

  void give_back(void* ptr, std::size_t capacity, MemCategory category,
                 CUstream_st* stream) noexcept {
    if (ledger != nullptr) ledger->remove(category, MemTier::device, capacity);
    stats.allocated_bytes -= capacity;
    --stats.live_blocks;
    try {
      free_blocks.emplace(Key{stream, capacity}, ptr);
      stats.cached_bytes += capacity;
    } catch (...) {
      cudaFree(ptr);  // the cache could not grow; hand the block to CUDA instead
    }
  }
};

DeviceBlock::DeviceBlock(DeviceBlock&& other) noexcept
    : pool_(std::move(other.pool_)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      capacity_(std::exchange(other.capacity_, 0)),
      category_(other.category_),
      stream_(other.stream_) {}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    category_ = other.category_;
    stream_ = other.stream_;
  }
  return *this;
}

void DeviceBlock::release() noexcept {
  if (ptr_ != nullptr && pool_) pool_->give_back(ptr_, capacity_, category_, stream_);
  pool_.reset();
  ptr_ = nullptr;
  bytes_ = 0;
  capacity_ = 0;
}

CachingDeviceAllocator::CachingDeviceAllocator(MemoryLedger* ledger)
    : pool_(std::make_shared<DeviceBlock::Pool>()) {
  pool_->ledger = ledger;
  ZS_CUDA_CHECK(cudaGetDevice(&pool_->device));
}

CachingDeviceAllocator::~CachingDeviceAllocator() { empty_cache(); }

std::size_t CachingDeviceAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) return 0;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

DeviceBlock CachingDeviceAllocator::allocate(std::size_t bytes, MemCategory category,
                                             CUstream_st* stream) {
  DeviceBlock block;
  if (bytes == 0) return block;
  int device = -1;
  ZS_CUDA_CHECK(cudaGetDevice(&device));
  ZS_CHECK(device == pool_->device,
           "CachingDeviceAllocator for CUDA device {} called while device {} is current",
           pool_->device, device);
  DeviceBlock::Pool& pool = *pool_;
  const std::size_t wanted = round_size(bytes);
  std::size_t capacity = 0;
  void* ptr = pool.take_cached(stream, wanted, capacity);
  if (ptr != nullptr) {
    ++pool.stats.cache_hits;
  } else {
    ptr = pool.malloc_with_retry(wanted);
    capacity = wanted;
  }
  if (pool.ledger != nullptr) pool.ledger->add(category, MemTier::device, capacity);
  pool.stats.allocated_bytes += capacity;
  ++pool.stats.live_blocks;
  pool.note_reserved();
  block.pool_ = pool_;
  block.ptr_ = ptr;
  block.bytes_ = bytes;
  block.capacity_ = capacity;
  block.category_ = category;
  block.stream_ = stream;
  return block;
}

void CachingDeviceAllocator::empty_cache() noexcept { pool_->free_cached(); }

DeviceAllocatorStats CachingDeviceAllocator::stats() const { return pool_->stats; }

}  // namespace zeroshard
