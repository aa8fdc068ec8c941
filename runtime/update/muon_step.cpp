// MuonStep: see runtime/update/muon_step.h.
#include "runtime/update/muon_step.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/muon/muon_update.h"
#include "kernels/cpu/muon/newton_schulz.h"
#include "optimizer/muon_params.h"

namespace zeroshard {

// One unit's step: the range of the flat buffer this rank updates, and per
// matrix its part of that range and where it is held in the unit's buffer.
struct MuonStep::UnitWork {
  UnitId unit = -1;
  std::size_t lo = 0, hi = 0;  // flat elements this rank updates
  HostBuffer buffer;           // muon_unit_buffer_elements fp32 values
  struct Matrix {
    const MuonParam* param = nullptr;
    std::size_t a = 0, b = 0;  // its part of [lo, hi): flat elements
    float* held = nullptr;     // the whole slice (owner, or stage 0), else its part; null when neither
    bool whole = false;        // this rank holds the whole slice
    bool gathers_tp = false;   // held is the whole matrix: the tp slices stacked in tp rank order
    float* slice() const { return gathers_tp ? held + static_cast<std::size_t>(tp_rank) * param->numel() : held; }
    float* values() const { return whole ? slice() + (a - param->offset) : held; }
    int tp_rank = 0;
  };
  std::vector<Matrix> matrices;
};

MuonStep::MuonStep(const FlatLayout& layout, const ShardOptimizer& optimizer, MuonStepOptions options)
    : layout_(layout), optimizer_(optimizer), o_(std::move(options)) {
  by_unit_.assign(layout.units().size(), {});
  params_ = muon_matrices(layout, o_.hyper, o_.source, o_.tp);
  for (std::size_t i = 0; i < params_.size(); ++i) by_unit_[static_cast<std::size_t>(params_[i].unit)].push_back(i);
}

std::vector<int> MuonStep::owners() const {
  std::vector<int> out;
  for (const MuonParam& p : params_) out.push_back(p.owner);
  return out;
}

std::vector<int> MuonStep::tp_owners() const {
  std::vector<int> out;
  for (const MuonParam& p : params_) out.push_back(p.tp_owner);
  return out;
}

void MuonStep::step(ArrayStore& store, Communicator& comm, Communicator* tp, std::int64_t step, float grad_scale,
                    const std::function<void(const std::function<void()>&)>& storage_phase) {
  ZS_CHECK(o_.tp.size == 1 || (tp != nullptr && tp->world_size() == o_.tp.size),
           "MuonStep::step: tensor-parallel size {} needs its group's communicator", o_.tp.size);
  for (UnitId u = 0; u < static_cast<UnitId>(by_unit_.size()); ++u) {
    const std::vector<std::size_t>& list = by_unit_[static_cast<std::size_t>(u)];
    if (list.empty()) continue;
    const UnitInfo& info = layout_.unit(u);
    UnitWork w;
    w.unit = u;
    std::tie(w.lo, w.hi) = muon_updated_range(info, o_.stage, o_.rank);
    const std::size_t elements = muon_unit_buffer_elements(layout_, params_, o_.stage, o_.rank, o_.tp_rank, u);
    if (elements > 0) w.buffer = store.host_pool().acquire(elements * sizeof(float), MemCategory::unsharded);
    std::size_t at = 0;
    for (std::size_t i : list) {
      const MuonParam& p = params_[i];
      UnitWork::Matrix m;
      m.param = &p;
      m.a = std::clamp(p.offset, w.lo, w.hi);
      m.b = std::clamp(p.offset + p.numel(), w.lo, w.hi);
      m.whole = o_.stage == 0 || p.owner == o_.rank;
      m.gathers_tp = m.whole && p.gathers_tp(o_.tp_rank);
      m.tp_rank = o_.tp_rank;
      const std::size_t held = muon_held_elements(p, o_.stage, o_.rank, o_.tp_rank, w.lo, w.hi);
      if (held > 0) m.held = w.buffer.as<float>() + at;
      at += held;
      w.matrices.push_back(m);
    }
    storage_phase([&] { momentum_part(store, w, grad_scale); });
    exchange(comm, w, true);
    exchange_tp(tp, w, true);
    orthogonalize(w);
    exchange_tp(tp, w, false);
    exchange(comm, w, false);
    storage_phase([&] { apply_part(store, w, step); });
  }
}

namespace {

// Element of array a of unit u (full: the padded flat buffer; else this
// rank's shard) that holds flat element x.
std::size_t local_index(const ArrayStore& store, const UnitInfo& info, UnitId u, ArrayRef a, int rank,
                        std::size_t x) {
  return store.numel(u, a) == info.padded ? x : x - static_cast<std::size_t>(rank) * info.shard;
}

}  // namespace

void MuonStep::momentum_part(ArrayStore& store, UnitWork& w, float grad_scale) const {
  const UnitInfo& info = layout_.unit(w.unit);
  const ArrayRef grad{ArrayKind::grad}, momentum{ArrayKind::state, 0};
  HostBuffer grad_holder, momentum_holder;
  const auto* g = static_cast<const std::byte*>(store.read(w.unit, grad, grad_holder));
  auto* m = static_cast<float*>(store.read(w.unit, momentum, momentum_holder));
  const std::size_t ge = dtype_size(store.dtype(w.unit, grad));
  for (const UnitWork::Matrix& x : w.matrices) {
    const std::size_t n = x.b - x.a;
    if (n == 0) continue;
    float* u = x.values();
    kernels::cast(u, DType::f32, g + local_index(store, info, w.unit, grad, o_.rank, x.a) * ge,
                  store.dtype(w.unit, grad), n, grad_scale);
    kernels::muon_momentum(m + local_index(store, info, w.unit, momentum, o_.rank, x.a), u, u, n,
                           static_cast<float>(o_.hyper.muon.momentum), o_.hyper.muon.nesterov);
  }
  store.store(w.unit, momentum, m);
}

void MuonStep::exchange(Communicator& comm, UnitWork& w, bool to_owner) const {
  if (o_.stage == 0 || o_.world_size == 1) return;
  const std::size_t W = layout_.unit(w.unit).shard;
  std::vector<CommWork> pending;
  for (UnitWork::Matrix& x : w.matrices) {
    const MuonParam& p = *x.param;
    if (p.owner == o_.rank) {
      for (int r = 0; r < o_.world_size; ++r) {
        const std::size_t a = std::clamp(p.offset, r * W, (r + 1) * W);
        const std::size_t b = std::clamp(p.offset + p.numel(), r * W, (r + 1) * W);
        if (r == o_.rank || a >= b) continue;
        float* at = x.slice() + (a - p.offset);
        pending.push_back(to_owner ? comm.irecv(at, b - a, DType::f32, r) : comm.isend(at, b - a, DType::f32, r));
      }
    } else if (x.b > x.a) {
      float* at = x.held;
      pending.push_back(to_owner ? comm.isend(at, x.b - x.a, DType::f32, p.owner)
                                 : comm.irecv(at, x.b - x.a, DType::f32, p.owner));
    }
  }
  for (CommWork& c : pending) c.wait();
}

void MuonStep::exchange_tp(Communicator* tp, UnitWork& w, bool to_owner) const {
  if (o_.tp.size == 1) return;
  std::vector<CommWork> pending;
  for (UnitWork::Matrix& x : w.matrices) {
    const MuonParam& p = *x.param;
    if (!x.whole || !p.split()) continue;
    if (x.gathers_tp) {
      for (int t = 0; t < p.tp_size; ++t) {
        if (t == o_.tp_rank) continue;
        float* at = x.held + static_cast<std::size_t>(t) * p.numel();
        pending.push_back(to_owner ? tp->irecv(at, p.numel(), DType::f32, t) : tp->isend(at, p.numel(), DType::f32, t));
      }
    } else {
      pending.push_back(to_owner ? tp->isend(x.held, p.numel(), DType::f32, p.tp_owner)
                                 : tp->irecv(x.held, p.numel(), DType::f32, p.tp_owner));
    }
  }
  for (CommWork& c : pending) c.wait();
}

namespace {

// Column blocks: the T slices [rows x cols] stacked in `stacked` are the
// whole matrix's columns [t cols, (t + 1) cols); interleave them into
// `whole` [rows x T cols] (forward) or split it back (!forward).
void interleave_columns(float* stacked, float* whole, std::size_t rows, std::size_t cols, int tp, bool forward) {
  const auto T = static_cast<std::size_t>(tp);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t i = 0; i < rows; ++i) {
      float* s = stacked + (t * rows + i) * cols;
      float* f = whole + i * T * cols + t * cols;
      if (forward) {
        std::copy(s, s + cols, f);
      } else {
        std::copy(f, f + cols, s);
      }
    }
  }
}

}  // namespace

void MuonStep::orthogonalize(UnitWork& w) const {
  const MuonHyper& mu = o_.hyper.muon;
  for (UnitWork::Matrix& x : w.matrices) {
    const MuonParam& p = *x.param;
    if (!x.whole || (p.split() && !x.gathers_tp)) continue;
    if (p.split() && p.split_dim == 1) {
      // A workspace beside Newton-Schulz's own (kernels/cpu/muon/newton_schulz.cpp).
      std::vector<float> whole(p.full_rows() * p.full_cols());
      interleave_columns(x.held, whole.data(), p.rows, p.cols, p.tp_size, true);
      kernels::newton_schulz(whole.data(), whole.data(), p.full_rows(), p.full_cols(), mu.ns_steps, mu.precision);
      interleave_columns(x.held, whole.data(), p.rows, p.cols, p.tp_size, false);
    } else {
      kernels::newton_schulz(x.held, x.held, p.full_rows(), p.full_cols(), mu.ns_steps, mu.precision);
    }
  }
}

void MuonStep::apply_part(ArrayStore& store, UnitWork& w, std::int64_t step) const {
  const UnitInfo& info = layout_.unit(w.unit);
  const GroupId muon = kMuonGroup;
  const auto lr = static_cast<float>(optimizer_.lr_at(muon, step - 1));
  const auto wd = static_cast<float>(optimizer_.group(muon).weight_decay);
  const bool mixed = o_.dtype != DType::f32;
  const ArrayRef params{ArrayKind::params}, master{ArrayKind::master};
  HostBuffer param_holder, master_holder;
  auto* p = static_cast<std::byte*>(store.read(w.unit, params, param_holder));
  float* weights = mixed ? static_cast<float*>(store.read(w.unit, master, master_holder)) : reinterpret_cast<float*>(p);
  const ArrayRef weight_array = mixed ? master : params;
  for (const UnitWork::Matrix& x : w.matrices) {
    const std::size_t n = x.b - x.a;
    if (n == 0) continue;
    const float scale = kernels::muon_scale(o_.hyper.muon.scale, x.param->full_rows(), x.param->full_cols());
    float* at = weights + local_index(store, info, w.unit, weight_array, o_.rank, x.a);
    kernels::muon_apply(at, x.values(), n, lr, wd, scale);
    if (mixed) {
      const std::size_t e = dtype_size(o_.dtype);
      kernels::cast(p + local_index(store, info, w.unit, params, o_.rank, x.a) * e, o_.dtype, at, DType::f32, n);
    }
  }
  if (mixed) store.store(w.unit, master, weights);
  store.store(w.unit, params, p);
}

}  // namespace zeroshard
