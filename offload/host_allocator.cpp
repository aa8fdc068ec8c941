#include "offload/host_allocator.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <sys/mman.h>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::size_t host_block_bytes(std::size_t bytes) {
  if (bytes == 0) return 0;
  return bytes < kHugePageBytes ? round_up(bytes, kPage) : round_up(bytes, kHugePageBytes);
}

void* PageableHostAllocator::allocate(std::size_t bytes) {
  ZS_CHECK(bytes != 0 && bytes % kPage == 0, "host allocation of {} bytes is not a multiple of 4096", bytes);
  void* p = nullptr;
  if (bytes < kHugePageBytes) {
    p = std::aligned_alloc(kPage, bytes);
    if (p == nullptr) throw std::bad_alloc();
  } else {
    // Over-map by one huge page, then unmap the unaligned head and the tail.
    const std::size_t span = bytes + kHugePageBytes;
    void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = round_up(base, kHugePageBytes);
    if (aligned > base) ::munmap(raw, aligned - base);
    const std::uintptr_t end = aligned + bytes;
    if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
    p = reinterpret_cast<void*>(aligned);
    ::madvise(p, bytes, MADV_HUGEPAGE);
  }
  std::memset(p, 0, bytes);  // pre-fault every page now, not in the training step
  return p;
}

void PageableHostAllocator::deallocate(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    std::free(p);
  } else {
    ::munmap(p, bytes);
  }
}

HostBlock::HostBlock(std::shared_ptr<HostAllocator> allocator, std::size_t bytes)
    : allocator_(std::move(allocator)), bytes_(bytes) {
  data_ = static_cast<std::byte*>(allocator_->allocate(bytes));
  // The contract O_DIRECT swap I/O relies on; checked here so that an
  // allocator breaking it is named at the source, not at the first write.
  if (reinterpret_cast<std::uintptr_t>(data_) % kPage != 0) {
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(data_);
    allocator_->deallocate(std::exchange(data_, nullptr), bytes);
    throw InvariantError(fmt::format("host allocator \"{}\" returned {} bytes at {:#x}, not 4096-aligned",
                                     allocator_->name(), bytes, at));
  }
}

HostBlock::HostBlock(HostBlock&& o) noexcept
    : allocator_(std::move(o.allocator_)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

HostBlock& HostBlock::operator=(HostBlock&& o) noexcept {
  if (this != &o) {
    reset();
    allocator_ = std::move(o.allocator_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

HostBlock::~HostBlock() { reset(); }

void HostBlock::reset() noexcept {
  if (data_ != nullptr) allocator_->deallocate(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace zeroshard
