// Engine: the training-loop calls. See runtime/engine.h for the contract,
// [Note: gradient semantics] and [Note: mixed precision]; ../shared/DESIGN.md
// "How data flows in one training step" for the order of collectives.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine.h"
#include "runtime/engine_state.h"

namespace zeroshard {

namespace {

// Reduce-scatters in flight at most (each holds a full gradient buffer).
constexpr std::size_t kMaxPendingReduces = 2;
// Elements converted to fp32 at a time for the mixed-precision update.
constexpr std::size_t kUpdateChunk = 16384;

bool is_boundary(const EngineState& s) {
  return (s.micro_steps + 1) % s.config.gradient_accumulation_steps == 0;
}

std::byte* offset(void* p, std::size_t i, DType t) { return static_cast<std::byte*>(p) + i * dtype_size(t); }

// Stage 3: starts the all-gather of unit u's shards into a leased full buffer.
void start_gather(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  us.gathered = s.pool.acquire(info.padded, s.dtype(), false);
  us.gather_work = s.comm.iall_gather(us.params.data(), us.gathered.data(), info.shard, s.dtype());
}

// Stage 3 prefetch: follow the recorded unshard order and start the
// all-gather of the unit expected after u. Every rank makes the same calls,
// so every rank makes the same decision (the prefetch is a collective).
void prefetch_after(EngineState& s, UnitId u) {
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
}

void complete_front_reduce(EngineState& s) {
  PendingReduce& p = s.pending.front();
  p.work.wait();
  accumulate_grad_shard(s, p.unit, 0, p.recv.data(), p.recv.dtype(), p.recv.numel(), s.stored_scale());
  s.pending.pop_front();  // returns the leases to the pool
}

// Stages 2/3: hand unit u's full gradient of this micro-batch to a
// reduce-scatter (in the communication dtype); its block is added to the
// rank's gradient shard when it completes.
void start_reduce_scatter(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  const DType ct = s.comm_dtype();
  if (!us.grad_lease.valid()) us.grad_lease = s.pool.acquire(info.padded, s.dtype(), true);
  PendingReduce p;
  p.unit = u;
  if (ct == s.dtype()) {
    p.send = std::move(us.grad_lease);
  } else {
    p.send = s.pool.acquire(info.padded, ct, false);
    kernels::cast(p.send.data(), ct, us.grad_lease.data(), s.dtype(), info.padded);
    us.grad_lease.release();
  }
  p.recv = s.pool.acquire(info.shard, ct, false);
  p.work = s.comm.ireduce_scatter(p.send.data(), p.recv.data(), info.shard, ct, ReduceOp::sum);
  s.pending.push_back(std::move(p));
  // Retire finished reductions (drives MPI progress) and bound memory.
  while (!s.pending.empty() && (s.pending.size() > kMaxPendingReduces || s.pending.front().work.test())) {
    complete_front_reduce(s);
  }
}

// Stages 0/1: all-reduce unit u's full gradient (in the communication dtype).
void start_all_reduce(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const std::size_t n = s.info(u).padded;
  const DType ct = s.comm_dtype();
  void* buf = us.grad_full.data();
  if (ct != s.dtype()) {
    us.reduce_buffer = s.pool.acquire(n, ct, false);
    kernels::cast(us.reduce_buffer.data(), ct, buf, s.dtype(), n);
    buf = us.reduce_buffer.data();
  }
  us.reduce_work = s.comm.iall_reduce(buf, n, ct, ReduceOp::sum);
}

void finish_all_reduce(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  us.reduce_work.wait();
  const std::size_t n = s.info(u).padded;
  if (us.reduce_buffer.valid()) {
    kernels::cast(us.grad_full.data(), s.dtype(), us.reduce_buffer.data(), us.reduce_buffer.dtype(), n,
                  s.stored_scale());
    us.reduce_buffer.release();
  } else if (s.stored_scale() != 1.0f) {
    kernels::cast(us.grad_full.data(), s.dtype(), us.grad_full.data(), s.dtype(), n, s.stored_scale());
  }
}

// End of a micro-batch: every unit's gradient reduction is issued in unit
// order (for those the loop did not reduce itself) and completed.
void finish_reductions(EngineState& s, bool boundary) {
  const UnitId n = static_cast<UnitId>(s.units.size());
  if (s.stage() >= 2) {
    for (UnitId u = 0; u < n; ++u) {
      if (!s.unit(u).reduced) start_reduce_scatter(s, u);
    }
    while (!s.pending.empty()) complete_front_reduce(s);
  } else if (boundary) {
    for (UnitId u = 0; u < n; ++u) {
      if (!s.unit(u).reduced) start_all_reduce(s, u);
    }
    for (UnitId u = 0; u < n; ++u) finish_all_reduce(s, u);
  }
  for (auto& us : s.units) us.reduced = false;
}

// This rank's shard of the reduced gradient (every element counted once
// across ranks, whatever the stage), in the compute dtype.
void* shard_grads(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (s.stage() < 2) return offset(us.grad_full.data(), static_cast<std::size_t>(s.rank()) * s.info(u).shard, s.dtype());
  return us.grad_shard.data();
}

// Element 0 of the arrays the optimizer walks with UnitState::segments:
// shard-relative at stages 1-3, flat-buffer-relative at stage 0.
std::size_t update_base(const EngineState& s, UnitId u) {
  return s.stage() == 0 ? 0 : static_cast<std::size_t>(s.rank()) * s.info(u).shard;
}

// Runs the optimizer over unit u's segments. fp32: on the parameters in
// place. Mixed: on the fp32 master weights, gradients widened chunk by chunk,
// and the rounded compute copy written back.
void update_unit(EngineState& s, UnitId u, std::int64_t step, float grad_scale, std::vector<float>& scratch) {
  UnitState& us = s.unit(u);
  const DType dt = s.dtype();
  const std::size_t base = update_base(s, u);
  const bool grads_full = s.stage() < 2, params_full = s.stage() < 3;
  void* grads = grads_full ? offset(us.grad_full.data(), base, dt) : us.grad_shard.data();
  void* params = params_full ? offset(us.params.data(), base, dt) : us.params.data();
  std::vector<float*> states(us.states.size());
  for (const ShardSegment& seg : us.segments) {
    const GroupState& g = s.groups[static_cast<std::size_t>(seg.group)];
    const float lr = static_cast<float>(s.lr_at(seg.group, step - 1));
    for (std::size_t off = 0; off < seg.length; off += kUpdateChunk) {
      const std::size_t i = seg.shard_offset + off, n = std::min(kUpdateChunk, seg.length - off);
      for (std::size_t k = 0; k < states.size(); ++k) states[k] = us.states[k].data() + i;
      if (!s.mixed()) {
        optimizer_update(s.config.optimizer, lr, g.weight_decay, step, grad_scale, static_cast<float*>(params) + i,
                         static_cast<const float*>(grads) + i, states.data(), n);
        continue;
      }
      kernels::cast(scratch.data(), DType::f32, offset(grads, i, dt), dt, n);
      optimizer_update(s.config.optimizer, lr, g.weight_decay, step, grad_scale, us.master.data() + i, scratch.data(),
                       states.data(), n);
      kernels::cast(offset(params, i, dt), dt, us.master.data() + i, DType::f32, n);
    }
  }
}

void clear_gradients(EngineState& s) {
  for (auto& us : s.units) {
    us.grad_full.zero();
    us.grad_shard.zero();
  }
}

}  // namespace

void accumulate_grad_shard(EngineState& s, UnitId u, std::size_t at, const void* src, DType src_type,
                           std::size_t n, float scale) {
  UnitState& us = s.unit(u);
  kernels::accumulate_cast(us.grad_shard.at(at), s.dtype(), src, src_type, n, scale);
}

void Engine::unshard(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "unshard() before finalize()");
  UnitState& us = s.unit(u);
  if (s.stage() == 3) {
    if (!us.gathered.valid()) start_gather(s, u);
    prefetch_after(s, u);
    us.gather_work.wait();
  }
  ++us.unshard_count;
}

void Engine::reshard(UnitId u) {
  EngineState& s = *s_;
  UnitState& us = s.unit(u);
  ZS_CHECK(us.unshard_count > 0, "reshard(\"{}\") without a matching unshard()", s.info(u).name);
  if (--us.unshard_count == 0 && s.stage() == 3) {
    us.gather_work.wait();
    us.gathered.release();
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
  if (!us.grad_lease.valid()) us.grad_lease = s.pool.acquire(s.info(info.unit).padded, s.dtype(), true);
  return us.grad_lease.at(info.offset);
}

void Engine::reduce_gradients(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "reduce_gradients() before finalize()");
  UnitState& us = s.unit(u);
  ZS_CHECK(!us.reduced, "reduce_gradients(\"{}\") called twice in one micro-batch", s.info(u).name);
  us.reduced = true;
  if (s.stage() >= 2) {
    start_reduce_scatter(s, u);
  } else if (is_boundary(s)) {
    start_all_reduce(s, u);
  }
}

StepResult Engine::step() {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "step() before finalize()");
  StepResult result;
  result.boundary = is_boundary(s);
  result.loss_scale = loss_scale();
  finish_reductions(s, result.boundary);
  ++s.micro_steps;
  s.recording = false;
  s.cursor = 0;
  result.optimizer_step = s.optimizer_steps;
  if (!result.boundary) return result;

  const UnitId n = static_cast<UnitId>(s.units.size());
  // Global norm and Inf/NaN flag: each rank scans its shard, one all-reduce.
  double stats[2] = {0, 0};
  for (UnitId u = 0; u < n; ++u) {
    const kernels::GradStats st = kernels::grad_stats(shard_grads(s, u), s.dtype(), s.info(u).shard);
    stats[0] += st.sum_of_squares;
    stats[1] += static_cast<double>(st.nonfinite);
  }
  s.comm.all_reduce(stats, 2, DType::f64, ReduceOp::sum);
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
  std::vector<float> scratch(s.mixed() ? kUpdateChunk : 0);
  for (UnitId u = 0; u < n; ++u) update_unit(s, u, step, grad_scale, scratch);

  if (s.stage() == 1 || s.stage() == 2) {
    // Every rank updated its shard of the full buffer: gather in place.
    for (UnitId u = 0; u < n; ++u) {
      UnitState& us = s.unit(u);
      const UnitInfo& info = s.info(u);
      us.gather_work = s.comm.iall_gather(offset(us.params.data(), update_base(s, u), s.dtype()),
                                          us.params.data(), info.shard, s.dtype());
    }
    for (auto& us : s.units) us.gather_work.wait();
  } else if (s.stage() == 3) {
    // Gathered copies are stale now: drop prefetched ones, refresh held ones.
    for (UnitId u = 0; u < n; ++u) {
      UnitState& us = s.unit(u);
      if (!us.gathered.valid()) continue;
      us.gather_work.wait();
      us.gathered.release();
      if (us.unshard_count > 0) {
        start_gather(s, u);
        us.gather_work.wait();
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
