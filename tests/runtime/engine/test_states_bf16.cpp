// bf16 optimizer states (optimizer.params.state_dtype "bf16";
// optimizer/update_bf16.h) through the Engine: bitwise the same parameters
// and states at stages 0-3 and offload none / cpu / nvme at this world size
// (round to nearest even and stochastic, fp32 and bf16 compute); with
// rank-independent gradients, bitwise the single-buffer reference at every
// world size (the stochastic stream follows the flat-buffer index); one
// step against fp32 states from the same states (parameters bitwise, states
// within the kernel's bound, kernels/cpu/adam/adam_bf16_state.h); the ledger's
// state bytes; checkpoint round trips (bf16 exact across stages, bf16 into
// fp32 exact, fp32 into bf16 rounded to nearest even); config keys. Units:
// odd sizes 0, 1, 7, 57, 10001, parameter groups inside a unit, a unit
// spanning several 4096-element sub-groups.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "optimizer/update_bf16.h"
#include "runtime/engine/engine.h"
#include "tests/support/scratch_files.h"
#include "tests/support/state_format_model.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const StateUnits kUnits = {
    {{0, false}}, {{1, false}}, {{7, false}, {57, true}}, {{300, false}, {100, true}, {113, false}},
    {{10001, false}}, {{3 * 4100, false}, {1, true}}};

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-states-bf16"; }

OffloadConfig offload(OffloadDevice d, std::size_t sub_group = 4096) {
  return state_offload(d, swap_root(), sub_group);
}

EngineConfig config(int stage, StateDtype states, StateRounding rounding = StateRounding::nearest,
                    DType dt = DType::f32, OffloadConfig o = {}) {
  return state_config(stage, {.dtype = states, .rounding = rounding, .seed = 1234}, dt, o);
}

std::vector<float> train(const EngineConfig& c) { return train_states(c, kUnits); }

const char* rounding_name(StateRounding r) { return r == StateRounding::stochastic ? "stochastic" : "nearest"; }

}  // namespace

TEST_CASE("bf16 states: stages 0-3 and offload none/cpu/nvme give bitwise the same training") {
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO(rounding_name(rnd) << " dtype " << dtype_name(dt));
      const std::vector<float> ref = train(config(0, StateDtype::bf16, rnd, dt));
      check_stages_and_tiers(ref, [&](int stage, OffloadDevice d) {
        return train(config(stage, StateDtype::bf16, rnd, dt, offload(d)));
      });
      // Several nvme sub-groups per unit (offload tier pieces) as one.
      CHECK(train(config(3, StateDtype::bf16, rnd, dt, offload(OffloadDevice::nvme, 1 << 20))) == ref);
      // bf16 states are not fp32 states: the states differ, the parameters stay close.
      check_other_format_close(train(config(0, StateDtype::fp32, rnd, dt)), ref, 1e-3);
    }
  }
}

TEST_CASE("bf16 states: every stage and world size gives the single-buffer reference, bit for bit") {
  // With gradients every rank gives alike, the reduced gradient is the same
  // at every world size; the reference updates each parameter alone with
  // first_index = its flat-buffer offset, as one rank holding everything.
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    const EngineConfig c0 = config(0, StateDtype::bf16, rnd);
    std::vector<float> want;
    {
      StateModel shape(c0, kUnits, true);  // for the layout only
      for (const auto& list : shape.params) {
        for (ParamId id : list) {
          const ParamInfo& p = shape.e.layout().param(id);
          const bool nd = shape.e.layout().param(id).group != 0;
          std::vector<float> w(p.numel), g(p.numel);
          std::vector<std::uint16_t> m(p.numel, 0), v(p.numel, 0);
          for (std::size_t i = 0; i < w.size(); ++i) w[i] = state_init_value(id, i);
          for (int s = 1; s <= 3; ++s) {
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = state_grad_value(s, 0, id, i, true);
            optimizer_update_bf16(c0.optimizer, kStateLr, nd ? 0.0 : kStateWeightDecay, s, 1.0f, w.data(), g.data(), DType::f32,
                                  m.data(), v.data(), nullptr, DType::bf16, w.size(), p.offset);
          }
          want.insert(want.end(), w.begin(), w.end());
          for (const auto* st : {&m, &v}) {
            for (std::uint16_t h : *st) want.push_back(bf16_to_float(h));
          }
        }
      }
    }
    for (int stage = 0; stage <= 3; ++stage) {
      for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::nvme}) {
        INFO(rounding_name(rnd) << " stage " << stage << " offload " << static_cast<int>(d) << " world "
                                << world().world_size());
        StateModel m(config(stage, StateDtype::bf16, rnd, DType::f32, stage > 0 ? offload(d) : OffloadConfig{}), kUnits,
                     true);
        for (int s = 1; s <= 3; ++s) m.step(s);
        CHECK(m.state() == want);
      }
    }
  }
}

TEST_CASE("bf16 states: one step against fp32 states from the same states") {
  // kernels/cpu/adam/adam_bf16_state.h: the parameters are bitwise those of fp32
  // states, each new state within half a bf16 ulp (nearest: <= 2^-8 of its
  // magnitude) or one ulp (stochastic: < 2^-7).
  const std::string dir = (swap_root() / fmt::format("close-{}", world().world_size())).string();
  remove_dir_on_rank0(world(), dir);
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (int stage : {0, 2}) {
      INFO(rounding_name(rnd) << " stage " << stage);
      const std::string tag = fmt::format("{}-{}", rounding_name(rnd), stage);
      StateModel a(config(stage, StateDtype::bf16, rnd), kUnits);
      for (int s = 1; s <= 3; ++s) a.step(s);
      a.e.save_checkpoint(dir, {}, 0, tag);
      StateModel b(config(stage, StateDtype::fp32), kUnits);
      b.e.load_checkpoint(dir, tag);
      a.step(4);
      b.step(4);
      const std::vector<float> got = a.state(), want = b.state();
      REQUIRE(got.size() == want.size());
      const float rel = rnd == StateRounding::nearest ? 0x1p-8f : 0x1p-7f;
      std::size_t at = 0, bad_params = 0, bad_states = 0;
      for (const auto& list : a.params) {
        for (ParamId id : list) {
          const std::size_t n = a.e.layout().param(id).numel;
          for (std::size_t i = 0; i < n; ++i) bad_params += std::memcmp(&got[at + i], &want[at + i], 4) != 0;
          for (std::size_t i = n; i < 3 * n; ++i) {
            bad_states += !(std::fabs(got[at + i] - want[at + i]) <= rel * std::fabs(want[at + i]));
          }
          at += 3 * n;
        }
      }
      CHECK(bad_params == 0);
      CHECK(bad_states == 0);
      CHECK(got != want);  // the states were rounded
    }
  }
}

TEST_CASE("bf16 states: the ledger holds 2 bytes per state element") {
  for (int stage = 0; stage <= 3; ++stage) {
    StateModel m(config(stage, StateDtype::bf16), kUnits);
    std::uint64_t want = 0;
    for (const UnitInfo& u : m.e.layout().units()) want += 2 * 2 * (stage == 0 ? u.padded : u.shard);
    INFO("stage " << stage);
    CHECK(m.e.ledger().current(MemCategory::optimizer_states, MemTier::device) == want);
  }
}

TEST_CASE("bf16 states: checkpoints at this world size (bf16 exact; bf16 <-> fp32)") {
  const std::string dir = (swap_root() / fmt::format("ckpt-{}", world().world_size())).string();
  remove_dir_on_rank0(world(), dir);
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (int stage : {0, 1, 3}) {
      INFO(rounding_name(rnd) << " stage " << stage);
      const std::string tag = fmt::format("bf16-{}-{}", rounding_name(rnd), stage);
      StateModel a(config(stage, StateDtype::bf16, rnd), kUnits);
      for (int s = 1; s <= 3; ++s) a.step(s);
      a.e.save_checkpoint(dir, {}, 0, tag);
      const std::vector<float> saved = a.state();
      for (int s = 4; s <= 5; ++s) a.step(s);
      // bf16 into bf16 at another stage and tier: bitwise, now and after.
      StateModel b(config(3 - stage, StateDtype::bf16, rnd, DType::f32,
                     3 - stage > 0 ? offload(OffloadDevice::nvme) : OffloadConfig{}), kUnits);
      b.e.load_checkpoint(dir, tag);
      CHECK(b.state() == saved);
      for (int s = 4; s <= 5; ++s) b.step(s);
      CHECK(b.state() == a.state());
      // Into fp32 states: the widened values, bitwise.
      StateModel c(config(stage, StateDtype::fp32), kUnits);
      c.e.load_checkpoint(dir, tag);
      CHECK(c.state() == saved);
      // fp32 into bf16: each state rounded to nearest even, masters exact.
      c.step(4);
      const std::vector<float> fp32 = c.state();
      c.e.save_checkpoint(dir, {}, 0, "fp32-" + tag);
      StateModel d(config(stage, StateDtype::bf16, rnd), kUnits);
      d.e.load_checkpoint(dir, "fp32-" + tag);
      std::vector<float> want = fp32;
      std::size_t at = 0;
      for (const auto& list : d.params) {
        for (ParamId id : list) {
          const std::size_t n = d.e.layout().param(id).numel;
          for (std::size_t i = n; i < 3 * n; ++i) want[at + i] = bf16_to_float(float_to_bf16(fp32[at + i]));
          at += 3 * n;
        }
      }
      CHECK(d.state() == want);
    }
  }
}

TEST_CASE("bf16 states: config keys and their errors") {
  const EngineConfig c = parse_config(
      R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "bf16", "stochastic_rounding": true, "seed": 42}}})");
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.states.dtype == StateDtype::bf16);
  CHECK(c.optimizer.states.rounding == StateRounding::stochastic);
  CHECK(c.optimizer.states.seed == 42);
  const EngineConfig d = parse_config(R"({"optimizer": {"type": "Adam", "params": {"state_dtype": "BF16", "adam_w_mode": false}}})");
  CHECK(d.optimizer.kind == OptimizerKind::adam);
  CHECK(d.optimizer.states.dtype == StateDtype::bf16);
  CHECK(d.optimizer.states.rounding == StateRounding::nearest);
  for (const char* type : {"SGD", "Lion", "Adagrad", "AdamW8bit"}) {
    const std::string t = fmt::format(R"({{"optimizer": {{"type": "{}", "params": {{"state_dtype": "bf16"}}}}}})", type);
    const std::string msg = config_error(t.c_str());
    INFO(msg);
    CHECK(msg.find("optimizer.params.state_dtype") != std::string::npos);
    CHECK(msg.find(type) != std::string::npos);
  }
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "fp8"}}})").find("optimizer.params.state_dtype") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "bf16", "seed": -1}}})").find("optimizer.params.seed") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"seed": 3}}})").find("bf16 optimizer states only") != std::string::npos);
}
