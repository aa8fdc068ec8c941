#include "runtime/config/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/cpu/adam/quant_map.h"
#include "offload/io/aio_config.h"
#include "runtime/config/config_diagnostics.h"
#include "runtime/config/config_keys.h"
#include "runtime/config/config_normalize.h"

namespace zeroshard {

namespace {

using nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Reads values the key check found well-typed (runtime/config/config_normalize.h):
// a key that is absent or was reported leaves `out` unchanged.
class Reader {
 public:
  Reader(const json& doc, const std::set<std::string>& bad) : doc_(doc), bad_(bad) {}

  const json* at(const std::string& path) const {
    if (bad_.count(path)) return nullptr;
    return json_at(doc_, path);
  }
  template <class T>
  bool get(const std::string& path, T& out) const {
    const json* v = at(path);
    if (!v) return false;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      out = v->is_number_integer() ? v->get<T>() : static_cast<T>(v->get<double>());
    } else if constexpr (std::is_floating_point_v<T>) {
      out = static_cast<T>(v->get<double>());
    } else {
      out = v->get<T>();
    }
    return true;
  }

 private:
  const json& doc_;
  const std::set<std::string>& bad_;
};

// Reads the string at `path`, when the file sets it, into `out` (an E or an
// optional<E>) as the value its spelling names in `choices` (exact,
// case-sensitive); another spelling is recorded as a bad value with `hint`
// ("is invalid: use ...") and leaves `out` as it was.
template <class E, class Out>
void read_choice(const Reader& r, const std::string& path,
                 std::initializer_list<std::pair<const char*, E>> choices, const char* hint, Out& out,
                 ConfigDiagnostics& d) {
  std::string text;
  if (!r.get(path, text)) return;
  for (const auto& [spelling, value] : choices) {
    if (text == spelling) {
      out = value;
      return;
    }
  }
  d.bad_value(path, text, hint);
}

// The ConfigError text of a section reader (LrSchedule, AioConfig) recorded
// as a problem, without its "<source>: " prefix.
void record(ConfigDiagnostics& d, const ConfigError& e) {
  const std::string what = e.what(), prefix = d.source() + ": ";
  d.problem(what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
}

// A copy of `section` without the keys the table accepts without effect
// (the section readers refuse keys they do not know).
json without_no_effect_keys(const json& section, const std::string& path) {
  json out = section;
  for (auto it = section.begin(); it != section.end(); ++it) {
    const ConfigKey* row = find_config_key(path + "." + it.key());
    if (row && row->status == KeyStatus::no_effect) out.erase(it.key());
  }
  if (out.contains("params") && out["params"].is_object()) {
    out["params"] = without_no_effect_keys(section["params"], path + ".params");
  }
  return out;
}

// wall_clock_breakdown, comms_logger, zeroshard.trace, collective timeout
// (runtime/config/observe_config.h).
void read_observe(const Reader& r, ObserveConfig& o, ConfigDiagnostics& d) {
  r.get("wall_clock_breakdown", o.wall_clock_breakdown);
  r.get("comms_logger.enabled", o.comms_logger.enabled);
  r.get("comms_logger.verbose", o.comms_logger.verbose);
  r.get("comms_logger.prof_all", o.comms_logger.prof_all);
  r.get("comms_logger.debug", o.comms_logger.debug);
  if (const json* ops = r.at("comms_logger.prof_ops")) {
    static const std::set<std::string> kinds = {"all_reduce", "reduce_scatter", "all_gather",
                                                "all_to_all", "broadcast", "barrier"};
    bool ok = ops->is_array();
    for (const json& op : ok ? *ops : json::array()) {
      if (op.is_string() && kinds.count(op.get<std::string>())) {
        o.comms_logger.prof_ops.push_back(op.get<std::string>());
      } else {
        ok = false;
      }
    }
    if (!ok) {
      d.bad_value("comms_logger.prof_ops", *ops,
                  "is invalid: use a list of all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, barrier");
    }
  }
  r.get("csv_monitor.enabled", o.csv_monitor.enabled);
  r.get("csv_monitor.output_path", o.csv_monitor.output_path);
  if (r.get("csv_monitor.job_name", o.csv_monitor.job_name) &&
      (o.csv_monitor.job_name.empty() || o.csv_monitor.job_name.find('/') != std::string::npos)) {
    d.bad_value("csv_monitor.job_name", o.csv_monitor.job_name,
                "is invalid: use a folder name (not empty, no \"/\"); output_path says where it goes");
  }
  r.get("zeroshard.collective_check", o.collective_check);
  r.get("zeroshard.trace.enabled", o.trace);
  r.get("zeroshard.trace.output_path", o.trace_output_path);
  if (r.get("zeroshard.collective_timeout_s", o.collective_timeout_s) && o.collective_timeout_s < 0) {
    d.bad_value("zeroshard.collective_timeout_s", o.collective_timeout_s,
                "is invalid: use seconds > 0, or 0 for no timeout");
  }
}

// lr, weight_decay, betas and eps under `prefix` ("optimizer.params.", or
// Muon's "optimizer.params.adamw.") into h.
void read_adam_values(const Reader& r, const std::string& prefix, OptimizerHyper& h) {
  r.get(prefix + "lr", h.lr);
  r.get(prefix + "weight_decay", h.weight_decay);
  if (const json* b = r.at(prefix + "betas")) {
    h.beta1 = (*b)[0].get<double>();
    h.beta2 = (*b)[1].get<double>();
  }
  r.get(prefix + "eps", h.eps);
}

// optimizer.type "Muon": Muon's values (torch.optim.Muon's names) into
// h.muon, the AdamW section into h's lr, betas, eps and weight_decay.
void read_muon(const Reader& r, OptimizerHyper& h, ConfigDiagnostics& d) {
  MuonHyper& m = h.muon;
  r.get("optimizer.params.lr", m.lr);
  r.get("optimizer.params.weight_decay", m.weight_decay);
  r.get("optimizer.params.momentum", m.momentum);
  r.get("optimizer.params.nesterov", m.nesterov);
  r.get("optimizer.params.ns_steps", m.ns_steps);
  std::string fn;
  if (r.get("optimizer.params.adjust_lr_fn", fn)) {
    if (fn == "original") {
      m.scale = kernels::MuonScale::shape;
    } else if (fn == "match_rms_adamw") {
      m.scale = kernels::MuonScale::rms_match;
    } else {
      d.bad_value("optimizer.params.adjust_lr_fn", fn,
                  "is invalid: use \"original\" (sqrt(max(1, rows / cols)), the reference's) or \"match_rms_adamw\" "
                  "(0.2 sqrt(max(rows, cols)), Moonshot AI's), as torch.optim.Muon");
    }
  }
  std::string ns_dtype;
  if (r.get("optimizer.params.ns_dtype", ns_dtype)) {
    if (lower(ns_dtype) == "bf16") {
      m.precision = kernels::NewtonSchulzPrecision::bf16;
    } else if (lower(ns_dtype) != "fp32") {
      d.bad_value("optimizer.params.ns_dtype", ns_dtype, "is invalid: use \"fp32\" or \"bf16\"");
    }
  }
  const json* patterns = r.at("optimizer.params.muon_params");
  bool ok = patterns != nullptr && patterns->is_array() && !patterns->empty();
  for (const json& p : ok ? *patterns : json::array()) {
    if (p.is_string() && !p.get<std::string>().empty()) {
      m.params.push_back(p.get<std::string>());
    } else {
      ok = false;
    }
  }
  if (!ok) {
    d.problem(
        "\"optimizer.params.muon_params\" must be a nonempty list of parameter name patterns (fnmatch, e.g. "
        "\"h.*.attn.c_attn.weight\") for optimizer.type \"Muon\": it names the 2-D hidden matrices Muon updates");
  }
  if (r.at("optimizer.params.adamw") == nullptr) {
    d.problem(
        "optimizer.type \"Muon\" needs \"optimizer.params.adamw\" ({lr, betas, eps, weight_decay}): Muon updates "
        "only the hidden matrices that muon_params names; the embeddings, the LM head, biases and norms train with "
        "AdamW");
  }
  h.weight_decay = 0.0;  // AdamW's, unless the section says
  read_adam_values(r, "optimizer.params.adamw.", h);
  if (r.at("optimizer.params.state_dtype") != nullptr) {
    d.problem("\"optimizer.params.state_dtype\" is not supported for optimizer.type \"Muon\": its states are fp32");
  }
}

void read_optimizer(const Reader& r, EngineConfig& c, ConfigDiagnostics& d) {
  OptimizerHyper& h = c.optimizer;
  std::string type = "AdamW";
  r.get("optimizer.type", type);
  const std::string t = lower(type);
  if (t == "adamw" || t == "adam" || t == "adamw8bit" || t == "adam8bit") {
    h.kind = OptimizerKind::adamw;  // DeepSpeed: Adam's adam_w_mode defaults to true
    if (t.ends_with("8bit")) h.states.dtype = StateDtype::q8;  // bitsandbytes' AdamW8bit / Adam8bit
  } else if (t == "sgd") {
    h.kind = OptimizerKind::sgd;
  } else if (t == "lion") {
    h.kind = OptimizerKind::lion;  // DeepSpeed's FusedLion / DeepSpeedCPULion defaults: lr 1e-3, betas (0.9, 0.999)
  } else if (t == "adagrad") {
    h.kind = OptimizerKind::adagrad;  // torch.optim.Adagrad / DeepSpeedCPUAdagrad defaults
    h.lr = 1e-2;
    h.eps = 1e-10;
  } else if (t == "muon") {
    h.kind = OptimizerKind::muon;
  } else {
    d.bad_value("optimizer.type", type,
                "is not supported: zeroshard implements Adam, AdamW, SGD, Lion, Adagrad and Muon, and Adam8bit / "
                "AdamW8bit (8-bit states) (DeepSpeed's Lamb, OneBitAdam, OneBitLamb, ZeroOneAdam, MuAdam and others "
                "are not); use one of those");
  }
  if (h.kind == OptimizerKind::muon) {
    read_muon(r, h, d);
    return;
  }
  read_adam_values(r, "optimizer.params.", h);
  bool adam_w_mode = true;
  if ((t == "adam" || t == "adam8bit") && r.get("optimizer.params.adam_w_mode", adam_w_mode) && !adam_w_mode) {
    h.kind = OptimizerKind::adam;
  }
  std::int64_t block = static_cast<std::int64_t>(h.states.block_size), min8 = static_cast<std::int64_t>(h.states.min_8bit_size);
  if (r.get("optimizer.params.block_size", block)) {
    if (block < static_cast<std::int64_t>(kernels::kQuantBlockMin) ||
        block > static_cast<std::int64_t>(kernels::kQuantBlockMax) || (block & (block - 1)) != 0) {
      d.bad_value("optimizer.params.block_size", block,
                  fmt::format("is invalid: use a power of two from {} to {} (elements per absmax block)",
                              kernels::kQuantBlockMin, kernels::kQuantBlockMax));
    } else {
      h.states.block_size = static_cast<std::size_t>(block);
    }
  }
  if (r.get("optimizer.params.min_8bit_size", min8)) {
    if (min8 < 0) {
      d.bad_value("optimizer.params.min_8bit_size", min8, "is invalid: use a number of elements >= 0");
    } else {
      h.states.min_8bit_size = static_cast<std::size_t>(min8);
    }
  }
  std::string state_dtype;
  if (r.get("optimizer.params.state_dtype", state_dtype)) {
    const std::string sd = lower(state_dtype);
    if (sd == "bf16") {
      // Adam / AdamW only (kernels/cpu/adam/adam_bf16_state.h); the key table
      // also names the types the key applies to.
      if (h.states.dtype == StateDtype::q8) {
        d.bad_value("optimizer.params.state_dtype", state_dtype,
                    fmt::format("cannot be combined with optimizer.type \"{}\" (8-bit states): use optimizer.type "
                                "\"AdamW\" or \"Adam\" with bf16 states, or drop state_dtype", type));
      } else if (h.kind != OptimizerKind::adam && h.kind != OptimizerKind::adamw) {
        d.bad_value("optimizer.params.state_dtype", state_dtype,
                    fmt::format("is not supported for optimizer.type \"{}\": bf16 optimizer states are implemented "
                                "for Adam and AdamW only", type));
      } else {
        h.states.dtype = StateDtype::bf16;
      }
    } else if (sd != "fp32") {
      d.bad_value("optimizer.params.state_dtype", state_dtype,
                  "is invalid: use \"fp32\" or \"bf16\"; 8-bit states are chosen by "
                  "optimizer.type \"AdamW8bit\" / \"Adam8bit\"");
    }
  }
  bool stochastic = false;
  for (const char* key : {"optimizer.params.stochastic_rounding", "optimizer.params.seed"}) {
    if (r.at(key) != nullptr && lower(state_dtype) != "bf16") {
      d.problem(fmt::format("\"{}\" applies to bf16 optimizer states only (optimizer.params.state_dtype "
                            "\"bf16\"); remove it", key));
    }
  }
  if (r.get("optimizer.params.stochastic_rounding", stochastic)) {
    h.states.rounding = stochastic ? StateRounding::stochastic : StateRounding::nearest;
  }
  std::int64_t seed = 0;
  if (r.get("optimizer.params.seed", seed)) {
    if (seed < 0) {
      d.bad_value("optimizer.params.seed", seed, "is invalid: use an integer >= 0");
    } else {
      h.states.seed = static_cast<std::uint64_t>(seed);
    }
  }
  r.get("optimizer.params.momentum", h.momentum);
  r.get("optimizer.params.dampening", h.dampening);
  r.get("optimizer.params.nesterov", h.nesterov);
  r.get("optimizer.params.lr_decay", h.lr_decay);
  r.get("optimizer.params.initial_accumulator_value", h.initial_accumulator_value);
}

// DeepSpeed's lower-case dtype names "fp32", "bf16", "fp16" as a DType
// (nullopt for anything else).
std::optional<DType> deepspeed_dtype(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  return std::nullopt;
}

void read_precision(const Reader& r, EngineConfig& c, ConfigDiagnostics& d) {
  bool bf16 = false, fp16 = false;
  r.get("bf16.enabled", bf16);
  r.get("fp16.enabled", fp16);
  if (bf16 && fp16) d.problem("\"fp16.enabled\" and \"bf16.enabled\" are both true; choose one");
  if (bf16) c.compute_dtype = DType::bf16;
  if (fp16 && !bf16) c.compute_dtype = DType::f16;
  LossScaleConfig& ls = c.loss_scale;
  double scale = 0;
  r.get("fp16.loss_scale", scale);
  ls.dynamic = scale == 0;
  ls.static_scale = scale;
  r.get("fp16.initial_scale_power", ls.initial_scale_power);
  r.get("fp16.loss_scale_window", ls.loss_scale_window);
  r.get("fp16.hysteresis", ls.hysteresis);
  r.get("fp16.min_loss_scale", ls.min_loss_scale);
  // Any case, as DeepSpeed lower-cases it ("bfp16" was mapped to bf16 before).
  std::string comm;
  if (r.get("communication_data_type", comm)) {
    c.communication_data_type = deepspeed_dtype(lower(comm));
    if (!c.communication_data_type) d.bad_value("communication_data_type", comm, "is invalid: use fp32, bf16 or fp16");
  }
  // data_types.grad_accum_dtype (DeepSpeed's, any case): fp32 unless asked;
  // a 16-bit sum is asked for with one warning line.
  std::string accum;
  if (r.get("data_types.grad_accum_dtype", accum)) {
    c.grad_accum_dtype = deepspeed_dtype(lower(accum));
    if (!c.grad_accum_dtype) {
      d.bad_value("data_types.grad_accum_dtype", accum, "is invalid: use fp32 (the default), bf16 or fp16");
    } else if (*c.grad_accum_dtype != DType::f32 && *c.grad_accum_dtype == c.compute_dtype) {
      d.warn(fmt::format("data_types.grad_accum_dtype \"{}\": micro-batch gradients are summed in {}, which drops "
                         "a contribution below half a unit in the last place of the sum (DeepSpeed #1800); remove "
                         "the key for the fp32 default",
                         accum, lower(accum)));
    }
  }
}

OffloadDevice read_device(const Reader& r, const std::string& path, ConfigDiagnostics& d) {
  std::string dev = "none";
  r.get(path, dev);
  const std::string l = lower(dev);
  if (l == "none") return OffloadDevice::none;
  if (l == "cpu") return OffloadDevice::cpu;
  if (l == "nvme") return OffloadDevice::nvme;
  d.bad_value(path, dev, "is invalid: expected \"none\", \"cpu\" or \"nvme\"");
  return OffloadDevice::none;
}

// The keys offload_optimizer and offload_param share, read from `prefix`
// ("zero_optimization.offload_optimizer." or ".offload_param.") into `tier`
// (an OffloadOptimizerConfig or OffloadParamConfig): device, nvme_path,
// buffer_count, pin_memory.
template <class Tier>
void read_offload_tier(const Reader& r, const std::string& prefix, Tier& tier, ConfigDiagnostics& d) {
  tier.device = read_device(r, prefix + "device", d);
  r.get(prefix + "nvme_path", tier.nvme_path);
  r.get(prefix + "buffer_count", tier.buffer_count);
  r.get(prefix + "pin_memory", tier.pin_memory);
}

// The stage3_* element counts (keys under zero_optimization.) and their
// ZeroConfig fields: read_zero reads them, collect_range_problems checks them.
constexpr std::pair<const char*, std::int64_t ZeroConfig::*> kStage3Counts[] = {
    {"stage3_prefetch_bucket_size", &ZeroConfig::prefetch_bucket_size},
    {"stage3_max_live_parameters", &ZeroConfig::max_live_parameters},
    {"stage3_max_reuse_distance", &ZeroConfig::max_reuse_distance},
    {"stage3_param_persistence_threshold", &ZeroConfig::param_persistence_threshold},
    {"stage3_model_persistence_threshold", &ZeroConfig::model_persistence_threshold}};

void read_zero(const Reader& r, const std::set<std::string>& bad, EngineConfig& c, ConfigDiagnostics& d) {
  const std::string z = "zero_optimization.";
  r.get(z + "stage", c.zero.stage);
  r.get(z + "reduce_bucket_size", c.zero.reduce_bucket_size);
  r.get(z + "allgather_bucket_size", c.zero.allgather_bucket_size);
  bool overlap = false;
  if (r.get(z + "overlap_comm", overlap)) c.zero.overlap_comm = overlap;
  r.get(z + "contiguous_gradients", c.zero.contiguous_gradients);
  for (const auto& [key, field] : kStage3Counts) r.get(z + key, c.zero.*field);
  r.get(z + "stage3_gather_16bit_weights_on_model_save", c.zero.gather_16bit_weights_on_model_save);
  ZeroppConfig& pp = c.zero.zeropp;
  r.get(z + "zero_quantized_weights", pp.quantized_weights);
  r.get(z + "zero_hpz_partition_size", pp.hpz_partition_size);
  r.get(z + "zero_quantized_gradients", pp.quantized_gradients);
  const std::string zpp = "zeroshard.zeropp.";
  r.get(zpp + "weight_bits", pp.weight_bits);
  r.get(zpp + "weight_block_size", pp.weight_block_size);
  r.get(zpp + "gradient_bits", pp.gradient_bits);
  r.get(zpp + "gradient_block_size", pp.gradient_block_size);
  r.get(zpp + "error_feedback", pp.error_feedback);
  r.get(zpp + "ranks_per_node", pp.ranks_per_node);
  OffloadConfig& o = c.offload;
  r.get(z + "sub_group_size", o.sub_group_size);
  const std::string oo = z + "offload_optimizer.", op = z + "offload_param.";
  read_offload_tier(r, oo, o.optimizer, d);
  r.get(oo + "pipeline_read", o.optimizer.pipeline_read);
  r.get(oo + "pipeline_write", o.optimizer.pipeline_write);
  read_offload_tier(r, op, o.param, d);
  r.get(op + "buffer_size", o.param.buffer_size);
  r.get(op + "max_in_cpu", o.param.max_in_cpu);
  if (const json* a = r.at("aio")) {
    // AioConfig reads the section itself; its keys were type-checked above.
    bool clean = true;
    for (auto it = a->begin(); it != a->end(); ++it) clean = clean && !bad.count("aio." + it.key());
    if (clean) {
      try {
        o.aio = AioConfig::from_json(*a, d.source(), "aio");
      } catch (const ConfigError& e) {
        record(d, e);
      }
    }
  }
}

void read_scheduler(const Reader& r, const std::set<std::string>& bad, EngineConfig& c, ConfigDiagnostics& d) {
  const json* s = r.at("scheduler");
  if (!s) return;
  for (const std::string& p : bad) {
    if (p.rfind("scheduler.", 0) == 0) return;  // reported already
  }
  try {
    c.scheduler = LrSchedule::from_json(without_no_effect_keys(*s, "scheduler"), d.source());
  } catch (const ConfigError& e) {
    record(d, e);
  }
}

// Range checks of validate_in, each failure recorded.
void collect_range_problems(const EngineConfig& c, ConfigDiagnostics& d) {
  auto bad = [&](const char* key, const std::string& value, const char* rule) {
    d.problem(fmt::format("\"{}\" = {} is invalid: {}", key, value, rule));
  };
  const OptimizerHyper& h = c.optimizer;
  if (c.zero.stage < 0 || c.zero.stage > 3) {
    bad("zero_optimization.stage", std::to_string(c.zero.stage), "must be 0, 1, 2 or 3");
  }
  if (c.zero.reduce_bucket_size <= 0) {
    bad("zero_optimization.reduce_bucket_size", std::to_string(c.zero.reduce_bucket_size), "must be > 0 (elements)");
  }
  if (c.zero.allgather_bucket_size <= 0) {
    bad("zero_optimization.allgather_bucket_size", std::to_string(c.zero.allgather_bucket_size),
        "must be > 0 (elements)");
  }
  for (const auto& [key, field] : kStage3Counts) {
    const std::int64_t value = c.zero.*field;
    if (value < 0) {
      bad(fmt::format("zero_optimization.{}", key).c_str(), std::to_string(value), "must be >= 0 (elements)");
    }
  }
  if (!c.zero.contiguous_gradients) {
    bad("zero_optimization.contiguous_gradients", "false",
        "zeroshard's gradients are always in one flat buffer per unit (docs/config.md); remove the key or set it "
        "to true");
  }
  c.offload.collect_problems(c.zero.stage, d);
  c.zero.zeropp.collect_problems(c.zero.stage, c.compute_dtype, c.loss_scale, d);
  c.parameter_server.collect_problems(c.zero.stage, c.compute_dtype, c.communication_data_type,
                                      c.optimizer.kind == OptimizerKind::muon, c.overlap_optimizer_step, d);
  if (c.train_micro_batch_size_per_gpu < 1) {
    bad("train_micro_batch_size_per_gpu", std::to_string(c.train_micro_batch_size_per_gpu), "must be >= 1");
  }
  if (c.gradient_accumulation_steps < 1) {
    bad("gradient_accumulation_steps", std::to_string(c.gradient_accumulation_steps), "must be >= 1");
  }
  if (c.train_batch_size && *c.train_batch_size < 1) {
    bad("train_batch_size", std::to_string(*c.train_batch_size), "must be >= 1");
  }
  if (!(c.gradient_clipping >= 0.0)) {
    bad("gradient_clipping", fmt::format("{}", c.gradient_clipping), "must be >= 0 (0 disables clipping)");
  }
  if (c.grad_accum_dtype && *c.grad_accum_dtype != DType::f32 && *c.grad_accum_dtype != c.compute_dtype) {
    // DeepSpeed's spellings of the dtypes.
    auto ds_name = [](DType t) { return t == DType::f16 ? "fp16" : t == DType::bf16 ? "bf16" : "fp32"; };
    bad("data_types.grad_accum_dtype", fmt::format("\"{}\"", ds_name(*c.grad_accum_dtype)),
        c.compute_dtype == DType::f32
            ? "fp32 training accumulates in fp32: remove the key or set it to \"fp32\""
            : fmt::format("must be \"fp32\" (the default) or the compute dtype \"{}\"", ds_name(c.compute_dtype))
                  .c_str());
  }
  const LossScaleConfig& ls = c.loss_scale;
  if (!(ls.static_scale >= 0)) bad("fp16.loss_scale", fmt::format("{}", ls.static_scale), "must be >= 0");
  if (ls.initial_scale_power < 0 || ls.initial_scale_power > 64) {
    bad("fp16.initial_scale_power", std::to_string(ls.initial_scale_power), "must be in [0, 64]");
  }
  if (ls.loss_scale_window < 1) bad("fp16.loss_scale_window", std::to_string(ls.loss_scale_window), "must be >= 1");
  if (ls.hysteresis < 1) bad("fp16.hysteresis", std::to_string(ls.hysteresis), "must be >= 1");
  if (!(ls.min_loss_scale > 0)) bad("fp16.min_loss_scale", fmt::format("{}", ls.min_loss_scale), "must be > 0");
  if (c.steps_per_print < 1) bad("steps_per_print", std::to_string(c.steps_per_print), "must be >= 1");
  if (c.max_consecutive_skipped_steps < 0) {
    bad("zeroshard.max_consecutive_skipped_steps", std::to_string(c.max_consecutive_skipped_steps),
        "must be >= 0 (0: no limit)");
  }
  if (c.checkpoint.staging_memory < 0) {
    bad("checkpoint.staging_memory", std::to_string(c.checkpoint.staging_memory), "must be >= 0 bytes (0: no limit)");
  }
  // Muon's AdamW values are in optimizer.params.adamw.
  const bool muon = h.kind == OptimizerKind::muon;
  const std::string adamw = muon ? "optimizer.params.adamw." : "optimizer.params.";
  if (!(h.lr >= 0.0)) bad((adamw + "lr").c_str(), fmt::format("{}", h.lr), "must be >= 0");
  if (!(h.weight_decay >= 0.0)) {
    bad((adamw + "weight_decay").c_str(), fmt::format("{}", h.weight_decay), "must be >= 0");
  }
  const bool adam_like = h.kind == OptimizerKind::adam || h.kind == OptimizerKind::adamw || muon;
  if (adam_like || h.kind == OptimizerKind::lion) {
    if (!(h.beta1 >= 0.0 && h.beta1 < 1.0) || !(h.beta2 >= 0.0 && h.beta2 < 1.0)) {
      bad((adamw + "betas").c_str(), fmt::format("[{}, {}]", h.beta1, h.beta2), "each beta must be in [0, 1)");
    }
  }
  if (adam_like || h.kind == OptimizerKind::adagrad) {
    if (!(h.eps > 0.0)) bad((adamw + "eps").c_str(), fmt::format("{}", h.eps), "must be > 0");
  }
  if (c.overlap_optimizer_step) {
    if (c.zero.stage != 3 || c.offload.optimizer.device != OffloadDevice::nvme) {
      bad("zeroshard.overlap_optimizer_step", "true",
          "needs zero_optimization.stage 3 with offload_optimizer.device \"nvme\": it overlaps the swapped "
          "optimizer step with the next forward");
    }
    if (muon) bad("zeroshard.overlap_optimizer_step", "true", "is not supported with optimizer.type \"Muon\"");
  }
  if (muon) {
    const MuonHyper& m = h.muon;
    if (!(m.lr >= 0.0)) bad("optimizer.params.lr", fmt::format("{}", m.lr), "must be >= 0");
    if (!(m.weight_decay >= 0.0)) bad("optimizer.params.weight_decay", fmt::format("{}", m.weight_decay), "must be >= 0");
    if (!(m.momentum >= 0.0 && m.momentum < 1.0)) {
      bad("optimizer.params.momentum", fmt::format("{}", m.momentum), "Muon's momentum must be in [0, 1)");
    }
    if (m.ns_steps < 0 || m.ns_steps > 100) {
      bad("optimizer.params.ns_steps", std::to_string(m.ns_steps), "must be in [0, 100] (Newton-Schulz iterations)");
    }
    if (h.states.dtype != StateDtype::fp32) {
      d.problem(fmt::format("optimizer.type \"Muon\" keeps fp32 states, not {} ones ([Note: packed states])",
                            state_dtype_name(h.states.dtype)));
    }
  }
  if (h.kind == OptimizerKind::adagrad) {
    // torch.optim.Adagrad's own checks.
    if (!(h.lr_decay >= 0.0)) bad("optimizer.params.lr_decay", fmt::format("{}", h.lr_decay), "must be >= 0");
    if (!(h.initial_accumulator_value >= 0.0)) {
      bad("optimizer.params.initial_accumulator_value", fmt::format("{}", h.initial_accumulator_value),
          "must be >= 0");
    }
  }
  if (h.kind == OptimizerKind::sgd) {
    if (!(h.momentum >= 0.0)) bad("optimizer.params.momentum", fmt::format("{}", h.momentum), "must be >= 0");
    if (h.nesterov && (h.momentum <= 0.0 || h.dampening != 0.0)) {
      bad("optimizer.params.nesterov", "true",
          "Nesterov momentum requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
    }
  }
}

// The "parameter_server" section (runtime/config/ps_config.h).
void read_parameter_server(const Reader& r, ParameterServerConfig& ps, ConfigDiagnostics& d) {
  r.get("parameter_server.servers", ps.servers);
  r.get("parameter_server.staleness", ps.staleness);
  r.get("parameter_server.staleness_aware_lr", ps.staleness_aware_lr);
  std::string push;
  if (r.get("parameter_server.push", push)) {
    if (push == "reduce" || push == "direct") {
      ps.push = push == "direct" ? PsPushMode::direct : PsPushMode::reduce;
    } else {
      d.bad_value("parameter_server.push", push,
                  "is invalid: use \"reduce\" (the gradient reduced among the workers, window w to server w % S) "
                  "or \"direct\" (each worker's own gradient to every server, applied in arrival order)");
    }
  }
  const json* hosts = r.at("parameter_server.placement");
  if (hosts == nullptr) return;
  bool ok = hosts->is_array();
  for (const json& h : ok ? *hosts : json::array()) {
    if (h.is_string()) {
      ps.placement.push_back(h.get<std::string>());
    } else {
      ok = false;
    }
  }
  if (!ok) d.bad_value("parameter_server.placement", *hosts, "must be a list of host names");
}

// The batch keys the file left "auto" and the arithmetic derived (after
// resolve_batch), with the division or product that gave each.
void record_batch_fills(const EngineConfig& c, const std::set<std::string>& batch_auto, std::vector<AutoFill>& fills) {
  if (batch_auto.count("train_micro_batch_size_per_gpu")) {
    fills.push_back({"train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu,
                     "train_batch_size / (accumulation x world)"});
  }
  if (batch_auto.count("gradient_accumulation_steps")) {
    fills.push_back({"gradient_accumulation_steps", c.gradient_accumulation_steps,
                     "train_batch_size / (micro x world)"});
  }
  if (batch_auto.count("train_batch_size")) {
    fills.push_back({"train_batch_size", *c.train_batch_size, "micro x accumulation x world"});
  }
}

}  // namespace

EngineConfig EngineConfig::from_json(const json& j, const std::string& source, const ConfigOptions& options) {
  check_config_depth(j, source);
  ConfigDiagnostics d(source);
  json doc = j;
  const json* strict_v = json_at(doc, "zeroshard.strict");
  const bool strict = options.strict || (strict_v && strict_v->is_boolean() && strict_v->get<bool>());
  normalize_legacy(doc, strict, d);
  std::set<std::string> unfilled;
  std::vector<AutoFill> fills;
  const std::set<std::string> batch_auto = resolve_auto(doc, options, unfilled, fills, d);
  const std::set<std::string> bad = check_keys(doc, strict, unfilled, d);
  EngineConfig c;
  c.source = source;
  if (!bad.count("")) {
    const Reader r(doc, bad);
    std::int64_t tbs = 0;
    if (r.get("train_batch_size", tbs)) c.train_batch_size = tbs;
    c.micro_batch_given = r.get("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu);
    c.accumulation_given = r.get("gradient_accumulation_steps", c.gradient_accumulation_steps);
    // Without any batch key the micro-batch is 1 (zeroshard's default).
    if (!c.train_batch_size && !batch_auto.count("train_micro_batch_size_per_gpu")) c.micro_batch_given = true;
    if (!c.train_batch_size && !batch_auto.count("gradient_accumulation_steps")) c.accumulation_given = true;
    r.get("gradient_clipping", c.gradient_clipping);
    r.get("steps_per_print", c.steps_per_print);
    read_optimizer(r, c, d);
    read_precision(r, c, d);
    read_zero(r, bad, c, d);
    read_choice<ReductionOrder>(r, "zeroshard.reduction_order",
                                {{"rank", ReductionOrder::rank}, {"native", ReductionOrder::native}},
                                "is invalid: use \"rank\" or \"native\"", c.reduction_order, d);
    r.get("zeroshard.max_consecutive_skipped_steps", c.max_consecutive_skipped_steps);
    r.get("zeroshard.overlap_optimizer_step", c.overlap_optimizer_step);
    read_scheduler(r, bad, c, d);
    read_observe(r, c.observe, d);
    r.get("activation_checkpointing.partition_activations", c.activation_checkpointing.partition_activations);
    read_parameter_server(r, c.parameter_server, d);
    r.get("checkpoint.async", c.checkpoint.async);
    r.get("checkpoint.staging_memory", c.checkpoint.staging_memory);
    read_choice<AsyncInFlight>(r, "checkpoint.async_in_flight",
                               {{"wait", AsyncInFlight::wait}, {"refuse", AsyncInFlight::refuse}},
                               "is invalid: use \"wait\" or \"refuse\"", c.checkpoint.in_flight, d);
    collect_range_problems(c, d);
    if (options.world_size && d.ok()) {
      try {
        c.resolve_batch(*options.world_size);
        record_batch_fills(c, batch_auto, fills);
      } catch (const ConfigError& e) {
        record(d, e);
      }
    }
  }
  d.throw_if_any();
  c.warnings = d.warnings();
  c.auto_fills = std::move(fills);
  return c;
}

EngineConfig EngineConfig::from_file(const std::string& path, const ConfigOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(fmt::format("{}: is a directory, not a configuration file", path));
  }
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open configuration file: {}", path, std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json(parse_config_text(ss.str(), path), path, options);
}

void EngineConfig::validate() const { validate_in(source); }

void EngineConfig::validate_in(const std::string& where) const {
  ConfigDiagnostics d(where);
  collect_range_problems(*this, d);
  d.throw_if_any();
}

}  // namespace zeroshard
