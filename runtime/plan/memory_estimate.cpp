// Memory estimate: see runtime/plan/memory_estimate.h.
#include "runtime/plan/memory_estimate.h"

#include <algorithm>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/engine/engine_options.h"
#include "runtime/plan/memory_replay.h"

namespace zeroshard {

MemoryEstimate estimate_memory(const FlatLayout& layout, const EngineConfig& config, int rank) {
  ZS_CHECK(layout.world_size() > 0, "estimate_memory: the layout is not finalized");
  ZS_CHECK(rank >= 0 && rank < layout.world_size(), "estimate_memory: rank {} outside a world of {}", rank,
           layout.world_size());
  config.validate_for_world(layout.world_size());
  MemoryEstimate e;
  e.world_size = layout.world_size();
  e.rank = rank;
  e.plan = plan_arrays(layout, engine_array_plan_options(config, rank));
  // The adds ArrayStore::allocate makes, in its order.
  for (const ArrayAllocation& x : e.plan.arrays) e.after_finalize.add(x.category, x.tier, x.bytes, x.padding);
  // One step, replayed by the engine's components over sizes.
  e.after_step = e.after_finalize;
  replay_step(layout, config, rank, e.plan, e.after_step);
  e.parameter_count = layout.total_numel();
  e.padded_count = layout.total_padded();
  for (const UnitInfo& u : layout.units()) e.largest_unit = std::max<std::uint64_t>(e.largest_unit, u.padded);
  return e;
}

MemoryEstimate estimate_memory(const ModelDescription& model, const EngineConfig& config, int world_size, int rank) {
  ZS_CHECK(world_size >= 1, "estimate_memory: world size {}", world_size);
  return estimate_memory(model.layout(world_size), config, rank);
}

}  // namespace zeroshard
