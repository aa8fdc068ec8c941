// The model the optimizer-state-format tests (test_states_8bit.cpp,
// test_states_bf16.cpp) train through the Engine: units of 1-D parameters
// of given sizes, some in a "no_decay" group (a group boundary inside a
// unit), deterministic initial values and per-step gradients, and the
// gathered masters and states to compare runs with; the AdamW
// configuration they train, the checks they share and their config
// parsing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

namespace zeroshard::testing {

/// One parameter of a unit: its element count, and whether it is in the
/// "no_decay" group (weight decay 0).
struct StateParamSpec {
  std::int64_t numel;
  bool no_decay;
};
/// Units of parameters, in the order they are added.
using StateUnits = std::vector<std::vector<StateParamSpec>>;

/// Parameter p's initial element i.
inline float state_init_value(int p, std::size_t i) { return sine_init_value(p, i); }

/// Parameter p's gradient element i at step `step` on rank `rank`: rank
/// dependent, or (same_on_ranks) a multiple of 2^-12 below 2^-2 that every
/// rank gives: its sum over N <= 4 ranks and the product with float(1 / N)
/// are exact, so the reduced gradient is the value itself.
inline float state_grad_value(int step, int rank, int p, std::size_t i, bool same_on_ranks) {
  const float g = 0.01f * std::cos(0.3f * static_cast<float>(i) + 1.3f * static_cast<float>(step) +
                                   (same_on_ranks ? 0.0f : 0.11f * static_cast<float>(rank)) +
                                   static_cast<float>(p));
  return same_on_ranks ? std::round(g * 25.0f * 4096.0f) / 4096.0f : g;
}

/// One training step on e: every unit of `units` forward (unshard,
/// reshard), then backward in reverse, each parameter of params[unit]
/// getting grad(id, i) for its element i, then Engine::step(). Collective.
template <class Grad>
void step_with_gradients(Engine& e, const std::vector<UnitId>& units, const std::vector<std::vector<ParamId>>& params,
                         Grad&& grad) {
  const DType dt = e.compute_dtype();
  for (UnitId u : units) {
    e.unshard(u);
    e.reshard(u);
  }
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    e.unshard(*it);
    for (ParamId id : params[static_cast<std::size_t>(*it)]) {
      std::vector<float> g(e.layout().param(id).numel);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad(id, i);
      kernels::accumulate_cast(e.grad_data(id, dt), dt, g.data(), DType::f32, g.size());
    }
    e.reduce_gradients(*it);
    e.reshard(*it);
  }
  e.step();
}

/// An Engine over `units` on the world communicator, parameters set to
/// state_init_value, trained by step() with state_grad_value gradients.
struct StateModel {
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;
  bool same_grads;

  StateModel(const EngineConfig& cfg, const StateUnits& spec, bool same_on_ranks = false)
      : e(cfg, world()), same_grads(same_on_ranks) {
    const GroupId nd = e.add_param_group("no_decay", {.weight_decay = 0.0f});
    int p = 0;
    for (std::size_t u = 0; u < spec.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const StateParamSpec& s : spec[u]) {
        params.back().push_back(
            e.add_parameter(units.back(), fmt::format("p{}", p++), {s.numel}, s.no_decay ? nd : 0));
      }
    }
    e.finalize();
    set_parameters(e, params, state_init_value);
  }

  /// One training step: every unit forward (unshard, reshard), then
  /// backward in reverse with the step's gradients, then Engine::step().
  void step(int s) {
    step_with_gradients(e, units, params,
                        [&](ParamId id, std::size_t i) { return state_grad_value(s, e.rank(), id, i, same_grads); });
  }

  /// Masters then both states (widened to fp32) of every parameter, gathered.
  std::vector<float> state() {
    std::vector<float> out;
    for (const auto& list : params) {
      for (ParamId id : list) {
        const auto m = e.gather_master(id);
        out.insert(out.end(), m.begin(), m.end());
        for (int k = 0; k < 2; ++k) {
          const auto s = e.gather_optimizer_state(id, k);
          out.insert(out.end(), s.begin(), s.end());
        }
      }
    }
    return out;
  }
};

/// Optimizer states offloaded to device d (nvme: swap files under
/// swap_root), in sub-groups of sub_group elements.
inline OffloadConfig state_offload(OffloadDevice d, const std::filesystem::path& swap_root,
                                   std::size_t sub_group = 4096) {
  OffloadConfig o;
  o.optimizer.device = d;
  if (d == OffloadDevice::nvme) o.optimizer.nvme_path = swap_root.string();
  o.sub_group_size = static_cast<std::int64_t>(sub_group);
  return o;
}

/// StateModel(c, spec) trained for `steps` steps; its state().
inline std::vector<float> train_states(const EngineConfig& c, const StateUnits& spec, int steps = 3) {
  StateModel m(c, spec);
  for (int s = 1; s <= steps; ++s) m.step(s);
  return m.state();
}

/// The learning rate and weight decay of state_config's AdamW.
constexpr double kStateLr = 1e-2, kStateWeightDecay = 0.01;

/// AdamW (lr kStateLr, weight decay kStateWeightDecay) with optimizer
/// states `states` at ZeRO `stage`, compute dtype `dt`, offload `o`.
inline EngineConfig state_config(int stage, const StateFormat& states, DType dt = DType::f32,
                                 const OffloadConfig& o = {}) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = kStateLr;
  h.weight_decay = kStateWeightDecay;
  h.states = states;
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dt;
  c.offload = o;
  return c;
}

/// Checks that every stage from 1 to 3 and every offload device (none,
/// cpu, nvme) trains bitwise as `ref`: trained(stage, device) == ref.
template <class Trained>
void check_stages_and_tiers(const std::vector<float>& ref, Trained&& trained) {
  for (int stage = 1; stage <= 3; ++stage) {
    for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
      INFO("stage " << stage << " offload " << static_cast<int>(d));
      CHECK(trained(stage, d) == ref);
    }
  }
}

/// Checks that `other` (trained with another state format) differs from
/// `ref` but stays within `tol` of it in every element.
inline void check_other_format_close(const std::vector<float>& other, const std::vector<float>& ref,
                                     double tol) {
  REQUIRE(other.size() == ref.size());
  CHECK(other != ref);
  double worst = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(ref[i]) - other[i]));
  CHECK(worst < tol);
}

/// EngineConfig::from_json of the JSON `text` (named "test.json").
inline EngineConfig parse_config(const char* text) {
  return EngineConfig::from_json(nlohmann::json::parse(text), "test.json");
}

/// The message of the ConfigError that parse_config(text) throws, or "no
/// error".
inline std::string config_error(const char* text) {
  try {
    parse_config(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace zeroshard::testing
