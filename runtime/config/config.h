// Engine configuration, read from a DeepSpeed-style ds_config JSON file.
//
// docs/config.md lists every key zeroshard reads (default, what it does
// here), the DeepSpeed keys it accepts without effect, the legacy
// spellings it maps and the keys it refuses; it is printed from the key
// table in runtime/config/config_keys.cpp, which is also what the parser checks
// keys against. A few keys in more detail:
//   zero_optimization.reduce_bucket_size  gradient elements per reduction
//       bucket. During backward, reduce_gradients() packs units' gradients
//       into buckets; a full bucket's all-reduce (stages 0/1) or
//       reduce-scatter (stages 2/3) starts at once; units larger than a
//       bucket are split. At stages 2/3 a bucket holds the same slice of
//       every rank's shard, so its size is rounded down to a multiple of the
//       world size. Results do not depend on it (runtime/sharding/grad_reducer.h;
//       with zeroshard.reduction_order "native" they may, in the last bits).
//   zeroshard.reduction_order  "rank" (default): gradient reductions sum
//       the ranks in rank order, bitwise the same for every bucket size,
//       overlap setting, offload tier and (without gradient accumulation)
//       stage; "native": the backend's
//       all-reduce / reduce-scatter (comm/ordered_reduce.h).
//   zero_optimization.overlap_comm  true: bucket collectives run in the
//       background while backward goes on (at most 2 in flight), and stage 3
//       prefetches the next unit's all-gather. Default as DeepSpeed: true at
//       stage 3, false at stages 0-2.
//   zero_optimization.contiguous_gradients  zeroshard always keeps gradients
//       in one pre-faulted flat buffer per unit, so true (the default)
//       changes nothing and false is a ConfigError.
//   offload tiers: runtime/config/offload_config.h; aio: offload/io/aio_config.h;
//   scheduler: optimizer/lr_schedule.h.
// The reader reports every problem of a file in one ConfigError (see
// runtime/config/config_diagnostics.h) and returns warnings in
// EngineConfig::warnings.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/ordered_reduce.h"
#include "core/dtype.h"
#include "optimizer/loss_scaler.h"
#include "optimizer/lr_schedule.h"
#include "optimizer/optimizer.h"
#include "runtime/config/config_options.h"
#include "runtime/config/observe_config.h"
#include "runtime/config/offload_config.h"
#include "runtime/config/ps_config.h"
#include "runtime/config/zeropp_config.h"

namespace zeroshard {

/// Where an Engine keeps parameters, gradients and optimizer state and runs
/// its element-wise work: cpu (host memory, kernels/cpu) or cuda (GPU
/// memory, kernels/cuda, collectives on NCCL). Chosen by the Engine
/// constructor, not by the ds_config file (DeepSpeed takes it from the
/// model's torch device). See [Note: compute device] in runtime/sharding/device_ops.h.
enum class ComputeDevice { cpu, cuda };

/// zero_optimization section.
struct ZeroConfig {
  int stage = 0;  ///< 0 (DDP), 1 (P_os), 2 (P_os+g), 3 (P_os+g+p)
  /// Gradient elements per reduction bucket (runtime/sharding/grad_reducer.h); > 0.
  std::int64_t reduce_bucket_size = 500000000;
  /// Parameter elements per bucket of the stage 1/2 post-step all-gather; > 0.
  std::int64_t allgather_bucket_size = 500000000;
  /// Overlap collectives with compute; unset = DeepSpeed's default (true at
  /// stage 3, false at stages 0-2). Read it through overlap().
  std::optional<bool> overlap_comm;
  /// Only true is accepted: zeroshard's gradients are always contiguous
  /// (see the key list above).
  bool contiguous_gradients = true;
  /// Stage 3's knobs (runtime/sharding/unsharder.h, [Note: unshard order]; no
  /// effect at stages 0-2), in padded elements of the compute dtype, each
  /// >= 0. zeroshard's defaults keep stage 3's gathered memory at about two
  /// units; DeepSpeed's (5e7, 1e9, 1e9, 1e5) keep every unit of a model
  /// under 1e9 elements gathered from its forward to its backward use.
  /// stage3_prefetch_bucket_size: how far the prefetch runs ahead (1 = the
  /// next unit; 0 = none).
  std::int64_t prefetch_bucket_size = 1;
  /// stage3_max_live_parameters: most elements of gathered units alive at
  /// once that prefetches and kept units may make.
  std::int64_t max_live_parameters = 1000000000;
  /// stage3_max_reuse_distance: a unit used again within this many elements
  /// stays gathered (0: only when it is used next).
  std::int64_t max_reuse_distance = 0;
  /// stage3_param_persistence_threshold: a unit whose parameters all have
  /// at most this many elements stays gathered on every rank (0 = none).
  std::int64_t param_persistence_threshold = 0;
  /// stage3_model_persistence_threshold: most parameter elements of all
  /// persistent units together.
  std::int64_t model_persistence_threshold = std::numeric_limits<std::int64_t>::max();
  /// stage3_gather_16bit_weights_on_model_save (older name
  /// stage3_gather_fp16_weights_on_model_save): save_checkpoint also writes
  /// the consolidated parameters in the compute dtype, model.safetensors in
  /// the checkpoint directory, gathered unit by unit at stage 3
  /// (docs/checkpoint-format.md, "Consolidated weights"). Any stage.
  bool gather_16bit_weights_on_model_save = false;
  /// ZeRO++: zero_quantized_weights, zero_hpz_partition_size,
  /// zero_quantized_gradients and zeroshard.zeropp.* (runtime/config/zeropp_config.h).
  ZeroppConfig zeropp;
  /// Whether reductions run in the background and stage 3 prefetches.
  bool overlap() const { return overlap_comm.value_or(stage == 3); }
};


/// DeepSpeed's batch arithmetic: train_batch_size = micro x accumulation x
/// world. Any two of the three give the third; train_batch_size alone gives
/// accumulation 1; micro alone gives accumulation 1; none gives micro 1
/// (DeepSpeed refuses that file; zeroshard keeps its default). Throws
/// ConfigError showing the arithmetic when the three disagree, when a
/// division leaves a remainder, or when the product overflows int64
/// (checked multiplication, never a wrapped value). `source` prefixes the
/// message.
struct BatchSizes {
  std::int64_t train_batch_size;
  std::int64_t train_micro_batch_size_per_gpu;
  std::int64_t gradient_accumulation_steps;
};
BatchSizes resolve_batch_sizes(std::optional<std::int64_t> train_batch_size,
                               std::optional<std::int64_t> micro_batch,
                               std::optional<std::int64_t> accumulation, int world_size,
                               const std::string& source);

/// What a second Engine::save_checkpoint_async does while one is in flight.
enum class AsyncInFlight { wait, refuse };

/// The "activation_checkpointing" section: how the store of the loop's
/// checkpointed activations holds them (runtime/activation/
/// activation_store.h). Plain value type.
struct ActivationCheckpointingConfig {
  /// partition_activations: each checkpoint split over the tensor-parallel
  /// group (1/tp kept per rank), all-gathered when restored.
  bool partition_activations = false;
};

/// The "checkpoint" section ([Note: async checkpoint] in
/// runtime/engine/engine_save_async.cpp). Plain value type.
struct CheckpointConfig {
  /// checkpoint.async: the example programs' --save-every saves with
  /// Engine::save_checkpoint_async, and finalize() reserves the staging
  /// area (host memory, counted by the ledger and the memory estimate).
  bool async = false;
  /// checkpoint.staging_memory: the most bytes of host memory one rank's
  /// snapshot may stage (its rank file, and on rank 0 the consolidated
  /// weights); a larger snapshot is refused with a ConfigError naming both
  /// sizes. 0: no limit.
  std::int64_t staging_memory = 0;
  /// checkpoint.async_in_flight: "wait" (the default) finishes the save in
  /// flight first; "refuse" throws an Error naming its tag.
  AsyncInFlight in_flight = AsyncInFlight::wait;
};

/// Whole engine configuration. Plain value type; validate() checks ranges.
struct EngineConfig {
  std::optional<std::int64_t> train_batch_size;  ///< checked against the world size
  std::int64_t train_micro_batch_size_per_gpu = 1;
  std::int64_t gradient_accumulation_steps = 1;
  /// False when the file left the key out (or "auto" without a value) for
  /// resolve_batch() to derive from the other two at the world size; true
  /// for configurations built in code.
  bool micro_batch_given = true;
  bool accumulation_given = true;
  double gradient_clipping = 0.0;  ///< 0 disables clipping
  std::int64_t steps_per_print = 10;
  OptimizerHyper optimizer;
  ZeroConfig zero;
  DType compute_dtype = DType::f32;  ///< f32, bf16 (bf16.enabled) or f16 (fp16.enabled)
  LossScaleConfig loss_scale;        ///< used when compute_dtype is f16
  std::optional<DType> communication_data_type;  ///< unset: fp32
  /// data_types.grad_accum_dtype: the dtype micro-batch gradients are summed
  /// in (DeepSpeed's key, added for DeepSpeed #1800/#2768). Unset: fp32.
  /// Only fp32 or the compute dtype (validate() refuses others); see
  /// [Note: gradient accumulator] in runtime/engine/engine.h.
  std::optional<DType> grad_accum_dtype;
  LrSchedule scheduler;
  OffloadConfig offload;  ///< offload tiers (runtime/config/offload_config.h)
  /// "zeroshard": {"reduction_order"}: how gradient reductions sum the ranks
  /// ([Note: rank-ordered reduction] in comm/ordered_reduce.h).
  ReductionOrder reduction_order = ReductionOrder::rank;
  /// "zeroshard": {"max_consecutive_skipped_steps"}: this many accumulation
  /// boundaries in a row skipped for Inf/NaN gradients make step() throw an
  /// agreed error (runtime/engine/engine.h); 0: no limit.
  std::int64_t max_consecutive_skipped_steps = 100;
  /// "zeroshard": {"overlap_optimizer_step"}: at stage 3 with
  /// offload_optimizer on nvme, step() starts the optimizer update on a
  /// background thread and returns; each unit's next unshard waits for its
  /// own update, everything else that touches state for the whole step.
  /// The same bits as the synchronous step ([Note: deferred optimizer
  /// step] in runtime/update/deferred_step.h).
  bool overlap_optimizer_step = false;
  /// wall_clock_breakdown, comms_logger, zeroshard.trace and
  /// zeroshard.collective_timeout_s (runtime/config/observe_config.h).
  ObserveConfig observe;
  CheckpointConfig checkpoint;  ///< the "checkpoint" section
  /// The "parameter_server" section (runtime/config/ps_config.h).
  ParameterServerConfig parameter_server;
  ActivationCheckpointingConfig activation_checkpointing;  ///< the "activation_checkpointing" section
  std::string source = "configuration";  ///< file it came from, named in error messages
  /// Lines the reader warns with ("ds.json: ..."): keys accepted without
  /// effect, legacy spellings and what they became. The examples print them.
  std::vector<std::string> warnings;
  /// What each "auto" of the file became, in key-table order, with its rule
  /// (ConfigOptions::rules, the hidden-size rules, and the batch keys the
  /// arithmetic derived at ConfigOptions::world_size); the examples print
  /// auto_fill_summary() of it. Empty for a file without "auto".
  std::vector<AutoFill> auto_fills;

  /// Parses a ds_config object. `source` names the file (or "<json>") in
  /// messages. Collects every problem (unknown key with the closest known
  /// one, wrong JSON type, invalid value, refused key, unresolved "auto",
  /// batch arithmetic when options.world_size is set) and throws one
  /// ConfigError listing them all; objects and arrays nested more than 32
  /// levels deep are refused first (see [Note: bounded config JSON] in
  /// runtime/config/config_diagnostics.h). Values quoted are cut to a short prefix.
  static EngineConfig from_json(const nlohmann::json& j, const std::string& source = "<json>",
                                const ConfigOptions& options = {});
  /// Reads and parses a ds_config file. Throws ConfigError if it cannot be
  /// read or parsed: the message names the file and, for syntax errors and
  /// nesting deeper than 32 levels, the byte offset; for a key given twice,
  /// its path; for a number beyond the range of a double (1e400), the key.
  /// Then as from_json.
  static EngineConfig from_file(const std::string& path, const ConfigOptions& options = {});

  /// Derives the batch key the file left out (resolve_batch_sizes) at
  /// `world_size` and stores all three; afterwards both *_given are true.
  /// Throws ConfigError as resolve_batch_sizes.
  void resolve_batch(int world_size);

  /// The dtype of the gradient accumulator: grad_accum_dtype, else fp32
  /// (in fp32 training always fp32, the compute dtype).
  DType accumulation_dtype() const {
    return compute_dtype == DType::f32 ? DType::f32 : grad_accum_dtype.value_or(DType::f32);
  }

  /// Throws ConfigError naming the first key whose value is out of range
  /// (stage not 0-3, lr < 0, accumulation < 1, betas outside [0, 1), ...).
  void validate() const;
  /// validate(), then checks train_batch_size == micro x accumulation x
  /// world_size when set (checked multiplication: an overflowing product is
  /// an error). Throws ConfigError, also when a batch key still has to be
  /// derived (call resolve_batch first).
  void validate_for_world(int world_size) const;
  /// validate() with `source` (a file name) in the messages.
  void validate_in(const std::string& source) const;
};

}  // namespace zeroshard
