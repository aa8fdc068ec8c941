// The optimizer part of Engine::step(): runs the update over every unit's
// local shard, in memory or sub-group by sub-group through the swap
// pipeline (runtime/sharding/array_store.h, offload/swap_pipeline.h). Units with
// 8-bit states are updated window by window (each rank's shard; the whole
// flat buffer's N windows at stage 0) with their parameter groups as runs
// (optimizer/update_8bit.h), so blocks are the same at every stage and
// tier ([Note: state arrays] in optimizer/state_format.h). Units with
// bf16 states are updated segment by segment as fp32 ones, each segment
// passing its flat-buffer index so stochastic rounding draws the same bits
// at every stage, tier and world size (optimizer/update_bf16.h).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/quant_map.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

namespace {

// The arrays of one unit over update indices [begin, end) (shard-relative at
// stages 1-3, flat at stage 0); every pointer addresses element `begin`.
struct UpdateView {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::byte* params = nullptr;  ///< compute dtype (fp32 training: the optimizer's weights)
  const std::byte* grads = nullptr;
  float* master = nullptr;      ///< mixed precision only
  /// The unit's state arrays (UnitStates): element `begin` of fp32 / bf16
  /// states and 8-bit codes, the absmax entry of that element's block.
  std::vector<std::byte*> states;
};

// The weights, gradients and (mixed precision) compute copy of update index
// v.begin + r: the parameters in place in fp32 training, the master weights
// and the rounded copy in mixed precision. `states` as the kernel takes them.
UpdateArrays update_arrays(const EngineState& s, const UpdateView& v, std::size_t r, std::span<float* const> states) {
  const DType dt = s.dtype();
  const std::size_t e = dtype_size(dt);
  UpdateArrays a{.grads = v.grads + r * e, .grad_dtype = dt, .states = states};
  if (s.mixed()) {
    a.weights = v.master + r;
    a.copy = v.params + r * e;
    a.copy_dtype = dt;
  } else {
    a.weights = reinterpret_cast<float*>(v.params) + r;
  }
  return a;
}

// The 8-bit path of update_view: window by window, the parameter groups of
// each window part as runs.
void update_view_8bit(EngineState& s, DeviceOps& ops, UnitId u, std::int64_t step, float grad_scale,
                      const UpdateView& v) {
  const UnitStates& st = s.store->states(u);
  const std::size_t W = s.info(u).shard, B = st.block, nbw = kernels::quant_block_count(W, B);
  if (W == 0) return;  // an empty unit
  const bool flat = s.stage() == 0;  // the update index space is the full buffer: N windows
  auto absmax_index = [&](std::size_t x) { return flat ? x / W * nbw + x % W / B : x / B; };
  const UnitState& us = s.unit(u);
  std::vector<UpdateRun> runs;
  for (std::size_t wlo = v.begin / W * W; wlo < v.end; wlo += W) {
    const std::size_t lo = std::max(wlo, v.begin), hi = std::min(wlo + W, v.end);
    ZS_CHECK((lo - wlo) % B == 0, "8-bit update of unit {} from element {}: not a block boundary", u, lo);
    runs.clear();
    for (const ShardSegment& seg : us.segments) {
      const std::size_t a = std::max(seg.shard_offset, lo), b = std::min(seg.shard_offset + seg.length, hi);
      if (a >= b) continue;
      const GroupState& g = s.groups[static_cast<std::size_t>(seg.group)];
      runs.push_back(UpdateRun{.begin = a - lo, .end = b - lo, .lr = s.lr_at(seg.group, step - 1),
                               .weight_decay = g.weight_decay});
    }
    if (runs.empty()) continue;
    const std::size_t r = lo - v.begin, q = absmax_index(lo) - absmax_index(v.begin);
    const kernels::Adam8bitState q8{
        .exp_avg_code = reinterpret_cast<std::uint8_t*>(v.states[0]) + r,
        .exp_avg_absmax = reinterpret_cast<float*>(v.states[1]) + q,
        .exp_avg_sq_code = reinterpret_cast<std::uint8_t*>(v.states[2]) + r,
        .exp_avg_sq_absmax = reinterpret_cast<float*>(v.states[3]) + q};
    ops.update_8bit(s.config.optimizer, step, grad_scale, update_arrays(s, v, r, {}), q8, B, runs, hi - lo);
  }
}

// Runs the optimizer over unit u's segments inside the view with `ops`
// (runtime/sharding/device_ops.h), whose memory every pointer of v addresses. fp32:
// on the parameters in place. Mixed: on the fp32 master weights, and the
// rounded compute copy written back.
void update_view(EngineState& s, DeviceOps& ops, UnitId u, std::int64_t step, float grad_scale,
                 const UpdateView& v) {
  const StateDtype sd = s.store->states(u).dtype;
  if (sd == StateDtype::q8) return update_view_8bit(s, ops, u, step, grad_scale, v);
  ZS_CHECK(sd == StateDtype::fp32 || sd == StateDtype::bf16, "unit {}: {} optimizer states have no update path", u,
           state_dtype_name(sd));
  // bf16: flat-buffer index of update index 0 (stochastic rounding stream).
  const std::size_t base = s.stage() == 0 ? 0 : static_cast<std::size_t>(s.rank()) * s.info(u).shard;
  UnitState& us = s.unit(u);
  std::vector<float*> st(v.states.size());
  for (const ShardSegment& seg : us.segments) {
    const std::size_t lo = std::max(seg.shard_offset, v.begin);
    const std::size_t hi = std::min(seg.shard_offset + seg.length, v.end);
    if (lo >= hi) continue;
    const GroupState& g = s.groups[static_cast<std::size_t>(seg.group)];
    const double lr = s.lr_at(seg.group, step - 1);
    const std::size_t r = lo - v.begin;
    if (sd == StateDtype::bf16) {
      ZS_CHECK(v.states.size() == 2, "unit {}: bf16 states with {} arrays (Adam keeps 2)", u, v.states.size());
      ops.update_bf16(s.config.optimizer, lr, g.weight_decay, step, grad_scale, update_arrays(s, v, r, {}),
                      reinterpret_cast<std::uint16_t*>(v.states[0]) + r,
                      reinterpret_cast<std::uint16_t*>(v.states[1]) + r, base + lo, hi - lo);
      continue;
    }
    for (std::size_t k = 0; k < st.size(); ++k) st[k] = reinterpret_cast<float*>(v.states[k]) + r;
    ops.update(s.config.optimizer, lr, g.weight_decay, step, grad_scale, update_arrays(s, v, r, st), hi - lo);
  }
}

// Unit u's resident arrays over [begin, end), or nullptr where an array is
// on nvme (the pipeline supplies those).
UpdateView resident_view(EngineState& s, UnitId u, std::size_t begin, std::size_t end) {
  // Element 0 of the update index space inside full buffers (0 at stage 0).
  const std::size_t base = s.stage() == 0 ? 0 : static_cast<std::size_t>(s.rank()) * s.info(u).shard;
  ArrayStore& store = *s.store;
  const bool full_states = s.stage() == 0;
  auto at = [&](ArrayRef a) -> std::byte* {
    if (store.tier(u, a) == MemTier::nvme) return nullptr;
    const std::size_t sz = dtype_size(store.dtype(u, a));
    if (a.kind == ArrayKind::state) {
      // Full buffer at stage 0 (the view's indices are flat), else the
      // shard: element `begin` of the window it falls in, as array_range
      // maps it (absmax: its block's entry).
      const std::size_t W = s.info(u).shard;
      const std::size_t w = full_states && W > 0 ? begin / W : 0, in = full_states && W > 0 ? begin % W : begin;
      std::size_t first = 0, last = 0;
      array_range(store.states(u), a, in, in, first, last);
      const std::size_t per_window = W > 0 ? store.states(u).array_numel(a.state, W, W) : 0;
      return store.resident(u, a) + (w * per_window + first) * sz;
    }
    const std::size_t first = store.numel(u, a) == s.info(u).padded ? base : 0;
    return store.resident(u, a) + (first + begin) * sz;
  };
  UpdateView v;
  v.begin = begin;
  v.end = end;
  v.params = at({ArrayKind::params});
  v.grads = at({ArrayKind::grad});
  if (s.mixed()) v.master = reinterpret_cast<float*>(at({ArrayKind::master}));
  for (int k = 0; k < store.states(u).arrays(); ++k) v.states.push_back(at({ArrayKind::state, k}));
  return v;
}

// [Note: optimizer on the host for a GPU engine]
// With offload_optimizer on a GPU engine (ZeRO-Offload), the master
// weights and optimizer states are in host memory (or swapped through it)
// and the update runs there, on kernels/cpu. The view's arrays that are in
// device memory (the gradients at stage 1, the parameters unless
// offload_param moved them) are staged through host buffers (page-locked
// with pin_memory): gradients, and fp32 parameters (which the update
// changes in place), are downloaded first; the updated parameters are
// uploaded after. In memory, every unit's downloads are enqueued before the
// first update, and each upload right after its unit's update, so the copies
// run while the CPU updates other units. The staging holds the gradient and
// parameter shards of every staged unit at once (kept by the host pool for
// the next step): host memory of twice the shard in the compute dtype.
struct StagingView {
  UpdateView view;           ///< every pointer in host memory
  HostBuffer grads, params;  ///< staging buffers (invalid: not staged)
  std::byte* device_params = nullptr;  ///< where `params` goes back to
  std::size_t param_bytes = 0;
  OpsFence downloaded;       ///< the downloads are done once this is waited for
};

// Enqueues the downloads of v's device-memory arrays into host buffers.
StagingView start_staging(EngineState& s, UnitId u, const UpdateView& v) {
  StagingView st;
  st.view = v;
  HostPool& pool = s.store->host_pool();
  const std::size_t n = v.end - v.begin, e = dtype_size(s.dtype());
  if (s.store->in_device_memory(u, {ArrayKind::grad})) {
    st.grads = pool.acquire(n * e, MemCategory::unsharded);
    s.ops->download_async(st.grads.data(), v.grads, n * e);
    st.view.grads = st.grads.data();
  }
  if (s.store->in_device_memory(u, {ArrayKind::params})) {
    st.params = pool.acquire(n * e, MemCategory::unsharded);
    st.device_params = v.params;
    st.param_bytes = n * e;
    if (s.mixed()) {
      std::memset(st.params.data(), 0, n * e);  // padding between segments goes back as the zeros it was
    } else {
      s.ops->download_async(st.params.data(), v.params, n * e);
    }
    st.view.params = st.params.data();
  }
  st.downloaded = s.ops->fence();
  return st;
}

// Waits for st's downloads, updates on the host, enqueues the upload.
void update_with_staging(EngineState& s, UnitId u, std::int64_t step, float grad_scale, StagingView& st) {
  s.ops->wait(st.downloaded);
  update_view(s, s.store->host_ops(), u, step, grad_scale, st.view);
  if (st.params.valid()) s.ops->upload_async(st.device_params, st.params.data(), st.param_bytes);
}

// True when unit u's update runs on the host with staged device arrays.
bool needs_staging(const EngineState& s, UnitId u) {
  return !s.ops->host_addressable() && s.store->tier(u, {ArrayKind::master}) != MemTier::device;
}

// The arrays of unit u the pipeline swaps, in slot order.
std::vector<ArrayRef> swapped_arrays(const EngineState& s, UnitId u) {
  std::vector<ArrayRef> out;
  for (ArrayRef a : unit_arrays(s.mixed(), s.store->states(u))) {
    if (s.store->tier(u, a) == MemTier::nvme) out.push_back(a);
  }
  return out;
}

}  // namespace

void run_optimizer(EngineState& s, std::int64_t step, float grad_scale) {
  const UnitId n = static_cast<UnitId>(s.units.size());
  ArrayStore& store = *s.store;
  const bool any_nvme = store.uses_nvme();
  if (!any_nvme) {
    // [Note: optimizer on the host for a GPU engine]: downloads first.
    std::vector<StagingView> staging(static_cast<std::size_t>(n));
    try {
      for (UnitId u = 0; u < n; ++u) {
        if (needs_staging(s, u)) staging[static_cast<std::size_t>(u)] = start_staging(s, u, resident_view(s, u, 0, s.info(u).shard));
      }
      for (UnitId u = 0; u < n; ++u) {
        if (needs_staging(s, u)) {
          update_with_staging(s, u, step, grad_scale, staging[static_cast<std::size_t>(u)]);
        } else {
          const std::size_t end = s.stage() == 0 ? s.info(u).padded : s.info(u).shard;
          update_view(s, *s.ops, u, step, grad_scale, resident_view(s, u, 0, end));
        }
      }
    } catch (...) {
      // No staging buffer goes back to the pool under a copy in flight.
      try {
        s.ops->wait(s.ops->fence());
      } catch (...) {
      }
      throw;
    }
    s.ops->wait(s.ops->fence());  // the uploads read the staging buffers
    return;
  }
  store.finish_grad_writes();
  // Every sub-group of every unit, in order.
  std::vector<std::pair<UnitId, std::size_t>> work;
  for (UnitId u = 0; u < n; ++u) {
    for (std::size_t g = 0; g < store.subgroups(u).size(); ++g) work.emplace_back(u, g);
  }
  std::vector<std::vector<ArrayRef>> arrays(static_cast<std::size_t>(n));
  for (UnitId u = 0; u < n; ++u) arrays[static_cast<std::size_t>(u)] = swapped_arrays(s, u);
  // Parameter slots use param_dir, the others optimizer_dir (one pass).
  const OffloadOptimizerConfig& oc = s.config.offload.optimizer;
  const SwapPipelineOptions options{.buffer_count = oc.buffer_count, .pipeline_read = oc.pipeline_read,
                                    .pipeline_write = oc.pipeline_write, .tracer = s.tracer()};
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
    const TraceScope span(s.tracer(), "sub_group", TraceThread::engine,
                          s.tracer()->spans_on() ? fmt::format("{}/{}", s.info(u).name, g) : std::string());
    UpdateView v = resident_view(s, u, sg.begin, sg.end);
    const auto& list = arrays[static_cast<std::size_t>(u)];
    for (std::size_t k = 0; k < list.size(); ++k) {
      switch (list[k].kind) {
        case ArrayKind::params: v.params = data[k]; break;
        case ArrayKind::grad: v.grads = data[k]; break;
        case ArrayKind::master: v.master = reinterpret_cast<float*>(data[k]); break;
        case ArrayKind::state: v.states[static_cast<std::size_t>(list[k].state)] = data[k]; break;
      }
    }
    if (needs_staging(s, u)) {
      StagingView st = start_staging(s, u, v);
      update_with_staging(s, u, step, grad_scale, st);
      s.ops->wait(s.ops->fence());
    } else {
      // Not staged: every array of the view is in host memory (swap buffers,
      // host tier, or a host_addressable device's).
      update_view(s, store.host_ops(), u, step, grad_scale, v);
    }
  };
  store.last_step() = run_swap_pipeline(store.host_pool(), options, MemCategory::unsharded, work.size(), slots, update);
  store.io_total() += store.last_step();
}

}  // namespace zeroshard
