// The cluster planner's search: every way to lay a transformer over a
// described cluster (runtime/cluster_plan/mesh_plan.h), each with its
// memory (mesh_memory.h) and step time (mesh_step_time.h), the ones that
// fit ranked by tokens a second and the others with the reason they do not.
//
// [Note: mesh search]
// Candidates use every accelerator: dp x tp x pp = nodes x accelerators per
// node, with tp a divisor of the accelerators per node that divides the
// heads, kv_heads, ffn and vocabulary, and pp a divisor of the layers;
// ZeRO stages 0-3; offload none, the optimizer on cpu (stages 1-3), the
// optimizer and the parameters on cpu (stage 3), and the same with nvme
// where the cluster has NVMe; each micro-batch of the request that
// divides the global batch over dp (m = global batch / (dp x micro-batch)
// micro-batches a step; a pipeline needs m >= p); recompute none,
// selective, op and full. A candidate fits when its device bytes are within
// the accelerator's memory and its node's host bytes within the node's.
// Fits rank by tokens a second, then by the simpler mesh (fewer tp x pp
// ranks), then by fewer device bytes; the rejected
// ones keep their prediction, so the report can say which faster plans did
// not fit and by how much. Model states are estimated once per (tp, pp,
// stage, offload, accumulation) and pipeline stage shape (MeshMemoryCache).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cluster_plan/cluster_description.h"
#include "runtime/cluster_plan/mesh_memory.h"
#include "runtime/cluster_plan/mesh_plan.h"
#include "runtime/cluster_plan/mesh_step_time.h"
#include "runtime/cluster_plan/transformer_shape.h"

namespace zeroshard {

/// What to plan. Plain value.
struct MeshSearchRequest {
  TransformerShape model;
  ClusterDescription cluster;
  std::int64_t global_batch = 0;                        ///< sequences per optimizer step (>= 1)
  std::vector<std::int64_t> micro_batches = {1, 2, 4, 8};  ///< candidates (each >= 1)
  std::optional<DType> dtype;     ///< compute dtype; none: bf16 where the accelerator has it, else f16
  PlanConstants constants;
  std::string source = "plan";    ///< names the request in messages
};

/// One candidate with its predictions. Plain value.
struct MeshCandidate {
  MeshPlan plan;
  MeshMemory memory;
  MeshStepTime time;
  double tokens_per_s = 0;
  double mfu = 0;
  std::string rejected;  ///< "" when it fits, else what is over budget and by how much
};

/// The search's outcome. Plain value.
struct MeshSearchResult {
  std::vector<MeshCandidate> fits;      ///< ranked: most tokens a second first
  std::vector<MeshCandidate> rejected;  ///< ranked the same way
};

/// See [Note: mesh search]. Throws ConfigError (naming request.source)
/// for a global batch < 1, a micro-batch < 1, and what the descriptions'
/// checks throw; never returns a fit over a budget.
MeshSearchResult search_mesh_plans(const MeshSearchRequest& request);

}  // namespace zeroshard
