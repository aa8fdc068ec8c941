// The options the Engine builds its components with, as pure functions of
// its configuration: the ArrayStore's plan, the GradReducer's and the
// Unsharder's. The memory estimator (runtime/plan/memory_estimate.h) and
// the step replay use the same functions, so that the estimate equals the
// Engine's ledger byte for byte.
#pragma once

#include "runtime/config/config.h"
#include "runtime/sharding/array_plan.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/unsharder.h"

namespace zeroshard {

/// The array-plan options an Engine with `config` uses on `rank`: stage,
/// compute dtype, accumulation dtype, optimizer_state_count(config.optimizer),
/// remote_optimizer on a parameter-server worker (parameter_server.servers
/// > 0), offload and
/// source. The Engine's finalize() builds its ArrayStore from these.
ArrayPlanOptions engine_array_plan_options(const EngineConfig& config, int rank);

/// The GradReducer options an Engine with `config` over `world_size` ranks
/// uses: stage, bucket sizes, overlap(), compute and communication dtype
/// (communication_data_type, else fp32), the accumulator's dtype
/// (EngineConfig::accumulation_dtype()), stored scale (1 / world_size for
/// a 16-bit accumulator, which holds the mean over ranks so that the sum
/// cannot overflow; else 1, the sum), reduction order and qgZ's format
/// and error feedback (zero_quantized_gradients). Pure.
GradReducerOptions engine_grad_reducer_options(const EngineConfig& config, int world_size);

/// The Unsharder options an Engine with `config` uses: gather at stage 3,
/// overlap(), compute dtype, the stage3_* knobs, qwZ's format
/// (zero_quantized_weights) and hpZ's partition size. Pure.
UnsharderOptions engine_unsharder_options(const EngineConfig& config);

/// The configuration a parameter-server worker's Engine keeps: `config`
/// without offload_optimizer, whose state is on its server ([Note:
/// parameter-server layout] in runtime/ps/param_server.h); with
/// parameter_server.push "direct", train_batch_size is the worker's own
/// (micro x accumulation: its Engine trains alone). `config` must be
/// resolved for the W workers. Pure.
EngineConfig ps_worker_config(const EngineConfig& config);

/// The array-plan options of the store a parameter server keeps for worker
/// `worker`: the plain engine's (no parameter_server section) at stage 3
/// and that worker's rank, with offload_param off (the server's parameter
/// copy stays in its memory; offload_optimizer's tier holds the rest).
/// The ParameterServer and the memory estimate use it. Pure.
ArrayPlanOptions ps_server_array_plan_options(const EngineConfig& config, int worker);

}  // namespace zeroshard
