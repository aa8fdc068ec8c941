// HostAllocator: where HostPool gets its memory, and HostBlock, the owning
// type of one allocation.
//
// The pool asks an allocator for blocks and never calls malloc itself, so a
// CUDA build can hand out page-locked (pinned) memory by passing its own
// allocator (page-aligned memory registered with cudaHostRegister) without
// touching the pool.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

namespace zeroshard {

/// Blocks of at least this many bytes are 2 MiB aligned and sized and asked
/// for transparent huge pages (MADV_HUGEPAGE).
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// The size class a request of `bytes` is served from: a multiple of 4 KiB
/// below kHugePageBytes, a multiple of 2 MiB from there on; 0 for 0.
std::size_t host_block_bytes(std::size_t bytes);

/// Source of host memory. Implementations must be thread safe.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  /// Returns `bytes` bytes (a non-zero multiple of 4096) aligned to at least
  /// 4096, with every page already faulted in (first touch is ~12 us per
  /// 4 KiB page on these machines). Contents are unspecified. Throws
  /// std::bad_alloc.
  virtual void* allocate(std::size_t bytes) = 0;
  /// Frees a block from allocate() with the same `bytes`. Never throws.
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// Whether blocks are page-locked (pinned) memory.
  virtual bool pinned() const noexcept = 0;
  /// Short name for logs ("pageable", "cuda_pinned").
  virtual std::string_view name() const noexcept = 0;
};

/// Ordinary (pageable) memory: aligned_alloc below kHugePageBytes, a 2 MiB
/// aligned anonymous mapping with MADV_HUGEPAGE from there on; pre-faulted
/// by zero-filling. Thread safe.
class PageableHostAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  bool pinned() const noexcept override { return false; }
  std::string_view name() const noexcept override { return "pageable"; }
};

/// One allocation from a HostAllocator; frees it on destruction. Keeps the
/// allocator alive. Move-only. Thread safety: as a plain array.
class HostBlock {
 public:
  HostBlock() = default;
  /// Allocates `bytes` (a non-zero multiple of 4096) from `allocator`.
  /// Throws std::bad_alloc, or InvariantError naming the allocator (after
  /// freeing the block) when the block is not 4096-aligned.
  HostBlock(std::shared_ptr<HostAllocator> allocator, std::size_t bytes);
  HostBlock(HostBlock&& o) noexcept;
  HostBlock& operator=(HostBlock&& o) noexcept;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  ~HostBlock();

  std::byte* data() const { return data_; }
  /// Bytes of the block.
  std::size_t bytes() const { return bytes_; }
  std::span<std::byte> span() const { return {data_, bytes_}; }
  bool valid() const { return data_ != nullptr; }

 private:
  void reset() noexcept;
  std::shared_ptr<HostAllocator> allocator_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace zeroshard
