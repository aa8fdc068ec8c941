// Learning-rate schedules (DeepSpeed names) against their closed forms at
// step 0, the end of warmup and the last step; the loss scaler's rules; the
// mixed-precision and scheduler config keys.
#include <cmath>
#include <numbers>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config.h"
#include "optimizer/loss_scaler.h"
#include "optimizer/lr_schedule.h"

using namespace zeroshard;
using nlohmann::json;

namespace {
LrSchedule parse(const char* text) { return LrSchedule::from_json(json::parse(text), "ds.json"); }
}  // namespace

TEST_CASE("WarmupLR: log and linear warmup, then constant") {
  const LrSchedule s = parse(R"({"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3,
                                 "warmup_num_steps": 100}})");
  CHECK(s.lr_at(0, 0, 1, 0.5) == doctest::Approx(1e-5).epsilon(1e-12));  // log(1) = 0
  CHECK(s.lr_at(50, 0, 1, 0.5) == doctest::Approx(1e-5 + (1e-3 - 1e-5) * std::log(51.0) / std::log(100.0)));
  CHECK(s.lr_at(99, 0, 1, 0.5) == doctest::Approx(1e-5 + (1e-3 - 1e-5) * std::log(100.0) / std::log(100.0)));
  CHECK(s.lr_at(100, 0, 1, 0.5) == 1e-3);
  CHECK(s.lr_at(100000, 0, 1, 0.5) == 1e-3);
  const LrSchedule lin = parse(R"({"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 10,
                                   "warmup_type": "linear"}})");
  CHECK(lin.lr_at(0, 0, 1, 1.0) == 0.0);
  CHECK(lin.lr_at(5, 0, 1, 1.0) == doctest::Approx(0.005));
  CHECK(lin.lr_at(10, 0, 1, 1.0) == 0.01);
}

TEST_CASE("WarmupDecayLR: linear decay to zero at total_num_steps; per-group lists") {
  const LrSchedule s = parse(R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": [0.0, 0.0],
      "warmup_max_lr": [0.1, 0.2], "warmup_num_steps": 10, "total_num_steps": 110, "warmup_type": "linear"}})");
  CHECK(s.lr_at(0, 0, 2, 1.0) == 0.0);
  CHECK(s.lr_at(10, 0, 2, 1.0) == doctest::Approx(0.1));  // end of warmup: (110-10)/(110-10)
  CHECK(s.lr_at(10, 1, 2, 1.0) == doctest::Approx(0.2));
  CHECK(s.lr_at(60, 1, 2, 1.0) == doctest::Approx(0.2 * 50.0 / 100.0));
  CHECK(s.lr_at(110, 0, 2, 1.0) == 0.0);
  CHECK(s.lr_at(500, 0, 2, 1.0) == 0.0);
  CHECK_THROWS_AS(s.lr_at(0, 0, 3, 1.0), ConfigError);  // two values, three groups
}

TEST_CASE("WarmupCosineLR: ratio of each group's lr, cosine to cos_min_ratio") {
  const LrSchedule s = parse(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 1000,
      "warmup_num_steps": 100, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}})");
  const double lr = 3e-4;
  CHECK(s.lr_at(0, 0, 1, lr) == doctest::Approx(lr * 0.1));
  CHECK(s.lr_at(100, 0, 1, lr) ==
        doctest::Approx(lr * (0.01 + 0.99 * (1 + std::cos(std::numbers::pi * 1.0 / 900.0)) / 2)));
  CHECK(s.lr_at(999, 0, 1, lr) == doctest::Approx(lr * (0.01 + 0.99 * (1 + std::cos(std::numbers::pi)) / 2)));
  CHECK(s.lr_at(999, 0, 1, lr) == doctest::Approx(lr * 0.01));
}

TEST_CASE("scheduler config errors name the key") {
  CHECK_THROWS_WITH_AS(parse(R"({"type": "OneCycle"})"), doctest::Contains("scheduler.type"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"type": "WarmupLR", "params": {"total_num_steps": 5}})"),
                       doctest::Contains("scheduler.params.total_num_steps"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"type": "WarmupDecayLR", "params": {"total_num_steps": 0}})"),
                       doctest::Contains("scheduler.params.total_num_steps"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"type": "WarmupLR", "params": {"warmup_type": "cubic"}})"),
                       doctest::Contains("scheduler.params.warmup_type"), ConfigError);
}

TEST_CASE("loss scaler: hysteresis, window growth, floor, static scale") {
  LossScaler s(LossScaleConfig{.dynamic = true, .initial_scale_power = 4, .loss_scale_window = 3, .hysteresis = 2,
                               .min_loss_scale = 4});
  CHECK(s.scale() == 16);
  s.update(true);  // first overflow uses up hysteresis
  CHECK(s.scale() == 16);
  s.update(true);
  CHECK(s.scale() == 8);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 8);
  s.update(false);  // third clean step: doubles, hysteresis restored
  CHECK(s.scale() == 16);
  CHECK(s.state().hysteresis_left == 2);
  for (int i = 0; i < 10; ++i) s.update(true);
  CHECK(s.scale() == 4);  // floor
  CHECK(s.state().overflows == 12);
  LossScaler fixed(LossScaleConfig{.dynamic = false, .static_scale = 128});
  fixed.update(true);
  fixed.update(false);
  CHECK(fixed.scale() == 128);
}

TEST_CASE("fp16 / bf16 / communication_data_type keys") {
  const EngineConfig c = EngineConfig::from_json(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 0,
      "initial_scale_power": 12, "loss_scale_window": 500, "hysteresis": 1, "min_loss_scale": 2},
      "communication_data_type": "fp16"})"));
  CHECK(c.compute_dtype == DType::f16);
  CHECK(c.loss_scale.dynamic);
  CHECK(c.loss_scale.initial_scale_power == 12);
  CHECK(c.loss_scale.loss_scale_window == 500);
  CHECK(c.loss_scale.hysteresis == 1);
  CHECK(c.loss_scale.min_loss_scale == 2);
  CHECK(c.communication_data_type == DType::f16);
  CHECK(EngineConfig::from_json(json::parse(R"({"bf16": {"enabled": true}})")).compute_dtype == DType::bf16);
  CHECK(EngineConfig::from_json(json::parse(R"({"bf16": {"enabled": false}})")).compute_dtype == DType::f32);
  CHECK_THROWS_WITH_AS(EngineConfig::from_json(json::parse(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})")),
                       doctest::Contains("fp16.enabled"), ConfigError);
  CHECK_THROWS_WITH_AS(EngineConfig::from_json(json::parse(R"({"fp16": {"enabled": true, "hysteresis": 0}})")),
                       doctest::Contains("fp16.hysteresis"), ConfigError);
  CHECK_THROWS_WITH_AS(EngineConfig::from_json(json::parse(R"({"communication_data_type": "int8"})")),
                       doctest::Contains("communication_data_type"), ConfigError);
  CHECK_THROWS_WITH_AS(EngineConfig::from_json(json::parse(R"({"fp16": {"enabled": true, "auto_cast": true}})")),
                       doctest::Contains("fp16.auto_cast"), ConfigError);
}
