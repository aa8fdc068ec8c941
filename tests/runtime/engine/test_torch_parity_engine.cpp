// The Engine against torch.optim's printed float32 values, bit for bit: the
// reproducer of tests/optimizer/test_torch_parity.cpp (AdamW and Adam with
// L2 decay; lr 1e-2, betas (0.8, 0.9999), eps 1e-8; three steps of a
// 3-element parameter) configured from a ds_config JSON string, at this
// process group's world size (1-4 ranks: at 4, one shard is empty) and
// every ZeRO stage. Checks param, exp_avg and exp_avg_sq after the third
// step; the hyper-parameters reach the kernels as torch's Python floats
// (optimizer/optimizer.h), so torch is given the config's values as they are.
// Then torch 2.15's 10-step AdamW run (tests/optimizer/data), the same way.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "tests/optimizer/torch_adamw_data.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// The reproducer's gradients, one row per step.
constexpr float kGrads[3][3] = {{0.5f, -2.0f, 1e-3f}, {0.5f, 0.25f, -4.0f}, {1.0f, -1.0f, 2.0f}};

struct Expected {
  const char* param[3];
  const char* exp_avg[3];
  const char* exp_avg_sq[3];
};

// Printed by torch (float32 CPU tensors, single-tensor implementation).
constexpr Expected kAdamW = {{"0.220031187", "-1.47817504", "2.99975872"},
                             {"0.344000012", "-0.416000009", "-0.239871964"},
                             {"0.000149992498", "0.000506169337", "0.00199983991"}};
constexpr Expected kAdam = {{"0.220011994", "-1.47697961", "2.9980824"},
                            {"0.355640024", "-0.488721818", "-0.0936855823"},
                            {"0.000159664749", "0.000595061865", "0.00190753816"}};

EngineConfig parity_config(int stage, bool decoupled) {
  const std::string params = decoupled
                                 ? R"({"lr": 1e-2, "betas": [0.8, 0.9999], "eps": 1e-8, "weight_decay": 0})"
                                 : R"({"lr": 1e-2, "betas": [0.8, 0.9999], "eps": 1e-8, "weight_decay": 0.1,
                                      "adam_w_mode": false})";
  const std::string text = R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                           R"(}, "optimizer": {"type": ")" + (decoupled ? "AdamW" : "Adam") +
                           R"(", "params": )" + params + "}}";
  return EngineConfig::from_json(nlohmann::json::parse(text));
}

void check_bits(const std::vector<float>& got, const char* const (&want)[3], const char* what) {
  REQUIRE(got.size() == 3);
  for (int i = 0; i < 3; ++i) {
    const float w = std::strtof(want[i], nullptr);
    CAPTURE(what);
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(w);
    CHECK(std::memcmp(&got[i], &w, sizeof w) == 0);
  }
}

void check_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  CAPTURE(what);
  CHECK(bad == 0);
}

// The float x nearest g / scale with x * scale == g in float32 (the
// engine's gradient scale multiplies the summed gradient in the kernel), or
// NaN when no float within 4 ulps has it.
float preimage(float g, float scale) {
  float x = static_cast<float>(static_cast<double>(g) / scale);
  for (int i = 0; i < 4; ++i) x = std::nextafter(x, -std::numeric_limits<float>::infinity());
  for (int i = 0; i < 9; ++i, x = std::nextafter(x, std::numeric_limits<float>::infinity())) {
    if (x * scale == g) return x;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

TEST_CASE("Engine: AdamW and Adam (L2) equal torch's printed values bitwise at every stage") {
  const int n = world().world_size();
  const bool root = world().rank() == 0;
  // The engine sums the ranks' gradients and multiplies by f(1 / world
  // size) in the kernel (runtime/engine/engine_step.cpp). Rank 0 holds f(n * g) and
  // the others zero, so the sum is f(n * g) in any reduction order; for
  // these gradients f(n * g) * f(1 / n) is exactly g at 1-4 ranks.
  const float inv_n = static_cast<float>(1.0 / n);
  for (const auto& row : kGrads) {
    for (const float g : row) REQUIRE((g * static_cast<float>(n)) * inv_n == g);
  }
  for (const bool decoupled : {true, false}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(decoupled);
      CAPTURE(stage);
      CAPTURE(n);
      Engine e(parity_config(stage, decoupled), world());
      const ParamId p = declare_single_parameter(e, {0.25f, -1.5f, 3.0f});
      for (const auto& row : kGrads) {
        std::span<float> g = e.grad(p);
        REQUIRE(g.size() == 3);
        for (int i = 0; i < 3; ++i) g[i] = root ? row[i] * static_cast<float>(n) : 0.0f;
        const StepResult r = e.step();
        REQUIRE(r.applied);
      }
      const Expected& want = decoupled ? kAdamW : kAdam;
      check_bits(e.gather_parameter(p), want.param, "param");
      check_bits(e.gather_optimizer_state(p, 0), want.exp_avg, "exp_avg");
      check_bits(e.gather_optimizer_state(p, 1), want.exp_avg_sq, "exp_avg_sq");
    }
  }
}

TEST_CASE("Engine: AdamW equals torch 2.15's 10-step run bitwise at every stage") {
  const testing::TorchAdamwRun torch = testing::load_torch_adamw_10steps();
  const int n = world().world_size();
  const bool root = world().rank() == 0;
  // The kernel multiplies the gradient summed over ranks and micro-batches
  // by f(1 / (world size x accumulation)). Rank 0 holds, in the first
  // micro-batch of a step, the float whose product with that scale is
  // torch's gradient; the other ranks and micro-batches hold zero. At 1, 2
  // and 4 ranks the scale is a power of two (the float is n g). At 3 no
  // float reaches about one gradient in ten through f(1/3); with 341
  // micro-batches the scale is f(1/1023), whose mantissa is just above 1,
  // and a float reaches each of these 970 gradients (REQUIREd below).
  const int accumulation = n == 3 ? 341 : 1;
  const float scale = static_cast<float>(1.0 / (n * static_cast<double>(accumulation)));
  std::vector<std::vector<std::vector<float>>> held = torch.grads;  // [step][tensor][element]
  for (auto& step : held) {
    for (auto& tensor : step) {
      for (float& g : tensor) {
        const float x = preimage(g, scale);
        REQUIRE_MESSAGE(!std::isnan(x), "no float times " << scale << " is " << g);
        g = root ? x : 0.0f;
      }
    }
  }
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    CAPTURE(n);
    const std::string text = R"({"zero_optimization": {"stage": )" + std::to_string(stage) +
                             R"(}, "gradient_accumulation_steps": )" + std::to_string(accumulation) +
                             R"(, "optimizer": {"type": "AdamW", "params": {"lr": )" + fmt::format("{}", torch.lr) +
                             R"(, "betas": [)" + fmt::format("{}, {}", torch.beta1, torch.beta2) +
                             R"(], "eps": )" + fmt::format("{}", torch.eps) + R"(, "weight_decay": )" +
                             fmt::format("{}", torch.weight_decay) + "}}}";
    Engine e(EngineConfig::from_json(nlohmann::json::parse(text)), world());
    // One unit per torch tensor (64 and 33 elements: shards of odd sizes).
    std::vector<ParamId> params;
    for (std::size_t k = 0; k < torch.tensors(); ++k) {
      const UnitId u = e.add_unit(fmt::format("u{}", k));
      params.push_back(e.add_parameter(u, fmt::format("p{}", k),
                                       {static_cast<std::int64_t>(torch.p0[k].size())}));
    }
    e.finalize();
    for (std::size_t k = 0; k < torch.tensors(); ++k) e.set_parameter(params[k], torch.p0[k]);
    for (const auto& step : held) {
      for (int micro = 0; micro < accumulation; ++micro) {
        if (micro == 0) {
          for (std::size_t k = 0; k < torch.tensors(); ++k) {
            std::span<float> g = e.grad(params[k]);
            REQUIRE(g.size() == step[k].size());
            for (std::size_t i = 0; i < g.size(); ++i) g[i] += step[k][i];
          }
        }
        const StepResult r = e.step();
        REQUIRE(r.applied == (micro == accumulation - 1));
      }
    }
    for (std::size_t k = 0; k < torch.tensors(); ++k) {
      CAPTURE(k);
      check_bits(e.gather_parameter(params[k]), torch.param[k], "param");
      check_bits(e.gather_optimizer_state(params[k], 0), torch.exp_avg[k], "exp_avg");
      check_bits(e.gather_optimizer_state(params[k], 1), torch.exp_avg_sq[k], "exp_avg_sq");
    }
  }
}
