// What the embedding program gives the ds_config reader besides the file
// (values for "auto", hidden size, world size, strict mode), and the
// hidden-size rules for "auto" bucket sizes. Included by config.h and by
// the reader's passes (config_normalize.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace zeroshard {

/// What the embedding program supplies to the ds_config reader: values for
/// keys the file sets to "auto" (what HF Trainer and Accelerate fill in),
/// the model's hidden size for DeepSpeed's bucket-size rules, the world
/// size for the batch arithmetic, and strict mode. Plain value type.
struct ConfigOptions {
  /// Values by dotted key path ("optimizer.params.lr"), used only where the
  /// file says "auto"; a path whose key may not be "auto" (docs/config.md,
  /// column "auto") is a ConfigError.
  std::map<std::string, nlohmann::json> values;
  /// Model hidden size (elements): fills "auto" in reduce_bucket_size
  /// (hidden^2), stage3_prefetch_bucket_size (0.9 hidden^2, rounded down)
  /// and stage3_param_persistence_threshold (10 hidden), the rules of HF
  /// transformers' DeepSpeed integration. Unset: those stay unresolved.
  std::optional<std::int64_t> hidden_size;
  /// World size: when set, the reader does the batch arithmetic
  /// (EngineConfig::resolve_batch) and reports its errors with the rest.
  std::optional<int> world_size;
  /// Keys accepted without effect and legacy spellings become errors (the
  /// file's "zeroshard": {"strict": true} does the same).
  bool strict = false;

  /// Sets values[key] = value; returns *this for chaining.
  ConfigOptions& fill(const std::string& key, nlohmann::json value) {
    values[key] = std::move(value);
    return *this;
  }
};

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
