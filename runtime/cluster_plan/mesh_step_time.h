// The predicted time of one optimizer step of a mesh plan (runtime/
// cluster_plan/mesh_plan.h) on a described cluster, and what it gives:
// tokens per second and model FLOPs utilization.

#pragma once

#include "runtime/cluster_plan/cluster_description.h"
#include "runtime/cluster_plan/mesh_plan.h"
#include "runtime/cluster_plan/transformer_shape.h"

// [Note: mesh step time]
// Ranks are ordered tp fastest, then dp, then pp (Megatron-LM's order), tp
// inside a node: a dp group has gcd(dp, accelerators_per_node / tp) ranks
// on each node; pipeline neighbours are tp x dp ranks apart, in another
// node when tp x dp >= accelerators_per_node. Per step, on each rank:
//   compute: mb x m x s tokens of TransformerShape::hardware_flops_per_
//     token (recomputation included) over tp x pp ranks, at
//     PlanConstants::compute_efficiency of the dtype's peak;
//   bubble: (p - 1) / m of the compute (1F1B: the step is (m + p - 1) / m
//     of the ideal);
//   tensor parallelism: per layer and micro-batch, sequence parallelism's
//     all-gathers and reduce-scatters of the 2 s b h-byte activations, two
//     of each in the forward and in the backward (the volume of four
//     all-reduces), two more with full recompute (op's
//     recomputed products are not counted); exposed beyond
//     PlanConstants::tp_comm_overlap x the compute (the GEMMs it can hide
//     behind);
//   pipeline: an activation forward and a gradient back, 2 s b h / tp
//     bytes each, for each of the m + p - 1 slots;
//   ZeRO over dp (N the rank's parameters; gradients 4 bytes (fp32
//     accumulation, zeroshard's default), parameters 2): stage 0 an
//     all-reduce of the gradients at the step; stage 1 a reduce-scatter at
//     the step; stage 2 a reduce-scatter each micro-batch; stages 1/2 then
//     an all-gather of the updated parameters; stage 3 each micro-batch an
//     all-gather in the forward, another in the backward and a
//     reduce-scatter. Gradient traffic hides behind the backward of its
//     micro-batch (2/3 of its compute), stage 3's behind the whole
//     micro-batch; the rest is exposed; the parameter all-gather after the
//     optimizer is exposed;
//   offload: the gradient shard (4 bytes per element) to the host and the
//     parameters (2) back over the host-device link, the CPU AdamW at
//     PlanConstants::host_optimizer_params_per_s shared by the node's
//     accelerators, and with nvme the master
//     weights and states (12 bytes per element) read and written at the
//     node's NVMe bandwidth shared by its accelerators; offloaded stage 3
//     parameters cross the host link (or NVMe) twice a micro-batch.
// Link times use collective_time.h at PlanConstants::link_efficiency of
// the described bandwidth.

namespace zeroshard {

/// Seconds of one optimizer step, by part. Plain value.
struct MeshStepTime {
  double compute = 0;     ///< the layers' FLOPs, recomputation included
  double bubble = 0;      ///< pipeline stages idle
  double tp_comm = 0;     ///< tensor-parallel collectives
  double pp_comm = 0;     ///< activations and their gradients between stages
  double dp_comm = 0;     ///< ZeRO's collectives, all of them
  double dp_exposed = 0;  ///< the part of dp_comm not hidden behind compute
  double offload = 0;     ///< host-device and NVMe traffic and the CPU optimizer
  /// The step: compute + bubble + tp_comm + pp_comm + dp_exposed + offload.
  double total() const { return compute + bubble + tp_comm + pp_comm + dp_exposed + offload; }
};

/// See [Note: mesh step time]. Throws ConfigError (naming `source`) when
/// the cluster lacks the plan's dtype or the model does not divide over
/// its tp or pp.
MeshStepTime mesh_step_time(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                            const PlanConstants& constants, const std::string& source);

/// Training tokens a second over the mesh: global batch x seq / step.
double mesh_tokens_per_second(const TransformerShape& model, const MeshPlan& plan, const MeshStepTime& t);

/// Model FLOPs utilization: model FLOPs per token (no recomputation) x
/// tokens a second / (accelerators x the dtype's peak), as PaLM defines it.
double mesh_mfu(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                const MeshStepTime& t);

}  // namespace zeroshard
