// ds_config parsing: supported keys, DeepSpeed semantics, and errors that
// name the key and the value.
#include <cstdio>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "comm/self/self_communicator.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "zs_config.h"

using namespace zeroshard;
using nlohmann::json;

namespace {

// The message of the ConfigError that parsing `text` throws ("" if none).
std::string error_of(const std::string& text) {
  try {
    EngineConfig::from_json(json::parse(text), "ds.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

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
  CHECK(c.optimizer.lr == 3e-4f);
  CHECK(c.optimizer.beta1 == 0.8f);
  CHECK(c.optimizer.beta2 == 0.99f);
  CHECK(c.optimizer.eps == 1e-6f);
  CHECK(c.optimizer.weight_decay == 0.1f);
  CHECK_NOTHROW(c.validate_for_world(4));
  CHECK_THROWS_AS(c.validate_for_world(3), ConfigError);
}

TEST_CASE("optimizer types: Adam is AdamW unless adam_w_mode is false (DeepSpeed); SGD") {
  auto kind = [](const std::string& t) { return EngineConfig::from_json(json::parse(t)).optimizer.kind; };
  CHECK(kind(R"({"optimizer": {"type": "Adam"}})") == OptimizerKind::adamw);
  CHECK(kind(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})") == OptimizerKind::adam);
  const EngineConfig s = EngineConfig::from_json(
      json::parse(R"({"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})"));
  CHECK(s.optimizer.kind == OptimizerKind::sgd);
  CHECK(s.optimizer.momentum == 0.9f);
  CHECK(s.optimizer.nesterov);
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
}
