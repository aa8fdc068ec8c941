// What the embedding program gives the ds_config reader besides the file
// (values for "auto", hidden size, world size, strict mode), the rules by
// which HF Trainer fills "auto" from a program's settings
// (ConfigOptions::from_program, runtime/config/config_auto.cpp), and the
// record of what each "auto" became. Included by config.h and by the
// reader's passes (config_normalize.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace zeroshard {

/// What a training program knows that HF Trainer fills a ds_config's
/// "auto" keys from: its TrainingArguments (per_device_train_batch_size,
/// gradient_accumulation_steps, learning_rate, adam_beta1/2, adam_epsilon,
/// weight_decay, max_grad_norm, fp16 / bf16, the warm-up and the number of
/// training steps), the model's hidden size and the world size. Plain value
/// type; the defaults are HF TrainingArguments' own, except lr (HF: 5e-5).
struct ProgramValues {
  std::int64_t micro_batch = 8;            ///< samples per rank and micro-batch (>= 1)
  std::int64_t gradient_accumulation = 1;  ///< micro-batches per optimizer step (>= 1)
  double lr = 1e-3;                        ///< learning rate
  double beta1 = 0.9;                      ///< Adam's beta1
  double beta2 = 0.999;                    ///< Adam's beta2
  double eps = 1e-8;                       ///< Adam's epsilon
  double weight_decay = 0.0;
  double gradient_clipping = 1.0;          ///< max global gradient norm (HF's max_grad_norm)
  DType precision = DType::f32;            ///< f32, bf16 (--bf16) or f16 (--fp16)
  /// Model width (elements; HF: config.hidden_size, or the largest of
  /// config.hidden_sizes). Unset: the bucket-size keys stay unfilled.
  std::optional<std::int64_t> hidden_size;
  int world_size = 1;                      ///< data-parallel ranks
  /// Optimizer steps of the whole run (HF's num_training_steps). Unset:
  /// scheduler.params.total_num_steps stays unfilled.
  std::optional<std::int64_t> total_steps;
  std::int64_t warmup_steps = 0;           ///< HF's warmup_steps (get_warmup_steps)
  /// Accelerate's zero3_save_16bit_model: fills
  /// stage3_gather_16bit_weights_on_model_save.
  bool save_16bit_model = false;
};

/// What the embedding program supplies to the ds_config reader: values for
/// keys the file sets to "auto" (what HF Trainer and Accelerate fill in),
/// the model's hidden size for DeepSpeed's bucket-size rules, the world
/// size for the batch arithmetic, and strict mode. Plain value type.
struct ConfigOptions {
  /// Values by dotted key path ("optimizer.params.lr"), used only where the
  /// file says "auto"; a path whose key may not be "auto" (docs/config.md,
  /// column "auto") is a ConfigError.
  std::map<std::string, nlohmann::json> values;
  /// Where each of `values` came from, by key path, as the reader reports
  /// it in EngineConfig::auto_fills ("lr", "micro_batch"); a key
  /// without one reports "ConfigOptions::fill".
  std::map<std::string, std::string> rules;
  /// Model hidden size (elements): fills "auto" in reduce_bucket_size
  /// (hidden^2), stage3_prefetch_bucket_size (0.9 hidden^2, rounded down)
  /// and stage3_param_persistence_threshold (10 hidden), the rules of HF
  /// transformers' DeepSpeed integration. Unset: those stay unresolved.
  std::optional<std::int64_t> hidden_size;
  /// World size: when set, the reader does the batch arithmetic
  /// (EngineConfig::resolve_batch) and reports its errors with the rest.
  /// The ranks that train: a parameter-server job's workers, without its
  /// servers (the Engine checks the batch over those).
  std::optional<int> world_size;
  /// Keys accepted without effect and legacy spellings become errors (the
  /// file's "zeroshard": {"strict": true} does the same).
  bool strict = false;

  /// Sets values[key] = value (and rules[key] = rule when given); returns
  /// *this for chaining.
  ConfigOptions& fill(const std::string& key, nlohmann::json value, std::string rule = "") {
    values[key] = std::move(value);
    if (!rule.empty()) rules[key] = std::move(rule);
    return *this;
  }

  /// Every "auto" key filled as HF Trainer fills it from a program's
  /// settings (transformers' integrations/deepspeed.py,
  /// HfTrainerDeepSpeedConfig.trainer_config_process and
  /// trainer_config_finalize; Accelerate's DeepSpeedPlugin for
  /// stage3_gather_16bit_weights_on_model_save): the rows of auto_rules(),
  /// each with its rule. train_batch_size "auto" is derived by the batch
  /// arithmetic from the micro-batch, the accumulation and world_size
  /// (micro x accumulation x world, as HF computes it). Unlike HF, a value
  /// the file sets itself is kept, not compared with the program's. Never
  /// throws (bad values are reported by the reader).
  static ConfigOptions from_program(const ProgramValues& p);
};

/// One "auto" key and the value the reader put in its place, with the rule
/// that gave it ("micro_batch", "hidden^2, hidden 1024",
/// "micro x accumulation x world"). Plain value.
struct AutoFill {
  std::string key;
  nlohmann::json value;
  std::string rule;
};

/// "key = value (rule), ..." for a program's one line listing what each
/// "auto" became; "" for none.
std::string auto_fill_summary(const std::vector<AutoFill>& fills);

/// One row of HF's "auto" rules (docs/config.md prints them): the key, the
/// value it takes (ProgramValues' names; what auto_fills records as the
/// rule), the same in HF's terms, and where the rule is from.
struct AutoRule {
  const char* key;
  const char* value;
  const char* hf;
  const char* source;
};
/// Every rule ConfigOptions::from_program and ConfigOptions::hidden_size
/// apply, in document order. Thread-safe.
const std::vector<AutoRule>& auto_rules();

/// The values HF's DeepSpeed integration derives from a model's hidden size
/// for "auto" bucket keys (elements). Throws ConfigError when hidden < 1 or
/// hidden^2 overflows int64.
struct AutoBucketSizes {
  std::int64_t reduce_bucket_size;                  ///< hidden^2
  std::int64_t stage3_prefetch_bucket_size;         ///< floor(0.9 hidden^2)
  std::int64_t stage3_param_persistence_threshold;  ///< 10 hidden
};
AutoBucketSizes auto_bucket_sizes(std::int64_t hidden_size);

}  // namespace zeroshard
