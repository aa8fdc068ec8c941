// Real DeepSpeed configs (docs/config.md): "auto", batch arithmetic, legacy
// spellings, every problem in one message, did-you-mean, strict mode.
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "comm/self/self_communicator.h"
#include "runtime/config/config.h"
#include "runtime/config/config_keys.h"
#include "runtime/engine/engine.h"
#include "tests/runtime/config/config_test_util.h"
#include "tests/runtime/config/test_config_paths.h"
#include "zs_config.h"

using namespace zeroshard;
using nlohmann::json;
using zeroshard::test::error_of;
using zeroshard::test::file_error_of;
using zeroshard::test::nested_arrays;


namespace {

std::string config_path(const char* name) { return std::string(ZS_TEST_CONFIG_DIR) + "/" + name; }

// The ConfigError message of loading `name` from tests/runtime/config/configs.
std::string load_error(const char* name, const ConfigOptions& o = {}) {
  try {
    EngineConfig::from_file(config_path(name), o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// The message of from_json(text) with options ("" if none).
std::string error_with(const std::string& text, const ConfigOptions& o) {
  try {
    EngineConfig::from_json(json::parse(text), "ds.json", o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has_warning(const EngineConfig& c, const std::string& what) {
  for (const std::string& w : c.warnings) {
    if (w.find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("ds_config: HF ZeRO-2 template with \"auto\" loads once the program fills it") {
  // Unfilled: one problem naming every "auto" key, and the API to fill them.
  const std::string m = load_error("hf_zero2_auto.json");
  INFO(m);
  CHECK(m.find("hf_zero2_auto.json: \"auto\" is left unfilled for") != std::string::npos);
  for (const char* key : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                          "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas", "optimizer.params.eps",
                          "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
                          "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
                          "scheduler.params.total_num_steps", "zero_optimization.reduce_bucket_size", "fp16.enabled",
                          "bf16.enabled"}) {
    CHECK(m.find(key) != std::string::npos);
  }
  CHECK(m.find("ConfigOptions::fill(key, value)") != std::string::npos);
  CHECK(m.find("ConfigOptions::hidden_size") != std::string::npos);
  CHECK(count_of(m, "\"auto\" is left unfilled") == 1);

  ConfigOptions o;
  o.fill("train_micro_batch_size_per_gpu", 8)
      .fill("gradient_accumulation_steps", 2)
      .fill("gradient_clipping", 0.5)
      .fill("optimizer.params.lr", 3e-4)
      .fill("optimizer.params.betas", {0.8, 0.95})
      .fill("optimizer.params.eps", 1e-6)
      .fill("optimizer.params.weight_decay", 0.1)
      .fill("scheduler.params.warmup_min_lr", 0)
      .fill("scheduler.params.warmup_max_lr", 3e-4)
      .fill("scheduler.params.warmup_num_steps", 100)
      .fill("scheduler.params.total_num_steps", 1000)
      .fill("fp16.enabled", false)
      .fill("bf16.enabled", true);
  o.hidden_size = 1024;
  o.world_size = 3;
  const EngineConfig c = EngineConfig::from_file(config_path("hf_zero2_auto.json"), o);
  // train_batch_size "auto" is derived: 8 x 2 x 3 ranks.
  REQUIRE(c.train_batch_size);
  CHECK(*c.train_batch_size == 48);
  CHECK(c.train_micro_batch_size_per_gpu == 8);
  CHECK(c.gradient_accumulation_steps == 2);
  CHECK(c.gradient_clipping == 0.5);
  CHECK(c.steps_per_print == 2000);
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(c.optimizer.beta1 == 0.8);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.weight_decay == 0.1);
  CHECK(c.scheduler.kind == LrScheduleKind::warmup_decay_lr);
  CHECK(c.scheduler.warmup_min_lr == std::vector<double>{0.0});
  CHECK(c.scheduler.warmup_max_lr == std::vector<double>{3e-4});
  CHECK(c.scheduler.warmup_num_steps == 100);
  CHECK(c.scheduler.total_num_steps == 1000);
  CHECK(c.compute_dtype == DType::bf16);
  CHECK(c.loss_scale.dynamic);
  CHECK(c.loss_scale.initial_scale_power == 16);
  CHECK(c.zero.stage == 2);
  CHECK(c.zero.reduce_bucket_size == 1024 * 1024);  // HF: hidden^2
  CHECK(c.zero.allgather_bucket_size == 200000000);
  CHECK(c.zero.overlap());
  CHECK(c.offload.optimizer.device == OffloadDevice::cpu);
  CHECK_FALSE(c.offload.optimizer.pin_memory);
  CHECK(c.offload.param.device == OffloadDevice::none);
  CHECK_NOTHROW(c.validate_for_world(3));
  // One warning line names the keys accepted without effect.
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find(config_path("hf_zero2_auto.json") + ": accepted without effect") == 0);
  for (const char* key : {"zero_optimization.allgather_partitions", "zero_optimization.reduce_scatter"}) {
    CHECK(c.warnings[0].find(key) != std::string::npos);
  }
  // wall_clock_breakdown is read (runtime/config/observe_config.h), not warned about.
  CHECK(c.warnings[0].find("wall_clock_breakdown") == std::string::npos);
  CHECK_FALSE(c.observe.wall_clock_breakdown);
  // A value supplied for a key that may not be "auto" is an error naming it.
  ConfigOptions wrong = o;
  wrong.fill("zero_optimization.stage", 3);
  CHECK(load_error("hf_zero2_auto.json", wrong).find("ConfigOptions::values[\"zero_optimization.stage\"]") !=
        std::string::npos);
  // "auto" where DeepSpeed takes no "auto" says so.
  const std::string s = error_of(R"({"zero_optimization": {"stage": "auto"}})");
  CHECK(s.find("\"zero_optimization.stage\" = \"auto\" must be an integer (\"auto\" is not accepted") !=
        std::string::npos);
}

TEST_CASE("ds_config: ConfigOptions::from_program fills every \"auto\" as HF Trainer does, and says how") {
  ProgramValues p;
  p.micro_batch = 6;
  p.gradient_accumulation = 3;
  p.lr = 2e-4;
  p.beta1 = 0.85;
  p.beta2 = 0.98;
  p.eps = 1e-7;
  p.weight_decay = 0.05;
  p.gradient_clipping = 0.7;
  p.precision = DType::bf16;
  p.hidden_size = 100;
  p.world_size = 2;
  p.total_steps = 500;
  p.warmup_steps = 20;
  const ConfigOptions o = ConfigOptions::from_program(p);
  CHECK(o.world_size == 2);
  CHECK(o.hidden_size == 100);
  const EngineConfig c = EngineConfig::from_file(config_path("hf_zero2_auto.json"), o);
  CHECK(c.train_micro_batch_size_per_gpu == 6);
  CHECK(c.gradient_accumulation_steps == 3);
  REQUIRE(c.train_batch_size);
  CHECK(*c.train_batch_size == 36);  // 6 x 3 x 2
  CHECK(c.gradient_clipping == 0.7);
  CHECK(c.optimizer.lr == 2e-4);
  CHECK(c.optimizer.beta1 == 0.85);
  CHECK(c.optimizer.beta2 == 0.98);
  CHECK(c.optimizer.eps == 1e-7);
  CHECK(c.optimizer.weight_decay == 0.05);
  CHECK(c.scheduler.warmup_min_lr == std::vector<double>{0.0});
  CHECK(c.scheduler.warmup_max_lr == std::vector<double>{2e-4});
  CHECK(c.scheduler.warmup_num_steps == 20);
  CHECK(c.scheduler.total_num_steps == 500);
  CHECK(c.compute_dtype == DType::bf16);  // fp16 "auto" -> false, bf16 "auto" -> true
  CHECK(c.zero.reduce_bucket_size == 10000);  // hidden^2
  // What each "auto" became, in key-table order, with its rule.
  std::map<std::string, std::pair<json, std::string>> fills;
  for (const AutoFill& f : c.auto_fills) fills[f.key] = {f.value, f.rule};
  CHECK(fills.size() == 15);
  CHECK(fills["train_micro_batch_size_per_gpu"] == std::pair<json, std::string>{6, "micro_batch"});
  CHECK(fills["train_batch_size"] == std::pair<json, std::string>{36, "micro x accumulation x world"});
  CHECK(fills["optimizer.params.betas"].first == json{0.85, 0.98});
  CHECK(fills["scheduler.params.warmup_min_lr"].first == 0);
  CHECK(fills["fp16.enabled"] == std::pair<json, std::string>{false, "precision == fp16"});
  CHECK(fills["zero_optimization.reduce_bucket_size"] ==
        std::pair<json, std::string>{10000, "hidden^2, hidden 100"});
  const std::string line = auto_fill_summary(c.auto_fills);
  CHECK(line.find("train_micro_batch_size_per_gpu = 6 (micro_batch), ") != std::string::npos);
  CHECK(line.find("optimizer.params.betas = [0.85,0.98] ([beta1, beta2])") != std::string::npos);
  CHECK(line.find("scheduler.params.total_num_steps = 500 (total_steps)") != std::string::npos);
  CHECK(auto_fill_summary({}).empty());
  // A value the file sets itself is kept (HF would refuse the mismatch):
  // hf_zero3_nvme.json fixes micro-batch 2, accumulation 4 and lr 2e-5.
  const EngineConfig z = EngineConfig::from_file(config_path("hf_zero3_nvme.json"), o);
  CHECK(z.train_micro_batch_size_per_gpu == 2);
  CHECK(z.gradient_accumulation_steps == 4);
  CHECK(z.optimizer.lr == 2e-5);
  CHECK(z.zero.prefetch_bucket_size == 9000);  // 0.9 x 100^2
  CHECK(z.zero.param_persistence_threshold == 1000);
  CHECK(z.auto_fills.size() == 3);  // the three hidden-size keys
  // Without the run's length, total_num_steps stays "auto": the error names it.
  ProgramValues no_total = p;
  no_total.total_steps.reset();
  const std::string m = load_error("hf_zero2_auto.json", ConfigOptions::from_program(no_total));
  CHECK(m.find("\"auto\" is left unfilled for scheduler.params.total_num_steps: ") != std::string::npos);
  // Accelerate's stage3_gather_16bit_weights_on_model_save "auto".
  p.save_16bit_model = true;
  const EngineConfig a = EngineConfig::from_json(
      json::parse(R"({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": "auto"}})"),
      "a.json", ConfigOptions::from_program(p));
  CHECK(a.zero.gather_16bit_weights_on_model_save);
  // Every rule the docs print is one from_program or the hidden size applies.
  for (const AutoRule& r : auto_rules()) {
    INFO(r.key);
    const ConfigKey* row = find_config_key(r.key);
    REQUIRE(row != nullptr);
    CHECK(row->auto_ok);
    CHECK((o.values.count(r.key) == 1 || std::string(r.key) == "train_batch_size" ||
           std::string(r.key).find("bucket_size") != std::string::npos ||
           std::string(r.key).find("persistence") != std::string::npos));
  }
}

TEST_CASE("ds_config: HF's hidden-size rules for \"auto\" bucket sizes") {
  const AutoBucketSizes b = auto_bucket_sizes(4096);
  CHECK(b.reduce_bucket_size == 16777216);
  CHECK(b.stage3_prefetch_bucket_size == 15099494);  // floor(0.9 x 4096^2) = floor(15099494.4)
  CHECK(b.stage3_param_persistence_threshold == 40960);
  CHECK(auto_bucket_sizes(1).stage3_prefetch_bucket_size == 0);
  CHECK(auto_bucket_sizes(10).stage3_prefetch_bucket_size == 90);
  // 3037000499^2 fits in int64, and 0.9 of it does not wrap.
  CHECK(auto_bucket_sizes(3037000499).reduce_bucket_size == 9223372030926249001);
  CHECK(auto_bucket_sizes(3037000499).stage3_prefetch_bucket_size == 8301034827833624100);
  CHECK_THROWS_WITH_AS(auto_bucket_sizes(3037000500), doctest::Contains("ConfigOptions::hidden_size = 3037000500"),
                       ConfigError);
  CHECK_THROWS_AS(auto_bucket_sizes(0), ConfigError);
}

TEST_CASE("ds_config: ZeRO-3 with nvme offload and the stage3_* knobs loads once the program fills \"auto\"") {
  // Without the hidden size the "auto" ones are unfilled: one problem naming all three.
  const std::string n = load_error("hf_zero3_nvme.json");
  INFO(n);
  CHECK(n == config_path("hf_zero3_nvme.json") +
                 ": \"auto\" is left unfilled for zero_optimization.reduce_bucket_size, "
                 "zero_optimization.stage3_prefetch_bucket_size, zero_optimization.stage3_param_persistence_threshold: "
                 "the launcher (HF Trainer, Accelerate) or the program must fill it: ConfigOptions::from_program "
                 "(HF Trainer's rules) or ConfigOptions::fill(key, value) (ConfigOptions::hidden_size for the bucket "
                 "sizes) before EngineConfig::from_file");
  ConfigOptions o;
  o.hidden_size = 512;
  std::ifstream in(config_path("hf_zero3_nvme.json"));
  json j = json::parse(in);
  const EngineConfig c = EngineConfig::from_json(j, "zero3.json", o);
  CHECK(c.zero.prefetch_bucket_size == 235929);  // floor(0.9 x 512^2)
  CHECK(c.zero.param_persistence_threshold == 5120);
  CHECK(c.zero.max_live_parameters == 1000000000);
  CHECK(c.zero.max_reuse_distance == 1000000000);
  CHECK(c.zero.model_persistence_threshold == std::numeric_limits<std::int64_t>::max());
  CHECK(c.zero.stage == 3);
  CHECK(c.zero.gather_16bit_weights_on_model_save);
  CHECK(c.zero.reduce_bucket_size == 512 * 512);
  CHECK(c.compute_dtype == DType::bf16);
  CHECK(c.offload.optimizer.device == OffloadDevice::nvme);
  CHECK(c.offload.optimizer.nvme_path == "/local_nvme");
  CHECK(c.offload.optimizer.buffer_count == 4);
  CHECK(c.offload.param.device == OffloadDevice::nvme);
  CHECK(c.offload.param.buffer_count == 5);
  CHECK(c.offload.param.buffer_size == 100000000);
  CHECK(c.offload.param.max_in_cpu == 1000000000);
  CHECK(c.offload.sub_group_size == 1000000000);
  CHECK(c.offload.aio.block_size == 262144);
  CHECK(c.offload.aio.intra_op_parallelism == 1);
  CHECK(c.train_micro_batch_size_per_gpu == 2);
  CHECK(c.gradient_accumulation_steps == 4);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.optimizer.lr == 2e-5);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(has_warning(c, "aio.thread_count -> aio.intra_op_parallelism"));
  CHECK_FALSE(has_warning(c, "wall_clock_breakdown"));
}

TEST_CASE("ds_config: fp16 with the legacy cpu_offload maps it and says so") {
  const EngineConfig c = EngineConfig::from_file(config_path("fp16_legacy_cpu_offload.json"));
  CHECK(c.compute_dtype == DType::f16);
  CHECK(c.loss_scale.dynamic);
  CHECK(c.loss_scale.initial_scale_power == 12);
  CHECK(c.loss_scale.loss_scale_window == 500);
  CHECK(c.loss_scale.hysteresis == 2);
  CHECK(c.loss_scale.min_loss_scale == 1.0);
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.lr == 0.00015);
  CHECK(c.zero.stage == 2);
  CHECK(c.zero.reduce_bucket_size == 50000000);
  CHECK(c.offload.optimizer.device == OffloadDevice::cpu);
  CHECK_FALSE(c.offload.optimizer.pin_memory);
  CHECK(c.offload.param.device == OffloadDevice::none);
  // train_batch_size 32 with accumulation 2: the micro-batch comes from the world size.
  CHECK_FALSE(c.micro_batch_given);
  CHECK_THROWS_WITH_AS(c.validate_for_world(4), doctest::Contains("call EngineConfig::resolve_batch"), ConfigError);
  EngineConfig r = c;
  r.resolve_batch(4);
  CHECK(r.train_micro_batch_size_per_gpu == 4);
  CHECK_NOTHROW(r.validate_for_world(4));
  CHECK_THROWS_WITH_AS(EngineConfig(c).resolve_batch(3),
                       doctest::Contains("\"train_batch_size\" = 32 is not a multiple of gradient_accumulation_steps "
                                         "(2) x world size (3) = 6"),
                       ConfigError);
  REQUIRE(c.warnings.size() == 2);
  CHECK(c.warnings[0] == config_path("fp16_legacy_cpu_offload.json") +
                             ": legacy DeepSpeed spellings mapped: zero_optimization.cpu_offload -> "
                             "zero_optimization.offload_optimizer.device \"cpu\", pin_memory false");
  CHECK(c.warnings[1].find("zero_allow_untested_optimizer") != std::string::npos);
  // Strict mode (option or key) makes both errors, reported together.
  ConfigOptions strict;
  strict.strict = true;
  const std::string m = load_error("fp16_legacy_cpu_offload.json", strict);
  CHECK(m.find("2 problems") != std::string::npos);
  CHECK(m.find("strict mode") != std::string::npos);
  CHECK(m.find("zero_optimization.cpu_offload") != std::string::npos);
}

TEST_CASE("ds_config: legacy spellings DeepSpeed maps") {
  EngineConfig c = EngineConfig::from_json(json::parse(R"({"zero_optimization": true, "allgather_size": 1000})"));
  CHECK(c.zero.stage == 1);
  CHECK(c.zero.allgather_bucket_size == 1000);
  CHECK(has_warning(c, "zero_optimization = true -> {\"stage\": 1}"));
  c = EngineConfig::from_json(json::parse(R"({"zero_optimization": false})"));
  CHECK(c.zero.stage == 0);
  c = EngineConfig::from_json(json::parse(R"({"bfloat16": {"enabled": true}})"));
  CHECK(c.compute_dtype == DType::bf16);
  CHECK(has_warning(c, "bfloat16 -> bf16"));
  c = EngineConfig::from_json(json::parse(
      R"({"zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true, "cpu_offload_use_pin_memory": true}})"));
  CHECK(c.offload.optimizer.device == OffloadDevice::cpu);
  CHECK(c.offload.optimizer.pin_memory);
  CHECK(c.offload.param.device == OffloadDevice::cpu);
  CHECK(c.offload.param.pin_memory);
  CHECK(has_warning(c, "zero_optimization.cpu_offload_param -> zero_optimization.offload_param.device \"cpu\""));
  // Forms DeepSpeed refuses too, and conflicts, are errors saying what to write.
  CHECK(error_of(R"({"zero_optimization": 2})").find("write {\"stage\": 2}") != std::string::npos);
  CHECK(error_of(R"({"bfloat16": {"enabled": true}, "bf16": {"enabled": true}})").find("keep bf16") !=
        std::string::npos);
  CHECK(error_of(R"({"allgather_size": 5})").find("zero_optimization.allgather_bucket_size") != std::string::npos);
  CHECK(error_of(R"({"zero_optimization": {"stage": 2, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})")
            .find("keep offload_optimizer") != std::string::npos);
  CHECK(error_of(R"({"zero_optimization": {"stage": 2, "cpu_offload": "yes"}})")
            .find("\"zero_optimization.cpu_offload\" = \"yes\" must be true or false") != std::string::npos);
  // DeepSpeed's field names of the stage3_* keys.
  c = EngineConfig::from_json(json::parse(
      R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 5e7, "max_live_parameters": 3e8,
          "max_reuse_distance": 2e8, "param_persistence_threshold": 100, "model_persistence_threshold": 1e6}})"));
  CHECK(c.zero.prefetch_bucket_size == 50000000);
  CHECK(c.zero.max_live_parameters == 300000000);
  CHECK(c.zero.max_reuse_distance == 200000000);
  CHECK(c.zero.param_persistence_threshold == 100);
  CHECK(c.zero.model_persistence_threshold == 1000000);
  CHECK(has_warning(c, "zero_optimization.max_live_parameters -> zero_optimization.stage3_max_live_parameters"));
  CHECK(error_of(R"({"zero_optimization": {"stage": 3, "max_live_parameters": 1, "stage3_max_live_parameters": 2}})")
            .find("keep stage3_max_live_parameters") != std::string::npos);
}

TEST_CASE("ds_config: every spelling DeepSpeed's parser takes for the keys zeroshard reads") {
  // communication_data_type: any case (DeepSpeed lower-cases it), and
  // "bfp16", its spelling of bf16 before 0.14.1, with a note.
  EngineConfig c = EngineConfig::from_json(json::parse(R"({"communication_data_type": "BF16"})"));
  CHECK(c.communication_data_type == DType::bf16);
  CHECK(c.warnings.empty());
  c = EngineConfig::from_json(json::parse(R"({"communication_data_type": "Fp16"})"));
  CHECK(c.communication_data_type == DType::f16);
  c = EngineConfig::from_json(json::parse(R"({"communication_data_type": "bfp16"})"));
  CHECK(c.communication_data_type == DType::bf16);
  CHECK(has_warning(c, "communication_data_type \"bfp16\" -> \"bf16\" (DeepSpeed's spelling before 0.14.1)"));
  CHECK(error_of(R"({"communication_data_type": "bfloat16"})")
            .find("\"communication_data_type\" = \"bfloat16\" is invalid: use fp32, bf16 or fp16") !=
        std::string::npos);
  // The field name of stage3_gather_16bit_weights_on_model_save (axolotl's
  // templates), and of the two no-effect stage3_* keys.
  c = EngineConfig::from_json(json::parse(
      R"({"zero_optimization": {"stage": 3, "gather_16bit_weights_on_model_save": true,
          "module_granularity_threshold": 0, "use_all_reduce_for_fetch_params": false}})"));
  CHECK(c.zero.gather_16bit_weights_on_model_save);
  CHECK(has_warning(c, "zero_optimization.gather_16bit_weights_on_model_save -> "
                       "zero_optimization.stage3_gather_16bit_weights_on_model_save"));
  CHECK(has_warning(c, "zero_optimization.module_granularity_threshold -> "
                       "zero_optimization.stage3_module_granularity_threshold"));
  CHECK(has_warning(c, "accepted without effect in zeroshard (docs/config.md says why each changes nothing here): "
                       "zero_optimization.stage3_module_granularity_threshold, "
                       "zero_optimization.stage3_use_all_reduce_for_fetch_params"));
  // bf16 with the fp16 section's loss-scale keys (Megatron-DeepSpeed's
  // "bfloat16": {"enabled": true, "loss_scale": 1.0}): DeepSpeed ignores them.
  c = EngineConfig::from_json(json::parse(
      R"({"bfloat16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
          "hysteresis": 2, "min_loss_scale": 1}})"));
  CHECK(c.compute_dtype == DType::bf16);
  CHECK(has_warning(c, "bfloat16 -> bf16"));
  for (const char* key : {"bf16.loss_scale", "bf16.initial_scale_power", "bf16.loss_scale_window", "bf16.hysteresis",
                          "bf16.min_loss_scale"}) {
    CHECK(has_warning(c, key));
  }
  CHECK(error_of(R"({"bf16": {"enabled": true, "loss_scale": "dynamic"}})")
            .find("\"bf16.loss_scale\" = \"dynamic\" must be a number") != std::string::npos);
  // fp16.auto_cast false (axolotl's templates) changes nothing; true is refused with DeepSpeed's meaning.
  c = EngineConfig::from_json(json::parse(R"({"fp16": {"enabled": true, "auto_cast": false}})"));
  CHECK(c.compute_dtype == DType::f16);
  CHECK(has_warning(c, "fp16.auto_cast"));
  CHECK(error_of(R"({"fp16": {"enabled": true, "auto_cast": true}})")
            .find("\"fp16.auto_cast\" = true is not supported: DeepSpeed would cast the model's inputs to fp16") !=
        std::string::npos);
  // sub_group_size 0 (axolotl's ZeRO-3 templates): the smallest sub-group.
  c = EngineConfig::from_json(json::parse(R"({"zero_optimization": {"stage": 3, "sub_group_size": 0}})"));
  CHECK(c.offload.sub_group_size == 0);
  CHECK(c.offload.sub_group_elements() == 4096);
  CHECK(error_of(R"({"zero_optimization": {"stage": 3, "sub_group_size": -1}})")
            .find("\"zero_optimization.sub_group_size\" = -1 must be >= 0") != std::string::npos);
}

TEST_CASE("ds_config: monitors and the names DeepSpeed prints its settings under") {
  // LLaMA-Factory's comms_config and monitor_config, flops_profiler on
  // (Megatron-DeepSpeed), disabled wandb / comet / tensorboard: one warning
  // line names them all.
  const EngineConfig c = EngineConfig::from_json(json::parse(R"({
      "comms_config": {"verbose": false},
      "monitor_config": {"enabled": true, "tag": "DeepSpeedMonitor", "csv_monitor": {"enabled": false}},
      "flops_profiler": {"enabled": true, "profile_step": -1, "output_file": null},
      "wandb": {"enabled": false, "project": "p"},
      "comet": {"enabled": false, "samples_log_interval": 100},
      "tensorboard": {"output_path": "tb"},
      "csv_monitor": {"enabled": true, "output_path": "runs", "job_name": "j1"}})"));
  REQUIRE(c.warnings.size() == 1);
  for (const char* key : {"comms_config", "monitor_config", "flops_profiler", "wandb", "comet", "tensorboard"}) {
    CHECK(c.warnings[0].find(key) != std::string::npos);
  }
  CHECK(c.warnings[0].find("csv_monitor") == std::string::npos);  // read, not warned about
  CHECK(c.observe.csv_monitor.enabled);
  // A monitor zeroshard cannot write is refused, saying what to use.
  for (const char* monitor : {"tensorboard", "wandb", "comet"}) {
    const std::string m = error_of(fmt::format(R"({{"{}": {{"enabled": true}}}})", monitor));
    INFO(m);
    CHECK(m.find(fmt::format("\"{}\" = {{\"enabled\":true}} is not supported: zeroshard", monitor)) !=
          std::string::npos);
    CHECK(m.find("use csv_monitor") != std::string::npos);
  }
  // Sections that would change the math stay errors with their reason.
  CHECK(error_of(R"({"sparse_attention": {"mode": "fixed"}})")
            .find("the model's attention would silently stay dense") != std::string::npos);
  CHECK(error_of(R"({"compression_training": {}})").find("quantization and pruning change the model") !=
        std::string::npos);
}

TEST_CASE("ds_config: the stage3_* knobs: defaults, bad values, typos") {
  const EngineConfig d = EngineConfig::from_json(json::parse(R"({"zero_optimization": {"stage": 3}})"));
  CHECK(d.zero.prefetch_bucket_size == 1);
  CHECK(d.zero.max_live_parameters == 1000000000);
  CHECK(d.zero.max_reuse_distance == 0);
  CHECK(d.zero.param_persistence_threshold == 0);
  const std::string m = error_of(
      R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": -1, "stage3_max_live_parameters": 1.5,
          "stage3_max_reuse_distanse": 0}})");
  INFO(m);
  CHECK(m.find("3 problems in the configuration") != std::string::npos);
  CHECK(m.find("\"zero_optimization.stage3_prefetch_bucket_size\" = -1 is invalid: must be >= 0 (elements)") !=
        std::string::npos);
  CHECK(m.find("zero_optimization.stage3_max_live_parameters") != std::string::npos);
  CHECK(m.find("did you mean \"zero_optimization.stage3_max_reuse_distance\"?") != std::string::npos);
  // The newer knobs that change nothing here are accepted with the warning.
  const EngineConfig q = EngineConfig::from_json(json::parse(
      R"({"zero_optimization": {"stage": 3, "stage3_module_granularity_threshold": 0,
          "stage3_use_all_reduce_for_fetch_params": true}})"));
  CHECK(has_warning(q, "zero_optimization.stage3_module_granularity_threshold"));
}

TEST_CASE("ds_config: stage3_gather_16bit_weights_on_model_save and its older fp16 name") {
  EngineConfig c = EngineConfig::from_json(json::parse(R"({"zero_optimization": {"stage": 3}})"));
  CHECK_FALSE(c.zero.gather_16bit_weights_on_model_save);
  c = EngineConfig::from_json(
      json::parse(R"({"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": true}})"));
  CHECK(c.zero.gather_16bit_weights_on_model_save);
  CHECK(c.warnings.empty());
  // Any stage: DeepSpeed reads it at stages 0-2 too (the weights are full there already).
  c = EngineConfig::from_json(
      json::parse(R"({"zero_optimization": {"stage": 1, "stage3_gather_16bit_weights_on_model_save": true}})"));
  CHECK(c.zero.gather_16bit_weights_on_model_save);
  // The older name is mapped, with its note.
  c = EngineConfig::from_json(
      json::parse(R"({"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": true}})"));
  CHECK(c.zero.gather_16bit_weights_on_model_save);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] == "<json>: legacy DeepSpeed spellings mapped: "
                         "zero_optimization.stage3_gather_fp16_weights_on_model_save -> "
                         "zero_optimization.stage3_gather_16bit_weights_on_model_save");
  c = EngineConfig::from_json(
      json::parse(R"({"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": false}})"));
  CHECK_FALSE(c.zero.gather_16bit_weights_on_model_save);
  // Both names, a wrong type under either, the old name in strict mode: errors.
  CHECK(error_of(R"({"zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true,
                                           "stage3_gather_16bit_weights_on_model_save": true}})")
            .find("keep stage3_gather_16bit_weights_on_model_save") != std::string::npos);
  CHECK(error_of(R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": 1}})")
            .find("\"zero_optimization.stage3_gather_16bit_weights_on_model_save\" = 1 must be true or false") !=
        std::string::npos);
  CHECK(error_of(R"({"zero_optimization": {"stage3_gather_fp16_weights_on_model_save": "yes"}})")
            .find("must be true or false") != std::string::npos);
  CHECK(error_of(R"({"zeroshard": {"strict": true},
                    "zero_optimization": {"stage3_gather_fp16_weights_on_model_save": true}})")
            .find("strict mode") != std::string::npos);
}

TEST_CASE("ds_config: Megatron-style file with wall_clock_breakdown and a scheduler") {
  const EngineConfig c = EngineConfig::from_file(config_path("megatron_wallclock.json"));
  CHECK(*c.train_batch_size == 256);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK_FALSE(c.accumulation_given);
  CHECK(c.steps_per_print == 10);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.zero.stage == 1);
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.lr == 6e-4);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.optimizer.weight_decay == 0.1);
  CHECK(c.scheduler.kind == LrScheduleKind::warmup_lr);
  CHECK(c.scheduler.warmup_max_lr == std::vector<double>{6e-4});
  CHECK(c.scheduler.warmup_num_steps == 2000);
  CHECK(c.scheduler.warmup_type == "linear");
  CHECK(c.compute_dtype == DType::bf16);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("accepted without effect") != std::string::npos);
  for (const char* key : {"prescale_gradients", "scheduler.params.last_batch_iteration", "activation_checkpointing",
                          "flops_profiler"}) {
    CHECK(c.warnings[0].find(key) != std::string::npos);
  }
  CHECK(c.observe.wall_clock_breakdown);  // read: the step breakdown table
  EngineConfig r = c;
  r.resolve_batch(8);
  CHECK(r.gradient_accumulation_steps == 8);  // 256 / (4 x 8)
  // The same file at world size 8 through the options: resolved while read.
  ConfigOptions o;
  o.world_size = 8;
  CHECK(EngineConfig::from_file(config_path("megatron_wallclock.json"), o).gradient_accumulation_steps == 8);
  o.world_size = 6;
  CHECK(load_error("megatron_wallclock.json", o).find("is not a multiple of train_micro_batch_size_per_gpu (4) x "
                                                      "world size (6) = 24") != std::string::npos);
  // Strict mode from the file's own zeroshard section.
  std::ifstream in(config_path("megatron_wallclock.json"));
  json j = json::parse(in);
  j["zeroshard"] = {{"strict", true}};
  const std::string m = error_of(j.dump());
  CHECK(m.find("ds.json: accepted without effect") == 0);
  CHECK(m.find("strict mode") != std::string::npos);
  // Keys accepted only with their neutral value: another value would change the math.
  CHECK(error_of(R"({"prescale_gradients": true})")
            .find("\"prescale_gradients\" = true would change the math") != std::string::npos);
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})")
            .find("set false") != std::string::npos);
}

TEST_CASE("ds_config: a file with three typos fails with one message naming all three") {
  const std::string m = load_error("three_typos.json");
  INFO(m);
  const std::string file = config_path("three_typos.json");
  CHECK(m == file + ": 3 problems in the configuration:\n"
                    "  unknown or unsupported configuration key \"gradient_acumulation_steps\"; did you mean "
                    "\"gradient_accumulation_steps\"?\n"
                    "  unknown or unsupported configuration key \"zero_optimisation\"; did you mean "
                    "\"zero_optimization\"?\n"
                    "  unknown or unsupported configuration key \"optimizer.params.beta\"; did you mean "
                    "\"optimizer.params.betas\"?");
}

TEST_CASE("ds_config: did-you-mean for a typo of every supported key, and of section names") {
  int checked = 0;
  for (const ConfigKey& k : config_keys()) {
    const std::string path = k.path;
    if (k.status != KeyStatus::implemented || k.type == KeyType::section) continue;
    const std::size_t dot = path.rfind('.');
    const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
    key.insert(key.begin() + static_cast<std::ptrdiff_t>(key.size() / 2), 'x');  // one edit away
    json j = json::object();
    json* at = &j;
    std::size_t pos = 0;
    while (!section.empty() && pos <= section.size()) {
      const std::size_t d = std::min(section.find('.', pos), section.size());
      at = &(*at)[section.substr(pos, d - pos)];
      pos = d + 1;
    }
    (*at)[key] = 1;
    if (section == "scheduler.params") j["scheduler"]["type"] = "WarmupCosineLR";
    if (section == "optimizer.params" && std::string(k.only_for) == "SGD") j["optimizer"]["type"] = "SGD";
    if (section == "optimizer.params" && std::string(k.only_for) == "Adam") j["optimizer"]["type"] = "Adam";
    if (section == "optimizer.params.adamw") j["optimizer"]["type"] = "Muon";  // the section applies to Muon only
    const std::string m = error_of(j.dump());
    CAPTURE(path);
    CAPTURE(m);
    CHECK(m.find("did you mean \"" + path + "\"?") != std::string::npos);
    ++checked;
  }
  CHECK(checked > 50);
  const std::pair<const char*, const char*> sections[] = {
      {R"({"optimiser": {}})", "did you mean \"optimizer\"?"},
      {R"({"schedular": {}})", "did you mean \"scheduler\"?"},
      {R"({"zero_optimizaton": {}})", "did you mean \"zero_optimization\"?"},
      {R"({"fp61": {}})", "did you mean \"fp16\"?"},
      {R"({"zero_optimization": {"stage": 3, "offload_parm": {}}})", "did you mean \"zero_optimization.offload_param\"?"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimiser": {}}})",
       "did you mean \"zero_optimization.offload_optimizer\"?"},
      {R"({"zero_shard": {"strict": true}})", "did you mean \"zeroshard\"?"},
  };
  for (const auto& entry : sections) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& text = entry.first;
    const auto& hint = entry.second;
    CAPTURE(text);
    CHECK(error_of(text).find(hint) != std::string::npos);
  }
  // Nothing close: no suggestion.
  CHECK(error_of(R"({"completely_different": 1})").find("did you mean") == std::string::npos);
}

TEST_CASE("ds_config: every problem in one message: types, values, refused keys, unsupported optimizers") {
  const std::string m = error_of(R"({
    "train_micro_batch_size_per_gpu": 0, "gradient_clipping": "big",
    "optimizer": {"type": "Lamb", "params": {"lr": -1, "momentum": 0.9}},
    "fp16": {"enabled": true, "auto_cast": true}, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 7, "offload_optimizer": {"device": "disk", "ratio": 0.5}},
    "sparse_attention": {"mode": "fixed"},
    "communication_data_type": "int8"})");
  INFO(m);
  CHECK(m.find("ds.json: 12 problems in the configuration:\n") == 0);
  for (const char* part : {"\"gradient_clipping\" = \"big\" must be a number",
                           "\"optimizer.type\" = \"Lamb\" is not supported: zeroshard implements Adam, AdamW, SGD, Lion, "
                           "Adagrad and Muon",
                           "\"optimizer.params.momentum\" applies only to SGD,Muon (optimizer.type is \"Lamb\")",
                           "\"fp16.auto_cast\" = true is not supported",
                           "\"sparse_attention\" = {\"mode\":\"fixed\"} is not supported",
                           "\"zero_optimization.offload_optimizer.ratio\" = 0.5 is not supported",
                           "\"fp16.enabled\" and \"bf16.enabled\" are both true",
                           "\"zero_optimization.offload_optimizer.device\" = \"disk\" is invalid",
                           "\"communication_data_type\" = \"int8\" is invalid",
                           "\"zero_optimization.stage\" = 7 is invalid: must be 0, 1, 2 or 3",
                           "\"train_micro_batch_size_per_gpu\" = 0 is invalid: must be >= 1",
                           "\"optimizer.params.lr\" = -1 is invalid: must be >= 0"}) {
    CHECK(m.find(part) != std::string::npos);
  }
}

TEST_CASE("ds_config: the pipeline section is refused, saying where zeroshard's pipeline is set up") {
  // DeepSpeed's "pipeline" section configures its PipelineEngine; here the
  // program sets up pipeline stages (Mesh pp, PipelineExecutor), so the
  // section would change nothing: refused, with the place to look.
  const std::string m = error_of(R"({"pipeline": {"stages": 2, "partition": "parameters"}})");
  INFO(m);
  CHECK(m.find("ds.json: \"pipeline\" = {\"partition\":\"parameters\",\"stages\":2} is not supported: "
               "configures DeepSpeed's PipelineEngine; zeroshard's pipeline parallelism is set up by the program, "
               "not the config: a Mesh with pp > 1 (comm/mesh.h) and a PipelineExecutor") != std::string::npos);
  CHECK(m.find("examples/gpt does with --pp and --schedule") != std::string::npos);
  CHECK(m.find("no pipeline parallelism") == std::string::npos);
  // An empty section too: its presence asks for DeepSpeed's pipeline.
  CHECK(error_of(R"({"pipeline": {}})").find("\"pipeline\" = {} is not supported") != std::string::npos);
  const ConfigKey* row = nullptr;
  for (const ConfigKey& k : config_keys()) {
    if (k.path == std::string("pipeline")) row = &k;
  }
  REQUIRE(row != nullptr);
  CHECK(row->status == KeyStatus::refused);
}

TEST_CASE("ds_config: batch arithmetic as DeepSpeed does it") {
  // The consistent triple 24 = 4 x 2 x 3 ranks, with each subset given.
  struct Case {
    std::optional<std::int64_t> tbs, micro, gas;
    BatchSizes expect;
  };
  const Case cases[] = {
      {24, 4, 2, {24, 4, 2}}, {24, 4, {}, {24, 4, 2}}, {24, {}, 2, {24, 4, 2}}, {{}, 4, 2, {24, 4, 2}},
      {24, {}, {}, {24, 8, 1}}, {{}, 4, {}, {12, 4, 1}}, {{}, {}, 2, {6, 1, 2}}, {{}, {}, {}, {3, 1, 1}},
  };
  for (const Case& k : cases) {
    CAPTURE(k.tbs.value_or(-1));
    CAPTURE(k.micro.value_or(-1));
    CAPTURE(k.gas.value_or(-1));
    const BatchSizes b = resolve_batch_sizes(k.tbs, k.micro, k.gas, 3, "ds.json");
    CHECK(b.train_batch_size == k.expect.train_batch_size);
    CHECK(b.train_micro_batch_size_per_gpu == k.expect.train_micro_batch_size_per_gpu);
    CHECK(b.gradient_accumulation_steps == k.expect.gradient_accumulation_steps);
    // The same through a file and ConfigOptions::world_size.
    json j = json::object();
    if (k.tbs) j["train_batch_size"] = *k.tbs;
    if (k.micro) j["train_micro_batch_size_per_gpu"] = *k.micro;
    if (k.gas) j["gradient_accumulation_steps"] = *k.gas;
    ConfigOptions o;
    o.world_size = 3;
    const EngineConfig c = EngineConfig::from_json(j, "ds.json", o);
    CHECK(c.train_micro_batch_size_per_gpu == k.expect.train_micro_batch_size_per_gpu);
    CHECK(c.gradient_accumulation_steps == k.expect.gradient_accumulation_steps);
    CHECK(*c.train_batch_size == k.expect.train_batch_size);
    CHECK_NOTHROW(c.validate_for_world(3));
  }
  // "auto" for one batch key, the other two given: derived.
  ConfigOptions o;
  o.world_size = 3;
  CHECK(EngineConfig::from_json(json::parse(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": "auto",
      "gradient_accumulation_steps": 2})"), "ds.json", o).train_micro_batch_size_per_gpu == 4);
  CHECK(error_with(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": "auto"})", o)
            .find("\"auto\" is left unfilled for train_micro_batch_size_per_gpu") != std::string::npos);
  // Disagreement and remainders show the arithmetic.
  CHECK_THROWS_WITH_AS(resolve_batch_sizes(25, 4, 2, 3, "ds.json"),
                       doctest::Contains("ds.json: \"train_batch_size\" = 25 does not equal "
                                         "train_micro_batch_size_per_gpu (4) x gradient_accumulation_steps (2) x "
                                         "world size (3) = 24"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(resolve_batch_sizes(25, 4, {}, 3, "ds.json"),
                       doctest::Contains("gradient_accumulation_steps would be 25 / 12 = 2.08333"), ConfigError);
  CHECK_THROWS_WITH_AS(resolve_batch_sizes({}, 0, {}, 3, "ds.json"),
                       doctest::Contains("\"train_micro_batch_size_per_gpu\" = 0 is invalid"), ConfigError);
  // Huge values: checked multiplication, never a wrapped product.
  const std::int64_t big = std::int64_t{1} << 62;
  CHECK_THROWS_WITH_AS(resolve_batch_sizes({}, big, 4, 1, "ds.json"),
                       doctest::Contains("x world size (1) overflows a 64-bit integer"), ConfigError);
  // (2^62 + 1) x 4 wraps to 4 in int64: it must not match train_batch_size 4.
  CHECK_THROWS_WITH_AS(resolve_batch_sizes(4, big + 1, 4, 1, "ds.json"),
                       doctest::Contains("\"train_batch_size\" = 4 cannot match it"), ConfigError);
  CHECK_THROWS_WITH_AS(resolve_batch_sizes(big, big, {}, 3, "ds.json"),
                       doctest::Contains("train_micro_batch_size_per_gpu (4611686018427387904) x world size (3) "
                                         "overflows a 64-bit integer"),
                       ConfigError);
  CHECK(resolve_batch_sizes({}, big / 4, 4, 1, "ds.json").train_batch_size == big);  // fits: no error
  CHECK(resolve_batch_sizes(big, big / 4, 4, 1, "ds.json").gradient_accumulation_steps == 4);
}

TEST_CASE("ds_config: bounded reading (depth cap, short quotes, 1e400, u64, duplicates in arrays)") {
  auto file_error = [](const std::string& text) { return file_error_of(text, "test_config_bounded.json"); };
  // Level 33 of {"a": [[[...: the '{' is level 1 at byte 0, '[' level 2 at byte 6.
  std::string m = file_error("{\"a\": " + std::string(50000, '[') + std::string(50000, ']') + "}");
  CHECK(m.find("test_config_bounded.json: objects and arrays nest deeper than 32 levels at byte 37") == 0);
  CHECK(file_error("{\"a\": " + std::string(31, '[') + std::string(31, ']') + "}")
            .find("unknown or unsupported configuration key \"a\"") != std::string::npos);
  json deep = json::array();
  for (int i = 0; i < 40; ++i) deep = json::array({deep});
  m = error_of(json{{"optimizer", {{"params", {{"lr", deep}}}}}}.dump());
  CHECK(m == "ds.json: \"optimizer\" holds objects and arrays nested deeper than 32 levels");
  // Long values and keys are quoted by a 64-byte prefix and their length.
  json big = json::array();
  for (int i = 0; i < 50000; ++i) big.push_back(i);
  m = error_of(json{{"zero_optimization", {{"allgather_bucket_size", big}}}}.dump());
  CHECK(m.find("\"zero_optimization.allgather_bucket_size\" = [0,1,2,3,") != std::string::npos);
  CHECK(m.find("bytes) must be a whole number of elements") != std::string::npos);
  CHECK(m.size() < 300);
  m = error_of(json{{std::string(50000, 'q'), 1}}.dump());
  CHECK(m.find("unknown or unsupported configuration key \"qqqq") != std::string::npos);
  CHECK(m.find("(50000 bytes)") != std::string::npos);
  CHECK(m.size() < 300);
  // A number beyond a double: the file and the key, inside arrays too.
  m = file_error(R"({"optimizer": {"type": "AdamW", "params": {"eps": -1e500}}})");
  CHECK(m.find("test_config_bounded.json: \"optimizer.params.eps\"") == 0);
  CHECK(m.find("1e500") != std::string::npos);
  m = file_error(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1e309]}}})");
  CHECK(m.find("\"optimizer.params.betas[1]\"") != std::string::npos);
  m = file_error(R"({"zero_optimization": {"stage": 1}, "l": [{"k": 1}, {"k": 1, "k": 1}]})");
  CHECK(m.find("key \"l[1].k\" appears twice") != std::string::npos);
  // Integers above INT64_MAX are quoted as written.
  const std::pair<const char*, const char*> above_int64[] = {
      {"steps_per_print", R"({"steps_per_print": 9223372036854775809})"},
      {"aio.block_size", R"({"aio": {"block_size": 9223372036854775809}})"},
      {"scheduler.params.total_num_steps",
       R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 9223372036854775809}}})"},
  };
  for (const auto& entry : above_int64) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& k = entry.first;
    const auto& text = entry.second;
    CAPTURE(k);
    m = error_of(text);
    std::string expected = "\"";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "..." + string
    expected += k;
    expected += "\" = 9223372036854775809 is out of range";
    CHECK(m.find(expected) != std::string::npos);
    CHECK(m.find("-1") == std::string::npos);
  }
}

TEST_CASE("ds_config: messages keep their point (the parser's whole reason, out of range, long values cut)") {
  auto file_error = [](const std::string& text) { return file_error_of(text, "test_config_point.json"); };
  // The parser's message is whole: where, what it found, what it expected.
  CHECK(file_error(R"({"train_batch_size": 8 "gradient_accumulation_steps": 1})") ==
        "test_config_point.json: invalid JSON at byte 52: parse error at line 1, column 52: syntax error while "
        "parsing object - unexpected string literal; expected '}'");
  // A megabyte token (an unterminated string) is cut alone; the reason stays.
  std::string m = file_error("{\"zero_optimization\": {\"offload_optimizer\": {\"nvme_path\": \"" +
                             std::string(1 << 20, 'q'));
  CHECK(m.find("parse error at line 1, column ") != std::string::npos);
  CHECK(m.find("syntax error while parsing value - invalid string: missing closing quote; last read: '\"qqqq") !=
        std::string::npos);
  CHECK(m.find("... (1048577 bytes)'") != std::string::npos);
  CHECK(m.size() < 400);
  // A whole number beyond 2^64 - 1 (held as a double) is out of range, with the range.
  const std::pair<const char*, const char*> beyond_u64[] = {
      {"steps_per_print", R"({"steps_per_print": 18446744073709551616})"},
      {"zero_optimization.stage", R"({"zero_optimization": {"stage": 1e30}})"},
      {"zero_optimization.reduce_bucket_size", R"({"zero_optimization": {"reduce_bucket_size": -1e19}})"},
  };
  for (const auto& entry : beyond_u64) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& k = entry.first;
    const auto& text = entry.second;
    CAPTURE(k);
    m = error_of(text);
    CHECK(m.find(fmt::format("\"{}\" = ", k)) != std::string::npos);
    CHECK(m.find("is out of range [") != std::string::npos);
    CHECK(m.find("must be an integer") == std::string::npos);
    CHECK(m.find("whole number") == std::string::npos);
  }
  CHECK(error_of(R"({"steps_per_print": 18446744073709551616})")
            .find("\"steps_per_print\" = 1.8446744073709552e+19 is out of range [-9223372036854775808, "
                  "9223372036854775807]") != std::string::npos);
  // Not whole: still "must be an integer".
  CHECK(error_of(R"({"steps_per_print": 2.5})").find("\"steps_per_print\" = 2.5 must be an integer") !=
        std::string::npos);
  // A 10 MB value in a scheduler's message is cut as the reader's own are.
  m = error_of(json{{"scheduler", {{"type", std::string(10 << 20, 'W')}}}}.dump());
  CHECK(m.find("(10485760 bytes)") != std::string::npos);
  CHECK(m.size() < 400);
}
