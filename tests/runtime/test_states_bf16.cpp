// bf16 optimizer states (optimizer.params.state_dtype "bf16";
// optimizer/update_bf16.h) through the Engine: bitwise the same parameters
// and states at stages 0-3 and offload none / cpu / nvme at this world size
// (round to nearest even and stochastic, fp32 and bf16 compute); with
// rank-independent gradients, bitwise the single-buffer reference at every
// world size (the stochastic stream follows the flat-buffer index); one
// step against fp32 states from the same states (parameters bitwise, states
// within the kernel's bound, kernels/cpu/adam_bf16_state.h); the ledger's
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
#include "runtime/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

struct ParamSpec {
  std::int64_t numel;
  bool no_decay;  // the "no_decay" group: a group boundary inside the unit
};
const std::vector<std::vector<ParamSpec>> kUnits = {
    {{0, false}}, {{1, false}}, {{7, false}, {57, true}}, {{300, false}, {100, true}, {113, false}},
    {{10001, false}}, {{3 * 4100, false}, {1, true}}};

constexpr double kLr = 1e-2, kDecay = 0.01;

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-states-bf16"; }

float init_value(int p, std::size_t i) { return 0.5f * std::sin(0.7f * static_cast<float>(i) + static_cast<float>(p)); }
// Rank-dependent gradients, or (same_on_ranks) multiples of 2^-12 below 2^-2
// that every rank gives: their sum over N <= 4 ranks and its product with
// float(1 / N) are exact, so the reduced gradient is the value itself.
float grad_value(int step, int rank, int p, std::size_t i, bool same_on_ranks) {
  const float g = 0.01f * std::cos(0.3f * static_cast<float>(i) + 1.3f * static_cast<float>(step) +
                                   (same_on_ranks ? 0.0f : 0.11f * static_cast<float>(rank)) + static_cast<float>(p));
  return same_on_ranks ? std::round(g * 25.0f * 4096.0f) / 4096.0f : g;
}

struct Model {
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;
  bool same_grads;

  explicit Model(const EngineConfig& cfg, bool same_on_ranks = false) : e(cfg, world()), same_grads(same_on_ranks) {
    const GroupId nd = e.add_param_group("no_decay", {.weight_decay = 0.0f});
    int p = 0;
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const ParamSpec& s : kUnits[u]) {
        params.back().push_back(e.add_parameter(units.back(), fmt::format("p{}", p++), {s.numel}, s.no_decay ? nd : 0));
      }
    }
    e.finalize();
    for (const auto& list : params) {
      for (ParamId id : list) {
        std::vector<float> v(e.layout().param(id).numel);
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = init_value(id, i);
        e.set_parameter(id, v);
      }
    }
  }

  void step(int s) {
    const DType dt = e.compute_dtype();
    for (UnitId u : units) {
      e.unshard(u);
      e.reshard(u);
    }
    for (auto it = units.rbegin(); it != units.rend(); ++it) {
      e.unshard(*it);
      for (ParamId id : params[static_cast<std::size_t>(*it)]) {
        std::vector<float> g(e.layout().param(id).numel);
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad_value(s, e.rank(), id, i, same_grads);
        kernels::accumulate_cast(e.grad_data(id, dt), dt, g.data(), DType::f32, g.size());
      }
      e.reduce_gradients(*it);
      e.reshard(*it);
    }
    e.step();
  }

  // Masters then both (widened) states of every parameter, gathered.
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

OffloadConfig offload(OffloadDevice d, std::size_t sub_group = 4096) {
  OffloadConfig o;
  o.optimizer.device = d;
  if (d == OffloadDevice::nvme) o.optimizer.nvme_path = swap_root().string();
  o.sub_group_size = static_cast<std::int64_t>(sub_group);
  return o;
}

EngineConfig config(int stage, StateDtype states, StateRounding rounding = StateRounding::nearest,
                    DType dt = DType::f32, OffloadConfig o = {}) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = kLr;
  h.weight_decay = kDecay;
  h.states.dtype = states;
  h.states.rounding = rounding;
  h.states.seed = 1234;
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dt;
  c.offload = o;
  return c;
}

std::vector<float> train(const EngineConfig& c, int steps = 3) {
  Model m(c);
  for (int s = 1; s <= steps; ++s) m.step(s);
  return m.state();
}

const char* rounding_name(StateRounding r) { return r == StateRounding::stochastic ? "stochastic" : "nearest"; }

}  // namespace

TEST_CASE("bf16 states: stages 0-3 and offload none/cpu/nvme give bitwise the same training") {
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      const std::vector<float> ref = train(config(0, StateDtype::bf16, rnd, dt));
      for (int stage = 1; stage <= 3; ++stage) {
        for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
          INFO(rounding_name(rnd) << " dtype " << dtype_name(dt) << " stage " << stage << " offload "
                                  << static_cast<int>(d));
          CHECK(train(config(stage, StateDtype::bf16, rnd, dt, offload(d))) == ref);
        }
      }
      // Several nvme sub-groups per unit (offload tier pieces) as one.
      CHECK(train(config(3, StateDtype::bf16, rnd, dt, offload(OffloadDevice::nvme, 1 << 20))) == ref);
      // bf16 states are not fp32 states: the states differ, the parameters stay close.
      const std::vector<float> fp32 = train(config(0, StateDtype::fp32, rnd, dt));
      REQUIRE(fp32.size() == ref.size());
      CHECK(fp32 != ref);
      double worst = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(double(ref[i]) - fp32[i]));
      CHECK(worst < 1e-3);
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
      Model shape(c0, true);  // for the layout only
      for (const auto& list : shape.params) {
        for (ParamId id : list) {
          const ParamInfo& p = shape.e.layout().param(id);
          const bool nd = shape.e.layout().param(id).group != 0;
          std::vector<float> w(p.numel), g(p.numel);
          std::vector<std::uint16_t> m(p.numel, 0), v(p.numel, 0);
          for (std::size_t i = 0; i < w.size(); ++i) w[i] = init_value(id, i);
          for (int s = 1; s <= 3; ++s) {
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = grad_value(s, 0, id, i, true);
            optimizer_update_bf16(c0.optimizer, kLr, nd ? 0.0 : kDecay, s, 1.0f, w.data(), g.data(), DType::f32,
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
        Model m(config(stage, StateDtype::bf16, rnd, DType::f32, stage > 0 ? offload(d) : OffloadConfig{}), true);
        for (int s = 1; s <= 3; ++s) m.step(s);
        CHECK(m.state() == want);
      }
    }
  }
}

TEST_CASE("bf16 states: one step against fp32 states from the same states") {
  // kernels/cpu/adam_bf16_state.h: the parameters are bitwise those of fp32
  // states, each new state within half a bf16 ulp (nearest: <= 2^-8 of its
  // magnitude) or one ulp (stochastic: < 2^-7).
  const std::string dir = (swap_root() / fmt::format("close-{}", world().world_size())).string();
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (int stage : {0, 2}) {
      INFO(rounding_name(rnd) << " stage " << stage);
      const std::string tag = fmt::format("{}-{}", rounding_name(rnd), stage);
      Model a(config(stage, StateDtype::bf16, rnd));
      for (int s = 1; s <= 3; ++s) a.step(s);
      a.e.save_checkpoint(dir, {}, 0, tag);
      Model b(config(stage, StateDtype::fp32));
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
    Model m(config(stage, StateDtype::bf16));
    std::uint64_t want = 0;
    for (const UnitInfo& u : m.e.layout().units()) want += 2 * 2 * (stage == 0 ? u.padded : u.shard);
    INFO("stage " << stage);
    CHECK(m.e.ledger().current(MemCategory::optimizer_states, MemTier::device) == want);
  }
}

TEST_CASE("bf16 states: checkpoints at this world size (bf16 exact; bf16 <-> fp32)") {
  const std::string dir = (swap_root() / fmt::format("ckpt-{}", world().world_size())).string();
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  for (StateRounding rnd : {StateRounding::nearest, StateRounding::stochastic}) {
    for (int stage : {0, 1, 3}) {
      INFO(rounding_name(rnd) << " stage " << stage);
      const std::string tag = fmt::format("bf16-{}-{}", rounding_name(rnd), stage);
      Model a(config(stage, StateDtype::bf16, rnd));
      for (int s = 1; s <= 3; ++s) a.step(s);
      a.e.save_checkpoint(dir, {}, 0, tag);
      const std::vector<float> saved = a.state();
      for (int s = 4; s <= 5; ++s) a.step(s);
      // bf16 into bf16 at another stage and tier: bitwise, now and after.
      Model b(config(3 - stage, StateDtype::bf16, rnd, DType::f32,
                     3 - stage > 0 ? offload(OffloadDevice::nvme) : OffloadConfig{}));
      b.e.load_checkpoint(dir, tag);
      CHECK(b.state() == saved);
      for (int s = 4; s <= 5; ++s) b.step(s);
      CHECK(b.state() == a.state());
      // Into fp32 states: the widened values, bitwise.
      Model c(config(stage, StateDtype::fp32));
      c.e.load_checkpoint(dir, tag);
      CHECK(c.state() == saved);
      // fp32 into bf16: each state rounded to nearest even, masters exact.
      c.step(4);
      const std::vector<float> fp32 = c.state();
      c.e.save_checkpoint(dir, {}, 0, "fp32-" + tag);
      Model d(config(stage, StateDtype::bf16, rnd));
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
  auto parse = [](const char* text) { return EngineConfig::from_json(nlohmann::json::parse(text), "test.json"); };
  const EngineConfig c = parse(
      R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "bf16", "stochastic_rounding": true, "seed": 42}}})");
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.states.dtype == StateDtype::bf16);
  CHECK(c.optimizer.states.rounding == StateRounding::stochastic);
  CHECK(c.optimizer.states.seed == 42);
  const EngineConfig d = parse(R"({"optimizer": {"type": "Adam", "params": {"state_dtype": "BF16", "adam_w_mode": false}}})");
  CHECK(d.optimizer.kind == OptimizerKind::adam);
  CHECK(d.optimizer.states.dtype == StateDtype::bf16);
  CHECK(d.optimizer.states.rounding == StateRounding::nearest);
  auto error = [&](const char* text) {
    try {
      parse(text);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* type : {"SGD", "Lion", "Adagrad", "AdamW8bit"}) {
    const std::string t = fmt::format(R"({{"optimizer": {{"type": "{}", "params": {{"state_dtype": "bf16"}}}}}})", type);
    const std::string msg = error(t.c_str());
    INFO(msg);
    CHECK(msg.find("optimizer.params.state_dtype") != std::string::npos);
    CHECK(msg.find(type) != std::string::npos);
  }
  CHECK(error(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "fp8"}}})").find("optimizer.params.state_dtype") != std::string::npos);
  CHECK(error(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "bf16", "seed": -1}}})").find("optimizer.params.seed") != std::string::npos);
  CHECK(error(R"({"optimizer": {"type": "AdamW", "params": {"seed": 3}}})").find("bf16 optimizer states only") != std::string::npos);
}
