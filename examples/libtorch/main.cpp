// libtorch_fashion_mnist: a torch::nn CNN trained on Fashion-MNIST by a
// plain libtorch loop, its training state sharded by a zeroshard Engine
// through zeroshard_torch (libtorch/shard.h), at ZeRO stages 0-3 in turn.
//
//   mpirun -np 4 libtorch_fashion_mnist                   # stages 0-3, 300 steps each
//   mpirun -np 4 libtorch_fashion_mnist --stages 3 --steps 1000
//   mpirun -np 2 libtorch_fashion_mnist --config ds_config.json --stages 2
//
// Each rank trains on its slice of every global batch (micro-batch images
// per rank, the same shuffled order on every rank). Rank 0 prints the loss
// as it goes; after each stage the test accuracy (every rank evaluates a
// slice), samples per second and the engine's memory ledger; at the end
// one table of loss, accuracy and bytes per rank by stage. The loop is
// the one a libtorch user writes; README.md, "A libtorch training loop",
// shows the lines zeroshard changes in it.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "examples/job_config.h"
#include "examples/end_job.h"
#include "examples/libtorch/fashion_cnn.h"
#include "libtorch/optimizer.h"
#include "libtorch/shard.h"

namespace zeroshard::examples {
namespace {

struct Options {
  std::vector<int> stages{0, 1, 2, 3};
  int steps = 300;
  std::int64_t micro_batch = 32;
  double lr = 1e-3;
  std::uint64_t seed = 1;
  int threads = 1;
  int print_every = 100;
  std::string config_path;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};

/// What one stage's run gave (the same on every rank).
struct StageRow {
  int stage = 0;
  double loss = 0;           ///< mean loss of the last print_every steps over ranks
  double accuracy = 0;       ///< test accuracy, fraction
  double samples_per_s = 0;  ///< training images per second, all ranks
  std::uint64_t model_state_bytes = 0;
  std::uint64_t peak_unsharded_bytes = 0;
  std::uint64_t peak_total_bytes = 0;
};

EngineConfig stage_config(const Options& o, int stage) {
  EngineConfig c;
  if (o.config_path.empty()) {
    c = adamw_job_defaults(o.micro_batch, o.lr, 0.999, 0.01);
  } else {
    c = EngineConfig::from_file(o.config_path);
  }
  c.zero.stage = stage;
  return c;
}

// Mean of `value` over the ranks.
double rank_mean(Communicator& comm, double value) {
  comm.all_reduce(&value, 1, DType::f64, ReduceOp::sum);
  return value / comm.world_size();
}

StageRow run_stage(const Options& o, int stage, Communicator& comm, const at::Tensor& train_x,
                   const at::Tensor& train_y, const at::Tensor& test_x, const at::Tensor& test_y) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  // A plain libtorch model, then zeroshard: the engine, shard(), its optimizer.
  auto model = make_fashion_cnn(o.seed);
  Engine engine(stage_config(o, stage), comm);
  auto sharded = zeroshard::torch::shard(model, engine, comm);
  zeroshard::torch::Optimizer optimizer(sharded);
  const std::int64_t b = engine.config().train_micro_batch_size_per_gpu;
  const std::int64_t n = train_x.size(0);
  const std::int64_t global = b * world;

  at::Tensor order;
  std::int64_t epoch = -1;
  double window = 0;
  int in_window = 0;
  double last_loss = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < o.steps; ++step) {
    // This rank's slice of global batch `step` in the epoch's shuffled order.
    const std::int64_t first = static_cast<std::int64_t>(step) * global;
    if (first / n != epoch) {
      epoch = first / n;
      ::torch::manual_seed(o.seed * 7919 + static_cast<std::uint64_t>(epoch));
      order = ::torch::randperm(n, ::torch::kLong);
    }
    const at::Tensor idx = (::torch::arange(first + rank * b, first + (rank + 1) * b, ::torch::kLong) % n);
    const at::Tensor pick = order.index_select(0, idx);
    const at::Tensor x = train_x.index_select(0, pick), y = train_y.index_select(0, pick);

    optimizer.zero_grad();
    at::Tensor loss = ::torch::nn::functional::nll_loss(sharded(x), y);
    loss.backward();
    optimizer.step();

    window += loss.item<double>();
    if (++in_window == o.print_every || step + 1 == o.steps) {
      last_loss = rank_mean(comm, window / in_window);
      if (rank == 0) {
        std::printf("stage %d  step %5d  loss %.4f  lr %.2e\n", stage, step + 1, last_loss, engine.current_lr(0));
        std::fflush(stdout);
      }
      window = 0;
      in_window = 0;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Test accuracy: every rank the same number of batches of its slice
  // (stage 3's forward is collective).
  const std::int64_t per_rank = test_x.size(0) / world;
  const std::int64_t eval_batch = 500;
  double correct = 0;
  {
    const at::NoGradGuard no_grad;
    for (std::int64_t at = 0; at < per_rank; at += eval_batch) {
      const std::int64_t lo = rank * per_rank + at, hi = rank * per_rank + std::min(at + eval_batch, per_rank);
      const at::Tensor pred = sharded(test_x.slice(0, lo, hi)).argmax(1);
      correct += pred.eq(test_y.slice(0, lo, hi)).sum().item<double>();
    }
  }
  comm.all_reduce(&correct, 1, DType::f64, ReduceOp::sum);

  StageRow row;
  row.stage = stage;
  row.loss = last_loss;
  row.accuracy = correct / static_cast<double>(per_rank * world);
  row.samples_per_s = static_cast<double>(o.steps) * static_cast<double>(global) / rank_mean(comm, seconds);
  const MemoryLedger& ledger = engine.ledger();
  row.model_state_bytes = ledger.model_state_bytes();
  row.peak_unsharded_bytes = ledger.peak(MemCategory::unsharded);
  row.peak_total_bytes = ledger.peak_total();
  if (rank == 0) {
    std::printf("stage %d: test accuracy %.2f%%, %.0f samples/s on %d ranks\n%s\n", stage, 100 * row.accuracy,
                row.samples_per_s, world,
                ledger.table(fmt::format("memory ledger, rank 0 of {}, stage {}", world, stage)).c_str());
    std::fflush(stdout);
  }
  return row;
}

int run(const Options& o) {
  auto comm = make_world_communicator();
  ::torch::set_num_threads(o.threads);
  const LabeledImages train = load_fashion_mnist_split(o.data_dir, "train");
  const LabeledImages test = load_fashion_mnist_split(o.data_dir, "t10k");
  if (train.images.rows != 28 || train.images.cols != 28) {
    throw IoError(fmt::format("{}: images of {} x {} pixels, expected 28 x 28", o.data_dir, train.images.rows,
                              train.images.cols));
  }
  const auto [train_x, train_y] = fashion_tensors(train);
  const auto [test_x, test_y] = fashion_tensors(test);
  std::vector<StageRow> rows;
  for (int stage : o.stages) rows.push_back(run_stage(o, stage, *comm, train_x, train_y, test_x, test_y));
  if (comm->rank() == 0) {
    std::printf("\n%d ranks, %d steps of %lld images per rank (FashionCnn, 80,202 parameters)\n", comm->world_size(),
                o.steps, static_cast<long long>(rows.empty() ? 0 : o.micro_batch));
    std::printf("| stage | loss | test accuracy | model states per rank | peak unsharded | peak total | samples/s |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const StageRow& r : rows) {
      std::printf("| %d | %.4f | %.2f%% | %s | %s | %s | %.0f |\n", r.stage, r.loss, 100 * r.accuracy,
                  format_bytes(r.model_state_bytes).c_str(), format_bytes(r.peak_unsharded_bytes).c_str(),
                  format_bytes(r.peak_total_bytes).c_str(), r.samples_per_s);
    }
  }
  return 0;
}

}  // namespace
}  // namespace zeroshard::examples

int main(int argc, char** argv) {
  zeroshard::examples::Options o;
  CLI::App app{"A libtorch CNN trained on Fashion-MNIST with its training state sharded by zeroshard"};
  app.add_option("--stages", o.stages, "ZeRO stages to train at, one run each")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "optimizer steps per stage")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "images per rank per step (without --config)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "AdamW learning rate (without --config)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--config", o.config_path, "ds_config JSON (DeepSpeed keys); its stage is replaced by each --stages")
      ->check(CLI::ExistingFile);
  app.add_option("--seed", o.seed, "seed of the initialisation and the shuffling")->capture_default_str();
  app.add_option("--threads", o.threads, "libtorch intra-op threads per rank")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--print-every", o.print_every, "steps between loss lines")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "folder with the Fashion-MNIST .gz IDX files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return zeroshard::examples::run(o);
  } catch (const std::exception& e) {
    return zeroshard::examples::end_job_with_error("libtorch_fashion_mnist", e);
  }
}
