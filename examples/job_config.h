// The Engine configuration of an example program from its command-line
// flags: a ds_config file (--config, DeepSpeed keys) whose "auto" values the
// flags fill, as HF Trainer does from its arguments, or the program's
// defaults overridden by the same flags. Shared by examples/fashion_mnist
// and examples/gpt. Header-only.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/config/config.h"

namespace zeroshard::examples {

/// The configuration flags an example program takes (CLI11 fills them).
/// Plain value type.
struct ConfigFlags {
  std::string config_path;                  ///< --config ("": the program's defaults)
  int stage = -1;                           ///< --stage; -1: from the config or the defaults
  std::optional<std::int64_t> micro_batch;  ///< --micro-batch: fills "auto" train_micro_batch_size_per_gpu
  /// --gradient-accumulation-steps: fills "auto" gradient_accumulation_steps
  std::optional<std::int64_t> accumulation;
  std::optional<double> lr;                 ///< --lr: fills "auto" optimizer.params.lr
  std::vector<std::string> fills;           ///< --fill KEY=JSON: fills "auto" KEY
  bool breakdown = false;                   ///< --breakdown: sets wall_clock_breakdown
  std::string trace_dir;                    ///< --trace DIR: zeroshard.trace on, output_path DIR
  /// --calibration FILE (zs_plan --calibrate): the program prints the
  /// predicted step time beside the measured one; sets wall_clock_breakdown.
  std::string calibration_path;
};

/// AdamW (beta1 0.9, eps 1e-8) with the given micro-batch (sequences or
/// images per rank), learning rate, beta2 and weight decay; no gradient
/// accumulation, gradient clipping 1, ZeRO stage 3. What an example trains
/// with when no --config is given. Never throws.
inline EngineConfig adamw_job_defaults(std::int64_t micro_batch, double lr, double beta2, double weight_decay) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = micro_batch;
  c.gradient_accumulation_steps = 1;
  c.gradient_clipping = 1.0;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = lr;
  c.optimizer.beta1 = 0.9;
  c.optimizer.beta2 = beta2;
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = weight_decay;
  c.zero.stage = 3;
  return c;
}

/// The values --micro-batch, --lr and each --fill KEY=JSON give to the
/// "auto" keys of --config (docs/config.md), in that order (a --fill of the
/// same key wins). The caller adds the model's hidden size. Throws
/// ConfigError naming --fill for a value that is not KEY=JSON.
inline ConfigOptions config_fills(const ConfigFlags& f) {
  ConfigOptions fill;
  if (f.micro_batch) fill.fill("train_micro_batch_size_per_gpu", *f.micro_batch);
  if (f.accumulation) fill.fill("gradient_accumulation_steps", *f.accumulation);
  if (f.lr) fill.fill("optimizer.params.lr", *f.lr);
  for (const std::string& kv : f.fills) {
    const std::size_t eq = kv.find('=');
    const nlohmann::json v =
        eq == std::string::npos ? nlohmann::json() : nlohmann::json::parse(kv.substr(eq + 1), nullptr, false);
    if (eq == std::string::npos || v.is_discarded()) {
      throw ConfigError(fmt::format("--fill \"{}\": expected KEY=JSON, e.g. optimizer.params.betas=[0.9,0.999]", kv));
    }
    fill.fill(kv.substr(0, eq), v);
  }
  return fill;
}

/// The configuration of a job on `world_size` data-parallel ranks:
///  - with --config, the file read by EngineConfig::from_file with `fill`
///    (config_fills plus the hidden size) and the world size;
///  - without, `defaults` with --micro-batch, --gradient-accumulation-steps
///    and --lr set over it;
/// then --stage, --breakdown (or --calibration) and --trace over either, then `adjust` (the
/// program's own overrides, e.g. --bf16), then EngineConfig::validate and
/// validate_for_world.
/// Throws ConfigError as EngineConfig::from_file / validate /
/// validate_for_world.
inline EngineConfig make_job_config(const ConfigFlags& f, ConfigOptions fill, EngineConfig defaults, int world_size,
                                    const std::function<void(EngineConfig&)>& adjust = {}) {
  fill.world_size = world_size;
  EngineConfig c = f.config_path.empty() ? std::move(defaults) : EngineConfig::from_file(f.config_path, fill);
  if (f.config_path.empty() && f.micro_batch) c.train_micro_batch_size_per_gpu = *f.micro_batch;
  if (f.config_path.empty() && f.accumulation) c.gradient_accumulation_steps = *f.accumulation;
  if (f.config_path.empty() && f.lr) c.optimizer.lr = *f.lr;
  if (f.stage >= 0) c.zero.stage = f.stage;
  if (f.breakdown || !f.calibration_path.empty()) c.observe.wall_clock_breakdown = true;
  if (!f.trace_dir.empty()) {
    c.observe.trace = true;
    c.observe.trace_output_path = f.trace_dir;
  }
  if (adjust) adjust(c);
  c.validate();
  c.validate_for_world(world_size);
  return c;
}

}  // namespace zeroshard::examples
