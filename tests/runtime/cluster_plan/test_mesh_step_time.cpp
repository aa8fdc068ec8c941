// The step time of a mesh plan (runtime/cluster_plan/mesh_step_time.h,
// [Note: mesh step time]) against its closed forms: one accelerator runs at
// the compute efficiency exactly (MFU = efficiency without recomputation);
// the bubble is (p - 1) / m of the compute; ZeRO's collectives by stage,
// hidden where compute covers them; tensor-parallel collectives per layer;
// offload's transfers and CPU optimizer.
#include <doctest/doctest.h>

#include "core/error.h"
#include "tests/runtime/cluster_plan/test_cluster.h"
#include "runtime/cluster_plan/collective_time.h"
#include "runtime/cluster_plan/mesh_step_time.h"

using namespace zeroshard;

namespace {

ClusterDescription cluster() { return testing::test_cluster(2, 8); }

const TransformerShape& model() {
  static const TransformerShape t = TransformerShape::parse("layers=24,hidden=2048,heads=16,seq=2048,vocab=51200", "t");
  return t;
}

}  // namespace

TEST_CASE("one accelerator: the compute at the stated efficiency, MFU equal to it") {
  const PlanConstants k{.compute_efficiency = 0.4};
  const MeshPlan plan{.micro_batch = 2, .micro_batches = 4};
  const MeshStepTime t = mesh_step_time(model(), plan, cluster(), k, "t");
  const double tokens = 2.0 * 4 * 2048;
  CHECK(t.compute == doctest::Approx(tokens * model().model_flops_per_token() / (1e15 * 0.4)).epsilon(1e-12));
  CHECK(t.total() == t.compute);
  CHECK(mesh_tokens_per_second(model(), plan, t) == doctest::Approx(tokens / t.compute).epsilon(1e-12));
  CHECK(mesh_mfu(model(), plan, cluster(), t) == doctest::Approx(0.4).epsilon(1e-12));
  // Full recomputation runs another forward: MFU drops by model / hardware FLOPs.
  MeshPlan full = plan;
  full.recompute = Recompute::full;
  const MeshStepTime r = mesh_step_time(model(), full, cluster(), k, "t");
  CHECK(mesh_mfu(model(), full, cluster(), r) ==
        doctest::Approx(0.4 * model().model_flops_per_token() / model().hardware_flops_per_token(Recompute::full))
            .epsilon(1e-12));
  // No bf16 on the accelerator: named.
  ClusterDescription v = cluster();
  v.peak_flops_bf16 = 0;
  CHECK_THROWS_AS(mesh_step_time(model(), plan, v, k, "t"), ConfigError);
}

TEST_CASE("the pipeline bubble and its transfers") {
  const PlanConstants k{.link_efficiency = 0.8};
  const MeshPlan plan{.pp = 4, .micro_batch = 1, .micro_batches = 8};
  const MeshStepTime t = mesh_step_time(model(), plan, cluster(), k, "t");
  CHECK(t.bubble == doctest::Approx(t.compute * 3 / 8).epsilon(1e-12));
  // 4 stages of one rank each lie in one node: 2 x (m + p - 1) transfers of 2 s b h bytes inside it.
  CHECK(t.pp_comm == doctest::Approx(2 * 11 * point_to_point_seconds(2.0 * 2048 * 2048, false, cluster()) / 0.8)
                         .epsilon(1e-12));
}

TEST_CASE("ZeRO's collectives by stage, hidden behind compute where it covers them") {
  const PlanConstants k{.link_efficiency = 0.8};
  const ClusterDescription c = cluster();
  const double n = static_cast<double>(model().parameter_count());
  const GroupPlacement dp{16, 8};  // 16 ranks over the 2 nodes
  const MeshPlan base{.dp = 16, .micro_batch = 1, .micro_batches = 4};
  MeshPlan s0 = base, s2 = base, s3 = base;
  s2.stage = 2;
  s3.stage = 3;
  const MeshStepTime t0 = mesh_step_time(model(), s0, c, k, "t");
  CHECK(t0.dp_comm == doctest::Approx(all_reduce_seconds(4 * n, dp, c) / 0.8).epsilon(1e-12));
  CHECK(t0.dp_exposed == doctest::Approx(std::max(0.0, t0.dp_comm - t0.compute / 4 * 2 / 3)).epsilon(1e-12));
  const MeshStepTime t2 = mesh_step_time(model(), s2, c, k, "t");
  const double rs = reduce_scatter_seconds(4 * n, dp, c) / 0.8, ag = all_gather_seconds(2 * n, dp, c) / 0.8;
  CHECK(t2.dp_comm == doctest::Approx(4 * rs + ag).epsilon(1e-12));
  const MeshStepTime t3 = mesh_step_time(model(), s3, c, k, "t");
  CHECK(t3.dp_comm == doctest::Approx(4 * (2 * ag + rs)).epsilon(1e-12));
  CHECK(t3.dp_exposed == doctest::Approx(4 * std::max(0.0, 2 * ag + rs - t3.compute / 4)).epsilon(1e-12));
  CHECK(t3.dp_exposed <= t3.dp_comm);
}

TEST_CASE("tensor parallelism: four all-reduce volumes per layer and micro-batch, six with full recompute") {
  const PlanConstants k{.link_efficiency = 0.8, .tp_comm_overlap = 0.0};
  const MeshPlan plan{.tp = 8, .micro_batch = 2, .micro_batches = 3};
  const double ar = all_reduce_seconds(2.0 * 2048 * 2 * 2048, {8, 8}, cluster()) / 0.8;
  CHECK(mesh_step_time(model(), plan, cluster(), k, "t").tp_comm == doctest::Approx(3 * 24 * 4 * ar).epsilon(1e-12));
  MeshPlan full = plan;
  full.recompute = Recompute::full;
  CHECK(mesh_step_time(model(), full, cluster(), k, "t").tp_comm == doctest::Approx(3 * 24 * 6 * ar).epsilon(1e-12));
  // Hidden behind up to a quarter of the compute.
  const PlanConstants overlap{.link_efficiency = 0.8, .tp_comm_overlap = 0.25};
  const MeshStepTime o = mesh_step_time(model(), plan, cluster(), overlap, "t");
  CHECK(o.tp_comm == doctest::Approx(std::max(0.0, 3 * 24 * 4 * ar - 0.25 * o.compute)).epsilon(1e-12));
  CHECK(o.tp_comm < 3 * 24 * 4 * ar);
}

TEST_CASE("offload: the shard's transfers, the CPU optimizer, NVMe shared by the node") {
  const PlanConstants k{.host_optimizer_params_per_s = 16e9};  // per node of 8: 2e9 for each accelerator
  const double shard = static_cast<double>(model().parameter_count()) / 8;
  MeshPlan cpu{.dp = 8, .stage = 2, .offload_optimizer = OffloadDevice::cpu};
  CHECK(mesh_step_time(model(), cpu, cluster(), k, "t").offload ==
        doctest::Approx(6 * shard / 20e9 + shard / 2e9).epsilon(1e-12));
  MeshPlan nvme = cpu;
  nvme.offload_optimizer = OffloadDevice::nvme;
  CHECK(mesh_step_time(model(), nvme, cluster(), k, "t").offload ==
        doctest::Approx(6 * shard / 20e9 + shard / 2e9 + 12 * shard * 8 * (1 / 8e9 + 1 / 4e9)).epsilon(1e-12));
}
