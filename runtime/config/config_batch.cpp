// DeepSpeed's batch arithmetic (runtime/config/config.h).
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/config.h"

namespace zeroshard {

namespace {

// a x b, or nullopt when it overflows int64.
std::optional<std::int64_t> mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

[[noreturn]] void fail(const std::string& source, const std::string& text) {
  throw ConfigError(fmt::format("{}: {}", source, text));
}

// value / (a x b) where the file gave `value` and the two factors: exact,
// or an error showing the division.
std::int64_t divide(std::int64_t value, const char* value_key, std::int64_t a, const char* a_key, std::int64_t world,
                    const char* result_key, const std::string& source) {
  const auto denom = mul(a, world);
  if (!denom) {
    fail(source, fmt::format("{} ({}) x world size ({}) overflows a 64-bit integer", a_key, a, world));
  }
  if (value % *denom != 0) {
    fail(source, fmt::format("\"{}\" = {} is not a multiple of {} ({}) x world size ({}) = {}, so {} would be "
                             "{} / {} = {:.6g}; change one of them",
                             value_key, value, a_key, a, world, *denom, result_key, value, *denom,
                             static_cast<double>(value) / static_cast<double>(*denom)));
  }
  return value / *denom;
}

}  // namespace

BatchSizes resolve_batch_sizes(std::optional<std::int64_t> tbs, std::optional<std::int64_t> micro,
                               std::optional<std::int64_t> gas, int world_size, const std::string& source) {
  if (world_size < 1) fail(source, fmt::format("world size {} is invalid: must be >= 1", world_size));
  const std::int64_t w = world_size;
  const std::pair<const char*, std::optional<std::int64_t>> given[] = {
      {"train_batch_size", tbs}, {"train_micro_batch_size_per_gpu", micro}, {"gradient_accumulation_steps", gas}};
  for (const auto& [key, v] : given) {
    if (v && *v < 1) fail(source, fmt::format("\"{}\" = {} is invalid: must be >= 1", key, *v));
  }
  if (tbs && micro && !gas) {
    return {*tbs, *micro,
            divide(*tbs, "train_batch_size", *micro, "train_micro_batch_size_per_gpu", w,
                   "gradient_accumulation_steps", source)};
  }
  if (tbs && !micro) {
    const std::int64_t g = gas.value_or(1);
    return {*tbs,
            divide(*tbs, "train_batch_size", g, "gradient_accumulation_steps", w, "train_micro_batch_size_per_gpu",
                   source),
            g};
  }
  const std::int64_t m = micro.value_or(1), g = gas.value_or(1);
  std::optional<std::int64_t> product = mul(m, g);
  if (product) product = mul(*product, w);
  if (!product) {
    fail(source, fmt::format("train_micro_batch_size_per_gpu ({}) x gradient_accumulation_steps ({}) x world size "
                             "({}) overflows a 64-bit integer{}",
                             m, g, w,
                             tbs ? fmt::format("; \"train_batch_size\" = {} cannot match it", *tbs) : std::string()));
  }
  if (tbs && *tbs != *product) {
    fail(source, fmt::format("\"train_batch_size\" = {} does not equal train_micro_batch_size_per_gpu ({}) x "
                             "gradient_accumulation_steps ({}) x world size ({}) = {}",
                             *tbs, m, g, w, *product));
  }
  return {*product, m, g};
}

void EngineConfig::resolve_batch(int world_size) {
  const BatchSizes b = resolve_batch_sizes(
      train_batch_size, micro_batch_given ? std::optional(train_micro_batch_size_per_gpu) : std::nullopt,
      accumulation_given ? std::optional(gradient_accumulation_steps) : std::nullopt, world_size, source);
  train_batch_size = b.train_batch_size;
  train_micro_batch_size_per_gpu = b.train_micro_batch_size_per_gpu;
  gradient_accumulation_steps = b.gradient_accumulation_steps;
  micro_batch_given = accumulation_given = true;
}

void EngineConfig::validate_for_world(int world_size) const {
  validate();
  const BatchSizes b = resolve_batch_sizes(
      train_batch_size, micro_batch_given ? std::optional(train_micro_batch_size_per_gpu) : std::nullopt,
      accumulation_given ? std::optional(gradient_accumulation_steps) : std::nullopt, world_size, source);
  if (b.train_micro_batch_size_per_gpu != train_micro_batch_size_per_gpu ||
      b.gradient_accumulation_steps != gradient_accumulation_steps) {
    fail(source, fmt::format("the batch keys at world size {} give train_micro_batch_size_per_gpu = {} and "
                             "gradient_accumulation_steps = {}, but the configuration holds {} and {}: call "
                             "EngineConfig::resolve_batch(world_size) (or set ConfigOptions::world_size) first",
                             world_size, b.train_micro_batch_size_per_gpu, b.gradient_accumulation_steps,
                             train_micro_batch_size_per_gpu, gradient_accumulation_steps));
  }
}

}  // namespace zeroshard
