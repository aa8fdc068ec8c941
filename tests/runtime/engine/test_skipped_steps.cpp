// Skipped steps are visible (DeepSpeed #8415: a bf16 run whose gradients
// were NaN on every step trained nothing and looked healthy), at world
// sizes 1-4, stages 0 and 3, fp16 and bf16:
//   - StepResult::skipped_steps is the running count, equal to
//     Engine::skipped_steps();
//   - a skipped step prints one line on stderr, on the rank holding the
//     first non-finite unit only (rank 0: the NaN of the last rank's
//     gradient is in every rank's reduced gradient), at the 1st, 2nd, 4th and 8th skipped
//     step (not the 3rd, 5th, 6th, 7th), naming the step and that unit;
//   - zeroshard.max_consecutive_skipped_steps k: the k-th skip in a row
//     throws the same AgreedConfigError on every rank naming the step and
//     the unit; a clean step in between starts the run again; 0 = no limit;
//   - the key is read from a ds_config, 100 by default, negative refused.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "comm/collective_error.h"
#include "core/error.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// Redirects this process's stderr into a file while alive; text() reads it.
class CapturedStderr {
 public:
  CapturedStderr()
      : path_(fs::temp_directory_path() /
              fmt::format("zs-skipped-{}-{}-{}.txt", ::getpid(), world().world_size(), world().rank())) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    std::FILE* f = std::fopen(path_.c_str(), "w");
    ::dup2(::fileno(f), 2);
    std::fclose(f);
  }
  ~CapturedStderr() {
    restore();
    fs::remove(path_);
  }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  fs::path path_;
  int saved_ = -1;
};

// Two units "a" and "b" of 57 elements in `dtype` at `stage`, SGD; `limit`
// is zeroshard.max_consecutive_skipped_steps.
struct Model {
  Engine e;
  ParamId a, b;
  Model(int stage, DType dtype, std::int64_t limit) : e(config(stage, dtype, limit), world()) {
    a = e.add_parameter(e.add_unit("a"), "a.w", {57});
    b = e.add_parameter(e.add_unit("b"), "b.w", {57});
    e.finalize();
  }
  static EngineConfig config(int stage, DType dtype, std::int64_t limit) {
    EngineConfig c = sgd_config(stage, 0.0);
    c.compute_dtype = dtype;
    c.max_consecutive_skipped_steps = limit;
    return c;
  }
  // One step; with `nan` the last rank's unit b gets a NaN gradient.
  StepResult step(bool nan) {
    const bool odd = world().rank() == world().world_size() - 1;
    for (UnitId u = 1; u >= 0; --u) {
      if (e.stage() == 3) e.unshard(u);
      const ParamId p = u == 0 ? a : b;
      const float v = nan && odd && u == 1 ? std::numeric_limits<float>::quiet_NaN() : 0.5f;
      if (e.compute_dtype() == DType::f32) {
        for (float& g : e.grad(p)) g = v;
      } else if (e.compute_dtype() == DType::bf16) {
        for (bf16& g : e.grad_as<bf16>(p)) g = from_float<bf16>(v);
      } else {
        for (f16& g : e.grad_as<f16>(p)) g = from_float<f16>(v);
      }
      e.reduce_gradients(u);
      if (e.stage() == 3) e.reshard(u);
    }
    return e.step();
  }
};

}  // namespace

TEST_CASE("skipped steps are counted and printed at the 1st, 2nd, 4th and 8th") {
  // The reduced gradients of b are NaN on every rank: rank 0 names it.
  const bool teller = world().rank() == 0;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int stage : {0, 3}) {
      INFO(dtype_name(dtype) << " stage " << stage);
      Model m(stage, dtype, 0);
      CapturedStderr err;
      std::vector<std::int64_t> counts;
      for (int s = 1; s <= 9; ++s) {
        // Step 5 is clean: the count goes on, the run in a row restarts.
        const StepResult r = m.step(s != 5);
        CHECK(r.skipped == (s != 5));
        counts.push_back(r.skipped_steps);
        CHECK(r.skipped_steps == m.e.skipped_steps());
      }
      CHECK(counts == std::vector<std::int64_t>{1, 2, 3, 4, 4, 5, 6, 7, 8});
      const std::string text = err.text();
      if (!teller) {
        CHECK(text.find("zeroshard: step") == std::string::npos);
        continue;
      }
      const std::string where = "(the first in unit \"b\" on rank 0)";
      // fp16 (hysteresis 2): the first overflow keeps the scale, the second halves it.
      const std::string scale1 = dtype == DType::f16 ? "; loss scale 65536 -> 65536" : "";
      CHECK(text.find(fmt::format("zeroshard: step 1 skipped for Inf/NaN gradients {}{}; 1 skipped so far, 1 in a "
                                  "row (this line prints at the 1st, 2nd, 4th, 8th, ... skipped step)\n",
                                  where, scale1)) != std::string::npos);
      if (dtype == DType::f16) CHECK(text.find("; loss scale 65536 -> 32768; 2 skipped so far") != std::string::npos);
      if (dtype == DType::bf16) CHECK(text.find("loss scale") == std::string::npos);
      CHECK(text.find("zeroshard: step 2 skipped") != std::string::npos);
      CHECK(text.find("zeroshard: step 3 skipped") == std::string::npos);
      CHECK(text.find(fmt::format("zeroshard: step 4 skipped for Inf/NaN gradients {}", where)) != std::string::npos);
      CHECK(text.find("; 4 skipped so far, 4 in a row") != std::string::npos);
      for (int s : {5, 6, 7, 8}) CHECK(text.find(fmt::format("zeroshard: step {} skipped", s)) == std::string::npos);
      CHECK(text.find("zeroshard: step 9 skipped") != std::string::npos);
      CHECK(text.find("; 8 skipped so far, 4 in a row") != std::string::npos);
    }
  }
}

TEST_CASE("zeroshard.max_consecutive_skipped_steps ends a run of skips with an agreed error") {
  const int n = world().world_size();
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int stage : {0, 3}) {
      INFO(dtype_name(dtype) << " stage " << stage);
      Model m(stage, dtype, 3);
      CapturedStderr quiet;
      // Two skips, a clean step, two skips: never 3 in a row.
      for (bool nan : {true, true, false, true, true}) CHECK(m.step(nan).skipped == nan);
      std::string err;
      bool agreed = false;
      try {
        m.step(true);
      } catch (const ConfigError& e) {
        err = e.what();
        agreed = is_agreed(e);
      }
      CHECK(agreed);
      const std::string prefix = n > 1 ? "rank 0: " : "";
      CHECK(err == fmt::format("{}step 6: 3 steps in a row were skipped for Inf/NaN gradients "
                               "(zeroshard.max_consecutive_skipped_steps 3); in this step the first in unit \"b\" "
                               "on rank 0. The run trains nothing: look for NaN in the loss or the data, lower the "
                               "learning rate{}, or raise the limit (0: no limit)",
                               prefix, dtype == DType::f16 ? " or fp16.initial_scale_power" : ""));
      // Nothing was applied, and the engine trains on with clean gradients.
      CHECK(m.e.optimizer_steps() == 1);
      CHECK(m.step(false).applied);
    }
  }
}

TEST_CASE("zeroshard.max_consecutive_skipped_steps in a ds_config") {
  CHECK(EngineConfig{}.max_consecutive_skipped_steps == 100);
  const auto parsed = EngineConfig::from_json(nlohmann::json::parse(R"({"zeroshard": {"max_consecutive_skipped_steps": 5}})"));
  CHECK(parsed.max_consecutive_skipped_steps == 5);
  CHECK(EngineConfig::from_json(nlohmann::json::parse(R"({"zeroshard": {"max_consecutive_skipped_steps": 0}})"))
            .max_consecutive_skipped_steps == 0);
  try {
    EngineConfig::from_json(nlohmann::json::parse(R"({"zeroshard": {"max_consecutive_skipped_steps": -1}})"));
    FAIL("a negative limit was accepted");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("\"zeroshard.max_consecutive_skipped_steps\" = -1 is invalid: must be >= 0 (0: "
                                     "no limit)") != std::string::npos);
  }
}
