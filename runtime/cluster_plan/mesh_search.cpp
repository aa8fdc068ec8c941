// The cluster planner's search: see runtime/cluster_plan/mesh_search.h.
#include "runtime/cluster_plan/mesh_search.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

// Why a candidate does not fit ("" when it does).
std::string over_budget(const MeshCandidate& c, const ClusterDescription& cluster) {
  std::string why;
  if (c.memory.device() > cluster.memory_bytes) {
    why = fmt::format("device needs {} of {} ({} over: model states {}, activations {}, overhead {})",
                      gib(c.memory.device()), gib(cluster.memory_bytes), gib(c.memory.device() - cluster.memory_bytes),
                      gib(c.memory.model_states), gib(c.memory.activations), gib(c.memory.overhead));
  }
  if (c.memory.host_per_node > cluster.host_memory_bytes) {
    why += fmt::format("{}host needs {} per node of {} ({} over)", why.empty() ? "" : "; ", gib(c.memory.host_per_node),
                       gib(cluster.host_memory_bytes), gib(c.memory.host_per_node - cluster.host_memory_bytes));
  }
  return why;
}

bool divides(std::int64_t n, int d) { return d >= 1 && n % d == 0; }

}  // namespace

MeshSearchResult search_mesh_plans(const MeshSearchRequest& r) {
  if (r.global_batch < 1) {
    throw ConfigError(fmt::format("{}: the global batch must be >= 1 sequences, got {}", r.source, r.global_batch));
  }
  for (std::int64_t mb : r.micro_batches) {
    if (mb < 1) throw ConfigError(fmt::format("{}: a micro-batch must be >= 1, got {}", r.source, mb));
  }
  r.model.validate(r.source);
  const TransformerShape t = r.model.resolved();
  const ClusterDescription& c = r.cluster;
  const DType dtype = r.dtype.value_or(c.peak_flops_bf16 > 0 ? DType::bf16 : DType::f16);
  c.checked_peak_flops(dtype, r.source);
  const int total = c.accelerators(), per_node = c.accelerators_per_node;
  const bool nvme = c.nvme_read_bandwidth > 0;
  struct Offload {
    OffloadDevice optimizer, param;
  };
  std::vector<Offload> offloads = {{OffloadDevice::none, OffloadDevice::none}, {OffloadDevice::cpu, OffloadDevice::none},
                                   {OffloadDevice::cpu, OffloadDevice::cpu}};
  if (nvme) {
    offloads.push_back({OffloadDevice::nvme, OffloadDevice::none});
    offloads.push_back({OffloadDevice::nvme, OffloadDevice::nvme});
  }
  MeshMemoryCache cache;
  MeshSearchResult out;
  for (int tp = 1; tp <= per_node; ++tp) {
    if (!divides(per_node, tp) || !divides(t.heads, tp) || !divides(t.kv_heads, tp) || !divides(t.ffn, tp) ||
        !divides(t.vocab, tp)) {
      continue;
    }
    for (int pp = 1; pp <= t.layers && tp * pp <= total; ++pp) {
      if (!divides(t.layers, pp) || !divides(total, tp * pp)) continue;
      const int dp = total / (tp * pp);
      for (int stage = 0; stage <= 3; ++stage) {
        for (const Offload& o : offloads) {
          if ((o.optimizer != OffloadDevice::none && stage == 0) || (o.param != OffloadDevice::none && stage != 3)) {
            continue;
          }
          for (std::int64_t mb : r.micro_batches) {
            if (r.global_batch % (static_cast<std::int64_t>(dp) * mb) != 0) continue;
            const std::int64_t m = r.global_batch / (dp * mb);
            if (m < pp) continue;  // 1F1B fills its pipeline with m >= p micro-batches
            for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::op, Recompute::full}) {
              MeshCandidate cand;
              cand.plan = MeshPlan{.dp = dp, .tp = tp, .pp = pp, .stage = stage, .offload_optimizer = o.optimizer,
                                   .offload_param = o.param, .micro_batch = mb, .micro_batches = m, .recompute = rc,
                                   .flash_attention = true, .dtype = dtype};
              cand.memory = mesh_memory(t, cand.plan, c, r.constants, r.source, &cache);
              cand.time = mesh_step_time(t, cand.plan, c, r.constants, r.source);
              cand.tokens_per_s = mesh_tokens_per_second(t, cand.plan, cand.time);
              cand.mfu = mesh_mfu(t, cand.plan, c, cand.time);
              cand.rejected = over_budget(cand, c);
              (cand.rejected.empty() ? out.fits : out.rejected).push_back(std::move(cand));
            }
          }
        }
      }
    }
  }
  const auto faster = [](const MeshCandidate& a, const MeshCandidate& b) {
    if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
    if (a.plan.tp * a.plan.pp != b.plan.tp * b.plan.pp) return a.plan.tp * a.plan.pp < b.plan.tp * b.plan.pp;
    return a.memory.device() < b.memory.device();
  };
  std::stable_sort(out.fits.begin(), out.fits.end(), faster);
  std::stable_sort(out.rejected.begin(), out.rejected.end(), faster);
  return out;
}

}  // namespace zeroshard
