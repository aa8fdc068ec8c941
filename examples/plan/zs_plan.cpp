// zs_plan: will it fit? Prints, for one rank, the bytes the Engine's memory
// ledger holds after finalize() per category and tier (the estimate of
// runtime/memory_estimate.h, equal to the ledger byte for byte), beside the
// ZeRO paper's model-state formulas and DeepSpeed's
// estimate_zero2/zero3_model_states_mem_needs, without allocating the model.
//
//   zs_plan --params 1.5e9 --units 48 --world 8 --config ds_config.json
//   zs_plan --model model.json --world 4 --config ds_config.json --rank 3
//   zs_plan --model model.safetensors --world 2
//
// --model reads a JSON description or a safetensors header
// (runtime/model_description.h); --params/--units generates P parameter
// elements in U equal units. Without --config: the default EngineConfig
// (stage 0, fp32, AdamW). --rank defaults to the rank with the most bytes
// (the highest one on a tie: it holds the padding).
// Exit status: 0, or 1 with a message on an error (unreadable model or
// config, invalid combination).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "core/error.h"
#include "examples/plan/plan_report.h"
#include "runtime/config.h"
#include "runtime/model_description.h"

int main(int argc, char** argv) {
  using namespace zeroshard;
  CLI::App app{"zs_plan: the memory an Engine's ledger holds per rank, estimated without allocating"};
  std::string model_path, config_path;
  double params = 0;
  int units = 0, world = 1;
  std::optional<int> rank;
  auto* model_opt = app.add_option("--model", model_path, "model description: JSON or .safetensors")
                        ->check(CLI::ExistingFile);
  auto* params_opt = app.add_option("--params", params, "generated model: parameter elements (e.g. 1.5e9)")
                         ->check(CLI::PositiveNumber);
  auto* units_opt = app.add_option("--units", units, "generated model: units")->check(CLI::PositiveNumber);
  params_opt->needs(units_opt)->excludes(model_opt);
  units_opt->needs(params_opt);
  app.add_option("--world", world, "data-parallel world size")->check(CLI::PositiveNumber);
  app.add_option("--config", config_path, "ds_config.json (default: stage 0, fp32, AdamW)")
      ->check(CLI::ExistingFile);
  app.add_option("--rank", rank, "rank to report (default: the one with the most bytes)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (model_path.empty() && params_opt->count() == 0) {
      throw zeroshard::ConfigError("give --model FILE or --params P --units U");
    }
    const ModelDescription model = model_path.empty()
                                       ? ModelDescription::generated(static_cast<std::uint64_t>(params), units)
                                       : ModelDescription::from_file(model_path);
    const std::string name =
        model_path.empty() ? fmt::format("generated ({:g} parameters, {} units)", params, units) : model_path;
    EngineConfig config;
    if (!config_path.empty()) {
      ConfigOptions options;
      options.world_size = world;
      config = EngineConfig::from_file(config_path, options);
    }
    const int r = rank.value_or(examples::largest_rank(model, config, world));
    if (r < 0 || r >= world) throw zeroshard::ConfigError(fmt::format("--rank {} outside a world of {}", r, world));
    fmt::print("{}", examples::plan_report(model, name, config, world, r));
  } catch (const std::exception& e) {
    fmt::print(stderr, "zs_plan: {}\n", e.what());
    return 1;
  }
  return 0;
}
