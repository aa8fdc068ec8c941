// Array plan: see runtime/sharding/array_plan.h.
#include "runtime/sharding/array_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "optimizer/muon_params.h"

namespace zeroshard {

namespace {

MemTier tier_of(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::none: return MemTier::device;
    case OffloadDevice::cpu: return MemTier::host;
    case OffloadDevice::nvme: return MemTier::nvme;
  }
  return MemTier::device;
}

// Muon's packed states of unit i ([Note: packed states]): per window, the
// runs of the parameters that are not Muon's (AdamW's), merged.
PackedStates packed_states(const FlatLayout& layout, std::size_t i, const std::vector<std::string>& muon_params) {
  const UnitInfo& info = layout.units()[i];
  const std::size_t W = info.shard;
  PackedStates p;
  p.runs.resize(static_cast<std::size_t>(layout.world_size()));
  for (ParamId id : info.params) {
    const ParamInfo& q = layout.param(id);
    if (q.numel == 0 || is_muon_parameter(muon_params, q.name, q.group)) continue;
    for (std::size_t w = 0; w < p.runs.size() && W > 0; ++w) {
      const std::size_t lo = std::max(q.offset, w * W), hi = std::min(q.offset + q.numel, (w + 1) * W);
      if (lo >= hi) continue;
      auto& runs = p.runs[w];
      if (!runs.empty() && runs.back().second == lo - w * W) {
        runs.back().second = hi - w * W;
      } else {
        runs.emplace_back(lo - w * W, hi - w * W);
      }
    }
  }
  return p;
}

}  // namespace

std::size_t array_numel(int stage, int rank, const UnitInfo& unit, const UnitStates& states, ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return stage < 3 ? unit.padded : unit.shard;
    case ArrayKind::grad: return stage < 2 ? unit.padded : unit.shard;
    case ArrayKind::micro_grad: return unit.padded;
    case ArrayKind::master: return stage == 0 ? unit.padded : unit.shard;
    case ArrayKind::state:
      if (states.packs(a.state)) {
        return stage == 0 ? states.window_offset(a.state, states.packed->runs.size(), unit.shard)
                          : states.window_numel(a.state, static_cast<std::size_t>(rank), unit.shard);
      }
      return states.array_numel(a.state, stage == 0 ? unit.padded : unit.shard, unit.shard);
  }
  return 0;
}

DType array_dtype(ArrayDtypes dtypes, const UnitStates& states, ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params:
    case ArrayKind::micro_grad: return dtypes.compute;
    case ArrayKind::grad: return dtypes.grad_accum;
    case ArrayKind::master: return DType::f32;
    case ArrayKind::state: return states.array_dtype(a.state);
  }
  return DType::f32;
}

void array_range(const UnitStates& states, ArrayRef a, std::size_t window, std::size_t begin, std::size_t end,
                 std::size_t& first, std::size_t& last) {
  if (a.kind == ArrayKind::state) return states.window_range(a.state, window, begin, end, first, last);
  first = begin;
  last = end;
}

std::uint64_t UnitTiers::subgroup_bytes(ArrayDtypes dtypes, ArrayRef a, std::size_t window,
                                        const SubGroup& sg) const {
  std::size_t first = 0, last = 0;
  array_range(states, a, window, sg.begin, sg.end, first, last);
  return static_cast<std::uint64_t>(last - first) * dtype_size(array_dtype(dtypes, states, a));
}

std::vector<ArrayRef> unit_arrays(const ArrayPlanOptions& o, const UnitStates& states) {
  std::vector<ArrayRef> out{{ArrayKind::params}, {ArrayKind::grad}};
  if (o.micro_grad()) out.push_back({ArrayKind::micro_grad});
  if (o.remote_optimizer) return out;  // on the parameter server
  if (o.mixed()) out.push_back({ArrayKind::master});
  for (int k = 0; k < states.arrays(); ++k) out.push_back({ArrayKind::state, k});
  return out;
}

MemCategory array_category(ArrayDtypes dtypes, ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return MemCategory::parameters;
    case ArrayKind::micro_grad: return MemCategory::gradients;
    case ArrayKind::grad:
      return dtypes.grad_accum != dtypes.compute ? MemCategory::grad_accumulator : MemCategory::gradients;
    case ArrayKind::master: return MemCategory::master_weights;
    case ArrayKind::state: return MemCategory::optimizer_states;
  }
  return MemCategory::parameters;
}

MemTier array_tier(int stage, MemTier param_tier, MemTier optimizer_tier, ArrayRef a) {
  if (a.kind == ArrayKind::params) return stage == 3 ? param_tier : MemTier::device;
  if ((a.kind == ArrayKind::grad || a.kind == ArrayKind::micro_grad) && stage < 2) return MemTier::device;
  return optimizer_tier;
}

ArrayPlan plan_arrays(const FlatLayout& layout, const ArrayPlanOptions& o) {
  ZS_CHECK(layout.world_size() > 0, "ArrayStore: the layout is not finalized");
  ZS_CHECK(o.rank >= 0 && o.rank < layout.world_size(), "array plan: rank {} outside a world of {}", o.rank,
           layout.world_size());
  ZS_CHECK(o.grad_accum_dtype == DType::f32 || o.grad_accum_dtype == o.dtype,
           "array plan: gradient accumulator of {} with compute dtype {}", dtype_name(o.grad_accum_dtype),
           dtype_name(o.dtype));
  const OffloadConfig& c = o.offload;
  const std::size_t sg = c.sub_group_elements();
  const MemTier opt = tier_of(c.optimizer.device), param = tier_of(c.param.device);
  std::int64_t in_cpu = c.param.max_in_cpu;
  const std::uint64_t f = sizeof(float), e = dtype_size(o.dtype);
  ArrayPlan plan;
  plan.units.resize(layout.units().size());
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    UnitTiers& us = plan.units[i];
    const UnitInfo& info = layout.units()[i];
    const std::size_t shard = info.shard;
    us.states = unit_states(o.states, o.state_count, info.numel);
    if (o.muon && us.states.dtype == StateDtype::fp32 && us.states.count > 1) {
      us.states.packed = std::make_shared<const PackedStates>(packed_states(layout, i, o.muon_params));
    }
    // sg is a multiple of 4096, so of every block size (kQuantBlockMax).
    ZS_CHECK(us.states.block == 0 || sg % us.states.block == 0, "sub-group size {} is not a multiple of block {}",
             sg, us.states.block);
    for (std::size_t b = 0; b < shard; b += sg) us.subgroups.push_back(SubGroup{b, std::min(shard, b + sg)});
    if (o.stage == 0 || shard == 0) continue;
    us.optimizer_tier = opt;
    if (opt == MemTier::nvme) {
      plan.nvme_optimizer_bytes += shard * f * static_cast<std::uint64_t>(o.mixed() ? 1 : 0) + us.states.bytes(shard, shard);
      if (o.stage >= 2) plan.nvme_optimizer_bytes += shard * dtype_size(o.grad_accum_dtype);
    }
    if (o.stage != 3) continue;
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
            o.source, info.name, shard, c.param.buffer_size));
      }
      plan.nvme_param_bytes += shard * e;
    }
  }
  plan.offloaded = opt != MemTier::device || param != MemTier::device;
  if (c.uses_nvme()) {
    // A write goes to a temporary next to the file it replaces: room for
    // every staging set's sub-group (all arrays) and a unit's parameters.
    std::uint64_t largest = 0, set = 0;
    for (std::size_t i = 0; i < plan.units.size(); ++i) {
      const std::size_t shard = layout.units()[i].shard, part = std::min(shard, sg);
      largest = std::max<std::uint64_t>(largest, shard);
      // The largest staging set of any unit: a sub-group of every array,
      // parameters, gradients and master weights counted at 4 bytes.
      const std::uint64_t bytes = static_cast<std::uint64_t>(2 + (o.mixed() ? 1 : 0)) * f * part +
                                  plan.units[i].states.bytes(part, part);
      set = std::max(set, bytes);
    }
    plan.nvme_in_flight_bytes = static_cast<std::uint64_t>(c.optimizer.buffer_count) * set + largest * e;
  }
  // The arrays, in the order the store allocates them.
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    const UnitInfo& info = layout.units()[i];
    const std::uint64_t full_pad = info.padded - info.numel, shard_pad = info.shard - info.logical_in_shard(o.rank);
    const UnitStates& st = plan.units[i].states;
    for (ArrayRef a : unit_arrays(o, st)) {
      ArrayAllocation x;
      x.unit = static_cast<UnitId>(i);
      x.array = a;
      x.category = array_category(o.dtypes(), a);
      x.tier = plan.units[i].tier(o.stage, a);
      x.dtype = array_dtype(o.dtypes(), st, a);
      x.numel = array_numel(o.stage, o.rank, info, st, a);
      const bool full = a.kind == ArrayKind::params       ? o.stage < 3
                        : a.kind == ArrayKind::micro_grad ? true
                        : a.kind == ArrayKind::grad       ? o.stage < 2
                                                          : o.stage == 0;
      std::uint64_t pad = full ? full_pad : shard_pad;
      if (a.kind == ArrayKind::state && st.packs(a.state)) pad = 0;  // only kept elements
      if (a.kind == ArrayKind::state && st.is_absmax(a.state)) {
        // Absmax entries of blocks that hold no logical element.
        std::uint64_t logical_blocks = 0;
        const std::size_t windows = full ? static_cast<std::size_t>(layout.world_size()) : 1;
        for (std::size_t w = 0; w < windows; ++w) {
          const std::size_t logical = info.logical_in_shard(full ? static_cast<int>(w) : o.rank);
          logical_blocks += (logical + st.block - 1) / st.block;
        }
        pad = x.numel - logical_blocks;
      }
      x.bytes = x.numel * dtype_size(x.dtype);
      x.padding = pad * dtype_size(x.dtype);
      plan.arrays.push_back(x);
    }
  }
  return plan;
}

}  // namespace zeroshard
