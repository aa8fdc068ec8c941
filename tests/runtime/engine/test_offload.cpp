// Offload tiers in the engine: optimizer state (and, at stage 3, parameter
// shards) in host memory or NVMe swap files must give bitwise the same
// training as without offload, at every stage, world size, sub-group size,
// pipeline setting and accumulation count; plus overflow skips, checkpoints
// of offloaded state, file-name lengths, the ledger's tiers and config
// errors.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "offload/io/fault_injection.h"
#include "zs_config.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// Parameter shapes per unit: odd sizes, an empty parameter, and a unit
// whose shard spans several 4096-element sub-groups at every world size.
const std::vector<std::vector<std::vector<std::int64_t>>> kUnits = {
    {{7}, {57}}, {{10001}}, {{3, 4100}, {1}}, {{0}, {5}}};

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-offload"; }

OffloadConfig nvme(std::size_t sub_group = 4096, int buffers = 4, bool pipeline = true) {
  OffloadConfig o;
  o.optimizer.device = OffloadDevice::nvme;
  o.optimizer.nvme_path = swap_root().string();
  o.optimizer.buffer_count = buffers;
  o.optimizer.pipeline_read = pipeline;
  o.optimizer.pipeline_write = pipeline;
  o.sub_group_size = static_cast<std::int64_t>(sub_group);
  return o;
}

// nvme() with the stage 3 parameter shards on nvme too (their own folder),
// at most max_in_cpu elements of them kept in host memory.
OffloadConfig nvme_params(std::int64_t max_in_cpu) {
  OffloadConfig o = nvme();
  o.param.device = OffloadDevice::nvme;
  o.param.nvme_path = (swap_root() / "param").string();
  o.param.max_in_cpu = max_in_cpu;
  return o;
}

struct Result {
  std::vector<std::vector<float>> master;  ///< per parameter, gathered
  std::vector<std::vector<float>> states;  ///< per parameter and state
  std::int64_t skipped = 0;
};

struct Model {
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;  // per unit

  explicit Model(const EngineConfig& cfg, std::size_t name_pad = 0) : e(cfg, world()) {
    int p = 0;
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const auto& shape : kUnits[u]) {
        params.back().push_back(e.add_parameter(units.back(), fmt::format("{:n>{}}p{}", "", name_pad, p++), shape));
      }
    }
    e.finalize();
    set_parameters(e, params, sine_init_value);
  }

  // One optimizer step of `accumulation` micro-batches; `inf_at_rank0`
  // puts an Inf into rank 0's first gradient element.
  StepResult step(int s, bool inf_at_rank0 = false) {
    const DType dt = e.compute_dtype();
    StepResult r;
    for (int m = 0; m < e.config().gradient_accumulation_steps; ++m) {
      for (UnitId u : units) {  // forward: read every parameter
        e.unshard(u);
        for (ParamId id : params[static_cast<std::size_t>(u)]) CHECK(e.param_data(id, dt) != nullptr);
        e.reshard(u);
      }
      for (auto it = units.rbegin(); it != units.rend(); ++it) {  // backward
        e.unshard(*it);
        for (ParamId id : params[static_cast<std::size_t>(*it)]) {
          std::vector<float> g(e.layout().param(id).numel);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = cosine_grad_value(s, m, e.rank(), id, i);
          if (inf_at_rank0 && e.rank() == 0 && !g.empty()) g[0] = INFINITY;
          kernels::accumulate_cast(e.grad_data(id, dt), dt, g.data(), DType::f32, g.size());
        }
        e.reduce_gradients(*it);
        e.reshard(*it);
      }
      r = e.step();
    }
    return r;
  }

  Result result() {
    Result out;
    const int nstates = optimizer_state_count(e.config().optimizer);
    for (const auto& list : params) {
      for (ParamId id : list) {
        out.master.push_back(e.gather_master(id));
        for (int k = 0; k < nstates; ++k) out.states.push_back(e.gather_optimizer_state(id, k));
      }
    }
    out.skipped = e.skipped_steps();
    return out;
  }
};

EngineConfig config(int stage, DType dt, int accumulation, const OffloadConfig& o, OptimizerKind kind) {
  OptimizerHyper h;
  h.kind = kind;
  h.lr = 1e-2f;
  h.weight_decay = 0.01f;
  h.momentum = 0.9f;
  EngineConfig c = make_config(stage, h, accumulation);
  c.compute_dtype = dt;
  c.offload = o;
  return c;
}

Result train(const EngineConfig& c, int steps, int inf_step = -1) {
  Model m(c);
  for (int s = 1; s <= steps; ++s) m.step(s, s == inf_step);
  return m.result();
}

void check_bitwise(const Result& got, const Result& want) {
  REQUIRE(got.master.size() == want.master.size());
  for (std::size_t i = 0; i < got.master.size(); ++i) CHECK(got.master[i] == want.master[i]);
  REQUIRE(got.states.size() == want.states.size());
  for (std::size_t i = 0; i < got.states.size(); ++i) CHECK(got.states[i] == want.states[i]);
  CHECK(got.skipped == want.skipped);
}

}  // namespace

TEST_CASE("offload cpu and nvme match no offload bitwise at stages 1-3") {
  for (const DType dt : {DType::f32, DType::bf16}) {
    for (const int stage : {1, 2, 3}) {
      for (const int accumulation : {1, 2}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(stage);
        CAPTURE(accumulation);
        const OptimizerKind kind = accumulation == 1 ? OptimizerKind::adamw : OptimizerKind::sgd;
        const Result want = train(config(stage, dt, accumulation, {}, kind), 3);
        std::vector<OffloadConfig> variants;
        OffloadConfig cpu;
        cpu.optimizer.device = OffloadDevice::cpu;
        variants.push_back(cpu);
        variants.push_back(nvme());
        variants.push_back(nvme(4096, 1, false));
        variants.push_back(nvme(8192, 2, true));
        variants.push_back(nvme(1'000'000'000, 3, true));
        std::vector<std::int64_t> buckets(variants.size(), 0);
        variants.push_back(nvme());  // small reduction buckets: partial blocks per sub-group
        buckets.push_back(1000);
        if (stage == 3) {
          variants.push_back(nvme_params(0));
          variants.push_back(nvme_params(70));  // the first unit stays in host memory
          OffloadConfig pc;
          pc.param.device = OffloadDevice::cpu;
          variants.push_back(pc);
          OffloadConfig only_param;  // optimizer in memory, parameters on nvme
          only_param.param.device = OffloadDevice::nvme;
          only_param.param.nvme_path = swap_root().string();
          only_param.param.max_in_cpu = 0;
          variants.push_back(only_param);
        }
        buckets.resize(variants.size(), 0);
        for (std::size_t v = 0; v < variants.size(); ++v) {
          CAPTURE(v);
          EngineConfig c = config(stage, dt, accumulation, variants[v], kind);
          if (buckets[v] == 0) {
            check_bitwise(train(c, 3), want);
            continue;
          }
          // Against no offload with the same buckets (the bucket size may
          // change the all-reduce's summation order, runtime/sharding/grad_reducer.h).
          c.zero.reduce_bucket_size = buckets[v];
          EngineConfig plain = config(stage, dt, accumulation, {}, kind);
          plain.zero.reduce_bucket_size = buckets[v];
          check_bitwise(train(c, 3), train(plain, 3));
        }
      }
    }
  }
}

TEST_CASE("Lion and Adagrad (one state each): offload cpu, nvme and nvme parameters match no offload bitwise") {
  for (const OptimizerKind kind : {OptimizerKind::lion, OptimizerKind::adagrad}) {
    for (const int stage : {1, 2, 3}) {
      CAPTURE(optimizer_name(kind));
      CAPTURE(stage);
      const DType dt = stage == 2 ? DType::bf16 : DType::f32;
      const Result want = train(config(stage, dt, 1, {}, kind), 3);
      REQUIRE(want.states.size() == want.master.size());  // exactly one state array per parameter
      std::vector<OffloadConfig> variants;
      OffloadConfig cpu;
      cpu.optimizer.device = OffloadDevice::cpu;
      variants.push_back(cpu);
      variants.push_back(nvme(4096, 1, false));  // several sub-groups through the swap pipeline
      if (stage == 3) {
        variants.push_back(nvme_params(0));
      }
      for (std::size_t v = 0; v < variants.size(); ++v) {
        CAPTURE(v);
        check_bitwise(train(config(stage, dt, 1, variants[v], kind), 3), want);
      }
    }
  }
}

TEST_CASE("offload to a tmpfs directory (buffered fallback) matches no offload") {
  if (!fs::is_directory("/dev/shm")) return;
  OffloadConfig o = nvme();
  o.optimizer.nvme_path = "/dev/shm/zs-test-offload";
  const Result want = train(config(2, DType::f32, 1, {}, OptimizerKind::adamw), 2);
  check_bitwise(train(config(2, DType::f32, 1, o, OptimizerKind::adamw), 2), want);
}

TEST_CASE("fp16 overflow with nvme offload skips the step on every rank") {
  OffloadConfig o = nvme();
  o.param.device = OffloadDevice::nvme;
  o.param.nvme_path = swap_root().string();
  o.param.max_in_cpu = 0;
  const EngineConfig base = config(3, DType::f16, 1, {}, OptimizerKind::adamw);
  const Result want = train(base, 3, 2);
  CHECK(want.skipped == 1);
  check_bitwise(train(config(3, DType::f16, 1, o, OptimizerKind::adamw), 3, 2), want);
  OffloadConfig o2 = nvme();
  check_bitwise(train(config(2, DType::f16, 1, o2, OptimizerKind::adamw), 3, 2),
                train(config(2, DType::f16, 1, {}, OptimizerKind::adamw), 3, 2));
}

TEST_CASE("checkpoints of nvme-offloaded state load back bit for bit, into any tier") {
  OffloadConfig o = nvme();
  o.param.device = OffloadDevice::nvme;
  o.param.nvme_path = swap_root().string();
  o.param.max_in_cpu = 0;
  const fs::path dir = swap_root() / "ckpt";
  const EngineConfig offloaded = config(3, DType::bf16, 1, o, OptimizerKind::adamw);
  Result saved;
  {
    Model m(offloaded);
    m.step(1);
    m.step(2);
    m.e.save_checkpoint(dir.string(), {{"note", "offloaded"}}, 0, "t");
    saved = m.result();
  }
  for (const OffloadConfig& target : {OffloadConfig{}, o}) {
    Model m(config(3, DType::bf16, 1, target, OptimizerKind::adamw));
    m.e.load_checkpoint(dir.string(), "t");
    check_bitwise(m.result(), saved);
  }
  // Training on after the load matches training on without offload.
  Model a(offloaded), b(config(3, DType::bf16, 1, {}, OptimizerKind::adamw));
  a.e.load_checkpoint(dir.string(), "t");
  b.e.load_checkpoint(dir.string(), "t");
  a.step(3);
  b.step(3);
  check_bitwise(a.result(), b.result());
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

TEST_CASE("set_parameters: a unit's parameters in one read and write of its swap files, the same bits") {
  OffloadConfig o = nvme_params(0);
  const EngineConfig c = config(3, DType::bf16, 1, o, OptimizerKind::adamw);
  {  // the engines remove their swap folders before the root goes
    // New values over sine_init_value's: `one` takes them by set_parameter, one
    // parameter at a time, `all` by set_parameters, a unit at a time.
    Model one(c), all(c);
    const OffloadStats before = all.e.offload_stats();
    for (const auto& list : all.params) {
      std::vector<std::vector<float>> values;
      for (ParamId id : list) {
        values.emplace_back(all.e.layout().param(id).numel);
        for (std::size_t i = 0; i < values.back().size(); ++i) values.back()[i] = sine_init_value(id + 7, i);
        one.e.set_parameter(id, values.back());
      }
      std::vector<std::span<const float>> spans(values.begin(), values.end());
      all.e.set_parameters(list, spans);
    }
    const OffloadStats after = all.e.offload_stats();
    // Per unit, the bf16 parameter shard and the fp32 master shard, read and
    // written once each: 6 bytes per shard element.
    std::uint64_t shard_elements = 0;
    for (UnitId u : all.units) shard_elements += all.e.layout().unit(u).shard;
    CHECK(after.bytes_read - before.bytes_read == 6 * shard_elements);
    CHECK(after.bytes_written - before.bytes_written == 6 * shard_elements);
    check_bitwise(all.result(), one.result());
    for (const auto& list : all.params) {
      for (ParamId id : list) {
        const std::vector<float> got = all.e.gather_parameter(id);
        CHECK(got == one.e.gather_parameter(id));
        if (!got.empty()) CHECK(got[0] == bf16_to_float(float_to_bf16(sine_init_value(id + 7, 0))));
      }
    }
    // Parameters of two units, or values of the wrong size, are refused.
    const std::vector<float> a(7), b(10001), wrong(8);
    const std::span<const float> two[] = {a, b}, bad[] = {wrong};
    const ParamId across[] = {all.params[0][0], all.params[1][0]};
    CHECK_THROWS_AS(all.e.set_parameters(across, two), InvariantError);
    CHECK_THROWS_AS(all.e.set_parameters(std::span<const ParamId>(across, 1), bad), InvariantError);
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(swap_root());
}

TEST_CASE("nvme swap files: short names for 10,000 long-named parameters, removed at the end") {
  OffloadConfig o = nvme();
  o.optimizer.nvme_path = (swap_root() / "names").string();
  EngineConfig c = config(2, DType::f32, 1, o, OptimizerKind::adamw);
  std::size_t files = 0;
  {
    Engine e(c, world());
    const UnitId u = e.add_unit(std::string(300, 'u'));
    std::vector<ParamId> ps;
    for (int i = 0; i < 10000; ++i) ps.push_back(e.add_parameter(u, fmt::format("{:x>240}{}", "", i), {1}));
    e.finalize();
    for (ParamId p : ps) e.grad(p)[0] = 1.0f;
    e.step();
    // The ranks share nvme_path: no rank may still be writing (before) or
    // already removing its folder (after) while another one walks it.
    world().barrier();
    for (const auto& entry : fs::recursive_directory_iterator(o.optimizer.nvme_path)) {
      CHECK(entry.path().filename().string().size() < 255);
      ++files;
    }
    world().barrier();
    CHECK(e.ledger().current(MemCategory::optimizer_states, MemTier::nvme) > 0);
    CHECK(e.ledger().current(MemCategory::optimizer_states, MemTier::device) == 0);
    CHECK(e.ledger().current(MemCategory::gradients, MemTier::nvme) > 0);
  }
  CHECK(files > 0);
  world().barrier();
  // Every rank removed its own folder.
  std::size_t left = 0;
  if (fs::exists(o.optimizer.nvme_path)) {
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(o.optimizer.nvme_path)) ++left;
  }
  CHECK(left == 0);
}

TEST_CASE("offload configuration errors name the key") {
  auto parse = [](const char* text) { return EngineConfig::from_json(nlohmann::json::parse(text), "cfg.json"); };
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})"),
                       doctest::Contains("zero_optimization.offload_optimizer.device"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})"),
                       doctest::Contains("stage 3"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})"),
                       doctest::Contains("nvme_path"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "disk"}}})"),
                       doctest::Contains("\"disk\""), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})"),
                       doctest::Contains("offload_optimizer.ratio"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"zero_optimization": {"stage": 2, "sub_group_size": 1.5}})"),
                       doctest::Contains("sub_group_size"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(R"({"aio": {"block_size": 1000}})"), doctest::Contains("aio.block_size"), ConfigError);
  const EngineConfig ok = parse(R"({"zero_optimization": {"stage": 3, "sub_group_size": 1e8,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x", "buffer_count": 2, "pipeline_read": false},
      "offload_param": {"device": "cpu", "buffer_size": 2e6, "max_in_cpu": 1e9}}, "aio": {"queue_depth": 8}})");
  CHECK(ok.offload.sub_group_size == 100'000'000);
  CHECK(ok.offload.optimizer.device == OffloadDevice::nvme);
  CHECK(ok.offload.optimizer.buffer_count == 2);
  CHECK_FALSE(ok.offload.optimizer.pipeline_read);
  CHECK(ok.offload.param.device == OffloadDevice::cpu);
  CHECK(ok.offload.param.buffer_size == 2'000'000);
  CHECK(ok.offload.aio.queue_depth == 8);
  // pin_memory: page-locked buffers where CUDA and a device exist, else a
  // ConfigError at finalize() naming the key.
  OffloadConfig pinned;
  pinned.optimizer.device = OffloadDevice::cpu;
  pinned.optimizer.pin_memory = true;
  try {
    Model m(config(2, DType::f32, 1, pinned, OptimizerKind::adamw));
    m.step(1);
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("offload_optimizer.pin_memory") != std::string::npos);
  }
  // A unit shard larger than offload_param.buffer_size is refused at finalize().
  OffloadConfig small = nvme();
  small.param.device = OffloadDevice::nvme;
  small.param.nvme_path = swap_root().string();
  small.param.max_in_cpu = 0;
  small.param.buffer_size = 100;
  CHECK_THROWS_WITH_AS(Model(config(3, DType::f32, 1, small, OptimizerKind::adamw)),
                       doctest::Contains("offload_param.buffer_size"), ConfigError);
}

#if ZS_TEST_HOOKS
TEST_CASE("swap I/O errors reach the caller of step() and unshard() on every rank, without a hang") {
  OffloadConfig o = nvme();
  o.param.device = OffloadDevice::nvme;
  o.param.nvme_path = swap_root().string();
  o.param.max_in_cpu = 0;
  const EngineConfig c = config(3, DType::f32, 1, o, OptimizerKind::adamw);
  // Rank 0 only: the others must learn of it through the engine.
  for (const IoOp op : {IoOp::write, IoOp::read}) {
    const std::string what = op == IoOp::write ? "write" : "read";
    CAPTURE(what);
    Model m(c);
    m.step(1);
    if (world().rank() == 0) inject_io_fault(IoFault{.op = op, .nth = 2, .err = EIO});
    std::string message;
    try {
      m.step(2);
    } catch (const IoError& e) {
      message = e.what();
    }
    clear_io_fault();
    CHECK(message.find("Input/output error") != std::string::npos);
    if (world().world_size() > 1) CHECK(message.find("rank 0") != std::string::npos);
    world().barrier();
  }
}
#endif
