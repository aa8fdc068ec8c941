#include "examples/fashion_mnist/trainer.h"

#include <fmt/format.h>
#include <thread>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "core/error.h"
#include "examples/report/plan_lines.h"
#include "examples/report/progress_line.h"

namespace zeroshard::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Sums n doubles over ranks in place.
template <std::size_t N>
void sum_over_ranks(Communicator& comm, std::array<double, N>& values) {
  comm.all_reduce(values.data(), N, DType::f64, ReduceOp::sum);
}

}  // namespace

Trainer::Trainer(Engine& engine, Classifier& mlp, Communicator& comm, const LabeledImages& train,
                 const LabeledImages& test, TrainOptions options)
    : engine_(engine),
      mlp_(mlp),
      comm_(comm),
      train_(train),
      test_(test),
      options_(options),
      sampler_(train.size(), std::size_t(engine.config().train_micro_batch_size_per_gpu),
               std::size_t(engine.config().gradient_accumulation_steps), comm.rank(),
               comm.world_size(), options.seed),
      meter_(engine, comm) {
  const std::size_t micro = std::size_t(engine.config().train_micro_batch_size_per_gpu);
  ZS_CHECK(options_.eval_batch >= 1, "eval_batch must be >= 1");
  ZS_CHECK(mlp.max_batch() >= std::max(micro, options_.eval_batch),
           "the MLP's buffers hold {} samples; micro-batch {} and eval batch {} need more",
           mlp.max_batch(), micro, options_.eval_batch);
  ZS_CHECK(std::size_t(mlp.layer_sizes().front()) == train.images.pixels_per_image() &&
               std::size_t(mlp.layer_sizes().front()) == test.images.pixels_per_image(),
           "the MLP takes {} inputs but images have {} (train) and {} (test) pixels",
           mlp.layer_sizes().front(), train.images.pixels_per_image(),
           test.images.pixels_per_image());
  const std::size_t rows = std::max(micro, options_.eval_batch);
  batch_x_.resize(rows * train.images.pixels_per_image());
  batch_y_.resize(rows);
}

EvalCounts Trainer::evaluate_test() {
  const auto [begin, end] = rank_slice(test_.size(), comm_.rank(), comm_.world_size());
  // Every rank makes the same number of evaluate() calls (each issues
  // unshard collectives at stage 3), sized for the largest slice.
  const std::size_t largest =
      (test_.size() + std::size_t(comm_.world_size()) - 1) / std::size_t(comm_.world_size());
  const std::size_t batches = (largest + options_.eval_batch - 1) / options_.eval_batch;
  const std::size_t pixels = test_.images.pixels_per_image();
  EvalCounts local;
  for (std::size_t b = 0; b < batches; ++b) {
    const std::size_t first = std::min(end, begin + b * options_.eval_batch);
    const std::size_t n = std::min(end - first, options_.eval_batch);
    const std::span<const float> x(test_.images.pixels.data() + first * pixels, n * pixels);
    const std::span<const std::uint8_t> y(test_.labels.data() + first, n);
    const EvalCounts c = mlp_.evaluate(x, y, n);
    local.loss_sum += c.loss_sum;
    local.correct += c.correct;
    local.samples += c.samples;
  }
  std::array<double, 3> sums{local.loss_sum, double(local.correct), double(local.samples)};
  sum_over_ranks(comm_, sums);
  return EvalCounts{sums[0], std::int64_t(sums[1]), std::int64_t(sums[2])};
}

void Trainer::save(const DataPosition& p, TrainResult& result) {
  // checkpoint.async: the training stops only for the snapshot; the write
  // commits at a later step (or at the end of run()).
  const std::string tag =
      saves_.save(engine_, options_.save_dir, to_client_state(p, options_.seed, sampler_.global_batch(), comm_.world_size()),
                  options_.keep_last, fmt::format("step-{:08d}", p.global_step));
  result.checkpoints.push_back(tag);
  if (comm_.rank() == 0) {
    const bool async = engine_.config().checkpoint.async;
    fmt::print("  {} checkpoint {}/{} at step {} ({:.3f} s{})\n", async ? "snapshotted" : "saved", options_.save_dir,
               tag, p.global_step, saves_.last_stall(), async ? " of training stopped; written in the background" : "");
    std::fflush(stdout);
  }
}

TrainResult Trainer::run() {
  const auto run_start = Clock::now();
  const std::size_t micro = std::size_t(engine_.config().train_micro_batch_size_per_gpu);
  const std::size_t accumulation = std::size_t(engine_.config().gradient_accumulation_steps);
  const std::size_t pixels = train_.images.pixels_per_image();
  const std::size_t global_batch = sampler_.global_batch();
  const bool rank0 = comm_.rank() == 0;
  const std::span<float> x(batch_x_.data(), micro * pixels);
  const std::span<std::uint8_t> y(batch_y_.data(), micro);
  ZS_CHECK(sampler_.dataset_size() >= global_batch,
           "the training set ({} samples) is smaller than one global batch ({} = {} x {} x {})",
           train_.size(), global_batch, micro, accumulation, comm_.world_size());

  const DataPosition& start = options_.start;
  DataPosition pos = start;
  TrainResult result;
  result.optimizer_steps = start.global_step;
  std::int64_t last_saved = start.global_step;
  const bool saving = !options_.save_dir.empty();
  const auto max_reached = [&] {
    if (options_.max_steps <= 0) return false;
    // TrainOptions::shared_updates: max_steps x W pushes over the workers.
    if (options_.shared_updates) {
      return engine_.parameter_server_stats().server_updates >= options_.max_steps * comm_.world_size();
    }
    return result.optimizer_steps >= options_.max_steps;
  };
  // The position to save after a step: the next epoch once no complete
  // global batch is left in this one.
  const auto settled = [&](DataPosition p) {
    if (sampler_.dataset_size() - p.epoch_sample < global_batch) {
      ++p.epoch;
      p.epoch_sample = 0;
      p.step_in_epoch = 0;
    }
    return p;
  };
  double last_step_loss_local = 0.0;  // sum over this rank's micro-batches of the last step
  // Rank 0's progress line (step, rate, ETA) on stderr: rewritten in place
  // on a terminal, a plain line every 10 s otherwise. Not in the quiet
  // stage comparison (steps_per_print 0).
  std::optional<ProgressLine> progress;
  if (rank0 && options_.steps_per_print > 0) {
    const auto full_epoch = static_cast<std::int64_t>(sampler_.dataset_size() / sampler_.global_batch());
    std::int64_t total = full_epoch * (options_.epochs - start.epoch) - start.step_in_epoch;
    if (options_.max_steps > 0) total = std::min(total, options_.max_steps - start.global_step);
    progress.emplace("train", total, stderr);
  }
  for (int epoch = start.epoch; epoch < options_.epochs; ++epoch) {
    if (max_reached()) break;
    const bool resumed_epoch = epoch == start.epoch;
    pos.epoch = epoch;
    pos.epoch_sample = resumed_epoch ? start.epoch_sample : 0;
    pos.step_in_epoch = resumed_epoch ? start.step_in_epoch : 0;
    sampler_.start_epoch(epoch, pos.epoch_sample);
    // Resumed with a larger global batch than the one left in this epoch.
    if (sampler_.steps_per_epoch() == 0) continue;
    const auto epoch_start = Clock::now();
    double epoch_loss_local = 0.0;
    double print_loss_local = 0.0;
    std::int64_t print_micro = 0;
    EpochStats stats;
    stats.epoch = epoch + 1;
    std::size_t micro_count = 0;
    // TrainOptions::shared_updates: the epoch's end is the servers' count.
    const std::int64_t epoch_updates =
        static_cast<std::int64_t>(sampler_.steps_per_epoch()) * (epoch + 1) * comm_.world_size();
    const auto epoch_done = [&](std::size_t step) {
      if (!options_.shared_updates) return step >= sampler_.steps_per_epoch();
      return engine_.parameter_server_stats().server_updates >= epoch_updates;
    };
    for (std::size_t step = 0; !epoch_done(step); ++step) {
      if (max_reached()) break;
      const std::size_t data_step = step % sampler_.steps_per_epoch();
      double step_loss = 0.0;
      StepResult sr;
      meter_.before_step();
      const bool writing = engine_.checkpoint_in_flight();  // an async save's write runs beside this step
      const auto step_start = Clock::now();
      for (std::size_t k = 0; k < accumulation; ++k) {
        gather_samples(train_, sampler_.micro_batch(data_step, k), x, y);
        const auto compute_start = Clock::now();
        const double loss = mlp_.forward_backward(x, y, micro);
        if (comm_.rank() == options_.slow_rank && options_.slow_factor > 1.0) {
          const double took = seconds_since(compute_start);
          std::this_thread::sleep_for(std::chrono::duration<double>(took * (options_.slow_factor - 1.0)));
        }
        engine_.report_loss(loss);  // the csv_monitor's train_loss (rank 0's)
        step_loss += loss;
        const auto engine_start = Clock::now();
        sr = engine_.step();
        result.engine_step_seconds += seconds_since(engine_start);
        ++micro_count;
      }
      result.step_seconds.push_back(seconds_since(step_start));
      saves_.step(writing, result.step_seconds.back());
      meter_.after_step();
      if (engine_.config().observe.records()) result.step_figures.push_back(engine_.last_step_figures());
      ZS_CHECK(sr.boundary,
               "engine.step() did not end the accumulation cycle after {} "
               "micro-batches",
               accumulation);
      result.skipped_steps = sr.skipped_steps;  // the engine's running count (a resumed fp16 run's included)
      ++result.optimizer_steps;
      ++stats.optimizer_steps;
      pos.global_step = result.optimizer_steps;
      ++pos.step_in_epoch;
      pos.epoch_sample += global_batch;
      pos.samples_seen += global_batch;
      epoch_loss_local += step_loss;
      print_loss_local += step_loss;
      print_micro += std::int64_t(accumulation);
      last_step_loss_local = step_loss;
      if (progress) progress->update(result.optimizer_steps - start.global_step, fmt::format("epoch {}", epoch + 1));
      if (options_.steps_per_print > 0 && result.optimizer_steps % options_.steps_per_print == 0) {
        std::array<double, 2> sums{print_loss_local, double(print_micro)};
        if (!options_.shared_updates) sum_over_ranks(comm_, sums);  // the ranks' steps differ otherwise
        if (rank0) {
          fmt::print(
              "  step {:6d} | loss {:.4f} (mean of the last {} steps) | grad norm {:.3f}"
              " | clip {:.3f} | lr {:.3g}{}\n",
              result.optimizer_steps, sums[0] / sums[1], print_micro / std::int64_t(accumulation),
              sr.grad_norm, sr.clip_coef, engine_.current_lr(0),
              engine_.compute_dtype() == DType::f16
                  ? fmt::format(" | loss scale {:g} | skipped {}", sr.loss_scale,
                                result.skipped_steps)
                  : std::string());
          std::fflush(stdout);
        }
        print_loss_local = 0.0;
        print_micro = 0;
      }
      if (saving && options_.save_every > 0 && pos.global_step % options_.save_every == 0) {
        save(settled(pos), result);
        last_saved = pos.global_step;
      }
    }
    std::array<double, 2> sums{epoch_loss_local, double(micro_count)};
    sum_over_ranks(comm_, sums);
    stats.seconds = seconds_since(epoch_start);  // every rank's steps (the sum waited for them)
    stats.train_loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    stats.samples = std::int64_t(sums[1]) * std::int64_t(micro);
    stats.samples_per_second = stats.seconds > 0 ? double(stats.samples) / stats.seconds : 0.0;
    const EvalCounts test = evaluate_test();
    stats.test_loss = test.samples > 0 ? test.loss_sum / double(test.samples) : 0.0;
    stats.test_accuracy = test.samples > 0 ? double(test.correct) / double(test.samples) : 0.0;
    result.final_accuracy = stats.test_accuracy;
    if (rank0 && options_.print_epochs) {
      fmt::print(
          "epoch {:3d} | steps {:5d} | train loss {:.4f} | test loss {:.4f} | test accuracy "
          "{:.4f} | {:.0f} samples/s ({:.1f} s)\n",
          stats.epoch, stats.optimizer_steps, stats.train_loss, stats.test_loss,
          stats.test_accuracy, stats.samples_per_second, stats.seconds);
      std::fflush(stdout);
    }
    result.epochs.push_back(stats);
  }
  if (result.epochs.empty()) {
    // Nothing trained (resumed at or past --max-steps or --epochs): the
    // final accuracy is the loaded model's, as the GPT example reports its
    // validation loss. Every rank takes this branch (same counters).
    const EvalCounts test = evaluate_test();
    result.final_accuracy = test.samples > 0 ? double(test.correct) / double(test.samples) : 0.0;
    if (rank0 && options_.print_epochs) {
      fmt::print("no steps to run from step {} (epoch {} of {}, --max-steps {}): the final test accuracy below is "
                 "the loaded model's\n",
                 start.global_step, start.epoch + 1, options_.epochs, options_.max_steps);
      std::fflush(stdout);
    }
  }
  if (saving && pos.global_step != last_saved) save(settled(pos), result);
  saves_.finish(engine_);  // an async save still in flight commits here
  result.checkpoint_figures = saves_.figures();
  std::array<double, 2> last{last_step_loss_local, double(accumulation)};
  sum_over_ranks(comm_, last);
  result.last_step_loss = last[0] / last[1];
  result.cross_host = meter_.figures(comm_);
  result.wall_seconds = seconds_since(run_start);
  return result;
}

double median_step_seconds(const TrainResult& result, std::size_t warmup) {
  if (result.step_seconds.size() <= warmup) return 0.0;
  std::vector<double> t(result.step_seconds.begin() + std::ptrdiff_t(warmup), result.step_seconds.end());
  const auto mid = t.begin() + std::ptrdiff_t(t.size() / 2);
  std::nth_element(t.begin(), mid, t.end());
  if (t.size() % 2 == 1) return *mid;
  return 0.5 * (*mid + *std::max_element(t.begin(), mid));
}

RunOutcome train_fresh(const EngineConfig& config, Communicator& world, const LabeledImages& train,
                       const LabeledImages& test, const RunSpec& spec, const std::function<void(Engine&)>& after) {
  Engine engine(config, world);
  Mlp mlp(engine, spec.layer_sizes,
          std::max(std::size_t(config.train_micro_batch_size_per_gpu), spec.train.eval_batch));
  engine.finalize();
  RunOutcome outcome;
  outcome.num_parameters = mlp.num_parameters();
  if (engine.is_parameter_server()) {
    // [Note: parameter-server layout]: this rank's loop is the server's.
    outcome.server = true;
    engine.serve();
    if (after) after(engine);
    return outcome;
  }
  // The ranks that train (a parameter-server job's workers).
  Communicator& comm = engine.dp_communicator();
  if (comm.rank() == 0 && spec.train.print_epochs) {
    fmt::print("{}", estimate_beside_ledger(engine));
    std::fflush(stdout);
  }
  mlp.initialize(spec.init_seed);
  TrainOptions options = spec.train;
  if (spec.resume) {
    const Resumed r = resume_latest(engine, comm, options.save_dir, train.size());
    options.start = r.position;
    if (comm.rank() == 0) {
      fmt::print("resumed from {} at epoch {} step {} (saved by {} ranks, now {})\n", r.dir,
                 r.position.epoch + 1, r.position.global_step, r.world_size, comm.world_size());
      if (r.seed != options.seed) {
        fmt::print("  (continuing the saved run's shuffling seed {}, not {})\n", r.seed, options.seed);
      }
      std::fflush(stdout);
    }
    options.seed = r.seed;
  }
  const std::unique_ptr<Classifier> on_device = make_device_classifier(mlp, spec.device);
  Trainer trainer(engine, on_device ? *on_device : static_cast<Classifier&>(mlp), comm, train, test, options);
  outcome.result = trainer.run();
  if (after) after(engine);
  return outcome;
}

}  // namespace zeroshard::examples
