// Engine configuration, read from a DeepSpeed-style ds_config JSON file.
//
// Supported keys (DeepSpeed names and meaning):
//   train_batch_size                 optional; must equal micro x accumulation x world size
//   train_micro_batch_size_per_gpu   samples per rank per micro-batch (>= 1)
//   gradient_accumulation_steps      micro-batches per optimizer step (>= 1)
//   gradient_clipping                max global L2 norm of the gradients; 0 = off
//   steps_per_print                  how often the example programs log (>= 1)
//   optimizer.type                   "Adam", "AdamW" or "SGD" (case-insensitive)
//   optimizer.params                 lr, betas [b1, b2], eps, weight_decay,
//                                    adam_w_mode (Adam only; default true, as in
//                                    DeepSpeed: "Adam" means AdamW unless false),
//                                    momentum, dampening, nesterov (SGD only)
//   zero_optimization.stage          0, 1, 2 or 3
//   bf16.enabled                     parameters and gradients in bf16, fp32 master weights
//   fp16.enabled                     the same in fp16, with loss scaling:
//   fp16.loss_scale                  0 = dynamic (default), > 0 = static scale
//   fp16.initial_scale_power         dynamic: first scale 2^power (default 16)
//   fp16.loss_scale_window           clean steps before the scale doubles (1000)
//   fp16.hysteresis                  overflows tolerated before halving (2)
//   fp16.min_loss_scale              floor of the dynamic scale (1)
//   communication_data_type          "fp32", "bf16" or "fp16": the dtype gradients travel in
//                                    (default fp32: 16-bit gradients are widened, reduced in
//                                    fp32 and rounded once)
//   scheduler                        {type: WarmupLR | WarmupDecayLR | WarmupCosineLR, params}
//                                    (runtime/lr_schedule.h)
//   zero_optimization.reduce_bucket_size     gradient elements per reduction bucket (default 5e8;
//                                    > 0; a JSON integer or an integral number such as 5e8).
//                                    During backward, reduce_gradients() packs units' gradients
//                                    into buckets; a full bucket's all-reduce (stages 0/1) or
//                                    reduce-scatter (stages 2/3) starts at once; units larger
//                                    than a bucket are split. At stages 2/3 a bucket holds the
//                                    same slice of every rank's shard, so its size is rounded
//                                    down to a multiple of the world size (at least one element
//                                    per rank). Results do not depend on it (runtime/grad_reducer.h).
//   zero_optimization.allgather_bucket_size  parameter elements per bucket of the all-gather of
//                                    updated shards after step() at stages 1/2 (default 5e8; > 0;
//                                    rounded as above). Stage 3 gathers unit by unit.
//   zero_optimization.overlap_comm   true: bucket collectives run in the background while
//                                    backward goes on (at most 2 in flight), and stage 3
//                                    prefetches the next unit's all-gather; false: each bucket's
//                                    collective completes before reduce_gradients() returns and
//                                    stage 3 gathers only on unshard(). Default as DeepSpeed:
//                                    true at stage 3, false at stages 0-2.
//   zero_optimization.contiguous_gradients  DeepSpeed copies gradients into one contiguous buffer
//                                    to avoid fragmentation. zeroshard always keeps gradients in
//                                    one pre-faulted flat buffer per unit and reduced shards in
//                                    one flat buffer per unit, and packs buckets into reused pool
//                                    buffers, so true (the default) changes nothing and false is
//                                    a ConfigError (there is no fragmented mode to switch to).
//   zero_optimization.offload_optimizer, zero_optimization.offload_param,
//   zero_optimization.sub_group_size, aio
//                                    offload tiers (runtime/offload_config.h)
// Any other key is a ConfigError naming it: zeroshard never ignores a setting
// it does not implement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/dtype.h"
#include "optimizer/optimizer.h"
#include "runtime/loss_scaler.h"
#include "runtime/lr_schedule.h"
#include "runtime/offload_config.h"

namespace zeroshard {

/// Where an Engine keeps parameters, gradients and optimizer state and runs
/// its element-wise work: cpu (host memory, kernels/cpu) or cuda (GPU
/// memory, kernels/cuda, collectives on NCCL). Chosen by the Engine
/// constructor, not by the ds_config file (DeepSpeed takes it from the
/// model's torch device). See [Note: compute device] in runtime/device_ops.h.
enum class ComputeDevice { cpu, cuda };

/// zero_optimization section.
struct ZeroConfig {
  int stage = 0;  ///< 0 (DDP), 1 (P_os), 2 (P_os+g), 3 (P_os+g+p)
  /// Gradient elements per reduction bucket (runtime/grad_reducer.h); > 0.
  std::int64_t reduce_bucket_size = 500000000;
  /// Parameter elements per bucket of the stage 1/2 post-step all-gather; > 0.
  std::int64_t allgather_bucket_size = 500000000;
  /// Overlap collectives with compute; unset = DeepSpeed's default (true at
  /// stage 3, false at stages 0-2). Read it through overlap().
  std::optional<bool> overlap_comm;
  /// Only true is accepted: zeroshard's gradients are always contiguous
  /// (see the key list above).
  bool contiguous_gradients = true;
  /// Whether reductions run in the background and stage 3 prefetches.
  bool overlap() const { return overlap_comm.value_or(stage == 3); }
};

/// Whole engine configuration. Plain value type; validate() checks ranges.
struct EngineConfig {
  std::optional<std::int64_t> train_batch_size;  ///< checked against the world size
  std::int64_t train_micro_batch_size_per_gpu = 1;
  std::int64_t gradient_accumulation_steps = 1;
  double gradient_clipping = 0.0;  ///< 0 disables clipping
  std::int64_t steps_per_print = 10;
  OptimizerHyper optimizer;
  ZeroConfig zero;
  DType compute_dtype = DType::f32;  ///< f32, bf16 (bf16.enabled) or f16 (fp16.enabled)
  LossScaleConfig loss_scale;        ///< used when compute_dtype is f16
  std::optional<DType> communication_data_type;  ///< unset: fp32
  LrSchedule scheduler;
  OffloadConfig offload;  ///< offload tiers (runtime/offload_config.h)
  std::string source = "configuration";  ///< file it came from, named in error messages

  /// Parses a ds_config object. `source` names the file (or "<string>") in
  /// error messages. Throws ConfigError naming the key for an unknown key,
  /// a wrong JSON type, or an invalid value.
  static EngineConfig from_json(const nlohmann::json& j, const std::string& source = "<json>");
  /// Reads and parses a ds_config file. Throws ConfigError if it cannot be
  /// read or parsed (message names the file and, for syntax errors, the byte
  /// offset), and as from_json.
  static EngineConfig from_file(const std::string& path);

  /// Throws ConfigError naming the first key whose value is out of range
  /// (stage not 0-3, lr < 0, accumulation < 1, betas outside [0, 1), ...).
  void validate() const;
  /// validate(), then checks train_batch_size == micro x accumulation x
  /// world_size when set. Throws ConfigError.
  void validate_for_world(int world_size) const;
  /// validate() with `source` (a file name) in the messages.
  void validate_in(const std::string& source) const;
};

}  // namespace zeroshard
