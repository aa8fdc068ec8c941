// The GPT example (examples/gpt/gpt_model.h) with pipeline parallelism
// ([Note: GPT pipeline stages]) against a single-rank reference: a 4-layer
// GPT of width 16, 5 AdamW steps of 4 micro-batches on fixed tokens, fp32,
// at (dp, tp, pp) = (1, 1, 2) on 2 ranks and (1, 1, 4), (2, 1, 2),
// (1, 2, 2) on 4, ZeRO stages 0-3 (stage 3 with overlap_comm, whose
// prefetch follows the schedule's order), GPipe and 1F1B. Per-step losses
// (known on every rank), the global norm and every stage's final, unsplit
// parameters equal the reference's within 1e-5 relative; the tied wte is
// bitwise the same on the first and the last stage. The peak of kept
// activations on each stage is the schedule's: min(pp - stage, m) micro-
// batches for 1F1B, m for GPipe. A checkpoint saved at (1, 1, 2) loads at
// (2, 1, 2) bit for bit and continues as the (1, 1, 2) run does; loading
// it at (1, 1, 4) or (4, 1, 1) is refused naming both pipeline sizes.
// The up-front memory check's parameter count and kept activations
// ([Note: GPT memory check]) equal the model's, at pp 1 and on the last of
// 2 stages.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/self/self_communicator.h"
#include "core/error.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/gpt_preflight.h"
#include "tests/examples/gpt_test_support.h"
#include "examples/gpt/text_corpus.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/engine/engine.h"
#include "tests/support/scratch_files.h"

namespace zeroshard::examples {
namespace {

namespace fs = std::filesystem;
using namespace gpt_testing;  // world, GptEngine, check_steps, close, ...

constexpr int kBatch = 4, kSeq = 8, kSteps = 5, kMicro = 4;
const GptShape kShape{.layers = 4, .heads = 4, .dim = 16, .context = 8, .vocab = 256};

EngineConfig adamw(int stage) {
  EngineConfig c = gpt_testing::gpt_test_adamw(stage, kMicro);
  if (stage == 3) c.zero.overlap_comm = true;
  return c;
}

// Step s's micro-batch j: kBatch windows of fixed English-like text.
std::vector<std::int32_t> micro_batch(int s, int j) {
  static const std::string text =
      "the quick brown fox jumps over the lazy dog; a stitch in time saves nine, and all that glitters is not gold. "
      "many hands make light work, and a rolling stone gathers no moss.";
  const int k = s * kMicro + j, total = (kSteps + 1) * kMicro * kBatch;
  return fixed_windows(text, k * kBatch, kBatch, total, kSeq);
}

// This dp rank's rows of a micro-batch.
std::vector<std::int32_t> my_rows(const std::vector<std::int32_t>& global, const Mesh& mesh) {
  return gpt_testing::my_rows(global, mesh, kBatch, kSeq);
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<std::string> names;          // this stage's parameters
  std::vector<std::vector<float>> params;  // full, in that order
  std::size_t peak_activation_bytes = 0;
  std::size_t micro_batch_bytes = 0;  // one micro-batch's kept state (peak / in-flight)
};

// Steps [from, to) of the pipelined run; the engine and model are the caller's.
void train_steps(Gpt& gpt, Engine& engine, const Mesh& mesh, PipelineScheduleKind kind, int from, int to, Run& run) {
  for (int s = from; s < to; ++s) {
    std::vector<std::vector<std::int32_t>> mbs;
    for (int j = 0; j < kMicro; ++j) mbs.push_back(my_rows(micro_batch(s, j), mesh));
    double loss = gpt.train_batch(mbs, kBatch / mesh.dp_size(), kSeq, kind, 1.0);
    mesh.dp_group().all_reduce(&loss, 1, DType::f64, ReduceOp::sum);
    run.losses.push_back(loss / mesh.dp_size());
    run.norms.push_back(engine.step().grad_norm);
  }
}

void collect(Gpt& gpt, Run& run) {
  run.names = gpt.parameter_names();
  for (const std::string& name : run.names) run.params.push_back(gpt.full_parameter(name));
}

Run train(const Mesh& mesh, int stage, PipelineScheduleKind kind) {
  GptEngine m(adamw(stage), mesh, kShape);
  m.gpt.initialize(99);
  Run run;
  train_steps(m.gpt, m.engine, mesh, kind, 0, kSteps, run);
  collect(m.gpt, run);
  run.peak_activation_bytes = m.gpt.peak_activation_bytes();
  return run;
}

// The single-rank reference: micro-batches one after another, no pipeline.
const Run& reference() {
  static const Run ref = [] {
    SelfCommunicator self;
    Mesh mesh(self, MeshShape{1, 1});
    GptEngine m(adamw(0), mesh, kShape);
    Engine& engine = m.engine;
    Gpt& gpt = m.gpt;
    gpt.initialize(99);
    Run run;
    for (int s = 0; s < kSteps; ++s) {
      double loss = 0;
      for (int j = 0; j < kMicro; ++j) {
        loss += gpt.train_micro_batch(micro_batch(s, j), kBatch, kSeq, 1.0);
        const StepResult r = engine.step();
        if (j + 1 == kMicro) run.norms.push_back(r.grad_norm);
      }
      run.losses.push_back(loss / kMicro);
    }
    collect(gpt, run);
    // One micro-batch's kept state at pp = 1 (all layers): the peak of a
    // single micro-batch at a time.
    run.peak_activation_bytes = gpt.peak_activation_bytes();
    return run;
  }();
  return ref;
}

std::vector<MeshShape> meshes() {
  switch (world().world_size()) {
    case 2: return {MeshShape{1, 1, 2}};
    case 4: return {MeshShape{1, 1, 4}, MeshShape{2, 1, 2}, MeshShape{1, 2, 2}};
    default: return {};
  }
}

TEST_CASE("gpt pipeline: losses, norms and every stage's parameters equal the single-rank reference") {
  const Run& ref = reference();
  REQUIRE(ref.losses.size() == kSteps);
  CHECK(ref.losses.back() < ref.losses.front());  // it learns
  for (const MeshShape shape : meshes()) {
    for (const PipelineScheduleKind kind : {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b}) {
      for (int stage = 0; stage <= 3; ++stage) {
        CAPTURE(shape.dp);
        CAPTURE(shape.tp);
        CAPTURE(shape.pp);
        CAPTURE(to_string(kind));
        CAPTURE(stage);
        Mesh mesh(world(), shape);
        const Run got = train(mesh, stage, kind);
        check_steps(got.losses, got.norms, ref.losses, ref.norms, 1e-5);
        // This stage's parameters, by name, against the full model's.
        REQUIRE(!got.names.empty());
        for (std::size_t p = 0; p < got.names.size(); ++p) {
          CAPTURE(got.names[p]);
          const auto it = std::find(ref.names.begin(), ref.names.end(), got.names[p]);
          REQUIRE(it != ref.names.end());
          CHECK(close(got.params[p], ref.params[static_cast<std::size_t>(it - ref.names.begin())], 1e-5));
        }
        // The tied wte: bitwise the same on the first and the last stage.
        if (mesh.is_first_pipeline_stage() || mesh.is_last_pipeline_stage()) {
          const auto it = std::find(got.names.begin(), got.names.end(), "wte");
          REQUIRE(it != got.names.end());
          const std::vector<float>& wte = got.params[static_cast<std::size_t>(it - got.names.begin())];
          std::vector<float> both(2 * wte.size());
          mesh.embedding_group().all_gather(wte.data(), both.data(), wte.size(), DType::f32);
          CHECK(std::equal(both.begin(), both.begin() + static_cast<std::ptrdiff_t>(wte.size()),
                           both.begin() + static_cast<std::ptrdiff_t>(wte.size())));
        }
        // Kept activations at the peak: the schedule's in-flight count of
        // micro-batches, each of the same size on a stage.
        const int in_flight = kind == PipelineScheduleKind::gpipe ? kMicro : std::min(shape.pp - mesh.pp_rank(), kMicro);
        const auto table = make_pipeline_table(kind, shape.pp, kMicro);
        CHECK(max_in_flight(table.actions[static_cast<std::size_t>(mesh.pp_rank())]) == in_flight);
        CHECK(got.peak_activation_bytes % static_cast<std::size_t>(in_flight) == 0);
        CHECK(got.peak_activation_bytes > 0);
      }
    }
  }
}

TEST_CASE("gpt pipeline: peak kept activations are in-flight micro-batches times one micro-batch's state") {
  if (world().world_size() != 2) return;
  // One micro-batch's state on each stage, measured with GPipe at m = 1.
  Mesh mesh(world(), MeshShape{1, 1, 2});
  auto peak = [&](PipelineScheduleKind kind, int m) {
    EngineConfig c = adamw(1);
    c.gradient_accumulation_steps = m;
    GptEngine g(c, mesh, kShape);
    g.gpt.initialize(99);
    std::vector<std::vector<std::int32_t>> mbs;
    for (int j = 0; j < m; ++j) mbs.push_back(micro_batch(0, j));
    g.gpt.train_batch(mbs, kBatch, kSeq, kind, 1.0);
    g.engine.step();
    return g.gpt.peak_activation_bytes();
  };
  const std::size_t one = peak(PipelineScheduleKind::gpipe, 1);
  REQUIRE(one > 0);
  CHECK(peak(PipelineScheduleKind::gpipe, 4) == 4 * one);
  // 1F1B: stage 0 keeps pp - 0 = 2 micro-batches, stage 1 keeps 1.
  CHECK(peak(PipelineScheduleKind::one_f_one_b, 4) == static_cast<std::size_t>(2 - mesh.pp_rank()) * one);
}

TEST_CASE("gpt_memory_estimate: parameters and kept activations are the model's own") {
  GptRunSizes sizes;
  sizes.shape = kShape;
  sizes.micro_batch = kBatch;
  sizes.seq = kSeq;
  {
    SelfCommunicator self;
    Mesh mesh(self, MeshShape{1, 1});
    GptEngine g(adamw(0), mesh, kShape);
    CHECK(gpt_memory_estimate(sizes).parameters == static_cast<double>(g.gpt.full_parameter_count()));
  }
  CHECK(gpt_memory_estimate(sizes).activations == static_cast<double>(reference().peak_activation_bytes));
  if (world().world_size() != 2) return;
  // The last of 2 stages holds the largest share: half the blocks, ln_f and the logits.
  Mesh mesh(world(), MeshShape{1, 1, 2});
  EngineConfig c = adamw(1);
  c.gradient_accumulation_steps = 4;
  GptEngine g(c, mesh, kShape);
  g.gpt.initialize(99);
  std::vector<std::vector<std::int32_t>> mbs;
  for (int j = 0; j < 4; ++j) mbs.push_back(micro_batch(0, j));
  g.gpt.train_batch(mbs, kBatch, kSeq, PipelineScheduleKind::gpipe, 1.0);
  g.engine.step();
  sizes.pp = 2;
  sizes.accumulation = 4;
  sizes.schedule = PipelineScheduleKind::gpipe;
  if (mesh.is_last_pipeline_stage()) {
    CHECK(gpt_memory_estimate(sizes).activations == static_cast<double>(g.gpt.peak_activation_bytes()));
  } else {
    CHECK(gpt_memory_estimate(sizes).activations > static_cast<double>(g.gpt.peak_activation_bytes()));
  }
}

// The message of the error that loading `dir` into a GPT engine on a
// `shape` mesh of the world throws ("" if none).
std::string load_error(MeshShape shape, const fs::path& dir) {
  return gpt_testing::load_error(adamw(1), kShape, shape, dir);
}

TEST_CASE("gpt pipeline: a (1, 1, 2) checkpoint loads at (2, 1, 2) bit for bit and continues; pp 4 and 1 refused") {
  if (world().world_size() != 4) return;
  const fs::path dir = fs::temp_directory_path() / "zs-test-gpt-pipeline-ckpt";
  testing::remove_dir_on_rank0(world(), dir);
  const auto kind = PipelineScheduleKind::one_f_one_b;
  // Ranks 2h, 2h + 1 form the (1, 1, 2) mesh of half h; half 0 saves, both
  // continue (the halves run the same model on the same data).
  auto half = world().split(world().rank() / 2, world().rank());
  gpt_testing::GatheredStates saved;
  Run continued;
  {
    Mesh mesh(*half, MeshShape{1, 1, 2});
    GptEngine m(adamw(3), mesh, kShape);
    m.gpt.initialize(99);
    Run run;
    train_steps(m.gpt, m.engine, mesh, kind, 0, 2, run);
    if (world().rank() < 2) m.engine.save_checkpoint(dir.string(), {{"step", 2}});
    saved = gpt_testing::gather_states(m.engine);
    train_steps(m.gpt, m.engine, mesh, kind, 2, 3, continued);
    collect(m.gpt, continued);
  }
  world().barrier();
  // (2, 1, 2): world rank r is stage r / 2; in the (1, 1, 2) run it was
  // stage r % 2. Ranks 0 and 3 hold the same stage in both and compare.
  {
    Mesh mesh(world(), MeshShape{2, 1, 2});
    GptEngine m(adamw(2), mesh, kShape);
    const auto cs = m.engine.load_checkpoint(dir.string());
    CHECK(cs.at("step").get<int>() == 2);
    const bool same_pipeline_stage = world().rank() % 2 == world().rank() / 2;
    const gpt_testing::GatheredStates loaded = gpt_testing::gather_states(m.engine);
    for (std::size_t p = 0; p < loaded.master.size(); ++p) {
      if (same_pipeline_stage) {
        CHECK(loaded.master[p] == saved.master[p]);
        CHECK(loaded.exp_avg[p] == saved.exp_avg[p]);
      }
    }
    Run run;
    train_steps(m.gpt, m.engine, mesh, kind, 2, 3, run);
    collect(m.gpt, run);
    CHECK(std::abs(run.losses[0] - continued.losses[0]) <= 1e-5 * std::abs(continued.losses[0]));
    if (same_pipeline_stage) {
      REQUIRE(run.names == continued.names);
      for (std::size_t p = 0; p < run.names.size(); ++p) {
        CAPTURE(run.names[p]);
        CHECK(close(run.params[p], continued.params[p], 1e-5));
      }
    }
  }
  // Changed pipeline sizes: refused on every rank, naming both.
  {
    const std::string what = load_error(MeshShape{1, 1, 4}, dir);
    CHECK(what.find("pipeline-parallel size 2") != std::string::npos);
    CHECK(what.find("pipeline-parallel size 4") != std::string::npos);
  }
  {
    const std::string what = load_error(MeshShape{4, 1, 1}, dir);
    CHECK(what.find("pipeline-parallel size 2") != std::string::npos);
    CHECK(what.find("pipeline-parallel size 1") != std::string::npos);
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace zeroshard::examples
