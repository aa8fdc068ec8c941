// Engine: the training-loop calls. See runtime/engine.h for the contract and
// [Note: gradient semantics]; ../shared/DESIGN.md "How data flows in one
// training step" for the order of collectives.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/reduce_ops.h"
#include "runtime/engine.h"
#include "runtime/engine_state.h"

namespace zeroshard {

namespace {

// Reduce-scatters in flight at most (each holds a full gradient buffer).
constexpr std::size_t kMaxPendingReduces = 2;

bool is_boundary(const EngineState& s) {
  return (s.micro_steps + 1) % s.config.gradient_accumulation_steps == 0;
}

// Stage 3: starts the all-gather of unit u's shards into a leased full buffer.
void start_gather(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  us.gathered = s.pool.acquire(info.padded, false);
  us.gather_work = s.comm.iall_gather(us.params.data(), us.gathered.data(), info.shard, DType::f32);
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
  UnitState& us = s.unit(p.unit);
  kernels::accumulate(us.grad_shard.data(), p.recv.data(), p.recv.size());
  s.pending.pop_front();  // returns both leases to the pool
}

// Stages 2/3: hand unit u's full gradient of this micro-batch to a
// reduce-scatter; its block lands in the rank's gradient shard later.
void start_reduce_scatter(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  const UnitInfo& info = s.info(u);
  if (!us.grad_lease.valid()) us.grad_lease = s.pool.acquire(info.padded, true);
  PendingReduce p;
  p.unit = u;
  p.send = std::move(us.grad_lease);
  p.recv = s.pool.acquire(info.shard, false);
  p.work = s.comm.ireduce_scatter(p.send.data(), p.recv.data(), info.shard, DType::f32, ReduceOp::sum);
  s.pending.push_back(std::move(p));
  // Retire finished reductions (drives MPI progress) and bound memory.
  while (!s.pending.empty() && (s.pending.size() > kMaxPendingReduces || s.pending.front().work.test())) {
    complete_front_reduce(s);
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
      UnitState& us = s.unit(u);
      if (!us.reduced) {
        us.reduce_work = s.comm.iall_reduce(us.grad_full.data(), s.info(u).padded, DType::f32, ReduceOp::sum);
      }
    }
    for (auto& us : s.units) us.reduce_work.wait();
  }
  for (auto& us : s.units) us.reduced = false;
}

// Where the optimizer reads and writes for unit u (see UnitState::segments).
float* update_params(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (s.stage() == 0 || s.stage() == 3) return us.params.data();
  return us.params.data() + static_cast<std::size_t>(s.rank()) * s.info(u).shard;
}

float* update_grads(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (s.stage() == 0) return us.grad_full.data();
  if (s.stage() == 1) return us.grad_full.data() + static_cast<std::size_t>(s.rank()) * s.info(u).shard;
  return us.grad_shard.data();
}

// This rank's shard of the reduced gradient (every element counted once
// across ranks, whatever the stage).
const float* shard_grads(EngineState& s, UnitId u) {
  UnitState& us = s.unit(u);
  if (s.stage() < 2) return us.grad_full.data() + static_cast<std::size_t>(s.rank()) * s.info(u).shard;
  return us.grad_shard.data();
}

}  // namespace

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

std::span<float> Engine::param(ParamId p) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "param() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  UnitState& us = s.unit(info.unit);
  if (s.stage() < 3) return {us.params.data() + info.offset, info.numel};
  if (us.unshard_count == 0) {
    throw InvariantError(fmt::format(
        "param(\"{}\"): its unit \"{}\" is not unsharded at stage 3; call engine.unshard() first",
        info.name, s.info(info.unit).name));
  }
  return {us.gathered.data() + info.offset, info.numel};
}

std::span<float> Engine::grad(ParamId p) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "grad() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  UnitState& us = s.unit(info.unit);
  if (s.stage() < 2) return {us.grad_full.data() + info.offset, info.numel};
  if (us.reduced) {
    throw InvariantError(fmt::format(
        "grad(\"{}\"): unit \"{}\" already had reduce_gradients() in this micro-batch", info.name,
        s.info(info.unit).name));
  }
  if (!us.grad_lease.valid()) us.grad_lease = s.pool.acquire(s.info(info.unit).padded, true);
  return {us.grad_lease.data() + info.offset, info.numel};
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
    us.reduce_work = s.comm.iall_reduce(us.grad_full.data(), s.info(u).padded, DType::f32, ReduceOp::sum);
  }
}

StepResult Engine::step() {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized, "step() before finalize()");
  const bool boundary = is_boundary(s);
  finish_reductions(s, boundary);
  ++s.micro_steps;
  s.recording = false;
  s.cursor = 0;
  StepResult result;
  result.optimizer_step = s.optimizer_steps;
  if (!boundary) return result;

  const UnitId n = static_cast<UnitId>(s.units.size());
  // Global norm: each rank sums the squares of its shard, one all-reduce.
  double sumsq = 0;
  for (UnitId u = 0; u < n; ++u) sumsq += kernels::sum_of_squares(shard_grads(s, u), s.info(u).shard);
  s.comm.all_reduce(&sumsq, 1, DType::f64, ReduceOp::sum);
  const double average = 1.0 / (static_cast<double>(s.world()) * s.config.gradient_accumulation_steps);
  result.grad_norm = std::sqrt(sumsq) * average;
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), used if < 1.
  if (s.config.gradient_clipping > 0) {
    const double coef = s.config.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) result.clip_coef = coef;
  }
  const float grad_scale = static_cast<float>(average * result.clip_coef);

  const std::int64_t step = ++s.optimizer_steps;
  const OptimizerHyper& hyper = s.config.optimizer;
  for (UnitId u = 0; u < n; ++u) {
    UnitState& us = s.unit(u);
    float* params = update_params(s, u);
    const float* grads = update_grads(s, u);
    std::vector<float*> states(us.states.size());
    for (const ShardSegment& seg : us.segments) {
      for (std::size_t k = 0; k < states.size(); ++k) states[k] = us.states[k].data() + seg.shard_offset;
      const GroupState& g = s.groups[static_cast<std::size_t>(seg.group)];
      optimizer_update(hyper, g.lr, g.weight_decay, step, grad_scale, params + seg.shard_offset,
                       grads + seg.shard_offset, states.data(), seg.length);
    }
  }

  if (s.stage() == 1 || s.stage() == 2) {
    // Every rank updated its shard of the full buffer: gather in place.
    for (UnitId u = 0; u < n; ++u) {
      UnitState& us = s.unit(u);
      const UnitInfo& info = s.info(u);
      us.gather_work = s.comm.iall_gather(us.params.data() + static_cast<std::size_t>(s.rank()) * info.shard,
                                          us.params.data(), info.shard, DType::f32);
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

  for (auto& us : s.units) {
    us.grad_full.zero();
    us.grad_shard.zero();
  }
  result.applied = true;
  result.optimizer_step = step;
  return result;
}

}  // namespace zeroshard
