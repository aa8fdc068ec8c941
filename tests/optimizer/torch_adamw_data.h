// torch.optim.AdamW's own float32 numbers over 10 steps
// (tests/optimizer/data/torch-adamw-10steps.json; data/README.md says what
// produced them), read for the parity tests of the kernels
// (tests/optimizer/test_torch_parity.cpp) and of the Engine
// (tests/runtime/engine/test_torch_parity_engine.cpp).
#pragma once

#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/optimizer/torch_data_paths.h"

namespace zeroshard::testing {

/// One torch run: hyper-parameters as the Python floats torch was given,
/// and per tensor its start, its gradient at each step and its state after
/// the last step (all float32).
struct TorchAdamwRun {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  std::vector<std::vector<float>> p0;                  ///< [tensor][element]
  std::vector<std::vector<std::vector<float>>> grads;  ///< [step][tensor][element]
  std::vector<std::vector<float>> param, exp_avg, exp_avg_sq;  ///< after the last step
  std::size_t steps() const { return grads.size(); }
  std::size_t tensors() const { return p0.size(); }
};

namespace detail {

/// A float32 value stored as a double; REQUIREs that it is one (exact).
inline float exact_float(const nlohmann::json& x) {
  const double d = x.get<double>();
  const float f = static_cast<float>(d);
  REQUIRE_MESSAGE(static_cast<double>(f) == d, "not a float32 value: " << d);
  return f;
}

inline std::vector<std::vector<float>> tensors(const nlohmann::json& j, const std::vector<std::size_t>& sizes) {
  REQUIRE(j.size() == sizes.size());
  std::vector<std::vector<float>> out;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    REQUIRE(j[t].size() == sizes[t]);
    std::vector<float> v;
    for (const auto& x : j[t]) v.push_back(exact_float(x));
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace detail

/// Reads torch-adamw-10steps.json (torch 2.15.0, AdamW foreach=False, lr
/// 3e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, tensors of 64 and
/// 33 elements, 10 steps). REQUIREs the file to be whole.
inline TorchAdamwRun load_torch_adamw_10steps() {
  const std::string path = std::string(ZS_TORCH_DATA_DIR) + "/torch-adamw-10steps.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j.at("optimizer") == "AdamW");
  TorchAdamwRun r;
  r.lr = j.at("lr").get<double>();
  r.beta1 = j.at("betas").at(0).get<double>();
  r.beta2 = j.at("betas").at(1).get<double>();
  r.eps = j.at("eps").get<double>();
  r.weight_decay = j.at("weight_decay").get<double>();
  const auto sizes = j.at("sizes").get<std::vector<std::size_t>>();
  r.p0 = detail::tensors(j.at("p0"), sizes);
  for (const auto& step : j.at("grads")) r.grads.push_back(detail::tensors(step, sizes));
  r.param = detail::tensors(j.at("p_final"), sizes);
  r.exp_avg = detail::tensors(j.at("exp_avg"), sizes);
  r.exp_avg_sq = detail::tensors(j.at("exp_avg_sq"), sizes);
  REQUIRE(r.steps() == 10);
  return r;
}

}  // namespace zeroshard::testing
