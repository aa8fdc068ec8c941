// The Engine on a device mesh ([Note: engine on a mesh], runtime/engine/engine.h)
// at every (dp, tp) factorisation of 1-4 ranks and stages 0-3, against
// closed forms: the global norm counts each tensor-parallel slice once and
// each replicated parameter once; the clip factor follows from it; the
// replicated parameters' gradients are averaged over the tp group; an
// undeclared parameter is named; an Inf on one tp rank makes every rank of
// the world skip; a checkpoint without a mesh loads at tp = 1 and is refused
// at tp > 1 naming both sizes. Checks follow the collectives of each case.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/engine.h"
#include "support/scratch_files.h"
#include "support/test_world.h"

namespace zeroshard {
namespace {

using testing::sgd_config;
using testing::world;

std::vector<MeshShape> factorisations(int n) {
  std::vector<MeshShape> out;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp == 0) out.push_back(MeshShape{n / tp, tp});
  }
  return out;
}

// A split parameter "a" (full [12], this tp rank's 12/tp), a replicated "b" [4]
// in the same unit and a replicated "c" [1] in a second unit.
struct MeshModel {
  Engine engine;
  ParamId a, b, c;
  std::size_t local;
  MeshModel(const EngineConfig& cfg, const Mesh& mesh) : engine(cfg, mesh) {
    const UnitId u0 = engine.add_unit("u0"), u1 = engine.add_unit("u1");
    local = 12 / static_cast<std::size_t>(mesh.tp_size());
    a = engine.add_parameter(u0, "a", {static_cast<std::int64_t>(local)}, 0, TensorParallel::split(0));
    b = engine.add_parameter(u0, "b", {4}, 0, TensorParallel::replicated());
    c = engine.add_parameter(u1, "c", {1}, 0, TensorParallel::replicated());
    engine.finalize();
  }
  // Every dp rank adds the same gradient: a[i] = (global i) % 3 + 1, b = bval, c = 2.
  void set_grads(const Mesh& mesh, float bval) {
    auto ga = engine.grad(a);
    for (std::size_t i = 0; i < local; ++i) {
      ga[i] += static_cast<float>((static_cast<std::size_t>(mesh.tp_rank()) * local + i) % 3 + 1);
    }
    for (float& v : engine.grad(b)) v += bval;
    engine.grad(c)[0] += 2.0f;
  }
};

TEST_CASE("engine on a mesh: global norm and clip factor with replicated parameters, every rank") {
  const int n = world().world_size();
  for (MeshShape shape : factorisations(n)) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(shape.dp);
      CAPTURE(shape.tp);
      CAPTURE(stage);
      Mesh mesh(world(), shape);
      MeshModel m(sgd_config(stage, 2.0), mesh);
      m.set_grads(mesh, 1.0f);
      const StepResult r = m.engine.step();
      // sum of squares: a = 4 x (1 + 4 + 9) = 56, b = 4, c = 4: 64, norm 8.
      CHECK(r.applied);
      CHECK(std::abs(r.grad_norm - 8.0) <= 1e-12 * 8.0);
      const double coef = 2.0 / (8.0 + 1e-6);
      CHECK(std::abs(r.clip_coef - coef) <= 1e-12 * coef);
      // SGD: p = -lr x coef x g.
      const auto a = m.engine.gather_parameter(m.a);
      for (std::size_t i = 0; i < m.local; ++i) {
        const double g = static_cast<double>((static_cast<std::size_t>(mesh.tp_rank()) * m.local + i) % 3 + 1);
        CHECK(a[i] == doctest::Approx(-0.5 * coef * g).epsilon(1e-6));
      }
      CHECK(m.engine.gather_parameter(m.c)[0] == doctest::Approx(-0.5 * coef * 2.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("engine on a mesh: replicated gradients are averaged over the tensor-parallel group") {
  const int n = world().world_size();
  for (MeshShape shape : factorisations(n)) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(shape.tp);
      CAPTURE(stage);
      Mesh mesh(world(), shape);
      MeshModel m(sgd_config(stage, 0.0), mesh);
      // b's gradient differs by tp rank (t + 1): the update uses the mean (tp + 1) / 2.
      m.set_grads(mesh, static_cast<float>(mesh.tp_rank() + 1));
      const StepResult r = m.engine.step();
      const double mean = (shape.tp + 1) / 2.0;
      CHECK(std::abs(r.grad_norm - std::sqrt(56.0 + 4.0 * mean * mean + 4.0)) <= 1e-12 * 10);
      for (float v : m.engine.gather_parameter(m.b)) CHECK(v == doctest::Approx(-0.5 * mean).epsilon(1e-7));
    }
  }
}

TEST_CASE("engine on a mesh: a parameter without a tensor-parallel declaration is named at tp > 1") {
  const int n = world().world_size();
  for (MeshShape shape : factorisations(n)) {
    if (shape.tp == 1) continue;
    Mesh mesh(world(), shape);
    Engine e(sgd_config(1, 0.0), mesh);
    const UnitId u = e.add_unit("u");
    e.add_parameter(u, "ln.weight", {4}, 0, TensorParallel::replicated());
    e.add_parameter(u, "plain.weight", {4});
    std::string what;
    try {
      e.finalize();
    } catch (const ConfigError& err) {
      what = err.what();
    }
    CHECK(what.find("plain.weight") != std::string::npos);
    CHECK(what.find("ln.weight") == std::string::npos);
    CHECK(what.find(fmt::format("tensor-parallel size {}", shape.tp)) != std::string::npos);
  }
}

TEST_CASE("engine on a mesh: fp16 overflow on one tensor-parallel rank skips the step on every rank") {
  const int n = world().world_size();
  for (MeshShape shape : factorisations(n)) {
    if (shape.tp == 1) continue;
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(shape.tp);
      CAPTURE(stage);
      Mesh mesh(world(), shape);
      EngineConfig cfg = sgd_config(stage, 0.0);
      cfg.compute_dtype = DType::f16;
      MeshModel m(cfg, mesh);
      const double scale0 = m.engine.loss_scale();
      // World rank 1 (dp 0, tp 1) alone has an Inf in its slice of "a".
      std::vector<float> g(m.local, 1.0f);
      if (world().rank() == 1) g[0] = INFINITY;
      kernels::cast(m.engine.grad_data(m.a, DType::f16), DType::f16, g.data(), DType::f32, g.size());
      const StepResult r = m.engine.step();
      double agree[2] = {r.skipped ? 1.0 : 0.0, m.engine.loss_scale()};
      double lo[2] = {agree[0], agree[1]};
      world().all_reduce(agree, 2, DType::f64, ReduceOp::max);
      world().all_reduce(lo, 2, DType::f64, ReduceOp::min);
      CHECK(r.skipped);
      CHECK(!r.applied);
      CHECK(lo[0] == 1.0);
      CHECK(lo[1] == agree[1]);  // the same loss scale everywhere
      CHECK(m.engine.loss_scale() <= scale0);  // backs off once hysteresis is used up
      CHECK(m.engine.skipped_steps() == 1);
      CHECK(m.engine.optimizer_steps() == 0);
      for (float v : m.engine.gather_parameter(m.a)) CHECK(v == 0.0f);
    }
  }
}

TEST_CASE("engine on a mesh: a checkpoint saved without a mesh loads at tp = 1 and is refused at tp > 1") {
  namespace fs = std::filesystem;
  const int n = world().world_size();
  const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-engine-mesh-{}", n);
  testing::remove_dir_on_rank0(world(), dir);
  std::vector<float> av(12);
  for (std::size_t i = 0; i < av.size(); ++i) av[i] = 0.25f * static_cast<float>(i) - 1.0f;
  {
    // The single-group engine: its manifest has no mesh key.
    Engine e(sgd_config(1, 0.0), world());
    const UnitId u0 = e.add_unit("u0"), u1 = e.add_unit("u1");
    const ParamId a = e.add_parameter(u0, "a", {12});
    e.add_parameter(u0, "b", {4});
    e.add_parameter(u1, "c", {1});
    e.finalize();
    e.set_parameter(a, av);
    e.save_checkpoint(dir.string(), {{"k", 1}});
  }
  for (MeshShape shape : factorisations(n)) {
    CAPTURE(shape.tp);
    Mesh mesh(world(), shape);
    MeshModel m(sgd_config(2, 0.0), mesh);
    std::string what;
    try {
      m.engine.load_checkpoint(dir.string());
    } catch (const std::exception& e) {
      what = e.what();
    }
    if (shape.tp == 1) {
      CHECK(what.empty());
      CHECK(m.engine.gather_master(m.a) == av);
    } else {
      CHECK(what.find("tensor-parallel size 1") != std::string::npos);
      CHECK(what.find(fmt::format("tensor-parallel size {}", shape.tp)) != std::string::npos);
    }
  }
  world().barrier();
  if (world().rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace zeroshard
