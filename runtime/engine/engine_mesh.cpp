// The Engine on a device mesh ([Note: engine on a mesh], runtime/engine/engine.h):
// the constructor over a Mesh, tensor-parallel parameter declarations, the
// finalize() checks over the tensor-parallel group, and the boundary
// step's replicated-gradient average and global-norm share.
#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "comm/mesh.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

namespace {

// The constructor's checks before any state exists.
const EngineConfig& checked_for_mesh(const EngineConfig& config, const Mesh& mesh) {
  if (mesh.tp_size() > 1 && config.offload.optimizer.device == OffloadDevice::nvme) {
    throw ConfigError(fmt::format(
        "{}: zero_optimization.offload_optimizer.device \"nvme\" with tensor-parallel size {} (mesh dp={} x "
        "tp={}): the replicated parameters' gradients are averaged over the tensor-parallel group in memory; "
        "use \"cpu\" or \"none\", or tp = 1",
        config.source, mesh.tp_size(), mesh.dp_size(), mesh.tp_size()));
  }
  return config;
}

}  // namespace

Engine::Engine(const EngineConfig& config, const Mesh& mesh) : Engine(checked_for_mesh(config, mesh), mesh.dp_group()) {
  s_->traced_world = std::make_unique<TracedCommunicator>(mesh.world(), "world", s_->traced_options());
  s_->traced_tp = std::make_unique<TracedCommunicator>(mesh.tp_group(), "tp", s_->traced_options());
  s_->traced_pp = std::make_unique<TracedCommunicator>(mesh.pp_group(), "pp", s_->traced_options());
  s_->world_comm = s_->traced_world.get();
  s_->tp_comm = s_->traced_tp.get();
  s_->pp_size = mesh.pp_size();
  s_->pp_rank = mesh.pp_rank();
}

Communicator& Engine::tp_communicator() {
  if (!s_->traced_tp) throw InvariantError("tp_communicator(): only an engine on a mesh (Engine(config, mesh)) has one");
  return *s_->traced_tp;
}

Communicator& Engine::pp_communicator() {
  if (!s_->traced_pp) throw InvariantError("pp_communicator(): only an engine on a mesh (Engine(config, mesh)) has one");
  return *s_->traced_pp;
}

void Engine::tie_parameter(ParamId p, Communicator& group) {
  EngineState& s = *s_;
  if (s.world_comm == nullptr) {
    throw InvariantError("tie_parameter(): only an engine on a mesh (Engine(config, mesh)) ties parameters");
  }
  if (s.finalized) throw InvariantError("tie_parameter() after finalize()");
  if (p < 0 || static_cast<std::size_t>(p) >= s.layout.params().size()) {
    throw InvariantError(fmt::format("tie_parameter(): unknown parameter id {}", p));
  }
  s.ties.push_back(EngineState::Tie{.param = p, .group = &group});
}

int Engine::pp_size() const { return s_->pp_size; }
int Engine::pp_rank() const { return s_->pp_rank; }

ParamId Engine::add_parameter(UnitId unit, std::string name, std::vector<std::int64_t> shape, GroupId group,
                              TensorParallel tp) {
  if (tp.split_dim >= static_cast<int>(shape.size())) {
    throw InvariantError(fmt::format("parameter \"{}\": split_dim {} is outside its {}-dimensional shape", name,
                                     tp.split_dim, shape.size()));
  }
  if (tp.split_dim < -1) tp.split_dim = -1;
  const ParamId id = add_parameter(unit, std::move(name), std::move(shape), group);
  if (s_->param_tp.size() <= static_cast<std::size_t>(id)) s_->param_tp.resize(static_cast<std::size_t>(id) + 1);
  s_->param_tp[static_cast<std::size_t>(id)] = tp;
  return id;
}

int Engine::tp_size() const { return s_->tp_size(); }
int Engine::tp_rank() const { return s_->tp_rank(); }
TensorParallel Engine::param_parallel(ParamId p) const { return s_->param_parallel(p); }

void check_mesh_declarations(EngineState& s) {
  if (s.tp_size() == 1) return;
  // Every rank declares the same model (the fingerprint checks that), so
  // every rank finds the same missing names and throws the same error.
  std::vector<std::string> missing;
  const std::size_t n = s.layout.params().size();
  for (std::size_t p = 0; p < n; ++p) {
    if (p >= s.param_tp.size() || !s.param_tp[p]) missing.push_back(s.layout.param(static_cast<ParamId>(p)).name);
  }
  if (!missing.empty()) {
    throw ConfigError(fmt::format(
        "engine on a mesh with tensor-parallel size {}: declare each parameter as TensorParallel::split(dim) or "
        "TensorParallel::replicated() (add_parameter's last argument); undeclared: {}",
        s.tp_size(), fmt::join(missing, ", ")));
  }
  // The replicated runs of a shard are averaged element by element over the
  // tp group: the tp ranks' flat layouts must be the same.
  std::vector<double> sizes;
  for (std::size_t p = 0; p < n; ++p) sizes.push_back(static_cast<double>(s.layout.param(static_cast<ParamId>(p)).numel));
  std::vector<double> lo = sizes, hi = sizes;
  s.tp_comm->all_reduce(lo.data(), lo.size(), DType::f64, ReduceOp::min);
  s.tp_comm->all_reduce(hi.data(), hi.size(), DType::f64, ReduceOp::max);
  std::string err;
  for (std::size_t p = 0; p < n && err.empty(); ++p) {
    if (lo[p] != hi[p]) {
      err = fmt::format(
          "engine on a mesh: parameter \"{}\" has {} elements on tp rank {} but between {} and {} across the "
          "tensor-parallel group of size {}; every tp rank must hold a slice of the same shape",
          s.layout.param(static_cast<ParamId>(p)).name, sizes[p], s.tp_rank(), lo[p], hi[p], s.tp_size());
    }
  }
  if (!err.empty()) throw AgreedConfigError(err, s.tp_rank());
}

namespace {

// A run of one parameter inside this rank's gradient buffer.
struct GradRun {
  std::byte* data;
  std::size_t n;
  bool replicated;
  bool in_shard;  // counted in the norm (inside this rank's shard window)
  bool tied_copy;  // a tied parameter on a rank other than its group's rank 0
};

// The runs of parameter id's gradient that the optimizer reads on this rank
// (in unit u's gradient buffer g): the whole parameter at stage 0 (each
// rank updates it all), its part of the rank's shard window otherwise.
// `all_at_stage0` false leaves out the stage-0 parts outside the window of
// a split parameter (the tp average needs the replicated ones only).
void param_runs(EngineState& s, ParamId id, bool all_at_stage0, bool tied_copy, std::vector<GradRun>& out) {
  const ParamInfo& p = s.layout.param(id);
  const UnitInfo& info = s.info(p.unit);
  const std::size_t e = dtype_size(s.dtype());
  const std::size_t w0 = static_cast<std::size_t>(s.rank()) * info.shard, w1 = w0 + info.shard;
  std::byte* g = s.store->resident(p.unit, {ArrayKind::grad});
  const bool rep = s.param_parallel(id).is_replicated();
  const std::size_t a = p.offset, b = p.offset + p.numel;
  // Shard window part, then (stage 0) the parts outside it.
  const std::size_t lo = std::max(a, w0), hi = std::min(b, w1);
  if (lo < hi) {
    const std::size_t at = s.stage() >= 2 ? lo - w0 : lo;
    out.push_back(GradRun{g + at * e, hi - lo, rep, true, tied_copy});
  }
  if (s.stage() == 0 && (rep || all_at_stage0)) {
    if (a < std::min(b, w0)) out.push_back(GradRun{g + a * e, std::min(b, w0) - a, rep, false, tied_copy});
    if (std::max(a, w1) < b) {
      out.push_back(GradRun{g + std::max(a, w1) * e, b - std::max(a, w1), rep, false, tied_copy});
    }
  }
}

}  // namespace

void reduce_tied_gradients(EngineState& s) {
  std::vector<GradRun> runs;
  for (const EngineState::Tie& t : s.ties) {
    runs.clear();
    param_runs(s, t.param, true, false, runs);
    t.group->set_label("tied_gradient");
    // The group's ranks hold equal layouts (check_ties): the same runs.
    for (const GradRun& r : runs) t.group->all_reduce(r.data, r.n, s.dtype(), ReduceOp::sum);
  }
}

void check_ties(EngineState& s) {
  if (s.world_comm == nullptr) return;
  std::string err;
  if (!s.ties.empty() && s.config.offload.optimizer.device == OffloadDevice::nvme) {
    err = fmt::format("{}: zero_optimization.offload_optimizer.device \"nvme\" with tied parameter \"{}\": a tied "
                      "gradient is summed over its group in memory; use \"cpu\" or \"none\"",
                      s.config.source, s.layout.param(s.ties.front().param).name);
  }
  for (const EngineState::Tie& t : s.ties) {
    const ParamInfo& p = s.layout.param(t.param);
    const UnitInfo& u = s.info(p.unit);
    const double mine[3] = {static_cast<double>(p.numel), static_cast<double>(p.offset),
                            static_cast<double>(u.padded)};
    std::vector<double> all(3 * static_cast<std::size_t>(t.group->world_size()));
    t.group->all_gather(mine, all.data(), 3, DType::f64);
    for (int r = 1; r < t.group->world_size() && err.empty(); ++r) {
      const double* o = all.data() + 3 * r;
      if (o[0] != all[0] || o[1] != all[1] || o[2] != all[2]) {
        err = fmt::format(
            "tied parameter \"{}\": group rank 0 holds {} elements at offset {} of a unit of {} padded elements, "
            "group rank {} holds {} at offset {} of {}; tied copies must be laid out alike (the same shape, alone "
            "or at the same place in units of equal size)",
            p.name, all[0], all[1], all[2], r, o[0], o[1], o[2]);
      }
    }
  }
  // Ranks without ties (middle pipeline stages) take part: no rank is left
  // in a collective when a tie is wrong.
  agree_on_error(s.norm_comm(), err, ErrorKind::config);
}

kernels::GradStats mesh_grad_stats(EngineState& s) {
  std::vector<bool> tied_copy(s.layout.params().size(), false);
  for (const EngineState::Tie& t : s.ties) {
    if (t.group->rank() != 0) tied_copy[static_cast<std::size_t>(t.param)] = true;
  }
  std::vector<GradRun> runs;
  for (UnitId u = 0; u < static_cast<UnitId>(s.units.size()); ++u) {
    for (ParamId id : s.info(u).params) param_runs(s, id, false, tied_copy[static_cast<std::size_t>(id)], runs);
  }
  // Average the replicated runs over the tp group: one fp32 all-reduce.
  DeviceOps& ops = *s.ops;
  if (s.tp_size() > 1) {
    std::size_t total = 0;
    for (const GradRun& r : runs) total += r.replicated ? r.n : 0;
    // The gradients are in the compute device's memory: every operation on
    // them goes through its DeviceOps (the cast back computes sum * (1/tp) in
    // float and rounds once).
    PoolLease buf = s.pool.acquire(total, DType::f32, false);
    auto* sums = static_cast<float*>(buf.data());
    std::size_t at = 0;
    for (const GradRun& r : runs) {
      if (!r.replicated) continue;
      ops.cast(sums + at, DType::f32, r.data, s.dtype(), r.n, 1.0f);
      at += r.n;
    }
    s.tp_comm->all_reduce(sums, total, DType::f32, ReduceOp::sum);
    const float inv = 1.0f / static_cast<float>(s.tp_size());
    at = 0;
    for (const GradRun& r : runs) {
      if (!r.replicated) continue;
      ops.cast(r.data, s.dtype(), sums + at, DType::f32, r.n, inv);
      at += r.n;
    }
  }
  // This rank's share: split slices always, replicated ones on tp rank 0;
  // Inf/NaN counted everywhere.
  kernels::GradStats out;
  for (const GradRun& r : runs) {
    if (!r.in_shard) continue;
    const kernels::GradStats st = ops.grad_stats(r.data, s.dtype(), r.n);
    if ((!r.replicated || s.tp_rank() == 0) && !r.tied_copy) out.sum_of_squares += st.sum_of_squares;
    out.nonfinite += st.nonfinite;
  }
  return out;
}

}  // namespace zeroshard
