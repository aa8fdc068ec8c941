// zs_plan's report: see tools/plan/plan_report.h.
#include "tools/plan/plan_report.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "runtime/plan/cost_model.h"
#include "runtime/plan/zero_formulas.h"

namespace zeroshard::tools {

namespace {

std::string bytes_text(std::uint64_t b) { return fmt::format("{:>15} ({})", b, format_bytes(b)); }

// "rank 3" or "ranks 0-2": the ranks [begin, end).
std::string rank_range(int begin, int end) {
  return end - begin == 1 ? fmt::format("rank {}", begin) : fmt::format("ranks {}-{}", begin, end - 1);
}

// The roles of a parameter-server job and each role's model states beside
// the all-reduce engine's at W ranks, for the report of `est` (the rank's
// estimate).
std::string parameter_server_text(const ModelDescription& model, const EngineConfig& config, int world,
                                  const MemoryEstimate& est) {
  const int servers = static_cast<int>(config.parameter_server.servers);
  const int workers = world - servers;
  EngineConfig plain = config;
  plain.parameter_server = ParameterServerConfig{};
  const FlatLayout layout = model.layout(workers);
  const int shown = std::max(est.server, 0);  // the rank's server, else server 0
  const bool direct = config.parameter_server.direct();
  const std::size_t hosted = direct ? workers : ps_hosted_workers(workers, servers, shown).size();
  const auto bytes = [&](int r) { return estimate_memory(model, config, world, r).after_finalize.model_state_bytes(); };
  const std::uint64_t worker = bytes(workers - 1), server = bytes(workers + shown);
  const std::uint64_t alone = estimate_memory(layout, plain, workers - 1).after_finalize.model_state_bytes();
  std::string out = fmt::format(
      "parameter-server job (parameter_server.servers = {}): {} train, {} serve (the default placement, the last "
      "ranks; placement hosts choose others); {}\n",
      servers, rank_range(0, workers), rank_range(workers, world),
      direct ? fmt::format("push \"direct\": each worker trains alone and sends window s of its gradient to server "
                           "s, which holds 1/{} of the fp32 parameters and optimizer states and applies every push "
                           "as one update",
                           servers)
             : fmt::format("server s holds the optimizer shards of the workers w with w % {} == s", servers));
  if (!config.parameter_server.placement.empty()) {
    out +=
        "(parameter_server.placement names hosts: at run time the servers are the ranks on them; the figures "
        "per role are the same)\n";
  }
  if (est.server < 0) {
    out += fmt::format("this rank is worker {} of {}\n\n", est.rank, workers);
  } else if (direct) {
    out += fmt::format("this rank is server {}, holding window {} of {} for every worker\n\n", est.server, est.server,
                       servers);
  } else if (est.hosted_workers.empty()) {
    out += fmt::format(
        "this rank is server {}, holding no worker: with more servers than workers ({} > {}) the "
        "servers past the first {} hold nothing\n\n",
        est.server, servers, workers, workers);
  } else {
    out +=
        fmt::format("this rank is server {}, holding workers {}\n\n", est.server, fmt::join(est.hosted_workers, ", "));
  }
  out += "model states per rank by role (bytes, all tiers):\n";
  out += fmt::format("  {:<58} {}\n", fmt::format("worker (last of {}): parameters and gradients", workers),
                     bytes_text(worker));
  out += fmt::format("  {:<58} {}\n",
                     direct ? fmt::format("server {}: its window of the fp32 parameters and states", shown)
                            : fmt::format("server {}: {} worker{}' fp32 shards and optimizer states", shown, hosted,
                                          hosted == 1 ? "" : "s"),
                     bytes_text(server));
  out += fmt::format("  {:<58} {}\n", fmt::format("all-reduce engine at {} ranks, same config (last rank)", workers),
                     bytes_text(alone));
  return out;
}

}  // namespace

int largest_rank(const ModelDescription& model, const EngineConfig& config, int world) {
  // Every array is a unit's padded buffer or its 1/world shard, so the
  // ranks hold the same bytes and differ only in which elements are
  // padding: the last rank's shards hold each unit's tail. Comparing the
  // first and the last rank is then exact, where laying out every rank
  // took time linear in the world size (87 s for 1e7 ranks).
  if (config.parameter_server.enabled()) {
    // The last worker (its shards hold the padding) or a server: server 0
    // holds the most workers, the last server may hold the padded one.
    const int workers = world - static_cast<int>(config.parameter_server.servers);
    int best = -1;
    std::uint64_t most = 0;
    for (int r : {workers - 1, workers, world - 1}) {
      const std::uint64_t total = estimate_memory(model, config, world, r).after_finalize.current_total();
      if (best < 0 || total >= most) {
        best = r;
        most = total;
      }
    }
    return best;
  }
  const FlatLayout layout = model.layout(world);
  const std::uint64_t first = estimate_memory(layout, config, 0).after_finalize.current_total();
  const std::uint64_t last = estimate_memory(layout, config, world - 1).after_finalize.current_total();
  return first > last ? 0 : world - 1;
}

double link_rate_bytes(const std::string& rate) {
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(rate, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  const std::string unit = rate.substr(end);
  const std::pair<const char*, double> units[] = {{"bit", 1.0 / 8}, {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8},
                                                  {"gbit", 1e9 / 8}, {"bps", 1.0}};
  for (const auto& [name, bytes] : units) {
    if (end > 0 && unit == name && value > 0) return value * bytes;
  }
  throw ConfigError(fmt::format("link rate \"{}\": give a positive number with bit, kbit, mbit, gbit or bps "
                                "(e.g. 100mbit)",
                                rate));
}

std::string plan_report(const ModelDescription& model, const std::string& model_name, const EngineConfig& config,
                        int world, int rank, int ranks_per_node) {
  const MemoryEstimate est = estimate_memory(model, config, world, rank, ranks_per_node);
  const MemoryLedger& l = est.after_finalize;
  const int stage = config.zero.stage;
  const bool mixed = config.compute_dtype != DType::f32;
  const int states = optimizer_state_count(config.optimizer);
  const std::uint64_t psi = est.parameter_count, e = dtype_size(config.compute_dtype);
  std::uint64_t largest_layer = 0;  // parameter elements of the largest unit (DeepSpeed's largest layer)
  for (const UnitDescription& u : model.units) {
    ModelDescription one{.units = {u}};
    largest_layer = std::max(largest_layer, one.parameter_count());
  }
  std::string out;
  out += fmt::format("model {}: {} parameters in {} units (largest unit {} elements, {} padded)\n", model_name, psi,
                     model.units.size(), largest_layer, est.largest_unit);
  const StateFormat& sf = config.optimizer.states;
  const std::string state_text =
      sf.dtype == StateDtype::q8
          ? fmt::format("{} 8-bit states, block {}, fp32 below {} elements", states, sf.block_size, sf.min_8bit_size)
          : fmt::format("{} {} state arrays", states, state_dtype_name(sf.dtype));
  out += fmt::format("config {}: ZeRO stage {}, {}, {} ({}), offload optimizer {}, param {}\n",
                     config.source, stage, dtype_name(config.compute_dtype), optimizer_type_name(config.optimizer),
                     state_text, offload_device_name(config.offload.optimizer.device),
                     offload_device_name(config.offload.param.device));
  if (config.parameter_server.enabled()) out += parameter_server_text(model, config, world, est);
  out += l.table(fmt::format("memory ledger after finalize(), rank {} of {} (bytes):", rank, world));
  out += fmt::format("total: device {}, host {}, nvme {}\n", l.current_total(MemTier::device),
                     l.current_total(MemTier::host), l.current_total(MemTier::nvme));
  const MemoryLedger& s = est.after_step;
  out += fmt::format("peak during a training step (the ledger after one step: gathered units, gradient buckets, "
                     "staging included): device {}, host {}, nvme {}; transient buffers at their peak {}\n\n",
                     s.peak_total(MemTier::device), s.peak_total(MemTier::host), s.peak_total(MemTier::nvme),
                     bytes_text(s.peak(MemCategory::unsharded)));

  // The published formulas are for ranks that all train.
  if (config.parameter_server.enabled()) {
    if (ranks_per_node > 0 && ranks_per_node < world) {
      out +=
          "\nbetween hosts: not modelled for a parameter-server job (its pushes and pulls go between the "
          "workers' and the servers' hosts); the ps bench measures them (bench/ps/README.md)\n";
    }
    return out;
  }

  // Side by side: model states per rank.
  const double k = state_bytes_per_element(sf, states) + (mixed ? 4.0 : 0.0);
  const ZeroPaperBytes paper = zero_paper_bytes(stage, world, static_cast<double>(e), k);
  const auto paper_bytes = static_cast<std::uint64_t>(paper.total() * static_cast<double>(psi) + 0.5);
  const bool opt_off = config.offload.optimizer.device != OffloadDevice::none;
  const bool param_off = config.offload.param.device != OffloadDevice::none;
  out += fmt::format("model states per rank, side by side (bytes):\n");
  out += fmt::format("  {:<58} {}\n", "zeroshard (ledger estimate, all tiers)", bytes_text(l.model_state_bytes()));
  out += fmt::format("  {:<58} {}\n", "  of which padding", bytes_text(l.model_state_padding()));
  out += fmt::format("  {:<58} {}\n",
                     fmt::format("ZeRO paper: {:g}+{:g}+{:g} = {:g} B/param", paper.parameters, paper.gradients,
                                 paper.optimizer, paper.total()),
                     bytes_text(paper_bytes));
  if (stage == 0) {
    out += "  DeepSpeed: no estimator for stage 0\n";
  } else {
    const DeepSpeedEstimate ds =
        stage < 3 ? deepspeed_zero2_estimate(psi, world, opt_off)
                  : deepspeed_zero3_estimate(psi, largest_layer, world, opt_off, param_off);
    const char* fn = stage < 3 ? "estimate_zero2_model_states_mem_needs" : "estimate_zero3_model_states_mem_needs";
    out += fmt::format("  {:<58} {}\n", fmt::format("DeepSpeed {} GPU", fn), bytes_text(ds.gpu));
    out += fmt::format("  {:<58} {}\n", "  zeroshard device tier (model states)",
                       bytes_text(l.model_state_bytes() - l.current_total(MemTier::host) - l.current_total(MemTier::nvme)));
    out += fmt::format("  {:<58} {}\n", fmt::format("DeepSpeed {} CPU", fn), bytes_text(ds.cpu));
    out += fmt::format("  {:<58} {}\n", "  zeroshard host tier", bytes_text(l.current_total(MemTier::host)));
  }
  out += "where they differ:\n";
  out += fmt::format("  - padding: each unit is padded to a multiple of {} x {} elements and every rank holds "
                     "padded / {} of it: {} padding elements in all, {} bytes of them in this rank's arrays (the "
                     "last ranks' shards hold the padding); the formulas have none\n",
                     world, kShardAlignElements, world, est.padded_count - psi, l.model_state_padding());
  if (l.current(MemCategory::grad_accumulator) > 0) {
    out += fmt::format("  - the fp32 gradient accumulator of mixed precision (data_types.grad_accum_dtype, DeepSpeed "
                       "#1800) holds {} bytes on this rank: {}; the formulas count {}-byte gradients\n",
                       l.current(MemCategory::grad_accumulator),
                       stage < 2 ? fmt::format("4 B per padded element beside the {}-byte gradient buffer", e)
                                 : fmt::format("4 B per shard element in place of a {}-byte gradient shard", e),
                       e);
  }
  if (stage == 3) {
    out += fmt::format("  - stage 3 gathers one unit at a time during a step: the largest unit's full buffer is {} "
                       "bytes ({} padded elements x {} B), in the step's peak; DeepSpeed counts 4 "
                       "B per parameter of the largest layer ({} bytes) on the GPU\n",
                       est.largest_unit * e, est.largest_unit, e, 4 * largest_layer);
  }
  if (stage >= 1) {
    out += "  - DeepSpeed's CPU figure is for the whole node (all GPUs' processes) with additional_buffer_factor "
           "1.5; zeroshard's host tier is this rank's arrays, buffers excluded\n";
  }
  out += "  - transient buffers of a step (gradient buckets, staging, gathered units) are in the peak during a "
         "step above, not in the figures after finalize(); the formulas have none\n";
  if (ranks_per_node > 0 && ranks_per_node < world) {
    const CrossHostTraffic t = cross_host_traffic(model.layout(world), config, ranks_per_node);
    out += fmt::format("\nbetween hosts of {} ranks, a steady step moves {} over all ranks: parameter gathers {}, "
                       "gradient reduction {}, the norm {}\n",
                       ranks_per_node, bytes_text(t.total()), format_bytes(t.parameter_gathers),
                       format_bytes(t.gradient_reduction), format_bytes(t.norm));
  }
  return out;
}

}  // namespace zeroshard::tools
