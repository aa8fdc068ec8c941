#include "runtime/engine/engine_options.h"

#include <optional>

#include "optimizer/optimizer.h"

namespace zeroshard {

ArrayPlanOptions engine_array_plan_options(const EngineConfig& config, int rank) {
  return ArrayPlanOptions{.stage = config.zero.stage,
                          .rank = rank,
                          .dtype = config.compute_dtype,
                          .grad_accum_dtype = config.accumulation_dtype(),
                          .state_count = optimizer_state_count(config.optimizer),
                          .states = config.optimizer.states,
                          .muon = config.optimizer.kind == OptimizerKind::muon,
                          .muon_params = config.optimizer.muon.params,
                          // A parameter-server worker's states are on its server.
                          .remote_optimizer = config.parameter_server.enabled(),
                          .offload = config.offload,
                          .source = config.source};
}

GradReducerOptions engine_grad_reducer_options(const EngineConfig& config, int world_size) {
  // A 16-bit accumulator holds the mean over ranks, so that the sum cannot
  // overflow it; an fp32 one the sum, as in fp32 training.
  const DType accum = config.accumulation_dtype();
  return GradReducerOptions{.stage = config.zero.stage,
                            .reduce_bucket_size = static_cast<std::size_t>(config.zero.reduce_bucket_size),
                            .allgather_bucket_size = static_cast<std::size_t>(config.zero.allgather_bucket_size),
                            .overlap = config.zero.overlap(),
                            .compute_dtype = config.compute_dtype,
                            .comm_dtype = config.communication_data_type.value_or(DType::f32),
                            .grad_dtype = accum,
                            .stored_scale = accum != DType::f32 ? 1.0f / static_cast<float>(world_size) : 1.0f,
                            .order = config.reduction_order,
                            .quantized = config.zero.zeropp.quantized_gradients
                                             ? std::optional(config.zero.zeropp.gradient_format())
                                             : std::nullopt,
                            .error_feedback = config.zero.zeropp.error_feedback};
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
                          .model_persistence_threshold = z.model_persistence_threshold,
                          .quantized = z.zeropp.quantized_weights ? std::optional(z.zeropp.weight_format())
                                                                  : std::nullopt,
                          .hpz_partition_size = static_cast<int>(z.zeropp.hpz_partition_size)};
}

EngineConfig ps_worker_config(const EngineConfig& config) {
  EngineConfig worker = config;
  worker.offload.optimizer = OffloadOptimizerConfig{};
  // A "direct" worker's Engine trains alone: its batch is its own.
  if (config.parameter_server.direct() && worker.train_batch_size) {
    worker.train_batch_size = worker.train_micro_batch_size_per_gpu * worker.gradient_accumulation_steps;
  }
  return worker;
}

ArrayPlanOptions ps_server_array_plan_options(const EngineConfig& config, int worker) {
  EngineConfig plain = config;
  plain.parameter_server = ParameterServerConfig{};
  ArrayPlanOptions o = engine_array_plan_options(plain, worker);
  o.stage = 3;
  o.offload.param = OffloadParamConfig{};
  return o;
}

}  // namespace zeroshard
