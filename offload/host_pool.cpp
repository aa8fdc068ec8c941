#include "offload/host_pool.h"

#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace zeroshard {

/// Shared by the pool and its leases, so that a lease may outlive the pool.
struct HostPoolState {
  std::mutex mu;
  std::shared_ptr<HostAllocator> allocator;
  MemoryLedger* ledger = nullptr;  // null once the pool is destroyed
  std::multimap<std::size_t, HostBlock> free;  // by capacity
  std::map<std::byte*, std::size_t> owned;     // every live block: address -> bytes
  std::uint64_t reserved = 0;
  std::uint64_t leased = 0;

  HostBlock allocate_locked(std::size_t bytes) {
    HostBlock b = [&] {
      try {
        return HostBlock(allocator, bytes);
      } catch (const std::bad_alloc&) {
        trim_locked();
        return HostBlock(allocator, bytes);
      }
    }();
    owned.emplace(b.data(), b.bytes());
    reserved += b.bytes();
    return b;
  }

  void forget_locked(const HostBlock& b) {
    owned.erase(b.data());
    reserved -= b.bytes();
  }

  void trim_locked() {
    for (auto& [cap, b] : free) forget_locked(b);
    free.clear();
  }
};

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::move(o.pool_);
    block_ = std::move(o.block_);
    size_ = std::exchange(o.size_, 0);
    category_ = o.category_;
  }
  return *this;
}

void HostBuffer::release() noexcept {
  if (!block_.valid()) return;
  // Keeps the state alive until after the lock is released below.
  const std::shared_ptr<HostPoolState> keep = std::move(pool_);
  HostPoolState& s = *keep;
  std::lock_guard lk(s.mu);
  const std::size_t cap = block_.bytes();
  s.leased -= cap;
  if (s.ledger != nullptr) {
    s.ledger->remove(category_, MemTier::host, cap, cap - size_);
    s.free.emplace(cap, std::move(block_));
  } else {
    s.forget_locked(block_);
    block_ = HostBlock();
  }
  size_ = 0;
}

HostPool::HostPool(MemoryLedger& ledger, std::shared_ptr<HostAllocator> allocator)
    : state_(std::make_shared<HostPoolState>()) {
  state_->allocator = std::move(allocator);
  state_->ledger = &ledger;
}

HostPool::~HostPool() {
  std::lock_guard lk(state_->mu);
  state_->ledger = nullptr;
  state_->trim_locked();
}

HostBuffer HostPool::acquire(std::size_t bytes, MemCategory category) {
  HostBuffer out;
  if (bytes == 0) return out;
  const std::size_t need = host_block_bytes(bytes);
  HostPoolState& s = *state_;
  std::lock_guard lk(s.mu);
  auto it = host_pool_pick(s.free, need);
  if (it != s.free.end()) {
    out.block_ = std::move(it->second);
    s.free.erase(it);
  } else {
    out.block_ = s.allocate_locked(need);
  }
  out.pool_ = state_;
  out.size_ = bytes;
  out.category_ = category;
  const std::size_t cap = out.block_.bytes();
  s.leased += cap;
  s.ledger->add(category, MemTier::host, cap, cap - bytes);
  return out;
}

void HostPool::reserve(std::size_t bytes, std::size_t count) {
  const std::size_t need = host_block_bytes(bytes);
  if (need == 0) return;
  HostPoolState& s = *state_;
  std::lock_guard lk(s.mu);
  for (std::size_t i = 0; i < count; ++i) {
    HostBlock b = s.allocate_locked(need);
    s.free.emplace(need, std::move(b));
  }
}

void HostPool::trim() {
  std::lock_guard lk(state_->mu);
  state_->trim_locked();
}

std::uint64_t HostPool::reserved_bytes() const {
  std::lock_guard lk(state_->mu);
  return state_->reserved;
}

std::uint64_t HostPool::leased_bytes() const {
  std::lock_guard lk(state_->mu);
  return state_->leased;
}

std::size_t HostPool::cached_count() const {
  std::lock_guard lk(state_->mu);
  return state_->free.size();
}

std::vector<std::span<std::byte>> HostPool::blocks() const {
  std::lock_guard lk(state_->mu);
  std::vector<std::span<std::byte>> out;
  out.reserve(state_->owned.size());
  for (const auto& [p, n] : state_->owned) out.emplace_back(p, n);
  return out;
}

const HostAllocator& HostPool::allocator() const { return *state_->allocator; }

HostLeaseSize HostPoolSizes::acquire(std::size_t bytes, MemCategory category) {
  HostLeaseSize out{.bytes = bytes, .capacity = 0, .category = category};
  if (bytes == 0) return out;
  const std::size_t need = host_block_bytes(bytes);
  auto it = host_pool_pick(free_, need);
  if (it != free_.end()) {
    out.capacity = *it;
    free_.erase(it);
  } else {
    out.capacity = need;
    reserved_ += need;
  }
  ledger_.add(category, MemTier::host, out.capacity, out.capacity - bytes);
  return out;
}

void HostPoolSizes::release(HostLeaseSize& lease) {
  if (!lease.valid()) return;
  ledger_.remove(lease.category, MemTier::host, lease.capacity, lease.capacity - lease.bytes);
  free_.insert(lease.capacity);
  lease = HostLeaseSize{};
}

}  // namespace zeroshard
