// Published model-state formulas: see runtime/plan/zero_formulas.h.
#include "runtime/plan/zero_formulas.h"

#include <algorithm>

namespace zeroshard {

ZeroPaperBytes zero_paper_bytes(int stage, int world, double element_bytes, double optimizer_bytes) {
  const double n = world;
  ZeroPaperBytes b{.parameters = element_bytes, .gradients = element_bytes, .optimizer = optimizer_bytes};
  if (stage >= 1) b.optimizer /= n;
  if (stage >= 2) b.gradients /= n;
  if (stage >= 3) b.parameters /= n;
  return b;
}

DeepSpeedEstimate deepspeed_zero2_estimate(std::uint64_t total_params, int gpus, bool cpu_offload,
                                           double additional_buffer_factor) {
  const double p = static_cast<double>(total_params), g = gpus;
  DeepSpeedEstimate d;
  if (cpu_offload) {
    d.gpu = 2 * total_params;
    d.cpu = static_cast<std::uint64_t>(p * std::max(4.0 * g, 16.0) * additional_buffer_factor);
  } else {
    d.gpu = 4 * total_params + static_cast<std::uint64_t>(16.0 * p / g);
    d.cpu = static_cast<std::uint64_t>(p * 4.0 * g * additional_buffer_factor);
  }
  return d;
}

DeepSpeedEstimate deepspeed_zero3_estimate(std::uint64_t total_params, std::uint64_t largest_layer_params, int gpus,
                                           bool cpu_offload, bool cpu_offload_params, bool zero_init,
                                           double additional_buffer_factor) {
  const double p = static_cast<double>(total_params), g = gpus, f = additional_buffer_factor;
  const std::uint64_t largest = 4 * largest_layer_params;
  DeepSpeedEstimate d;
  if (cpu_offload && cpu_offload_params) {
    d.gpu = largest;
    d.cpu = static_cast<std::uint64_t>(p * (zero_init ? 18.0 : std::max(4.0 * g, 18.0)) * f);
  } else if (cpu_offload) {
    d.gpu = largest + static_cast<std::uint64_t>(2.0 * p / g);
    d.cpu = static_cast<std::uint64_t>(p * (zero_init ? 16.0 : std::max(4.0 * g, 16.0)) * f);
  } else {
    d.gpu = largest + static_cast<std::uint64_t>(18.0 * p / g);
    d.cpu = static_cast<std::uint64_t>((zero_init ? static_cast<double>(largest_layer_params) : p) * 4.0 * g * f);
  }
  return d;
}

}  // namespace zeroshard
