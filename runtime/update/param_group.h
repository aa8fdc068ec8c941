// A parameter group's overrides of the optimizer's values, as the training
// loop gives them (Engine::add_param_group; ShardOptimizer keeps the groups).
#pragma once

#include <optional>

namespace zeroshard {

/// Per-group overrides of the optimizer's lr and weight_decay (doubles, as
/// OptimizerHyper's and torch's param_groups). Plain value.
struct ParamGroupOptions {
  std::optional<double> lr{};
  std::optional<double> weight_decay{};
};

}  // namespace zeroshard
