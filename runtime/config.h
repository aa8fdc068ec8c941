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
// Any other key is a ConfigError naming it: zeroshard never ignores a setting
// it does not implement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "optimizer/optimizer.h"

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
