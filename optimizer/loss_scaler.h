// Dynamic loss scaling for fp16 training, with DeepSpeed's `fp16` keys and
// the semantics of DeepSpeed's DynamicLossScaler (Micikevicius et al.,
// "Mixed Precision Training", ICLR 2018, section 3.2).
//
// On a step whose gradients hold Inf/NaN on any rank (the engine all-reduces
// the flag, so every rank sees the same sequence): the step is skipped; if
// `hysteresis_left` is 1 the scale halves (never below min_loss_scale), else
// hysteresis_left decreases by one. On a clean step: clean_steps increases,
// and after loss_scale_window consecutive clean steps the scale doubles,
// clean_steps restarts and hysteresis_left is restored. A static scale
// (fp16.loss_scale > 0) never changes, but overflowing steps are still
// skipped.
#pragma once

#include <cstdint>

namespace zeroshard {

/// fp16 section of a ds_config (the loss-scaling keys).
struct LossScaleConfig {
  bool dynamic = true;                 ///< fp16.loss_scale == 0
  double static_scale = 1.0;           ///< fp16.loss_scale when > 0
  int initial_scale_power = 16;        ///< first scale = 2^initial_scale_power
  std::int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

/// The scaler's whole state: what a checkpoint saves.
struct LossScalerState {
  double scale = 1.0;
  std::int64_t clean_steps = 0;  ///< consecutive clean steps since the last growth or overflow
  int hysteresis_left = 1;
  std::int64_t overflows = 0;    ///< steps skipped so far
};

/// Applies the rules above. Plain value type, not thread safe.
class LossScaler {
 public:
  LossScaler() = default;
  explicit LossScaler(const LossScaleConfig& config);

  double scale() const { return state_.scale; }
  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& s) { state_ = s; }
  /// Records the outcome of one step (overflow: the step was skipped).
  void update(bool overflow);

 private:
  LossScaleConfig config_;
  LossScalerState state_;
};

}  // namespace zeroshard
