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

namespace zeroshard {

/// zero_optimization section.
struct ZeroConfig {
  int stage = 0;  ///< 0 (DDP), 1 (P_os), 2 (P_os+g), 3 (P_os+g+p)
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
