// A small model for checkpoint tests: 1001 elements in 3 units of odd
// sizes (one of 3 elements, so 4+ ranks leave some shards empty), trained
// with deterministic gradients whose mean over ranks does not depend on the
// world size.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"

namespace zeroshard::testing {

/// One micro-batch on engine e: every rank adds to each of `params` the
/// same deterministic gradient of optimizer step `step` (a sine over the
/// element index) times the loss scale, in the compute dtype; then
/// e.step(). Collective, as step().
inline StepResult sine_gradient_step(Engine& e, const std::vector<ParamId>& params, int step) {
  const float scale = static_cast<float>(e.loss_scale());
  for (std::size_t k = 0; k < params.size(); ++k) {
    const std::size_t n = e.layout().param(params[k]).numel;
    auto set = [&](auto grad) {
      using T = typename decltype(grad)::element_type;
      for (std::size_t i = 0; i < n; ++i) {
        const float g = 0.05f * std::sin(0.3f * static_cast<float>(i) + static_cast<float>(k + step));
        grad[i] = from_float<std::remove_cv_t<T>>(g * scale);
      }
    };
    switch (e.compute_dtype()) {
      case DType::bf16: set(e.grad_as<bf16>(params[k])); break;
      case DType::f16: set(e.grad_as<f16>(params[k])); break;
      default: set(e.grad(params[k])); break;
    }
  }
  return e.step();
}

struct CkptModel {
  std::vector<ParamId> params;

  /// Declares the model in a fresh engine (finalize() included) and sets the
  /// initial values.
  explicit CkptModel(Engine& e) {
    const UnitId a = e.add_unit("a"), b = e.add_unit("b"), c = e.add_unit("c");
    const GroupId nd = e.add_param_group("no_decay", {.weight_decay = 0.0f});
    params.push_back(e.add_parameter(a, "a.bias", {3}, nd));
    params.push_back(e.add_parameter(b, "b.weight", {7, 5}));
    params.push_back(e.add_parameter(b, "b.bias", {11}, nd));
    params.push_back(e.add_parameter(b, "b.extra", {491}));
    params.push_back(e.add_parameter(c, "c.weight", {461}));
    e.finalize();
    for (std::size_t k = 0; k < params.size(); ++k) {
      std::vector<float> v(e.layout().param(params[k]).numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>((i * 7 + k * 3) % 41) - 0.2f;
      e.set_parameter(params[k], v);
    }
  }

  /// One micro-batch of gradient at optimizer step `step` (every rank adds
  /// the same values times the loss scale), then engine.step().
  StepResult train_step(Engine& e, int step) const { return sine_gradient_step(e, params, step); }

  /// Masters then every optimizer state of every parameter, gathered.
  std::vector<float> state(Engine& e) const {
    std::vector<float> out;
    for (ParamId p : params) {
      const auto m = e.gather_master(p);
      out.insert(out.end(), m.begin(), m.end());
      for (int k = 0; k < optimizer_state_count(e.config().optimizer); ++k) {
        const auto s = e.gather_optimizer_state(p, k);
        out.insert(out.end(), s.begin(), s.end());
      }
    }
    return out;
  }
};

}  // namespace zeroshard::testing
