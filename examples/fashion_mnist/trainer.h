// The data-parallel training loop around a Classifier (the MLP on the CPU or
// on a GPU) and its Engine: shuffled
// rank-disjoint micro-batches, gradient accumulation, per-epoch test
// evaluation with the counts summed over ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "examples/report/checkpoint_saves.h"
#include "examples/report/cross_host_meter.h"
#include "examples/fashion_mnist/classifier.h"
#include "examples/fashion_mnist/compute_device.h"
#include "examples/fashion_mnist/data_parallel.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "runtime/observe/step_breakdown.h"
#include "examples/fashion_mnist/mlp.h"
#include "examples/fashion_mnist/resume.h"
#include "runtime/engine/engine.h"

namespace zeroshard::examples {

/// How long and how loudly to train.
struct TrainOptions {
  int epochs = 2;                    ///< passes over the training set
  std::int64_t max_steps = 0;        ///< stop after this many optimizer steps (0: no limit)
  std::uint64_t seed = 42;           ///< shuffling seed (same on every rank)
  std::int64_t steps_per_print = 0;  ///< log every this many optimizer steps on rank 0 (0: never)
  bool print_epochs = true;          ///< rank 0 prints one line per epoch
  std::size_t eval_batch = 1000;     ///< samples per evaluation forward pass
  std::string save_dir;              ///< save checkpoints here ("": never)
  std::int64_t save_every = 0;       ///< also save every this many optimizer steps (0: only at the end)
  int keep_last = 0;                 ///< keep the newest this many checkpoints (0: all)
  DataPosition start;                ///< where training starts (a resumed run: the saved position)
  /// --slow-rank / --slow-factor: the rank (of the trainer's communicator)
  /// whose compute of every micro-batch is stretched to slow_factor times
  /// its length by a sleep after it: a straggler for the benchmarks (-1:
  /// none).
  int slow_rank = -1;
  double slow_factor = 1.0;
  /// parameter_server.push "direct": the workers step at their own pace
  /// and an epoch ends once the servers have applied steps_per_epoch x W
  /// pushes (a fast worker takes more steps, cycling over its part of the
  /// epoch), max_steps counts max_steps x W pushes; steps_per_print then
  /// prints rank 0's own loss.
  bool shared_updates = false;
};

/// Figures of one epoch, identical on every rank (reduced over ranks).
struct EpochStats {
  int epoch = 0;                     ///< 1-based
  std::int64_t optimizer_steps = 0;  ///< steps taken in this epoch (rank 0's)
  std::int64_t samples = 0;          ///< training samples over all ranks
  double train_loss = 0.0;           ///< mean micro-batch loss over the epoch and ranks (nats)
  double test_loss = 0.0;            ///< mean cross-entropy on the test set (nats)
  double test_accuracy = 0.0;        ///< fraction of test samples classified correctly
  double seconds = 0.0;              ///< training time of the epoch (until every rank is done; no evaluation)
  double samples_per_second = 0.0;   ///< samples / seconds
};

/// Figures of a whole run.
struct TrainResult {
  std::vector<EpochStats> epochs;
  std::int64_t optimizer_steps = 0;  ///< global batches stepped (accumulation boundaries), counting
                                     ///< those before a resume
  std::int64_t skipped_steps = 0;    ///< skipped for Inf/NaN gradients so far (StepResult::skipped_steps)
  double last_step_loss = 0.0;  ///< mean loss of the last optimizer step's micro-batches over ranks
  double final_accuracy = 0.0;  ///< test accuracy after the last epoch (the loaded model's when none ran)
  double wall_seconds = 0.0;    ///< whole run including evaluation
  /// Seconds of each optimizer step of this run on this rank's clock, from
  /// its first micro-batch's forward to its boundary step() returning
  /// (logging, checkpoints and evaluation excluded).
  std::vector<double> step_seconds;
  /// Seconds this rank spent inside engine.step() (the reductions' and
  /// the parameter servers' waits, the update): where a fast rank idles
  /// for a slow one.
  double engine_step_seconds = 0.0;
  /// This rank's step breakdown of each optimizer step of this run
  /// (Engine::last_step_figures(), ms; [Note: step breakdown]); empty
  /// unless wall_clock_breakdown or zeroshard.trace is on.
  std::vector<StepFigures> step_figures;
  std::vector<std::string> checkpoints;  ///< tags saved by this run, in order
  /// The bytes a step sent between hosts, measured and computed
  /// (examples/report/cross_host_meter.h; "measured_per_step" -1 without
  /// comms_logger).
  nlohmann::json cross_host;
  /// The saves' stalls, background writes and the steps beside them
  /// (examples/report/checkpoint_saves.h).
  nlohmann::json checkpoint_figures;
};

/// Drives one Engine + Classifier over a training and a test set. The references
/// must outlive the Trainer. Thread safety: the thread that drives the Engine.
class Trainer {
 public:
  /// Allocates the batch buffers: micro-batch from the engine's config,
  /// model.max_batch() must be >= both it and options.eval_batch.
  Trainer(Engine& engine, Classifier& model, Communicator& comm, const LabeledImages& train,
          const LabeledImages& test, TrainOptions options);

  /// Trains from options.start to epoch options.epochs (or until
  /// optimizer step max_steps; both count from the start of training, not
  /// of this run), evaluating after each epoch. With options.save_dir, saves
  /// a checkpoint (tag "step-%08d" of the global step, client_state from
  /// to_client_state) every save_every steps and after the last step:
  /// with checkpoint.async by Engine::save_checkpoint_async, all committed
  /// before it returns. Collective: every rank must call it. Throws what
  /// Engine::save_checkpoint(_async) and step() throw.
  TrainResult run();

  /// Test-set loss and accuracy: each rank evaluates its rank_slice of the
  /// test set in batches of options.eval_batch; the counts are summed over
  /// ranks with one all_reduce. Collective.
  EvalCounts evaluate_test();

 private:
  /// Saves a checkpoint at data position `p` (after its step). Collective.
  void save(const DataPosition& p, TrainResult& result);

  Engine& engine_;
  Classifier& mlp_;
  Communicator& comm_;
  const LabeledImages& train_;
  const LabeledImages& test_;
  TrainOptions options_;
  DataParallelSampler sampler_;
  CrossHostMeter meter_;
  CheckpointSaves saves_;  ///< synchronous, or async with checkpoint.async
  std::vector<float> batch_x_;
  std::vector<std::uint8_t> batch_y_;
};

/// What a fresh training run needs besides the engine configuration.
struct RunSpec {
  std::vector<std::int64_t> layer_sizes;  ///< {inputs, hidden..., classes}
  std::uint64_t init_seed = 42;           ///< Mlp::initialize seed (same on every rank)
  TrainOptions train;                     ///< train.seed drives the shuffling
  bool resume = false;  ///< load the latest checkpoint of train.save_dir first (see train_fresh)
  ComputeDevice device = ComputeDevice::cpu;  ///< where forward/backward run (--device); cuda
                                             ///< needs select_compute_device first
};

/// Median of step_seconds after dropping the first `warmup` steps (their
/// first-use costs: page faults, pool growth, MPI connection set-up); 0 when
/// no step is left.
double median_step_seconds(const TrainResult& result, std::size_t warmup);

/// Outcome of train_fresh.
struct RunOutcome {
  TrainResult result;
  std::size_t num_parameters = 0;  ///< Psi
  /// This rank was a parameter server (config.parameter_server): it served
  /// the workers and trained nothing (`result` is empty).
  bool server = false;
};

/// Builds a fresh Engine (config over `world`), an Mlp declared in it and
/// initialised from spec.init_seed, computed on spec.device
/// (make_device_classifier), trains it with a Trainer and returns the
/// figures; `after` (if set) is called with the engine after training, before
/// the engine is destroyed (to read its ledger). With spec.resume, the
/// latest checkpoint of spec.train.save_dir is loaded first (resume_latest)
/// and training continues from its data position with its shuffling seed;
/// rank 0 prints "resumed from DIR/TAG at epoch E step S (saved by N ranks,
/// now M)". Collective. Throws what the Engine throws (ConfigError for a
/// config the world size cannot run), what resume_latest throws, and what
/// make_device_classifier throws. With config.parameter_server the
/// training runs on the engine's workers (Engine::dp_communicator); a
/// server rank serves until they end, calls `after` and returns an outcome
/// marked `server`.
RunOutcome train_fresh(const EngineConfig& config, Communicator& world, const LabeledImages& train,
                       const LabeledImages& test, const RunSpec& spec, const std::function<void(Engine&)>& after = {});

}  // namespace zeroshard::examples
