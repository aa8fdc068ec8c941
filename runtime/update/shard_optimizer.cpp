// ShardOptimizer: see runtime/update/shard_optimizer.h.
#include "runtime/update/shard_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"

namespace zeroshard {

// The arrays of one unit over update indices [begin, end) (shard-relative at
// stages 1-3, flat at stage 0); every pointer addresses element `begin`.
struct ShardOptimizer::UpdateView {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::byte* params = nullptr;  ///< compute dtype (fp32 training: the optimizer's weights)
  const std::byte* grads = nullptr;
  float* master = nullptr;      ///< mixed precision only
  /// The unit's state arrays (UnitStates): element `begin` of fp32 / bf16
  /// states and 8-bit codes, the absmax entry of that element's block.
  std::vector<std::byte*> states;
};

// [Note: optimizer on the host for a GPU engine]
// With offload_optimizer on a GPU engine (ZeRO-Offload), the master
// weights and optimizer states are in host memory (or swapped through it)
// and the update runs there, on kernels/cpu. The view's arrays that are in
// device memory (the gradients at stage 1, the parameters unless
// offload_param moved them) are staged through host buffers (page-locked
// with pin_memory): gradients, and fp32 parameters (which the update
// changes in place; in mixed precision those of units with Muon matrices,
// which this update skips), are downloaded first; the updated parameters are
// uploaded after. In memory, every unit's downloads are enqueued before the
// first update, and each upload right after its unit's update, so the copies
// run while the CPU updates other units. The staging holds the gradient and
// parameter shards of every staged unit at once (kept by the host pool for
// the next step): host memory of twice the shard in the compute dtype.
struct ShardOptimizer::StagingView {
  UpdateView view;           ///< every pointer in host memory
  HostBuffer grads, params;  ///< staging buffers (invalid: not staged)
  std::byte* device_params = nullptr;  ///< where `params` goes back to
  std::size_t param_bytes = 0;
  OpsFence downloaded;       ///< the downloads are done once this is waited for
};

namespace {

// Element of state array k (UnitStates) that holds update index x: the
// update index space is the full flat buffer at stage 0 (`flat`: window
// x / W, then x % W inside it), else the shard of W elements (window
// `rank`).
std::size_t state_index(const UnitStates& st, int k, std::size_t x, std::size_t W, bool flat, int rank) {
  const std::size_t w = flat ? x / W : static_cast<std::size_t>(rank), in = flat ? x % W : x;
  std::size_t first = 0, last = 0;
  st.window_range(k, w, in, in, first, last);
  return (flat ? st.window_offset(k, w, W) : 0) + first;
}

// The quantization map of optimizer state i (Adam: exp_avg signed,
// exp_avg_sq unsigned).
kernels::QuantMap map_of(int state) {
  return state == 0 ? kernels::QuantMap::signed_dynamic : kernels::QuantMap::unsigned_dynamic;
}

// The arrays of unit u the pipeline swaps, in slot order.
std::vector<ArrayRef> swapped_arrays(const ArrayStore& store, UnitId u) {
  std::vector<ArrayRef> out;
  for (ArrayRef a : unit_arrays(store.options().plan_options(), store.states(u))) {
    if (store.tier(u, a) == MemTier::nvme) out.push_back(a);
  }
  return out;
}

}  // namespace

ShardOptimizer::ShardOptimizer(const FlatLayout& layout, DeviceOps& ops, ShardOptimizerOptions options)
    : layout_(layout), ops_(ops), o_(std::move(options)), update_hyper_(element_wise_hyper(o_.hyper)) {
  groups_.push_back(ParamGroup{.name = "default", .lr = o_.hyper.lr, .weight_decay = o_.hyper.weight_decay});
  if (o_.hyper.kind == OptimizerKind::muon) {
    groups_.push_back(ParamGroup{.name = "muon", .lr = o_.hyper.muon.lr, .weight_decay = o_.hyper.muon.weight_decay,
                                 .muon = true});
  }
}

GroupId ShardOptimizer::add_group(std::string name, ParamGroupOptions options) {
  const double lr = options.lr.value_or(o_.hyper.lr);
  const double wd = options.weight_decay.value_or(o_.hyper.weight_decay);
  if (!(lr >= 0.0) || !(wd >= 0.0)) {
    throw ConfigError(fmt::format("parameter group \"{}\": lr ({}) and weight_decay ({}) must be >= 0",
                                  name, lr, wd));
  }
  groups_.push_back(ParamGroup{.name = std::move(name), .lr = lr, .weight_decay = wd});
  return static_cast<GroupId>(groups_.size() - 1);
}

const ParamGroup& ShardOptimizer::group(GroupId g) const {
  ZS_CHECK(g >= 0 && static_cast<std::size_t>(g) < groups_.size(), "unknown parameter group {}", g);
  return groups_[static_cast<std::size_t>(g)];
}

double ShardOptimizer::lr_at(GroupId g, std::int64_t k) const {
  return lr_scale_ * o_.schedule.lr_at(k, g, static_cast<int>(groups_.size()), groups_[static_cast<std::size_t>(g)].lr);
}

void ShardOptimizer::set_lr_scale(double scale) {
  ZS_CHECK(std::isfinite(scale) && scale > 0, "learning-rate scale {} (must be finite and > 0)", scale);
  lr_scale_ = scale;
}

void ShardOptimizer::finalize() {
  // A per-group list in the schedule must match the groups: fail now, not at step 1.
  for (GroupId g = 0; g < static_cast<GroupId>(groups_.size()); ++g) lr_at(g, 0);
  segments_.assign(layout_.units().size(), {});
  leaves_muon_.assign(layout_.units().size(), false);
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    std::vector<ShardSegment>& segs = segments_[i];
    if (o_.stage == 0) {
      for (ParamId id : layout_.units()[i].params) {
        const ParamInfo& p = layout_.param(id);
        if (p.numel == 0) continue;
        if (group(p.group).muon) {
          leaves_muon_[i] = true;
          continue;
        }
        segs.push_back(ShardSegment{.shard_offset = p.offset, .flat_offset = p.offset, .length = p.numel,
                                    .param = id, .group = p.group});
      }
    } else {
      for (const ShardSegment& seg : layout_.segments(static_cast<UnitId>(i), o_.rank)) {
        if (group(seg.group).muon) {
          leaves_muon_[i] = true;
        } else {
          segs.push_back(seg);
        }
      }
    }
  }
}

// Runs the optimizer over unit u's segments inside the view with `ops`
// (runtime/sharding/device_ops.h), whose memory every pointer of v addresses,
// window part by window part (blocks of 8-bit states start at each window),
// each part's parameter groups as runs: one DeviceOps::update per part
// whatever the state format. fp32: on the parameters in place. Mixed: on the
// fp32 master weights, and the rounded compute copy written back.
void ShardOptimizer::update_view(const ArrayStore& store, DeviceOps& ops, UnitId u, std::int64_t step,
                                 float grad_scale, const UpdateView& v) const {
  const UnitStates& st = store.states(u);
  const std::size_t W = layout_.unit(u).shard;
  if (W == 0) return;  // an empty unit
  const bool flat = o_.stage == 0;  // the update index space is the full buffer: N windows
  // Flat-buffer index of update index 0 (bf16's stochastic rounding stream).
  const std::size_t base = flat ? 0 : static_cast<std::size_t>(o_.rank) * W;
  const DType dt = o_.dtype, gt = o_.grad_dtype;
  const std::size_t e = dtype_size(dt), ge = dtype_size(gt);
  std::vector<UpdateRun> runs;
  std::vector<void*> arrays(v.states.size());
  for (std::size_t wlo = v.begin / W * W; wlo < v.end; wlo += W) {
    const std::size_t lo = std::max(wlo, v.begin), hi = std::min(wlo + W, v.end);
    ZS_CHECK(st.block == 0 || (lo - wlo) % st.block == 0, "8-bit update of unit {} from element {}: not a block boundary",
             u, lo);
    runs.clear();
    for (const ShardSegment& seg : segments_[static_cast<std::size_t>(u)]) {
      const std::size_t a = std::max(seg.shard_offset, lo), b = std::min(seg.shard_offset + seg.length, hi);
      if (a >= b) continue;
      runs.push_back(UpdateRun{.begin = a - lo, .end = b - lo, .lr = lr_at(seg.group, step - 1),
                               .weight_decay = group(seg.group).weight_decay});
    }
    if (runs.empty()) continue;
    const std::size_t r = lo - v.begin;
    for (int k = 0; k < st.arrays(); ++k) {
      const std::size_t at = state_index(st, k, lo, W, flat, o_.rank) - state_index(st, k, v.begin, W, flat, o_.rank);
      arrays[static_cast<std::size_t>(k)] = v.states[static_cast<std::size_t>(k)] + at * dtype_size(st.array_dtype(k));
    }
    // One update of elements [lo + b, lo + b + n) with `states` for them.
    auto update = [&](std::size_t b, std::size_t n, std::span<void* const> states, std::span<const UpdateRun> rs) {
      RangeUpdate up{.grads = v.grads + (r + b) * ge, .grad_dtype = gt,
                     .states = {.dtype = st.dtype, .arrays = states, .block = st.block, .first_index = base + lo + b},
                     .runs = rs, .n = n};
      if (mixed()) {
        up.weights = v.master + r + b;
        up.copy = v.params + (r + b) * e;
        up.copy_dtype = dt;
      } else {
        up.weights = reinterpret_cast<float*>(v.params) + r + b;
      }
      ops.update(update_hyper_, step, grad_scale, up);
    };
    if (st.packed == nullptr) {
      update(0, hi - lo, arrays, runs);
      continue;
    }
    // [Note: packed states]: run by run, each packed array at the run's
    // packed index (runs are whole kept ranges, so contiguous there).
    const std::size_t w = flat ? lo / W : static_cast<std::size_t>(o_.rank), in = lo - wlo;
    std::vector<void*> run_arrays(arrays.size());
    for (const UpdateRun& run : runs) {
      for (int k = 0; k < st.arrays(); ++k) {
        const std::size_t at = st.packs(k) ? st.packed->index(w, in + run.begin) - st.packed->index(w, in) : run.begin;
        run_arrays[static_cast<std::size_t>(k)] =
            static_cast<std::byte*>(arrays[static_cast<std::size_t>(k)]) + at * dtype_size(st.array_dtype(k));
      }
      const UpdateRun one{.begin = 0, .end = run.end - run.begin, .lr = run.lr, .weight_decay = run.weight_decay};
      update(run.begin, run.end - run.begin, run_arrays, std::span<const UpdateRun>(&one, 1));
    }
  }
}

// Unit u's resident arrays over [begin, end), or nullptr where an array is
// on nvme (the pipeline supplies those).
ShardOptimizer::UpdateView ShardOptimizer::resident_view(ArrayStore& store, UnitId u, std::size_t begin,
                                                         std::size_t end) const {
  const UnitInfo& info = layout_.unit(u);
  // Element 0 of the update index space inside full buffers (0 at stage 0).
  const std::size_t base = o_.stage == 0 ? 0 : static_cast<std::size_t>(o_.rank) * info.shard;
  const bool full_states = o_.stage == 0;
  auto at = [&](ArrayRef a) -> std::byte* {
    if (store.tier(u, a) == MemTier::nvme) return nullptr;
    const std::size_t sz = dtype_size(store.dtype(u, a));
    if (a.kind == ArrayKind::state) {
      // Full buffer at stage 0 (the view's indices are flat), else the
      // shard: element `begin` of the window it falls in, as array_range
      // maps it (absmax: its block's entry).
      const std::size_t W = info.shard;
      const std::size_t w = full_states && W > 0 ? begin / W : static_cast<std::size_t>(o_.rank);
      const std::size_t in = full_states && W > 0 ? begin % W : begin;
      std::size_t first = 0, last = 0;
      array_range(store.states(u), a, w, in, in, first, last);
      const std::size_t offset = full_states && W > 0 ? store.states(u).window_offset(a.state, w, W) : 0;
      return store.resident(u, a) + (offset + first) * sz;
    }
    const std::size_t first = store.numel(u, a) == info.padded ? base : 0;
    return store.resident(u, a) + (first + begin) * sz;
  };
  UpdateView v;
  v.begin = begin;
  v.end = end;
  v.params = at({ArrayKind::params});
  v.grads = at({ArrayKind::grad});
  if (mixed()) v.master = reinterpret_cast<float*>(at({ArrayKind::master}));
  for (int k = 0; k < store.states(u).arrays(); ++k) v.states.push_back(at({ArrayKind::state, k}));
  return v;
}

// Enqueues the downloads of v's device-memory arrays into host buffers.
ShardOptimizer::StagingView ShardOptimizer::start_staging(ArrayStore& store, UnitId u, const UpdateView& v) {
  StagingView st;
  st.view = v;
  HostPool& pool = store.host_pool();
  const std::size_t n = v.end - v.begin, e = dtype_size(o_.dtype), ge = dtype_size(o_.grad_dtype);
  if (store.in_device_memory(u, {ArrayKind::grad})) {
    st.grads = pool.acquire(n * ge, MemCategory::unsharded);
    ops_.download_async(st.grads.data(), v.grads, n * ge);
    st.view.grads = st.grads.data();
  }
  if (store.in_device_memory(u, {ArrayKind::params})) {
    st.params = pool.acquire(n * e, MemCategory::unsharded);
    st.device_params = v.params;
    st.param_bytes = n * e;
    if (mixed() && !leaves_muon_[static_cast<std::size_t>(u)]) {
      // Every element but the padding is written by the update; the
      // padding between segments goes back as the zeros it was.
      std::memset(st.params.data(), 0, n * e);
    } else {
      // fp32: updated in place. Muon's elements (MuonStep wrote them
      // before) must go back as they are.
      ops_.download_async(st.params.data(), v.params, n * e);
    }
    st.view.params = st.params.data();
  }
  st.downloaded = ops_.fence();
  return st;
}

// Waits for st's downloads, updates on the host, enqueues the upload.
void ShardOptimizer::update_with_staging(ArrayStore& store, UnitId u, std::int64_t step, float grad_scale,
                                   StagingView& st) {
  ops_.wait(st.downloaded);
  update_view(store, store.host_ops(), u, step, grad_scale, st.view);
  if (st.params.valid()) ops_.upload_async(st.device_params, st.params.data(), st.param_bytes);
}

// True when unit u's update runs on the host with staged device arrays.
bool ShardOptimizer::needs_staging(const ArrayStore& store, UnitId u) const {
  return !ops_.host_addressable() && store.tier(u, {ArrayKind::master}) != MemTier::device;
}

void ShardOptimizer::step(ArrayStore& store, std::int64_t step, float grad_scale, const SubGroupUpdated& updated) {
  if (store.uses_nvme()) {
    step_swapped(store, step, grad_scale, updated);
  } else {
    step_in_memory(store, step, grad_scale);
  }
}

void ShardOptimizer::step_in_memory(ArrayStore& store, std::int64_t step, float grad_scale) {
  const UnitId n = static_cast<UnitId>(layout_.units().size());
  // [Note: optimizer on the host for a GPU engine]: downloads first.
  std::vector<StagingView> staging(static_cast<std::size_t>(n));
  try {
    for (UnitId u = 0; u < n; ++u) {
      if (needs_staging(store, u)) {
        staging[static_cast<std::size_t>(u)] = start_staging(store, u, resident_view(store, u, 0, layout_.unit(u).shard));
      }
    }
    for (UnitId u = 0; u < n; ++u) {
      if (needs_staging(store, u)) {
        update_with_staging(store, u, step, grad_scale, staging[static_cast<std::size_t>(u)]);
      } else {
        const std::size_t end = o_.stage == 0 ? layout_.unit(u).padded : layout_.unit(u).shard;
        update_view(store, ops_, u, step, grad_scale, resident_view(store, u, 0, end));
      }
    }
  } catch (...) {
    // No staging buffer goes back to the pool under a copy in flight.
    try {
      ops_.wait(ops_.fence());
    } catch (...) {
    }
    throw;
  }
  ops_.wait(ops_.fence());  // the uploads read the staging buffers
}

void ShardOptimizer::step_swapped(ArrayStore& store, std::int64_t step, float grad_scale,
                                  const SubGroupUpdated& updated) {
  const UnitId n = static_cast<UnitId>(layout_.units().size());
  store.finish_grad_writes();
  // Every sub-group of every unit, in order.
  std::vector<std::pair<UnitId, std::size_t>> work;
  for (UnitId u = 0; u < n; ++u) {
    for (std::size_t g = 0; g < store.subgroups(u).size(); ++g) work.emplace_back(u, g);
  }
  std::vector<std::vector<ArrayRef>> arrays(static_cast<std::size_t>(n));
  for (UnitId u = 0; u < n; ++u) arrays[static_cast<std::size_t>(u)] = swapped_arrays(store, u);
  // Parameter slots use param_dir, the others optimizer_dir (one pass).
  const SwapPipelineOptions options{.buffer_count = o_.swap.buffer_count, .pipeline_read = o_.swap.pipeline_read,
                                    .pipeline_write = o_.swap.pipeline_write, .tracer = tracer_};
  auto slots = [&](std::size_t i) {
    const auto [u, g] = work[i];
    std::vector<SwapSlot> out;
    for (ArrayRef a : arrays[static_cast<std::size_t>(u)]) {
      out.push_back(SwapSlot{.key = ArrayStore::swap_key(u, g, a),
                             .bytes = store.subgroup_bytes(u, g, a),
                             .write_back = a.kind != ArrayKind::grad,
                             .dir = &store.swap_dir(a)});
    }
    return out;
  };
  auto update = [&](std::size_t i, std::span<std::byte* const> data) {
    const auto [u, g] = work[i];
    const SubGroup& sg = store.subgroups(u)[g];
    const TraceScope span(tracer_, "sub_group", TraceThread::engine,
                          tracer_ != nullptr && tracer_->spans_on() ? fmt::format("{}/{}", layout_.unit(u).name, g)
                                                                    : std::string());
    UpdateView v = resident_view(store, u, sg.begin, sg.end);
    const auto& list = arrays[static_cast<std::size_t>(u)];
    for (std::size_t k = 0; k < list.size(); ++k) {
      switch (list[k].kind) {
        case ArrayKind::params: v.params = data[k]; break;
        case ArrayKind::grad: v.grads = data[k]; break;
        case ArrayKind::micro_grad: break;  // stages 0/1, never on nvme
        case ArrayKind::master: v.master = reinterpret_cast<float*>(data[k]); break;
        case ArrayKind::state: v.states[static_cast<std::size_t>(list[k].state)] = data[k]; break;
      }
    }
    if (needs_staging(store, u)) {
      StagingView st = start_staging(store, u, v);
      update_with_staging(store, u, step, grad_scale, st);
      ops_.wait(ops_.fence());
    } else {
      // Not staged: every array of the view is in host memory (swap buffers,
      // host tier, or a host_addressable device's).
      update_view(store, store.host_ops(), u, step, grad_scale, v);
    }
    if (updated) updated(u, g, v.params, sg.begin, sg.end);
  };
  store.last_step() = run_swap_pipeline(store.host_pool(), options, MemCategory::unsharded, work.size(), slots, update);
  store.io_total() += store.last_step();
}

std::pair<std::size_t, std::size_t> ShardOptimizer::state_window_range(const ArrayStore& store, UnitId u, int k,
                                                                       int w) const {
  const UnitStates& st = store.states(u);
  ZS_CHECK(k >= 0 && k < st.arrays(), "unit {}: state array {} of {}", u, k, st.arrays());
  ZS_CHECK(o_.stage == 0 || w == o_.rank, "state window {} is not on rank {} at stage {}", w, o_.rank, o_.stage);
  const std::size_t W = layout_.unit(u).shard;
  const auto wi = static_cast<std::size_t>(w);
  const std::size_t e = dtype_size(st.array_dtype(k));
  return {o_.stage == 0 ? st.window_offset(k, wi, W) * e : 0, st.window_numel(k, wi, W) * e};
}

void ShardOptimizer::with_state_array_window(ArrayStore& store, UnitId u, int k, int w,
                                            const std::function<void(std::span<const std::byte>)>& use) const {
  const UnitStates& st = store.states(u);
  const auto [offset, bytes] = state_window_range(store, u, k, w);
  const std::size_t W = layout_.unit(u).shard;
  const auto wi = static_cast<std::size_t>(w);
  const std::size_t e = dtype_size(st.array_dtype(k));
  HostBuffer holder;
  const auto* p = static_cast<const std::byte*>(store.read(u, {ArrayKind::state, k}, holder));
  if (!st.packs(k)) {
    use(std::span<const std::byte>(bytes == 0 ? nullptr : p + offset, bytes));
    return;
  }
  // [Note: packed states]: expanded to the window, 0 at the other elements.
  std::vector<std::byte> out(W * e);
  std::size_t at = offset;
  for (const auto& [b, end] : st.packed->runs.at(wi)) {
    std::memcpy(out.data() + b * e, p + at, (end - b) * e);
    at += (end - b) * e;
  }
  use(out);
}

std::vector<std::byte> ShardOptimizer::state_array_window(ArrayStore& store, UnitId u, int k, int w) const {
  std::vector<std::byte> out;
  with_state_array_window(store, u, k, w, [&out](std::span<const std::byte> b) { out.assign(b.begin(), b.end()); });
  return out;
}

std::vector<float> ShardOptimizer::state_window_f32(ArrayStore& store, UnitId u, int state, int w) const {
  const UnitStates& st = store.states(u);
  ZS_CHECK(state >= 0 && state < st.count, "optimizer state index {} out of range ({} states)", state, st.count);
  const std::size_t W = layout_.unit(u).shard;
  std::vector<float> out(W);
  switch (st.dtype) {
    case StateDtype::fp32: {
      const std::vector<std::byte> b = state_array_window(store, u, state, w);
      if (W > 0) std::memcpy(out.data(), b.data(), W * sizeof(float));
      break;
    }
    case StateDtype::bf16: {
      const std::vector<std::byte> b = state_array_window(store, u, state, w);
      for (std::size_t i = 0; i < W; ++i) {
        std::uint16_t h;
        std::memcpy(&h, b.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
      }
      break;
    }
    case StateDtype::q8: {
      const std::vector<std::byte> codes = state_array_window(store, u, 2 * state, w);
      const std::vector<std::byte> absmax = state_array_window(store, u, 2 * state + 1, w);
      if (W > 0) {
        kernels::dequantize_blockwise(reinterpret_cast<const std::uint8_t*>(codes.data()),
                                      reinterpret_cast<const float*>(absmax.data()), W, st.block, map_of(state),
                                      out.data());
      }
      break;
    }
  }
  return out;
}

std::vector<std::vector<std::byte>> ShardOptimizer::state_arrays_from_f32(
    const ArrayStore& store, UnitId u, int w, const std::vector<std::vector<float>>& values) const {
  const UnitStates& st = store.states(u);
  ZS_CHECK(values.size() == static_cast<std::size_t>(st.count), "unit {}: {} state value arrays for {} states", u,
           values.size(), st.count);
  const std::size_t W = layout_.unit(u).shard;
  std::vector<std::vector<std::byte>> out;
  for (int i = 0; i < st.count; ++i) {
    const std::vector<float>& v = values[static_cast<std::size_t>(i)];
    ZS_CHECK(v.size() == W, "unit {}: state {} has {} values for a window of {}", u, i, v.size(), W);
    switch (st.dtype) {
      case StateDtype::fp32: {
        if (st.packs(i)) {  // [Note: packed states]: the kept runs only
          out.emplace_back();
          for (const auto& [b, e] : st.packed->runs.at(static_cast<std::size_t>(w))) {
            const auto* from = reinterpret_cast<const std::byte*>(v.data() + b);
            out.back().insert(out.back().end(), from, from + (e - b) * sizeof(float));
          }
          break;
        }
        out.emplace_back(W * sizeof(float));
        if (W > 0) std::memcpy(out.back().data(), v.data(), W * sizeof(float));
        break;
      }
      case StateDtype::bf16: {
        out.emplace_back(W * 2);
        for (std::size_t j = 0; j < W; ++j) {
          const std::uint16_t h = float_to_bf16(v[j]);
          std::memcpy(out.back().data() + 2 * j, &h, 2);
        }
        break;
      }
      case StateDtype::q8: {
        std::vector<std::byte> codes(W), absmax(kernels::quant_block_count(W, st.block) * sizeof(float));
        if (W > 0) {
          kernels::quantize_blockwise(v.data(), W, st.block, map_of(i), reinterpret_cast<std::uint8_t*>(codes.data()),
                                      reinterpret_cast<float*>(absmax.data()));
        }
        out.push_back(std::move(codes));
        out.push_back(std::move(absmax));
        break;
      }
    }
  }
  return out;
}

}  // namespace zeroshard
