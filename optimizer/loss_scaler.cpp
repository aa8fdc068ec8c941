#include "optimizer/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace zeroshard {

LossScaler::LossScaler(const LossScaleConfig& config) : config_(config) {
  state_.scale = config.dynamic ? std::ldexp(1.0, config.initial_scale_power) : config.static_scale;
  state_.hysteresis_left = config.hysteresis;
}

void LossScaler::update(bool overflow) {
  if (overflow) ++state_.overflows;
  if (!config_.dynamic) return;
  if (overflow) {
    if (state_.hysteresis_left <= 1) {
      state_.scale = std::max(state_.scale / 2.0, config_.min_loss_scale);
    } else {
      --state_.hysteresis_left;
    }
    state_.clean_steps = 0;
    return;
  }
  if (++state_.clean_steps >= config_.loss_scale_window) {
    state_.scale *= 2.0;
    state_.clean_steps = 0;
    state_.hysteresis_left = config_.hysteresis;
  }
}

}  // namespace zeroshard
