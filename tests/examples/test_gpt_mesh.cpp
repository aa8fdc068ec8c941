// The GPT example (examples/gpt/gpt_model.h) on every mesh of 1, 2 or 4
// ranks against a single-rank reference: a 2-layer GPT of width 16, 5 AdamW
// steps on fixed tokens, fp32, stages 0-3. Per-step losses, the reported
// global norm (on every rank) and the final gathered, unsplit parameters
// equal the reference's within 1e-5 relative. A checkpoint saved at
// (dp, tp) = (2, 2) loads bit for bit at (1, 2) on half the ranks and
// continues as the (2, 2) run does; loading it at (4, 1) or (1, 4) is
// refused with an error naming both tensor-parallel sizes; its safetensors
// export holds the full, unsplit tensors. Checks follow the collectives.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "comm/collective_error.h"
#include "comm/mesh.h"
#include "comm/self/self_communicator.h"
#include "core/error.h"
#include "tools/checkpoint/safetensors_export.h"
#include "examples/gpt/gpt_model.h"
#include "tests/examples/gpt_test_support.h"
#include "examples/gpt/text_corpus.h"
#include "runtime/engine/engine.h"
#include "tests/support/safetensors_reader.h"
#include "tests/support/scratch_files.h"

namespace zeroshard::examples {
namespace {

namespace fs = std::filesystem;
using namespace gpt_testing;  // world, GptEngine, check_steps, close, ...

constexpr int kBatch = 4, kSeq = 8, kSteps = 5;
const GptShape kShape{.layers = 2, .heads = 4, .dim = 16, .context = 8, .vocab = 256};

EngineConfig adamw(int stage) { return gpt_testing::gpt_test_adamw(stage, 1); }

// kSteps + 1 global batches of fixed bytes (English-like text, so the model has
// something to learn).
std::vector<std::vector<std::int32_t>> fixed_batches() {
  const std::string text =
      "the quick brown fox jumps over the lazy dog; a stitch in time saves nine, and all that glitters is not gold.";
  std::vector<std::vector<std::int32_t>> out;
  for (int s = 0; s <= kSteps; ++s) out.push_back(fixed_windows(text, s * kBatch, kBatch, (kSteps + 1) * kBatch, kSeq));
  return out;
}

// This dp rank's sequences of a global batch.
std::vector<std::int32_t> my_rows(const std::vector<std::int32_t>& global, const Mesh& mesh) {
  return gpt_testing::my_rows(global, mesh, kBatch, kSeq);
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> params;  // full, in declaration order
};

Run train(const Mesh& mesh, int stage, int steps) {
  GptEngine m(adamw(stage), mesh, kShape);
  Engine& engine = m.engine;
  Gpt& gpt = m.gpt;
  gpt.initialize(99);
  Run run;
  const auto batches = fixed_batches();
  for (int s = 0; s < steps; ++s) {
    const auto rows = my_rows(batches[static_cast<std::size_t>(s)], mesh);
    double loss = gpt.train_micro_batch(rows, kBatch / mesh.dp_size(), kSeq, 1.0);
    mesh.dp_group().all_reduce(&loss, 1, DType::f64, ReduceOp::sum);
    run.losses.push_back(loss / mesh.dp_size());
    run.norms.push_back(engine.step().grad_norm);
  }
  for (const std::string& name : gpt.parameter_names()) run.params.push_back(gpt.full_parameter(name));
  return run;
}

const Run& reference() {
  static const Run ref = [] {
    SelfCommunicator self;
    Mesh mesh(self, MeshShape{1, 1});
    return train(mesh, 0, kSteps);
  }();
  return ref;
}

TEST_CASE("gpt on a mesh: losses, global norm and final parameters equal the single-rank reference") {
  const Run& ref = reference();
  REQUIRE(ref.losses.size() == kSteps);
  CHECK(ref.losses.back() < ref.losses.front());  // it learns
  const int n = world().world_size();
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp != 0 || kShape.heads % tp != 0 || kBatch % (n / tp) != 0) continue;
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(n / tp);
      CAPTURE(tp);
      CAPTURE(stage);
      Mesh mesh(world(), MeshShape{n / tp, tp});
      const Run got = train(mesh, stage, kSteps);
      check_steps(got.losses, got.norms, ref.losses, ref.norms, 1e-5);
      REQUIRE(got.params.size() == ref.params.size());
      for (std::size_t p = 0; p < ref.params.size(); ++p) {
        CAPTURE(p);
        CHECK(close(got.params[p], ref.params[p], 1e-5));
      }
    }
  }
}

// The message of the error that loading the checkpoint at `dir` into a GPT
// engine on a `shape` mesh of the world at ZeRO `stage` throws ("" if none).
std::string load_error(MeshShape shape, int stage, const fs::path& dir) {
  return gpt_testing::load_error(adamw(stage), kShape, shape, dir);
}

TEST_CASE("gpt on a mesh: a (2, 2) checkpoint loads at (1, 2) bit for bit and continues; (4, 1) is refused") {
  if (world().world_size() != 4) return;
  const fs::path dir = fs::temp_directory_path() / "zs-test-gpt-mesh-ckpt";
  testing::remove_dir_on_rank0(world(), dir);
  const auto batches = fixed_batches();
  gpt_testing::GatheredStates saved;
  std::vector<std::vector<float>> continued;
  {
    Mesh mesh(world(), MeshShape{2, 2});
    GptEngine m(adamw(3), mesh, kShape);
    Engine& engine = m.engine;
    Gpt& gpt = m.gpt;
    gpt.initialize(99);
    for (int s = 0; s < 2; ++s) {
      gpt.train_micro_batch(my_rows(batches[static_cast<std::size_t>(s)], mesh), kBatch / 2, kSeq, 1.0);
      engine.step();
    }
    engine.save_checkpoint(dir.string(), {{"step", 2}});
    // The safetensors export of the mesh checkpoint holds the full, unsplit tensors.
    std::vector<std::vector<float>> full;
    for (const std::string& name : gpt.parameter_names()) full.push_back(gpt.full_parameter(name));
    if (world().rank() == 0) {
      const std::string st = (dir / "model.safetensors").string();
      tools::export_safetensors(dir.string(), st);
      const auto f = zeroshard::testing::read_safetensors(st);
      const auto names = gpt.parameter_names();
      CHECK(f.order == names);
      for (std::size_t p = 0; p < names.size(); ++p) {
        CAPTURE(names[p]);
        REQUIRE(f.tensors.count(names[p]) == 1);
        CHECK(f.tensors.at(names[p]).shape == gpt.full_shape(names[p]));
        CHECK(f.tensors.at(names[p]).values == full[p]);
      }
    }
    saved = gpt_testing::gather_states(engine);
    gpt.train_micro_batch(my_rows(batches[2], mesh), kBatch / 2, kSeq, 1.0);
    engine.step();
    for (const std::string& name : gpt.parameter_names()) continued.push_back(gpt.full_parameter(name));
  }
  // (4, 1): refused, naming both sizes.
  {
    const std::string what = load_error(MeshShape{4, 1}, 1, dir);
    CHECK(what.find("tensor-parallel size 2") != std::string::npos);
    CHECK(what.find("tensor-parallel size 1") != std::string::npos);
  }
  // (1, 4): refused on every rank, tp ranks 2 and 3 (no tp-02, tp-03 folder) too.
  {
    const std::string what = load_error(MeshShape{1, 4}, 3, dir);
    CHECK(what.find("tensor-parallel size 2") != std::string::npos);
    CHECK(what.find("tensor-parallel size 4") != std::string::npos);
  }
  // (1, 2) on each half of the world: ranks 2h, 2h + 1 hold tp ranks 0, 1 as at save time.
  auto half = world().split(world().rank() / 2, world().rank());
  {
    Mesh mesh(*half, MeshShape{1, 2});
    GptEngine m(adamw(2), mesh, kShape);
    Engine& engine = m.engine;
    Gpt& gpt = m.gpt;
    const auto cs = engine.load_checkpoint(dir.string());
    CHECK(cs.at("step").get<int>() == 2);
    for (ParamId p = 0; p < static_cast<ParamId>(saved.master.size()); ++p) {
      CHECK(engine.gather_master(p) == saved.master[static_cast<std::size_t>(p)]);
      CHECK(engine.gather_optimizer_state(p, 0) == saved.exp_avg[static_cast<std::size_t>(p)]);
    }
    gpt.train_micro_batch(batches[2], kBatch, kSeq, 1.0);
    engine.step();
    const auto names = gpt.parameter_names();
    for (std::size_t p = 0; p < names.size(); ++p) {
      CAPTURE(names[p]);
      CHECK(close(gpt.full_parameter(names[p]), continued[p], 1e-5));
    }
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

// The message of the agreed error that loading `dir` into a GPT of `shape`
// on a `mesh_shape` mesh throws on this rank; "not agreed: ..." for an error
// that is not an AgreedError, "" when the load succeeds.
std::string agreed_load_error(MeshShape mesh_shape, const GptShape& shape, const fs::path& dir) {
  Mesh mesh(world(), mesh_shape);
  GptEngine m(adamw(1), mesh, shape);
  try {
    m.engine.load_checkpoint(dir.string());
  } catch (const std::exception& e) {
    return is_agreed(e) ? std::string(e.what()) : "not agreed: " + std::string(e.what());
  }
  return "";
}

// Swaps two folders of a mesh checkpoint (on rank 0, between barriers).
void swap_folders(const fs::path& a, const fs::path& b) {
  world().barrier();
  if (world().rank() == 0) {
    const fs::path tmp = a.string() + ".swap";
    fs::rename(a, tmp);
    fs::rename(b, a);
    fs::rename(tmp, b);
  }
  world().barrier();
}

TEST_CASE("gpt on a mesh: swapped tp folders and another --heads are refused on every rank, naming the field") {
  if (world().world_size() != 4) return;
  // (dp 2, tp 2): tp-00 and tp-01 swapped; (tp 2, pp 2): pp-01/tp-00 and pp-01/tp-01 swapped.
  for (MeshShape mesh_shape : {MeshShape{2, 2, 1}, MeshShape{1, 2, 2}}) {
    CAPTURE(mesh_shape.pp);
    const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-gpt-mesh-swap-{}", mesh_shape.pp);
    testing::remove_dir_on_rank0(world(), dir);
    {
      Mesh mesh(world(), mesh_shape);
      GptEngine m(adamw(1), mesh, kShape);
      m.gpt.initialize(7);
      m.engine.save_checkpoint(dir.string(), {{"step", 0}});
    }
    const fs::path stage = mesh_shape.pp > 1 ? dir / "pp-01" : dir;
    CHECK(agreed_load_error(mesh_shape, kShape, dir).empty());
    swap_folders(stage / "tp-00", stage / "tp-01");
    {
      const std::string what = agreed_load_error(mesh_shape, kShape, dir);
      CAPTURE(what);
      CHECK(what.find((stage / "tp-0").string()) != std::string::npos);
      CHECK((what.find("mesh.tp_rank is 1, expected 0") != std::string::npos ||
             what.find("mesh.tp_rank is 0, expected 1") != std::string::npos));
      CHECK(what.find(fmt::format("pipeline stage {} of {}", mesh_shape.pp - 1, mesh_shape.pp)) != std::string::npos);
      CHECK(what.find("folders swapped") != std::string::npos);
    }
    swap_folders(stage / "tp-00", stage / "tp-01");
    // Another --heads at the same width: the same names and shapes, another
    // attention layout.
    GptShape other = kShape;
    other.heads = 2;
    {
      const std::string what = agreed_load_error(mesh_shape, other, dir);
      CAPTURE(what);
      CHECK(what.find("is from a different model") != std::string::npos);
      CHECK(what.find("model.config.heads: checkpoint 4, this run 2") != std::string::npos);
    }
    world().barrier();
    if (world().rank() == 0) fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace zeroshard::examples
