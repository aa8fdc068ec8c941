// The memory of a mesh plan: see runtime/cluster_plan/mesh_memory.h.
#include "runtime/cluster_plan/mesh_memory.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "runtime/plan/memory_estimate.h"

namespace zeroshard {

std::string MeshPlan::describe() const {
  return fmt::format("dp {} tp {} pp {}, ZeRO {}, offload {}/{}, micro-batch {} x {}, recompute {}", dp, tp, pp, stage,
                     offload_device_name(offload_optimizer), offload_device_name(offload_param), micro_batch,
                     micro_batches, recompute_name(recompute));
}

EngineConfig mesh_engine_config(const MeshPlan& plan, std::int64_t largest_unit) {
  EngineConfig c;
  c.zero.stage = plan.stage;
  c.compute_dtype = plan.dtype;
  c.optimizer.kind = OptimizerKind::adamw;
  c.train_micro_batch_size_per_gpu = plan.micro_batch;
  c.gradient_accumulation_steps = plan.micro_batches;
  c.offload.optimizer.device = plan.offload_optimizer;
  c.offload.param.device = plan.offload_param;
  // EngineConfig requires a path with nvme; the estimate opens no file and checks no free space.
  c.offload.optimizer.nvme_path = c.offload.param.nvme_path = "/nvme";
  c.offload.param.buffer_size = std::max<std::int64_t>(c.offload.param.buffer_size, largest_unit);
  return c;
}

MeshMemory mesh_memory(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                       const PlanConstants& constants, const std::string& source, MeshMemoryCache* cache) {
  const TransformerShape t = model.resolved();
  const int p = plan.pp;
  // Stages of different shape: the first, one in the middle (the most
  // micro-batches in flight of the middle ones), the last.
  std::vector<int> stages = {0};
  if (p > 2) stages.push_back(1);
  if (p > 1) stages.push_back(p - 1);
  MeshMemory worst;
  bool first = true;
  const double layer = t.layer_activation_bytes(plan.micro_batch, plan.tp, plan.tp > 1, plan.recompute,
                                                plan.flash_attention);
  const double per_stage_layers = static_cast<double>(t.layers / p);
  for (int r : stages) {
    const auto estimate = [&] {
      const ModelDescription rank = t.rank_model(plan.tp, p, r, source);
      std::int64_t largest = 0;
      for (const UnitDescription& u : rank.units) {
        std::int64_t n = 0;
        for (const ParamDescription& q : u.params) {
          std::int64_t e = 1;
          for (std::int64_t d : q.shape) e *= d;
          n += e;
        }
        largest = std::max(largest, n);
      }
      const EngineConfig config = mesh_engine_config(plan, largest);
      StageModelStates out;
      for (int dp_rank : {0, plan.dp - 1}) {
        const MemoryEstimate e = estimate_memory(rank, config, plan.dp, dp_rank);
        out.device = std::max(out.device, static_cast<double>(e.after_step.peak_total(MemTier::device)));
        out.host = std::max(out.host, static_cast<double>(e.after_step.peak_total(MemTier::host)));
      }
      return out;
    };
    // Middle stages have the same shape (their units differ in names only).
    const std::string key = fmt::format("{} {} {} {} {} {} {} {} {} {}", plan.tp, p, r == 0, r == p - 1, plan.dp,
                                        plan.stage, static_cast<int>(plan.offload_optimizer),
                                        static_cast<int>(plan.offload_param), plan.micro_batches > 1,
                                        static_cast<int>(plan.dtype));
    const StageModelStates states = cache != nullptr ? cache->get(key, estimate) : estimate();
    const double device = states.device, host = states.host;
    const double in_flight = p == 1 ? 1.0 : static_cast<double>(std::min<std::int64_t>(p - r, plan.micro_batches));
    const double sbh = static_cast<double>(t.seq) * static_cast<double>(plan.micro_batch) * static_cast<double>(t.hidden);
    double activations = in_flight * per_stage_layers * layer;
    if (r == 0) activations += in_flight * 2.0 * sbh / plan.tp;
    if (r == p - 1) activations += t.logits(plan.micro_batch, plan.tp) * constants.loss_bytes_per_logit;
    MeshMemory m{.model_states = device, .activations = activations, .overhead = constants.device_overhead_bytes,
                 .host_per_node = host * cluster.accelerators_per_node, .worst_stage = r};
    if (first || m.device() > worst.device()) worst = m;
    worst.host_per_node = std::max(worst.host_per_node, m.host_per_node);
    first = false;
  }
  return worst;
}

}  // namespace zeroshard
