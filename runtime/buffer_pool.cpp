#include "runtime/buffer_pool.h"

#include <algorithm>

namespace zeroshard {

PoolLease& PoolLease::operator=(PoolLease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    buf_ = std::move(o.buf_);
    n_ = o.n_;
    o.pool_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

void PoolLease::release() {
  if (pool_ != nullptr) pool_->give_back(std::move(buf_), n_);
  pool_ = nullptr;
  buf_.reset();
  n_ = 0;
}

PoolLease BufferPool::acquire(std::size_t n, bool zero) {
  PoolLease lease;
  lease.pool_ = this;
  lease.n_ = n;
  ledger_.add(MemCategory::unsharded, MemTier::device, n * sizeof(float));
  if (n == 0) return lease;
  // Smallest cached buffer that fits and is not more than twice the request.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const std::size_t s = (*it)->size();
    if (s >= n && s <= 2 * n && (best == free_.end() || s < (*best)->size())) best = it;
  }
  if (best != free_.end()) {
    lease.buf_ = std::move(*best);
    free_.erase(best);
    if (zero) std::fill_n(lease.buf_->data(), n, 0.0f);
  } else {
    lease.buf_ = std::make_unique<AlignedBuffer<float>>(n);  // zeroed by construction
    reserved_ += lease.buf_->bytes();
  }
  return lease;
}

void BufferPool::give_back(std::unique_ptr<AlignedBuffer<float>> buf, std::size_t n) {
  ledger_.remove(MemCategory::unsharded, MemTier::device, n * sizeof(float));
  if (buf) free_.push_back(std::move(buf));
}

void BufferPool::trim() {
  for (auto& b : free_) reserved_ -= b->bytes();
  free_.clear();
}

}  // namespace zeroshard
