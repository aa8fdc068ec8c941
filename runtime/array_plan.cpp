// Array plan: see runtime/array_plan.h.
#include "runtime/array_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

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

}  // namespace

std::size_t array_numel(int stage, const UnitInfo& unit, ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return stage < 3 ? unit.padded : unit.shard;
    case ArrayKind::grad: return stage < 2 ? unit.padded : unit.shard;
    default: return stage == 0 ? unit.padded : unit.shard;
  }
}

DType array_dtype(DType compute, ArrayRef a) {
  return a.kind == ArrayKind::params || a.kind == ArrayKind::grad ? compute : DType::f32;
}

MemCategory array_category(ArrayRef a) {
  switch (a.kind) {
    case ArrayKind::params: return MemCategory::parameters;
    case ArrayKind::grad: return MemCategory::gradients;
    case ArrayKind::master: return MemCategory::master_weights;
    case ArrayKind::state: return MemCategory::optimizer_states;
  }
  return MemCategory::parameters;
}

MemTier array_tier(int stage, MemTier param_tier, MemTier optimizer_tier, ArrayRef a) {
  if (a.kind == ArrayKind::params) return stage == 3 ? param_tier : MemTier::device;
  if (a.kind == ArrayKind::grad && stage < 2) return MemTier::device;
  return optimizer_tier;
}

ArrayPlan plan_arrays(const FlatLayout& layout, const ArrayPlanOptions& o) {
  ZS_CHECK(layout.world_size() > 0, "ArrayStore: the layout is not finalized");
  ZS_CHECK(o.rank >= 0 && o.rank < layout.world_size(), "array plan: rank {} outside a world of {}", o.rank,
           layout.world_size());
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
    for (std::size_t b = 0; b < shard; b += sg) us.subgroups.push_back(SubGroup{b, std::min(shard, b + sg)});
    if (o.stage == 0 || shard == 0) continue;
    us.optimizer_tier = opt;
    if (opt == MemTier::nvme) {
      plan.nvme_optimizer_bytes += shard * f * static_cast<std::uint64_t>(o.state_count + (o.mixed() ? 1 : 0));
      if (o.stage >= 2) plan.nvme_optimizer_bytes += shard * e;
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
    std::uint64_t largest = 0;
    for (const UnitInfo& info : layout.units()) largest = std::max<std::uint64_t>(largest, info.shard);
    const std::uint64_t arrays = static_cast<std::uint64_t>(o.state_count + 2 + (o.mixed() ? 1 : 0));
    plan.nvme_in_flight_bytes = static_cast<std::uint64_t>(c.optimizer.buffer_count) * arrays * f *
                                    std::min<std::uint64_t>(largest, sg) + largest * e;
  }
  // The arrays, in the order the store allocates them.
  for (std::size_t i = 0; i < plan.units.size(); ++i) {
    const UnitInfo& info = layout.units()[i];
    const std::uint64_t full_pad = info.padded - info.numel, shard_pad = info.shard - info.logical_in_shard(o.rank);
    auto add = [&](ArrayRef a) {
      ArrayAllocation x;
      x.unit = static_cast<UnitId>(i);
      x.array = a;
      x.category = array_category(a);
      x.tier = plan.units[i].tier(o.stage, a);
      x.dtype = array_dtype(o.dtype, a);
      x.numel = array_numel(o.stage, info, a);
      const std::uint64_t pad = x.numel == info.padded ? full_pad : shard_pad;
      x.bytes = x.numel * dtype_size(x.dtype);
      x.padding = pad * dtype_size(x.dtype);
      plan.arrays.push_back(x);
    };
    add({ArrayKind::params});
    add({ArrayKind::grad});
    if (o.mixed()) add({ArrayKind::master});
    for (int k = 0; k < o.state_count; ++k) add({ArrayKind::state, k});
  }
  return plan;
}

}  // namespace zeroshard
