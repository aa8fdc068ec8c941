// Unsharder: see runtime/unsharder.h and [Note: unshard order].
#include "runtime/unsharder.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

Unsharder::Unsharder(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
                     UnsharderOptions options, ShardSource& source)
    : comm_(comm), layout_(layout), ops_(ops), pool_(pool), o_(options), source_(source),
      units_(layout.units().size()) {
  ZS_CHECK(layout.world_size() == comm.world_size(),
           "Unsharder: the layout is finalized for {} ranks, the communicator has {}", layout.world_size(),
           comm.world_size());
}

Unsharder::Unit& Unsharder::unit(UnitId u) {
  return const_cast<Unit&>(static_cast<const Unsharder&>(*this).unit(u));
}

const Unsharder::Unit& Unsharder::unit(UnitId u) const {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units_.size(), "unit id {} is not one of the {} units", u,
           units_.size());
  return units_[static_cast<std::size_t>(u)];
}

// Starts the all-gather of u's shards into a leased full buffer.
void Unsharder::start(UnitId u) {
  Unit& x = unit(u);
  const UnitInfo& info = layout_.unit(u);
  x.full = pool_.acquire(info.padded, o_.dtype, false);
  try {
    const ShardView view = source_.shard(u);
    const void* src = view.data;
    if (view.host && !ops_.host_addressable()) {
      // A shard in host memory goes to the compute device for the collective.
      x.upload = pool_.acquire(info.shard, o_.dtype, false);
      ops_.upload_async(x.upload.data(), src, info.shard * dtype_size(o_.dtype));
      src = x.upload.data();
    }
    comm_.set_label(info.name);
    x.work = comm_.iall_gather(src, x.full.data(), info.shard, o_.dtype);
  } catch (...) {
    // No all-gather: u stays without a full buffer.
    x.upload.release();
    x.full.release();
    throw;
  }
}

// The all-gather of u is complete; the shard's buffers may go.
void Unsharder::finish(UnitId u) {
  Unit& x = unit(u);
  x.work.wait();
  x.upload.release();
  source_.release(u);
}

void Unsharder::prefetch_after(UnitId u) {
  if (!o_.overlap) return;  // overlap_comm off: gather on unshard() only
  if (recording_) {
    order_.push_back(u);
    return;
  }
  std::size_t pos = cursor_;
  if (pos >= order_.size() || order_[pos] != u) {
    auto it = std::find(order_.begin(), order_.end(), u);
    if (it == order_.end()) return;
    pos = static_cast<std::size_t>(it - order_.begin());
  }
  cursor_ = pos + 1;
  if (cursor_ >= order_.size()) return;
  const UnitId next = order_[cursor_];
  if (next != u && !unit(next).full.valid()) start(next);
  if (cursor_ + 1 < order_.size()) source_.prefetch(order_[cursor_ + 1]);
}

void Unsharder::unshard(UnitId u) {
  Unit& x = unit(u);
  if (o_.gather) {
    if (!x.full.valid()) start(u);
    prefetch_after(u);
    finish(u);
  }
  ++x.count;
}

void Unsharder::reshard(UnitId u) {
  Unit& x = unit(u);
  if (x.count == 0) {
    throw InvariantError(
        fmt::format("reshard(\"{}\") without a matching unshard()", layout_.unit(u).name));
  }
  if (--x.count > 0 || !o_.gather) return;
  finish(u);
  const bool next_is_u = !recording_ && cursor_ < order_.size() && order_[cursor_] == u;
  if (!next_is_u) x.full.release();
}

int Unsharder::count(UnitId u) const { return unit(u).count; }

bool Unsharder::gathered(UnitId u) const { return unit(u).full.valid(); }

void* Unsharder::full(UnitId u) {
  Unit& x = unit(u);
  if (!x.full.valid()) return nullptr;
  x.work.wait();
  return x.full.data();
}

void Unsharder::end_micro_batch() {
  recording_ = false;
  cursor_ = 0;
}

void Unsharder::refresh() {
  if (!o_.gather) return;
  for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
    Unit& x = unit(u);
    if (!x.full.valid()) {
      source_.release(u);
      continue;
    }
    finish(u);
    x.full.release();
    if (x.count > 0) {
      start(u);
      finish(u);
    }
  }
}

void Unsharder::reset() noexcept {
  for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
    Unit& x = units_[static_cast<std::size_t>(u)];
    try {
      x.work.wait();
    } catch (...) {
      // The collective failed; its buffers are no longer in use.
    }
    x.work = CommWork();
    source_.release(u);
    x.upload.release();
    x.full.release();
    x.count = 0;
  }
  order_.clear();
  recording_ = true;
  cursor_ = 0;
}

}  // namespace zeroshard
