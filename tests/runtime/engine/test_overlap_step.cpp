// zeroshard.overlap_optimizer_step ([Note: deferred optimizer step] in
// runtime/update/deferred_step.h): the swapped optimizer step run behind
// the next forward gives bitwise the synchronous step's training, whatever
// the loop reads or skips in between; a failure of the background step is
// agreed at the next unshard on every rank and a reload recovers; configs
// it cannot serve are refused naming the key.
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/collective_error.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "offload/io/fault_injection.h"
#include "runtime/engine/engine.h"
#include "runtime/plan/memory_estimate.h"
#include "tests/support/test_world.h"
#include "zs_config.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-overlap"; }

// State on nvme at stage 3 (sub-groups of 4096 elements); `params_nvme`:
// the parameter shards too, else in host memory.
EngineConfig config(DType dt, int accumulation, bool params_nvme, bool overlap) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.01f;
  EngineConfig c = make_config(3, h, accumulation, 0.05);  // clipped: the scale comes from the whole step's norm
  c.compute_dtype = dt;
  c.offload.optimizer.device = OffloadDevice::nvme;
  c.offload.optimizer.nvme_path = swap_root().string();
  c.offload.sub_group_size = 4096;
  if (params_nvme) {
    c.offload.param.device = OffloadDevice::nvme;
    c.offload.param.nvme_path = (swap_root() / "param").string();
    c.offload.param.max_in_cpu = 0;
  }
  c.overlap_optimizer_step = overlap;
  return c;
}

// How the loop behaves between two steps.
struct Loop {
  int skip_in_forward = -1;       ///< a unit the forward does not unshard
  bool read_state_early = false;  ///< rank 0 reads optimizer state and stats before the forward
};

struct Model {
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;  // per unit
  std::vector<float> forward_sums;           // per step: sum of every parameter the forward read

  explicit Model(const EngineConfig& cfg) : e(cfg, world()) {
    int p = 0;
    for (std::size_t u = 0; u < kOddUnits.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const auto& shape : kOddUnits[u]) {
        params.back().push_back(e.add_parameter(units.back(), fmt::format("p{}", p++), shape));
      }
    }
    e.finalize();
    set_parameters(e, params, sine_init_value);
  }

  // One step; `before_step` runs just before e.step(), `where` names the
  // call that threw (forward, backward or step).
  void step(int s, const Loop& loop = {}, const std::function<void()>& before_step = {}) {
    const DType dt = e.compute_dtype();
    if (loop.read_state_early && e.rank() == 0 && s > 1) {
      // Local reads while the previous update may still run: they wait for it.
      CHECK(e.optimizer_state(units[1], 0).size() == e.layout().unit(units[1]).shard);
      CHECK(e.offload_stats().bytes_written > 0);
    }
    for (int m = 0; m < e.config().gradient_accumulation_steps; ++m) {
      float sum = 0;
      for (UnitId u : units) {  // forward: read every parameter
        if (u == loop.skip_in_forward) continue;
        e.unshard(u);
        for (ParamId id : params[static_cast<std::size_t>(u)]) {
          std::vector<float> wide(e.layout().param(id).numel);
          kernels::cast(wide.data(), DType::f32, e.param_data(id, dt), dt, wide.size());
          for (float x : wide) sum += x;
        }
        e.reshard(u);
      }
      forward_sums.push_back(sum);
      where = "backward";
      for (auto it = units.rbegin(); it != units.rend(); ++it) {  // backward
        e.unshard(*it);
        for (ParamId id : params[static_cast<std::size_t>(*it)]) {
          std::vector<float> g(e.layout().param(id).numel);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = cosine_grad_value(s, m, e.rank(), id, i);
          kernels::accumulate_cast(e.grad_data(id, dt), dt, g.data(), DType::f32, g.size());
        }
        e.reduce_gradients(*it);
        e.reshard(*it);
      }
      if (before_step) before_step();
      where = "step";
      e.step();
      where = "forward";
    }
  }
  std::string where = "forward";

  // Master weights and optimizer states, gathered.
  std::vector<std::vector<float>> state() {
    std::vector<std::vector<float>> out;
    for (const auto& list : params) {
      for (ParamId id : list) {
        out.push_back(e.gather_master(id));
        for (int k = 0; k < 2; ++k) out.push_back(e.gather_optimizer_state(id, k));
      }
    }
    return out;
  }
};

struct Run {
  std::vector<float> forward_sums;
  std::vector<std::vector<float>> state;
};

Run train(const EngineConfig& c, int steps, const Loop& loop = {}) {
  Model m(c);
  for (int s = 1; s <= steps; ++s) m.step(s, loop);
  return {m.forward_sums, m.state()};
}

void check_same(const Run& got, const Run& want) {
  CHECK(got.forward_sums == want.forward_sums);
  REQUIRE(got.state.size() == want.state.size());
  for (std::size_t i = 0; i < got.state.size(); ++i) CHECK(got.state[i] == want.state[i]);
}

}  // namespace

TEST_CASE("overlap_optimizer_step: bitwise the synchronous step, parameters on nvme or in host memory") {
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const bool params_nvme : {true, false}) {
      for (const int accumulation : {1, 2}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(params_nvme);
        CAPTURE(accumulation);
        const Run want = train(config(dt, accumulation, params_nvme, false), 3);
        check_same(train(config(dt, accumulation, params_nvme, true), 3), want);
      }
    }
  }
  world().barrier();
}

TEST_CASE("overlap_optimizer_step: a unit the forward skips, and local reads of state before the forward") {
  const EngineConfig sync = config(DType::bf16, 1, true, false), overlap = config(DType::bf16, 1, true, true);
  for (const Loop loop : {Loop{.skip_in_forward = 0}, Loop{.skip_in_forward = 4}, Loop{.read_state_early = true}}) {
    CAPTURE(loop.skip_in_forward);
    CAPTURE(loop.read_state_early);
    check_same(train(overlap, 3, loop), train(sync, 3, loop));
  }
  world().barrier();
}

TEST_CASE("overlap_optimizer_step: a checkpoint saved right after step() holds the updated state") {
  const fs::path dir = swap_root() / fmt::format("ckpt-{}", world().world_size());
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  const EngineConfig overlap = config(DType::bf16, 1, true, true);
  std::vector<std::vector<float>> saved;
  {
    Model m(overlap);
    m.step(1);
    m.step(2);
    m.e.save_checkpoint(dir.string(), {{"step", 2}});
    saved = m.state();
  }
  CHECK(saved == train(config(DType::bf16, 1, true, false), 2).state);
  Model back(overlap);
  back.e.load_checkpoint(dir.string());
  CHECK(back.state() == saved);
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("overlap_optimizer_step: the memory estimate's host peak bounds the engine's, handoffs included") {
  for (const DType dt : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const EngineConfig c = config(dt, 1, true, true);
    Model m(c);
    for (int s = 1; s <= 3; ++s) m.step(s);
    m.state();  // settles the last step
    const MemoryEstimate est = estimate_memory(m.e.layout(), c, m.e.rank());
    const MemoryEstimate sync = estimate_memory(m.e.layout(), config(dt, 1, true, false), m.e.rank());
    const std::uint64_t got = m.e.ledger().peak_total(MemTier::host);
    CHECK(got <= est.after_step.peak_total(MemTier::host));
    // The bound is the synchronous step's peak plus at most the handoffs.
    CHECK(est.after_step.peak_total(MemTier::host) > sync.after_step.peak_total(MemTier::host));
  }
  world().barrier();
}

TEST_CASE("overlap_optimizer_step: configurations it cannot serve name the key") {
  EngineConfig c = config(DType::f32, 1, true, true);
  c.zero.stage = 2;
  c.offload.param.device = OffloadDevice::none;
  CHECK_THROWS_WITH_AS(Engine(c, world()), doctest::Contains("zeroshard.overlap_optimizer_step"), ConfigError);
  EngineConfig cpu = config(DType::f32, 1, false, true);
  cpu.offload.optimizer.device = OffloadDevice::cpu;
  CHECK_THROWS_WITH_AS(Engine(cpu, world()), doctest::Contains("offload_optimizer.device \"nvme\""), ConfigError);
}

#if ZS_TEST_HOOKS
TEST_CASE("overlap_optimizer_step: a failed background step is agreed at the next unshard; a reload recovers") {
  const fs::path dir = swap_root() / fmt::format("ckpt-fault-{}", world().world_size());
  if (world().rank() == 0) fs::remove_all(dir);
  world().barrier();
  const EngineConfig overlap = config(DType::f32, 1, true, true);
  const Run want = train(config(DType::f32, 1, true, false), 3);
  Model m(overlap);
  m.step(1);
  m.e.save_checkpoint(dir.string(), {});
  // The last rank's update of step 2 fails in its first swap read (step()
  // itself reads no swap file: the step's gradient files are written, not
  // read, and the prefetched parameters are dropped), on the background
  // thread: step() returns, and the forward of step 3 learns of it at its
  // first unshard, on every rank.
  const int last = world().world_size() - 1;
  std::string message;
  bool agreed = false;
  try {
    m.step(2, {}, [&] {
      if (world().rank() == last) inject_io_fault(IoFault{.op = IoOp::read, .nth = 1, .err = EIO});
    });
    m.step(3);
  } catch (const IoError& err) {
    message = err.what();
    agreed = is_agreed(err);
  }
  clear_io_fault();
  CHECK(agreed);
  CHECK(m.where == "forward");
  CHECK(message.find("Input/output error") != std::string::npos);
  if (world().world_size() > 1) CHECK(message.find(fmt::format("rank {}:", last)) != std::string::npos);
  CHECK_THROWS_WITH_AS(m.step(5), doctest::Contains("the engine is unusable"), Error);
  m.e.load_checkpoint(dir.string());
  m.forward_sums.clear();
  m.step(2);
  m.step(3);
  CHECK(m.state() == want.state);
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}
#endif
