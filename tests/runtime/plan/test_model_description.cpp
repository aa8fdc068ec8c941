// Model descriptions (runtime/plan/model_description.h): the JSON form, the unit
// rule of safetensors headers, generated models, and their errors.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/plan/model_description.h"
#include "runtime/checkpoint/safetensors_writer.h"

using namespace zeroshard;
namespace fs = std::filesystem;

TEST_CASE("the JSON form lists units, parameters, shapes and groups") {
  const ModelDescription m = ModelDescription::from_json(
      R"({"units": [{"name": "embed", "params": [{"name": "embed.w", "shape": [10, 3]}]},
                    {"name": "head", "params": [{"name": "head.w", "shape": [3, 7], "group": 1},
                                                {"name": "head.s", "shape": []}]}]})",
      "m.json");
  REQUIRE(m.units.size() == 2);
  CHECK(m.units[1].params[0].group == 1);
  CHECK(m.parameter_count() == 30 + 21 + 1);
  CHECK(m.group_count() == 2);
  const FlatLayout l = m.layout(3);
  CHECK(l.unit(0).padded == 48);  // 30 -> a multiple of 3 x 16
  CHECK(l.unit(1).shard == 16);
  CHECK_THROWS_AS(ModelDescription::from_json("{", "bad.json"), ConfigError);
  CHECK_THROWS_AS(ModelDescription::from_json(R"({"units": [{"name": "u"}]})", "bad.json"), ConfigError);
  CHECK_THROWS_AS(
      ModelDescription::from_json(R"({"units": [{"name": "u", "params": [{"name": "p", "shape": [-1]}]}]})", "b"),
      ConfigError);
}

TEST_CASE("safetensors tensors go to the unit of their module prefix") {
  CHECK(safetensors_unit_of("layers.3.attn.q.weight") == "layers.3");
  CHECK(safetensors_unit_of("model.layers.10.mlp.w1") == "model.layers.10");
  CHECK(safetensors_unit_of("model.embed_tokens.weight") == "model.embed_tokens");
  CHECK(safetensors_unit_of("lm_head.weight") == "lm_head");
  CHECK(safetensors_unit_of("scale") == "scale");
  // A file written by the runtime's safetensors planner: units in file order.
  std::vector<SafetensorsEntry> t;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
           {"embed.weight", {5, 4}}, {"layers.0.w", {4, 4}}, {"layers.0.b", {4}}, {"layers.1.w", {4, 4}},
           {"head.weight", {4, 5}}}) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    t.push_back(SafetensorsEntry{.name = name, .dtype = DType::bf16, .shape = shape, .numel = n});
  }
  const SafetensorsPlan plan = plan_safetensors({{"format", "pt"}}, t);
  const fs::path path = fs::temp_directory_path() / "zs-test-model-description.safetensors";
  {
    std::ofstream out(path, std::ios::binary);
    std::uint64_t len = plan.header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << plan.header;
    out << std::string(plan.data_bytes, '\0');
  }
  const ModelDescription m = ModelDescription::from_file(path.string());
  fs::remove(path);
  REQUIRE(m.units.size() == 4);
  CHECK(m.units[0].name == "embed");
  CHECK(m.units[1].name == "layers.0");
  CHECK(m.units[1].params.size() == 2);
  CHECK(m.units[1].params[1].name == "layers.0.b");
  CHECK(m.units[3].name == "head");
  CHECK(m.parameter_count() == 20 + 16 + 4 + 16 + 20);
  CHECK_THROWS_AS(ModelDescription::from_safetensors("/nonexistent/x.safetensors"), IoError);
}

TEST_CASE("a generated model spreads P parameters over U units") {
  const ModelDescription m = ModelDescription::generated(10, 4);
  REQUIRE(m.units.size() == 4);
  CHECK(m.units[0].params[0].shape == std::vector<std::int64_t>{3});
  CHECK(m.units[3].params[0].shape == std::vector<std::int64_t>{2});
  CHECK(m.parameter_count() == 10);
  CHECK_THROWS_AS(ModelDescription::generated(10, 0), ConfigError);
}
