// The memory of a mesh plan (runtime/cluster_plan/mesh_memory.h, [Note:
// mesh memory]): at tp = pp = 1 the model states are the byte-exact
// estimator's figure; activations follow the closed forms of 1F1B
// (min(p - r, m) micro-batches in flight on stage r); offloaded optimizer
// state moves to the node's host memory.
#include <doctest/doctest.h>

#include "tests/runtime/cluster_plan/test_cluster.h"
#include "runtime/cluster_plan/mesh_memory.h"
#include "runtime/plan/memory_estimate.h"

using namespace zeroshard;

namespace {

ClusterDescription node8() { return testing::test_cluster(1, 8); }

const TransformerShape& gpt2() {
  static const TransformerShape t = TransformerShape::parse("layers=12,hidden=768,heads=12,seq=1024,vocab=50304", "t");
  return t;
}

}  // namespace

TEST_CASE("tp = pp = 1: the model states are the estimator's, byte for byte") {
  const PlanConstants k;
  for (int stage = 0; stage <= 3; ++stage) {
    for (int dp : {1, 3, 8}) {
      CAPTURE(stage);
      CAPTURE(dp);
      const MeshPlan plan{.dp = dp, .stage = stage, .micro_batch = 2, .micro_batches = 4};
      const MeshMemory m = mesh_memory(gpt2(), plan, node8(), k, "t");
      const ModelDescription rank = gpt2().rank_model(1, 1, 0, "t");
      const EngineConfig c = mesh_engine_config(plan, 50304 * 768 + 1024 * 768);
      double want = 0;
      for (int r : {0, dp - 1}) {
        want = std::max(want, static_cast<double>(estimate_memory(rank, c, dp, r).after_step.peak_total(MemTier::device)));
      }
      CHECK(m.model_states == want);
      CHECK(m.host_per_node == 0);
    }
  }
  // The step's peak shrinks with the stage at 8 ranks.
  const auto at = [](int stage) {
    return mesh_memory(gpt2(), MeshPlan{.dp = 8, .stage = stage}, node8(), PlanConstants{}, "t").model_states;
  };
  CHECK(at(1) < at(0));
  CHECK(at(3) < at(1));
}

TEST_CASE("activations: one micro-batch in flight without a pipeline, min(p - r, m) with 1F1B") {
  const PlanConstants k;
  const TransformerShape& t = gpt2();
  const double sbh = 1024.0 * 2 * 768;
  const MeshPlan flat{.dp = 1, .micro_batch = 2, .micro_batches = 8, .recompute = Recompute::selective};
  const MeshMemory m = mesh_memory(t, flat, node8(), k, "t");
  const double layer = t.layer_activation_bytes(2, 1, false, Recompute::selective, true);
  CHECK(m.activations == doctest::Approx(12 * layer + 2 * sbh + 12 * t.logits(2, 1)).epsilon(1e-12));
  CHECK(t.logits(2, 2) == 1024.0 * 2 * 50304 / 2);
  CHECK(m.overhead == k.device_overhead_bytes);
  CHECK(m.device() == m.model_states + m.activations + m.overhead);
  // 4 stages of 3 layers, 8 micro-batches, tp 2 with sequence parallelism:
  // stage 0 keeps 4 in flight, stage 3 one and the loss (12 bytes a logit:
  // PlanConstants::loss_bytes_per_logit, 1024 x 2 x 50304 / 2 logits).
  const MeshPlan piped{.dp = 1, .tp = 2, .pp = 4, .micro_batch = 2, .micro_batches = 8};
  const MeshMemory p = mesh_memory(t, piped, node8(), k, "t");
  const double layer2 = t.layer_activation_bytes(2, 2, true, Recompute::none, true);
  const double first = 4 * 3 * layer2 + 4 * 2 * sbh / 2, last = 3 * layer2 + 12 * t.logits(2, 2);
  if (p.worst_stage == 0) CHECK(p.activations == doctest::Approx(first).epsilon(1e-12));
  if (p.worst_stage == 3) CHECK(p.activations == doctest::Approx(last).epsilon(1e-12));
  CHECK((p.worst_stage == 0 || p.worst_stage == 3));
  // Full recompute keeps each layer's input only.
  const MeshPlan full{.dp = 1, .micro_batch = 2, .micro_batches = 8, .recompute = Recompute::full};
  CHECK(mesh_memory(t, full, node8(), k, "t").activations ==
        doctest::Approx(12 * 2 * sbh + 2 * sbh + 12 * t.logits(2, 1)).epsilon(1e-12));
}

TEST_CASE("offload_optimizer cpu moves the master weights and AdamW states to the host") {
  const PlanConstants k;
  const MeshPlan none{.dp = 8, .stage = 2};
  MeshPlan cpu = none;
  cpu.offload_optimizer = OffloadDevice::cpu;
  const MeshMemory a = mesh_memory(gpt2(), none, node8(), k, "t"), b = mesh_memory(gpt2(), cpu, node8(), k, "t");
  // 12 bytes per parameter, 1/8 on each rank, 8 ranks a node: at least 12 B x Psi on the host.
  CHECK(b.host_per_node >= 12.0 * static_cast<double>(gpt2().parameter_count()));
  CHECK(b.model_states < a.model_states - 1.4 * static_cast<double>(gpt2().parameter_count()));
}
