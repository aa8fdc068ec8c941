// zs_plan's cluster plan report: see tools/plan/cluster_report.h.
#include "tools/plan/cluster_report.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace zeroshard::tools {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string duration(double seconds) {
  if (seconds >= 2 * 86400) return fmt::format("{:.1f} days", seconds / 86400);
  if (seconds >= 2 * 3600) return fmt::format("{:.1f} h", seconds / 3600);
  return fmt::format("{:.1f} min", seconds / 60);
}

std::string row(int index, const MeshCandidate& c, const MeshSearchRequest& r, std::optional<double> tokens) {
  const MeshPlan& p = c.plan;
  std::string line = fmt::format("{:>3}  {:>3} {:>2} {:>2}  {:>4}  {:>4}/{:<4}  {:>2} x {:<4} {:<9} {:>7.1f} {:>7.0f} {:>8.3f} {:>10.0f} {:>5.1f}%",
                                 index, p.dp, p.tp, p.pp, p.stage, offload_device_name(p.offload_optimizer),
                                 offload_device_name(p.offload_param), p.micro_batch, p.micro_batches,
                                 recompute_name(p.recompute), c.memory.device() / kGiB, c.memory.host_per_node / kGiB,
                                 c.time.total(), c.tokens_per_s, 100 * c.mfu);
  if (tokens) {
    const double seconds = *tokens / c.tokens_per_s;
    line += fmt::format("  {:>10}", duration(seconds));
    if (r.cluster.price_per_accelerator_hour) {
      line += fmt::format("  {:>10.0f}", seconds / 3600 * r.cluster.accelerators() * *r.cluster.price_per_accelerator_hour);
    }
  }
  return line + "\n";
}

std::string header(const MeshSearchRequest& r, std::optional<double> tokens) {
  std::string h = fmt::format("{:>3}  {:>3} {:>2} {:>2}  {:>4}  {:>9}  {:<9} {:<9} {:>7} {:>7} {:>8} {:>10} {:>6}", "#",
                              "dp", "tp", "pp", "ZeRO", "offload", "mb x m", "recompute", "dev GiB", "host/n", "step s",
                              "tokens/s", "MFU");
  if (tokens) h += fmt::format("  {:>10}", "to train");
  if (tokens && r.cluster.price_per_accelerator_hour) h += fmt::format("  {:>10}", "cost");
  return h + "\n";
}

}  // namespace

std::string cluster_plan_text(const MeshSearchRequest& r, const MeshSearchResult& res, std::optional<double> tokens,
                              int top) {
  const TransformerShape t = r.model.resolved();
  const ClusterDescription& c = r.cluster;
  std::string out = fmt::format(
      "model: {} layers, hidden {}, {} heads ({} kv), seq {}, vocab {}, ffn {}: {:.3f}B parameters, {:.3g} training "
      "FLOPs per token\n",
      t.layers, t.hidden, t.heads, t.kv_heads, t.seq, t.vocab, t.ffn, static_cast<double>(t.parameter_count()) / 1e9,
      t.model_flops_per_token());
  out += fmt::format("cluster: {}: {} x {} {} ({:.0f} GiB, {:.0f} TFLOP/s bf16), {} {:.0f} GB/s, {} {:.1f} GB/s per "
                     "accelerator\n",
                     c.name, c.nodes, c.accelerators_per_node, c.accelerator, c.memory_bytes / kGiB,
                     c.peak_flops_bf16 / 1e12, c.intra_node.kind, c.intra_node.bandwidth_bytes_per_s / 1e9,
                     c.inter_node.kind, c.inter_node.bandwidth_bytes_per_s / 1e9);
  out += fmt::format("global batch {} sequences ({} tokens); constants: compute efficiency {:.3f}, link efficiency "
                     "{:.2f}, device overhead {:.1f} GiB\n",
                     r.global_batch, r.global_batch * t.seq, r.constants.compute_efficiency,
                     r.constants.link_efficiency, r.constants.device_overhead_bytes / kGiB);
  out += fmt::format("{} plans fit, {} do not\n\n", res.fits.size(), res.rejected.size());
  if (!res.fits.empty()) {
    out += header(r, tokens);
    for (int i = 0; i < std::min<int>(top, static_cast<int>(res.fits.size())); ++i) out += row(i + 1, res.fits[i], r, tokens);
    const MeshCandidate& best = res.fits.front();
    const MeshStepTime& s = best.time;
    out += fmt::format(
        "\nwhy #1: its step of {:.3f} s is compute {:.3f} s, pipeline bubble {:.3f} s, tensor-parallel {:.3f} s, "
        "pipeline transfers {:.3f} s, ZeRO collectives {:.3f} s of which {:.3f} s not hidden, offload {:.3f} s; "
        "{:.1f} of {:.1f} GiB on the device (model states {:.1f}, activations {:.1f})\n",
        s.total(), s.compute, s.bubble, s.tp_comm, s.pp_comm, s.dp_comm, s.dp_exposed, s.offload,
        best.memory.device() / kGiB, c.memory_bytes / kGiB, best.memory.model_states / kGiB,
        best.memory.activations / kGiB);
  } else {
    out += "nothing fits\n";
  }
  // With fits: the rejected plans predicted faster than the first. Without:
  // the smallest device footprints.
  std::vector<const MeshCandidate*> list;
  for (const MeshCandidate& x : res.rejected) list.push_back(&x);
  if (res.fits.empty()) {
    std::stable_sort(list.begin(), list.end(),
                     [](const MeshCandidate* a, const MeshCandidate* b) { return a->memory.device() < b->memory.device(); });
  }
  const double bar = res.fits.empty() ? 0 : res.fits.front().tokens_per_s;
  std::string rejected;
  int shown = 0;
  for (const MeshCandidate* p : list) {
    const MeshCandidate& x = *p;
    if (shown == top || x.tokens_per_s <= bar) break;
    rejected += fmt::format("  {} ({:.0f} tokens/s): {}\n", x.plan.describe(), x.tokens_per_s, x.rejected);
    ++shown;
  }
  if (!rejected.empty()) out += fmt::format("\n{}:\n{}", res.fits.empty() ? "closest, rejected" : "faster, but rejected", rejected);
  return out;
}

}  // namespace zeroshard::tools
