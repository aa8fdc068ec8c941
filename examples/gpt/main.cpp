// gpt: a GPT-2-style byte-level decoder (examples/gpt/gpt_model.h) trained
// on the fortune files with tensor parallelism inside each tensor-parallel
// group, the layers cut into pipeline stages ([Note: GPT pipeline stages])
// and ZeRO over the data-parallel group (comm/mesh.h).
//
//   mpirun -np 4 gpt --dp 2 --tp 2 --stage 3 --report run.json   # 500 steps, a few minutes
//   mpirun -np 4 gpt --dp 2 --pp 2 --schedule 1f1b --gradient-accumulation-steps 4
//   mpirun -np 4 gpt --dp 4 --tp 1 --bf16 --sample "The "
//   mpirun -np 4 gpt --dp 2 --tp 2 --save-dir ckpt --save-every 100
//   mpirun -np 4 gpt --dp 2 --tp 2 --save-dir ckpt --resume --steps 400
//
// Rank 0 prints the train and validation loss in nats and bits per byte
// against the corpus's unigram entropy, tokens/s, then every rank's memory
// ledger; --sample prints text generated from a prompt. The configuration
// is a ds_config (--config, DeepSpeed keys) or the defaults below; --stage,
// --bf16 and --offload override it.
#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "comm/mesh_placement.h"
#include "comm/node_groups.h"
#include "core/error.h"
#include "examples/fashion_mnist/preflight.h"
#include "examples/fashion_mnist/report.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/gpt_preflight.h"
#include "examples/gpt/text_corpus.h"
#include "examples/job_config.h"
#include "examples/rank_threads.h"
#include "examples/end_job.h"
#include "examples/report/checkpoint_saves.h"
#include "examples/report/cross_host_meter.h"
#include "examples/report/progress_line.h"
#include "examples/report/plan_lines.h"
#include "examples/report/run_charts.h"
#include "parallel/pipeline_schedule.h"
#include "comm/collective_error.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"

#ifndef ZS_EXAMPLE_OPENBLAS
#define ZS_EXAMPLE_OPENBLAS 0
#endif

namespace zeroshard::examples {
namespace {

struct Options {
  int dp = 0, tp = 1, pp = 1;  ///< dp 0: world / (tp x pp)
  std::string schedule = "1f1b";  ///< --schedule: gpipe or 1f1b
  int accumulation = 0;           ///< --gradient-accumulation-steps: micro-batches per step (0: auto)
  std::string config_path;
  int stage = -1;
  bool breakdown = false;  ///< --breakdown: wall_clock_breakdown
  std::string trace_dir;   ///< --trace DIR: Chrome traces
  std::string calibration_path;  ///< --calibration FILE: predicted vs measured step time
  bool bf16 = false;
  bool activation_checkpointing = false;  ///< --activation-checkpointing: keep block inputs, recompute the rest
  std::string offload = "none";  ///< offload_optimizer device: none or cpu
  std::int64_t warmup_steps = 0;  ///< --warmup-steps: fills "auto" warmup_num_steps
  GptShape shape;
  int micro_batch = 8;
  int seq = 64;
  double lr = 2e-3;
  std::int64_t steps = 500;
  int eval_every = 100;
  int eval_batches = 16;
  std::uint64_t seed = 1234;
  std::string data_dir = "/usr/share/games/fortunes";
  std::string report_path;
  std::string save_dir;
  std::int64_t save_every = 0;
  int keep_last = 0;
  bool resume = false;
  std::string resume_tag;  ///< --resume-tag: the checkpoint to load ("" = the newest)
  std::optional<std::string> sample;
  int sample_bytes = 200;
  double temperature = 0.8;
};

/// Micro-batches per optimizer step: --gradient-accumulation-steps, or by
/// default 1 without pipeline stages and 2 pp with them (bubble
/// (pp - 1) / (3 pp - 1)).
int micro_batches(const Options& o) { return o.accumulation > 0 ? o.accumulation : (o.pp > 1 ? 2 * o.pp : 1); }

/// --config with its "auto" values filled from the program's settings by
/// HF Trainer's rules (ConfigOptions::from_program: the defaults below with
/// the flags over them, the model width as the hidden size, --steps as
/// total_num_steps), or AdamW (betas 0.9/0.95, weight decay 0.1 outside
/// the no_decay group), clipping 1, stage 3, the flags' micro-batch and lr;
/// then --stage, --bf16 and --offload. Offload tiers' pin_memory is turned
/// off with a warning (the Engine is in host memory).
EngineConfig make_config(const Options& o, int dp) {
  ConfigFlags flags;
  flags.config_path = o.config_path;
  flags.stage = o.stage;
  flags.breakdown = o.breakdown;
  flags.trace_dir = o.trace_dir;
  flags.calibration_path = o.calibration_path;
  flags.micro_batch = o.micro_batch;
  flags.accumulation = micro_batches(o);
  flags.lr = o.lr;
  flags.precision = o.bf16 ? DType::bf16 : DType::f32;
  flags.warmup_steps = o.warmup_steps;
  EngineConfig defaults = adamw_job_defaults(o.micro_batch, o.lr, 0.95, 0.1);
  ProgramValues p = program_values(flags, defaults, dp);
  p.hidden_size = o.shape.dim;
  return make_job_config(
      flags, p, std::move(defaults), dp,
      [&](EngineConfig& c) {
        // The breakdown prints with each validation line, and at
        // least once in a run shorter than --eval-every.
        if (o.config_path.empty()) {
          c.steps_per_print = std::max(1, static_cast<int>(std::min<std::int64_t>(o.eval_every, o.steps)));
        }
        if (o.bf16) c.compute_dtype = DType::bf16;
        if (o.offload == "cpu") c.offload.optimizer.device = OffloadDevice::cpu;
        unpin_host_engine(c);
      },
      [&](std::int64_t) { return o.steps; });
}

double bits(double nats) { return nats / std::log(2.0); }

// Mean validation loss over eval_batches global micro-batches of fixed
// windows (micro-batch x dp each, the same set on every mesh with the same
// global micro-batch): each dp rank evaluates its rows of each.
double validation_loss(Gpt& gpt, const Mesh& mesh, const TextCorpus& corpus, const Options& o) {
  const int dp = mesh.dp_size(), global = o.micro_batch * dp;
  double sum = 0;
  for (int b = 0; b < o.eval_batches; ++b) {
    const auto w = fixed_windows(corpus.valid, b * global + mesh.dp_rank() * o.micro_batch, o.micro_batch,
                                 o.eval_batches * global, o.seq);
    sum += gpt.evaluate(w, o.micro_batch, o.seq);
  }
  mesh.dp_group().all_reduce(&sum, 1, DType::f64, ReduceOp::sum);
  return sum / (static_cast<double>(o.eval_batches) * dp);
}

int run(const Options& options) {
  Options o = options;
  auto world = make_world_communicator();
  const int rank = world->rank();
#if ZS_EXAMPLE_OPENBLAS
  if (world->world_size() > 1) openblas_set_num_threads(1);
#endif
  const int tp = o.tp, pp = o.pp;
  const int dp = o.dp > 0 ? o.dp : std::max(1, world->world_size() / std::max(1, tp * pp));
  Mesh mesh(*world, MeshShape{dp, tp, pp});
  const PipelineScheduleKind schedule = parse_pipeline_schedule(o.schedule);
  // [Note: tensor-parallel placement]: said before anything else runs.
  const NodeGroups nodes = split_by_node(*world);
  share_cores_among_ranks(nodes.local_size);
  const TpPlacement placement = tp_placement(mesh, nodes);
  // Every rank reads the same flags and file: one agreed error, printed once.
  EngineConfig config;
  run_agreed(*world, [&] { config = make_config(o, dp); });
  if (rank == 0) print_config_notes("gpt", config);
  // The configuration decides (a ds_config value wins over the flag that
  // fills its "auto"): the loop runs its micro-batch and accumulation.
  o.micro_batch = static_cast<int>(config.train_micro_batch_size_per_gpu);
  const int m = static_cast<int>(config.gradient_accumulation_steps);
  // Sequences per optimizer step over the whole data-parallel group.
  const std::int64_t global_batch = static_cast<std::int64_t>(o.micro_batch) * dp * m;
  if (!o.resume_tag.empty()) o.resume = true;
  if (o.resume && o.save_dir.empty()) {
    throw ConfigError(fmt::format("{} needs --save-dir, the folder of the checkpoints",
                                  o.resume_tag.empty() ? "--resume" : "--resume-tag"));
  }
  if (!o.save_dir.empty()) check_save_dir(*world, o.save_dir);
  // Sizes too large for the memory are refused here, naming the flag (not
  // by std::bad_alloc or the OOM killer while the model is built).
  run_agreed(*world, [&] {
    GptRunSizes sizes;
    sizes.shape = o.shape;
    sizes.micro_batch = o.micro_batch;
    sizes.seq = o.seq;
    sizes.accumulation = m;
    sizes.dp = dp, sizes.tp = tp, sizes.pp = pp;
    sizes.schedule = schedule;
    sizes.stage = config.zero.stage;
    sizes.element_bytes = static_cast<double>(dtype_size(config.compute_dtype));
    sizes.param_nvme = config.offload.param.device == OffloadDevice::nvme;
    sizes.optimizer_nvme = config.offload.optimizer.device == OffloadDevice::nvme;
    sizes.activation_checkpointing = o.activation_checkpointing;
    check_gpt_fits(sizes, physical_memory_bytes() / static_cast<std::uint64_t>(nodes.local_size));
  });
  const TextCorpus corpus = load_text_corpus(o.data_dir, 0.05);
  if (o.seq > o.shape.context) {
    throw ConfigError(fmt::format("--seq {} exceeds --context {}", o.seq, o.shape.context));
  }

  std::optional<MachineRates> rates;
  if (!o.calibration_path.empty()) rates = MachineRates::from_file(o.calibration_path);
  Engine engine(config, mesh);
  Gpt gpt(engine, mesh, o.shape);
  gpt.set_activation_checkpointing(o.activation_checkpointing);
  engine.finalize();
  const std::string estimate = estimate_beside_ledger(engine);
  gpt.initialize(o.seed);
  std::int64_t start_step = 0;
  std::uint64_t data_seed = o.seed + 1;
  if (o.resume) {
    const nlohmann::json cs = engine.load_checkpoint(o.save_dir, o.resume_tag);
    start_step = cs.value("step", std::int64_t{0});
    data_seed = cs.value("data_seed", data_seed);
    if (rank == 0) fmt::print("gpt: resumed from {} at step {}\n", o.save_dir, start_step);
    // The data position is start_step global batches of this run's shape: a
    // checkpoint saved with another global batch continues from elsewhere.
    const std::int64_t saved_seqs = cs.value("global_batch_sequences", std::int64_t{0});
    if (rank == 0 && saved_seqs != 0 && saved_seqs != global_batch) {
      fmt::print("gpt: note: the checkpoint was saved with a global batch of {} sequences per step, this run uses {}: "
                 "the data continue from another position than the saved run's\n",
                 saved_seqs, global_batch);
    }
  }
  if (rank == 0) {
    fmt::print(
        "gpt: {} files, {} train / {} validation bytes, unigram entropy {:.4f} bits/byte\n"
        "gpt: {} layers, {} heads, width {}, context {}, {} parameters; mesh dp {} x tp {} x pp {} ({} ranks), "
        "stage {}, {}, {}, {} micro-batch(es) of {} x {} tokens per dp rank and step, {}\n",
        corpus.files, corpus.train.size(), corpus.valid.size(), corpus.unigram_bits, o.shape.layers, o.shape.heads,
        o.shape.dim, o.shape.context, gpt.full_parameter_count(), dp, tp, pp, world->world_size(),
        config.zero.stage, dtype_name(config.compute_dtype), examples::offload_summary(config), m, o.micro_batch, o.seq,
        examples::optimizer_summary(config));
    if (pp > 1) {
      fmt::print("gpt: {} pipeline stages, schedule {}, {} micro-batches: bubble (p - 1) / (m + p - 1) = {:.3f}\n",
                 pp, to_string(schedule), m, static_cast<double>(pp - 1) / (m + pp - 1));
    }
    fmt::print("gpt: {}\n", placement.describe());
    fmt::print("{}", estimate);
    std::fflush(stdout);
  }
  // Every rank draws the same global micro-batch (micro-batch x dp windows)
  // and keeps its dp rank's rows: the data do not depend on the mesh, so runs
  // at (dp, tp, pp) with the same global batch see the same sequences.
  std::mt19937_64 gen(data_seed * 1000003ULL);
  const std::size_t row = static_cast<std::size_t>(o.seq + 1) * static_cast<std::size_t>(o.micro_batch);
  auto next_micro_batch = [&] {
    const auto global = sample_windows(corpus.train, o.micro_batch * dp, o.seq, gen);
    const auto first = global.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(mesh.dp_rank()));
    return std::vector<std::int32_t>(first, first + static_cast<std::ptrdiff_t>(row));
  };
  for (std::int64_t k = 0; k < start_step * m; ++k) next_micro_batch();
  nlohmann::json history = nlohmann::json::array();
  double train_sum = 0, val = 0, train_last = 0;
  if (start_step >= o.steps) {
    // Nothing to train: the summary reports the loaded model's validation loss.
    if (rank == 0) {
      if (o.resume) {
        fmt::print("gpt: the checkpoint is at step {}, not below --steps {}: no steps to run; the validation "
                   "loss below is the loaded model's\n",
                   start_step, o.steps);
      } else {
        fmt::print("gpt: --steps 0: no steps to run; the validation loss below is the initial model's\n");
      }
    }
    val = validation_loss(gpt, mesh, corpus, o);
  }
  int train_n = 0;
  double compute_s = 0;
  double bubble_sum = 0;  // this stage's idle fraction of each step's pipeline run
  std::int64_t tokens_done = 0;
  std::optional<ProgressLine> progress;  // rank 0, stderr: step, rate, ETA
  if (rank == 0) progress.emplace("train", o.steps - start_step, stderr);
  CrossHostMeter meter(engine, mesh.dp_group());  // the bytes a step sends between hosts
  std::vector<double> step_seconds;
  CheckpointSaves saves;  // --save-every: synchronous, or async with checkpoint.async
  for (std::int64_t step = start_step; step < o.steps; ++step) {
    meter.before_step();
    const bool writing = engine.checkpoint_in_flight();  // an async save's write runs beside this step
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<std::int32_t>> batches;
    for (int j = 0; j < m; ++j) batches.push_back(next_micro_batch());
    const double loss = gpt.train_batch(batches, o.micro_batch, o.seq, schedule, engine.loss_scale());
    engine.report_loss(loss);  // the csv_monitor's train_loss (world rank 0's)
    const StepResult r = engine.step();
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    compute_s += step_s;
    step_seconds.push_back(step_s);
    saves.step(writing, step_s);
    meter.after_step();
    tokens_done += global_batch * o.seq;
    bubble_sum += gpt.last_timeline().idle_fraction();
    double agg = loss;
    mesh.dp_group().all_reduce(&agg, 1, DType::f64, ReduceOp::sum);
    train_sum += agg / dp;
    ++train_n;
    if (progress) progress->update(step + 1 - start_step, fmt::format("loss {:.3f}", agg / dp));
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.eval_every == 0 || last) {
      val = validation_loss(gpt, mesh, corpus, o);
      train_last = train_sum / train_n;
      if (rank == 0) {
        fmt::print("step {:5d}  train loss {:.4f} ({:.3f} bits/byte)  validation loss {:.4f} ({:.3f} bits/byte, "
                   "unigram {:.3f})  grad norm {:.3f}  {:.0f} tokens/s\n",
                   step + 1, train_last, bits(train_last), val, bits(val), corpus.unigram_bits, r.grad_norm,
                   static_cast<double>(tokens_done) / compute_s);
        std::fflush(stdout);
      }
      history.push_back({{"step", step + 1}, {"train_loss", train_last}, {"validation_loss", val},
                         {"grad_norm", r.grad_norm}});
      train_sum = 0;
      train_n = 0;
    }
    if (!o.save_dir.empty() && ((o.save_every > 0 && (step + 1) % o.save_every == 0) || last)) {
      const nlohmann::json client = {{"step", step + 1}, {"data_seed", data_seed},
                                     {"global_batch_sequences", global_batch}};
      saves.save(engine, o.save_dir, client, o.keep_last);
    }
  }
  saves.finish(engine);  // an async save still in flight commits here
  if (progress) progress->finish();
  const nlohmann::json cross_host = meter.figures(*world);
  // The median step after the first (which records the unshard order).
  double median_step = 0;
  if (step_seconds.size() > 1) {
    std::vector<double> t(step_seconds.begin() + 1, step_seconds.end());
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    median_step = t[t.size() / 2];
  }
  const nlohmann::json observe = finish_observed_run(engine);
  const std::string predicted = rates ? predicted_beside_measured(engine, *rates) : "";
  const double tokens_per_s = compute_s > 0 ? static_cast<double>(tokens_done) / compute_s : 0.0;
  const LedgerFigures mine = LedgerFigures::of(engine.ledger());
  const auto all = gather_ledger_figures(*world, mine);
  // Per rank: the mean idle fraction of its pipeline runs and its peak of kept activations.
  const std::int64_t steps_run = o.steps - start_step;
  const double pipeline_stage_figures[2] = {steps_run > 0 ? bubble_sum / static_cast<double>(steps_run) : 0.0,
                                   static_cast<double>(gpt.peak_activation_bytes())};
  std::vector<double> figures(2 * static_cast<std::size_t>(world->world_size()));
  world->all_gather(pipeline_stage_figures, figures.data(), 2, DType::f64);
  const std::string table = engine.ledger().table(
      fmt::format("memory ledger, rank {} of {} (dp {} tp {} pp {}), stage {}", rank, world->world_size(),
                  mesh.dp_rank(), mesh.tp_rank(), mesh.pp_rank(), engine.stage()));
  if (rank == 0) {
    fmt::print("\nvalidation loss {:.4f} nats = {:.4f} bits/byte vs unigram entropy {:.4f} bits/byte; {:.0f} tokens/s\n",
               val, bits(val), corpus.unigram_bits, tokens_per_s);
    fmt::print("model-state bytes per rank:");
    for (std::size_t q = 0; q < all.size(); ++q) fmt::print(" r{}={}", q, all[q].model_state);
    fmt::print("\noptimizer-state bytes per rank ({} states):", state_dtype_name(config.optimizer.states.dtype));
    for (std::size_t q = 0; q < all.size(); ++q) fmt::print(" r{}={}", q, all[q].now(MemCategory::optimizer_states));
    fmt::print("\npipeline idle fraction per rank (bubble and waiting):");
    for (std::size_t q = 0; q < all.size(); ++q) fmt::print(" r{}={:.3f}", q, figures[2 * q]);
    fmt::print("\npeak kept activations per rank (bytes):");
    for (std::size_t q = 0; q < all.size(); ++q) fmt::print(" r{}={:.0f}", q, figures[2 * q + 1]);
    fmt::print("\n\n{}", table);
    fmt::print("{}", predicted);
    fmt::print("{}", CrossHostMeter::line(cross_host));
    if (median_step > 0) fmt::print("median step {:.4f} s (steps 2-{})\n", median_step, step_seconds.size());
    fmt::print("{}", CheckpointSaves::line(saves.figures()));
    std::fflush(stdout);
  }
  std::string text;
  if (o.sample) {
    text = gpt.sample(*o.sample, o.sample_bytes, o.temperature, o.seed + 7);
    if (rank == 0) fmt::print("\nsample (temperature {:g}):\n{}\n", o.temperature, text);
  }
  if (rank == 0 && !o.report_path.empty()) {
    nlohmann::json per_rank = nlohmann::json::array(), idle = nlohmann::json::array(),
                   activations = nlohmann::json::array();
    nlohmann::json state_bytes = nlohmann::json::array();
    for (const LedgerFigures& f : all) {
      per_rank.push_back(f.model_state);
      state_bytes.push_back(f.now(MemCategory::optimizer_states));
    }
    for (std::size_t q = 0; q < all.size(); ++q) {
      idle.push_back(figures[2 * q]);
      activations.push_back(figures[2 * q + 1]);
    }
    nlohmann::json report = {{"program", "gpt"},
                             {"config", to_json(config)},
                             {"mesh", {{"dp", dp}, {"tp", tp}, {"pp", pp}}},
                             {"skipped_steps", engine.skipped_steps()},
                             {"activation_checkpointing", o.activation_checkpointing},
                             {"pipeline", {{"schedule", to_string(schedule)}, {"micro_batches", m},
                                           {"idle_fraction_per_rank", idle},
                                           {"peak_activation_bytes_per_rank", activations}}},
                             {"model", {{"layers", o.shape.layers}, {"heads", o.shape.heads}, {"dim", o.shape.dim},
                                        {"context", o.shape.context}, {"vocab", o.shape.vocab}, {"seq", o.seq},
                                        {"parameters", gpt.full_parameter_count()}}},
                             {"steps", o.steps},
                             {"history", history},
                             {"train_loss", train_last},
                             {"validation_loss", val},
                             {"validation_bits_per_byte", bits(val)},
                             {"unigram_entropy_bits", corpus.unigram_bits},
                             {"tokens_per_s", tokens_per_s},
                             {"ledger_rank0", to_json(all.front())},
                             {"model_state_bytes_per_rank", per_rank},
                             {"optimizer_state_bytes_per_rank", state_bytes}};
    if (o.sample) report["sample"] = text;
    report["observe"] = observe;
    report["cross_host_bytes"] = cross_host;
    report["median_step_seconds"] = median_step;
    report["checkpoints"] = saves.figures();
    write_json_file(o.report_path, report);
    const std::string what = fmt::format("gpt, dp {} x tp {} x pp {}, stage {}", dp, tp, pp, engine.stage());
    write_text_atomically(chart_path(o.report_path, "memory"),
                          stacked_bar_svg(memory_chart(what + ": memory per rank", current_per_rank(all))));
    write_text_atomically(chart_path(o.report_path, "steps"),
                          stacked_bar_svg(step_chart(what + ": mean step time per rank", observe)));
    write_monitor_charts(o.report_path, config.observe.csv_monitor, what);
  }
  return 0;
}

}  // namespace
}  // namespace zeroshard::examples

int main(int argc, char** argv) {
  zeroshard::examples::Options o;
  CLI::App app{"GPT-2-style byte-level decoder on a dp x tp x pp mesh with ZeRO sharding (zeroshard)"};
  app.add_option("--dp", o.dp, "data-parallel size (0: world / (tp x pp))")->check(CLI::NonNegativeNumber);
  app.add_option("--tp", o.tp, "tensor-parallel size")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--pp", o.pp, "pipeline stages (the layers split evenly)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--schedule", o.schedule, "pipeline schedule")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))->capture_default_str();
  app.add_option("--gradient-accumulation-steps", o.accumulation,
                 "micro-batches per optimizer step, run through the pipeline (0: 1, or 2 x pp with --pp > 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--config", o.config_path, "ds_config JSON file (DeepSpeed keys)");
  app.add_option("--stage", o.stage, "ZeRO stage 0-3 (overrides the config)")->check(CLI::Range(0, 3));
  app.add_flag("--breakdown", o.breakdown,
               "print the step breakdown and straggler line every steps_per_print steps (wall_clock_breakdown; "
               "without --config, steps_per_print is --eval-every, or --steps if fewer)");
  app.add_option("--calibration", o.calibration_path,
                 "rates from zs_plan --calibrate: print the predicted step time beside the measured one "
                 "(turns on wall_clock_breakdown)")
      ->check(CLI::ExistingFile);
  app.add_option("--trace", o.trace_dir,
                 "write Chrome traces (trace-rank<r>.json and the merged trace.json) to this directory");
  app.add_flag("--bf16", o.bf16, "bf16 parameters and gradients, fp32 master weights");
  app.add_flag("--activation-checkpointing", o.activation_checkpointing,
               "keep only each block's input for the backward, which recomputes the block (the config's "
               "activation_checkpointing section says how the inputs are held)");
  app.add_option("--warmup-steps", o.warmup_steps,
                 "value of an \"auto\" scheduler.params.warmup_num_steps in --config (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--offload", o.offload, "offload_optimizer device")
      ->check(CLI::IsMember({"none", "cpu"}))->capture_default_str();
  app.add_option("--layers", o.shape.layers, "decoder blocks")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--heads", o.shape.heads, "attention heads")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--dim", o.shape.dim, "model width")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--context", o.shape.context, "longest sequence (position embeddings)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--seq", o.seq, "training sequence length")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "sequences per dp rank and micro-batch")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", o.lr, "learning rate")->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "steps between validation passes")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--eval-batches", o.eval_batches, "validation batches of micro-batch x dp fixed windows")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--seed", o.seed, "seed of the initialisation and the data order")->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "folder of fortune text files")->capture_default_str();
  app.add_option("--report", o.report_path, "write a JSON report to this file (rank 0)");
  app.add_option("--save-dir", o.save_dir, "save sharded checkpoints here");
  app.add_option("--save-every", o.save_every, "optimizer steps between checkpoints (0: at the end only)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  app.add_option("--keep-last", o.keep_last, "keep only the newest N checkpoints (0: all)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--resume", o.resume,
               "continue from the newest checkpoint in --save-dir (on a mesh: the newest step every folder holds)");
  app.add_option("--resume-tag", o.resume_tag,
                 "continue from this checkpoint of --save-dir (a tag such as step-00000020; on a mesh every "
                 "folder must hold it)");
  app.add_option("--sample", o.sample, "print text generated from this prompt after training");
  app.add_option("--sample-bytes", o.sample_bytes, "bytes to generate")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--temperature", o.temperature, "sampling temperature")
      ->check(CLI::Range(0.001, 1000.0))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return zeroshard::examples::run(o);
  } catch (const std::exception& e) {
    return zeroshard::examples::end_job_with_error("gpt", e);
  }
}
