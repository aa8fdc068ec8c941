// The planner (runtime/plan/planner.h): with budgets cut so that exactly one of
// stage 2, stage 3, stage 3 + cpu offload and stage 3 + nvme offload fits
// (taken from the planner's own per-tier figures for those four), it picks
// that one; below the smallest footprint it says so and names it; the
// chosen ds_config loads with the base config's other keys; activations
// limit the micro-batch; bad requests are errors.
#include <algorithm>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/plan/planner.h"

using namespace zeroshard;

namespace {

MachineRates synthetic_rates() {
  MachineRates r;
  r.world_size = 2;
  r.optimizer_bandwidth = 10e9;
  r.disk_read = r.disk_write = 1e9;
  for (CollectiveRates* c : {&r.all_to_all, &r.all_gather, &r.all_reduce}) {
    c->bytes = {4096, 64e6};
    c->seconds = {20e-6, 64e-3};  // ~1 GB/s
  }
  return r;
}

PlanRequest request() {
  PlanRequest r;
  r.model = ModelDescription::generated(4'000'000, 8);
  r.world_size = 2;
  r.base_config = nlohmann::json::parse(R"({
    "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 1, "offload_param": {"max_in_cpu": 0}}
  })");
  r.nvme_path = "/tmp/zs-plan-test-nvme";
  r.budget = {~0ULL >> 1, ~0ULL >> 1, ~0ULL >> 1};
  r.rates = synthetic_rates();
  r.loop_seconds_per_sample = 0.002;
  return r;
}

const PlanCandidate& find(const Plan& p, int stage, OffloadDevice opt, OffloadDevice param) {
  for (const auto* list : {&p.fits, &p.rejected}) {
    for (const PlanCandidate& c : *list) {
      if (c.stage == stage && c.offload_optimizer == opt && c.offload_param == param) return c;
    }
  }
  FAIL("no candidate stage ", stage, " ", offload_device_name(opt), " ", offload_device_name(param));
  throw 0;
}

// Of the candidates of one kind (sub-group size and buffer count vary), the
// one with the smallest footprint in memory.
const PlanCandidate& smallest(const Plan& p, int stage, OffloadDevice opt, OffloadDevice param) {
  const PlanCandidate* best = &find(p, stage, opt, param);
  for (const auto* list : {&p.fits, &p.rejected}) {
    for (const PlanCandidate& c : *list) {
      if (c.stage == stage && c.offload_optimizer == opt && c.offload_param == param &&
          c.bytes[0] + c.bytes[1] < best->bytes[0] + best->bytes[1]) {
        best = &c;
      }
    }
  }
  return *best;
}

PlanBudget exactly(const PlanCandidate& c, bool nvme) { return {c.bytes[0], c.bytes[1], nvme ? c.bytes[2] : 0}; }

}  // namespace

TEST_CASE("with budgets that fit exactly one of four configurations, the planner picks it") {
  using D = OffloadDevice;
  PlanRequest r = request();
  const Plan all = make_plan(r);
  REQUIRE(all.rejected.empty());  // unlimited budgets: everything fits
  const PlanCandidate s2 = find(all, 2, D::none, D::none);
  const PlanCandidate s3 = find(all, 3, D::none, D::none);
  const PlanCandidate s3cpu = find(all, 3, D::cpu, D::cpu);
  const PlanCandidate s3nvme = smallest(all, 3, D::nvme, D::nvme);  // 2 buffers: the least host memory
  CHECK(s3.bytes[0] < s2.bytes[0]);
  CHECK(s3nvme.bytes[2] > 0);  // max_in_cpu 0 from the base config: the parameters are on nvme

  struct Case {
    const char* name;
    PlanBudget budget;
    int stage;
    D opt, param;
  };
  for (const Case& k : {Case{"stage 2", exactly(s2, false), 2, D::none, D::none},
                        Case{"stage 3", exactly(s3, false), 3, D::none, D::none},
                        Case{"stage 3 + cpu", exactly(s3cpu, false), 3, D::cpu, D::cpu},
                        Case{"stage 3 + nvme", exactly(s3nvme, true), 3, D::nvme, D::nvme}}) {
    CAPTURE(k.name);
    r.budget = k.budget;
    const Plan p = make_plan(r);
    REQUIRE(p.chosen() != nullptr);
    CHECK(p.chosen()->stage == k.stage);
    CHECK(p.chosen()->offload_optimizer == k.opt);
    CHECK(p.chosen()->offload_param == k.param);
    // Of the four kinds, only the one picked fits (stage 2's budget also
    // fits stage 3, which is slower: more collectives).
    std::set<std::string> kinds;
    for (const PlanCandidate& c : p.fits) {
      if (c.stage == 2 && c.offload_optimizer == D::none) kinds.insert("stage 2");
      if (c.stage == 3 && c.offload_optimizer == D::none && c.offload_param == D::none) kinds.insert("stage 3");
      if (c.stage == 3 && c.offload_optimizer == D::cpu && c.offload_param == D::cpu) kinds.insert("stage 3 + cpu");
      if (c.stage == 3 && c.offload_optimizer == D::nvme && c.offload_param == D::nvme) kinds.insert("stage 3 + nvme");
      CHECK(c.bytes[0] <= k.budget.device);
      CHECK(c.bytes[1] <= k.budget.host);
      CHECK(c.bytes[2] <= k.budget.nvme);
    }
    const std::set<std::string> want = k.stage == 2 ? std::set<std::string>{"stage 2", "stage 3"}
                                                    : std::set<std::string>{k.name};
    CHECK(kinds == want);
    if (k.stage == 2) {
      CHECK(std::any_of(p.fits.begin(), p.fits.end(), [](const PlanCandidate& c) {
        return c.stage == 3 && c.offload_optimizer == D::none && c.offload_param == D::none;
      }));
      CHECK(p.chosen()->seconds_per_sample < find(p, 3, D::none, D::none).seconds_per_sample);
    }
    for (const PlanCandidate& c : p.rejected) CHECK(!c.rejection.empty());
  }
}

TEST_CASE("the chosen ds_config loads, with the base config's other keys") {
  PlanRequest r = request();
  const Plan all = make_plan(r);
  r.budget = exactly(smallest(all, 3, OffloadDevice::nvme, OffloadDevice::nvme), true);
  const Plan p = make_plan(r);
  REQUIRE(p.chosen() != nullptr);
  const EngineConfig c = EngineConfig::from_json(p.chosen()->ds_config, "chosen");
  CHECK(c.zero.stage == 3);
  CHECK(c.offload.optimizer.device == OffloadDevice::nvme);
  CHECK(c.offload.optimizer.nvme_path == r.nvme_path);
  CHECK(c.offload.param.device == OffloadDevice::nvme);
  CHECK(c.offload.param.max_in_cpu == 0);
  CHECK(c.compute_dtype == DType::bf16);
  CHECK(c.optimizer.lr == doctest::Approx(3e-4));
  CHECK(c.gradient_clipping == 1.0);
}

TEST_CASE("a parameter-server base config is refused, naming the key") {
  PlanRequest r = request();
  r.base_config["parameter_server"] = {{"servers", 1}};
  CHECK_THROWS_WITH_AS(make_plan(r), doctest::Contains("\"parameter_server.servers\""), ConfigError);
}

TEST_CASE("a budget below the smallest footprint is answered with that footprint") {
  PlanRequest r = request();
  r.budget = {1000, 1000, 0};
  const Plan p = make_plan(r);
  CHECK(p.chosen() == nullptr);
  CHECK(p.fits.empty());
  CHECK(p.nothing_fits.find("nothing fits: the smallest footprint in memory (device + host) is") == 0);
  CHECK(p.nothing_fits.find(" needs ") != std::string::npos);
  CHECK(plan_text(r, p).find("nothing fits") != std::string::npos);
  // The smallest footprint in memory is the one named.
  std::uint64_t smallest = ~0ULL;
  for (const PlanCandidate& c : p.rejected) smallest = std::min(smallest, c.bytes[0] + c.bytes[1]);
  CHECK(p.nothing_fits.find(format_bytes(smallest)) != std::string::npos);
}

TEST_CASE("activations limit the micro-batch; the global batch sets the accumulation") {
  PlanRequest r = request();
  r.activation_bytes_per_sample = 64ULL << 20;
  r.micro_batches = {1, 2, 4, 3};
  r.global_batch = 16;
  const Plan all = make_plan(r);
  for (const PlanCandidate& c : all.fits) {
    CHECK(c.micro_batch != 3);  // 3 x 2 ranks does not divide 16
    CHECK(c.micro_batch * c.accumulation * 2 == 16);
    CHECK(c.activation_bytes == (64ULL << 20) * static_cast<std::uint64_t>(c.micro_batch));
  }
  // A device budget with room for 2 samples' activations beside stage 3's arrays.
  const PlanCandidate& s3 = find(all, 3, OffloadDevice::none, OffloadDevice::none);
  r.budget.device = s3.bytes[0] - s3.activation_bytes + (2ULL * 64 << 20);
  const Plan p = make_plan(r);
  bool micro2 = false;
  for (const PlanCandidate& c : p.fits) {
    CHECK(c.micro_batch <= 2);
    micro2 = micro2 || (c.stage == 3 && c.micro_batch == 2 && c.offload_optimizer == OffloadDevice::none &&
                        c.offload_param == OffloadDevice::none);
  }
  CHECK(micro2);
  bool rejected4 = false;
  for (const PlanCandidate& c : p.rejected) {
    rejected4 = rejected4 || (c.micro_batch == 4 && c.rejection.find("device needs") != std::string::npos);
  }
  CHECK(rejected4);
}

TEST_CASE("without rates the fits are ranked by device bytes") {
  PlanRequest r = request();
  r.rates.reset();
  const Plan p = make_plan(r);
  CHECK_FALSE(p.ranked_by_time);
  for (std::size_t i = 1; i < p.fits.size(); ++i) CHECK(p.fits[i - 1].bytes[0] <= p.fits[i].bytes[0]);
  CHECK(plan_text(r, p).find("not ranked by time") != std::string::npos);
}

TEST_CASE("across hosts on a slow link the planner recommends ZeRO++'s options") {
  PlanRequest r = request();
  r.world_size = 4;
  r.ranks_per_node = 2;
  r.rates->world_size = 4;
  r.rates->link_bandwidth = 12.5e6;  // 100 Mbit/s
  r.nvme_path.clear();
  const Plan p = make_plan(r);
  REQUIRE(p.chosen() != nullptr);
  const PlanCandidate& c = *p.chosen();
  CAPTURE(c.label);
  CHECK(c.stage == 3);
  CHECK(c.quantized_weights);
  CHECK(c.hpz_partition_size == 2);
  CHECK(c.quantized_gradients);
  CHECK(c.label.find("qwZ+hpZ+qgZ") != std::string::npos);
  const nlohmann::json& z = c.ds_config["zero_optimization"];
  CHECK(z["zero_quantized_weights"] == true);
  CHECK(z["zero_hpz_partition_size"] == 2);
  CHECK(z["zero_quantized_gradients"] == true);
  // The same stage and tiers without the options are slower, and hold no
  // secondary shards.
  const PlanCandidate* plain = nullptr;
  for (const PlanCandidate& o : p.fits) {
    if (o.stage == 3 && o.offload_optimizer == c.offload_optimizer && o.offload_param == c.offload_param &&
        !o.quantized_weights && o.hpz_partition_size == 1 && !o.quantized_gradients && plain == nullptr) {
      plain = &o;
    }
  }
  REQUIRE(plain != nullptr);
  CHECK(plain->seconds_per_sample > c.seconds_per_sample);
  CHECK(plain->bytes[0] < c.bytes[0]);  // hpZ's secondary shards cost device memory
  const std::string text = plan_text(r, p);
  CHECK(text.find("on hosts of 2 ranks (link 100 Mbit/s)") != std::string::npos);
  CHECK(text.find("between hosts per step") != std::string::npos);
  // On one host nothing of ZeRO++ is proposed.
  r.ranks_per_node = 0;
  for (const PlanCandidate& o : make_plan(r).fits) {
    CHECK_FALSE((o.quantized_weights || o.hpz_partition_size > 1 || o.quantized_gradients));
  }
}

TEST_CASE("bad requests are errors naming what is wrong") {
  PlanRequest r = request();
  r.world_size = 0;
  CHECK_THROWS_WITH_AS(make_plan(r), "plan: world size 0 is not positive", ConfigError);
  r = request();
  r.micro_batches = {2, 0};
  CHECK_THROWS_WITH_AS(make_plan(r), "plan: micro-batch 0 is not positive", ConfigError);
  r = request();
  r.base_config["optimizer"]["type"] = "Adamm";
  CHECK_THROWS_AS(make_plan(r), ConfigError);
}
