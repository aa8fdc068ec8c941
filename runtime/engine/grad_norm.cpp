// GradNorm: see runtime/engine/grad_norm.h.
#include "runtime/engine/grad_norm.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/collective_error.h"
#include "core/error.h"

namespace zeroshard {

GradNorm::GradNorm(const FlatLayout& layout, DeviceOps& ops, BufferPool& pool, Communicator* tp, Communicator& norm,
                   GradNormOptions options)
    : layout_(layout), ops_(ops), pool_(pool), tp_(tp), norm_(norm), o_(std::move(options)) {}

void GradNorm::declare(ParamId p, TensorParallel tp) {
  ZS_CHECK(p >= 0, "GradNorm::declare: parameter id {}", p);
  if (declared_.size() <= static_cast<std::size_t>(p)) declared_.resize(static_cast<std::size_t>(p) + 1);
  declared_[static_cast<std::size_t>(p)] = tp;
}

TensorParallel GradNorm::parallel(ParamId p) const {
  const auto i = static_cast<std::size_t>(p);
  return i < declared_.size() && declared_[i] ? *declared_[i] : TensorParallel::replicated();
}

void GradNorm::tie(ParamId p, Communicator& group) { ties_.push_back(Tie{.param = p, .group = &group}); }

void GradNorm::check_declarations() {
  if (tp_size() == 1) return;
  // Every rank declares the same model (the fingerprint checks that), so
  // every rank finds the same missing names and throws the same error.
  std::vector<std::string> missing;
  const std::size_t n = layout_.params().size();
  for (std::size_t p = 0; p < n; ++p) {
    if (p >= declared_.size() || !declared_[p]) missing.push_back(layout_.param(static_cast<ParamId>(p)).name);
  }
  if (!missing.empty()) {
    throw ConfigError(fmt::format(
        "engine on a mesh with tensor-parallel size {}: declare each parameter as TensorParallel::split(dim) or "
        "TensorParallel::replicated() (add_parameter's last argument); undeclared: {}",
        tp_size(), fmt::join(missing, ", ")));
  }
  // The replicated runs of a shard are averaged element by element over the
  // tp group: the tp ranks' flat layouts must be the same.
  std::vector<double> sizes;
  for (std::size_t p = 0; p < n; ++p) sizes.push_back(static_cast<double>(layout_.param(static_cast<ParamId>(p)).numel));
  std::vector<double> lo = sizes, hi = sizes;
  tp_->all_reduce(lo.data(), lo.size(), DType::f64, ReduceOp::min);
  tp_->all_reduce(hi.data(), hi.size(), DType::f64, ReduceOp::max);
  std::string err;
  for (std::size_t p = 0; p < n && err.empty(); ++p) {
    if (lo[p] != hi[p]) {
      err = fmt::format(
          "engine on a mesh: parameter \"{}\" has {} elements on tp rank {} but between {} and {} across the "
          "tensor-parallel group of size {}; every tp rank must hold a slice of the same shape",
          layout_.param(static_cast<ParamId>(p)).name, sizes[p], tp_rank(), lo[p], hi[p], tp_size());
    }
  }
  if (!err.empty()) throw AgreedConfigError(err, tp_rank());
}

void GradNorm::check_ties() {
  std::string err;
  if (!ties_.empty() && o_.optimizer_on_nvme) {
    err = fmt::format("{}: zero_optimization.offload_optimizer.device \"nvme\" with tied parameter \"{}\": a tied "
                      "gradient is summed over its group in memory; use \"cpu\" or \"none\"",
                      o_.source, layout_.param(ties_.front().param).name);
  }
  for (const Tie& t : ties_) {
    const ParamInfo& p = layout_.param(t.param);
    const UnitInfo& u = layout_.unit(p.unit);
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
  agree_on_error(norm_, err, ErrorKind::config);
}

// The runs of parameter id's gradient that the optimizer reads on this rank
// (in its unit's gradient buffer): the whole parameter at stage 0 (each
// rank updates it all), its part of the rank's shard window otherwise.
// `all_at_stage0` false leaves out the stage-0 parts outside the window of
// a split parameter (the tp average needs the replicated ones only).
void GradNorm::param_runs(GradSource& grads, ParamId id, bool all_at_stage0, bool tied_copy,
                          std::vector<GradRun>& out) const {
  const ParamInfo& p = layout_.param(id);
  const UnitInfo& info = layout_.unit(p.unit);
  const std::size_t e = dtype_size(o_.dtype);
  const std::size_t w0 = static_cast<std::size_t>(o_.rank) * info.shard, w1 = w0 + info.shard;
  std::byte* g = grads.grads(p.unit);
  const bool rep = parallel(id).is_replicated();
  const std::size_t a = p.offset, b = p.offset + p.numel;
  // Shard window part, then (stage 0) the parts outside it.
  const std::size_t lo = std::max(a, w0), hi = std::min(b, w1);
  if (lo < hi) {
    const std::size_t at = o_.stage >= 2 ? lo - w0 : lo;
    out.push_back(GradRun{g + at * e, hi - lo, rep, true, tied_copy, p.unit});
  }
  if (o_.stage == 0 && (rep || all_at_stage0)) {
    if (a < std::min(b, w0)) out.push_back(GradRun{g + a * e, std::min(b, w0) - a, rep, false, tied_copy, p.unit});
    if (std::max(a, w1) < b) {
      out.push_back(GradRun{g + std::max(a, w1) * e, b - std::max(a, w1), rep, false, tied_copy, p.unit});
    }
  }
}

void GradNorm::reduce_ties(GradSource& grads) {
  std::vector<GradRun> runs;
  for (const Tie& t : ties_) {
    runs.clear();
    param_runs(grads, t.param, true, false, runs);
    t.group->set_label("tied_gradient");
    // The group's ranks hold equal layouts (check_ties): the same runs.
    for (const GradRun& r : runs) t.group->all_reduce(r.data, r.n, o_.dtype, ReduceOp::sum);
  }
}

kernels::GradStats GradNorm::mesh_stats(GradSource& grads, UnitId& first_nonfinite) {
  std::vector<bool> tied_copy(layout_.params().size(), false);
  for (const Tie& t : ties_) {
    if (t.group->rank() != 0) tied_copy[static_cast<std::size_t>(t.param)] = true;
  }
  std::vector<GradRun> runs;
  for (UnitId u = 0; u < static_cast<UnitId>(layout_.units().size()); ++u) {
    for (ParamId id : layout_.unit(u).params) {
      param_runs(grads, id, false, tied_copy[static_cast<std::size_t>(id)], runs);
    }
  }
  // Average the replicated runs over the tp group: one fp32 all-reduce.
  if (tp_size() > 1) {
    std::size_t total = 0;
    for (const GradRun& r : runs) total += r.replicated ? r.n : 0;
    // The gradients are in the compute device's memory: every operation on
    // them goes through its DeviceOps (the cast back computes sum * (1/tp) in
    // float and rounds once).
    PoolLease buf = pool_.acquire(total, DType::f32, false);
    auto* sums = static_cast<float*>(buf.data());
    std::size_t at = 0;
    for (const GradRun& r : runs) {
      if (!r.replicated) continue;
      ops_.cast(sums + at, DType::f32, r.data, o_.dtype, r.n, 1.0f);
      at += r.n;
    }
    tp_->all_reduce(sums, total, DType::f32, ReduceOp::sum);
    const float inv = 1.0f / static_cast<float>(tp_size());
    at = 0;
    for (const GradRun& r : runs) {
      if (!r.replicated) continue;
      ops_.cast(r.data, o_.dtype, sums + at, DType::f32, r.n, inv);
      at += r.n;
    }
  }
  // This rank's share: split slices always, replicated ones on tp rank 0;
  // Inf/NaN counted everywhere.
  kernels::GradStats out;
  for (const GradRun& r : runs) {
    if (!r.in_shard) continue;
    const kernels::GradStats st = ops_.grad_stats(r.data, o_.dtype, r.n);
    if ((!r.replicated || tp_rank() == 0) && !r.tied_copy) out.sum_of_squares += st.sum_of_squares;
    out.nonfinite += st.nonfinite;
    if (st.nonfinite > 0 && first_nonfinite < 0) first_nonfinite = r.unit;
  }
  return out;
}

namespace {

// What each rank sends in the norm exchange: the two sums, then the fields
// every rank needs from every other one.
enum NormField : std::size_t { sum_of_squares, nonfinite, first_unit, hash_high, hash_low, dp_group, fields };

}  // namespace

GradTotals GradNorm::compute(GradSource& grads, Tracer* tracer, std::uint64_t order_hash) {
  double mine[fields] = {0, 0, -1, static_cast<double>(order_hash >> 32),
                         static_cast<double>(order_hash & 0xffffffffu), static_cast<double>(o_.dp_group)};
  UnitId first = -1;
  if (!ties_.empty()) {
    const TraceScope span(tracer, "tied_gradients", TraceThread::engine);
    reduce_ties(grads);
  }
  if (tp_size() > 1 || !ties_.empty()) {
    const kernels::GradStats st = mesh_stats(grads, first);
    mine[sum_of_squares] = st.sum_of_squares;
    mine[nonfinite] = static_cast<double>(st.nonfinite);
  } else {
    for (UnitId u = 0; u < static_cast<UnitId>(layout_.units().size()); ++u) {
      const kernels::GradStats st = grads.shard_stats(u);
      mine[sum_of_squares] += st.sum_of_squares;
      mine[nonfinite] += static_cast<double>(st.nonfinite);
      if (st.nonfinite > 0 && first < 0) first = u;
    }
  }
  mine[first_unit] = static_cast<double>(first);
  norm_.set_label("global_norm");
  const TraceScope span(tracer, "norm_exchange", TraceThread::engine);
  const std::size_t ranks = static_cast<std::size_t>(norm_.world_size());
  std::vector<double> all(fields * ranks);
  GradTotals out;
  if (o_.order == ReductionOrder::rank) {
    norm_.all_gather(mine, all.data(), fields, DType::f64);
    for (std::size_t r = 0; r < ranks; ++r) {
      out.sum_of_squares += all[fields * r + sum_of_squares];
      out.nonfinite += all[fields * r + nonfinite];
    }
  } else {
    // The backend's sum of the two sums; the other fields all-gathered.
    double sums[2] = {mine[sum_of_squares], mine[nonfinite]};
    norm_.all_reduce(sums, 2, DType::f64, ReduceOp::sum);
    out.sum_of_squares = sums[0];
    out.nonfinite = sums[1];
    norm_.all_gather(mine, all.data(), fields, DType::f64);
  }
  // Each group's first rank (groups are numbered below the world size).
  std::vector<const double*> group_first(ranks, nullptr);
  for (std::size_t r = 0; r < ranks; ++r) {
    const double* f = all.data() + fields * r;
    if (f[first_unit] >= 0 && out.first_nonfinite_rank < 0) {
      out.first_nonfinite_rank = static_cast<int>(r);
      out.first_nonfinite_unit = static_cast<UnitId>(f[first_unit]);
    }
    const double*& g = group_first[static_cast<std::size_t>(f[dp_group]) % ranks];
    if (g == nullptr) {
      g = f;
    } else if (g[hash_high] != f[hash_high] || g[hash_low] != f[hash_low]) {
      out.orders_agree = false;
    }
  }
  return out;
}

}  // namespace zeroshard
