// Helpers shared by the engine tests: the process-wide communicator, config
// builders and comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "comm/communicator.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"

namespace zeroshard::testing {

/// The communicator over every rank of this test process group (created
/// once; MPI finalises at exit).
inline Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_world_communicator();
  return *comm;
}

/// Whether the test runs under scripts/sanitize (ZS_SANITIZE set and not
/// empty), where the slowest matrices leave out cases that take the same
/// code paths as others they keep (the sanitizers slow every run 2-5x).
inline bool under_sanitizer() {
  const char* v = std::getenv("ZS_SANITIZE");
  return v != nullptr && *v != '\0';
}

/// A config for `stage` with the given optimizer (defaults elsewhere).
inline EngineConfig make_config(int stage, OptimizerHyper opt = {}, int accumulation = 1,
                                double clipping = 0.0) {
  EngineConfig c;
  c.zero.stage = stage;
  c.optimizer = opt;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = clipping;
  return c;
}

/// Plain SGD (lr 0.5, no weight decay) at `stage`, gradients clipped to
/// global norm `clipping` (0: not clipped), one micro-batch per step: an
/// update is p - 0.5 * g * clip factor, checkable in closed form.
inline EngineConfig sgd_config(int stage, double clipping) {
  OptimizerHyper h;
  h.kind = OptimizerKind::sgd;
  h.lr = 0.5f;
  h.weight_decay = 0.0f;
  EngineConfig c = make_config(stage, h, 1, clipping);
  c.train_micro_batch_size_per_gpu = 1;
  return c;
}

/// Shapes of a model's parameters, unit by unit, for engine tests: odd
/// sizes, an empty parameter, and a unit of several 4096-element
/// sub-groups at every world size.
inline const std::vector<std::vector<std::vector<std::int64_t>>> kOddUnits = {
    {{7}, {57}}, {{10001}}, {{3, 4100}, {1}}, {{0}, {5}}, {{1}}};

/// Parameter p's initial element i, 0.5 sin(0.7 i + p): deterministic,
/// different for every parameter, in (-0.5, 0.5).
inline float sine_init_value(int p, std::size_t i) {
  return 0.5f * std::sin(0.7f * static_cast<float>(i) + static_cast<float>(p));
}

/// Parameter p's gradient element i at `step`, micro-batch `micro` and
/// `rank`, 0.01 cos(0.3 i + 1.3 step + 0.7 micro + 0.11 rank + p): different
/// on every rank, so the reductions sum distinct values.
inline float cosine_grad_value(int step, int micro, int rank, int p, std::size_t i) {
  return 0.01f * std::cos(0.3f * static_cast<float>(i) + 1.3f * static_cast<float>(step) +
                          0.7f * static_cast<float>(micro) + 0.11f * static_cast<float>(rank) + static_cast<float>(p));
}

/// Sets every parameter of `params` (lists of ids, e.g. per unit) to
/// init(id, i) for its elements i. Collective only as set_parameter.
template <class Init>
void set_parameters(Engine& e, const std::vector<std::vector<ParamId>>& params, Init init) {
  for (const auto& list : params) {
    for (ParamId id : list) {
      std::vector<float> v(e.layout().param(id).numel);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = init(id, i);
      e.set_parameter(id, v);
    }
  }
}

/// |a - b| <= rel * max(|a|, |b|) + abs_floor.
inline bool close(double a, double b, double rel, double abs_floor = 0.0) {
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)) + abs_floor;
}

/// Checks two float arrays element by element with `close`; reports the
/// first mismatch with its index.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                        double abs_floor, [[maybe_unused]] const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": size " << got.size() << " vs " << want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!close(got[i], want[i], rel, abs_floor)) {
      FAIL_CHECK(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
      return;
    }
  }
}

/// Declares the model of one parameter on e (unit "u", parameter "p" of
/// values.size() elements, default group), finalizes e and sets the
/// parameter to `values`; returns its id. Collective, as finalize().
inline ParamId declare_single_parameter(Engine& e, const std::vector<float>& values) {
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "p", {static_cast<std::int64_t>(values.size())});
  e.finalize();
  e.set_parameter(p, values);
  return p;
}

}  // namespace zeroshard::testing
