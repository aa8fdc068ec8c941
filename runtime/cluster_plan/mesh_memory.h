// The memory one accelerator of a mesh plan (runtime/cluster_plan/
// mesh_plan.h) needs, and its node's host memory.
//
// [Note: mesh memory]
// Model states come from the byte-exact estimator (runtime/plan/
// memory_estimate.h): for each pipeline stage, the ModelDescription one rank
// of the tp x pp mesh holds (TransformerShape::rank_model) laid out over
// the dp ranks with the plan's ZeRO stage, offload tiers, bf16 compute,
// fp32 master weights and AdamW states, estimated for the first and the
// last dp rank (the last ones hold the padding); the device tier's peak
// during a training step (resident arrays plus gathered units, buckets and
// staging). At tp = pp = 1 this is the estimator's figure exactly. Then
// activations (TransformerShape::layer_activation_bytes, sequence
// parallelism with tp > 1): 1F1B keeps min(p - r, m) micro-batches in
// flight on stage r, each for its L / p layers; the first stage also keeps
// the embedding's output (2 s b h / tp per micro-batch), the last the
// loss's bytes of one micro-batch at its backward (its logits x
// PlanConstants::loss_bytes_per_logit). The stage with the most device bytes is the
// plan's. Host memory per node is the host tier's peak times the node's
// accelerators. PlanConstants::device_overhead_bytes is added on the
// device. The estimator models the cpu engine's buffers; a GPU engine's
// NCCL buckets and pinned staging may differ by a bucket.
#pragma once

#include <map>
#include <string>

#include "runtime/cluster_plan/cluster_description.h"
#include "runtime/cluster_plan/mesh_plan.h"
#include "runtime/cluster_plan/transformer_shape.h"
#include "runtime/config/config.h"

namespace zeroshard {

/// The bytes of one plan. Plain value.
struct MeshMemory {
  double model_states = 0;   ///< device bytes of model states at the step's peak, on the plan's worst stage
  double activations = 0;    ///< device bytes of activations on that stage
  double overhead = 0;       ///< PlanConstants::device_overhead_bytes
  double host_per_node = 0;  ///< host tier bytes of a node's accelerators at the step's peak
  int worst_stage = 0;       ///< the pipeline stage these are of
  /// Device bytes in all.
  double device() const { return model_states + activations + overhead; }
};

/// The EngineConfig a rank of `plan` runs with (the estimator's input):
/// ZeRO stage, compute dtype, AdamW, offload tiers (nvme_path "/nvme",
/// which EngineConfig requires and the estimator never opens), micro-batch
/// and accumulation, and
/// offload_param.buffer_size large enough for `largest_unit` elements.
EngineConfig mesh_engine_config(const MeshPlan& plan, std::int64_t largest_unit);

/// The estimator's figures for one pipeline stage's rank: device and host
/// tier peaks during a step, bytes. Plain value.
struct StageModelStates {
  double device = 0;
  double host = 0;
};

/// Memoizes model states by (tp, pp, stage shape, ZeRO stage, offload
/// tiers, accumulation or not): they do not depend on the micro-batch or
/// the recomputation. Not thread safe.
class MeshMemoryCache {
 public:
  /// The cached figures for `key`, computed by `compute` the first time.
  template <class F>
  const StageModelStates& get(const std::string& key, F&& compute) {
    auto it = entries_.find(key);
    if (it == entries_.end()) it = entries_.emplace(key, compute()).first;
    return it->second;
  }

 private:
  std::map<std::string, StageModelStates> entries_;
};

/// See [Note: mesh memory]. `cache` (may be null) memoizes the
/// estimator's figures across calls with the same model and cluster.
/// Throws ConfigError (naming `source`) where the model does not divide
/// over the plan's tp or pp, and what estimate_memory throws for a
/// configuration EngineConfig refuses.
MeshMemory mesh_memory(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                       const PlanConstants& constants, const std::string& source, MeshMemoryCache* cache = nullptr);

}  // namespace zeroshard
