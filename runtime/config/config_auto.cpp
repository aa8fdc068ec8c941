// HF's rules for "auto" (runtime/config/config_options.h): what
// ConfigOptions::from_program fills, the hidden-size bucket rules, and the
// record of the fills a program prints.
#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/config_options.h"

namespace zeroshard {

namespace {

// Sources of the rules, as docs/config.md names them.
constexpr const char* kHfProcess =
    "HF Trainer: transformers' integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process";
constexpr const char* kHfFinalize =
    "HF Trainer: transformers' integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_finalize";

// The rule text of `key` in auto_rules().
std::string rule_of(const char* key) {
  for (const AutoRule& r : auto_rules()) {
    if (std::string(r.key) == key) return r.value;
  }
  return "";
}

}  // namespace

const std::vector<AutoRule>& auto_rules() {
  static const std::vector<AutoRule> rules = {
      {"train_micro_batch_size_per_gpu", "micro_batch", "per_device_train_batch_size", kHfProcess},
      {"gradient_accumulation_steps", "gradient_accumulation", "gradient_accumulation_steps", kHfProcess},
      {"train_batch_size", "micro x accumulation x world",
       "world_size x per_device_train_batch_size x gradient_accumulation_steps", kHfProcess},
      {"gradient_clipping", "gradient_clipping", "max_grad_norm", kHfProcess},
      {"optimizer.params.lr", "lr", "learning_rate", kHfProcess},
      {"optimizer.params.betas", "[beta1, beta2]", "[adam_beta1, adam_beta2]", kHfProcess},
      {"optimizer.params.eps", "eps", "adam_epsilon", kHfProcess},
      {"optimizer.params.weight_decay", "weight_decay", "weight_decay", kHfProcess},
      {"scheduler.params.warmup_min_lr", "0", "0 (not a TrainingArguments value)", kHfProcess},
      {"scheduler.params.warmup_max_lr", "lr", "learning_rate", kHfProcess},
      {"scheduler.params.warmup_num_steps", "warmup_steps", "get_warmup_steps(num_training_steps)", kHfFinalize},
      {"scheduler.params.total_num_steps", "total_steps", "num_training_steps", kHfFinalize},
      {"fp16.enabled", "precision == fp16", "fp16", kHfProcess},
      {"bf16.enabled", "precision == bf16", "bf16", kHfProcess},
      {"zero_optimization.reduce_bucket_size", "hidden^2", "hidden_size^2", kHfFinalize},
      {"zero_optimization.stage3_prefetch_bucket_size",
       "0.9 hidden^2",
       "0.9 hidden_size^2, at stage 3 only (zeroshard fills it at any stage; below 3 it has no effect)",
       kHfFinalize},
      {"zero_optimization.stage3_param_persistence_threshold", "10 hidden",
       "10 hidden_size, at stage 3 only (as above)", kHfFinalize},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", "save_16bit_model", "zero3_save_16bit_model",
       "Accelerate: accelerate's utils/dataclasses.py, DeepSpeedPlugin"},
  };
  return rules;
}

ConfigOptions ConfigOptions::from_program(const ProgramValues& p) {
  ConfigOptions o;
  o.world_size = p.world_size;
  o.hidden_size = p.hidden_size;
  auto put = [&](const char* key, nlohmann::json value) { o.fill(key, std::move(value), rule_of(key)); };
  put("train_micro_batch_size_per_gpu", p.micro_batch);
  put("gradient_accumulation_steps", p.gradient_accumulation);
  put("gradient_clipping", p.gradient_clipping);
  put("optimizer.params.lr", p.lr);
  put("optimizer.params.betas", nlohmann::json::array({p.beta1, p.beta2}));
  put("optimizer.params.eps", p.eps);
  put("optimizer.params.weight_decay", p.weight_decay);
  put("scheduler.params.warmup_min_lr", 0);
  put("scheduler.params.warmup_max_lr", p.lr);
  put("scheduler.params.warmup_num_steps", p.warmup_steps);
  if (p.total_steps) put("scheduler.params.total_num_steps", *p.total_steps);
  put("fp16.enabled", p.precision == DType::f16);
  put("bf16.enabled", p.precision == DType::bf16);
  put("zero_optimization.stage3_gather_16bit_weights_on_model_save", p.save_16bit_model);
  return o;
}

std::string auto_fill_summary(const std::vector<AutoFill>& fills) {
  std::string out;
  for (const AutoFill& f : fills) {
    out += fmt::format("{}{} = {} ({})", out.empty() ? "" : ", ", f.key, f.value.dump(), f.rule);
  }
  return out;
}

AutoBucketSizes auto_bucket_sizes(std::int64_t hidden) {
  std::int64_t sq = 0;
  if (hidden < 1 || __builtin_mul_overflow(hidden, hidden, &sq)) {
    throw ConfigError(fmt::format("ConfigOptions::hidden_size = {} is invalid: must be >= 1 and its square must fit "
                                  "in 64 bits",
                                  hidden));
  }
  // 0.9 h^2 rounded down, in integers: 9 h^2 / 10 without overflow; h^2
  // fits, so 10 h does.
  const std::int64_t prefetch = sq / 10 * 9 + (sq % 10) * 9 / 10;
  return AutoBucketSizes{sq, prefetch, hidden * 10};
}

}  // namespace zeroshard
