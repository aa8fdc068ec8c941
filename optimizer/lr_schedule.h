// Learning-rate schedules with DeepSpeed's `scheduler` names and parameters
// (deepspeed.runtime.lr_schedules): WarmupLR, WarmupDecayLR, WarmupCosineLR.
//
// Step k (0-based) is the k-th optimizer step actually applied; skipped
// steps (overflow) do not advance it. The rate used by step k is
// lr_at(k, group), the closed forms below with DeepSpeed's
// last_batch_iteration = k. (DeepSpeed itself applies WarmupLR's first value
// only after the first optimizer step; here step 0 already uses it.)
//
//   gamma_log(k)    = ln(k + 1) / ln(W)      gamma_linear(k) = k / W      (k < W)
//   W = max(2, warmup_num_steps)
//   WarmupLR:       lr = min_lr + (max_lr - min_lr) * (k < W ? gamma(k) : 1)
//   WarmupDecayLR:  as WarmupLR while k < W, then
//                   lr = min_lr + (max_lr - min_lr) * max(0, (T - k) / max(1, T - W))
//   WarmupCosineLR: lr = group_lr * ratio(k),
//                   k < W: ratio = warmup_min_ratio + (1 - warmup_min_ratio) * gamma(k)
//                   else:  ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) *
//                                  (1 + cos(pi * (k - W + 1) / (T - W))) / 2)
// with T = total_num_steps. warmup_min_lr / warmup_max_lr may be one number
// or a list with one value per parameter group (as DeepSpeed allows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zeroshard {

/// Which schedule; `none` keeps every group's lr constant.
enum class LrScheduleKind { none, warmup_lr, warmup_decay_lr, warmup_cosine_lr };

/// The `scheduler` section of a ds_config. Plain value type.
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::none;
  std::vector<double> warmup_min_lr = {0.0};    ///< one value, or one per group
  std::vector<double> warmup_max_lr = {0.001};  ///< one value, or one per group
  std::int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  ///< "log" or "linear"
  std::int64_t total_num_steps = 0;  ///< WarmupDecayLR, WarmupCosineLR (> 0)
  double warmup_min_ratio = 0.0;     ///< WarmupCosineLR
  double cos_min_ratio = 0.0001;     ///< WarmupCosineLR

  /// Parses `scheduler` {type, params}. Throws ConfigError naming the key
  /// ("scheduler.params.warmup_num_steps", ...) for unknown keys, unknown
  /// types and invalid values. `source` names the file in messages.
  static LrSchedule from_json(const nlohmann::json& j, const std::string& source);

  /// Learning rate of parameter group `group` (whose configured rate is
  /// group_lr) at 0-based applied step k. Throws ConfigError if a per-group
  /// list does not have `groups` entries.
  double lr_at(std::int64_t k, int group, int groups, double group_lr) const;

  /// Name as in DeepSpeed ("WarmupLR", ...), or "none".
  std::string name() const;
};

}  // namespace zeroshard
