// ArrayStore: tier assignment, allocation, whole-array access, the stage 3
// parameter swap-in and the gradient shard on every tier. See
// [Note: offload in the engine] in runtime/sharding/array_store.h.
#include "runtime/sharding/array_store.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include "core/error.h"
#include "offload/io/free_space.h"
#include "offload/pinned_host_allocator.h"
#include "offload/swap_folder.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

std::string array_name(ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return "param";
    case ArrayKind::master: return "master";
    case ArrayKind::state: return fmt::format("state{}", a.state);
    case ArrayKind::grad: return "grad";
    case ArrayKind::micro_grad: return "micro_grad";
  }
  return "?";
}

// offload_*.pin_memory: page-locked staging and host-tier buffers.
std::shared_ptr<HostAllocator> host_allocator(const OffloadConfig& c) {
  const bool opt = c.optimizer.device != OffloadDevice::none && c.optimizer.pin_memory;
  const bool param = c.param.device != OffloadDevice::none && c.param.pin_memory;
  return make_host_allocator(opt || param, opt ? "zero_optimization.offload_optimizer.pin_memory"
                                               : "zero_optimization.offload_param.pin_memory");
}

std::uint64_t item_bytes(const std::vector<SwapItem>& items) {
  std::uint64_t n = 0;
  for (const SwapItem& it : items) n += it.bytes;
  return n;
}

}  // namespace

ArrayStore::ArrayStore(const FlatLayout& layout, DeviceOps& ops, MemoryLedger& ledger, ArrayStoreOptions options)
    : layout_(layout), ops_(ops), ledger_(ledger), o_(std::move(options)), host_(ledger, host_allocator(o_.offload)) {
  ZS_CHECK(layout_.world_size() > 0, "ArrayStore: the layout is not finalized");
  // Host-tier arrays come from the same allocator as the staging buffers
  // (page-locked with pin_memory).
  auto allocator = host_allocator(o_.offload);
  host_ops_ = allocator->pinned() ? make_cpu_ops(std::move(allocator)) : make_cpu_ops();
  assign_tiers();
  allocate();
}

ArrayStore::~ArrayStore() {
  grad_writes_.clear();
  open_grad_ = {};
  for (auto& u : units_) {
    u.param_read.reset();
    u.param_staging.release();
  }
  for (auto* dir : {optimizer_dir_.get(), param_dir_.get()}) {
    if (dir == nullptr) continue;
    try {
      dir->remove_all();
    } catch (const std::exception& e) {
      fmt::print(stderr, "zeroshard: could not remove swap files in {}: {}\n", dir->path().string(), e.what());
    }
    remove_swap_folder(dir->path());
  }
}

// Tiers and sub-groups from the plan (runtime/sharding/array_plan.h); swap
// folders for the nvme tiers.
void ArrayStore::assign_tiers() {
  const ArrayPlanOptions po = o_.plan_options();
  ArrayPlan plan = plan_arrays(layout_, po);
  micro_grad_ = po.micro_grad();
  units_.resize(layout_.units().size());
  for (std::size_t i = 0; i < units_.size(); ++i) {
    units_[i].param_tier = plan.units[i].param_tier;
    units_[i].optimizer_tier = plan.units[i].optimizer_tier;
    units_[i].subgroups = std::move(plan.units[i].subgroups);
    units_[i].state_arrays = plan.units[i].states;
  }
  offloaded_ = plan.offloaded;
  arrays_ = std::move(plan.arrays);
  if (!o_.offload.uses_nvme()) return;
  open_swap_folders(plan.nvme_optimizer_bytes, plan.nvme_param_bytes, plan.nvme_in_flight_bytes);
}

void ArrayStore::open_swap_folders(std::uint64_t optimizer_bytes, std::uint64_t param_bytes,
                                   std::uint64_t in_flight_bytes) {
  const OffloadConfig& c = o_.offload;
  static std::atomic<int> stores{0};
  const int engine = stores++;
  io_ = make_io_engine(c.aio);
  std::vector<fs::path> made;
  try {
    if (c.optimizer.device == OffloadDevice::nvme) {
      const fs::path p = make_swap_folder(c.optimizer.nvme_path, "zero_optimization.offload_optimizer.nvme_path",
                                          o_.rank, engine, "optimizer");
      made.push_back(p);
      const bool shared = c.param.device == OffloadDevice::nvme && c.param.nvme_path == c.optimizer.nvme_path;
      check_free_space(p, optimizer_bytes + (shared ? param_bytes : 0) + in_flight_bytes, o_.swap_sharers.optimizer);
      optimizer_dir_ = std::make_unique<SwapDirectory>(*io_, p, c.aio);
    }
    if (c.param.device == OffloadDevice::nvme) {
      const fs::path p =
          make_swap_folder(c.param.nvme_path, "zero_optimization.offload_param.nvme_path", o_.rank, engine, "param");
      made.push_back(p);
      check_free_space(p, param_bytes + in_flight_bytes, o_.swap_sharers.param);
      param_dir_ = std::make_unique<SwapDirectory>(*io_, p, c.aio);
    }
  } catch (...) {
    // Leave nothing behind: the folders made here are still empty.
    optimizer_dir_.reset();
    param_dir_.reset();
    for (const fs::path& p : made) remove_swap_folder(p);
    throw;
  }
}

// Allocates and records what the plan lists; arrays on nvme get no memory.
void ArrayStore::allocate() {
  for (const ArrayAllocation& x : arrays_) {
    UnitArrays& us = units_[static_cast<std::size_t>(x.unit)];
    ledger_.add(x.category, x.tier, x.bytes, x.padding);
    DeviceArray buf = ops(x.unit, x.array).allocate(x.tier == MemTier::nvme ? 0 : x.numel, x.dtype);
    switch (x.array.kind) {
      case ArrayKind::params: us.params = std::move(buf); break;
      case ArrayKind::grad: us.grad = std::move(buf); break;
      case ArrayKind::micro_grad: us.micro_grad = std::move(buf); break;
      case ArrayKind::master: us.master = std::move(buf); break;
      case ArrayKind::state: us.states.push_back(std::move(buf)); break;
    }
  }
  arrays_.clear();
  arrays_.shrink_to_fit();
}

ArrayStore::UnitArrays& ArrayStore::unit(UnitId u) {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units_.size(), "unknown unit id {}", u);
  return units_[static_cast<std::size_t>(u)];
}

const ArrayStore::UnitArrays& ArrayStore::unit(UnitId u) const {
  ZS_CHECK(u >= 0 && static_cast<std::size_t>(u) < units_.size(), "unknown unit id {}", u);
  return units_[static_cast<std::size_t>(u)];
}

MemTier ArrayStore::tier(UnitId u, ArrayRef a) const {
  const UnitArrays& us = unit(u);
  return array_tier(o_.stage, us.param_tier, us.optimizer_tier, a);
}

std::size_t ArrayStore::numel(UnitId u, ArrayRef a) const {
  return array_numel(o_.stage, o_.rank, layout_.unit(u), unit(u).state_arrays, a);
}

DType ArrayStore::dtype(UnitId u, ArrayRef a) const {
  return array_dtype(ArrayDtypes{.compute = o_.dtype, .grad_accum = o_.grad_accum_dtype}, unit(u).state_arrays, a);
}

const UnitStates& ArrayStore::states(UnitId u) const { return unit(u).state_arrays; }

std::uint64_t ArrayStore::subgroup_bytes(UnitId u, std::size_t g, ArrayRef a) const {
  const UnitArrays& us = unit(u);
  ZS_CHECK(g < us.subgroups.size(), "unit {}: sub-group {} of {}", u, g, us.subgroups.size());
  std::size_t first = 0, last = 0;
  array_range(us.state_arrays, a, static_cast<std::size_t>(o_.rank), us.subgroups[g].begin, us.subgroups[g].end, first,
              last);
  return static_cast<std::uint64_t>(last - first) * dtype_size(dtype(u, a));
}

bool ArrayStore::in_device_memory(UnitId u, ArrayRef a) const {
  return !ops_.host_addressable() && tier(u, a) == MemTier::device;
}

DeviceOps& ArrayStore::ops(UnitId u, ArrayRef a) { return tier(u, a) == MemTier::device ? ops_ : *host_ops_; }

const std::vector<SubGroup>& ArrayStore::subgroups(UnitId u) const { return unit(u).subgroups; }

std::byte* ArrayStore::resident(UnitId u, ArrayRef a) {
  UnitArrays& us = unit(u);
  switch (a.kind) {
    case ArrayKind::params: return static_cast<std::byte*>(us.params.data());
    case ArrayKind::master: return static_cast<std::byte*>(us.master.data());
    case ArrayKind::state:
      ZS_CHECK(a.state >= 0 && static_cast<std::size_t>(a.state) < us.states.size(),
               "optimizer state index {} out of range ({} states)", a.state, us.states.size());
      return static_cast<std::byte*>(us.states[static_cast<std::size_t>(a.state)].data());
    case ArrayKind::grad: return static_cast<std::byte*>(us.grad.data());
    case ArrayKind::micro_grad: return static_cast<std::byte*>(us.micro_grad.data());
  }
  return nullptr;
}

std::string ArrayStore::swap_key(UnitId u, std::size_t g, ArrayRef a) {
  return fmt::format("u{}.g{}.{}", u, g, array_name(a));
}

SwapDirectory& ArrayStore::swap_dir(ArrayRef a) {
  SwapDirectory* d = a.kind == ArrayKind::params ? param_dir_.get() : optimizer_dir_.get();
  ZS_CHECK(d != nullptr, "no swap directory for array {}", array_name(a));
  return *d;
}

// Items reading (or writing) every sub-group file of array a of unit u
// from (into) `buf`; for reads, sub-groups never written are zeroed instead.
// A sub-group whose part of buf is not 4 KiB aligned, or whose padded size
// would run into the next one (8-bit absmax arrays: 4 bytes per block),
// goes through a buffer of its own in `bounce` (filled for writes here;
// copied back for reads by unbounce()).
std::vector<SwapItem> ArrayStore::items(UnitId u, ArrayRef a, std::byte* buf, bool reading,
                                        std::vector<std::string>& keys, std::vector<Bounce>& bounce) {
  const UnitArrays& us = unit(u);
  const std::size_t e = dtype_size(dtype(u, a));
  SwapDirectory& dir = swap_dir(a);
  keys.clear();
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) keys.push_back(swap_key(u, g, a));
  std::vector<SwapItem> out;
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) {
    const SubGroup& sg = us.subgroups[g];
    std::size_t first = 0, last = 0;
    array_range(us.state_arrays, a, static_cast<std::size_t>(o_.rank), sg.begin, sg.end, first, last);
    const std::uint64_t bytes = (last - first) * e;
    std::byte* at = buf + first * e;
    if (reading && dir.find(keys[g]) == nullptr) {
      if (bytes > 0) std::memset(at, 0, bytes);  // a packed sub-group may keep nothing
      continue;
    }
    const bool aligned = (first * e) % 4096 == 0 && (g + 1 == us.subgroups.size() || bytes % 4096 == 0);
    if (!aligned) {
      bounce.push_back(Bounce{host_.acquire(bytes, MemCategory::unsharded), at, bytes});
      if (!reading && bytes > 0) std::memcpy(bounce.back().buffer.data(), at, bytes);
      at = bounce.back().buffer.data();
    }
    out.push_back(SwapItem{.key = keys[g], .buffer = {at, SwapDirectory::padded_size(bytes)}, .bytes = bytes});
  }
  return out;
}

void ArrayStore::unbounce(std::vector<Bounce>& bounce) {
  for (Bounce& b : bounce) {
    if (b.bytes > 0) std::memcpy(b.target, b.buffer.data(), b.bytes);
  }
  bounce.clear();
}

// Waits for `batch` (wait_traced: io_wait and an I/O span with a tracer),
// adding the blocked time to the read or write total.
void ArrayStore::timed_wait(SwapBatch& batch, bool write) {
  const std::int64_t t0 = Tracer::now_ns();
  wait_traced(batch, tracer_, write);
  (write ? total_.write_wait_s : total_.read_wait_s) += static_cast<double>(Tracer::now_ns() - t0) / 1e9;
}

const void* ArrayStore::host_copy(const void* src, std::size_t bytes, HostBuffer& holder, bool settled) {
  if (ops_.host_addressable()) return src;
  holder = host_.acquire(bytes, MemCategory::unsharded);
  if (settled) {
    ops_.download_settled(holder.data(), src, bytes);
  } else {
    ops_.download(holder.data(), src, bytes);
  }
  return holder.data();
}

void* ArrayStore::read(UnitId u, ArrayRef a, HostBuffer& holder) {
  const std::size_t bytes = numel(u, a) * dtype_size(dtype(u, a));
  if (tier(u, a) != MemTier::nvme) {
    if (!in_device_memory(u, a)) return resident(u, a);
    return const_cast<void*>(host_copy(resident(u, a), bytes, holder));
  }
  if (a.kind == ArrayKind::grad) finish_grad_writes();
  holder = host_.acquire(bytes, MemCategory::unsharded);
  std::vector<std::string> keys;
  std::vector<Bounce> bounce;
  const auto list = items(u, a, holder.data(), true, keys, bounce);
  SwapBatch batch = swap_dir(a).read(list);
  timed_wait(batch, false);
  unbounce(bounce);
  total_.bytes_read += item_bytes(list);
  return holder.data();
}

std::optional<std::vector<FileExtent>> ArrayStore::link_range(UnitId u, ArrayRef a, std::uint64_t begin,
                                                              std::uint64_t bytes) {
  if (tier(u, a) != MemTier::nvme) return std::nullopt;
  const UnitArrays& us = unit(u);
  const std::size_t e = dtype_size(dtype(u, a));
  SwapDirectory& dir = swap_dir(a);
  const std::filesystem::path links = dir.path() / "checkpoint-snapshot";  // made with the first link
  std::vector<FileExtent> out;
  auto drop = [&out] {
    for (const FileExtent& x : out) {
      if (!x.path.empty()) ::unlink(x.path.c_str());
    }
  };
  const std::uint64_t end = begin + bytes;
  std::uint64_t at = begin;  // the next byte of the range to cover
  try {
    for (std::size_t g = 0; g < us.subgroups.size() && at < end; ++g) {
      const SubGroup& sg = us.subgroups[g];
      std::size_t first = 0, last = 0;
      array_range(us.state_arrays, a, static_cast<std::size_t>(o_.rank), sg.begin, sg.end, first, last);
      const std::uint64_t lo = std::max<std::uint64_t>(first * e, at), hi = std::min<std::uint64_t>(last * e, end);
      if (hi <= lo) continue;
      if (lo > at) break;  // a gap between sub-groups: not a plain array (read it instead)
      const std::string key = swap_key(u, g, a);
      FileExtent x{.path = "", .offset = lo - first * e, .bytes = hi - lo};
      if (dir.find(key) != nullptr) {
        const std::filesystem::path to = links / dir.path_for(key).filename();
        std::filesystem::create_directories(links);
        ::unlink(to.c_str());  // left by a killed save
        if (!dir.link_current(key, to)) {
          drop();
          return std::nullopt;
        }
        x.path = to.string();
      }
      out.push_back(std::move(x));
      at = hi;
    }
  } catch (...) {
    drop();
    throw;
  }
  if (at < end) {
    drop();
    return std::nullopt;
  }
  return out;
}

void ArrayStore::store(UnitId u, ArrayRef a, const void* src) {
  const std::size_t bytes = numel(u, a) * dtype_size(dtype(u, a));
  if (tier(u, a) != MemTier::nvme) {
    ops(u, a).upload(resident(u, a), src, bytes);  // no-op when src is the resident buffer
    return;
  }
  // Writes need 4 KiB aligned buffers padded to 4 KiB: stage through the pool.
  HostBuffer buf = host_.acquire(bytes, MemCategory::unsharded);
  if (bytes > 0) std::memcpy(buf.data(), src, bytes);
  std::vector<std::string> keys;
  std::vector<Bounce> bounce;
  const auto list = items(u, a, buf.data(), false, keys, bounce);
  SwapBatch batch = swap_dir(a).write(list);
  timed_wait(batch, true);
  total_.bytes_written += item_bytes(list);
}

void ArrayStore::zero_grads(UnitId u) {
  DeviceArray& g = unit(u).grad;
  ops(u, {ArrayKind::grad}).zero(g.data(), g.bytes());
  DeviceArray& m = unit(u).micro_grad;
  ops(u, {ArrayKind::micro_grad}).zero(m.data(), m.bytes());
}

void ArrayStore::fold_micro_grad(UnitId u) {
  UnitArrays& us = unit(u);
  if (us.micro_grad.bytes() == 0) return;  // none (ArrayPlanOptions::micro_grad()), or an empty unit
  const std::size_t n = layout_.unit(u).padded;
  ops_.accumulate_cast(us.grad.data(), o_.grad_accum_dtype, us.micro_grad.data(), o_.dtype, n, 1.0f);
  ops_.zero(us.micro_grad.data(), us.micro_grad.bytes());
}

void ArrayStore::accumulate_grad_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                                       float scale, bool boundary) {
  ZS_CHECK(o_.stage >= 2, "accumulate_grad_shard at stage {}: gradients are sharded at stages 2/3 only", o_.stage);
  ZS_CHECK(at + n <= layout_.unit(u).shard, "accumulate_grad_shard: elements [{}, {}) outside the shard of {}", at,
           at + n, layout_.unit(u).shard);
  const MemTier t = tier(u, {ArrayKind::grad});
  if (t == MemTier::device) {
    ops_.accumulate_cast(unit(u).grad.at(at), o_.grad_accum_dtype, src, src_type, n, scale);
    return;
  }
  // The shard is in host memory or on nvme: the reduced block comes to the host.
  HostBuffer holder;
  const void* host_src = host_copy(src, n * dtype_size(src_type), holder, /*settled=*/true);
  if (t == MemTier::host) {
    host_ops_->accumulate_cast(unit(u).grad.at(at), o_.grad_accum_dtype, host_src, src_type, n, scale);
    return;
  }
  if (!deferred_error_.empty()) return;  // finish_reductions() will fail anyway
  try {
    accumulate_nvme_grad(u, at, host_src, src_type, n, scale, boundary);
  } catch (const std::exception& e) {
    deferred_error_ = e.what();
  }
}

void ArrayStore::accumulate_nvme_grad(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                                      float scale, bool boundary) {
  UnitArrays& us = unit(u);
  SwapDirectory& dir = *optimizer_dir_;
  const DType dt = o_.grad_accum_dtype;
  const std::size_t e = dtype_size(dt), se = dtype_size(src_type);
  const ArrayRef a{ArrayKind::grad};
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) {
    const SubGroup& sg = us.subgroups[g];
    const std::size_t lo = std::max(sg.begin, at), hi = std::min(sg.end, at + n);
    if (lo >= hi) continue;
    OpenGradSubGroup& open = open_grad_;
    if (open.unit != u || open.subgroup != g || !open.buffer.valid()) {
      // Write back the sub-group held so far; a key being written would be
      // read at its previous generation, so wait for every write first.
      finish_grad_writes();
      const std::string key = swap_key(u, g, a);
      const std::uint64_t bytes = (sg.end - sg.begin) * e;
      open.buffer = host_.acquire(bytes, MemCategory::unsharded);
      if (dir.find(key) != nullptr) {
        SwapBatch read = dir.read(key, open.buffer.capacity_span());
        timed_wait(read, false);
        total_.bytes_read += bytes;
      } else {
        std::memset(open.buffer.data(), 0, bytes);
      }
      open.unit = u;
      open.subgroup = g;
      open.bytes = bytes;
    }
    std::byte* part = open.buffer.data() + (lo - sg.begin) * e;
    host_ops_->accumulate_cast(part, dt, static_cast<const std::byte*>(src) + (lo - at) * se, src_type, hi - lo,
                               scale);
    if (boundary && hi == sg.end) {
      // The sub-group's gradient is complete (pieces come in increasing
      // order): its statistics, added sub-group by sub-group as grad_stats
      // does for the other tiers, so every tier gives the same bits
      // whatever the bucket pieces were.
      const kernels::GradStats st = host_ops_->grad_stats(open.buffer.data(), dt, sg.end - sg.begin);
      us.nvme_grad_stats.sum_of_squares += st.sum_of_squares;
      us.nvme_grad_stats.nonfinite += st.nonfinite;
    }
  }
}

// Starts writing the open gradient sub-group back (into grad_writes_).
void ArrayStore::flush_open_grad() {
  OpenGradSubGroup& open = open_grad_;
  if (!open.buffer.valid()) return;
  HostBuffer buf = std::move(open.buffer);
  const UnitId u = open.unit;
  open.unit = -1;
  SwapBatch batch = optimizer_dir_->write(swap_key(u, open.subgroup, {ArrayKind::grad}), buf.capacity_span(),
                                          open.bytes);
  total_.bytes_written += open.bytes;
  grad_writes_.push_back(PendingGradWrite{std::move(buf), std::move(batch)});
}

void ArrayStore::finish_grad_writes() {
  if (!optimizer_dir_) return;
  flush_open_grad();
  while (!grad_writes_.empty()) {
    // Pop first: a throwing wait must not be retried by a later call.
    PendingGradWrite w = std::move(grad_writes_.front());
    grad_writes_.pop_front();
    timed_wait(w.batch, true);
  }
}

void ArrayStore::finish_reductions() {
  try {
    finish_grad_writes();
  } catch (const std::exception& e) {
    if (deferred_error_.empty()) deferred_error_ = e.what();
  }
  if (deferred_error_.empty()) return;
  const std::string err = std::move(deferred_error_);
  deferred_error_.clear();
  throw IoError(err);
}

void ArrayStore::clear_nvme_grads() {
  for (auto& us : units_) us.nvme_grad_stats = {};
  if (!optimizer_dir_ || o_.stage < 2) return;
  open_grad_ = {};  // discarded, not written
  finish_grad_writes();
  for (UnitId u = 0; u < static_cast<UnitId>(units_.size()); ++u) {
    if (tier(u, {ArrayKind::grad}) != MemTier::nvme) continue;
    for (std::size_t g = 0; g < unit(u).subgroups.size(); ++g) optimizer_dir_->remove(swap_key(u, g, {ArrayKind::grad}));
  }
}

kernels::GradStats ArrayStore::grad_stats(UnitId u) {
  const ArrayRef a{ArrayKind::grad};
  if (tier(u, a) == MemTier::nvme) return unit(u).nvme_grad_stats;
  const DType dt = o_.grad_accum_dtype;
  const std::size_t shard = layout_.unit(u).shard, e = dtype_size(dt);
  const std::size_t first = o_.stage < 2 ? static_cast<std::size_t>(o_.rank) * shard : 0;
  const std::byte* g = resident(u, a) + first * e;
  // Sub-group by sub-group (sub_group_size; one part for most models), in
  // order: how the nvme tier takes them as each completes.
  const std::size_t sg = std::max<std::size_t>(1, o_.offload.sub_group_elements());
  DeviceOps& o = ops(u, a);
  kernels::GradStats total;
  for (std::size_t b = 0; b < shard; b += sg) {
    const kernels::GradStats st = o.grad_stats(g + b * e, dt, std::min(sg, shard - b));
    total.sum_of_squares += st.sum_of_squares;
    total.nonfinite += st.nonfinite;
  }
  return total;
}

bool ArrayStore::start_param_fetch(UnitId u, bool required) {
  UnitArrays& us = unit(u);
  if (o_.stage != 3 || us.param_tier != MemTier::nvme || us.param_staging.valid()) return true;
  const int limit = o_.offload.param.buffer_count;
  if (param_staging_count_ >= limit) {
    if (!required) return false;
    throw InvariantError(fmt::format(
        "unshard(\"{}\"): all {} parameter swap-in buffers are in use (zero_optimization.offload_param."
        "buffer_count); reshard units earlier or raise buffer_count",
        layout_.unit(u).name, limit));
  }
  const ArrayRef a{ArrayKind::params};
  us.param_staging = host_.acquire(numel(u, a) * dtype_size(o_.dtype), MemCategory::unsharded);
  ++param_staging_count_;
  try {
    std::vector<std::string> keys;
    std::vector<Bounce> bounce;  // parameter shards: sub-groups of 4096 elements, never bounced
    const auto list = items(u, a, us.param_staging.data(), true, keys, bounce);
    ZS_CHECK(bounce.empty(), "unit {}: parameter swap-in needs no bounce buffers", u);
    us.param_read = param_dir_->read(list);
    total_.bytes_read += item_bytes(list);
  } catch (...) {
    release_param_staging(u);
    throw;
  }
  return true;
}

bool ArrayStore::param_staged(UnitId u) const { return unit(u).param_staging.valid(); }

void ArrayStore::adopt_param_staging(UnitId u, HostBuffer shard) {
  UnitArrays& us = unit(u);
  const ArrayRef a{ArrayKind::params};
  ZS_CHECK(o_.stage == 3 && us.param_tier == MemTier::nvme, "adopt_param_staging: unit {}'s parameters are not on nvme",
           u);
  ZS_CHECK(!us.param_staging.valid(), "adopt_param_staging: unit {} already has a swap-in buffer", u);
  ZS_CHECK(shard.valid() && shard.size() >= numel(u, a) * dtype_size(o_.dtype),
           "adopt_param_staging: unit {}: a buffer of {} bytes for a shard of {}", u, shard.size(),
           numel(u, a) * dtype_size(o_.dtype));
  us.param_staging = std::move(shard);
  ++param_staging_count_;
}

const void* ArrayStore::param_source(UnitId u) {
  UnitArrays& us = unit(u);
  if (o_.stage != 3 || us.param_tier != MemTier::nvme) return us.params.data();
  start_param_fetch(u, true);
  if (us.param_read) {
    try {
      timed_wait(*us.param_read, false);
    } catch (...) {
      release_param_staging(u);  // the next unshard reads again
      throw;
    }
    us.param_read.reset();
  }
  return us.param_staging.data();
}

void ArrayStore::release_param_staging(UnitId u) noexcept {
  UnitArrays& us = units_[static_cast<std::size_t>(u)];
  if (!us.param_staging.valid()) return;
  if (us.param_read) {
    try {
      us.param_read->wait();
    } catch (const std::exception&) {
      // The read failed; the buffer is not in use any more (the unit's
      // unshard, if any, fetches again and agrees on that read's error).
    }
    us.param_read.reset();
  }
  us.param_staging.release();
  --param_staging_count_;
}

}  // namespace zeroshard
