// fashion_mnist: data-parallel training of an MLP classifier on Fashion-MNIST
// with its training state sharded by a zeroshard Engine (ZeRO stages 0-3).
//
//   mpirun -np 4 fashion_mnist --stage 3 --epochs 2 --report run.json
//   mpirun -np 4 fashion_mnist --compare-stages --max-steps 20
//   mpirun -np 4 fashion_mnist --save-dir ckpt --save-every 200 --max-steps 400
//   mpirun -np 2 fashion_mnist --save-dir ckpt --resume --max-steps 800
//   mpirun -np 8 fashion_mnist --device cuda --epochs 1      # one rank per GPU
//   mpirun -np 3 fashion_mnist --stage 2 --parameter-servers 1 --staleness 1
//
// Rank 0 prints per-epoch loss, test accuracy and throughput, then the memory
// ledger; --save-dir saves sharded checkpoints (every --save-every
// optimizer steps and at the end) that --resume continues from, at any
// world size (docs/checkpoint-format.md); --compare-stages prints one table
// of model-state bytes per rank at stages 0-3 against the ZeRO paper's
// prediction. --device cuda runs the MLP's GEMMs with cuBLAS on the GPU of
// the rank's node-local rank (the Engine stays in host memory; see
// cuda_mlp.h). --parameter-servers S makes the last S ranks parameter
// servers holding the optimizer state (runtime/ps/param_server.h); the
// others train, and print their pushes, pulls and waits.
#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "examples/report/error_message.h"
#include "examples/job_config.h"
#include "examples/end_job.h"
#include "examples/rank_threads.h"
#include "comm/node_groups.h"
#include "examples/fashion_mnist/compare_stages.h"
#include "examples/fashion_mnist/compute_device.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "examples/fashion_mnist/preflight.h"
#include "examples/fashion_mnist/report.h"
#include "examples/report/plan_lines.h"
#include "examples/report/run_charts.h"
#include "examples/fashion_mnist/trainer.h"
#include "comm/collective_error.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"

#ifndef ZS_EXAMPLE_OPENBLAS
#define ZS_EXAMPLE_OPENBLAS 0
#endif

namespace zeroshard::examples {
namespace {

constexpr int kClasses = 10;
constexpr std::int64_t kPixels = 28 * 28;  ///< Fashion-MNIST images
constexpr std::int64_t kFashionMnistTrainImages = 60000;  ///< the training split

/// Command-line settings.
struct Options {
  ConfigFlags config;  ///< --config, --stage, --micro-batch, --lr, --fill
  int epochs = 2;
  std::string hidden = "1024,1024";
  std::uint64_t seed = 42;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::int64_t max_steps = 0;
  std::string report_path;
  bool compare = false;
  std::string nvme_path = "/tmp/zeroshard-swap";  ///< --compare-stages' nvme offload row
  std::string save_dir;         ///< checkpoints go here ("": none)
  std::int64_t save_every = 0;  ///< optimizer steps between checkpoints (0: only at the end)
  int keep_last = 0;            ///< newest checkpoints kept (0: all)
  bool resume = false;          ///< continue from the latest checkpoint in save_dir
  std::string device = "cpu";   ///< --device: cpu or cuda (compute_device.h)
  /// --parameter-servers / --staleness: parameter_server.servers and
  /// .staleness over the config's (-1: the config's).
  std::int64_t servers = -1;
  std::int64_t staleness = -1;
  std::string ps_push;       ///< --ps-push: parameter_server.push ("": the config's)
  int slow_rank = -1;        ///< --slow-rank: a straggler among the training ranks (-1: none)
  double slow_factor = 2.0;  ///< --slow-factor: its compute stretched this many times
};

/// Hidden layer widths from "1024,1024" (empty string: no hidden layer).
/// Throws ConfigError naming --hidden on anything but positive integers.
std::vector<std::int64_t> parse_hidden(const std::string& text) {
  std::vector<std::int64_t> sizes;
  if (text.empty()) return sizes;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    std::int64_t v = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + comma;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || ptr != last || v < 1) {
      throw ConfigError(fmt::format(
          "--hidden \"{}\": \"{}\" is not a positive integer; give widths like \"1024,1024\"", text,
          std::string(first, last)));
    }
    sizes.push_back(v);
    pos = comma + 1;
  }
  return sizes;
}

/// The program fills the "auto" values of --config from its own settings
/// by HF Trainer's rules (ConfigOptions::from_program, docs/config.md): the
/// defaults below with the flags over them, the widest hidden layer as the
/// model's hidden size, and the run's optimizer steps (--max-steps, or
/// --epochs passes of the 60000 training images at the global batch) as
/// total_num_steps. Without --config: AdamW (lr 1e-3, betas 0.9/0.999,
/// eps 1e-8, weight decay 0.01), micro-batch 32, no accumulation, clipping 1,
/// a line every 100 steps, with the flags set over it. Offload tiers' pin_memory
/// is turned off with a warning (the Engine is in host memory, compute_device.h).
EngineConfig make_config(const Options& o, int world_size) {
  EngineConfig defaults = adamw_job_defaults(32, 1e-3, 0.999, 0.01);
  defaults.steps_per_print = 100;
  ProgramValues p = program_values(o.config, defaults, world_size);
  const std::vector<std::int64_t> hidden = parse_hidden(o.hidden);
  if (!hidden.empty()) p.hidden_size = *std::max_element(hidden.begin(), hidden.end());
  const auto steps_for_batch = [&](std::int64_t global_batch) {
    const std::int64_t steps = o.epochs * (kFashionMnistTrainImages / std::max<std::int64_t>(1, global_batch));
    return o.max_steps > 0 ? std::min(steps, o.max_steps) : steps;
  };
  EngineConfig c = make_job_config(o.config, p, std::move(defaults), world_size, unpin_host_engine, steps_for_batch);
  if (o.servers >= 0) c.parameter_server.servers = o.servers;
  if (o.staleness >= 0) c.parameter_server.staleness = o.staleness;
  if (!o.ps_push.empty()) c.parameter_server.push = o.ps_push == "direct" ? PsPushMode::direct : PsPushMode::reduce;
  if (o.staleness > 0 && !c.parameter_server.enabled()) {
    c.warnings.push_back(
        fmt::format("--staleness {} has no effect without parameter servers (--parameter-servers "
                    "or parameter_server.servers)",
                    o.staleness));
  }
  c.validate();  // the flags' combinations with the file (fp32, stage >= 1)
  return c;
}

/// Figures per rank in the report's "parameter_server_figures".
constexpr std::size_t kPsFigures = 10;

/// One line per training rank of a parameter-server run (or of a run with
/// --slow-rank, whose ranks push nothing): bytes pushed and
/// pulled per step, seconds in step() (idle for the others and the
/// servers), and the mean staleness of its pulls; a server's updates,
/// bytes, largest lag and time per update ("direct": also the mean lag in
/// its own updates and the mean lr scale). `figures` holds each world
/// rank's kPsFigures values (is_server, optimizer steps of the run, bytes
/// pushed, bytes pulled, engine step seconds, pull wait seconds, mean lag,
/// push seconds, 0, 0; a server's: 1, updates applied, bytes received,
/// bytes sent, receive seconds, update seconds, largest lag, send seconds,
/// summed lag in updates, summed lr scale).
std::string parameter_server_lines(const std::vector<double>& figures, int world, const EngineConfig& c) {
  std::string out = c.parameter_server.enabled()
                        ? fmt::format("parameter servers: {}, staleness {}, push {}\n", c.parameter_server.servers,
                                      c.parameter_server.staleness, c.parameter_server.direct() ? "direct" : "reduce")
                        : std::string("no parameter servers (all-reduce among the ranks):\n");
  for (int r = 0; r < world; ++r) {
    const double* f = figures.data() + kPsFigures * static_cast<std::size_t>(r);
    if (f[0] != 0.0) {
      const double updates = std::max(f[1], 1.0);
      out += fmt::format(
          "  rank {}: server, {:.0f} updates applied, {:.2f} MB received and {:.2f} MB sent per update, largest "
          "lag {:.0f} steps, {:.1f} ms receiving, {:.1f} ms updating and {:.1f} ms replying per update\n",
          r, f[1], f[2] / updates / 1e6, f[3] / updates / 1e6, f[6], 1e3 * f[4] / updates, 1e3 * f[5] / updates,
          1e3 * f[7] / updates);
      if (c.parameter_server.direct()) {
        out += fmt::format("    mean lag {:.2f} updates, mean lr scale {:.3f}\n", f[8] / updates, f[9] / updates);
      }
      continue;
    }
    const double steps = std::max(f[1], 1.0);
    out += fmt::format(
        "  rank {}: worker, {:.2f} MB pushed and {:.2f} MB pulled per step, {:.1f} ms per step in step(), "
        "{:.1f} ms of it waiting for pulls, mean staleness {:.2f} steps\n",
        r, f[2] / steps / 1e6, f[3] / steps / 1e6, 1e3 * f[4] / steps, 1e3 * f[5] / steps, f[6]);
  }
  return out;
}

/// Rank 0 opens the report file before training, so that a bad path fails
/// in seconds rather than after the run; the verdict is broadcast so that
/// every rank stops together. Throws IoError naming the file. Collective.
void check_report_path(Communicator& comm, const std::string& path) {
  double ok = 1.0;
  std::string why;
  if (comm.rank() == 0) {
    errno = 0;
    std::ofstream probe(path, std::ios::out | std::ios::app);
    if (!probe) {
      ok = 0.0;
      why = std::strerror(errno);
    }
  }
  comm.broadcast(&ok, 1, DType::f64, 0);
  if (ok == 0.0) {
    throw IoError(fmt::format("{}: cannot open the report for writing{}", path,
                              comm.rank() == 0 ? ": " + why : " (on rank 0)"));
  }
}

int run(const Options& o) {
  auto comm = make_world_communicator();
  const int rank = comm->rank();
  const int world = comm->world_size();
#if ZS_EXAMPLE_OPENBLAS
  // Ranks share the cores: one BLAS thread each avoids oversubscription.
  if (world > 1) openblas_set_num_threads(1);
#endif
  share_cores_among_ranks(split_by_node(*comm).local_size);
  // Every rank reads the same flags and file: one agreed error, printed once.
  EngineConfig config;
  run_agreed(*comm, [&] {
    // The batch keys count the ranks that train: the world less the servers.
    const std::int64_t servers = job_servers(o.config, o.servers, world);
    try {
      config = make_config(o, world - static_cast<int>(servers));
    } catch (const ConfigError& e) {
      if (servers == 0) throw;
      throw ConfigError(fmt::format("{} (with {} parameter server{}, the world size here is the {} ranks that train)",
                                    e.what(), servers, servers == 1 ? "" : "s", world - servers));
    }
    if (o.compare && servers > 0) {
      throw ConfigError(
          fmt::format("{}: \"parameter_server.servers\" = {} with --compare-stages, which trains "
                      "every stage 0-3 without servers: remove the parameter_server section",
                      o.config.config_path, servers));
    }
    if (config.parameter_server.direct() && !o.save_dir.empty()) {
      throw ConfigError(
          fmt::format("--save-dir {} with parameter_server.push \"direct\": that mode has no "
                      "checkpoints (its servers hold one state for every worker); use \"reduce\"",
                      o.save_dir));
    }
    if (o.slow_rank >= world) {
      throw ConfigError(fmt::format("--slow-rank {}: the job has ranks 0-{}", o.slow_rank, world - 1));
    }
    if (servers > 0 && config.parameter_server.placement.empty() && o.slow_rank >= world - servers) {
      throw ConfigError(
          fmt::format("--slow-rank {}: a parameter server (the last {} of the {} ranks serve), which "
                      "computes nothing to slow down",
                      o.slow_rank, servers, world));
    }
  });
  std::optional<MachineRates> rates;
  if (!o.config.calibration_path.empty()) rates = MachineRates::from_file(o.config.calibration_path);
  if (rank == 0) print_config_notes("fashion_mnist", config);
  // Before the data is read: no GPU (or a build without CUDA) fails in seconds.
  const ComputeDevice device = parse_compute_device(o.device);
  const std::string device_text = select_compute_device(device, *comm);
  if (!o.report_path.empty()) check_report_path(*comm, o.report_path);
  if (!o.save_dir.empty()) check_save_dir(*comm, o.save_dir);
  // A model or micro-batch too large for the memory is refused here, naming the option (not by a
  // std::bad_alloc during the allocation).
  std::vector<std::int64_t> layer_sizes;
  run_agreed(*comm, [&] {
    layer_sizes = {kPixels};
    for (auto h : parse_hidden(o.hidden)) layer_sizes.push_back(h);
    layer_sizes.push_back(kClasses);
    check_model_fits(layer_sizes, o.hidden, static_cast<std::uint64_t>(config.train_micro_batch_size_per_gpu),
                     TrainOptions{}.eval_batch, physical_memory_bytes());
  });
  const LabeledImages train = load_fashion_mnist_split(o.data_dir, "train", kClasses);
  const LabeledImages test = load_fashion_mnist_split(o.data_dir, "t10k", kClasses);

  RunSpec spec;
  if (train.images.pixels_per_image() != static_cast<std::size_t>(kPixels)) {
    throw IoError(fmt::format("{}: images of {} pixels, expected {} (28 x 28)", o.data_dir,
                              train.images.pixels_per_image(), kPixels));
  }
  spec.layer_sizes = layer_sizes;
  spec.init_seed = o.seed;
  spec.train.epochs = o.epochs;
  spec.train.max_steps = o.max_steps;
  spec.train.seed = o.seed + 1;
  spec.train.steps_per_print = o.compare ? 0 : config.steps_per_print;
  spec.train.print_epochs = !o.compare;
  spec.train.save_dir = o.save_dir;
  spec.train.save_every = o.save_every;
  spec.train.keep_last = o.keep_last;
  spec.resume = o.resume;
  spec.device = device;
  spec.train.slow_rank = o.slow_rank;
  spec.train.slow_factor = o.slow_factor;
  spec.train.shared_updates = config.parameter_server.direct();

  if (rank == 0) {
    // A parameter-server job's servers train nothing: the batch counts the workers.
    const std::int64_t servers = config.parameter_server.servers;
    const std::int64_t trainers = world - servers;
    fmt::print(
        "fashion_mnist: {} train / {} test images, layers {}, world size {} ({}{}), {} {}, "
        "micro-batch {} x accumulation {} x {} ranks = global batch {}, device {}{}\n",
        train.size(), test.size(), fmt::join(spec.layer_sizes, "-"), world, comm->backend(),
        servers > 0 ? fmt::format(", {} parameter servers, staleness {}", servers, config.parameter_server.staleness)
                    : "",
        o.compare ? "stages 0-3" : fmt::format("stage {}", config.zero.stage), examples::optimizer_summary(config),
        config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps, trainers,
        config.train_micro_batch_size_per_gpu * config.gradient_accumulation_steps * trainers, device_text,
        world > 1 && device == ComputeDevice::cuda ? " on rank 0" : "");
    std::fflush(stdout);
  }

  nlohmann::json report = {{"program", "fashion_mnist"},
                           {"config", to_json(config)},
                           {"world_size", world},
                           {"device", compute_device_name(device)},
                           {"device_rank0", device_text},
                           {"layer_sizes", spec.layer_sizes},
                           {"seed", o.seed},
                           {"max_steps", o.max_steps}};
  if (o.compare) {
    const auto runs = compare_stages(config, *comm, train, test, spec, o.nvme_path);
    if (rank == 0) fmt::print("\n{}", stage_table(runs, world, config));
    report["parameters"] = runs.front().num_parameters;
    report["compare_stages"] = to_json(runs, world, config);
    if (rank == 0 && !o.report_path.empty()) {
      // One panel per stage (and offload tier): memory per rank by category.
      std::vector<BarChart> panels;
      for (const StageRun& r : runs) {
        panels.push_back(memory_chart(fmt::format("stage {}, offload {}: memory per rank", r.stage, r.offload),
                                      current_per_rank(r.ranks)));
      }
      write_text_atomically(chart_path(o.report_path, "memory"), stacked_bar_svg(panels));
      write_json_file(o.report_path, report);
    }
  } else {
    LedgerFigures mine;
    std::string table, predicted;
    nlohmann::json observe;
    ParameterServerClientStats ps;
    ParameterServerStats served;  // on a server rank
    const RunOutcome outcome = train_fresh(config, *comm, train, test, spec, [&](Engine& engine) {
      mine = LedgerFigures::of(engine.ledger());
      table = engine.ledger().table(
          fmt::format("memory ledger, rank {} of {}, stage {}", rank, world, engine.stage()));
      if (engine.is_parameter_server()) {
        served = engine.served_stats();
        return;
      }
      observe = finish_observed_run(engine);
      if (rates) predicted = predicted_beside_measured(engine, *rates);
      ps = engine.parameter_server_stats();
    });
    const auto all = gather_ledger_figures(*comm, mine);
    // The first training rank reports (a parameter server trains nothing).
    std::vector<double> ps_figures(kPsFigures * static_cast<std::size_t>(world));
    const bool per_rank_lines = config.parameter_server.enabled() || o.slow_rank >= 0;
    if (per_rank_lines) {
      double lag = 0;
      for (std::int64_t l : ps.lags) lag += static_cast<double>(l);
      const std::array<double, kPsFigures> mine_ps =
          outcome.server
              ? std::array<double, kPsFigures>{1.0,
                                               static_cast<double>(served.pushes),
                                               static_cast<double>(served.bytes_received),
                                               static_cast<double>(served.bytes_sent),
                                               served.receive_s,
                                               served.update_s,
                                               static_cast<double>(served.max_lag),
                                               served.send_s,
                                               static_cast<double>(served.update_lag_sum),
                                               served.lr_scale_sum}
              : std::array<double, kPsFigures>{0.0,
                                               static_cast<double>(outcome.result.step_seconds.size()),
                                               static_cast<double>(ps.bytes_pushed),
                                               static_cast<double>(ps.bytes_pulled),
                                               outcome.result.engine_step_seconds,
                                               ps.wait_s,
                                               ps.lags.empty() ? 0.0 : lag / static_cast<double>(ps.lags.size()),
                                               ps.push_s,
                                               0.0,
                                               0.0};
      comm->all_gather(mine_ps.data(), ps_figures.data(), mine_ps.size(), DType::f64);
    }
    int printer = 0;
    while (printer < world && ps_figures[kPsFigures * static_cast<std::size_t>(printer)] != 0.0) ++printer;
    if (rank == printer) {
      fmt::print("final test accuracy {:.4f} after {} optimizer steps, {:.1f} s\n\n{}",
                 outcome.result.final_accuracy, outcome.result.optimizer_steps,
                 outcome.result.wall_seconds, table);
      if (!table.empty() && table.back() != '\n') fmt::print("\n");
      fmt::print("{}", predicted);
      fmt::print("{}", CrossHostMeter::line(outcome.result.cross_host));
      fmt::print("{}", CheckpointSaves::line(outcome.result.checkpoint_figures));
      // Optimizer states per rank (8-bit: codes + one fp32 absmax per block).
      std::vector<std::uint64_t> states;
      for (const LedgerFigures& f : all) states.push_back(f.now(MemCategory::optimizer_states));
      fmt::print("optimizer-state bytes per rank ({} states): {}\n",
                 state_dtype_name(config.optimizer.states.dtype), fmt::join(states, " "));
      if (per_rank_lines) fmt::print("{}", parameter_server_lines(ps_figures, world, config));
    }
    nlohmann::json per_rank = nlohmann::json::array();
    for (const LedgerFigures& f : all) per_rank.push_back(f.model_state);
    report["stage"] = config.zero.stage;
    report["parameters"] = outcome.num_parameters;
    report["run"] = to_json(outcome.result);
    report["final_accuracy"] = outcome.result.final_accuracy;
    report["ledger_rank0"] = to_json(all.front());
    report["model_state_bytes_per_rank"] = per_rank;
    nlohmann::json state_bytes = nlohmann::json::array();
    for (const LedgerFigures& f : all) state_bytes.push_back(f.now(MemCategory::optimizer_states));
    report["optimizer_state_bytes_per_rank"] = state_bytes;
    report["optimizer_state_format"] = std::string(state_dtype_name(config.optimizer.states.dtype));
    report["observe"] = observe;
    report["engine_step_seconds"] = outcome.result.engine_step_seconds;
    if (per_rank_lines) report["parameter_server_figures"] = ps_figures;
    report["printer_rank"] = printer;
    if (rank == printer && !o.report_path.empty()) {
      const std::string what = fmt::format("stage {}, {} ranks", config.zero.stage, world);
      write_text_atomically(chart_path(o.report_path, "memory"),
                            stacked_bar_svg(memory_chart(what + ": memory per rank", current_per_rank(all))));
      write_text_atomically(chart_path(o.report_path, "steps"),
                            stacked_bar_svg(step_chart(what + ": mean step time per rank", observe)));
      write_monitor_charts(o.report_path, config.observe.csv_monitor, "fashion_mnist, " + what);
      write_json_file(o.report_path, report);
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace zeroshard::examples

int main(int argc, char** argv) {
  using zeroshard::examples::Options;
  Options o;
  CLI::App app{"Data-parallel MLP training on Fashion-MNIST with ZeRO sharding (zeroshard)"};
  app.add_option("--config", o.config.config_path, "ds_config JSON file (DeepSpeed keys)")
      ->check(CLI::ExistingFile);
  app.add_option("--stage", o.config.stage,
                 "ZeRO stage 0-3; overrides zero_optimization.stage (default without --config: 3)")
      ->check(CLI::Range(0, 3));
  app.add_option("--micro-batch", o.config.micro_batch,
                 "value of an \"auto\" train_micro_batch_size_per_gpu in --config (without --config: the "
                 "micro-batch, default 32)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--gradient-accumulation-steps", o.config.accumulation,
                 "value of an \"auto\" gradient_accumulation_steps in --config (without --config: the "
                 "micro-batches per optimizer step, default 1)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--lr", o.config.lr,
                 "value of an \"auto\" optimizer.params.lr in --config (without --config: the learning rate, "
                 "default 1e-3)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--breakdown", o.config.breakdown,
               "print the step breakdown and straggler line every steps_per_print steps (wall_clock_breakdown)");
  app.add_option("--calibration", o.config.calibration_path,
                 "rates from zs_plan --calibrate: print the predicted step time beside the measured one "
                 "(turns on wall_clock_breakdown)")
      ->check(CLI::ExistingFile);
  app.add_option("--trace", o.config.trace_dir,
                 "write Chrome traces (trace-rank<r>.json and the merged trace.json) to this directory");
  app.add_option("--fill", o.config.fills,
                 "KEY=JSON: value of an \"auto\" KEY in --config, e.g. gradient_clipping=1.0 (repeatable)");
  auto* bf16 = app.add_flag_callback("--bf16", [&o] { o.config.precision = zeroshard::DType::bf16; },
                                     "bf16 parameters and gradients (fills \"auto\" bf16.enabled in --config)");
  app.add_flag_callback("--fp16", [&o] { o.config.precision = zeroshard::DType::f16; },
                        "fp16 parameters and gradients with loss scaling (fills \"auto\" fp16.enabled in --config)")
      ->excludes(bf16);
  app.add_option("--warmup-steps", o.config.warmup_steps,
                 "value of an \"auto\" scheduler.params.warmup_num_steps in --config (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--epochs", o.epochs, "passes over the training set")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--hidden", o.hidden, "hidden layer widths, comma-separated (\"\" for none)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the initialisation and the shuffling")
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "folder with the Fashion-MNIST .gz IDX files")
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--report", o.report_path, "write a JSON report to this file (rank 0)");
  auto* save_dir = app.add_option(
      "--save-dir", o.save_dir,
      "save sharded checkpoints to DIR/step-NNNNNNNN (DIR/latest names the newest) at the end");
  app.add_option("--save-every", o.save_every,
                 "also save every N optimizer steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber)
      ->needs(save_dir);
  app.add_option("--keep-last", o.keep_last, "keep only the newest N checkpoints (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->needs(save_dir);
  app.add_flag("--resume", o.resume,
               "load the latest checkpoint in --save-dir and continue from its data position "
               "(any number of ranks; --epochs and --max-steps count from the start of training)")
      ->needs(save_dir);
  app.add_flag("--compare-stages", o.compare,
               "train the same steps at stages 0-3, then stage 3 with cpu and nvme offload, and print "
               "one table of model-state bytes by stage and tier")
      ->excludes(save_dir);
  app.add_option("--nvme-path", o.nvme_path,
                 "swap folder of --compare-stages' nvme offload row (\"\": leave the row out); offload "
                 "for a single run is set in --config (zero_optimization.offload_optimizer/offload_param)")
      ->capture_default_str();
  auto* servers = app.add_option("--parameter-servers", o.servers,
                                 "parameter_server.servers: this many ranks (the last ones) hold the optimizer "
                                 "state and serve the others, which train (runtime/ps/param_server.h)")
                      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  app.add_option("--staleness", o.staleness,
                 "parameter_server.staleness: after step k the workers train on the parameters of step k - s "
                 "(--ps-push direct: or of a later step, the newest that has arrived; 0: synchronous)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  app.add_option("--ps-push", o.ps_push,
                 "parameter_server.push: reduce (the workers reduce, then push their window; deterministic) or "
                 "direct (each worker pushes its own gradient, applied in arrival order: a slow worker delays only "
                 "itself)")
      ->check(CLI::IsMember({"reduce", "direct"}));
  app.add_option("--slow-rank", o.slow_rank,
                 "a straggler: this training rank sleeps after each micro-batch's compute so that it takes "
                 "--slow-factor times as long (-1: none)")
      ->capture_default_str();
  app.add_option("--slow-factor", o.slow_factor, "how much slower --slow-rank computes")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 100.0));
  app.get_option("--compare-stages")->excludes(servers);
  app.add_option("--device", o.device,
                 "where the MLP's forward and backward run: cpu (OpenBLAS) or cuda (cuBLAS, one "
                 "GPU per rank chosen by the node-local rank; the Engine stays in host memory)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);

  try {
    return zeroshard::examples::run(o);
  } catch (const std::exception& e) {
    // Agreed errors (ResumeError, checkpoint I/O, ...): rank 0 reports, all return 1; any
    // other error ends every rank (examples/end_job.h).
    return zeroshard::examples::end_job_with_error("fashion_mnist", e);
  }
}
