#include "examples/fashion_mnist/compare_stages.h"

#include <fmt/format.h>

#include "core/error.h"
#include "optimizer/optimizer.h"
#include "core/memory_ledger.h"

namespace zeroshard::examples {
namespace {

/// Bytes of the optimizer side of the model states: optimizer states plus
/// master weights (the paper's K Psi term counts both).
std::uint64_t optimizer_side(const LedgerFigures& f) {
  return f.now(MemCategory::optimizer_states) + f.now(MemCategory::master_weights);
}

int pick_rank(const std::vector<LedgerFigures>& ranks) {
  int best = 0;
  for (int r = 1; r < int(ranks.size()); ++r) {
    const LedgerFigures& a = ranks[std::size_t(r)];
    const LedgerFigures& b = ranks[std::size_t(best)];
    if (a.model_state > b.model_state ||
        (a.model_state == b.model_state && a.model_state_padding > b.model_state_padding)) {
      best = r;
    }
  }
  return best;
}

// Steps of each stage's run left out of its step time (the first steps of a
// fresh Engine grow its buffer pool and fault in pages), and the steps of the
// untimed run before the comparison (first use of MPI's connections, the
// BLAS threads, the data set's pages).
constexpr std::size_t kWarmupSteps = 3;
constexpr std::int64_t kProcessWarmupSteps = 5;

}  // namespace

StateBytesPerParam StateBytesPerParam::of(const EngineConfig& config) {
  StateBytesPerParam b;
  const bool mixed = config.compute_dtype != DType::f32;
  b.parameters = double(dtype_size(config.compute_dtype));
  b.gradients = b.parameters;
  b.optimizer = (mixed ? 4.0 : 0.0) + state_bytes_per_element(config.optimizer.states,
                                                              optimizer_state_count(config.optimizer));
  return b;
}

double predicted_model_state_ratio(int stage, int world_size, const StateBytesPerParam& bytes) {
  ZS_CHECK(world_size >= 1, "world size {} must be >= 1", world_size);
  const double n = double(world_size);
  const double p = bytes.parameters, g = bytes.gradients, k = bytes.optimizer;
  const double full = p + g + k;
  ZS_CHECK(full > 0, "model states of 0 bytes per parameter");
  switch (stage) {
    case 0:
      return 1.0;
    case 1:
      return (p + g + k / n) / full;
    case 2:
      return (p + (g + k) / n) / full;
    case 3:
      return 1.0 / n;
    default:
      ZS_CHECK(false, "ZeRO stage {} is not 0-3", stage);
  }
  return 0.0;
}

std::vector<StageRun> compare_stages(const EngineConfig& config, Communicator& comm,
                                     const LabeledImages& train, const LabeledImages& test,
                                     const RunSpec& spec, const std::string& nvme_path) {
  std::vector<StageRun> runs;
  std::vector<std::pair<int, OffloadDevice>> plan = {{0, OffloadDevice::none}, {1, OffloadDevice::none},
                                                     {2, OffloadDevice::none}, {3, OffloadDevice::none},
                                                     {3, OffloadDevice::cpu}};
  if (!nvme_path.empty()) plan.emplace_back(3, OffloadDevice::nvme);
  {
    // Untimed warm-up, so that the first stage does not absorb the
    // process's first-use costs.
    RunSpec warm = spec;
    warm.train.max_steps = kProcessWarmupSteps;
    warm.train.steps_per_print = 0;
    warm.train.print_epochs = false;
    warm.train.save_dir.clear();
    warm.train.epochs = 1;
    warm.resume = false;
    train_fresh(config, comm, train, test, warm);
  }
  for (const auto& [stage, tier] : plan) {
    EngineConfig c = config;
    c.zero.stage = stage;
    c.offload.optimizer = {};
    c.offload.param = {};
    c.offload.optimizer.device = tier;
    c.offload.param.device = tier;
    c.offload.optimizer.nvme_path = nvme_path;
    c.offload.param.nvme_path = nvme_path;
    c.offload.param.max_in_cpu = 0;
    StageRun run;
    run.stage = stage;
    run.offload = offload_device_name(tier);
    LedgerFigures mine;
    const RunOutcome outcome = train_fresh(c, comm, train, test, spec, [&](Engine& engine) {
      mine = LedgerFigures::of(engine.ledger());
    });
    run.result = outcome.result;
    run.num_parameters = outcome.num_parameters;
    run.ranks = gather_ledger_figures(comm, mine);
    run.shown_rank = pick_rank(run.ranks);
    run.step_seconds = median_step_seconds(run.result, kWarmupSteps);
    if (comm.rank() == 0) {
      fmt::print("stage {}{}: {} steps in {:.1f} s ({:.1f} ms per step after {} warm-up steps), last-step loss {:.6f}\n",
                 stage, tier == OffloadDevice::none ? "" : fmt::format(" + {} offload", run.offload),
                 run.result.optimizer_steps, run.result.wall_seconds, 1e3 * run.step_seconds, kWarmupSteps,
                 run.result.last_step_loss);
      std::fflush(stdout);
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

std::string stage_table(const std::vector<StageRun>& runs, int world_size,
                        const EngineConfig& config) {
  const StateBytesPerParam bytes = StateBytesPerParam::of(config);
  ZS_CHECK(!runs.empty() && runs.front().stage == 0, "the comparison starts with stage 0");
  const double base = double(runs.front().ranks[std::size_t(runs.front().shown_rank)].model_state);
  std::string out = fmt::format(
      "ZeRO model states per rank: world size N = {}, Psi = {} parameters, {} + {} (P = {:g}, "
      "G = {:g}, K = {:g} bytes per parameter), {} optimizer steps per stage\n",
      world_size, runs.front().num_parameters, dtype_name(config.compute_dtype),
      optimizer_name(config.optimizer.kind), bytes.parameters, bytes.gradients, bytes.optimizer,
      runs.front().result.optimizer_steps);
  out += fmt::format(
      "{:>5} | {:>7} | {:>4} | {:>11} | {:>11} | {:>11} | {:>10} | {:>11} | {:>8} | "
      "{:>8} | {:>10} | {:>10} | {:>10} | {:>10} | {:>8} | {:>8}\n",
      "stage", "offload", "rank", "parameters", "gradients", "optim state", "padding", "total", "ratio",
      "paper", "device", "host", "nvme", "final loss", "test acc", "step ms");
  out += fmt::format("{:->186}\n", "");
  for (const StageRun& run : runs) {
    const LedgerFigures& f = run.ranks[std::size_t(run.shown_rank)];
    out += fmt::format(
        "{:>5} | {:>7} | {:>4} | {:>11} | {:>11} | {:>11} | {:>10} | {:>11} | {:>8.4f} | {:>8.4f} | "
        "{:>10} | {:>10} | {:>10} | {:>10.6f} | {:>8.4f} | {:>8.2f}\n",
        run.stage, run.offload, run.shown_rank, format_bytes(f.now(MemCategory::parameters)),
        format_bytes(f.now(MemCategory::gradients) + f.now(MemCategory::grad_accumulator)),
        format_bytes(optimizer_side(f)),
        format_bytes(f.model_state_padding), format_bytes(f.model_state),
        base > 0 ? double(f.model_state) / base : 0.0,
        predicted_model_state_ratio(run.stage, world_size, bytes), format_bytes(f.model_state_tier[0]),
        format_bytes(f.model_state_tier[1]), format_bytes(f.model_state_tier[2]), run.result.last_step_loss,
        run.result.final_accuracy, 1e3 * run.step_seconds);
  }
  out +=
      "rank: the rank with the most model-state bytes (then the most padding); total = "
      "parameters + gradients (incl. the fp32 gradient accumulator of mixed precision, which the paper's 2-byte G "
      "leaves out) + optimizer states (incl. master weights), padding included; "
      "paper: Rajbhandari et al. 2020, (P + G + K) Psi split per stage; device / host / nvme: "
      "where the model states are (offload: optimizer state and parameters on the cpu or nvme "
      "tier, the rank's gradient shard with the optimizer state); final loss: mean loss "
      "of the last optimizer step over ranks; step ms: rank 0's median optimizer-step time, "
      "leaving out each stage's first steps, after an untimed warm-up run of the whole process\n";
  return out;
}

nlohmann::json to_json(const std::vector<StageRun>& runs, int world_size,
                       const EngineConfig& config) {
  const StateBytesPerParam bytes = StateBytesPerParam::of(config);
  nlohmann::json out = nlohmann::json::array();
  for (const StageRun& run : runs) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (const LedgerFigures& f : run.ranks) per_rank.push_back(f.model_state);
    const double base =
        double(runs.front().ranks[std::size_t(runs.front().shown_rank)].model_state);
    const LedgerFigures& f = run.ranks[std::size_t(run.shown_rank)];
    out.push_back({{"stage", run.stage},
                   {"offload", run.offload},
                   {"shown_rank", run.shown_rank},
                   {"ledger", to_json(f)},
                   {"model_state_bytes_per_rank", per_rank},
                   {"ratio_to_stage0", base > 0 ? double(f.model_state) / base : 0.0},
                   {"paper_ratio", predicted_model_state_ratio(run.stage, world_size, bytes)},
                   {"step_seconds_median", run.step_seconds},
                   {"run", to_json(run.result)}});
  }
  return out;
}

}  // namespace zeroshard::examples
