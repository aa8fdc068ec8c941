// The Engine configuration of an example program from its command-line
// flags: a ds_config file (--config, DeepSpeed keys) whose "auto" values the
// program fills from its own settings by HF Trainer's rules
// (ConfigOptions::from_program), or the program's defaults overridden by the
// same flags. Shared by examples/fashion_mnist and examples/gpt. Header-only.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard::examples {

/// The configuration flags an example program takes (CLI11 fills them).
/// Plain value type.
struct ConfigFlags {
  std::string config_path;                  ///< --config ("": the program's defaults)
  int stage = -1;                           ///< --stage; -1: from the config or the defaults
  std::optional<std::int64_t> micro_batch;  ///< --micro-batch: fills "auto" train_micro_batch_size_per_gpu
  /// --gradient-accumulation-steps: fills "auto" gradient_accumulation_steps
  std::optional<std::int64_t> accumulation;
  std::optional<double> lr;                 ///< --lr: fills "auto" optimizer.params.lr
  std::vector<std::string> fills;           ///< --fill KEY=JSON: fills "auto" KEY
  /// --bf16 / --fp16: the program's precision; fills "auto" bf16.enabled /
  /// fp16.enabled, and without --config sets the compute dtype.
  DType precision = DType::f32;
  /// --warmup-steps: fills "auto" scheduler.params.warmup_num_steps.
  std::int64_t warmup_steps = 0;
  bool breakdown = false;                   ///< --breakdown: sets wall_clock_breakdown
  std::string trace_dir;                    ///< --trace DIR: zeroshard.trace on, output_path DIR
  /// --calibration FILE (zs_plan --calibrate): the program prints the
  /// predicted step time beside the measured one; sets wall_clock_breakdown.
  std::string calibration_path;
};

/// AdamW (beta1 0.9, eps 1e-8) with the given micro-batch (sequences or
/// images per rank), learning rate, beta2 and weight decay; no gradient
/// accumulation, gradient clipping 1, ZeRO stage 3. What an example trains
/// with when no --config is given. Never throws.
inline EngineConfig adamw_job_defaults(std::int64_t micro_batch, double lr, double beta2, double weight_decay) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = micro_batch;
  c.gradient_accumulation_steps = 1;
  c.gradient_clipping = 1.0;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = lr;
  c.optimizer.beta1 = 0.9;
  c.optimizer.beta2 = beta2;
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = weight_decay;
  c.zero.stage = 3;
  return c;
}

/// What the program knows for "auto" (ConfigOptions::from_program): the
/// hyper-parameters of `defaults` (what it trains with without --config)
/// with --micro-batch, --gradient-accumulation-steps, --lr, --bf16 / --fp16
/// and --warmup-steps over them, at `world_size`. The caller adds the
/// model's hidden size. Never throws.
inline ProgramValues program_values(const ConfigFlags& f, const EngineConfig& defaults, int world_size) {
  ProgramValues p;
  p.micro_batch = f.micro_batch.value_or(defaults.train_micro_batch_size_per_gpu);
  p.gradient_accumulation = f.accumulation.value_or(defaults.gradient_accumulation_steps);
  p.lr = f.lr.value_or(defaults.optimizer.lr);
  p.beta1 = defaults.optimizer.beta1;
  p.beta2 = defaults.optimizer.beta2;
  p.eps = defaults.optimizer.eps;
  p.weight_decay = defaults.optimizer.weight_decay;
  p.gradient_clipping = defaults.gradient_clipping;
  p.precision = f.precision != DType::f32 ? f.precision : defaults.compute_dtype;
  p.world_size = world_size;
  p.warmup_steps = f.warmup_steps;
  return p;
}

/// The fills of --config's "auto" keys: ConfigOptions::from_program(p),
/// then each --fill KEY=JSON over it (a --fill wins). Throws ConfigError
/// naming --fill for a value that is not KEY=JSON.
inline ConfigOptions config_fills(const ConfigFlags& f, const ProgramValues& p) {
  ConfigOptions fill = ConfigOptions::from_program(p);
  for (const std::string& kv : f.fills) {
    const std::size_t eq = kv.find('=');
    const nlohmann::json v =
        eq == std::string::npos ? nlohmann::json() : nlohmann::json::parse(kv.substr(eq + 1), nullptr, false);
    if (eq == std::string::npos || v.is_discarded()) {
      throw ConfigError(fmt::format("--fill \"{}\": expected KEY=JSON, e.g. optimizer.params.betas=[0.9,0.999]", kv));
    }
    fill.fill(kv.substr(0, eq), v, "--fill");
  }
  return fill;
}

/// The job's parameter_server.servers: `servers_flag` when given (>= 0),
/// else the integer --config's JSON has there, else 0. Taken before the
/// file is read whole, as its batch keys count only the ranks that train;
/// that read checks the key (a wrong type is its error). Throws
/// ConfigError for a file that is not JSON, naming
/// parameter_server.servers when no rank of `world_size` would train;
/// IoError for an unreadable file.
inline std::int64_t job_servers(const ConfigFlags& f, std::int64_t servers_flag, int world_size) {
  std::int64_t servers = servers_flag;
  if (servers < 0 && !f.config_path.empty()) {
    const nlohmann::json doc = parse_config_text(read_text_file(f.config_path), f.config_path);
    const nlohmann::json* v = nullptr;
    if (doc.is_object() && doc.contains("parameter_server") && doc["parameter_server"].is_object() &&
        doc["parameter_server"].contains("servers")) {
      v = &doc["parameter_server"]["servers"];
    }
    servers = v != nullptr && v->is_number_integer() ? v->get<std::int64_t>() : 0;
  }
  const bool from_file = servers_flag < 0 && servers > 0;
  return world_size - ps_training_ranks(servers, world_size, from_file ? f.config_path : "");
}

/// For a program whose Engine keeps its state in host memory (the cpu
/// compute device): offload_*.pin_memory true asks for page-locked host
/// buffers, which speed only copies to a GPU and need CUDA and a device.
/// Turned off here with a warning line added to c.warnings, as DeepSpeed's
/// CPU accelerator ignores it; the numbers do not change. Never throws.
inline void unpin_host_engine(EngineConfig& c) {
  std::vector<std::string> tiers;
  if (c.offload.optimizer.pin_memory) tiers.push_back("zero_optimization.offload_optimizer.pin_memory");
  if (c.offload.param.pin_memory) tiers.push_back("zero_optimization.offload_param.pin_memory");
  if (tiers.empty()) return;
  c.offload.optimizer.pin_memory = c.offload.param.pin_memory = false;
  c.warnings.push_back(fmt::format("{}: {} true: this program's Engine keeps its state in host memory, where "
                                   "page-locked buffers speed nothing; pageable memory is used (as DeepSpeed's CPU "
                                   "accelerator does), with the same results",
                                   c.source, fmt::format("{}", fmt::join(tiers, " and "))));
}

/// The configuration of a job on `world_size` data-parallel ranks:
///  - with --config, the file read by EngineConfig::from_file with
///    config_fills(f, p) at the world size; `steps_for_batch` (when given)
///    says how many optimizer steps the run takes at a global batch of that
///    many samples, for an "auto" total_num_steps: taken at the flags' batch,
///    then, when the file settles on another batch, again at that one;
///  - without, `defaults` with --micro-batch, --gradient-accumulation-steps,
///    --lr and --bf16 / --fp16 set over it;
/// then --stage, --breakdown (or --calibration) and --trace over either,
/// then `adjust` (the program's own overrides, e.g. --bf16), then
/// EngineConfig::validate and validate_for_world.
/// Throws ConfigError as EngineConfig::from_file / validate /
/// validate_for_world.
inline EngineConfig make_job_config(const ConfigFlags& f, ProgramValues p, EngineConfig defaults, int world_size,
                                    const std::function<void(EngineConfig&)>& adjust = {},
                                    const std::function<std::int64_t(std::int64_t)>& steps_for_batch = {}) {
  p.world_size = world_size;
  EngineConfig c;
  if (f.config_path.empty()) {
    c = std::move(defaults);
    if (f.micro_batch) c.train_micro_batch_size_per_gpu = *f.micro_batch;
    if (f.accumulation) c.gradient_accumulation_steps = *f.accumulation;
    if (f.lr) c.optimizer.lr = *f.lr;
    if (f.precision != DType::f32) c.compute_dtype = f.precision;
  } else {
    if (steps_for_batch) p.total_steps = steps_for_batch(p.micro_batch * p.gradient_accumulation * world_size);
    c = EngineConfig::from_file(f.config_path, config_fills(f, p));
    if (steps_for_batch && c.train_batch_size && steps_for_batch(*c.train_batch_size) != p.total_steps) {
      p.total_steps = steps_for_batch(*c.train_batch_size);
      c = EngineConfig::from_file(f.config_path, config_fills(f, p));
    }
  }
  if (f.stage >= 0) c.zero.stage = f.stage;
  if (f.breakdown || !f.calibration_path.empty()) c.observe.wall_clock_breakdown = true;
  if (!f.trace_dir.empty()) {
    c.observe.trace = true;
    c.observe.trace_output_path = f.trace_dir;
  }
  if (adjust) adjust(c);
  c.validate();
  c.validate_for_world(world_size);
  return c;
}

/// Rank 0's report of how the configuration was read: each warning line on
/// stderr ("<program>: warning: ..."), and on stdout one line listing what
/// each "auto" became and by which rule ("<program>: \"auto\" filled: ...").
inline void print_config_notes(const char* program, const EngineConfig& c) {
  for (const std::string& w : c.warnings) std::fprintf(stderr, "%s: warning: %s\n", program, w.c_str());
  if (!c.auto_fills.empty()) fmt::print("{}: \"auto\" filled: {}\n", program, auto_fill_summary(c.auto_fills));
  std::fflush(stdout);
}

/// What a program's header line says of the optimizer: "AdamW lr 0.001",
/// and for Muon "Muon lr 0.02, AdamW lr 0.002 on the other parameters".
inline std::string optimizer_summary(const EngineConfig& c) {
  const OptimizerHyper& h = c.optimizer;
  if (h.kind == OptimizerKind::muon) {
    return fmt::format("Muon lr {:g}, AdamW lr {:g} on the other parameters", h.muon.lr, h.lr);
  }
  return fmt::format("{} lr {:g}", optimizer_type_name(h), h.lr);
}

/// What a program's header line says of offload: "offload none", or the
/// tiers of the optimizer and the parameters, "offload optimizer nvme,
/// param cpu".
inline std::string offload_summary(const EngineConfig& c) {
  const OffloadDevice o = c.offload.optimizer.device, p = c.offload.param.device;
  if (o == OffloadDevice::none && p == OffloadDevice::none) return "offload none";
  return fmt::format("offload optimizer {}, param {}", offload_device_name(o), offload_device_name(p));
}

}  // namespace zeroshard::examples
