// The GPT example (examples/gpt/gpt_model.h) with activation checkpointing
// against the same run without it, on every dp x tp mesh of the world with
// tp 1 and 2 (world sizes 1-4), ZeRO stages 0 and 3, fp32: the
// recomputation runs the same operations on the same values, so the
// per-step losses, gradient norms and final parameters are bitwise equal,
// also with the checkpoints partitioned over the tensor-parallel group
// (activation_checkpointing.partition_activations) and through a 2-stage
// pipeline (1F1B, 4 micro-batches). The kept activations fall to the block
// inputs (checked against the bytes without), and the store holds nothing
// after a step.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/gpt_preflight.h"
#include "examples/gpt/text_corpus.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/activation/activation_store.h"
#include "runtime/engine/engine.h"
#include "tests/examples/gpt_test_support.h"

namespace zeroshard::examples {
namespace {

using namespace gpt_testing;  // world, GptEngine, my_rows, check_same_run

constexpr int kBatch = 12, kSeq = 8, kSteps = 3, kMicro = 4;
const GptShape kShape{.layers = 2, .heads = 4, .dim = 16, .context = 8, .vocab = 256};

std::vector<std::vector<std::int32_t>> fixed_batches(int count) {
  const std::string text =
      "the quick brown fox jumps over the lazy dog; a stitch in time saves nine, and all that glitters is not gold.";
  std::vector<std::vector<std::int32_t>> out;
  for (int s = 0; s < count; ++s) out.push_back(fixed_windows(text, s * kBatch, kBatch, count * kBatch, kSeq));
  return out;
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> params;
  std::size_t peak_kept = 0;  // Gpt::peak_activation_bytes on this rank
};

// kSteps AdamW steps of one micro-batch each (pp = 1) or of kMicro through
// a 1F1B pipeline (pp > 1).
Run train(const Mesh& mesh, int stage, bool checkpointing, bool partition) {
  const int m = mesh.pp_size() > 1 ? kMicro : 1;
  EngineConfig config = gpt_test_adamw(stage, m);
  config.activation_checkpointing.partition_activations = partition;
  GptEngine g(config, mesh, kShape);
  g.gpt.set_activation_checkpointing(checkpointing);
  g.gpt.initialize(7);
  Run run;
  const auto batches = fixed_batches(kSteps * m);
  for (int s = 0; s < kSteps; ++s) {
    double loss = 0;
    if (m == 1) {
      loss = g.gpt.train_micro_batch(my_rows(batches[static_cast<std::size_t>(s)], mesh, kBatch, kSeq),
                                     kBatch / mesh.dp_size(), kSeq, 1.0);
    } else {
      std::vector<std::vector<std::int32_t>> mbs;
      for (int k = 0; k < m; ++k) {
        mbs.push_back(my_rows(batches[static_cast<std::size_t>(s * m + k)], mesh, kBatch, kSeq));
      }
      loss = g.gpt.train_batch(mbs, kBatch / mesh.dp_size(), kSeq, PipelineScheduleKind::one_f_one_b, 1.0);
    }
    run.losses.push_back(loss);
    run.norms.push_back(g.engine.step().grad_norm);
    CHECK(g.engine.activations().count() == 0);  // every checkpoint released by its backward
  }
  for (const std::string& name : g.gpt.parameter_names()) run.params.push_back(g.gpt.full_parameter(name));
  run.peak_kept = g.gpt.peak_activation_bytes();
  return run;
}

void check_same(const Run& got, const Run& ref) {
  check_same_run(got.losses, got.norms, got.params, ref.losses, ref.norms, ref.params);
}

}  // namespace

TEST_CASE("activation checkpointing gives bitwise the same training: dp x tp meshes, stages 0 and 3") {
  const int n = world().world_size();
  for (int tp : {1, 2}) {
    if (n % tp != 0 || kBatch % (n / tp) != 0) continue;
    for (int stage : {0, 3}) {
      CAPTURE(tp);
      CAPTURE(stage);
      Mesh mesh(world(), MeshShape{n / tp, tp});
      const Run ref = train(mesh, stage, false, false);
      CHECK(ref.losses.back() < ref.losses.front());  // it learns
      for (bool partition : {false, true}) {
        CAPTURE(partition);
        const Run got = train(mesh, stage, true, partition);
        check_same(got, ref);
        // A block keeps 4 x its input's bytes and more (h1, x2, h2, the MLP's
        // 2 x 4 x dim, the attention's); checkpointed, only the inputs stay
        // between forward and backward, plus one recomputed block.
        CHECK(got.peak_kept < ref.peak_kept);
        // The preflight's estimate is these bytes exactly (whole inputs).
        GptRunSizes sizes;
        sizes.shape = kShape, sizes.micro_batch = kBatch / mesh.dp_size(), sizes.seq = kSeq;
        sizes.dp = mesh.dp_size(), sizes.tp = tp, sizes.stage = stage;
        CHECK(gpt_memory_estimate(sizes).activations == static_cast<double>(ref.peak_kept));
        sizes.activation_checkpointing = true;
        if (!partition || tp == 1) {
          CHECK(gpt_memory_estimate(sizes).activations == static_cast<double>(got.peak_kept));
        } else {
          CHECK(gpt_memory_estimate(sizes).activations > static_cast<double>(got.peak_kept));
        }
      }
    }
  }
}

TEST_CASE("activation checkpointing through a 2-stage 1F1B pipeline gives bitwise the same training") {
  const int n = world().world_size();
  if (n % 2 != 0) return;
  for (int tp : {1, 2}) {
    if (n % (2 * tp) != 0) continue;
    CAPTURE(tp);
    Mesh mesh(world(), MeshShape{n / (2 * tp), tp, 2});
    const Run ref = train(mesh, 1, false, false);
    check_same(train(mesh, 1, true, tp > 1), ref);
  }
}

}  // namespace zeroshard::examples
