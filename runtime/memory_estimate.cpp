// Memory estimate: see runtime/memory_estimate.h.
#include "runtime/memory_estimate.h"

#include <algorithm>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/memory_replay.h"

namespace zeroshard {

ArrayPlanOptions engine_array_plan_options(const EngineConfig& config, int rank) {
  return ArrayPlanOptions{.stage = config.zero.stage,
                          .rank = rank,
                          .dtype = config.compute_dtype,
                          .state_count = optimizer_state_count(config.optimizer),
                          .states = config.optimizer.states,
                          .offload = config.offload,
                          .source = config.source};
}

GradReducerOptions engine_grad_reducer_options(const EngineConfig& config, int world_size) {
  const bool mixed = config.compute_dtype != DType::f32;
  return GradReducerOptions{.stage = config.zero.stage,
                            .reduce_bucket_size = static_cast<std::size_t>(config.zero.reduce_bucket_size),
                            .allgather_bucket_size = static_cast<std::size_t>(config.zero.allgather_bucket_size),
                            .overlap = config.zero.overlap(),
                            .compute_dtype = config.compute_dtype,
                            .comm_dtype = config.communication_data_type.value_or(DType::f32),
                            .stored_scale = mixed ? 1.0f / static_cast<float>(world_size) : 1.0f,
                            .order = config.reduction_order};
}

UnsharderOptions engine_unsharder_options(const EngineConfig& config) {
  const ZeroConfig& z = config.zero;
  return UnsharderOptions{.gather = z.stage == 3,
                          .overlap = z.overlap(),
                          .dtype = config.compute_dtype,
                          .prefetch_bucket_size = z.prefetch_bucket_size,
                          .max_live_parameters = z.max_live_parameters,
                          .max_reuse_distance = z.max_reuse_distance,
                          .param_persistence_threshold = z.param_persistence_threshold,
                          .model_persistence_threshold = z.model_persistence_threshold};
}

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
