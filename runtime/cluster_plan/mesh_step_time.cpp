// The step time of a mesh plan: see runtime/cluster_plan/mesh_step_time.h.
#include "runtime/cluster_plan/mesh_step_time.h"

#include <algorithm>
#include <numeric>

#include "runtime/cluster_plan/collective_time.h"

namespace zeroshard {

namespace {

double parameters_of(const ModelDescription& m) { return static_cast<double>(m.parameter_count()); }

}  // namespace

MeshStepTime mesh_step_time(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                            const PlanConstants& k, const std::string& source) {
  const TransformerShape t = model.resolved();
  const double peak = cluster.checked_peak_flops(plan.dtype, source);
  const double s = static_cast<double>(t.seq), b = static_cast<double>(plan.micro_batch),
               h = static_cast<double>(t.hidden), m = static_cast<double>(plan.micro_batches);
  const int per_node = cluster.accelerators_per_node;
  const double bw = k.link_efficiency;
  MeshStepTime out;

  const double tokens = b * m * s;
  out.compute = tokens * t.hardware_flops_per_token(plan.recompute) / (plan.tp * plan.pp) /
                (peak * k.compute_efficiency);
  out.bubble = out.compute * (plan.pp - 1) / m;

  const double act = 2.0 * s * b * h;  // one micro-batch's activations, bytes
  const double layers = static_cast<double>(t.layers / plan.pp);
  if (plan.tp > 1) {
    const double per_layer = plan.recompute == Recompute::full ? 6.0 : 4.0;
    const double all = m * layers * per_layer * all_reduce_seconds(act, {plan.tp, plan.tp}, cluster) / bw;
    out.tp_comm = std::max(0.0, all - k.tp_comm_overlap * out.compute);  // hidden only behind GEMMs that long
  }
  if (plan.pp > 1) {
    const bool across = plan.tp * plan.dp >= per_node;
    out.pp_comm = 2.0 * (m + plan.pp - 1) * point_to_point_seconds(act / plan.tp, across, cluster) / bw;
  }

  // The rank's parameters: the larger of the first and the last stage's.
  const double n = std::max(parameters_of(t.rank_model(plan.tp, plan.pp, 0, source)),
                            parameters_of(t.rank_model(plan.tp, plan.pp, plan.pp - 1, source)));
  const GroupPlacement dp{plan.dp, std::gcd(plan.dp, std::max(1, per_node / plan.tp))};
  const double grads = 4.0 * n, params = 2.0 * n;
  const double micro = out.compute / m, backward = micro * 2.0 / 3.0;
  const auto exposed = [](double comm, double window) { return std::max(0.0, comm - window); };
  switch (plan.stage) {
    case 0: {
      const double ar = all_reduce_seconds(grads, dp, cluster) / bw;
      out.dp_comm = ar;
      out.dp_exposed = exposed(ar, backward);
      break;
    }
    case 1:
    case 2: {
      const double rs = reduce_scatter_seconds(grads, dp, cluster) / bw, ag = all_gather_seconds(params, dp, cluster) / bw;
      const double times = plan.stage == 2 ? m : 1.0;
      out.dp_comm = times * rs + ag;
      out.dp_exposed = times * exposed(rs, backward) + ag;
      break;
    }
    default: {
      const double per_micro = 2.0 * all_gather_seconds(params, dp, cluster) / bw + reduce_scatter_seconds(grads, dp, cluster) / bw;
      out.dp_comm = m * per_micro;
      out.dp_exposed = m * exposed(per_micro, micro);
      break;
    }
  }

  const double shard = n / plan.dp;  // elements of the rank's optimizer shard
  if (plan.offload_optimizer != OffloadDevice::none) {
    out.offload += (4.0 + 2.0) * shard / cluster.host_device_bandwidth + shard * per_node / k.host_optimizer_params_per_s;
    if (plan.offload_optimizer == OffloadDevice::nvme) {
      out.offload += 12.0 * shard * per_node * (1.0 / cluster.nvme_read_bandwidth + 1.0 / cluster.nvme_write_bandwidth);
    }
  }
  if (plan.offload_param != OffloadDevice::none) {
    const double fetch = 2.0 * m * 2.0 * shard;  // bytes: forward and backward, each micro-batch
    out.offload += fetch / cluster.host_device_bandwidth;
    if (plan.offload_param == OffloadDevice::nvme) out.offload += fetch * per_node / cluster.nvme_read_bandwidth;
  }
  return out;
}

double mesh_tokens_per_second(const TransformerShape& model, const MeshPlan& plan, const MeshStepTime& t) {
  return static_cast<double>(plan.global_batch()) * static_cast<double>(model.seq) / t.total();
}

double mesh_mfu(const TransformerShape& model, const MeshPlan& plan, const ClusterDescription& cluster,
                const MeshStepTime& t) {
  return model.model_flops_per_token() * mesh_tokens_per_second(model, plan, t) /
         (plan.accelerators() * cluster.peak_flops(plan.dtype));
}

}  // namespace zeroshard
