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
#include "runtime/sharding/flat_layout.h"
#include "tests/support/thrown.h"

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

TEST_CASE("sizes that would wrap are refused, naming the parameter") {
  using testing::error_message;
  // [2^32, 2^32] wraps to 0 elements in 64 bits.
  const std::string huge = R"({"units": [{"name": "u", "params": [{"name": "w", "shape": [4294967296, 4294967296]}]}]})";
  const std::string msg = error_message<ConfigError>([&] { (void)ModelDescription::from_json(huge, "m.json"); });
  CAPTURE(msg);
  CHECK(msg.find("m.json: units[0].params[0]: shape [4294967296,4294967296] has more than 2^63 - 1 elements") !=
        std::string::npos);
  // A zero dimension makes the product 0 whatever the others are.
  const std::string zero = R"({"units": [{"name": "u", "params": [{"name": "w", "shape": [4294967296, 4294967296, 0]}]}]})";
  CHECK(ModelDescription::from_json(zero, "z.json").parameter_count() == 0);
  // Each parameter fits, their sum does not.
  const std::string sum = R"({"units": [{"name": "u", "params": [{"name": "a", "shape": [4611686018427387904]},
      {"name": "b", "shape": [4611686018427387904]}]}]})";
  CHECK(error_message<ConfigError>([&] { (void)ModelDescription::from_json(sum, "s.json"); })
            .find("more than 2^63 - 1 parameter elements (at parameter \"b\")") != std::string::npos);
  // A dimension beyond int64.
  const std::string big = R"({"units": [{"name": "u", "params": [{"name": "w", "shape": [18446744073709551615]}]}]})";
  CHECK(error_message<ConfigError>([&] { (void)ModelDescription::from_json(big, "b.json"); })
            .find("must hold integers in [0, 2^63 - 1], not 18446744073709551615") != std::string::npos);
  // The layout refuses the same shapes from the Engine's side.
  FlatLayout l;
  const UnitId u = l.add_unit("u");
  CHECK(error_message<ConfigError>([&] { l.add_param(u, "w", {4294967296, 4294967296}, 0); }) ==
        "parameter \"w\": shape [4294967296, 4294967296] has more than 2^63 - 1 elements");
  l.add_param(u, "a", {std::int64_t{1} << 62}, 0);
  l.add_param(u, "b", {std::int64_t{1} << 62}, 0);
  CHECK(error_message<ConfigError>([&] { l.finalize(3); }).find("unit \"u\": its parameters hold more than") == 0);
}

TEST_CASE("a key or a name given twice is refused, not resolved to the last") {
  using testing::error_message;
  const std::string twice = R"({"units": [{"name": "a", "params": [{"name": "w", "shape": [2]}]}],
                                "units": [{"name": "b", "params": [{"name": "v", "shape": [3]}]}]})";
  const std::string m1 = error_message<ConfigError>([&] { (void)ModelDescription::from_json(twice, "t.json"); });
  CAPTURE(m1);
  CHECK(m1.find("t.json: key \"units\" appears twice") == 0);
  const std::string names = R"({"units": [{"name": "a", "params": [{"name": "w", "shape": [2]}]},
                                          {"name": "b", "params": [{"name": "w", "shape": [3]}]}]})";
  CHECK(error_message<ConfigError>([&] { (void)ModelDescription::from_json(names, "n.json"); }) ==
        "n.json: parameter \"w\" appears twice (units[0].params[0] and units[1].params[0]); each parameter name "
        "may be given once");
  const std::string header = R"({"x.w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "x.w": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]}})";
  const std::string m3 = error_message<ConfigError>([&] { (void)ModelDescription::from_safetensors_header(header, "h"); });
  CAPTURE(m3);
  CHECK(m3.find("h (safetensors header): key \"x.w\" appears twice") == 0);
}

TEST_CASE("parameter names are found by hash: a million units lay out") {
  // find_param was a linear scan: 1e5 units took 86 s. Now each add is
  // O(1); the time is bench/plan's, the result is checked here.
  FlatLayout l;
  const int units = 1'000'000;
  for (int i = 0; i < units; ++i) {
    const UnitId u = l.add_unit("layer" + std::to_string(i));
    l.add_param(u, "layer" + std::to_string(i) + ".w", {3}, 0);
  }
  l.finalize(3);
  CHECK(l.find_param("layer999999.w") == units - 1);
  CHECK(l.find_param("layer0.w") == 0);
  CHECK(l.find_param("absent") == -1);
  CHECK(l.total_numel() == 3u * units);
  CHECK(l.units().back().shard == 16);  // 3 elements padded to 3 x 16
}
