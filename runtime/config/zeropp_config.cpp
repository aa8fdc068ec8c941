// ZeRO++'s keys; see runtime/config/zeropp_config.h.
#include "runtime/config/zeropp_config.h"

#include <fmt/format.h>

#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

namespace {

kernels::QuantBits bits_of(int bits) { return bits == 4 ? kernels::QuantBits::int4 : kernels::QuantBits::int8; }

bool valid_block(std::int64_t block) {
  return block >= static_cast<std::int64_t>(kernels::kSymQuantBlockMin) &&
         block <= static_cast<std::int64_t>(kernels::kSymQuantBlockMax) && (block & (block - 1)) == 0;
}

}  // namespace

kernels::SymQuantFormat ZeroppConfig::weight_format() const {
  return kernels::SymQuantFormat{bits_of(weight_bits), static_cast<std::size_t>(weight_block_size)};
}

kernels::SymQuantFormat ZeroppConfig::gradient_format() const {
  return kernels::SymQuantFormat{bits_of(gradient_bits), static_cast<std::size_t>(gradient_block_size)};
}

void ZeroppConfig::collect_problems(int stage, DType compute_dtype, const LossScaleConfig& loss_scale,
                                    ConfigDiagnostics& d) const {
  const std::string z = "zero_optimization.", q = "zeroshard.zeropp.";
  auto bad = [&](const std::string& key, const std::string& value, const std::string& why) {
    d.problem(fmt::format("\"{}\" = {} {}", key, value, why));
  };
  if (quantized_weights && stage != 3) {
    bad(z + "zero_quantized_weights", "true",
        fmt::format("needs zero_optimization.stage 3 (it quantizes stage 3's parameter all-gather; the stage is {})",
                    stage));
  }
  if (hpz_partition_size < 1) {
    bad(z + "zero_hpz_partition_size", std::to_string(hpz_partition_size), "must be >= 1 (1: no secondary partition)");
  } else if (hpz() && stage != 3) {
    bad(z + "zero_hpz_partition_size", std::to_string(hpz_partition_size),
        fmt::format("needs zero_optimization.stage 3 (a secondary partition of the parameters; the stage is {})",
                    stage));
  }
  if (quantized_gradients && stage < 2) {
    bad(z + "zero_quantized_gradients", "true",
        fmt::format("needs zero_optimization.stage 2 or 3 (it replaces the gradient reduce-scatter; the stage is "
                    "{})",
                    stage));
  }
  for (const auto& [key, bits] : {std::pair{"weight_bits", weight_bits}, std::pair{"gradient_bits", gradient_bits}}) {
    if (bits != 8 && bits != 4) bad(q + key, std::to_string(bits), "must be 8 or 4");
  }
  for (const auto& [key, block] :
       {std::pair{"weight_block_size", weight_block_size}, std::pair{"gradient_block_size", gradient_block_size}}) {
    if (!valid_block(block)) {
      bad(q + key, std::to_string(block),
          fmt::format("must be a power of two from {} to {} (elements per fp32 scale)", kernels::kSymQuantBlockMin,
                      kernels::kSymQuantBlockMax));
    }
  }
  if (ranks_per_node < 0) {
    bad(q + "ranks_per_node", std::to_string(ranks_per_node), "must be >= 0 (0: the nodes from the host names)");
  }
  if (error_feedback && !quantized_gradients) {
    bad(q + "error_feedback", "true", "needs zero_optimization.zero_quantized_gradients (it feeds back qgZ's error)");
  }
  if (error_feedback && quantized_gradients && compute_dtype == DType::f16 && loss_scale.dynamic) {
    bad(q + "error_feedback", "true",
        "with fp16's dynamic loss scale is refused: the residual is kept in loss-scaled units, which the next scale "
        "change invalidates; use bf16, a static fp16.loss_scale, or no error feedback");
  }
}

}  // namespace zeroshard
