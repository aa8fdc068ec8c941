// Engine: the training-loop calls. See runtime/engine/engine.h for the contract,
// [Note: gradient semantics] and [Note: mixed precision]; docs/design.md
// "One training step at stage 3" for the order of collectives.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/save_phases.h"
#include "runtime/engine/engine_state.h"
#include "runtime/engine/storage_phase.h"

namespace zeroshard {

namespace {

// Unit u's gradient into the buckets, its place in the step's reduce order
// recorded ([Note: reduce order check]).
void reduce_unit(EngineState& s, UnitId u) {
  s.progress.order.record(u);
  s.reducer().reduce(u);
}

// End of a micro-batch: at stages 0/1 each unit's micro-batch gradient is
// folded into its accumulator ([Note: gradient accumulator]); every unit's
// gradient reduction is issued in unit order (for those the loop did not
// reduce itself) and completed (runtime/sharding/grad_reducer.h, [Note:
// gradient buckets]).
void finish_reductions(EngineState& s, bool boundary) {
  std::vector<bool>& reduced = s.progress.reduced;
  if (s.store().has_micro_grad()) {
    // Units the loop reduced were folded by reduce_gradients().
    for (UnitId u = 0; u < s.units(); ++u) {
      if (!reduced[static_cast<std::size_t>(u)]) s.store().fold_micro_grad(u);
    }
  }
  if (s.stage() >= 2 || boundary) {
    for (UnitId u = 0; u < s.units(); ++u) {
      if (!reduced[static_cast<std::size_t>(u)]) reduce_unit(s, u);
    }
    s.reducer().complete();
  }
  reduced.assign(reduced.size(), false);
  s.progress.order.end_micro_batch();
}

void clear_gradients(EngineState& s) {
  for (UnitId u = 0; u < s.units(); ++u) s.store().zero_grads(u);
  s.store().clear_nvme_grads();
}

// A skipped boundary (DeepSpeed #8415: a run whose every step is skipped
// trains nothing and looks healthy): one line at the 1st, 2nd, 4th, ...
// skipped step, from the rank that holds the first non-finite unit (rank 0
// when only the norm overflowed), and the agreed error at
// zeroshard.max_consecutive_skipped_steps skips in a row. Every rank sees
// the same totals, so every rank or none enters the error's collective.
void report_skipped_step(EngineState& s, const StepResult& r, const GradTotals& t) {
  const std::int64_t run = ++s.progress.consecutive_skipped, step = s.progress.boundary_steps + 1;
  const std::int64_t limit = s.config.max_consecutive_skipped_steps;
  const int teller = std::max(t.first_nonfinite_rank, 0);
  Communicator& norm = s.comms.norm();
  if (norm.rank() != teller && (limit == 0 || run < limit)) return;
  const std::string first =
      t.first_nonfinite_unit < 0
          ? "no Inf/NaN element, but the gradient norm overflowed"
          : fmt::format("the first in unit \"{}\" on rank {}", s.info(t.first_nonfinite_unit).name, teller);
  if (norm.rank() == teller && (r.skipped_steps & (r.skipped_steps - 1)) == 0) {
    const std::string scale = s.dtype() == DType::f16
                                  ? fmt::format("; loss scale {:g} -> {:g}", r.loss_scale, s.progress.scaler.scale())
                                  : "";
    fmt::print(stderr,
               "zeroshard: step {} skipped for Inf/NaN gradients ({}){}; {} skipped so far, {} in a row (this line "
               "prints at the 1st, 2nd, 4th, 8th, ... skipped step)\n",
               step, first, scale, r.skipped_steps, run);
    std::fflush(stderr);
  }
  if (limit == 0 || run < limit) return;
  const std::string err =
      norm.rank() != teller
          ? ""
          : fmt::format("step {}: {} steps in a row were skipped for Inf/NaN gradients "
                        "(zeroshard.max_consecutive_skipped_steps {}); in this step {}. The run trains nothing: "
                        "look for NaN in the loss or the data, lower the learning rate{}, or raise the limit (0: no "
                        "limit)",
                        step, run, limit, first, s.dtype() == DType::f16 ? " or fp16.initial_scale_power" : "");
  agree_on_error(norm, err, ErrorKind::config);
}

// After this rank's shards changed: the parameters gathered (stages 1/2)
// or the stale gathered copies refreshed (stage 3). Collective.
void regather_parameters(EngineState& s) {
  if (s.stage() == 1 || s.stage() == 2) {
    // Every rank updated its shard of the full buffer: gather, in buckets.
    const TraceScope span(s.tracer(), "all_gather_shards", TraceThread::engine);
    s.reducer().all_gather_shards([&](UnitId u) { return s.store().resident(u, {ArrayKind::params}); });
  } else if (s.stage() == 3) {
    // Gathered and swapped-in copies are stale now: drop prefetched ones,
    // refresh held ones.
    s.unsharder().refresh();
  }
}

// The update of `step` now: every rank's shards (on a parameter-server
// worker: pushed, and the pulls due installed), then the parameters
// gathered, and the gradients cleared.
void update_now(EngineState& s, std::int64_t step, float grad_scale) {
  if (ParameterServerClient* client = s.ps_client.get()) {
    // [Note: parameter-server layout]: a server's error is every worker's.
    bool changed = false;
    run_storage_phase(
        s, "step()", [&] { changed = client->step(step, grad_scale); }, true);
    if (changed) regather_parameters(s);
    clear_gradients(s);
    return;
  }
  if (const TraceScope span(s.tracer(), "optimizer", TraceThread::engine, TimeCategory::optimizer);
      s.store().offloaded()) {
    // A failed sub-group leaves some shards updated and others not.
    s.muon().step(s.store(), s.comms.host(), s.comms.tp(), step, grad_scale,
                  [&](const std::function<void()>& f) { run_storage_phase(s, "step()", f, true); });
    run_storage_phase(s, "step()", [&] { s.optimizer.step(s.store(), step, grad_scale); }, true);
  } else {
    s.muon().step(s.store(), s.comms.host(), s.comms.tp(), step, grad_scale, [](const std::function<void()>& f) { f(); });
    s.optimizer.step(s.store(), step, grad_scale);
  }
  regather_parameters(s);
  clear_gradients(s);
}

// [Note: deferred optimizer step]: the update of `step` started behind the
// next forward; the stale gathered copies dropped first (no swap file is
// read while the step runs), held units gathered again as their updates
// finish; the gradients are cleared when the step is settled.
void start_deferred_update(EngineState& s, DeferredStep& deferred, std::int64_t step, float grad_scale) {
  const std::vector<UnitId> again = s.unsharder().drop_stale();
  run_storage_phase(s, "step()", [&] { deferred.start(step, grad_scale); }, true);
  s.progress.deferred_open = true;
  s.unsharder().regather(again);
}

}  // namespace

void* StoreLink::full_grad(UnitId u) { return store_.resident(u, {ArrayKind::grad}); }

void StoreLink::accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                                 float scale) {
  store_.accumulate_grad_shard(u, at, src, src_type, n, scale, progress_.boundary(accumulation_));
}

ShardView StoreLink::shard(UnitId u) {
  const MemTier tier = store_.tier(u, {ArrayKind::params});
  ShardView v{.data = store_.resident(u, {ArrayKind::params}), .host = tier != MemTier::device};
  // A failed swap-in, or a failed deferred update of u, must stop every
  // rank before the all-gather. With a DeferredStep every tier agrees,
  // whether or not a step is open on this rank now, so that all ranks
  // make the same collectives.
  if (deferred_ != nullptr) {
    run_agreed(host_, [&] {
      wait_for_update(u);
      if (tier == MemTier::nvme) v.data = store_.param_source(u);
    });
  } else if (tier == MemTier::nvme) {
    run_agreed(host_, [&] { v.data = store_.param_source(u); });
  }
  return v;
}

// [Note: deferred optimizer step]: u's update done, its updated shard
// adopted as u's swap-in buffer if handed over; else, with u's shard in a
// swap file, the whole step ended before param_source reads it.
void StoreLink::wait_for_update(UnitId u) {
  HostBuffer updated = deferred_->wait_unit(u);
  if (updated.valid()) {
    store_.release_param_staging(u);  // a fetch started before the step read the old shard
    store_.adopt_param_staging(u, std::move(updated));
  } else if (store_.tier(u, {ArrayKind::params}) == MemTier::nvme && !store_.param_staged(u)) {
    deferred_->finish();
  }
}

void StoreLink::prefetch(UnitId u) noexcept {
  try {
    if (deferred_ != nullptr && !store_.param_staged(u)) {
      HostBuffer updated = deferred_->take_ready(u);
      if (updated.valid()) {
        store_.adopt_param_staging(u, std::move(updated));
        return;
      }
      // The swap files are the step's until it ends; the unshard waits.
      if (!deferred_->ended()) return;
      deferred_->finish();
    }
    store_.start_param_fetch(u, false);
  } catch (const std::exception&) {
    // Dropped (start_param_fetch gave its buffer back), or the deferred
    // step failed: the unshard of u fetches again and agrees on the error.
  }
}

void StoreLink::release(UnitId u) noexcept { store_.release_param_staging(u); }

std::byte* StoreLink::grads(UnitId u) { return store_.resident(u, {ArrayKind::grad}); }

kernels::GradStats StoreLink::shard_stats(UnitId u) { return store_.grad_stats(u); }

void Engine::unshard(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "unshard() before finalize()");
  check_usable(s, "unshard()");
  try {
    s.unsharder().unshard(u);
  } catch (const AgreedError&) {
    // The agreed error of some rank's deferred update ([Note: deferred
    // optimizer step]): the shards are partly updated.
    if (s.progress.deferred_open) {
      s.unusable = fmt::format(
          "the optimizer step {} (zeroshard.overlap_optimizer_step) failed on some rank and "
          "left the engine's state partly written",
          s.progress.optimizer_steps);
    }
    throw;
  }
}

void Engine::reshard(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "reshard() before finalize()");
  s.unsharder().reshard(u);
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
  ZS_CHECK(s.finalized(), "param() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  check_dtype(s, info, expected, "param");
  if (s.stage() < 3) return s.store().resident(info.unit, {ArrayKind::params}) + info.offset * dtype_size(s.dtype());
  if (s.unsharder().count(info.unit) == 0) {
    throw InvariantError(fmt::format(
        "param(\"{}\"): its unit \"{}\" is not unsharded at stage 3; call engine.unshard() first",
        info.name, s.info(info.unit).name));
  }
  return static_cast<std::byte*>(s.unsharder().full(info.unit)) + info.offset * dtype_size(s.dtype());
}

void* Engine::grad_data(ParamId p, DType expected) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "grad() before finalize()");
  const ParamInfo& info = s.layout.param(p);
  check_dtype(s, info, expected, "grad");
  if (s.stage() < 2) {
    // The loop's buffer: the micro-batch gradient beside a wider accumulator, else the accumulator itself.
    const ArrayKind k = s.store().has_micro_grad() ? ArrayKind::micro_grad : ArrayKind::grad;
    return s.store().resident(info.unit, {k}) + info.offset * dtype_size(s.dtype());
  }
  if (s.progress.reduced[static_cast<std::size_t>(info.unit)]) {
    throw InvariantError(fmt::format(
        "grad(\"{}\"): unit \"{}\" already had reduce_gradients() in this micro-batch", info.name,
        s.info(info.unit).name));
  }
  return static_cast<std::byte*>(s.reducer().micro_batch_grad(info.unit)) + info.offset * dtype_size(s.dtype());
}

void Engine::reduce_gradients(UnitId u) {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "reduce_gradients() before finalize()");
  ZS_CHECK(u >= 0 && u < s.units(), "unknown unit id {}", u);
  settle_deferred_step(s, "reduce_gradients()");
  std::vector<bool>& reduced = s.progress.reduced;
  ZS_CHECK(!reduced[static_cast<std::size_t>(u)], "reduce_gradients(\"{}\") called twice in one micro-batch",
           s.info(u).name);
  reduced[static_cast<std::size_t>(u)] = true;
  // Stages 0/1: the micro-batch's gradient joins the accumulator before a
  // reduction reads it ([Note: gradient accumulator]; no-op without one).
  if (s.stage() < 2) s.store().fold_micro_grad(u);
  // Stages 2/3 every micro-batch, 0/1 at the boundary: into the buckets.
  if (s.stage() >= 2 || s.boundary()) reduce_unit(s, u);
}

TraceScope Engine::trace(const char* name, std::string_view unit) {
  Tracer* t = s_->tracer();
  return TraceScope(t, name, TraceThread::loop, TimeCategory::compute,
                    t->spans_on() ? std::string(unit) : std::string());
}

StepResult Engine::step() {
  if (s_->finalized()) settle_deferred_step(*s_, "step()");
  // An async save whose writes all finished commits here, before the step
  // changes anything ([Note: async checkpoint]).
  if (s_->finalized() && s_->boundary()) poll_async_checkpoint(*s_);
  StepResult result = step_body();
  if (result.boundary) {
    EngineState& s = *s_;
    ++s.progress.boundary_steps;
    if (s.observer->gathering()) end_observed_step(s);
    if (s.monitor) write_monitor_step(s, result);
  }
  return result;
}

StepResult Engine::step_body() {
  EngineState& s = *s_;
  ZS_CHECK(s.finalized(), "step() before finalize()");
  check_usable(s, "step()");
  StepResult result;
  result.boundary = s.boundary();
  result.loss_scale = loss_scale();
  {
    const TraceScope span(s.tracer(), "finish_reductions", TraceThread::engine);
    finish_reductions(s, result.boundary);
  }
  ++s.progress.micro_steps;
  // With pipeline stages the forwards and backwards of several micro-batches
  // interleave: the prefetch order is a whole step's ([Note: engine on a mesh]).
  if (s.comms.pp_size() == 1 || result.boundary) s.unsharder().end_micro_batch();
  result.optimizer_step = s.progress.optimizer_steps;
  result.skipped_steps = s.progress.scaler.state().overflows;
  if (!result.boundary) return result;

  // Swap I/O errors of the reductions surface here, on every rank together;
  // the gradient shards are then partly accumulated: [Note: storage phases].
  if (s.store().offloaded()) run_storage_phase(s, "step()", [&] { s.store().finish_reductions(); }, true);
  // Global norm and Inf/NaN flag (runtime/engine/grad_norm.h): tied
  // gradients summed, replicated ones averaged over the tensor-parallel
  // group, each rank's share of its shard, the ranks' two sums combined in
  // rank order.
  // With them, every rank's reduce order ([Note: reduce order check]).
  const GradTotals totals = s.norm.compute(s.parts->link, s.tracer(), s.progress.order.hash());
  if (!totals.orders_agree) {
    // Some gradients are sums of different units: drop them, update nothing.
    const std::string err = s.progress.order.mismatch_message(s.comms.host(), s.layout, s.progress.boundary_steps + 1);
    s.progress.order.clear();
    clear_gradients(s);
    agree_on_error(s.comms.norm(), err, ErrorKind::config);
  }
  s.progress.order.clear();
  // Stored gradients are sums over ranks (an fp32 accumulator) or means (a
  // 16-bit one), of loss-scaled micro-batch means: scale to the mean of the
  // unscaled loss.
  const double ranks = s.config.accumulation_dtype() != DType::f32 ? 1.0 : static_cast<double>(s.world());
  const double average = 1.0 / (ranks * static_cast<double>(s.config.gradient_accumulation_steps) * result.loss_scale);
  result.grad_norm = std::sqrt(totals.sum_of_squares) * average;
  if (totals.nonfinite > 0 || !std::isfinite(result.grad_norm)) {
    // Overflow on some rank: every rank skips together.
    result.skipped = true;
    s.progress.scaler.update(true);
    clear_gradients(s);
    result.skipped_steps = s.progress.scaler.state().overflows;
    report_skipped_step(s, result, totals);
    return result;
  }
  s.progress.consecutive_skipped = 0;
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), used if < 1.
  if (s.config.gradient_clipping > 0) {
    const double coef = s.config.gradient_clipping / (result.grad_norm + 1e-6);
    if (coef < 1.0) result.clip_coef = coef;
  }
  const float grad_scale = static_cast<float>(average * result.clip_coef);

  const std::int64_t step = ++s.progress.optimizer_steps;
  if (DeferredStep* deferred = s.deferred()) {
    start_deferred_update(s, *deferred, step, grad_scale);
  } else {
    update_now(s, step, grad_scale);
  }
  s.progress.scaler.update(false);
  result.applied = true;
  result.optimizer_step = step;
  result.skipped_steps = s.progress.scaler.state().overflows;
  return result;
}

void settle_deferred_step(EngineState& s, const char* call) {
  if (!s.progress.deferred_open) return;
  s.progress.deferred_open = false;
  run_storage_phase(
      s, call, [&] { s.deferred()->finish(); }, true);
  clear_gradients(s);
}

void settle_parameter_server(EngineState& s, const char* call) {
  ParameterServerClient* client = s.ps_client.get();
  if (client == nullptr || client->in_flight() == 0) return;
  run_storage_phase(
      s, call, [&] { client->drain(); }, true);
  regather_parameters(s);
}

void discard_deferred_step(EngineState& s) noexcept {
  DeferredStep* deferred = s.deferred();
  if (deferred == nullptr) return;
  deferred->discard();  // also the error of a step settled before
  if (!s.progress.deferred_open) return;
  s.progress.deferred_open = false;
  try {
    clear_gradients(s);
  } catch (...) {
    // The load resets the state it restores; a gradient file left behind is
    // overwritten by the next reduction.
  }
}

void join_deferred_step(EngineState& s) {
  if (DeferredStep* deferred = s.deferred(); deferred != nullptr && s.progress.deferred_open) deferred->finish();
}

}  // namespace zeroshard
