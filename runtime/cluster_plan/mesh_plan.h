// One candidate of the cluster planner's search: how a transformer is laid
// over a dp x tp x pp mesh of a described cluster, which ZeRO stage and
// offload tiers it uses, its batch and its recomputation. The memory
// (mesh_memory.h) and step time (mesh_step_time.h) of a candidate follow
// from it and the descriptions.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "runtime/cluster_plan/transformer_shape.h"
#include "runtime/config/offload_config.h"

namespace zeroshard {

/// See the file comment. Plain value.
struct MeshPlan {
  int dp = 1;                      ///< data-parallel ranks (the ZeRO group)
  int tp = 1;                      ///< tensor-parallel ranks, inside one node, with sequence parallelism
  int pp = 1;                      ///< pipeline stages (1F1B)
  int stage = 0;                   ///< ZeRO stage 0-3
  OffloadDevice offload_optimizer = OffloadDevice::none;
  OffloadDevice offload_param = OffloadDevice::none;  ///< stage 3 only
  std::int64_t micro_batch = 1;    ///< sequences per micro-batch on each dp rank
  std::int64_t micro_batches = 1;  ///< micro-batches per optimizer step on each dp rank (the pipeline's m)
  Recompute recompute = Recompute::none;
  bool flash_attention = true;     ///< a fused attention that keeps no s x s scores
  DType dtype = DType::bf16;       ///< compute dtype (bf16 or f16; master weights and AdamW states fp32)

  /// Accelerators the plan uses: dp x tp x pp.
  int accelerators() const { return dp * tp * pp; }
  /// Sequences per optimizer step over the whole mesh.
  std::int64_t global_batch() const { return static_cast<std::int64_t>(dp) * micro_batch * micro_batches; }
  /// One line, e.g. "dp 8 tp 8 pp 1, ZeRO 1, offload none/none, micro-batch 1 x 16, recompute selective".
  std::string describe() const;
};

/// The constants of the planner's models that no description states.
/// Plain value; the defaults are the planner's fitted values
/// (bench/plan/README.md says on which published runs).
struct PlanConstants {
  /// Achieved over peak FLOP/s of the accelerator in the layers' matrix
  /// products (the MFU a plan without communication or bubble would reach).
  double compute_efficiency = 0.5;
  /// Achieved over described bandwidth of a link in a collective.
  double link_efficiency = 0.8;
  /// Device bytes beyond model states and activations: the CUDA context,
  /// NCCL's buffers and the allocator's fragmentation.
  double device_overhead_bytes = 2.0 * 1024 * 1024 * 1024;
  /// Parameters a second the host's CPU AdamW updates for each
  /// accelerator of its node (ZeRO-Offload's optimizer step).
  double host_optimizer_params_per_s = 1e9;
};

}  // namespace zeroshard
