#include "offload/swap_pipeline.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <cstring>

#include "core/error.h"

namespace zeroshard {

SwapPipelineStats& SwapPipelineStats::operator+=(const SwapPipelineStats& o) {
  bytes_read += o.bytes_read;
  bytes_written += o.bytes_written;
  read_wait_s += o.read_wait_s;
  write_wait_s += o.write_wait_s;
  update_s += o.update_s;
  return *this;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One staging set: the buffers of the sub-group it holds and its I/O.
struct StagingSet {
  std::size_t index = 0;  ///< sub-group held
  std::vector<SwapSlot> slots;
  std::vector<HostBuffer> buffers;
  std::vector<SwapBatch> reads;
  std::vector<SwapBatch> writes;
  bool pending_read = false;  ///< read started, update not yet run
};

// Starts one batch per directory over `items` (parallel to `dirs`).
std::vector<SwapBatch> start(const std::vector<SwapDirectory*>& dirs, const std::vector<SwapItem>& items,
                             bool write) {
  std::vector<SwapBatch> out;
  std::vector<SwapDirectory*> seen;
  for (SwapDirectory* d : dirs) {
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    std::vector<SwapItem> mine;
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (dirs[k] == d) mine.push_back(items[k]);
    }
    out.push_back(write ? d->write(mine) : d->read(mine));
  }
  return out;
}

// Waits for every batch (wait_traced: io_wait and I/O spans with a tracer).
void wait_all(std::vector<SwapBatch>& batches, Tracer* tracer, bool write) {
  // Every batch is waited for even if one throws; the first error is kept.
  std::exception_ptr first;
  for (SwapBatch& b : batches) {
    try {
      wait_traced(b, tracer, write);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  batches.clear();
  if (first) std::rethrow_exception(first);
}

class Pipeline {
 public:
  Pipeline(HostPool& pool, const SwapPipelineOptions& o, MemCategory category,
           const std::function<std::vector<SwapSlot>(std::size_t)>& slots)
      : pool_(pool), tracer_(o.tracer), category_(category), slots_(slots),
        sets_(static_cast<std::size_t>(o.buffer_count)) {}

  StagingSet& set_of(std::size_t i) { return sets_[i % sets_.size()]; }

  void wait_write(StagingSet& set) {
    if (set.writes.empty()) return;
    const auto t0 = Clock::now();
    wait_all(set.writes, tracer_, true);
    stats.write_wait_s += seconds_since(t0);
  }

  // Starts reading sub-group i into its set (after the set's last write).
  void start_read(std::size_t i) {
    StagingSet& set = set_of(i);
    wait_write(set);
    set.index = i;
    set.slots = slots_(i);
    set.buffers.resize(set.slots.size());
    std::vector<SwapItem> items;
    std::vector<SwapDirectory*> dirs;
    for (std::size_t k = 0; k < set.slots.size(); ++k) {
      const SwapSlot& slot = set.slots[k];
      ZS_CHECK(slot.dir != nullptr, "swap pipeline: slot \"{}\" names no directory", slot.key);
      HostBuffer& buf = set.buffers[k];
      if (!staging_buffer_holds(buf.valid() ? buf.capacity() : 0, buf.size(), slot.bytes)) {
        buf.release();
        buf = pool_.acquire(slot.bytes, category_);
      }
      const SwapFile* f = slot.dir->find(slot.key);
      if (f == nullptr) {
        if (slot.bytes > 0) std::memset(buf.data(), 0, slot.bytes);
        continue;
      }
      ZS_CHECK(f->logical_size == slot.bytes, "swap file \"{}\" holds {} bytes, the pipeline expects {}",
               slot.key, f->logical_size, slot.bytes);
      items.push_back(SwapItem{.key = slot.key, .buffer = buf.capacity_span(), .bytes = slot.bytes});
      dirs.push_back(slot.dir);
      stats.bytes_read += slot.bytes;
    }
    set.reads = start(dirs, items, false);
    set.pending_read = true;
  }

  void update(std::size_t i, const std::function<void(std::size_t, std::span<std::byte* const>)>& fn) {
    StagingSet& set = set_of(i);
    ZS_CHECK(set.index == i && set.pending_read, "swap pipeline: sub-group {} was not read", i);
    auto t0 = Clock::now();
    set.pending_read = false;
    wait_all(set.reads, tracer_, false);
    stats.read_wait_s += seconds_since(t0);
    std::vector<std::byte*> data(set.buffers.size());
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = set.buffers[k].data();
    t0 = Clock::now();
    fn(i, data);
    stats.update_s += seconds_since(t0);
  }

  void start_write(std::size_t i, bool wait_now) {
    StagingSet& set = set_of(i);
    std::vector<SwapItem> items;
    std::vector<SwapDirectory*> dirs;
    for (std::size_t k = 0; k < set.slots.size(); ++k) {
      const SwapSlot& slot = set.slots[k];
      if (!slot.write_back) continue;
      items.push_back(SwapItem{.key = slot.key, .buffer = set.buffers[k].capacity_span(), .bytes = slot.bytes});
      dirs.push_back(slot.dir);
      stats.bytes_written += slot.bytes;
    }
    set.writes = start(dirs, items, true);
    if (wait_now) wait_write(set);
  }

  // Completes every read and write still in flight (also on error paths).
  void drain() {
    for (StagingSet& set : sets_) {
      set.pending_read = false;
      wait_all(set.reads, tracer_, false);
      wait_write(set);
    }
  }

  SwapPipelineStats stats;

 private:
  HostPool& pool_;
  Tracer* tracer_;
  MemCategory category_;
  const std::function<std::vector<SwapSlot>(std::size_t)>& slots_;
  std::vector<StagingSet> sets_;
};

}  // namespace

void swap_pipeline_schedule(std::size_t count, const SwapPipelineOptions& options,
                            const std::function<void(std::size_t)>& read,
                            const std::function<void(std::size_t)>& update,
                            const std::function<void(std::size_t, bool)>& write) {
  // Reading ahead needs a second set; it must not be the one being updated.
  const bool read_ahead = options.pipeline_read && options.buffer_count >= 2;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == 0 || !read_ahead) read(i);
    if (read_ahead && i + 1 < count) read(i + 1);
    update(i);
    write(i, !options.pipeline_write);
  }
}

bool staging_buffer_holds(std::size_t capacity, std::size_t size, std::uint64_t bytes) {
  return capacity > 0 && capacity >= SwapDirectory::padded_size(bytes) && size >= bytes;
}

void replay_swap_pipeline(HostPoolSizes& pool, const SwapPipelineOptions& options, MemCategory category,
                          std::size_t count, const std::function<std::vector<std::uint64_t>(std::size_t)>& slot_bytes) {
  ZS_CHECK(options.buffer_count >= 1, "swap pipeline: buffer_count {} must be >= 1", options.buffer_count);
  // Pipeline::start_read's leases, set by set; writes and updates lease nothing.
  std::vector<std::vector<HostLeaseSize>> sets(static_cast<std::size_t>(options.buffer_count));
  const auto read = [&](std::size_t i) {
    std::vector<HostLeaseSize>& set = sets[i % sets.size()];
    const std::vector<std::uint64_t> bytes = slot_bytes(i);
    for (std::size_t k = bytes.size(); k < set.size(); ++k) pool.release(set[k]);  // resize() drops the rest
    set.resize(bytes.size());
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      HostLeaseSize& buf = set[k];
      if (!staging_buffer_holds(buf.capacity, buf.bytes, bytes[k])) {
        pool.release(buf);
        buf = pool.acquire(bytes[k], category);
      }
    }
  };
  swap_pipeline_schedule(count, options, read, [](std::size_t) {}, [](std::size_t, bool) {});
  for (auto& set : sets) {
    for (HostLeaseSize& buf : set) pool.release(buf);
  }
}

SwapPipelineStats run_swap_pipeline(HostPool& pool, const SwapPipelineOptions& options,
                                    MemCategory category, std::size_t count,
                                    const std::function<std::vector<SwapSlot>(std::size_t)>& slots,
                                    const std::function<void(std::size_t, std::span<std::byte* const>)>& update) {
  ZS_CHECK(options.buffer_count >= 1, "swap pipeline: buffer_count {} must be >= 1", options.buffer_count);
  Pipeline p(pool, options, category, slots);
  try {
    swap_pipeline_schedule(
        count, options, [&](std::size_t i) { p.start_read(i); }, [&](std::size_t i) { p.update(i, update); },
        [&](std::size_t i, bool wait_now) { p.start_write(i, wait_now); });
    p.drain();
  } catch (...) {
    try {
      p.drain();
    } catch (...) {
      // The first error is the one reported.
    }
    throw;
  }
  return p.stats;
}

}  // namespace zeroshard
