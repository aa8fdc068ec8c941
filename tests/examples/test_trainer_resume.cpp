// Saving and resuming the fashion_mnist trainer: a run interrupted twice
// (mid-epoch and at an epoch's end) and resumed reaches bit for bit the
// parameters of an uninterrupted run at the same world size; a run saved on
// W ranks and resumed on W-1 with the same global batch reaches them up to
// rounding; a resume with no steps left reports the loaded model's
// accuracy; the sampler's epoch offset; the resume errors (no checkpoint,
// another model).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "examples/fashion_mnist/data_parallel.h"
#include "examples/fashion_mnist/trainer.h"
#include "runtime/config/config.h"
#include "tests/support/scratch_files.h"

using namespace zeroshard;
using namespace zeroshard::examples;
namespace fs = std::filesystem;

namespace {

/// `count` samples of `features` values in [0, 1], label = arg-max of the
/// first `classes` features.
LabeledImages synthetic_set(std::size_t count, std::size_t features, std::size_t classes, std::uint64_t seed) {
  LabeledImages data;
  data.images.count = count;
  data.images.rows = 1;
  data.images.cols = features;
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < count * features; ++i) data.images.pixels.push_back(float(uniform_below(rng, 256)) / 255.0f);
  for (std::size_t i = 0; i < count; ++i) {
    const float* row = data.images.pixels.data() + i * features;
    data.labels.push_back(std::uint8_t(std::max_element(row, row + classes) - row));
  }
  return data;
}

/// Stage-3 AdamW with `micro` samples per rank and accumulation 2.
EngineConfig config_with(int micro) {
  EngineConfig c;
  c.zero.stage = 3;
  c.train_micro_batch_size_per_gpu = micro;
  c.gradient_accumulation_steps = 2;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-2f;
  c.optimizer.weight_decay = 0.01f;
  return c;
}

struct Fixture {
  LabeledImages train = synthetic_set(203, 9, 3, 1);
  LabeledImages test = synthetic_set(37, 9, 3, 2);

  RunSpec spec(std::int64_t max_steps, const std::string& save_dir, bool resume) const {
    RunSpec s;
    s.layer_sizes = {9, 17, 3};
    s.init_seed = 5;
    s.train.epochs = 3;
    s.train.max_steps = max_steps;
    s.train.seed = 6;
    s.train.print_epochs = false;
    s.train.eval_batch = 7;
    s.train.save_dir = save_dir;
    s.resume = resume;
    return s;
  }

  /// Trains and returns every parameter's values after training.
  std::vector<std::vector<float>> run(const EngineConfig& c, Communicator& comm, const RunSpec& s,
                                      RunOutcome* outcome = nullptr) const {
    std::vector<std::vector<float>> params;
    const RunOutcome out = train_fresh(c, comm, train, test, s, [&](Engine& e) {
      for (const ParamInfo& p : e.layout().params()) params.push_back(e.gather_parameter(e.layout().find_param(p.name)));
    });
    if (outcome != nullptr) *outcome = out;
    return params;
  }
};

std::string fresh_dir(Communicator& comm, const std::string& name) {
  const std::string dir = fmt::format("resume-{}-np{}", name, comm.world_size());
  testing::make_empty_dir_on_rank0(comm, dir);
  return dir;
}

}  // namespace

TEST_CASE("sampler: an epoch started at sample `first` continues the same permutation") {
  DataParallelSampler whole(103, 4, 2, 1, 3, 5), resumed = whole;
  whole.start_epoch(1);
  resumed.start_epoch(1, 48);  // two global batches of 24 in
  CHECK(resumed.steps_per_epoch() == (103 - 48) / 24);
  for (std::size_t s = 0; s < resumed.steps_per_epoch(); ++s) {
    for (std::size_t k = 0; k < 2; ++k) {
      const auto a = whole.micro_batch(s + 2, k), b = resumed.micro_batch(s, k);
      CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));
    }
  }
  resumed.start_epoch(1, 103);
  CHECK(resumed.steps_per_epoch() == 0);
  CHECK_THROWS_AS(resumed.start_epoch(1, 104), InvariantError);
}

TEST_CASE("trainer: interrupted and resumed runs reach the uninterrupted run's parameters bit for bit") {
  auto comm = make_world_communicator();
  const Fixture f;
  const int w = comm->world_size();
  // Global batch 12 at world sizes 1, 2 and 3 (micro-batch 6/w x accumulation 2 x w).
  const EngineConfig c = config_with(6 % w == 0 ? 6 / w : 2);
  const std::size_t global_batch = std::size_t(c.train_micro_batch_size_per_gpu) * 2 * std::size_t(w);
  const std::int64_t steps_per_epoch = std::int64_t(203 / global_batch);
  const std::int64_t total = steps_per_epoch + 5;
  const auto reference = f.run(c, *comm, f.spec(total, "", false));

  const std::string dir = fresh_dir(*comm, "same");
  RunOutcome out;
  f.run(c, *comm, f.spec(5, dir, false), &out);  // mid-epoch
  CHECK(out.result.checkpoints == std::vector<std::string>{"step-00000005"});
  f.run(c, *comm, f.spec(steps_per_epoch, dir, true), &out);  // to the epoch's end
  CHECK(out.result.optimizer_steps == steps_per_epoch);
  const auto resumed = f.run(c, *comm, f.spec(total, dir, true), &out);
  CHECK(out.result.optimizer_steps == total);
  CHECK(out.result.checkpoints == std::vector<std::string>{fmt::format("step-{:08d}", total)});
  REQUIRE(resumed.size() == reference.size());
  for (std::size_t p = 0; p < resumed.size(); ++p) {
    REQUIRE(resumed[p].size() == reference[p].size());
    CHECK(std::memcmp(resumed[p].data(), reference[p].data(), resumed[p].size() * sizeof(float)) == 0);
  }

  // Resumed with no steps left: nothing trains, and the final accuracy is
  // the loaded model's (it was 0.0 before the trainer evaluated it).
  const double trained_accuracy = out.result.final_accuracy;
  REQUIRE(trained_accuracy > 0.0);
  const auto again = f.run(c, *comm, f.spec(total, dir, true), &out);
  CHECK(out.result.epochs.empty());
  CHECK(out.result.optimizer_steps == total);
  CHECK(out.result.final_accuracy == trained_accuracy);
  CHECK(again == resumed);
}

TEST_CASE("trainer: saved on W ranks, resumed on W-1 with the same global batch") {
  auto comm = make_world_communicator();
  const int w = comm->world_size();
  if (w != 3) {
    MESSAGE("needs 3 ranks (run under mpirun -np 3)");
    return;
  }
  const Fixture f;
  // Global batch 12: micro 2 x 2 x 3 ranks, then micro 3 x 2 x 2 ranks.
  const auto reference = f.run(config_with(2), *comm, f.spec(12, "", false));
  const std::string dir = fresh_dir(*comm, "fewer");
  f.run(config_with(2), *comm, f.spec(7, dir, false));
  auto sub = comm->split(comm->rank() < 2 ? 0 : 1, comm->rank());
  if (comm->rank() < 2) {
    RunOutcome out;
    const auto resumed = f.run(config_with(3), *sub, f.spec(12, dir, true), &out);
    CHECK(out.result.optimizer_steps == 12);
    REQUIRE(resumed.size() == reference.size());
    for (std::size_t p = 0; p < resumed.size(); ++p) {
      REQUIRE(resumed[p].size() == reference[p].size());
      for (std::size_t i = 0; i < resumed[p].size(); ++i) {
        CHECK(resumed[p][i] == doctest::Approx(reference[p][i]).epsilon(1e-4).scale(1e-4));
      }
    }
  }
  comm->barrier();
}

TEST_CASE("trainer: --resume errors: no checkpoint, another model") {
  auto comm = make_world_communicator();
  const Fixture f;
  const std::string dir = fresh_dir(*comm, "errors");
  CHECK_THROWS_WITH_AS(f.run(config_with(2), *comm, f.spec(3, dir, true)), doctest::Contains("no checkpoint in"),
                       ResumeError);
  f.run(config_with(2), *comm, f.spec(2, dir, false));
  RunSpec other = f.spec(4, dir, true);
  other.layer_sizes = {9, 13, 3};
  CHECK_THROWS_WITH_AS(f.run(config_with(2), *comm, other), doctest::Contains("different model"), ResumeError);
}
