// Unsharder: see runtime/sharding/unsharder.h and [Note: unshard order].
#include "runtime/sharding/unsharder.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

std::uint64_t hpz_secondary_bytes(const FlatLayout& layout, const UnsharderOptions& options) {
  if (!options.gather || options.hpz_partition_size <= 1) return 0;
  std::uint64_t elements = 0;
  for (const UnitInfo& u : layout.units()) elements += u.padded / static_cast<std::size_t>(options.hpz_partition_size);
  return elements * dtype_size(options.dtype);
}

Unsharder::Unsharder(Communicator& comm, const FlatLayout& layout, DeviceOps& ops, BufferPool& pool,
                     UnsharderOptions options, ShardSource& source, Communicator* secondary)
    : comm_(comm), layout_(layout), ops_(ops), pool_(pool), o_(options), source_(source),
      units_(layout.units().size()) {
  ZS_CHECK(layout.world_size() == comm.world_size(),
           "Unsharder: the layout is finalized for {} ranks, the communicator has {}", layout.world_size(),
           comm.world_size());
  ZS_CHECK(o_.prefetch_bucket_size >= 0 && o_.max_live_parameters >= 0 && o_.max_reuse_distance >= 0 &&
               o_.param_persistence_threshold >= 0 && o_.model_persistence_threshold >= 0,
           "Unsharder: negative stage3_* option");
  if (o_.quantized) kernels::check_sym_quant_format(*o_.quantized, "Unsharder");
  if (o_.gather && o_.hpz_partition_size > 1) {
    const int k = o_.hpz_partition_size;
    ZS_CHECK(secondary != nullptr && secondary->world_size() == k && secondary->rank() == comm.rank() % k,
             "Unsharder: hpZ over groups of {} ranks needs the group's communicator (rank {} of it)", k,
             comm.rank() % k);
    ZS_CHECK(comm.world_size() % k == 0, "Unsharder: hpZ groups of {} ranks do not divide {} ranks", k,
             comm.world_size());
    secondary_ = secondary;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      units_[u].secondary = pool_.acquire(layout.units()[u].padded / static_cast<std::size_t>(k), o_.dtype, false,
                                          MemCategory::secondary);
    }
  }
  if (!o_.gather || o_.param_persistence_threshold == 0) return;
  // DeepSpeed's mark_persistent_parameters, per unit: in unit order, a unit
  // whose parameters are all small joins while the total fits.
  const auto threshold = static_cast<std::uint64_t>(o_.param_persistence_threshold);
  const auto model_threshold = static_cast<std::uint64_t>(o_.model_persistence_threshold);
  std::uint64_t total = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const UnitInfo& info = layout.units()[u];
    const bool small = std::all_of(info.params.begin(), info.params.end(),
                                   [&](ParamId p) { return layout.param(p).numel <= threshold; });
    if (small && info.numel <= model_threshold - total) {
      units_[u].persistent = true;
      total += info.numel;
    }
  }
}

bool Unsharder::persistent(UnitId u) const { return unit(u).persistent; }

std::int64_t Unsharder::all_gathers(UnitId u) const { return unit(u).all_gathers; }

std::int64_t Unsharder::secondary_gathers(UnitId u) const { return unit(u).secondary_gathers; }

std::int64_t Unsharder::weight(UnitId u) const {
  return std::max<std::int64_t>(static_cast<std::int64_t>(layout_.unit(u).padded), 1);
}

Unsharder::Unit& Unsharder::unit(UnitId u) {
  return const_cast<Unit&>(static_cast<const Unsharder&>(*this).unit(u));
}

const Unsharder::Unit& Unsharder::unit(UnitId u) const {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units_.size(), "unit id {} is not one of the {} units", u,
           units_.size());
  return units_[static_cast<std::size_t>(u)];
}

// Starts the all-gather of u's full buffer into a leased buffer: from the
// hpZ group's secondary shards when they are current, else from every
// rank's shard ([Note: ZeRO++ unsharding]).
void Unsharder::start(UnitId u) {
  Unit& x = unit(u);
  const UnitInfo& info = layout_.unit(u);
  x.full = pool_.acquire(info.padded, o_.dtype, false,
                         x.persistent ? MemCategory::persistent : MemCategory::unsharded);
  if (!x.persistent) {
    live_ += static_cast<std::int64_t>(info.padded);
    peak_live_ = std::max(peak_live_, live_);
  }
  if (secondary_ != nullptr && x.secondary_valid) {
    secondary_->set_label(info.name);
    x.work = secondary_->iall_gather(x.secondary.data(), x.full.data(), x.secondary.numel(), o_.dtype);
    ++x.all_gathers;
    ++x.secondary_gathers;
    return;
  }
  try {
    start_world(u);
  } catch (...) {
    // No all-gather: u stays without a full buffer.
    x.upload.release();
    drop(u);
    throw;
  }
}

// The all-gather of every rank's shard of u (quantized with qwZ).
void Unsharder::start_world(UnitId u) {
  Unit& x = unit(u);
  const UnitInfo& info = layout_.unit(u);
  const ShardView view = source_.shard(u);
  const void* src = view.data;
  if (view.host && !ops_.host_addressable()) {
    // A shard in host memory goes to the compute device for the collective.
    x.upload = pool_.acquire(info.shard, o_.dtype, false);
    ops_.upload_async(x.upload.data(), src, info.shard * dtype_size(o_.dtype));
    src = x.upload.data();
  }
  const std::size_t world = static_cast<std::size_t>(comm_.world_size());
  if (o_.quantized) {
    // Every rank's chunk in its slot; this rank's written in place.
    const std::size_t chunk = kernels::sym_quant_chunk_bytes(info.shard, *o_.quantized);
    x.chunks = pool_.acquire(world * chunk, DType::u8, false);
    void* mine = x.chunks.at(static_cast<std::size_t>(comm_.rank()) * chunk);
    ops_.quantize(src, o_.dtype, info.shard, *o_.quantized, nullptr, mine);
    if (world > 1) {
      comm_.set_label(info.name);
      x.work = comm_.iall_gather(mine, x.chunks.data(), chunk, DType::u8);
    }
  } else if (world == 1) {
    // One rank: its shard is the whole unit; a copy in the ops' order is
    // what the collective would do, without the backend's request.
    ops_.move(x.full.data(), src, info.shard * dtype_size(o_.dtype));
  } else {
    comm_.set_label(info.name);
    x.work = comm_.iall_gather(src, x.full.data(), info.shard, o_.dtype);
  }
  ++x.all_gathers;
  x.fill_secondary = secondary_ != nullptr;
}

// u's all-gather is complete: its chunks dequantized into the full buffer
// (qwZ) and this rank's slice kept as the secondary shard (hpZ).
void Unsharder::complete(UnitId u) {
  Unit& x = unit(u);
  x.work.wait();
  if (!x.full.valid()) return;
  const UnitInfo& info = layout_.unit(u);
  const std::size_t e = dtype_size(o_.dtype);
  if (x.chunks.valid()) {
    const std::size_t chunk = kernels::sym_quant_chunk_bytes(info.shard, *o_.quantized);
    for (std::size_t r = 0; r < static_cast<std::size_t>(comm_.world_size()); ++r) {
      ops_.dequantize(x.chunks.at(r * chunk), info.shard, *o_.quantized, x.full.at(r * info.shard), o_.dtype, false);
    }
    x.chunks.release();
  }
  if (x.fill_secondary) {
    const std::size_t part = x.secondary.numel();
    ops_.move(x.secondary.data(), static_cast<std::byte*>(x.full.data()) + static_cast<std::size_t>(secondary_->rank()) * part * e,
              part * e);
    x.secondary_valid = true;
    x.fill_secondary = false;
  }
}

// Releases u's full buffer (its all-gather finished or never started).
void Unsharder::drop(UnitId u) {
  Unit& x = unit(u);
  x.chunks.release();
  x.fill_secondary = false;
  if (!x.full.valid()) return;
  if (!x.persistent) live_ -= static_cast<std::int64_t>(layout_.unit(u).padded);
  x.full.release();
}

// Position of u's next use in the recorded order from the cursor on
// (order_.size() when there is none).
std::size_t Unsharder::next_use(UnitId u) const {
  if (recording_) return order_.size();
  for (std::size_t k = cursor_; k < order_.size(); ++k) {
    if (order_[k] == u) return k;
  }
  return order_.size();
}

// Before gathering u: drops kept and prefetched units (no unshard
// outstanding), farthest next use first, while u would pass max_live.
void Unsharder::make_room(UnitId u) {
  if (unit(u).persistent) return;
  const auto need = static_cast<std::int64_t>(layout_.unit(u).padded);
  while (live_ + need > o_.max_live_parameters) {
    UnitId victim = -1;
    std::size_t farthest = 0;
    for (UnitId v = 0; v < static_cast<UnitId>(units_.size()); ++v) {
      const Unit& y = units_[static_cast<std::size_t>(v)];
      if (v == u || y.persistent || y.count > 0 || !y.full.valid()) continue;
      const std::size_t at = next_use(v);
      if (victim < 0 || at > farthest) {
        victim = v;
        farthest = at;
      }
    }
    if (victim < 0) return;  // only units the loop holds: it asked for more than the limit
    finish(victim);
    drop(victim);
  }
}

// Whether u, resharded to count zero, stays gathered.
bool Unsharder::keep(UnitId u) const {
  if (recording_ || live_ > o_.max_live_parameters) return false;
  std::int64_t between = 0;
  for (std::size_t k = cursor_; k < order_.size(); ++k) {
    if (order_[k] == u) return true;
    between += weight(order_[k]);
    if (between > o_.max_reuse_distance) return false;
  }
  return false;
}

// The all-gather of u is complete; the shard's buffers may go.
void Unsharder::finish(UnitId u) {
  Unit& x = unit(u);
  complete(u);
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
  std::size_t k = cursor_;
  for (std::int64_t walked = 0; k < order_.size() && walked < o_.prefetch_bucket_size; ++k) {
    const UnitId next = order_[k];
    Unit& y = unit(next);
    if (!y.full.valid()) {
      if (!y.persistent && live_ + static_cast<std::int64_t>(layout_.unit(next).padded) > o_.max_live_parameters) {
        break;
      }
      start(next);
    }
    walked += weight(next);
  }
  if (k < order_.size()) source_.prefetch(order_[k]);
}

void Unsharder::unshard(UnitId u) {
  Unit& x = unit(u);
  if (o_.gather) {
    if (!x.full.valid()) {
      make_room(u);
      start(u);
    }
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
  if (!x.persistent && !keep(u)) drop(u);
}

int Unsharder::count(UnitId u) const { return unit(u).count; }

bool Unsharder::gathered(UnitId u) const { return unit(u).full.valid(); }

void* Unsharder::full(UnitId u) {
  Unit& x = unit(u);
  if (!x.full.valid()) return nullptr;
  complete(u);
  return x.full.data();
}

void Unsharder::end_micro_batch() {
  recording_ = false;
  cursor_ = 0;
}

void Unsharder::refresh() { regather(drop_stale()); }

std::vector<UnitId> Unsharder::drop_stale() {
  std::vector<UnitId> again;
  if (!o_.gather) return again;
  for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
    Unit& x = unit(u);
    if (!x.full.valid()) {
      source_.release(u);
      x.secondary_valid = false;
      continue;
    }
    finish(u);
    drop(u);
    // The shards changed: the secondary copy is stale (after finish, which
    // may have just filled it from a prefetch of the old parameters).
    x.secondary_valid = false;
    if (x.count > 0 || x.persistent) again.push_back(u);
  }
  return again;
}

void Unsharder::regather(const std::vector<UnitId>& units) {
  for (const UnitId u : units) {
    start(u);
    finish(u);
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
    x.chunks.release();
    x.full.release();
    x.count = 0;
    x.secondary_valid = false;
    x.fill_secondary = false;
  }
  live_ = 0;
  order_.clear();
  recording_ = true;
  cursor_ = 0;
}

}  // namespace zeroshard
