// Muon through the Engine (optimizer.type "Muon"; [Note: Muon on shards] in
// runtime/update/muon_step.h): stages 0-3 and offload none / cpu / nvme
// give bitwise the same parameters and states at this world size (fp32 and
// bf16 compute); with gradients every rank gives alike, every world size
// gives bitwise the world-size-1 engine (run on a SelfCommunicator beside
// it); three steps against the reference formula computed in double; the
// AdamW parameters bitwise an AdamW engine's; the momentum in exp_avg and
// exp_avg_sq 0 at Muon elements; owners balanced; config errors. Matrices
// of odd shapes (7x13, 13x7, 100x37, 64x64, 73x137 = 10001 elements, 1x1,
// 1x57, 0x5) crossing shard windows, beside 1-D AdamW parameters in the
// same units; exp_avg_sq packed to AdamW's elements (the ledger's bytes);
// the simulated device (memory the host cannot address) bitwise the cpu
// engine.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/self/self_communicator.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/muon/newton_schulz.h"
#include "optimizer/muon_owners.h"
#include "runtime/sharding/device_ops.h"
#include "tests/support/queue_ordered_comm.h"
#include "tests/support/scratch_files.h"
#include "tests/support/state_format_model.h"
#include "tests/support/test_world.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
};

// Units of the model; "h.*.mat.*" are Muon's.
const std::vector<std::vector<Spec>> kUnits = {
    {{"embed", {11, 7}}},
    {{"h.0.ln", {7}}, {"h.0.mat.a", {7, 13}}, {"h.0.bias", {13}}, {"h.0.mat.b", {13, 7}}},
    {{"h.1.mat.tall", {100, 37}}, {"h.1.mat.square", {64, 64}}, {"h.1.bias", {57}}},
    {{"h.2.mat.big", {73, 137}}, {"h.2.mat.one", {1, 1}}, {"h.2.mat.row", {1, 57}}, {"h.2.mat.empty", {0, 5}},
     {"h.2.bias", {1}}}};

bool is_muon(const std::string& name) { return name.find(".mat.") != std::string::npos; }

constexpr double kMuonLr = 0.02, kMuonWd = 0.1, kAdamLr = 3e-3, kAdamWd = 0.01;

OptimizerHyper muon_hyper(bool nesterov = true, kernels::MuonScale scale = kernels::MuonScale::shape) {
  OptimizerHyper h;
  h.kind = OptimizerKind::muon;
  h.lr = kAdamLr;
  h.weight_decay = kAdamWd;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.muon.lr = kMuonLr;
  h.muon.weight_decay = kMuonWd;
  h.muon.nesterov = nesterov;
  h.muon.scale = scale;
  h.muon.params = {"h.*.mat.*"};
  return h;
}

fs::path swap_root() { return fs::temp_directory_path() / "zs-test-muon-engine"; }

EngineConfig config(int stage, DType dt = DType::f32, OffloadDevice d = OffloadDevice::none,
                    OptimizerHyper h = muon_hyper()) {
  EngineConfig c = make_config(stage, h);
  c.compute_dtype = dt;
  c.offload = state_offload(d, swap_root());
  if (d != OffloadDevice::none && stage == 3) {
    c.offload.param.device = d;
    if (d == OffloadDevice::nvme) c.offload.param.nvme_path = swap_root().string();
  }
  return c;
}

// Initial value of parameter p's element i.
float init_value(int p, std::size_t i) { return 0.5f * std::sin(0.37f * static_cast<float>(i) + 1.1f * p); }

// Gradient element: a pseudo-random multiple of 2^-12 in (-0.25, 0.25)
// (full-rank matrices), the same on every rank when `same`: then the
// reduced gradient is exactly this value at every world size.
float grad_value(int step, int rank, int p, std::size_t i, bool same) {
  std::uint64_t x = (static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^
                    (static_cast<std::uint64_t>(p) << 40) ^ (static_cast<std::uint64_t>(step) << 52) ^
                    (same ? 0 : static_cast<std::uint64_t>(rank + 1) << 32);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  const double u = static_cast<double>(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;  // [-1, 1)
  return static_cast<float>(std::round(u * 0.24 * 4096.0) / 4096.0);
}

struct MuonModel {
  Engine e;
  std::vector<UnitId> units;
  std::vector<std::vector<ParamId>> params;
  bool same;

  MuonModel(const EngineConfig& c, Communicator& comm, bool same_on_ranks = false) : e(c, comm), same(same_on_ranks) {
    declare();
  }
  // On the compute device `ops` (the simulated device in tests).
  MuonModel(const EngineConfig& c, Communicator& device, Communicator& host, std::unique_ptr<DeviceOps> ops)
      : e(c, device, host, std::move(ops)), same(false) {
    declare();
  }

  // Declares the model, finalizes the engine and sets the parameters.
  void declare() {
    for (std::size_t u = 0; u < kUnits.size(); ++u) {
      units.push_back(e.add_unit(fmt::format("unit{}", u)));
      params.emplace_back();
      for (const Spec& s : kUnits[u]) params.back().push_back(e.add_parameter(units.back(), s.name, s.shape));
    }
    e.finalize();
    set_parameters(e, params, init_value);
  }

  void step(int s) {
    step_with_gradients(e, units, params, [&](ParamId id, std::size_t i) { return grad_value(s, e.rank(), id, i, same); });
  }

  // Masters, then both states, of every parameter.
  std::vector<float> state() {
    std::vector<float> out;
    for (const auto& list : params) {
      for (ParamId id : list) {
        for (const auto& v : {e.gather_master(id), e.gather_optimizer_state(id, 0), e.gather_optimizer_state(id, 1)}) {
          out.insert(out.end(), v.begin(), v.end());
        }
      }
    }
    return out;
  }
};

std::vector<float> train(const EngineConfig& c, int steps = 3, bool same = false) {
  MuonModel m(c, world(), same);
  for (int s = 1; s <= steps; ++s) m.step(s);
  return m.state();
}

// torch's lerp in double: the weight applied as the reference does.
double lerp(double a, double b, double w) { return a + w * (b - a); }

}  // namespace

TEST_CASE("Muon: stages 0-3 and offload none/cpu/nvme give bitwise the same training") {
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO("dtype " << dtype_name(dt));
    const std::vector<float> ref = train(config(0, dt));
    for (int stage = 1; stage <= 3; ++stage) {
      for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
        INFO("stage " << stage << " offload " << static_cast<int>(d));
        CHECK(train(config(stage, dt, d)) == ref);
      }
    }
  }
}

TEST_CASE("Muon: every world size gives the world-size-1 engine, bit for bit") {
  SelfCommunicator self;
  for (int stage : {0, 1, 2, 3}) {
    INFO("stage " << stage);
    MuonModel one(config(stage), self, true);
    for (int s = 1; s <= 3; ++s) one.step(s);
    CHECK(train(config(stage), 3, true) == one.state());
  }
}

TEST_CASE("Muon: three steps against the formula in double") {
  // Same gradients on every rank: the reduced gradient is exact, so the
  // reference is the formula on grad_value. Muon: momentum lerp, Nesterov,
  // Newton-Schulz in double, shape scale, decoupled decay.
  for (bool nesterov : {true, false}) {
    for (kernels::MuonScale scale : {kernels::MuonScale::shape, kernels::MuonScale::rms_match}) {
      INFO("nesterov " << nesterov << " scale " << static_cast<int>(scale));
      MuonModel m(config(3, DType::f32, OffloadDevice::none, muon_hyper(nesterov, scale)), world(), true);
      for (int s = 1; s <= 3; ++s) m.step(s);
      for (std::size_t u = 0; u < kUnits.size(); ++u) {
        for (std::size_t k = 0; k < kUnits[u].size(); ++k) {
          const Spec& spec = kUnits[u][k];
          const ParamId id = m.params[u][k];
          if (!is_muon(spec.name) || m.e.layout().param(id).numel == 0) continue;
          const auto rows = static_cast<std::size_t>(spec.shape[0]), cols = static_cast<std::size_t>(spec.shape[1]);
          std::vector<double> p(rows * cols), mom(rows * cols, 0.0);
          for (std::size_t i = 0; i < p.size(); ++i) p[i] = init_value(id, i);
          const double beta = 0.95;
          const double sc = kernels::muon_scale(scale, rows, cols);
          for (int s = 1; s <= 3; ++s) {
            std::vector<double> upd(p.size());
            for (std::size_t i = 0; i < p.size(); ++i) {
              const double g = grad_value(s, 0, id, i, true);
              mom[i] = lerp(mom[i], g, 1 - beta);
              upd[i] = nesterov ? lerp(g, mom[i], beta) : mom[i];
            }
            const std::vector<double> o = kernels::newton_schulz_reference(upd, rows, cols, 5);
            for (std::size_t i = 0; i < p.size(); ++i) p[i] = p[i] * (1 - kMuonLr * kMuonWd) - kMuonLr * sc * o[i];
          }
          const std::vector<float> got = m.e.gather_master(id), mom_got = m.e.gather_optimizer_state(id, 0);
          const std::vector<float> sq = m.e.gather_optimizer_state(id, 1);
          INFO(spec.name);
          // fp32 Newton-Schulz within 1e-4 of double's per element on these
          // full-rank matrices (test_newton_schulz.cpp states 2e-5 on
          // closed forms): times lr * scale <= 0.02 * 3.2, over 3 steps.
          for (std::size_t i = 0; i < p.size(); ++i) {
            REQUIRE(std::fabs(got[i] - p[i]) <= 3 * kMuonLr * 3.2 * 1e-4 + 1e-6);
            REQUIRE(std::fabs(mom_got[i] - mom[i]) <= 1e-7);
            REQUIRE(sq[i] == 0.0f);
          }
        }
      }
    }
  }
}

TEST_CASE("Muon: its AdamW parameters train as an AdamW engine's, bit for bit") {
  OptimizerHyper adamw = muon_hyper();
  adamw.kind = OptimizerKind::adamw;
  adamw.muon = {};
  MuonModel m(config(2), world()), a(config(2, DType::f32, OffloadDevice::none, adamw), world());
  for (int s = 1; s <= 3; ++s) {
    m.step(s);
    a.step(s);
  }
  int checked = 0;
  for (std::size_t u = 0; u < kUnits.size(); ++u) {
    for (std::size_t k = 0; k < kUnits[u].size(); ++k) {
      const ParamId id = m.params[u][k];
      INFO(kUnits[u][k].name);
      if (is_muon(kUnits[u][k].name)) {
        if (m.e.layout().param(id).numel > 0) CHECK(m.e.gather_master(id) != a.e.gather_master(id));
        continue;
      }
      CHECK(m.e.gather_master(id) == a.e.gather_master(id));
      CHECK(m.e.gather_optimizer_state(id, 1) == a.e.gather_optimizer_state(id, 1));
      ++checked;
    }
  }
  CHECK(checked == 5);
}

TEST_CASE("Muon: owners balanced within one matrix of the ideal, the same on every rank") {
  MuonModel m(config(1), world());
  std::vector<MuonMatrix> shapes;
  for (const auto& unit : kUnits) {
    for (const Spec& s : unit) {
      if (is_muon(s.name) && s.shape[0] * s.shape[1] > 0) {
        shapes.push_back({static_cast<std::size_t>(s.shape[0]), static_cast<std::size_t>(s.shape[1])});
      }
    }
  }
  const std::vector<int> owners = assign_muon_owners(shapes, world().world_size());
  std::vector<std::uint64_t> load(static_cast<std::size_t>(world().world_size()));
  std::uint64_t total = 0, largest = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::uint64_t c = newton_schulz_cost(shapes[i]);
    load[static_cast<std::size_t>(owners[i])] += c;
    total += c;
    largest = std::max(largest, c);
  }
  for (std::uint64_t l : load) CHECK(l <= total / load.size() + largest);
  CHECK(m.e.muon_owners() == owners);
}

TEST_CASE("Muon: config errors name the parameter or the key") {
  // A Muon pattern that takes a 1-D parameter.
  OptimizerHyper h = muon_hyper();
  h.muon.params = {"h.*"};
  {
    Engine e(config(1, DType::f32, OffloadDevice::none, h), world());
    const UnitId u = e.add_unit("u");
    e.add_parameter(u, "h.0.mat.a", {3, 4});
    const std::string msg = error_message<ConfigError>([&] { e.add_parameter(u, "h.0.ln", {4}); });
    CHECK(contains(msg, "parameter \"h.0.ln\" of shape [4]"));
    CHECK(contains(msg, "pattern \"h.*\""));
  }
  const std::string no_adamw = config_error(
      R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {"lr": 0.02, "muon_params": ["h.*"]}}})");
  CHECK(contains(no_adamw, "needs \"optimizer.params.adamw\""));
  CHECK(contains(no_adamw, "embeddings"));
  const std::string no_params = config_error(
      R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {"adamw": {"lr": 0.001}}}})");
  CHECK(contains(no_params, "optimizer.params.muon_params"));
  CHECK(contains(config_error(R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {"momentum": 1.0,
      "muon_params": ["x"], "adamw": {}}}})"),
                 "optimizer.params.momentum"));
  CHECK(contains(config_error(R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {
      "adjust_lr_fn": "rms", "muon_params": ["x"], "adamw": {}}}})"),
                 "adjust_lr_fn"));
  CHECK(contains(config_error(R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {
      "muon_params": ["x"], "adamw": {"betas": [0.9, 1.5]}}}})"),
                 "optimizer.params.adamw.betas"));
  // States other than fp32 (a configuration built in code).
  OptimizerHyper q8 = muon_hyper();
  q8.states.dtype = StateDtype::q8;
  CHECK(contains(error_message<ConfigError>([&] { Engine e(config(1, DType::f32, OffloadDevice::none, q8), world()); }),
                 "keeps fp32 states, not 8bit ones"));
  // The keys land where they belong.
  const EngineConfig c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "muon", "params": {
      "lr": 0.02, "weight_decay": 0.05, "momentum": 0.9, "nesterov": false, "ns_steps": 4,
      "adjust_lr_fn": "match_rms_adamw", "ns_dtype": "bf16", "muon_params": ["a.*", "b"],
      "adamw": {"lr": 0.003, "betas": [0.8, 0.95], "eps": 1e-10, "weight_decay": 0.01}}}})");
  const OptimizerHyper& p = c.optimizer;
  CHECK(p.kind == OptimizerKind::muon);
  CHECK(p.muon.lr == 0.02);
  CHECK(p.muon.weight_decay == 0.05);
  CHECK(p.muon.momentum == 0.9);
  CHECK(!p.muon.nesterov);
  CHECK(p.muon.ns_steps == 4);
  CHECK(p.muon.scale == kernels::MuonScale::rms_match);
  CHECK(p.muon.precision == kernels::NewtonSchulzPrecision::bf16);
  CHECK(p.muon.params == std::vector<std::string>{"a.*", "b"});
  CHECK(p.lr == 0.003);
  CHECK(p.beta1 == 0.8);
  CHECK(p.eps == 1e-10);
  CHECK(p.weight_decay == 0.01);
}

TEST_CASE("Muon: muon_params moves default-group matrices only; other groups keep theirs") {
  Engine e(config(1), world());
  const GroupId frozen = e.add_param_group("frozen", {.lr = 0.0, .weight_decay = 0.0});
  const UnitId u = e.add_unit("u");
  const ParamId a = e.add_parameter(u, "h.0.mat.a", {3, 4});
  const ParamId b = e.add_parameter(u, "h.0.mat.b", {4, 3}, frozen);
  const ParamId c = e.add_parameter(u, "h.0.ln", {4});
  e.finalize();
  CHECK(e.muon_group() == 1);
  CHECK(e.layout().param(a).group == e.muon_group());
  CHECK(e.layout().param(b).group == frozen);
  CHECK(e.layout().param(c).group == 0);
  CHECK(e.muon_owners().size() == 1);
  // A parameter declared in the muon group must be 2-D too.
  Engine f(config(1), world());
  const UnitId v = f.add_unit("v");
  CHECK(contains(error_message<ConfigError>([&] { f.add_parameter(v, "x", {5}, f.muon_group()); }),
                 "declared in the \"muon\" parameter group"));
  // Other optimizers have no Muon group.
  OptimizerHyper adamw;
  Engine g(config(1, DType::f32, OffloadDevice::none, adamw), world());
  CHECK(g.muon_group() == -1);
  // A pattern that names nothing Muon updates is an error at finalize(),
  // with what it matches in other groups (a typo would train with AdamW).
  OptimizerHyper typo = muon_hyper();
  typo.muon.params = {"h.*.mat.*", "nothing.*", "h.*.ln"};
  Engine t(config(1, DType::f32, OffloadDevice::none, typo), world());
  const GroupId no_decay = t.add_param_group("no_decay", {.lr = 1e-3, .weight_decay = 0.0});
  const UnitId w = t.add_unit("w");
  t.add_parameter(w, "h.0.mat.a", {3, 4});
  t.add_parameter(w, "h.0.ln", {4}, no_decay);
  const std::string msg = error_message<ConfigError>([&] { t.finalize(); });
  CHECK(contains(msg, "optimizer.params.muon_params"));
  CHECK(contains(msg, "pattern \"nothing.*\" matches no parameter of the default group"));
  CHECK(contains(msg, "pattern \"h.*.ln\" matches no parameter of the default group (it matches \"h.0.ln\" of "
                      "group \"no_decay\""));
  CHECK(!contains(msg, "pattern \"h.*.mat.*\""));
}

TEST_CASE("Muon: a checkpoint loads only where the same parameters are Muon's") {
  // A Muon matrix's exp_avg_sq is 0 in the checkpoint: AdamW taking it over
  // would restart from a second moment of 0. Refused on every rank, naming
  // the parameters, both ways; the same roles load.
  const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-muon-roles-{}", world().world_size());
  remove_dir_on_rank0(world(), dir);
  {
    MuonModel m(config(1), world());
    m.step(1);
    m.e.save_checkpoint(dir.string(), {});
  }
  OptimizerHyper adamw = muon_hyper();
  adamw.kind = OptimizerKind::adamw;
  {
    MuonModel a(config(1, DType::f32, OffloadDevice::none, adamw), world());
    const std::string msg = error_message<ConfigError>([&] { a.e.load_checkpoint(dir.string()); });
    CHECK(contains(msg, "optimizer roles differ"));
    CHECK(contains(msg, "parameter \"h.0.mat.a\": updated by Muon in the checkpoint, by AdamW here"));
    CHECK(contains(msg, "more"));
  }
  {
    OptimizerHyper narrower = muon_hyper();
    narrower.muon.params = {"h.1.mat.*"};
    MuonModel n(config(1, DType::f32, OffloadDevice::none, narrower), world());
    CHECK(contains(error_message<ConfigError>([&] { n.e.load_checkpoint(dir.string()); }),
                   "parameter \"h.0.mat.a\": updated by Muon in the checkpoint, by AdamW here"));
  }
  {
    MuonModel same(config(3), world());
    same.e.load_checkpoint(dir.string());
    CHECK(same.e.optimizer_steps() == 1);
  }
  remove_dir_on_rank0(world(), dir);
}

TEST_CASE("Muon: exp_avg_sq is kept for AdamW's elements only: the ledger's state bytes") {
  // [Note: packed states]: 4 bytes of momentum / exp_avg per element of the
  // rank's windows, 4 more per AdamW element in them.
  for (int stage = 0; stage <= 3; ++stage) {
    for (OffloadDevice d : {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme}) {
      if (stage == 0 && d != OffloadDevice::none) continue;
      INFO("stage " << stage << " offload " << static_cast<int>(d));
      MuonModel m(config(stage, DType::f32, d), world());
      const FlatLayout& l = m.e.layout();
      const int rank = m.e.rank(), world_size = l.world_size();
      std::uint64_t want = 0, adamw_bytes = 0;
      for (const UnitInfo& u : l.units()) {
        for (int w = 0; w < world_size; ++w) {
          if (stage > 0 && w != rank) continue;
          const std::size_t lo = static_cast<std::size_t>(w) * u.shard, hi = lo + u.shard;
          want += 4 * u.shard;
          adamw_bytes += 8 * u.shard;
          for (ParamId id : u.params) {
            const ParamInfo& p = l.param(id);
            if (is_muon(p.name)) continue;
            const std::size_t a = std::clamp(p.offset, lo, hi), b = std::clamp(p.offset + p.numel, lo, hi);
            want += 4 * (b - a);
          }
        }
      }
      const MemoryLedger& ledger = m.e.ledger();
      std::uint64_t got = 0;
      for (int t = 0; t < static_cast<int>(MemTier::count); ++t) {
        got += ledger.current(MemCategory::optimizer_states, static_cast<MemTier>(t));
      }
      CHECK(got == want);
      CHECK(got < adamw_bytes);
    }
  }
}

TEST_CASE("Muon on a device the host cannot address (the simulated device): bitwise the cpu engine") {
  // The arrays live in device memory: MuonStep reads and writes them
  // through the ArrayStore's staging, AdamW runs as the device's update.
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dt : {DType::f32, DType::bf16}) {
      INFO("stage " << stage << " dtype " << dtype_name(dt));
      const std::vector<float> want = train(config(stage, dt));
      std::unique_ptr<DeviceOps> ops = make_simulated_device_ops();
      QueueOrderedComm device_comm(world(), *ops);
      MuonModel m(config(stage, dt), device_comm, world(), std::move(ops));
      for (int s = 1; s <= 3; ++s) m.step(s);
      CHECK(m.state() == want);
    }
  }
}
