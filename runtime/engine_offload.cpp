// The engine's offload tiers: tier assignment, whole-array access, the
// stage 3 parameter swap-in and the gradient shard on nvme. See
// [Note: offload in the engine] in runtime/engine_offload.h.
#include "runtime/engine_offload.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "offload/free_space.h"
#include "offload/pinned_host_allocator.h"
#include "runtime/collective_error.h"
#include "runtime/engine_state.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

MemTier tier_of(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::none: return MemTier::device;
    case OffloadDevice::cpu: return MemTier::host;
    case OffloadDevice::nvme: return MemTier::nvme;
  }
  return MemTier::device;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  std::string h(buf);
  for (char& ch : h) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  }
  return h.empty() ? "host" : h;
}

// This engine's swap folder under `base`:
// zeroshard-<host>-<pid>-rank<r>-e<k>, k counting this process's engines (the
// host in the name keeps a shared filesystem's folders apart; k keeps two
// engines of one process apart).
fs::path run_folder(const std::string& base, int rank, int engine) {
  return fs::path(base) / fmt::format("zeroshard-{}-{}-rank{}-e{}", host_name(), ::getpid(), rank, engine);
}

// Removes swap folders a killed run of this host left under `base`: those
// named for this host whose process no longer exists. One log line each.
void remove_stale_folders(const fs::path& base) {
  const std::string prefix = fmt::format("zeroshard-{}-", host_name());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const std::size_t dash = rest.find("-rank");
    if (dash == std::string::npos || dash == 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() + dash || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    const auto n = fs::remove_all(entry.path(), rm);
    if (!rm) fmt::print(stderr, "zeroshard: removed {} ({} files) left by an earlier run (process {} is gone)\n",
                        entry.path().string(), n, pid);
  }
}

// Creates this run's folder for the tier whose nvme_path is `base`.
// Throws IoError naming `key` and the path.
fs::path make_swap_folder(const std::string& base, const std::string& key, int rank, int engine, const char* tier) {
  const fs::path folder = run_folder(base, rank, engine);
  std::error_code ec;
  fs::create_directories(folder / tier, ec);
  if (ec) {
    throw IoError(fmt::format("\"{}\" = \"{}\": cannot create the swap folder {}: {}", key, base,
                              (folder / tier).string(), ec.message()));
  }
  remove_stale_folders(base);
  return folder / tier;
}

std::string array_name(ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return "param";
    case ArrayKind::master: return "master";
    case ArrayKind::state: return fmt::format("state{}", a.state);
    case ArrayKind::grad: return "grad";
  }
  return "?";
}

// Items reading (or writing) every sub-group file of array a of unit u
// from (into) `buf`; for reads, sub-groups never written are zeroed instead.
std::vector<SwapItem> unit_items(EngineState& s, UnitId u, ArrayRef a, std::byte* buf, bool reading,
                                 std::vector<std::string>& keys) {
  const UnitState& us = s.unit(u);
  const std::size_t e = dtype_size(array_dtype(s, a));
  SwapDirectory& dir = *swap_dir(s, a);
  keys.clear();
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) keys.push_back(swap_key(u, g, a));
  std::vector<SwapItem> items;
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) {
    const SubGroup& sg = us.subgroups[g];
    const std::uint64_t bytes = (sg.end - sg.begin) * e;
    std::byte* at = buf + sg.begin * e;
    if (reading && dir.find(keys[g]) == nullptr) {
      std::memset(at, 0, bytes);
      continue;
    }
    items.push_back(SwapItem{.key = keys[g], .buffer = {at, SwapDirectory::padded_size(bytes)}, .bytes = bytes});
  }
  return items;
}

// Waits for `batch`, adding the blocked time to the read or write total.
void timed_wait(EngineState& s, SwapBatch& batch, bool write) {
  const auto t0 = std::chrono::steady_clock::now();
  batch.wait();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (write ? s.offload->total.write_wait_s : s.offload->total.read_wait_s) += dt;
}

std::uint64_t item_bytes(const std::vector<SwapItem>& items) {
  std::uint64_t n = 0;
  for (const SwapItem& it : items) n += it.bytes;
  return n;
}

}  // namespace

std::string swap_key(UnitId u, std::size_t g, ArrayRef a) { return fmt::format("u{}.g{}.{}", u, g, array_name(a)); }

SwapDirectory* swap_dir(EngineState& s, ArrayRef a) {
  SwapDirectory* d = a.kind == ArrayKind::params ? s.offload->param_dir.get() : s.offload->optimizer_dir.get();
  ZS_CHECK(d != nullptr, "no swap directory for array {}", array_name(a));
  return d;
}

DType array_dtype(const EngineState& s, ArrayRef a) {
  return a.kind == ArrayKind::params || a.kind == ArrayKind::grad ? s.dtype() : DType::f32;
}

namespace {

// offload_*.pin_memory: page-locked staging and host-tier buffers.
std::shared_ptr<HostAllocator> host_allocator(const OffloadConfig& c) {
  const bool opt = c.optimizer.device != OffloadDevice::none && c.optimizer.pin_memory;
  const bool param = c.param.device != OffloadDevice::none && c.param.pin_memory;
  return make_host_allocator(opt || param, opt ? "zero_optimization.offload_optimizer.pin_memory"
                                               : "zero_optimization.offload_param.pin_memory");
}

}  // namespace

OffloadRuntime::OffloadRuntime(EngineState& s, std::uint64_t optimizer_bytes, std::uint64_t param_bytes,
                               std::uint64_t in_flight_bytes)
    : host(s.ledger, host_allocator(s.config.offload)) {
  const OffloadConfig& c = s.config.offload;
  if (!c.uses_nvme()) return;
  static std::atomic<int> engines{0};
  const int engine = engines++;
  io = make_io_engine(c.aio);
  std::vector<fs::path> made;
  try {
    if (c.optimizer.device == OffloadDevice::nvme) {
      const fs::path p = make_swap_folder(c.optimizer.nvme_path, "zero_optimization.offload_optimizer.nvme_path",
                                          s.rank(), engine, "optimizer");
      made.push_back(p);
      const bool shared = c.param.device == OffloadDevice::nvme && c.param.nvme_path == c.optimizer.nvme_path;
      check_free_space(p, optimizer_bytes + (shared ? param_bytes : 0) + in_flight_bytes, s.swap_sharers.optimizer);
      optimizer_dir = std::make_unique<SwapDirectory>(*io, p, c.aio);
    }
    if (c.param.device == OffloadDevice::nvme) {
      const fs::path p =
          make_swap_folder(c.param.nvme_path, "zero_optimization.offload_param.nvme_path", s.rank(), engine, "param");
      made.push_back(p);
      check_free_space(p, param_bytes + in_flight_bytes, s.swap_sharers.param);
      param_dir = std::make_unique<SwapDirectory>(*io, p, c.aio);
    }
  } catch (...) {
    // Leave nothing behind: the folders made here are still empty.
    std::error_code ec;
    for (const fs::path& p : made) {
      fs::remove(p, ec);
      fs::remove(p.parent_path(), ec);
    }
    throw;
  }
}

OffloadRuntime::~OffloadRuntime() {
  grad_writes.clear();
  for (auto* dir : {optimizer_dir.get(), param_dir.get()}) {
    if (dir == nullptr) continue;
    std::error_code ec;
    try {
      dir->remove_all();
    } catch (const std::exception& e) {
      fmt::print(stderr, "zeroshard: could not remove swap files in {}: {}\n", dir->path().string(), e.what());
    }
    fs::remove(dir->path(), ec);
    fs::remove(dir->path().parent_path(), ec);  // only if empty: both tiers may share it
  }
}

void assign_offload_tiers(EngineState& s) {
  const OffloadConfig& c = s.config.offload;
  const std::size_t sg = c.sub_group_elements();
  const MemTier opt = tier_of(c.optimizer.device), param = tier_of(c.param.device);
  std::int64_t in_cpu = c.param.max_in_cpu;
  std::uint64_t opt_bytes = 0, param_bytes = 0;
  const std::uint64_t f = sizeof(float), e = dtype_size(s.dtype());
  const int nstates = optimizer_state_count(s.config.optimizer);
  for (std::size_t i = 0; i < s.units.size(); ++i) {
    UnitState& us = s.units[i];
    const UnitInfo& info = s.layout.units()[i];
    const std::size_t shard = info.shard;
    for (std::size_t b = 0; b < shard; b += sg) us.subgroups.push_back(SubGroup{b, std::min(shard, b + sg)});
    if (s.stage() == 0 || shard == 0) continue;
    us.optimizer_tier = opt;
    if (opt == MemTier::nvme) {
      opt_bytes += shard * f * static_cast<std::uint64_t>(nstates + (s.mixed() ? 1 : 0));
      if (s.stage() >= 2) opt_bytes += shard * e;
    }
    if (s.stage() != 3) continue;
    us.param_tier = param;
    if (param == MemTier::nvme && static_cast<std::int64_t>(shard) <= in_cpu) {
      us.param_tier = MemTier::host;  // offload_param.max_in_cpu
      in_cpu -= static_cast<std::int64_t>(shard);
    }
    if (us.param_tier == MemTier::nvme) {
      if (static_cast<std::int64_t>(shard) > c.param.buffer_size) {
        throw ConfigError(fmt::format(
            "{}: unit \"{}\" has a parameter shard of {} elements, more than "
            "zero_optimization.offload_param.buffer_size ({}); raise buffer_size",
            s.config.source, info.name, shard, c.param.buffer_size));
      }
      param_bytes += shard * e;
    }
  }
  if (opt != MemTier::device || param != MemTier::device) {
    // A write goes to a temporary next to the file it replaces: room for
    // every staging set's sub-group (all arrays) and a unit's parameters.
    std::uint64_t largest = 0;
    for (const UnitInfo& info : s.layout.units()) largest = std::max<std::uint64_t>(largest, info.shard);
    const std::uint64_t arrays = static_cast<std::uint64_t>(nstates + 2 + (s.mixed() ? 1 : 0));
    const std::uint64_t in_flight = static_cast<std::uint64_t>(c.optimizer.buffer_count) * arrays * f *
                                        std::min<std::uint64_t>(largest, sg) + largest * e;
    s.offload = std::make_unique<OffloadRuntime>(s, opt_bytes, param_bytes, in_flight);
    // Host-tier arrays come from the same allocator as the staging buffers
    // (page-locked with pin_memory).
    if (auto allocator = host_allocator(c); allocator->pinned()) s.host_ops = make_cpu_ops(std::move(allocator));
  }
}

MemTier array_tier(const EngineState& s, UnitId u, ArrayRef a) {
  const UnitState& us = s.units[static_cast<std::size_t>(u)];
  if (a.kind == ArrayKind::params) return s.stage() == 3 ? us.param_tier : MemTier::device;
  if (a.kind == ArrayKind::grad && s.stage() < 2) return MemTier::device;
  return us.optimizer_tier;
}

bool in_device_memory(const EngineState& s, UnitId u, ArrayRef a) {
  return !s.ops->host_addressable() && array_tier(s, u, a) == MemTier::device;
}

DeviceOps& array_ops(EngineState& s, UnitId u, ArrayRef a) {
  return array_tier(s, u, a) == MemTier::device ? *s.ops : *s.host_ops;
}

const void* host_copy(EngineState& s, const void* src, std::size_t bytes, HostBuffer& holder, bool settled) {
  if (s.ops->host_addressable()) return src;
  holder = (s.offload ? s.offload->host : s.staging).acquire(bytes, MemCategory::unsharded);
  if (settled) {
    s.ops->download_settled(holder.data(), src, bytes);
  } else {
    s.ops->download(holder.data(), src, bytes);
  }
  return holder.data();
}

std::size_t array_numel(const EngineState& s, UnitId u, ArrayRef a) {
  const UnitInfo& info = s.info(u);
  const int stage = s.stage();
  switch (a.kind) {
    case ArrayKind::params: return stage < 3 ? info.padded : info.shard;
    case ArrayKind::grad: return stage < 2 ? info.padded : info.shard;
    default: return stage == 0 ? info.padded : info.shard;
  }
}

std::byte* resident_data(EngineState& s, UnitId u, ArrayRef a) {
  UnitState& us = s.unit(u);
  switch (a.kind) {
    case ArrayKind::params: return static_cast<std::byte*>(us.params.data());
    case ArrayKind::master: return reinterpret_cast<std::byte*>(us.master.data());
    case ArrayKind::state: return reinterpret_cast<std::byte*>(us.states[static_cast<std::size_t>(a.state)].data());
    case ArrayKind::grad:
      return static_cast<std::byte*>(s.stage() < 2 ? us.grad_full.data() : us.grad_shard.data());
  }
  return nullptr;
}

void* read_array(EngineState& s, UnitId u, ArrayRef a, HostBuffer& holder) {
  const std::size_t bytes = array_numel(s, u, a) * dtype_size(array_dtype(s, a));
  if (array_tier(s, u, a) != MemTier::nvme) {
    if (!in_device_memory(s, u, a)) return resident_data(s, u, a);
    return const_cast<void*>(host_copy(s, resident_data(s, u, a), bytes, holder));
  }
  if (a.kind == ArrayKind::grad) finish_grad_writes(s);
  holder = s.offload->host.acquire(bytes, MemCategory::unsharded);
  std::vector<std::string> keys;
  const auto items = unit_items(s, u, a, holder.data(), true, keys);
  SwapBatch batch = swap_dir(s, a)->read(items);
  timed_wait(s, batch, false);
  s.offload->total.bytes_read += item_bytes(items);
  return holder.data();
}

void store_array(EngineState& s, UnitId u, ArrayRef a, const void* src) {
  const std::size_t bytes = array_numel(s, u, a) * dtype_size(array_dtype(s, a));
  if (array_tier(s, u, a) != MemTier::nvme) {
    array_ops(s, u, a).upload(resident_data(s, u, a), src, bytes);  // no-op when src is the resident buffer
    return;
  }
  // Writes need 4 KiB aligned buffers padded to 4 KiB: stage through the pool.
  HostBuffer buf = s.offload->host.acquire(bytes, MemCategory::unsharded);
  if (bytes > 0) std::memcpy(buf.data(), src, bytes);
  std::vector<std::string> keys;
  const auto items = unit_items(s, u, a, buf.data(), false, keys);
  SwapBatch batch = swap_dir(s, a)->write(items);
  timed_wait(s, batch, true);
  s.offload->total.bytes_written += item_bytes(items);
}

bool start_param_fetch(EngineState& s, UnitId u, bool required) {
  UnitState& us = s.unit(u);
  if (s.stage() != 3 || us.param_tier != MemTier::nvme || us.param_stage.valid()) return true;
  OffloadRuntime& off = *s.offload;
  const int limit = s.config.offload.param.buffer_count;
  if (off.params_staged >= limit) {
    if (!required) return false;
    throw InvariantError(fmt::format(
        "unshard(\"{}\"): all {} parameter swap-in buffers are in use (zero_optimization.offload_param."
        "buffer_count); reshard units earlier or raise buffer_count",
        s.info(u).name, limit));
  }
  const ArrayRef a{ArrayKind::params};
  us.param_stage = off.host.acquire(array_numel(s, u, a) * dtype_size(s.dtype()), MemCategory::unsharded);
  ++off.params_staged;
  std::vector<std::string> keys;
  const auto items = unit_items(s, u, a, us.param_stage.data(), true, keys);
  us.param_read = off.param_dir->read(items);
  off.total.bytes_read += item_bytes(items);
  return true;
}

const void* param_source(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (s.stage() != 3 || us.param_tier != MemTier::nvme) return us.params.data();
  start_param_fetch(s, u, true);
  if (us.param_read) {
    timed_wait(s, *us.param_read, false);
    us.param_read.reset();
  }
  return us.param_stage.data();
}

void release_param_stage(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (!us.param_stage.valid()) return;
  if (us.param_read) {
    us.param_read->wait();
    us.param_read.reset();
  }
  us.param_stage.release();
  --s.offload->params_staged;
}

ShardView EngineShardSource::shard(UnitId u) {
  const UnitState& us = s_.unit(u);
  ShardView v{.data = us.params.data(), .host = us.param_tier != MemTier::device};
  // A failed swap-in must stop every rank before the all-gather.
  if (us.param_tier == MemTier::nvme) run_agreed(s_.host_comm, [&] { v.data = param_source(s_, u); });
  return v;
}

void EngineShardSource::prefetch(UnitId u) noexcept {
  try {
    prefetch_param(s_, u);
  } catch (const std::exception&) {
    release(u);  // dropped: the unshard of u fetches again
  }
}

void EngineShardSource::release(UnitId u) noexcept {
  try {
    release_param_stage(s_, u);
  } catch (const std::exception&) {
    // The read failed; the buffer is not in use any more (its unshard, if
    // any, fetches again and agrees on that read's error).
    UnitState& us = s_.unit(u);
    us.param_read.reset();
    if (us.param_stage.valid()) {
      us.param_stage.release();
      --s_.offload->params_staged;
    }
  }
}

namespace {

void accumulate_offloaded_grad_or_throw(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                                        std::size_t n, float scale) {
  UnitState& us = s.unit(u);
  OffloadRuntime& off = *s.offload;
  SwapDirectory& dir = *off.optimizer_dir;
  const DType dt = s.dtype();
  const std::size_t e = dtype_size(dt), se = dtype_size(src_type);
  const ArrayRef a{ArrayKind::grad};
  for (std::size_t g = 0; g < us.subgroups.size(); ++g) {
    const SubGroup& sg = us.subgroups[g];
    const std::size_t lo = std::max(sg.begin, at), hi = std::min(sg.end, at + n);
    if (lo >= hi) continue;
    OpenGradSubGroup& open = off.open_grad;
    if (open.unit != u || open.subgroup != g || !open.buffer.valid()) {
      // Write back the sub-group held so far; a key being written would be
      // read at its previous generation, so wait for every write first.
      finish_grad_writes(s);
      const std::string key = swap_key(u, g, a);
      const std::uint64_t bytes = (sg.end - sg.begin) * e;
      open.buffer = off.host.acquire(bytes, MemCategory::unsharded);
      if (dir.find(key) != nullptr) {
        SwapBatch read = dir.read(key, open.buffer.capacity_span());
        timed_wait(s, read, false);
        off.total.bytes_read += bytes;
      } else {
        std::memset(open.buffer.data(), 0, bytes);
      }
      open.unit = u;
      open.subgroup = g;
      open.bytes = bytes;
    }
    std::byte* part = open.buffer.data() + (lo - sg.begin) * e;
    kernels::accumulate_cast(part, dt, static_cast<const std::byte*>(src) + (lo - at) * se, src_type, hi - lo, scale);
    if (s.boundary() && hi == sg.end) {
      // The sub-group's gradient is complete (pieces come in increasing
      // order): its statistics, added sub-group by sub-group as
      // unit_grad_stats does for the other tiers, so every tier gives the
      // same bits whatever the bucket pieces were.
      const kernels::GradStats st = kernels::grad_stats(open.buffer.data(), dt, sg.end - sg.begin);
      us.offloaded_grad_stats.sum_of_squares += st.sum_of_squares;
      us.offloaded_grad_stats.nonfinite += st.nonfinite;
    }
  }
}

// Starts writing the open gradient sub-group back (into grad_writes).
void flush_open_grad(EngineState& s) {
  OffloadRuntime& off = *s.offload;
  OpenGradSubGroup& open = off.open_grad;
  if (!open.buffer.valid()) return;
  HostBuffer buf = std::move(open.buffer);
  const UnitId u = open.unit;
  open.unit = -1;
  SwapBatch batch = off.optimizer_dir->write(swap_key(u, open.subgroup, {ArrayKind::grad}), buf.capacity_span(),
                                             open.bytes);
  off.total.bytes_written += open.bytes;
  off.grad_writes.push_back(PendingGradWrite{std::move(buf), std::move(batch)});
}

}  // namespace

void accumulate_offloaded_grad(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                               std::size_t n, float scale) {
  if (!s.offload->deferred_error.empty()) return;  // step() will fail anyway
  try {
    accumulate_offloaded_grad_or_throw(s, u, at, src, src_type, n, scale);
  } catch (const std::exception& e) {
    s.offload->deferred_error = e.what();
  }
}

void finish_offloaded_reductions(EngineState& s) {
  OffloadRuntime& off = *s.offload;
  try {
    finish_grad_writes(s);
  } catch (const std::exception& e) {
    if (off.deferred_error.empty()) off.deferred_error = e.what();
  }
  if (off.deferred_error.empty()) return;
  const std::string err = std::move(off.deferred_error);
  off.deferred_error.clear();
  throw IoError(err);
}

void prefetch_param(EngineState& s, UnitId u) {
  try {
    start_param_fetch(s, u, false);
  } catch (const std::exception&) {
    release_param_stage(s, u);
  }
}

void finish_grad_writes(EngineState& s) {
  if (!s.offload) return;
  flush_open_grad(s);
  auto& q = s.offload->grad_writes;
  while (!q.empty()) {
    // Pop first: a throwing wait must not be retried by a later call.
    PendingGradWrite w = std::move(q.front());
    q.pop_front();
    timed_wait(s, w.batch, true);
  }
}

void clear_offloaded_grads(EngineState& s) {
  if (!s.offload || !s.offload->optimizer_dir || s.stage() < 2) return;
  s.offload->open_grad = {};  // discarded, not written
  finish_grad_writes(s);
  for (UnitId u = 0; u < static_cast<UnitId>(s.units.size()); ++u) {
    UnitState& us = s.unit(u);
    us.offloaded_grad_stats = {};
    if (us.optimizer_tier != MemTier::nvme) continue;
    for (std::size_t g = 0; g < us.subgroups.size(); ++g) s.offload->optimizer_dir->remove(swap_key(u, g, {ArrayKind::grad}));
  }
}

kernels::GradStats unit_grad_stats(EngineState& s, UnitId u) {
  if (array_tier(s, u, {ArrayKind::grad}) == MemTier::nvme) return s.unit(u).offloaded_grad_stats;
  const std::size_t shard = s.info(u).shard, e = dtype_size(s.dtype());
  const std::size_t first = s.stage() < 2 ? static_cast<std::size_t>(s.rank()) * shard : 0;
  const std::byte* g = resident_data(s, u, {ArrayKind::grad}) + first * e;
  // Sub-group by sub-group (sub_group_size; one part for most models), in
  // order: how the nvme tier takes them as each completes.
  const std::size_t sg = std::max<std::size_t>(1, s.config.offload.sub_group_elements());
  DeviceOps& ops = array_ops(s, u, {ArrayKind::grad});
  kernels::GradStats total;
  for (std::size_t b = 0; b < shard; b += sg) {
    const kernels::GradStats st = ops.grad_stats(g + b * e, s.dtype(), std::min(sg, shard - b));
    total.sum_of_squares += st.sum_of_squares;
    total.nonfinite += st.nonfinite;
  }
  return total;
}

}  // namespace zeroshard
