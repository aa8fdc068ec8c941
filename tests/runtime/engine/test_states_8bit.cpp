// 8-bit optimizer states (AdamW8bit; optimizer/state_format.h) through the
// Engine: bitwise the same parameters and states at stages 0-3 and offload
// none / cpu / nvme at this world size (fp32 and bf16 compute), the ledger's
// optimizer-state bytes, the min_8bit_size fallback, checkpoint round trips
// at this world size (8-bit exact; 8-bit into fp32 and fp32 into 8-bit),
// config errors. Units: odd sizes 0, 1, 7, 57, 10001, block boundaries
// (256, 257, 512 + 1), a unit spanning several 4096-element sub-groups, and
// parameter groups that split a block (a straddled block).
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/engine.h"
#include "tests/support/scratch_files.h"
#include "tests/support/state_format_model.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// Per unit. Unit 3 holds 300 + 100 + 113 elements: the groups change at 300
// and 400, inside blocks of 64 and 256 at every world size.
const StateUnits kUnits = {
    {{0, false}}, {{1, false}}, {{7, false}, {57, true}}, {{300, false}, {100, true}, {113, false}},
    {{10001, false}}, {{256, false}}, {{257, true}}, {{513, false}}, {{3 * 4100, false}, {1, true}}};

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-states-8bit"; }

OffloadConfig offload(OffloadDevice d, std::size_t sub_group = 4096) {
  return state_offload(d, swap_root(), sub_group);
}

EngineConfig config(int stage, StateDtype states, DType dt = DType::f32, OffloadConfig o = {},
                    std::size_t block = 64, std::size_t min_8bit = 0) {
  return state_config(stage, {.dtype = states, .block_size = block, .min_8bit_size = min_8bit}, dt, o);
}

std::vector<float> train(const EngineConfig& c) { return train_states(c, kUnits); }

}  // namespace

TEST_CASE("8-bit states: stages 0-3 and offload none/cpu/nvme give bitwise the same training") {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (std::size_t block : {std::size_t{64}, std::size_t{256}}) {
      INFO("dtype " << dtype_name(dt) << " block " << block);
      const std::vector<float> ref = train(config(0, StateDtype::q8, dt, {}, block));
      check_stages_and_tiers(ref, [&](int stage, OffloadDevice d) {
        return train(config(stage, StateDtype::q8, dt, offload(d), block));
      });
      // 8-bit is not fp32: the states differ, the parameters stay close.
      check_other_format_close(train(config(0, StateDtype::fp32, dt)), ref, 0.05);
    }
  }
}

TEST_CASE("8-bit states: nvme sub-groups of 4096 (several per unit) match one sub-group") {
  const std::vector<float> one = train(config(2, StateDtype::q8, DType::f32, offload(OffloadDevice::nvme, 1 << 20)));
  CHECK(train(config(2, StateDtype::q8, DType::f32, offload(OffloadDevice::nvme, 4096))) == one);
  CHECK(train(config(3, StateDtype::q8, DType::f32, offload(OffloadDevice::nvme, 4096))) == one);
}

TEST_CASE("8-bit states: the ledger holds codes and absmax; min_8bit_size keeps small units fp32") {
  for (std::size_t min8 : {std::size_t{0}, std::size_t{4096}}) {
    for (int stage = 0; stage <= 3; ++stage) {
      StateModel m(config(stage, StateDtype::q8, DType::f32, {}, 256, min8), kUnits);
      std::uint64_t want = 0;
      for (const UnitInfo& u : m.e.layout().units()) {
        const std::uint64_t n = stage == 0 ? u.padded : u.shard, windows = stage == 0 ? u.padded / std::max<std::uint64_t>(u.shard, 1) : 1;
        if (u.numel >= min8 && u.shard > 0) {
          want += 2 * (n + 4 * windows * kernels::quant_block_count(u.shard, 256));
        } else {
          want += 2 * 4 * n;
        }
      }
      INFO("stage " << stage << " min_8bit_size " << min8);
      CHECK(m.e.ledger().current(MemCategory::optimizer_states, MemTier::device) == want);
    }
  }
  // With min_8bit_size above every unit, AdamW8bit trains exactly as AdamW.
  CHECK(train(config(2, StateDtype::q8, DType::f32, {}, 256, 1 << 20)) == train(config(2, StateDtype::fp32)));
}

TEST_CASE("8-bit states: checkpoints at this world size (exact; 8-bit <-> fp32)") {
  const std::string dir = (swap_root() / fmt::format("ckpt-{}", world().world_size())).string();
  remove_dir_on_rank0(world(), dir);
  for (int stage : {0, 1, 3}) {
    INFO("stage " << stage);
    // Saved after 3 steps of 8-bit states; the reference continues to 5.
    StateModel a(config(stage, StateDtype::q8), kUnits);
    for (int s = 1; s <= 3; ++s) a.step(s);
    a.e.save_checkpoint(dir, {}, 0, fmt::format("q8-{}", stage));
    const std::vector<float> saved = a.state();
    for (int s = 4; s <= 5; ++s) a.step(s);
    // Same format, same world size, another stage: bitwise, now and after.
    StateModel b(config(3 - stage, StateDtype::q8), kUnits);
    b.e.load_checkpoint(dir, fmt::format("q8-{}", stage));
    CHECK(b.state() == saved);
    for (int s = 4; s <= 5; ++s) b.step(s);
    CHECK(b.state() == a.state());
    // Into fp32 states: the dequantized values, bitwise.
    StateModel c(config(stage, StateDtype::fp32, DType::f32, offload(stage > 0 ? OffloadDevice::nvme : OffloadDevice::none)), kUnits);
    c.e.load_checkpoint(dir, fmt::format("q8-{}", stage));
    CHECK(c.state() == saved);
    // fp32 into 8-bit: quantized within the map's bound (0.9 / 2^6 / 2 of a
    // block's absmax for exp_avg, 0.9 / 2^7 / 2 for exp_avg_sq); saving
    // that engine again and loading it is exact.
    c.e.save_checkpoint(dir, {}, 0, fmt::format("fp32-{}", stage));
    StateModel d(config(stage, StateDtype::q8), kUnits);
    d.e.load_checkpoint(dir, fmt::format("fp32-{}", stage));
    const std::vector<float> got = d.state();
    REQUIRE(got.size() == saved.size());
    float top = 0;
    for (float x : saved) top = std::max(top, std::fabs(x));
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - saved[i]) <= 0.0071f * top + 1e-30f);
    d.e.save_checkpoint(dir, {}, 0, fmt::format("again-{}", stage));
    StateModel f(config(stage, StateDtype::q8), kUnits);
    f.e.load_checkpoint(dir, fmt::format("again-{}", stage));
    CHECK(f.state() == got);
  }
}

TEST_CASE("8-bit states: config keys and their errors") {
  const EngineConfig c = parse_config(R"({"optimizer": {"type": "AdamW8bit", "params": {"block_size": 2048, "min_8bit_size": 10}}})");
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.states.dtype == StateDtype::q8);
  CHECK(c.optimizer.states.block_size == 2048);
  CHECK(c.optimizer.states.min_8bit_size == 10);
  CHECK(optimizer_type_name(c.optimizer) == "AdamW8bit");
  const EngineConfig d = parse_config(R"({"optimizer": {"type": "adam8bit", "params": {"adam_w_mode": false}}})");
  CHECK(d.optimizer.kind == OptimizerKind::adam);
  CHECK(d.optimizer.states.block_size == 256);
  CHECK(d.optimizer.states.min_8bit_size == 4096);
  for (const char* bad : {"100", "32", "8192", "0"}) {
    const std::string t = fmt::format(R"({{"optimizer": {{"type": "AdamW8bit", "params": {{"block_size": {}}}}}}})", bad);
    const std::string msg = config_error(t.c_str());
    CHECK(msg.find("optimizer.params.block_size") != std::string::npos);
    CHECK(msg.find("power of two from 64 to 4096") != std::string::npos);
  }
  CHECK(config_error(R"({"optimizer": {"type": "AdamW8bit", "params": {"min_8bit_size": -1}}})").find("optimizer.params.min_8bit_size") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"block_size": 256}}})").find("applies only to") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "SGD", "params": {"min_8bit_size": 1}}})").find("applies only to") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW8bit", "params": {"state_dtype": "bf16"}}})").find("optimizer.params.state_dtype") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "fp8"}}})").find("optimizer.params.state_dtype") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "AdamW", "params": {"stochastic_rounding": true}}})").find("bf16 optimizer states only") != std::string::npos);
  CHECK(config_error(R"({"optimizer": {"type": "Lion8bit"}})").find("optimizer.type") != std::string::npos);
  CHECK(parse_config(R"({"optimizer": {"type": "AdamW", "params": {"state_dtype": "fp32"}}})").optimizer.states.dtype ==
        StateDtype::fp32);
}
