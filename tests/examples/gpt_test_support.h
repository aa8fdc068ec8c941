// What the GPT example's tests (test_gpt_mesh.cpp, test_gpt_pipeline.cpp,
// test_gpt_recompute.cpp, test_gpt_nvme.cpp) share: the world
// communicator, the AdamW configuration they train with, an engine with
// its model, a dp rank's rows of a batch, the gathered states a checkpoint
// is compared with, the per-step loss and norm checks (within a tolerance,
// or bit for bit with the final parameters) and the per-tensor closeness
// check against a single-rank reference, and the error a checkpoint load
// throws.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mesh.h"
#include "examples/gpt/gpt_model.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"
#include "tests/support/same_bits.h"

namespace zeroshard::examples::gpt_testing {

/// The process's world communicator (made on first use).
inline Communicator& world() {
  static std::unique_ptr<Communicator> comm = make_world_communicator();
  return *comm;
}

/// AdamW (lr 1e-2, betas 0.9 / 0.99, weight decay 0.1), clipping 1, at ZeRO
/// `stage` with `accumulation` micro-batches per step. eps is 1e-4, well
/// above rounding noise: the attention's key bias has a gradient of exactly
/// 0 in exact arithmetic (softmax ignores a shift of every score by q.b_k),
/// so what the ranks compute for it is summation-order noise of ~1e-10,
/// which Adam at eps 1e-8 would scale up to lr-sized steps.
inline EngineConfig gpt_test_adamw(int stage, int accumulation) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = 1;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = 1.0;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-2f;
  c.optimizer.beta1 = 0.9f;
  c.optimizer.beta2 = 0.99f;
  c.optimizer.eps = 1e-4f;
  c.optimizer.weight_decay = 0.1f;
  c.zero.stage = stage;
  return c;
}

/// An Engine on `mesh` with a Gpt of `shape` declared in it and finalized
/// (parameters not yet set: initialize or load a checkpoint).
struct GptEngine {
  GptEngine(const EngineConfig& config, const Mesh& mesh, const GptShape& shape)
      : engine(config, mesh), gpt(engine, mesh, shape) {
    engine.finalize();
  }
  Engine engine;
  Gpt gpt;
};

/// This dp rank's rows of a global batch of `batch` sequences of seq + 1
/// tokens each (batch / dp_size of them, in dp rank order).
inline std::vector<std::int32_t> my_rows(const std::vector<std::int32_t>& global, const Mesh& mesh,
                                         int batch, int seq) {
  const int per = batch / mesh.dp_size();
  const auto w = static_cast<std::ptrdiff_t>(seq + 1);
  return {global.begin() + mesh.dp_rank() * per * w,
          global.begin() + (mesh.dp_rank() + 1) * per * w};
}

/// Every parameter's gathered master weights and exp_avg, in ParamId order.
struct GatheredStates {
  std::vector<std::vector<float>> master, exp_avg;
};
inline GatheredStates gather_states(Engine& engine) {
  GatheredStates out;
  for (ParamId p = 0; p < static_cast<ParamId>(engine.layout().params().size()); ++p) {
    out.master.push_back(engine.gather_master(p));
    out.exp_avg.push_back(engine.gather_optimizer_state(p, 0));
  }
  return out;
}

/// Checks each step's loss and global norm against the reference's, within
/// `tol` relative.
inline void check_steps(const std::vector<double>& losses, const std::vector<double>& norms,
                        const std::vector<double>& ref_losses, const std::vector<double>& ref_norms,
                        double tol) {
  REQUIRE(losses.size() == ref_losses.size());
  REQUIRE(norms.size() == ref_norms.size());
  for (std::size_t s = 0; s < ref_losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(losses[s] - ref_losses[s]) <= tol * std::abs(ref_losses[s]));
    CHECK(std::abs(norms[s] - ref_norms[s]) <= tol * ref_norms[s]);
  }
}

/// Checks that a run matches a reference bit for bit: each step's loss and
/// global norm, and every parameter's final values.
inline void check_same_run(const std::vector<double>& losses, const std::vector<double>& norms,
                           const std::vector<std::vector<float>>& params, const std::vector<double>& ref_losses,
                           const std::vector<double>& ref_norms, const std::vector<std::vector<float>>& ref_params) {
  REQUIRE(losses.size() == ref_losses.size());
  REQUIRE(norms.size() == ref_norms.size());
  for (std::size_t s = 0; s < ref_losses.size(); ++s) {
    CAPTURE(s);
    CHECK(losses[s] == ref_losses[s]);
    CHECK(norms[s] == ref_norms[s]);
  }
  REQUIRE(params.size() == ref_params.size());
  for (std::size_t p = 0; p < ref_params.size(); ++p) {
    CAPTURE(p);
    CHECK(zeroshard::testing::same_bits(params[p], ref_params[p]));
  }
}
/// max |a - b| <= tol x max |b| over the tensor (false for different
/// sizes); prints the two when not.
inline bool close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  if (a.size() != b.size()) return false;
  double diff = 0, mag = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  if (diff > tol * mag) MESSAGE("max |diff| " << diff << " vs max |ref| " << mag);
  return diff <= tol * mag;
}

/// The message of the error that loading the checkpoint at `dir` into a
/// GptEngine(config, a `mesh_shape` mesh of the world, shape) throws (""
/// if none).
inline std::string load_error(const EngineConfig& config, const GptShape& shape,
                              MeshShape mesh_shape, const std::filesystem::path& dir) {
  Mesh mesh(world(), mesh_shape);
  GptEngine m(config, mesh, shape);
  try {
    m.engine.load_checkpoint(dir.string());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace zeroshard::examples::gpt_testing
