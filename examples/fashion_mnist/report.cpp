#include "examples/fashion_mnist/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "core/durable_file.h"

namespace zeroshard::examples {
namespace {

// Figures per rank in the all_gather: 3 per category + 4 totals.
constexpr std::size_t kFiguresPerRank = 3 * kMemCategories + 4 + 3;

/// "optimizer states" -> "optimizer_states" (JSON keys without spaces).
std::string json_key(std::string_view name) {
  std::string key(name);
  std::replace(key.begin(), key.end(), ' ', '_');
  return key;
}

}  // namespace

LedgerFigures LedgerFigures::of(const MemoryLedger& ledger) {
  LedgerFigures f;
  for (int c = 0; c < kMemCategories; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    f.current[std::size_t(c)] = ledger.current(cat);
    f.peak[std::size_t(c)] = ledger.peak(cat);
    f.padding[std::size_t(c)] = ledger.padding(cat);
  }
  f.model_state = ledger.model_state_bytes();
  f.model_state_padding = ledger.model_state_padding();
  f.current_total = ledger.current_total();
  f.peak_total = ledger.peak_total();
  for (int t = 0; t < 3; ++t) {
    for (MemCategory c : {MemCategory::parameters, MemCategory::gradients, MemCategory::grad_accumulator,
                          MemCategory::master_weights, MemCategory::optimizer_states}) {
      f.model_state_tier[std::size_t(t)] += ledger.current(c, static_cast<MemTier>(t));
    }
  }
  return f;
}

std::vector<std::array<std::uint64_t, kMemCategories>> current_per_rank(const std::vector<LedgerFigures>& ranks) {
  std::vector<std::array<std::uint64_t, kMemCategories>> out;
  for (const LedgerFigures& f : ranks) out.push_back(f.current);
  return out;
}

std::vector<LedgerFigures> gather_ledger_figures(Communicator& comm, const LedgerFigures& mine) {
  // f64 holds byte counts exactly up to 2^53 (8 PiB).
  std::array<double, kFiguresPerRank> send{};
  std::size_t i = 0;
  for (int c = 0; c < kMemCategories; ++c) {
    send[i++] = double(mine.current[std::size_t(c)]);
    send[i++] = double(mine.peak[std::size_t(c)]);
    send[i++] = double(mine.padding[std::size_t(c)]);
  }
  send[i++] = double(mine.model_state);
  send[i++] = double(mine.model_state_padding);
  send[i++] = double(mine.current_total);
  send[i++] = double(mine.peak_total);
  for (std::uint64_t b : mine.model_state_tier) send[i++] = double(b);
  std::vector<double> recv(kFiguresPerRank * std::size_t(comm.world_size()));
  comm.all_gather(send.data(), recv.data(), kFiguresPerRank, DType::f64);
  std::vector<LedgerFigures> out(std::size_t(comm.world_size()));
  for (std::size_t r = 0; r < out.size(); ++r) {
    const double* v = recv.data() + r * kFiguresPerRank;
    std::size_t j = 0;
    for (int c = 0; c < kMemCategories; ++c) {
      out[r].current[std::size_t(c)] = std::uint64_t(v[j++]);
      out[r].peak[std::size_t(c)] = std::uint64_t(v[j++]);
      out[r].padding[std::size_t(c)] = std::uint64_t(v[j++]);
    }
    out[r].model_state = std::uint64_t(v[j++]);
    out[r].model_state_padding = std::uint64_t(v[j++]);
    out[r].current_total = std::uint64_t(v[j++]);
    out[r].peak_total = std::uint64_t(v[j++]);
    for (std::uint64_t& b : out[r].model_state_tier) b = std::uint64_t(v[j++]);
  }
  return out;
}

nlohmann::json to_json(const LedgerFigures& f) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kMemCategories; ++c) {
    j[json_key(mem_category_name(static_cast<MemCategory>(c)))] = {
        {"current", f.current[std::size_t(c)]},
        {"peak", f.peak[std::size_t(c)]},
        {"padding", f.padding[std::size_t(c)]}};
  }
  j["model_state_bytes"] = f.model_state;
  j["model_state_padding_bytes"] = f.model_state_padding;
  j["current_total_bytes"] = f.current_total;
  j["peak_total_bytes"] = f.peak_total;
  j["model_state_bytes_by_tier"] = {{"device", f.model_state_tier[0]}, {"host", f.model_state_tier[1]},
                                    {"nvme", f.model_state_tier[2]}};
  return j;
}

nlohmann::json to_json(const EngineConfig& config) {
  nlohmann::json j;
  if (config.train_batch_size) j["train_batch_size"] = *config.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = config.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = config.gradient_accumulation_steps;
  j["gradient_clipping"] = config.gradient_clipping;
  j["steps_per_print"] = config.steps_per_print;
  const OptimizerHyper& o = config.optimizer;
  nlohmann::json params = {{"lr", o.lr}, {"weight_decay", o.weight_decay}};
  if (o.kind == OptimizerKind::sgd) {
    params["momentum"] = o.momentum;
    params["dampening"] = o.dampening;
    params["nesterov"] = o.nesterov;
  } else if (o.kind == OptimizerKind::lion) {
    params["betas"] = {o.beta1, o.beta2};
  } else if (o.kind == OptimizerKind::adagrad) {
    params["eps"] = o.eps;
    params["lr_decay"] = o.lr_decay;
    params["initial_accumulator_value"] = o.initial_accumulator_value;
  } else {
    params["betas"] = {o.beta1, o.beta2};
    params["eps"] = o.eps;
    // DeepSpeed's "Adam" means AdamW unless adam_w_mode is false.
    if (o.kind == OptimizerKind::adam) params["adam_w_mode"] = false;
  }
  if (o.states.dtype == StateDtype::q8) {
    params["block_size"] = o.states.block_size;
    params["min_8bit_size"] = o.states.min_8bit_size;
  }
  if (o.states.dtype == StateDtype::bf16) {
    params["state_dtype"] = "bf16";
    params["stochastic_rounding"] = o.states.rounding == StateRounding::stochastic;
    params["seed"] = o.states.seed;
  }
  j["optimizer"] = {{"type", optimizer_type_name(o)}, {"params", params}};
  j["zero_optimization"] = {{"stage", config.zero.stage}};
  const OffloadConfig& off = config.offload;
  if (off.optimizer.device != OffloadDevice::none) {
    const OffloadOptimizerConfig& o = off.optimizer;
    j["zero_optimization"]["offload_optimizer"] = {
        {"device", offload_device_name(o.device)}, {"nvme_path", o.nvme_path},
        {"buffer_count", o.buffer_count},          {"pin_memory", o.pin_memory},
        {"pipeline_read", o.pipeline_read},        {"pipeline_write", o.pipeline_write}};
  }
  if (off.param.device != OffloadDevice::none) {
    const OffloadParamConfig& p = off.param;
    j["zero_optimization"]["offload_param"] = {
        {"device", offload_device_name(p.device)}, {"nvme_path", p.nvme_path},  {"buffer_count", p.buffer_count},
        {"buffer_size", p.buffer_size},            {"max_in_cpu", p.max_in_cpu}, {"pin_memory", p.pin_memory}};
  }
  if (off.optimizer.device != OffloadDevice::none || off.param.device != OffloadDevice::none) {
    j["zero_optimization"]["sub_group_size"] = off.sub_group_size;
    const AioConfig& a = off.aio;
    j["aio"] = {{"block_size", a.block_size},
                {"queue_depth", a.queue_depth},
                {"intra_op_parallelism", a.intra_op_parallelism},
                {"single_submit", a.single_submit},
                {"overlap_events", a.overlap_events}};
  }
  if (config.compute_dtype == DType::bf16) j["bf16"] = {{"enabled", true}};
  if (config.compute_dtype == DType::f16) {
    const LossScaleConfig& ls = config.loss_scale;
    j["fp16"] = {{"enabled", true},
                 {"loss_scale", ls.dynamic ? 0.0 : ls.static_scale},
                 {"initial_scale_power", ls.initial_scale_power},
                 {"loss_scale_window", ls.loss_scale_window},
                 {"hysteresis", ls.hysteresis},
                 {"min_loss_scale", ls.min_loss_scale}};
  }
  if (config.communication_data_type) {
    const DType t = *config.communication_data_type;
    j["communication_data_type"] = t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "fp16";
  }
  const LrSchedule& sch = config.scheduler;
  if (sch.kind != LrScheduleKind::none) {
    auto one_or_list = [](const std::vector<double>& v) {
      return v.size() == 1 ? nlohmann::json(v.front()) : nlohmann::json(v);
    };
    nlohmann::json params = {{"warmup_num_steps", sch.warmup_num_steps},
                             {"warmup_type", sch.warmup_type}};
    if (sch.kind == LrScheduleKind::warmup_cosine_lr) {
      params["total_num_steps"] = sch.total_num_steps;
      params["warmup_min_ratio"] = sch.warmup_min_ratio;
      params["cos_min_ratio"] = sch.cos_min_ratio;
    } else {
      params["warmup_min_lr"] = one_or_list(sch.warmup_min_lr);
      params["warmup_max_lr"] = one_or_list(sch.warmup_max_lr);
      if (sch.kind == LrScheduleKind::warmup_decay_lr) {
        params["total_num_steps"] = sch.total_num_steps;
      }
    }
    j["scheduler"] = {{"type", sch.name()}, {"params", params}};
  }
  return j;
}

nlohmann::json to_json(const TrainResult& result) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochStats& e : result.epochs) {
    epochs.push_back({{"epoch", e.epoch},
                      {"optimizer_steps", e.optimizer_steps},
                      {"samples", e.samples},
                      {"train_loss", e.train_loss},
                      {"test_loss", e.test_loss},
                      {"test_accuracy", e.test_accuracy},
                      {"seconds", e.seconds},
                      {"samples_per_second", e.samples_per_second}});
  }
  // Per step, this rank's breakdown fields in StepFigures::names() order.
  nlohmann::json figures = nlohmann::json::array();
  for (const StepFigures& f : result.step_figures) figures.push_back(f.as_array());
  return {{"epochs", epochs},
          {"step_breakdown_fields", StepFigures::names()},
          {"step_breakdown_ms", figures},
          {"optimizer_steps", result.optimizer_steps},
          {"skipped_steps", result.skipped_steps},
          {"checkpoints", result.checkpoints},
          {"last_step_loss", result.last_step_loss},
          {"final_accuracy", result.final_accuracy},
          {"median_step_seconds", median_step_seconds(result, 1)},
          {"cross_host_bytes", result.cross_host},
          {"checkpoint_saves", result.checkpoint_figures},
          {"wall_seconds", result.wall_seconds}};
}

void write_json_file(const std::string& path, const nlohmann::json& report) {
  // Bytes that are not UTF-8 (e.g. in a generated sample) become U+FFFD; the
  // file is replaced atomically, so a failure leaves an earlier report as it was.
  write_file_atomic(path, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace zeroshard::examples
