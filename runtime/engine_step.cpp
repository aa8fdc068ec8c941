// Engine: the training-loop calls. See runtime/engine.h for the contract,
// [Note: gradient semantics] and [Note: mixed precision]; docs/design.md
// "One training step at stage 3" for the order of collectives.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/collective_error.h"
#include "runtime/engine.h"
#include "runtime/engine_state.h"
#include "runtime/storage_phase.h"

namespace zeroshard {

namespace {

// Stage 3: starts the all-gather of unit u's shards into a leased full buffer.
void start_gather(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  us.gathered = s.pool.acquire(info.padded, s.dtype(), false);
  const void* src = nullptr;
  if (us.param_tier == MemTier::nvme) {
    // A failed swap-in must stop every rank before the all-gather.
    run_agreed(s.host_comm, [&] { src = param_source(s, u); });
  } else {
    src = us.params.data();
  }
  if (us.param_tier != MemTier::device && !s.ops->host_addressable()) {
    // A shard in host memory goes to the compute device for the collective.
    us.param_upload = s.pool.acquire(info.shard, s.dtype(), false);
    s.ops->upload_async(us.param_upload.data(), src, info.shard * dtype_size(s.dtype()));
    src = us.param_upload.data();
  }
  us.gather_work = s.comm.iall_gather(src, us.gathered.data(), info.shard, s.dtype());
}

// Stage 3: the all-gather of u is complete; drop its nvme swap-in buffer.
void finish_gather(EngineState& s, UnitId u) {
  s.unit(u).gather_work.wait();
  s.unit(u).param_upload.release();
  release_param_stage(s, u);
}

// Stage 3 prefetch: follow the recorded unshard order and start the
// all-gather of the unit expected after u. Every rank makes the same calls,
// so every rank makes the same decision (the prefetch is a collective).
void prefetch_after(EngineState& s, UnitId u) {
  if (!s.config.zero.overlap()) return;  // overlap_comm off: gather on unshard() only
  if (s.recording) {
    s.order.push_back(u);
    return;
  }
  std::size_t pos = s.cursor;
  if (pos >= s.order.size() || s.order[pos] != u) {
    auto it = std::find(s.order.begin(), s.order.end(), u);
    if (it == s.order.end()) return;
    pos = static_cast<std::size_t>(it - s.order.begin());
  }
  s.cursor = pos + 1;
  if (s.cursor >= s.order.size()) return;
  const UnitId next = s.order[s.cursor];
  if (next != u && !s.unit(next).gathered.valid()) start_gather(s, next);
  // nvme parameters: their read runs one unit ahead of the all-gather.
  if (s.cursor + 1 < s.order.size()) prefetch_param(s, s.order[s.cursor + 1]);
}

// End of a micro-batch: every unit's gradient reduction is issued in unit
// order (for those the loop did not reduce itself) and completed
// (runtime/grad_reducer.h, [Note: gradient buckets]).
void finish_reductions(EngineState& s, bool boundary) {
  const UnitId n = static_cast<UnitId>(s.units.size());
  if (s.stage() >= 2 || boundary) {
    for (UnitId u = 0; u < n; ++u) {
      if (!s.unit(u).reduced) s.reducer->reduce(u);
    }
    s.reducer->complete();
  }
  for (auto& us : s.units) us.reduced = false;
}

void clear_gradients(EngineState& s) {
  for (UnitId u = 0; u < static_cast<UnitId>(s.units.size()); ++u) zero_grads(s, u);
  clear_offloaded_grads(s);
}

}  // namespace

void* EngineGradTarget::full_grad(UnitId u) { return s_.unit(u).grad_full.data(); }

void EngineGradTarget::accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                                        float scale) {
  accumulate_grad_shard(s_, u, at, src, src_type, n, scale);
}

void zero_grads(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  DeviceOps& ops = array_ops(s, u, {ArrayKind::grad});
  ops.zero(us.grad_full.data(), us.grad_full.bytes());
  ops.zero(us.grad_shard.data(), us.grad_shard.bytes());
}

void accumulate_grad_shard(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                           std::size_t n, float scale) {
  const MemTier tier = array_tier(s, u, {ArrayKind::grad});
  if (tier == MemTier::device) {
    s.ops->accumulate_cast(s.unit(u).grad_shard.at(at), s.dtype(), src, src_type, n, scale);
    return;
  }
  // The shard is in host memory or on nvme: the reduced block comes to the host.
  HostBuffer holder;
  const void* host_src = host_copy(s, src, n * dtype_size(src_type), holder, /*settled=*/true);
  if (tier == MemTier::nvme) {
    accumulate_offloaded_grad(s, u, at, host_src, src_type, n, scale);
  } else {
    s.host_ops->accumulate_cast(s.unit(u).grad_shard.at(at), s.dtype(), host_src, src_type, n, scale);
  }
}

void Engine::unshard(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "unshard() before finalize()");
  check_usable(s, "unshard()");
  UnitState& us = s.unit(u);
  if (s.stage() == 3) {
    if (!us.gathered.valid()) start_gather(s, u);
    prefetch_after(s, u);
    finish_gather(s, u);
  }
  ++us.unshard_count;
}

void Engine::reshard(UnitId u) {
  EngineState& s = *s_;
  UnitState& us = s.unit(u);
  ZS_CHECK(us.unshard_count > 0, "reshard(\"{}\") without a matching unshard()", s.info(u).name);
  if (--us.unshard_count == 0 && s.stage() == 3) {
    finish_gather(s, u);
    // Reuse: when the recorded order says u is unsharded next (the last
    // unit of forward is the first of backward), keep it gathered rather
    // than free and all-gather it again (DeepSpeed's reuse distance 0).
    const bool next_is_u = !s.recording && s.cursor < s.order.size() && s.order[s.cursor] == u;
    if (!next_is_u) us.gathered.release();
  }
}

namespace {

void check_dtype(const EngineState& s, const ParamInfo& info, DType expected, const char* what) {
  if (expected != s.dtype()) {
    throw InvariantError(fmt::format("{}(\"{}\") as {}: the engine's compute dtype is {}", what, info.name,
                                     dtype_name(expected), dtype_name(s.dtype())));
  }
}

}  // namespace

void* Engine::param_data(ParamId p, DType expected) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "param() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  check_dtype(s, info, expected, "param");
  UnitState& us = s.unit(info.unit);
  if (s.stage() < 3) return us.params.at(info.offset);
  if (us.unshard_count == 0) {
    throw InvariantError(fmt::format(
        "param(\"{}\"): its unit \"{}\" is not unsharded at stage 3; call engine.unshard() first",
        info.name, s.info(info.unit).name));
  }
  return us.gathered.at(info.offset);
}

void* Engine::grad_data(ParamId p, DType expected) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "grad() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  check_dtype(s, info, expected, "grad");
  UnitState& us = s.unit(info.unit);
  if (s.stage() < 2) return us.grad_full.at(info.offset);
  if (us.reduced) {
    throw InvariantError(fmt::format(
        "grad(\"{}\"): unit \"{}\" already had reduce_gradients() in this micro-batch", info.name,
        s.info(info.unit).name));
  }
  return static_cast<std::byte*>(s.reducer->micro_batch_grad(info.unit)) + info.offset * dtype_size(s.dtype());
}

void Engine::reduce_gradients(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "reduce_gradients() before finalize()");
  UnitState& us = s.unit(u);
  ZS_CHECK(!us.reduced, "reduce_gradients(\"{}\") called twice in one micro-batch", s.info(u).name);
  us.reduced = true;
  // Stages 2/3 every micro-batch, 0/1 at the boundary: into the buckets.
  if (s.stage() >= 2 || s.boundary()) s.reducer->reduce(u);
}

StepResult Engine::step() {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "step() before finalize()");
  check_usable(s, "step()");
  StepResult result;
  result.boundary = s.boundary();
  result.loss_scale = loss_scale();
  finish_reductions(s, result.boundary);
  ++s.micro_steps;
  s.recording = false;
  s.cursor = 0;
  result.optimizer_step = s.optimizer_steps;
  if (!result.boundary) return result;

  const UnitId n = static_cast<UnitId>(s.units.size());
  // Swap I/O errors of the reductions surface here, on every rank together.
  if (s.offload) run_agreed(s.host_comm, [&] { finish_offloaded_reductions(s); });
  // Global norm and Inf/NaN flag: each rank scans its shard, one all-reduce.
  // On a mesh ([Note: engine on a mesh]) the replicated gradients are averaged over the
  // tensor-parallel group first, and the sums run over the whole world.
  double stats[2] = {0, 0};
  if (s.tp_size() > 1) {
    const kernels::GradStats st = mesh_grad_stats(s);
    stats[0] = st.sum_of_squares;
    stats[1] = static_cast<double>(st.nonfinite);
  } else {
    for (UnitId u = 0; u < n; ++u) {
      const kernels::GradStats st = unit_grad_stats(s, u);
      stats[0] += st.sum_of_squares;
      stats[1] += static_cast<double>(st.nonfinite);
    }
  }
  s.norm_comm().all_reduce(stats, 2, DType::f64, ReduceOp::sum);
  // Stored gradients are sums over ranks (fp32) or means (16-bit), of
  // loss-scaled micro-batch means: scale to the mean of the unscaled loss.
  const double ranks = s.mixed() ? 1.0 : static_cast<double>(s.world());
  const double average = 1.0 / (ranks * static_cast<double>(s.config.gradient_accumulation_steps) * result.loss_scale);
  result.grad_norm = std::sqrt(stats[0]) * average;
  if (stats[1] > 0 || !std::isfinite(result.grad_norm)) {
    // Overflow on some rank: every rank skips together.
    result.skipped = true;
    s.scaler.update(true);
    clear_gradients(s);
    return result;
  }
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), used if < 1.
  if (s.config.gradient_clipping > 0) {
    const double coef = s.config.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) result.clip_coef = coef;
  }
  const float grad_scale = static_cast<float>(average * result.clip_coef);

  const std::int64_t step = ++s.optimizer_steps;
  if (s.offload) {
    run_agreed(s.host_comm, [&] { run_optimizer(s, step, grad_scale); });
  } else {
    run_optimizer(s, step, grad_scale);
  }

  if (s.stage() == 1 || s.stage() == 2) {
    // Every rank updated its shard of the full buffer: gather, in buckets.
    s.reducer->all_gather_shards([&](UnitId u) { return s.unit(u).params.data(); });
  } else if (s.stage() == 3) {
    // Gathered and swapped-in copies are stale now: drop prefetched ones,
    // refresh held ones.
    for (UnitId u = 0; u < n; ++u) {
      UnitState& us = s.unit(u);
      if (!us.gathered.valid()) {
        release_param_stage(s, u);
        continue;
      }
      finish_gather(s, u);
      us.gathered.release();
      if (us.unshard_count > 0) {
        start_gather(s, u);
        finish_gather(s, u);
      }
    }
  }
  clear_gradients(s);
  s.scaler.update(false);
  result.applied = true;
  result.optimizer_step = step;
  return result;
}

}  // namespace zeroshard
