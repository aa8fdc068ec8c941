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
/// Plain value. The defaults are fitted by bench/plan/bench_published on
/// the published runs marked "fit" in bench/plan/published.json
/// (Megatron-LM, Narayanan et al. 2021, DeepSpeed, torchtitan, llm.c; the
/// figures in bench/plan/README.md); a cluster description may carry its
/// accelerator's fitted compute efficiency (ClusterDescription).
struct PlanConstants {
  /// Achieved over peak FLOP/s of the accelerator in the layers' matrix
  /// products (the MFU a plan without communication or bubble would
  /// reach). Fitted per part: 0.565 H100 SXM 80GB, 0.465 A100 SXM 80GB,
  /// 0.46 V100, 0.36 H100 96GB at 500 W; 0.5 where the cluster gives none.
  double compute_efficiency = 0.5;
  /// Achieved over described bandwidth of a link in a collective (fitted: 1.0).
  double link_efficiency = 1.0;
  /// The tensor-parallel collectives hide behind up to this fraction of
  /// the compute time (Megatron-Core's --tp-comm-overlap runs them beside
  /// the GEMMs; 0: none, as zeroshard's parallel/ layers do). Fitted.
  double tp_comm_overlap = 0.3;
  /// Device bytes a logit of the last micro-batch holds at the loss's
  /// backward, when every layer's activations are still kept (the step's
  /// peak): 12, PyTorch's cross_entropy on logits upcast to fp32 (the
  /// log-softmax output it keeps, its gradient, and the gradient of its
  /// input, 4 bytes each; the 16-bit logits themselves are freed before
  /// the backward, as torchtitan's train step does). A fused
  /// vocabulary-parallel cross-entropy (Megatron-LM) holds less.
  double loss_bytes_per_logit = 12.0;
  /// Device bytes beyond model states and activations: the CUDA context,
  /// NCCL's buffers and the allocator's fragmentation.
  double device_overhead_bytes = 2.0 * 1024 * 1024 * 1024;
  /// Parameters a second a node's CPUs update with AdamW (ZeRO-Offload's
  /// optimizer step), shared by the node's accelerators: AdamW reads and
  /// writes about 28 bytes per parameter (fp32 weight, gradient, two
  /// states), so a two-socket node's ~200 GB/s of memory bandwidth gives
  /// about 7e9.
  double host_optimizer_params_per_s = 7e9;
};

}  // namespace zeroshard
