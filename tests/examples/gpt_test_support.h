// What the GPT example's tests (test_gpt_mesh.cpp, test_gpt_pipeline.cpp)
// share: the world communicator, the AdamW configuration they train with
// and the per-tensor closeness check against a single-rank reference.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "runtime/config/config.h"

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

}  // namespace zeroshard::examples::gpt_testing
