// ds_config parsing: supported keys, DeepSpeed semantics, and errors that
// name the key and the value.
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include <doctest/doctest.h>
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


TEST_CASE("a full ds_config parses with DeepSpeed's meanings") {
  const EngineConfig c = EngineConfig::from_json(json::parse(R"({
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0, "steps_per_print": 5,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 3}})"));
  CHECK(c.zero.stage == 3);
  CHECK(c.train_micro_batch_size_per_gpu == 8);
  CHECK(c.gradient_accumulation_steps == 2);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.optimizer.kind == OptimizerKind::adamw);
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(c.optimizer.beta1 == 0.8);
  CHECK(c.optimizer.beta2 == 0.99);
  CHECK(c.optimizer.eps == 1e-6);
  CHECK(c.optimizer.weight_decay == 0.1);
  CHECK_NOTHROW(c.validate_for_world(4));
  CHECK_THROWS_AS(c.validate_for_world(3), ConfigError);
}

TEST_CASE("optimizer types: Adam is AdamW unless adam_w_mode is false (DeepSpeed); SGD") {
  auto kind = [](const std::string& t) { return EngineConfig::from_json(json::parse(t)).optimizer.kind; };
  CHECK(kind(R"({"optimizer": {"type": "Adam"}})") == OptimizerKind::adamw);
  CHECK(kind(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})") == OptimizerKind::adam);
  // AdamW stays AdamW whatever adam_w_mode says (DeepSpeed: effective mode = AdamW or adam_w_mode).
  CHECK(kind(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": true, "torch_adam": true}}})") ==
        OptimizerKind::adamw);
  CHECK(kind(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})") == OptimizerKind::adamw);
  CHECK_THROWS_WITH_AS(kind(R"({"optimizer": {"type": "SGD", "params": {"adam_w_mode": true}}})"),
                       doctest::Contains("\"optimizer.params.adam_w_mode\" applies only to"), ConfigError);
  const EngineConfig s = EngineConfig::from_json(
      json::parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})"));
  CHECK(s.optimizer.kind == OptimizerKind::sgd);
  CHECK(s.optimizer.momentum == 0.9);
  CHECK(s.optimizer.nesterov);
}

TEST_CASE("optimizer types Lion and Adagrad: DeepSpeed's names (any case), defaults and params") {
  const EngineConfig l = EngineConfig::from_json(json::parse(R"({"optimizer": {"type": "lion"}})"));
  CHECK(l.optimizer.kind == OptimizerKind::lion);
  CHECK(l.optimizer.lr == 1e-3);  // FusedLion / DeepSpeedCPULion: lr 1e-3, betas (0.9, 0.999), weight_decay 0
  CHECK(l.optimizer.beta1 == 0.9);
  CHECK(l.optimizer.beta2 == 0.999);
  CHECK(l.optimizer.weight_decay == 0.0);
  const EngineConfig l2 = EngineConfig::from_json(json::parse(
      R"({"optimizer": {"type": "Lion", "params": {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.1}}})"));
  CHECK(l2.optimizer.lr == 1e-4);
  CHECK(l2.optimizer.beta1 == 0.95);
  CHECK(l2.optimizer.beta2 == 0.98);
  CHECK(l2.optimizer.weight_decay == 0.1);
  const EngineConfig a = EngineConfig::from_json(json::parse(R"({"optimizer": {"type": "ADAGRAD"}})"));
  CHECK(a.optimizer.kind == OptimizerKind::adagrad);
  CHECK(a.optimizer.lr == 1e-2);  // torch.optim.Adagrad / DeepSpeedCPUAdagrad
  CHECK(a.optimizer.eps == 1e-10);
  CHECK(a.optimizer.lr_decay == 0.0);
  CHECK(a.optimizer.initial_accumulator_value == 0.0);
  const EngineConfig a2 = EngineConfig::from_json(json::parse(
      R"({"optimizer": {"type": "Adagrad", "params": {"lr": 0.1, "eps": 1e-8, "weight_decay": 0.01,
                                                    "lr_decay": 0.5, "initial_accumulator_value": 0.25}},
          "zero_allow_untested_optimizer": true})"));
  CHECK(a2.optimizer.lr == 0.1);
  CHECK(a2.optimizer.eps == 1e-8);
  CHECK(a2.optimizer.weight_decay == 0.01);
  CHECK(a2.optimizer.lr_decay == 0.5);
  CHECK(a2.optimizer.initial_accumulator_value == 0.25);
}

TEST_CASE("Lion and Adagrad: keys of other optimizers and out-of-range values are errors naming the key") {
  std::string m = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"betas": [0.9, 0.99]}}})");
  CHECK(m.find("\"optimizer.params.betas\" applies only to Adam,AdamW,Adam8bit,AdamW8bit,Lion (optimizer.type is \"Adagrad\")") !=
        std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})");
  CHECK(m.find("\"optimizer.params.eps\" applies only to Adam,AdamW,Adam8bit,AdamW8bit,Adagrad (optimizer.type is \"Lion\")") !=
        std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Lion", "params": {"lr_decay": 0.1}}})");
  CHECK(m.find("\"optimizer.params.lr_decay\" applies only to Adagrad") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"initial_accumulator_value": 0.1}}})");
  CHECK(m.find("\"optimizer.params.initial_accumulator_value\" applies only to Adagrad") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Lion", "params": {"momentum": 0.9}}})");
  CHECK(m.find("\"optimizer.params.momentum\" applies only to SGD") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Lion", "params": {"betas": [0.9, 1.0]}}})");
  CHECK(m.find("\"optimizer.params.betas\" = [0.9, 1] is invalid: each beta must be in [0, 1)") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"lr_decay": -1}}})");
  CHECK(m.find("\"optimizer.params.lr_decay\" = -1 is invalid: must be >= 0") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"initial_accumulator_value": -0.5}}})");
  CHECK(m.find("\"optimizer.params.initial_accumulator_value\" = -0.5 is invalid: must be >= 0") !=
        std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"eps": 0}}})");
  CHECK(m.find("\"optimizer.params.eps\" = 0 is invalid: must be > 0") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Adagrad", "params": {"lr_dekay": 0.1}}})");
  CHECK(m.find("did you mean \"optimizer.params.lr_decay\"?") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "OneBitAdam"}})");
  CHECK(m.find("\"optimizer.type\" = \"OneBitAdam\" is not supported: zeroshard implements Adam, AdamW, SGD, Lion, "
               "Adagrad and Muon") != std::string::npos);
}

TEST_CASE("errors name the key and the value") {
  std::string m = error_of(R"({"zero_optimisation": {"stage": 2}})");
  CHECK(m.find("\"zero_optimisation\"") != std::string::npos);
  CHECK(m.find("ds.json") != std::string::npos);
  m = error_of(R"({"zero_optimization": {"stage": 4}})");
  CHECK(m.find("zero_optimization.stage") != std::string::npos);
  CHECK(m.find("= 4") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": -0.001}}})");
  CHECK(m.find("optimizer.params.lr") != std::string::npos);
  CHECK(m.find("-0.001") != std::string::npos);
  m = error_of(R"({"gradient_accumulation_steps": 0})");
  CHECK(m.find("gradient_accumulation_steps") != std::string::npos);
  CHECK(m.find("= 0") != std::string::npos);
  m = error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "fast_init": true}}})");
  CHECK(m.find("zero_optimization.offload_optimizer.fast_init") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "Lamb"}})");
  CHECK(m.find("Lamb") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})");
  CHECK(m.find("optimizer.params.betas") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}})");
  CHECK(m.find("optimizer.params.momentum") != std::string::npos);
  m = error_of(R"({"zero_optimization": {"stage": "3"}})");
  CHECK(m.find("zero_optimization.stage") != std::string::npos);
  CHECK(error_of(R"({"zero_optimization": {"stage": 2}})").empty());
}

TEST_CASE("numbers that do not fit their type are errors quoting the value as written") {
  std::string m = error_of(R"({"zero_optimization": {"stage": 4294967299}})");
  CHECK(m.find("zero_optimization.stage") != std::string::npos);
  CHECK(m.find("4294967299") != std::string::npos);
  m = error_of(R"({"gradient_accumulation_steps": 18446744073709551615})");
  CHECK(m.find("18446744073709551615") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e39}}})");
  CHECK(m.find("optimizer.params.lr") != std::string::npos);
  CHECK(m.find("1e+39") != std::string::npos);
  m = error_of(R"({"optimizer": {"type": "AdamW", "params": {"eps": 1e-50}}})");
  CHECK(m.find("optimizer.params.eps") != std::string::npos);
  CHECK(m.find("1e-50") != std::string::npos);
}

TEST_CASE("from_file: missing file and bad JSON name the file and offset") {
  CHECK_THROWS_WITH_AS(EngineConfig::from_file("/nonexistent/ds.json"),
                       doctest::Contains("/nonexistent/ds.json"), ConfigError);
  const std::string path = "test_config_bad.json";
  {
    std::ofstream f(path);
    f << "{\"zero_optimization\": {\"stage\": 2,}}";
  }
  CHECK_THROWS_WITH_AS(EngineConfig::from_file(path), doctest::Contains("at byte"), ConfigError);
  std::remove(path.c_str());
  CHECK_THROWS_WITH_AS(EngineConfig::from_file("."), doctest::Contains("is a directory"), ConfigError);
  // A key given twice is an error naming its path, at any depth; the same
  // key in two different objects is fine.
  const std::string dup = "test_config_dup.json";
  auto write = [&](const char* text) {
    std::ofstream f(dup);
    f << text;
  };
  write(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "device": "cpu"}}})");
  CHECK_THROWS_WITH_AS(EngineConfig::from_file(dup), doctest::Contains("\"zero_optimization.offload_optimizer.device\" appears twice"),
                       ConfigError);
  write(R"({"zero_optimization": {"stage": 2}, "zero_optimization": {"stage": 3}})");
  CHECK_THROWS_WITH_AS(EngineConfig::from_file(dup), doctest::Contains("\"zero_optimization\" appears twice"), ConfigError);
  write(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}}})");
  CHECK(EngineConfig::from_file(dup).optimizer.lr == doctest::Approx(0.1f));
  std::remove(dup.c_str());
  CHECK_THROWS_WITH_AS(EngineConfig::from_file("/nonexistent/ds.json"), doctest::Contains("No such file"), ConfigError);
  const EngineConfig c = EngineConfig::from_json(nlohmann::json::parse(R"({"train_batch_size": 7})"), "ds.json");
  CHECK_THROWS_WITH_AS(c.validate_for_world(2), doctest::Contains("ds.json"), ConfigError);
}

TEST_CASE("the cuda engine constructor refuses what it cannot run, naming why") {
  // Without a GPU (or without CUDA in the build) nothing here touches a device:
  // the checks come first. tests/cuda/test_engine_device.cpp runs it on a GPU.
  SelfCommunicator self;
  EngineConfig cfg;
  cfg.zero.stage = 2;
  std::string what;
  try {
    Engine e(cfg, self, self);
  } catch (const ConfigError& e) {
    what = e.what();
  }
  INFO(what);
  if (ZS_HAVE_CUDA) {
    CHECK(what.find("needs an NcclCommunicator") != std::string::npos);
    CHECK(what.find("\"self\"") != std::string::npos);
  } else {
    CHECK(what.find("needs a CUDA build") != std::string::npos);
  }
  cfg.zero.stage = 3;
  cfg.offload.param.device = OffloadDevice::cpu;
  what.clear();
  try {
    Engine e(cfg, self, self);
  } catch (const ConfigError& e) {
    what = e.what();
  }
  CHECK(what.find("offload_param needs offload_optimizer on the cuda compute device") != std::string::npos);
  // Lion and Adagrad have CPU kernels only: refused unless the update runs on the host.
  for (const OptimizerKind kind : {OptimizerKind::lion, OptimizerKind::adagrad}) {
    EngineConfig o;
    o.optimizer.kind = kind;
    what.clear();
    try {
      Engine e(o, self, self);
    } catch (const ConfigError& e) {
      what = e.what();
    }
    CHECK(what.find(fmt::format("optimizer.type {} has no CUDA kernel", optimizer_name(kind))) != std::string::npos);
    o.zero.stage = 1;
    o.offload.optimizer.device = OffloadDevice::cpu;  // passes this check; the next one is the communicator's
    what.clear();
    try {
      Engine e(o, self, self);
    } catch (const ConfigError& e) {
      what = e.what();
    }
    CHECK(what.find("has no CUDA kernel") == std::string::npos);
    CHECK(what.find(ZS_HAVE_CUDA ? "needs an NcclCommunicator" : "needs a CUDA build") != std::string::npos);
  }
  // ZeRO++: hpZ's and qgZ's groups are host-side splits the cuda engine does
  // not make: refused naming the key; qwZ passes this check.
  for (const int variant : {0, 1, 2}) {
    EngineConfig z;
    z.zero.stage = 3;
    z.zero.zeropp.hpz_partition_size = variant == 0 ? 2 : 1;
    z.zero.zeropp.quantized_gradients = variant == 1;
    z.zero.zeropp.quantized_weights = variant == 2;
    what.clear();
    try {
      Engine e(z, self, self);
    } catch (const ConfigError& e) {
      what = e.what();
    }
    CAPTURE(variant);
    const char* key = variant == 0 ? "zero_hpz_partition_size on the cuda compute device"
                                   : "zero_quantized_gradients on the cuda compute device";
    CHECK((what.find(key) != std::string::npos) == (variant < 2));
  }
}

TEST_CASE("nesting deeper than 32 levels is an error naming the file and the byte offset") {
  // 100,000 levels: before the cap this overflowed the stack (or, with a
  // key path per level, needed gigabytes).
  const int deep = 100000;
  std::string text = "{\"a\": " + std::string(deep, '[') + std::string(deep, ']') + "}";
  std::string m = file_error_of(text);
  INFO(m.substr(0, 300));
  CHECK(m.find("test_config_scratch.json") != std::string::npos);
  // '{' at byte 0 is level 1; the '[' at byte 6 level 2, so level 33 is byte 37.
  CHECK(m.find("deeper than 32 levels at byte 37") != std::string::npos);
  // 32 levels parse; brackets inside strings do not count.
  text = "{\"a\": " + std::string(31, '[') + std::string(31, ']') + "}";
  CHECK(file_error_of(text).find("unknown or unsupported configuration key \"a\"") != std::string::npos);
  CHECK(file_error_of("{\"optimizer\": {\"type\": \"" + std::string(100, '[') + "\"}}").find("optimizer.type") !=
        std::string::npos);
  // A deep value built by the caller and handed to from_json.
  json j = {{"zero_optimization", {{"reduce_bucket_size", nested_arrays(deep)}}}};
  m.clear();
  try {
    EngineConfig::from_json(j, "ds.json");
  } catch (const ConfigError& e) {
    m = e.what();
  }
  CHECK(m.find("ds.json: \"zero_optimization\" holds objects and arrays nested deeper than 32 levels") !=
        std::string::npos);
  j = {{"zero_optimization", {{"reduce_bucket_size", nested_arrays(30)}}}};
  CHECK(error_of(j.dump()).find("\"zero_optimization.reduce_bucket_size\" = [[[[") != std::string::npos);
}

TEST_CASE("a long bad value or key is quoted by a short prefix") {
  const std::string zeros = "[" + std::string(20000, '0') + "]";  // not JSON: digits run together
  json big = json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  std::string m = error_of(json{{"zero_optimization", {{"reduce_bucket_size", big}}}}.dump());
  INFO(m.substr(0, 300));
  CHECK(m.find("zero_optimization.reduce_bucket_size") != std::string::npos);
  CHECK(m.find("[0,1,2,3,") != std::string::npos);
  CHECK(m.find("bytes)") != std::string::npos);
  CHECK(m.size() < 400);
  m = error_of(json{{"optimizer", {{"type", std::string(100000, 'x')}}}}.dump());
  CHECK(m.find("optimizer.type") != std::string::npos);
  CHECK(m.size() < 400);
  m = error_of(json{{std::string(100000, 'k'), 1}}.dump());
  CHECK(m.find("unknown or unsupported configuration key \"kkkk") != std::string::npos);
  CHECK(m.size() < 400);
  m = file_error_of("{\"gradient_clipping\": " + zeros + "}");
  CHECK(m.find("invalid JSON at byte") != std::string::npos);
  CHECK(m.size() < 400);
}

TEST_CASE("a key given twice inside an array element is named with the element's index") {
  const std::string m = file_error_of(R"({"x": [1, {"k": 1}, {"k": 1, "k": 2}]})");
  CHECK(m.find("key \"x[2].k\" appears twice") != std::string::npos);
}

TEST_CASE("a number beyond the range of a double is a ConfigError naming the file and the key") {
  std::string m = file_error_of(R"({"gradient_clipping": 1e400})");
  INFO(m);
  CHECK(m.find("test_config_scratch.json") != std::string::npos);
  CHECK(m.find("\"gradient_clipping\"") != std::string::npos);
  CHECK(m.find("number 1e400 is beyond the range of a double (at byte 22)") != std::string::npos);
  m = file_error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": [0.1, -1e999]}}})");
  CHECK(m.find("\"scheduler.params.warmup_max_lr[1]\"") != std::string::npos);
}

TEST_CASE("the global batch check refuses a product that overflows int64 instead of wrapping") {
  // (2^62 + 1) x 4 wraps to 4: before the check it matched train_batch_size 4.
  const EngineConfig c = EngineConfig::from_json(json::parse(
      R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4611686018427387905, "gradient_accumulation_steps": 4})"),
      "ds.json");
  CHECK_THROWS_WITH_AS(c.validate_for_world(1), doctest::Contains("overflows a 64-bit integer"), ConfigError);
  // 2^31 x 2^31 fits; x 4 ranks does not.
  EngineConfig d = EngineConfig::from_json(json::parse(
      R"({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 2147483648, "gradient_accumulation_steps": 2147483648})"));
  CHECK_THROWS_WITH_AS(d.validate_for_world(4), doctest::Contains("world size (4)"), ConfigError);
  CHECK_THROWS_WITH_AS(d.validate_for_world(1), doctest::Contains("= 4611686018427387904"), ConfigError);
  d.train_batch_size = std::int64_t{1} << 62;
  CHECK_NOTHROW(d.validate_for_world(1));
  // Without train_batch_size the product must still fit (callers print it).
  d.train_batch_size.reset();
  CHECK_NOTHROW(d.validate_for_world(1));
  CHECK_THROWS_WITH_AS(d.validate_for_world(4), doctest::Contains("overflows a 64-bit integer"), ConfigError);
}

TEST_CASE("integers above INT64_MAX are quoted as written, not as -1") {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 18446744073709551615}}})",
       "\"scheduler.params.warmup_num_steps\" = 18446744073709551615"},
      {R"({"aio": {"block_size": 18446744073709551615}})", "\"aio.block_size\" = 18446744073709551615"},
      {R"({"train_batch_size": 9223372036854775808})", "\"train_batch_size\" = 9223372036854775808"},
  };
  for (const auto& [text, quoted] : cases) {
    const std::string m = error_of(text);
    INFO(m);
    CHECK(m.find("ds.json") != std::string::npos);
    CHECK(m.find(quoted) != std::string::npos);
  }
}

TEST_CASE("ZeRO++ keys: DeepSpeed's names, zeroshard's formats, and the refused combinations named") {
  const EngineConfig c = EngineConfig::from_json(json::parse(R"({
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "zero_quantized_weights": true, "zero_hpz_partition_size": 2,
                          "zero_quantized_gradients": true},
    "zeroshard": {"zeropp": {"weight_bits": 4, "weight_block_size": 256, "gradient_bits": 8,
                             "gradient_block_size": 64, "error_feedback": true}}})"));
  const ZeroppConfig& z = c.zero.zeropp;
  CHECK(z.quantized_weights);
  CHECK(z.hpz_partition_size == 2);
  CHECK(z.hpz());
  CHECK(z.quantized_gradients);
  CHECK(z.error_feedback);
  CHECK(z.weight_format().bits == kernels::QuantBits::int4);
  CHECK(z.weight_format().block == 256);
  CHECK(z.gradient_format().bits == kernels::QuantBits::int8);
  CHECK(z.gradient_format().block == 64);
  // Defaults: all off, int8 weights in blocks of 64, int8 gradients in blocks of 256.
  const ZeroppConfig d = EngineConfig::from_json(json::parse(R"({"zero_optimization": {"stage": 3}})")).zero.zeropp;
  CHECK_FALSE(d.any());
  CHECK(d.weight_format().bits == kernels::QuantBits::int8);
  CHECK(d.gradient_format().bits == kernels::QuantBits::int8);
  CHECK(d.weight_format().block == 64);
  CHECK(d.gradient_format().block == 256);

  // Each refused combination is named with its reason.
  const std::pair<const char*, const char*> refused[] = {
      {R"({"zero_optimization": {"stage": 2, "zero_quantized_weights": true}})",
       "\"zero_optimization.zero_quantized_weights\" = true needs zero_optimization.stage 3"},
      {R"({"zero_optimization": {"stage": 1, "zero_hpz_partition_size": 4}})",
       "\"zero_optimization.zero_hpz_partition_size\" = 4 needs zero_optimization.stage 3"},
      {R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 0}})", "must be >= 1"},
      {R"({"zero_optimization": {"stage": 1, "zero_quantized_gradients": true}})",
       "\"zero_optimization.zero_quantized_gradients\" = true needs zero_optimization.stage 2 or 3"},
      {R"({"zeroshard": {"zeropp": {"weight_bits": 2}}})", "\"zeroshard.zeropp.weight_bits\" = 2 must be 8 or 4"},
      {R"({"zeroshard": {"zeropp": {"gradient_block_size": 1000}}})",
       "\"zeroshard.zeropp.gradient_block_size\" = 1000 must be a power of two from 16 to 8192"},
      {R"({"zeroshard": {"zeropp": {"error_feedback": true}}})",
       "\"zeroshard.zeropp.error_feedback\" = true needs zero_optimization.zero_quantized_gradients"},
      {R"({"fp16": {"enabled": true}, "zeroshard": {"zeropp": {"error_feedback": true}},
          "zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})",
       "with fp16's dynamic loss scale is refused"},
  };
  for (const auto& entry : refused) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& text = entry.first;
    const auto& want = entry.second;
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(EngineConfig::from_json(json::parse(text)), doctest::Contains(want), ConfigError);
  }
  // A static fp16 scale keeps the residual's units: accepted.
  CHECK_NOTHROW(EngineConfig::from_json(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 1024},
      "zeroshard": {"zeropp": {"error_feedback": true}},
      "zero_optimization": {"stage": 2, "zero_quantized_gradients": true}})")));
}

TEST_CASE("data_types.grad_accum_dtype: fp32 by default, the compute dtype with one warning, else refused") {
  auto parse = [](const std::string& text) { return EngineConfig::from_json(json::parse(text), "ds.json"); };
  // Default and explicit fp32: an fp32 accumulator under bf16 and fp16, no warning.
  for (const char* text : {R"({"bf16": {"enabled": true}})", R"({"fp16": {"enabled": true}})",
                           R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "FP32"}})"}) {
    CAPTURE(text);
    const EngineConfig c = parse(text);
    CHECK(c.accumulation_dtype() == DType::f32);
    CHECK(c.warnings.empty());
  }
  CHECK(parse("{}").accumulation_dtype() == DType::f32);
  // The compute dtype on request, with exactly one warning line naming the key.
  const std::pair<const char*, DType> opt_in[] = {
      {R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "bf16"}})", DType::bf16},
      {R"({"fp16": {"enabled": true}, "data_types": {"grad_accum_dtype": "Fp16"}})", DType::f16}};
  for (const auto& entry : opt_in) {
    // Named references: clang 14 cannot capture structured bindings (doctest's CAPTURE).
    const auto& text = entry.first;
    const auto& dtype = entry.second;
    CAPTURE(text);
    const EngineConfig c = parse(text);
    CHECK(c.accumulation_dtype() == dtype);
    REQUIRE(c.warnings.size() == 1);
    CHECK(c.warnings[0].find("ds.json: data_types.grad_accum_dtype") == 0);
  }
  // Anything else names the key.
  const std::pair<const char*, const char*> refused[] = {
      {R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "int8"}})", "is invalid"},
      {R"({"bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp16"}})", "compute dtype \"bf16\""},
      {R"({"data_types": {"grad_accum_dtype": "bf16"}})", "fp32 training accumulates in fp32"},
      {R"({"data_types": {"grad_accum_dtype": 16}})", ""},
      {R"({"data_types": {"grad_accum": "fp32"}})", ""}};
  for (const auto& [text, why] : refused) {
    const std::string m = error_of(text);
    CAPTURE(m);
    CHECK(m.find("ds.json") != std::string::npos);
    CHECK(m.find("data_types.grad_accum") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
  }
}
