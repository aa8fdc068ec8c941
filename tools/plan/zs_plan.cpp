// zs_plan: will it fit, and how fast? Four modes.
//
// The estimate (default): prints, for one rank, the bytes the Engine's
// memory ledger holds after finalize() per category and tier (the estimate
// of runtime/plan/memory_estimate.h, equal to the ledger byte for byte), beside
// the ZeRO paper's model-state formulas and DeepSpeed's
// estimate_zero2/zero3_model_states_mem_needs, without allocating the model.
//   zs_plan --params 1.5e9 --units 48 --world 8 --config ds_config.json
//   zs_plan --model model.json --world 4 --config ds_config.json --rank 3
//   zs_plan --model model.safetensors --world 2
//
// Calibration: measures this machine's rates (runtime/plan/calibrate.h) at the
// world size it runs at and writes them as JSON (rank 0, atomically).
//   mpirun -np 4 zs_plan --calibrate calib.json [--nvme-path /mnt/nvme]
//
// The plan (any --budget-* given): the configurations that fit the budget
// per rank, ranked by predicted step time (with --calibration) and the
// rejected ones with the reason; --write-config writes the chosen one
// ([Note: planner] in runtime/plan/planner.h).
//   zs_plan --model model.json --world 4 --config base.json
//       --budget-device 8GiB --budget-host 20GiB --nvme-free 60GiB --nvme-path /mnt/nvme
//       --calibration calib.json --loop-ms-per-sample 2.5
//       --activation-bytes-per-sample 30MiB --micro-batch 1,2,4,8 --global-batch 256
//       --write-config ds_config.json
// (one command). Across hosts, --ranks-per-node L (hosts of L consecutive
// ranks) adds ZeRO++'s candidates (qwZ, hpZ over a host, qgZ) and, with
// --link-rate (100mbit, 1gbit, ...), predicts their time over the link:
//   zs_plan --params 2e8 --units 24 --world 16 --config base.json
//       --budget-device 16GiB --calibration calib.json --loop-ms-per-sample 1
//       --ranks-per-node 8 --link-rate 100mbit
// In the estimate mode --ranks-per-node adds the bytes a step moves
// between hosts.
//
// The cluster plan (--cluster given): a transformer laid over a GPU cluster
// described in JSON (runtime/cluster_plan/cluster_description.h;
// tools/plan/clusters has real ones), every dp x tp x pp mesh, ZeRO stage,
// offload, micro-batch and recomputation ([Note: mesh search] in
// runtime/cluster_plan/mesh_search.h), the ones that fit ranked by tokens a
// second, with the time (and, with a price, the cost) to train --tokens:
//   zs_plan --cluster tools/plan/clusters/h100x64.json
//       --transformer kind=llama,layers=32,hidden=4096,heads=32,kv_heads=8,seq=8192,vocab=128256,ffn=14336
//       --global-batch 512 --tokens 1e12
// --transformer takes key=value pairs or a JSON file of the same keys.
//
// --model reads a JSON description or a safetensors header
// (runtime/plan/model_description.h); --params/--units generates P parameter
// elements in U equal units. Without --config: the default EngineConfig
// (stage 0, fp32, AdamW). Sizes take binary units (8GiB, 512MiB) or plain
// bytes. Exit status: 0; 1 with a message on an error (unreadable model,
// config or calibration, invalid combination); 2 when nothing fits the
// budget (the plan says what the smallest footprint needs).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/config/config_diagnostics.h"
#include "runtime/plan/calibrate.h"
#include "runtime/plan/model_description.h"
#include "runtime/plan/planner.h"
#include "tools/plan/cluster_report.h"
#include "tools/plan/plan_report.h"
#include "tools/plan/transformer_model.h"

namespace {

using namespace zeroshard;

int calibrate_mode(const std::string& out_path, const std::string& nvme_path) {
  auto comm = make_world_communicator();
  CalibrateOptions o;
  o.nvme_path = nvme_path;
  const MachineRates r = calibrate(*comm, o);
  if (comm->rank() == 0) {
    write_file_atomic(out_path, r.to_json().dump(2) + "\n");
    fmt::print("calibration: {} ranks, {} kernel threads ({}): optimizer {:.2f} GB/s", r.world_size, r.threads, r.isa,
               r.optimizer_bandwidth / 1e9);
    if (r.disk_write > 0) fmt::print(", disk write {:.2f} GB/s, read {:.2f} GB/s", r.disk_write / 1e9, r.disk_read / 1e9);
    if (!r.all_gather.bytes.empty()) {
      fmt::print(", all-gather of {:.0f} MiB {:.2f} ms", r.all_gather.bytes.back() / (1 << 20),
                 r.all_gather.seconds.back() * 1e3);
    }
    fmt::print("\nwrote {}\n", out_path);
  }
  return 0;
}

int cluster_mode(const std::string& cluster_path, const std::string& transformer,
                 std::optional<std::int64_t> global_batch, const std::vector<std::int64_t>& micro_batches,
                 std::optional<double> tokens, int top) {
  MeshSearchRequest r;
  r.cluster = ClusterDescription::from_file(cluster_path);
  r.model = tools::read_transformer(transformer);
  if (!global_batch) throw ConfigError("--cluster needs --global-batch (sequences per optimizer step)");
  r.global_batch = *global_batch;
  if (!micro_batches.empty()) r.micro_batches = micro_batches;
  r.source = cluster_path;
  if (r.cluster.compute_efficiency) r.constants.compute_efficiency = *r.cluster.compute_efficiency;
  const MeshSearchResult res = search_mesh_plans(r);
  fmt::print("{}", tools::cluster_plan_text(r, res, tokens, top));
  return res.fits.empty() ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zs_plan: the memory an Engine's ledger holds per rank, a plan for a budget, a calibration, a plan "
               "for a GPU cluster"};
  std::string model_path, config_path, calibrate_path, calibration_path, nvme_path, write_path;
  double params = 0, loop_ms = 0;
  int units = 0, world = 1;
  std::optional<int> rank;
  std::uint64_t budget_device = 0, budget_host = 0, nvme_free = 0, activations = 0;
  std::vector<std::int64_t> micro_batches;
  std::optional<std::int64_t> global_batch;
  int ranks_per_node = 0;
  std::string link_rate, cluster_path, transformer;
  std::optional<double> tokens;
  int top = 10;
  auto* model_opt = app.add_option("--model", model_path, "model description: JSON or .safetensors")
                        ->check(CLI::ExistingFile);
  auto* params_opt = app.add_option("--params", params, "generated model: parameter elements (e.g. 1.5e9)")
                         ->check(CLI::PositiveNumber);
  auto* units_opt = app.add_option("--units", units, "generated model: units")->check(CLI::PositiveNumber);
  params_opt->needs(units_opt)->excludes(model_opt);
  units_opt->needs(params_opt);
  app.add_option("--world", world, "data-parallel world size")->check(CLI::PositiveNumber);
  app.add_option("--config", config_path, "ds_config.json (default: stage 0, fp32, AdamW); the plan's base")
      ->check(CLI::ExistingFile);
  app.add_option("--rank", rank, "rank to report (default: the one with the most bytes)");
  auto* calibrate_opt = app.add_option("--calibrate", calibrate_path, "measure this machine's rates into this file");
  app.add_option("--nvme-path", nvme_path, "directory for nvme swap (calibration's disk probe; plan's nvme candidates)")
      ->check(CLI::ExistingDirectory);
  auto* dev_opt = app.add_option("--budget-device", budget_device, "plan: device bytes per rank")
                      ->transform(CLI::AsSizeValue(false));
  auto* host_opt = app.add_option("--budget-host", budget_host, "plan: host bytes per rank for offloaded state")
                       ->transform(CLI::AsSizeValue(false));
  auto* nvme_opt = app.add_option("--nvme-free", nvme_free, "plan: free nvme bytes per rank under --nvme-path")
                       ->transform(CLI::AsSizeValue(false));
  app.add_option("--calibration", calibration_path, "plan: rates from zs_plan --calibrate (ranks by step time)")
      ->check(CLI::ExistingFile);
  app.add_option("--loop-ms-per-sample", loop_ms, "plan: the loop's forward + backward milliseconds per sample")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--activation-bytes-per-sample", activations, "plan: activation bytes per sample")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--micro-batch", micro_batches, "plan: micro-batch candidates")->delimiter(',');
  app.add_option("--global-batch", global_batch, "plan: samples per optimizer step over all ranks");
  app.add_option("--write-config", write_path, "plan: write the chosen ds_config here");
  app.add_option("--ranks-per-node", ranks_per_node,
                 "plan: ranks per host (hosts of that many consecutive ranks; ZeRO++'s candidates across hosts)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--link-rate", link_rate,
                 "plan: each host's link, as tc writes rates (100mbit, 1gbit, 10gbit): the time of the bytes "
                 "between hosts (needs --calibration and --ranks-per-node)");
  calibrate_opt->excludes(dev_opt)->excludes(host_opt)->excludes(nvme_opt);
  auto* cluster_opt = app.add_option("--cluster", cluster_path, "cluster plan: a GPU cluster description (JSON)")
                          ->check(CLI::ExistingFile);
  auto* transformer_opt = app.add_option(
      "--transformer", transformer,
      "the model as a decoder's shape, key=value,... or a JSON file (the cluster plan's model; elsewhere the "
      "estimate's and plan's, its activations per sample from the shape)");
  bool checkpointing = false;
  auto* checkpointing_opt = app.add_flag(
      "--activation-checkpointing", checkpointing,
      "with --transformer: the loop keeps each layer's input and recomputes the layer (the activations per sample)");
  auto* tokens_opt = app.add_option("--tokens", tokens, "cluster plan: tokens to train (time and cost to train)")
                         ->check(CLI::PositiveNumber);
  auto* top_opt = app.add_option("--top", top, "cluster plan: plans to list (default 10)")->check(CLI::PositiveNumber);
  cluster_opt->needs(transformer_opt)->excludes(model_opt)->excludes(params_opt)->excludes(calibrate_opt);
  transformer_opt->excludes(model_opt)->excludes(params_opt);
  checkpointing_opt->needs(transformer_opt)->excludes(cluster_opt);
  tokens_opt->needs(cluster_opt);
  top_opt->needs(cluster_opt);
  CLI11_PARSE(app, argc, argv);
  try {
    if (!calibrate_path.empty()) return calibrate_mode(calibrate_path, nvme_path);
    if (!cluster_path.empty()) return cluster_mode(cluster_path, transformer, global_batch, micro_batches, tokens, top);
    if (model_path.empty() && params_opt->count() == 0 && transformer.empty()) {
      throw ConfigError("give --model FILE, --params P --units U or --transformer SHAPE");
    }
    std::optional<tools::TransformerModel> shaped;
    if (!transformer.empty()) shaped = tools::transformer_model(transformer, checkpointing);
    const ModelDescription model = shaped ? shaped->model
                                   : model_path.empty()
                                       ? ModelDescription::generated(static_cast<std::uint64_t>(params), units)
                                       : ModelDescription::from_file(model_path);
    const std::string name = shaped               ? fmt::format("--transformer {}", transformer)
                             : model_path.empty() ? fmt::format("generated ({:g} parameters, {} units)", params, units)
                                                  : model_path;
    const bool planning = dev_opt->count() + host_opt->count() + nvme_opt->count() > 0;
    if (planning) {
      PlanRequest req;
      req.model = model;
      req.world_size = world;
      if (!config_path.empty()) req.base_config = parse_config_text(read_text_file(config_path), config_path);
      req.nvme_path = nvme_path;
      req.budget = {budget_device, budget_host, nvme_free};
      req.activation_bytes_per_sample = activations;
      if (shaped) {
        if (activations > 0) {
          throw ConfigError(
              "--activation-bytes-per-sample and --transformer: give one (the shape gives the "
              "activations)");
        }
        req.activation_bytes_per_sample = shaped->activation_bytes_per_sample;
        fmt::print("{}\n", shaped->describe());
      }
      req.micro_batches = micro_batches;
      req.global_batch = global_batch;
      if (!calibration_path.empty()) req.rates = MachineRates::from_file(calibration_path);
      req.ranks_per_node = ranks_per_node;
      if (!link_rate.empty()) {
        if (!req.rates) throw ConfigError("--link-rate needs --calibration (the rates it is added to)");
        req.rates->link_bandwidth = tools::link_rate_bytes(link_rate);
      }
      req.loop_seconds_per_sample = loop_ms / 1e3;
      const Plan plan = make_plan(req);
      fmt::print("model {}: {} parameters in {} units\n{}", name, model.parameter_count(), model.units.size(),
                 plan_text(req, plan));
      if (plan.chosen() == nullptr) return 2;
      if (!write_path.empty()) {
        write_file_atomic(write_path, plan.chosen()->ds_config.dump(2) + "\n");
        fmt::print("wrote {}\n", write_path);
      }
      return 0;
    }
    EngineConfig config;
    if (!config_path.empty()) {
      ConfigOptions options;
      // The batch keys count the ranks that train: the world less the
      // servers, which a read without the batch arithmetic gives.
      const std::int64_t servers = EngineConfig::from_file(config_path, options).parameter_server.servers;
      options.world_size = ps_training_ranks(servers, world, config_path);
      try {
        config = EngineConfig::from_file(config_path, options);
      } catch (const ConfigError& e) {
        if (servers <= 0) throw;
        throw ConfigError(
            fmt::format("{} (with {} parameter server{}, the world size here is the {} ranks that "
                        "train: --world {} less the servers)",
                        e.what(), servers, servers == 1 ? "" : "s", world - servers, world));
      }
    }
    const int r = rank.value_or(tools::largest_rank(model, config, world));
    if (r < 0 || r >= world) throw ConfigError(fmt::format("--rank {} outside a world of {}", r, world));
    fmt::print("{}", tools::plan_report(model, name, config, world, r, ranks_per_node));
    if (shaped) {
      const auto micro = static_cast<std::uint64_t>(config.train_micro_batch_size_per_gpu);
      fmt::print("{}\nactivations of a micro-batch of {} (train_micro_batch_size_per_gpu): {}\n", shaped->describe(),
                 micro, format_bytes(shaped->activation_bytes_per_sample * micro));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "zs_plan: {}\n", e.what());
    return 1;
  }
  return 0;
}
