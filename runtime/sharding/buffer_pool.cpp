#include "runtime/sharding/buffer_pool.h"


namespace zeroshard {

PoolLease& PoolLease::operator=(PoolLease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    buf_ = std::move(o.buf_);
    n_ = o.n_;
    dtype_ = o.dtype_;
    category_ = o.category_;
    o.pool_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

void PoolLease::release() {
  if (pool_ != nullptr) pool_->give_back(std::move(buf_), n_ * dtype_size(dtype_), category_);
  pool_ = nullptr;
  buf_ = DeviceArray{};
  n_ = 0;
}

PoolLease BufferPool::acquire(std::size_t numel, DType dtype, bool zero, MemCategory category) {
  PoolLease lease;
  lease.pool_ = this;
  lease.n_ = numel;
  lease.dtype_ = dtype;
  lease.category_ = category;
  const std::size_t bytes = numel * dtype_size(dtype);
  ledger_.add(category, MemTier::device, bytes);
  if (bytes == 0) return lease;
  // Buffers are f64 arrays (8-byte granules): sizes compare in granules.
  const std::size_t want = (bytes + 7) / 8 * 8;
  // Smallest cached buffer that fits and is not more than twice the request.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::size_t s = it->bytes();
    if (s >= want && s <= 2 * want && (best == free_.end() || s < best->bytes())) best = it;
  }
  if (best != free_.end()) {
    lease.buf_ = std::move(*best);
    free_.erase(best);
    if (zero) ops_.zero(lease.buf_.data(), bytes);
  } else {
    lease.buf_ = ops_.allocate(want / 8, DType::f64);  // zeroed by construction
    reserved_ += lease.buf_.bytes();
  }
  return lease;
}

void BufferPool::give_back(DeviceArray buf, std::uint64_t bytes, MemCategory category) {
  ledger_.remove(category, MemTier::device, bytes);
  if (!buf.empty()) free_.push_back(std::move(buf));
}

void BufferPool::trim() {
  for (auto& b : free_) reserved_ -= b.bytes();
  free_.clear();
}

}  // namespace zeroshard
