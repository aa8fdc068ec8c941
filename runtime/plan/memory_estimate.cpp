// Memory estimate: see runtime/plan/memory_estimate.h.
#include "runtime/plan/memory_estimate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/checkpoint/background_writer.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/engine/engine_options.h"
#include "offload/host_pool.h"
#include "runtime/plan/memory_replay.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/unsharder.h"

namespace zeroshard {

std::uint64_t async_checkpoint_staging_bytes(const FlatLayout& layout, const EngineConfig& config,
                                             const ArrayPlan& plan, int rank) {
  if (!config.checkpoint.async) return 0;
  // The manifest of a save at step 0 (its tag is in the weights' header).
  Manifest m;
  m.tag = "step-00000000";
  m.world_size = layout.world_size();
  m.stage = config.zero.stage;
  m.compute_dtype = std::string(dtype_name(config.compute_dtype));
  m.tensors = checkpoint_tensor_names(config.optimizer);
  m.states.block_size = config.optimizer.states.block_size;
  m.units = layout_manifest_units(
      layout, [&plan](UnitId u) { return plan.units[static_cast<std::size_t>(u)].states.dtype; },
      [](ParamId) { return -1; });
  // Less what the snapshot hard-links (nvme arrays; ArrayStore::link_range).
  const int stage = config.zero.stage;
  const std::uint64_t linked = linked_snapshot_bytes(
      static_cast<UnitId>(layout.units().size()), stage, config.compute_dtype != DType::f32, rank,
      [&](UnitId u, ArrayRef a) { return plan.units[static_cast<std::size_t>(u)].tier(stage, a); },
      [&](UnitId u) -> const UnitStates& { return plan.units[static_cast<std::size_t>(u)].states; },
      [&](UnitId u) { return layout.unit(u).shard; });
  const std::uint64_t bytes =
      async_staging_bytes(m, config.zero.gather_16bit_weights_on_model_save, config.compute_dtype, rank) - linked;
  const std::int64_t limit = config.checkpoint.staging_memory;
  return limit > 0 && bytes > static_cast<std::uint64_t>(limit) ? 0 : bytes;
}

namespace {

void set_layout_counts(const FlatLayout& layout, MemoryEstimate& e) {
  e.parameter_count = layout.total_numel();
  e.padded_count = layout.total_padded();
  for (const UnitInfo& u : layout.units()) e.largest_unit = std::max<std::uint64_t>(e.largest_unit, u.padded);
}

}  // namespace

MemoryEstimate estimate_memory(const FlatLayout& layout, const EngineConfig& job_config, int rank, int ranks_per_node) {
  // A parameter-server worker's Engine keeps no offload_optimizer.
  const EngineConfig config = job_config.parameter_server.enabled() ? ps_worker_config(job_config) : job_config;
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
  // checkpoint.async: finalize() leases the staging area of async saves
  // (runtime/engine/engine_save_async.cpp) from the host pool.
  const std::uint64_t staging = async_checkpoint_staging_bytes(layout, config, e.plan, rank);
  if (staging > 0) HostPoolSizes(e.after_finalize).acquire(staging, MemCategory::checkpoint_staging);
  // One step, replayed by the engine's components over sizes (their
  // constructors lease what they keep, as in finalize()).
  e.after_step = e.after_finalize;
  replay_step(layout, config, rank, e.plan, e.after_step, ranks_per_node);
  // What the Unsharder and GradReducer lease in finalize() and keep.
  const std::uint64_t secondary = hpz_secondary_bytes(layout, engine_unsharder_options(config));
  const std::uint64_t residual = error_feedback_bytes(layout, engine_grad_reducer_options(config, layout.world_size()));
  if (secondary > 0) e.after_finalize.add(MemCategory::secondary, MemTier::device, secondary);
  if (residual > 0) e.after_finalize.add(MemCategory::residual, MemTier::device, residual);
  set_layout_counts(layout, e);
  return e;
}

MemoryEstimate estimate_server_memory(const FlatLayout& layout, const EngineConfig& config, int server) {
  const std::int64_t servers = config.parameter_server.servers;
  if (servers <= 0) {
    throw ConfigError(fmt::format("{}: estimate_server_memory without \"parameter_server.servers\"", config.source));
  }
  ZS_CHECK(layout.world_size() > 0, "estimate_server_memory: the layout is not finalized");
  ZS_CHECK(server >= 0 && server < servers, "estimate_server_memory: server {} outside {} servers", server, servers);
  const bool direct = config.parameter_server.direct();
  if (direct) {
    // The servers' layout; the batch keys are the workers'.
    ZS_CHECK(layout.world_size() == servers, "estimate_server_memory: a \"direct\" layout for {} ranks, not {}",
             layout.world_size(), servers);
    config.validate();
  } else {
    config.validate_for_world(layout.world_size());
  }
  MemoryEstimate e;
  e.world_size = layout.world_size();
  e.rank = server;
  e.server = server;
  if (!direct) e.hosted_workers = ps_hosted_workers(layout.world_size(), static_cast<int>(servers), server);
  // ParameterServer's constructor allocates each hosted worker's store in
  // turn ("direct": its own window's); then one push to each
  // (ParameterServer::answer_push).
  std::vector<std::pair<ArrayPlanOptions, ArrayPlan>> stores;
  for (int w : direct ? std::vector<int>{server} : e.hosted_workers) {
    ArrayPlanOptions o = ps_server_array_plan_options(config, w);
    ArrayPlan plan = plan_arrays(layout, o);
    for (const ArrayAllocation& x : plan.arrays) e.after_finalize.add(x.category, x.tier, x.bytes, x.padding);
    stores.emplace_back(std::move(o), std::move(plan));
  }
  e.after_step = e.after_finalize;
  for (const auto& [o, plan] : stores) replay_server_push(layout, config, plan, o, e.after_step);
  if (!stores.empty()) e.plan = stores.front().second;
  set_layout_counts(layout, e);
  return e;
}

MemoryEstimate estimate_memory(const ModelDescription& model, const EngineConfig& config, int world_size, int rank,
                               int ranks_per_node) {
  ZS_CHECK(world_size >= 1, "estimate_memory: world size {}", world_size);
  if (!config.parameter_server.enabled()) {
    return estimate_memory(model.layout(world_size), config, rank, ranks_per_node);
  }
  const int workers = ps_training_ranks(config.parameter_server.servers, world_size, config.source);
  ZS_CHECK(rank >= 0 && rank < world_size, "estimate_memory: rank {} outside a world of {}", rank, world_size);
  if (config.parameter_server.direct()) {
    // A worker's Engine trains alone; a server holds its window of the
    // servers' layout.
    config.validate_for_world(workers);
    if (rank < workers) return estimate_memory(model.layout(1), config, 0, ranks_per_node);
    return estimate_server_memory(model.layout(world_size - workers), config, rank - workers);
  }
  const FlatLayout layout = model.layout(workers);
  if (rank < workers) return estimate_memory(layout, config, rank, ranks_per_node);
  return estimate_server_memory(layout, config, rank - workers);
}

}  // namespace zeroshard
