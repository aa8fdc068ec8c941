// The Engine on a mesh with pipeline stages ([Note: engine on a mesh],
// runtime/engine/engine.h) at every dp x tp x pp of 2-4 ranks with pp > 1, ZeRO
// stages 0-3, against closed forms: each pipeline stage's engine holds its
// own parameter (57 elements), the first and the last stage a tied one (7
// elements; Mesh::embedding_group()). The global norm covers every stage
// and counts the tied parameter once, with its gradient summed over the two
// stages; the clip factor follows; the tied copies get bitwise the same
// update. An Inf on the last stage alone skips the step on every rank.
// Tied copies laid out differently are one AgreedConfigError on every rank
// of the world, middle stages included; tying without a mesh is refused.
// Checkpoints: a stage's folder that is missing or cannot be written, or
// stages whose folders hold different steps, are one AgreedError on every
// rank of the world (no stage is left waiting in the next step).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "comm/mesh.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine.h"
#include "support/scratch_files.h"
#include "support/test_world.h"

namespace zeroshard {
namespace {

using testing::sgd_config;
using testing::world;

// Every (dp, tp, pp) of n ranks with pp > 1.
std::vector<MeshShape> pipeline_shapes(int n) {
  std::vector<MeshShape> out;
  for (int pp = 2; pp <= n; ++pp) {
    for (int tp = 1; tp <= n / pp; ++tp) {
      if (n % (pp * tp) == 0) out.push_back(MeshShape{n / (pp * tp), tp, pp});
    }
  }
  return out;
}

constexpr std::size_t kOwn = 57, kTied = 7;

// Stage s: "w.s" [57] in unit "u"; first and last stage: "tied" [tied_numel]
// alone in unit "t", tied over the embedding group.
struct PipelineStageModel {
  Engine engine;
  ParamId w = -1, tied = -1;
  PipelineStageModel(const EngineConfig& cfg, const Mesh& mesh, std::size_t tied_numel = kTied) : engine(cfg, mesh) {
    const UnitId u = engine.add_unit("u");
    w = engine.add_parameter(u, fmt::format("w.{}", mesh.pp_rank()), {static_cast<std::int64_t>(kOwn)}, 0,
                             TensorParallel::replicated());
    if (mesh.is_first_pipeline_stage() || mesh.is_last_pipeline_stage()) {
      const UnitId t = engine.add_unit("t");
      tied = engine.add_parameter(t, "tied", {static_cast<std::int64_t>(tied_numel)}, 0,
                                  TensorParallel::replicated());
      engine.tie_parameter(tied, mesh.embedding_group());
    }
    engine.finalize();
  }
};

TEST_CASE("engine with pipeline stages: the norm covers every stage, the tied gradient is summed and counted once") {
  for (MeshShape shape : pipeline_shapes(world().world_size())) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(shape.dp);
      CAPTURE(shape.tp);
      CAPTURE(shape.pp);
      CAPTURE(stage);
      Mesh mesh(world(), shape);
      PipelineStageModel m(sgd_config(stage, 1.0), mesh);
      CHECK(m.engine.pp_size() == shape.pp);
      CHECK(m.engine.pp_rank() == mesh.pp_rank());
      // Every dp rank adds the same gradients: w.s = s + 1; tied = 1 on the
      // first stage and 2 on the last, 3 once summed.
      const float own = static_cast<float>(mesh.pp_rank() + 1);
      for (float& v : m.engine.grad(m.w)) v += own;
      if (m.tied >= 0) {
        for (float& v : m.engine.grad(m.tied)) v += mesh.is_first_pipeline_stage() ? 1.0f : 2.0f;
      }
      const StepResult r = m.engine.step();
      double squares = 9.0 * kTied;
      for (int s = 0; s < shape.pp; ++s) squares += static_cast<double>(kOwn) * (s + 1) * (s + 1);
      const double norm = std::sqrt(squares), coef = 1.0 / (norm + 1e-6);
      CHECK(r.applied);
      CHECK(std::abs(r.grad_norm - norm) <= 1e-12 * norm);
      CHECK(std::abs(r.clip_coef - coef) <= 1e-12 * coef);
      // SGD from 0: p = -lr x coef x g, in float.
      const float w_want = static_cast<float>(-0.5 * coef) * own;
      for (float v : m.engine.gather_parameter(m.w)) CHECK(v == doctest::Approx(w_want).epsilon(1e-6));
      if (m.tied >= 0) {
        const std::vector<float> t = m.engine.gather_parameter(m.tied);
        for (float v : t) CHECK(v == doctest::Approx(-0.5 * coef * 3.0).epsilon(1e-6));
        // Bitwise the same on both stages.
        std::vector<float> both(2 * t.size());
        mesh.embedding_group().all_gather(t.data(), both.data(), t.size(), DType::f32);
        CHECK(std::equal(both.begin(), both.begin() + static_cast<std::ptrdiff_t>(t.size()),
                         both.begin() + static_cast<std::ptrdiff_t>(t.size())));
      }
    }
  }
}

TEST_CASE("engine with pipeline stages: fp16 overflow on the last stage alone skips the step on every rank") {
  for (MeshShape shape : pipeline_shapes(world().world_size())) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(shape.dp);
      CAPTURE(shape.tp);
      CAPTURE(shape.pp);
      CAPTURE(stage);
      Mesh mesh(world(), shape);
      EngineConfig cfg = sgd_config(stage, 0.0);
      cfg.compute_dtype = DType::f16;
      PipelineStageModel m(cfg, mesh);
      std::vector<float> g(kOwn, 1.0f);
      if (mesh.is_last_pipeline_stage() && mesh.dp_rank() == 0) g[kOwn / 2] = INFINITY;
      kernels::cast(m.engine.grad_data(m.w, DType::f16), DType::f16, g.data(), DType::f32, g.size());
      const StepResult r = m.engine.step();
      double hi[2] = {r.skipped ? 1.0 : 0.0, m.engine.loss_scale()};
      double lo[2] = {hi[0], hi[1]};
      world().all_reduce(hi, 2, DType::f64, ReduceOp::max);
      world().all_reduce(lo, 2, DType::f64, ReduceOp::min);
      CHECK(r.skipped);
      CHECK(lo[0] == 1.0);
      CHECK(lo[1] == hi[1]);  // one loss scale everywhere
      CHECK(m.engine.optimizer_steps() == 0);
      for (float v : m.engine.gather_parameter(m.w)) CHECK(v == 0.0f);
    }
  }
}

TEST_CASE("engine with pipeline stages: tied copies of different sizes are one error on every rank") {
  for (MeshShape shape : pipeline_shapes(world().world_size())) {
    CAPTURE(shape.pp);
    Mesh mesh(world(), shape);
    std::string what;
    bool agreed = false;
    try {
      PipelineStageModel m(sgd_config(2, 0.0), mesh, mesh.is_last_pipeline_stage() ? kTied + 1 : kTied);
    } catch (const AgreedConfigError& e) {
      what = e.what();
      agreed = true;
    }
    CHECK(agreed);
    CHECK(what.find("tied parameter \"tied\"") != std::string::npos);
    CHECK(what.find("7 elements") != std::string::npos);
    CHECK(what.find("holds 8") != std::string::npos);
  }
}

// What `f` throws on this rank: (message, agreed); ("", false) if nothing.
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class F>
std::pair<std::string, bool> error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return {e.what(), is_agreed(e)};
  }
  return {"", false};
}

TEST_CASE("engine with pipeline stages: a checkpoint problem on one stage is one error on every rank") {
  namespace fs = std::filesystem;
  for (MeshShape shape : pipeline_shapes(world().world_size())) {
    CAPTURE(shape.dp);
    CAPTURE(shape.tp);
    CAPTURE(shape.pp);
    const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-engine-pipeline-{}", world().world_size());
    testing::make_empty_dir_on_rank0(world(), dir);
    Mesh mesh(world(), shape);
    const std::string last = fmt::format("pp-{:02d}", shape.pp - 1);
    {
      PipelineStageModel m(sgd_config(2, 0.0), mesh);
      for (int s = 0; s < 2; ++s) {
        for (float& v : m.engine.grad(m.w)) v += 1.0f;
        m.engine.step();
        m.engine.save_checkpoint(dir.string(), {{"k", s}});
      }
    }
    // Every folder holds steps 1 and 2, and the mesh-level latest names step 2.
    CHECK(read_text(dir / "latest") == "step-00000002\n");
    const std::vector<std::string> last_folders =
        shape.tp > 1 ? std::vector<std::string>{last + "/tp-00", last + "/tp-01"} : std::vector<std::string>{last};
    // A tag naming step 1 in the last stage's folders and step 2 elsewhere:
    // refused, naming every folder's step.
    if (world().rank() == 0) {
      for (const std::string& f : last_folders) {
        fs::copy(dir / f / "step-00000001", dir / f / "mixed", fs::copy_options::recursive);
      }
      for (int st = 0; st + 1 < shape.pp; ++st) {
        for (int t = 0; t < shape.tp; ++t) {
          const fs::path f = dir / fmt::format("pp-{:02d}", st) / (shape.tp > 1 ? fmt::format("tp-{:02d}", t) : "");
          fs::copy(f / "step-00000002", f / "mixed", fs::copy_options::recursive);
        }
      }
    }
    world().barrier();
    {
      PipelineStageModel m(sgd_config(1, 0.0), mesh);
      const auto [what, agreed] = error_of([&] { m.engine.load_checkpoint(dir.string(), "mixed"); });
      CHECK(agreed);
      CHECK(what.find("different steps") != std::string::npos);
      CHECK(what.find(fmt::format("pipeline stage {}, tp rank 0): step 1", shape.pp - 1)) != std::string::npos);
      CHECK(what.find("pipeline stage 0, tp rank 0): step 2") != std::string::npos);
      // Each rank's copy carries its own rank, so that rank 0 alone reports it.
      int reported_rank = -1;
      try {
        m.engine.load_checkpoint(dir.string(), "mixed");
      } catch (const AgreedConfigError& e) {
        reported_rank = e.rank();
      }
      CHECK(reported_rank == world().rank());
    }
    // The last stage's folders lack step 2 (a save interrupted there): the
    // load picks step 1, the newest step every folder holds, on every rank;
    // step 2 by name is refused, naming the folder that lacks it.
    if (world().rank() == 0) {
      for (const std::string& f : last_folders) fs::remove_all(dir / f / "step-00000002");
    }
    world().barrier();
    {
      PipelineStageModel m(sgd_config(1, 0.0), mesh);
      const nlohmann::json cs = m.engine.load_checkpoint(dir.string());
      CHECK(cs.at("k").get<int>() == 0);
      CHECK(m.engine.optimizer_steps() == 1);
      const auto [what, agreed] = error_of([&] { m.engine.load_checkpoint(dir.string(), "step-00000002"); });
      CHECK(agreed);
      CHECK(what.find(last + (shape.tp > 1 ? "/tp-0" : "/step-00000002")) != std::string::npos);
    }
    // A save now commits step 3 and prunes to keep_last 1 after the commit:
    // every folder keeps step 3 alone, the partial step 2 included removed.
    {
      PipelineStageModel m(sgd_config(1, 0.0), mesh);
      m.engine.load_checkpoint(dir.string(), "step-00000001");
      for (int st = 0; st < 2; ++st) {
        for (float& v : m.engine.grad(m.w)) v += 1.0f;
        m.engine.step();
      }
      CHECK(m.engine.save_checkpoint(dir.string(), {{"k", 3}}, 1) == "step-00000003");
    }
    CHECK(read_text(dir / "latest") == "step-00000003\n");
    for (const std::string& f : last_folders) {
      CHECK(fs::exists(dir / f / "step-00000003"));
      CHECK(!fs::exists(dir / f / "step-00000001"));
      CHECK(read_text(dir / f / "latest") == "step-00000003\n");
    }
    CHECK(!fs::exists(dir / "pp-00" / (shape.tp > 1 ? "tp-00/step-00000002" : "step-00000002")));
    CHECK(!fs::exists(dir / "pp-00" / (shape.tp > 1 ? "tp-00/mixed" : "mixed")));
    // The last stage's folder is gone: loading fails there, and everywhere.
    testing::remove_dir_on_rank0(world(), dir / last);
    {
      PipelineStageModel m(sgd_config(1, 0.0), mesh);
      const auto [what, agreed] = error_of([&] { m.engine.load_checkpoint(dir.string()); });
      CHECK(agreed);
      CHECK(what.find(last) != std::string::npos);
    }
    // The last stage's folder is a file: saving fails there, and everywhere.
    if (world().rank() == 0) std::ofstream(dir / last) << "not a folder\n";
    world().barrier();
    {
      PipelineStageModel m(sgd_config(1, 0.0), mesh);
      const auto [what, agreed] = error_of([&] { m.engine.save_checkpoint(dir.string(), {}); });
      CHECK(agreed);
      CHECK(what.find(last) != std::string::npos);
    }
    testing::remove_dir_on_rank0(world(), dir);
  }
}

TEST_CASE("engine: tie_parameter, tp_communicator and pp_communicator without a mesh are refused") {
  Engine e(sgd_config(1, 0.0), world());
  const ParamId p = e.add_parameter(e.add_unit("u"), "p", {3});
  CHECK_THROWS_AS(e.tie_parameter(p, world()), InvariantError);
  CHECK_THROWS_AS(e.tp_communicator(), InvariantError);
  CHECK_THROWS_AS(e.pp_communicator(), InvariantError);
}

TEST_CASE("engine with pipeline stages: waiting on pp_communicator() is comm_wait in the step breakdown") {
  // Each step every stage but the last computes (sleeps) 40 ms and sends a
  // value to the next stage, which waits for it: from stage 1 on, a stage
  // waits about 40 ms per step in its receive.
  for (MeshShape shape : pipeline_shapes(world().world_size())) {
    CAPTURE(shape.dp);
    CAPTURE(shape.tp);
    CAPTURE(shape.pp);
    Mesh mesh(world(), shape);
    EngineConfig c = sgd_config(1, 0.0);
    c.observe.wall_clock_breakdown = true;
    c.steps_per_print = 1000;  // nothing printed
    PipelineStageModel m(c, mesh);
    Communicator& pp = m.engine.pp_communicator();
    CHECK(pp.world_size() == mesh.pp_group().world_size());
    CHECK(pp.rank() == mesh.pp_group().rank());
    CHECK(m.engine.tp_communicator().rank() == mesh.tp_group().rank());
    for (int step = 0; step < 2; ++step) {
      double x = step;
      if (!mesh.is_first_pipeline_stage()) pp.recv(&x, 1, DType::f64, mesh.pp_rank() - 1);
      if (!mesh.is_last_pipeline_stage()) {
        auto span = m.engine.trace("forward");
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        pp.send(&x, 1, DType::f64, mesh.pp_rank() + 1);
      }
      CHECK(x == step);
      m.engine.step();
    }
    const StepFigures& f = m.engine.last_step_figures();
    if (mesh.is_first_pipeline_stage()) {
      CHECK(f.compute >= 35.0);
      CHECK(f.comm_wait < 20.0);
    } else {
      // Stage s waits for stage s - 1's sleep (the earlier stages run one
      // after another in the first step, side by side afterwards).
      CHECK(f.comm_wait >= 30.0);
      CHECK(f.other < f.comm_wait);
    }
  }
}

}  // namespace
}  // namespace zeroshard
