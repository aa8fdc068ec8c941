// Memory estimate: see runtime/plan/memory_estimate.h.
#include "runtime/plan/memory_estimate.h"

#include <algorithm>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/engine/engine_options.h"
#include "runtime/plan/memory_replay.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/unsharder.h"

namespace zeroshard {

MemoryEstimate estimate_memory(const FlatLayout& layout, const EngineConfig& config, int rank, int ranks_per_node) {
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
  // One step, replayed by the engine's components over sizes (their
  // constructors lease what they keep, as in finalize()).
  e.after_step = e.after_finalize;
  replay_step(layout, config, rank, e.plan, e.after_step, ranks_per_node);
  // What the Unsharder and GradReducer lease in finalize() and keep.
  const std::uint64_t secondary = hpz_secondary_bytes(layout, engine_unsharder_options(config));
  const std::uint64_t residual = error_feedback_bytes(layout, engine_grad_reducer_options(config, layout.world_size()));
  if (secondary > 0) e.after_finalize.add(MemCategory::secondary, MemTier::device, secondary);
  if (residual > 0) e.after_finalize.add(MemCategory::residual, MemTier::device, residual);
  e.parameter_count = layout.total_numel();
  e.padded_count = layout.total_padded();
  for (const UnitInfo& u : layout.units()) e.largest_unit = std::max<std::uint64_t>(e.largest_unit, u.padded);
  return e;
}

MemoryEstimate estimate_memory(const ModelDescription& model, const EngineConfig& config, int world_size, int rank,
                               int ranks_per_node) {
  ZS_CHECK(world_size >= 1, "estimate_memory: world size {}", world_size);
  return estimate_memory(model.layout(world_size), config, rank, ranks_per_node);
}

}  // namespace zeroshard
