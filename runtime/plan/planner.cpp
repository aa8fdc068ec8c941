#include "runtime/plan/planner.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "runtime/config/config.h"
#include "runtime/plan/memory_estimate.h"

namespace zeroshard {
namespace {

constexpr std::array<MemTier, 3> kTiers = {MemTier::device, MemTier::host, MemTier::nvme};

struct Shape {
  int stage = 0;
  OffloadDevice optimizer = OffloadDevice::none, param = OffloadDevice::none;
  std::int64_t sub_group = 0;  ///< 0: the base config's
  int buffers = 0;             ///< 0: the base config's
  std::int64_t micro = 1, accumulation = 1;
  std::int64_t bucket = 0;     ///< reduce/allgather_bucket_size; 0: the base config's
  int zeropp = 0;              ///< ZeRO++: kQwz | kHpz | kQgz
};

constexpr int kQwz = 1, kHpz = 2, kQgz = 4;

// ZeRO++'s variants of a stage across hosts (see [Note: planner]).
std::vector<int> zeropp_variants(const PlanRequest& r, int stage) {
  const bool hosts = r.ranks_per_node > 0 && r.ranks_per_node < r.world_size;
  if (!hosts || stage < 2) return {0};
  if (stage == 2) return {0, kQgz};
  return {0, kQwz, kHpz, kQgz, kQwz | kHpz | kQgz};
}

std::vector<Shape> shapes(const PlanRequest& r, const std::vector<std::int64_t>& micros) {
  const bool nvme = !r.nvme_path.empty() && r.budget.nvme > 0;
  std::vector<OffloadDevice> tiers = {OffloadDevice::none, OffloadDevice::cpu};
  if (nvme) tiers.push_back(OffloadDevice::nvme);
  std::vector<Shape> out;
  for (std::int64_t m : micros) {
    std::int64_t a = 1;
    if (r.global_batch) {
      const std::int64_t per_step = m * r.world_size;
      if (*r.global_batch % per_step != 0) continue;
      a = *r.global_batch / per_step;
    }
    for (int stage = 0; stage <= 3; ++stage) {
      for (OffloadDevice opt : tiers) {
        if (stage == 0 && opt != OffloadDevice::none) continue;
        for (OffloadDevice param : tiers) {
          if (stage != 3 && param != OffloadDevice::none) continue;
          for (std::int64_t bucket : {std::int64_t{0}, std::int64_t{50'000'000}, std::int64_t{5'000'000}}) {
            for (int zpp : zeropp_variants(r, stage)) {
              if (opt == OffloadDevice::nvme) {
                for (std::int64_t sg : {std::int64_t{1'000'000'000}, std::int64_t{100'000'000}}) {
                  for (int b : {4, 2}) out.push_back({stage, opt, param, sg, b, m, a, bucket, zpp});
                }
              } else {
                out.push_back({stage, opt, param, 0, 0, m, a, bucket, zpp});
              }
            }
          }
        }
      }
    }
  }
  return out;
}

nlohmann::json rewrite(const PlanRequest& r, const Shape& s) {
  nlohmann::json j = r.base_config;
  if (!j.is_object()) j = nlohmann::json::object();
  nlohmann::json& z = j["zero_optimization"];
  if (!z.is_object()) z = nlohmann::json::object();
  z["stage"] = s.stage;
  // The base's offload sections keep their other keys (max_in_cpu, pin_memory, ...).
  auto offload = [&](const char* key, OffloadDevice d, bool buffers) {
    nlohmann::json& o = z[key];
    if (!o.is_object()) o = nlohmann::json::object();
    o["device"] = offload_device_name(d);
    if (d == OffloadDevice::nvme) {
      o["nvme_path"] = r.nvme_path;
      if (buffers) o["buffer_count"] = s.buffers;
    }
  };
  offload("offload_optimizer", s.optimizer, true);
  offload("offload_param", s.param, false);
  if (s.sub_group != 0) z["sub_group_size"] = s.sub_group;
  if (s.bucket != 0) {
    z["reduce_bucket_size"] = s.bucket;
    z["allgather_bucket_size"] = s.bucket;
  }
  if (s.zeropp & kQwz) z["zero_quantized_weights"] = true;
  if (s.zeropp & kHpz) z["zero_hpz_partition_size"] = r.ranks_per_node;
  if (s.zeropp & kQgz) z["zero_quantized_gradients"] = true;
  j["train_micro_batch_size_per_gpu"] = s.micro;
  j["gradient_accumulation_steps"] = s.accumulation;
  j.erase("train_batch_size");
  if (r.global_batch) j["train_batch_size"] = *r.global_batch;
  return j;
}

std::string label(const Shape& s) {
  std::string l = fmt::format("stage {}", s.stage);
  if (s.stage > 0) l += fmt::format(", optimizer {}", offload_device_name(s.optimizer));
  if (s.stage == 3) l += fmt::format(", param {}", offload_device_name(s.param));
  if (s.sub_group != 0) l += fmt::format(", sub_group {:.0e}, buffers {}", static_cast<double>(s.sub_group), s.buffers);
  if (s.bucket != 0) l += fmt::format(", buckets {:.0e}", static_cast<double>(s.bucket));
  if (s.zeropp != 0) {
    std::vector<std::string> names;
    for (const auto& [bit, name] : {std::pair{kQwz, "qwZ"}, std::pair{kHpz, "hpZ"}, std::pair{kQgz, "qgZ"}}) {
      if (s.zeropp & bit) names.emplace_back(name);
    }
    l += fmt::format(", {}", fmt::join(names, "+"));
  }
  return l + fmt::format(", micro-batch {} x {}", s.micro, s.accumulation);
}

std::uint64_t budget_of(const PlanBudget& b, MemTier t) {
  return t == MemTier::device ? b.device : t == MemTier::host ? b.host : b.nvme;
}

std::string tier_list(const std::array<std::uint64_t, 3>& bytes) {
  return fmt::format("device {}, host {}, nvme {}", format_bytes(bytes[0]), format_bytes(bytes[1]),
                     format_bytes(bytes[2]));
}

}  // namespace

Plan make_plan(const PlanRequest& r) {
  if (r.world_size < 1) throw ConfigError(fmt::format("plan: world size {} is not positive", r.world_size));
  std::vector<std::int64_t> micros = r.micro_batches;
  for (std::int64_t m : micros) {
    if (m < 1) throw ConfigError(fmt::format("plan: micro-batch {} is not positive", m));
  }
  if (r.global_batch && *r.global_batch < 1) {
    throw ConfigError(fmt::format("plan: global batch {} is not positive", *r.global_batch));
  }
  ConfigOptions options;
  options.world_size = r.world_size;
  // The base config must load as given (its batch keys aside); its
  // micro-batch is the candidate when none is given.
  nlohmann::json base = r.base_config.is_object() ? r.base_config : nlohmann::json::object();
  base.erase("train_batch_size");
  const EngineConfig base_config = EngineConfig::from_json(base, "the base ds_config", {});
  if (micros.empty()) micros.push_back(base_config.train_micro_batch_size_per_gpu);
  if (base_config.parameter_server.enabled()) {
    throw ConfigError(
        "plan: the base ds_config has \"parameter_server.servers\": the planner plans jobs whose ranks all train; "
        "zs_plan without --budget-* gives a parameter-server job's bytes per worker and server");
  }
  const FlatLayout layout = r.model.layout(r.world_size);
  Plan plan;
  plan.ranked_by_time = r.rates.has_value();
  for (const Shape& s : shapes(r, micros)) {
    PlanCandidate c;
    c.label = label(s);
    c.ds_config = rewrite(r, s);
    c.stage = s.stage;
    c.offload_optimizer = s.optimizer;
    c.offload_param = s.param;
    c.micro_batch = s.micro;
    c.accumulation = s.accumulation;
    c.quantized_weights = (s.zeropp & kQwz) != 0;
    c.hpz_partition_size = (s.zeropp & kHpz) != 0 ? r.ranks_per_node : 1;
    c.quantized_gradients = (s.zeropp & kQgz) != 0;
    EngineConfig config;
    try {
      config = EngineConfig::from_json(c.ds_config, "plan candidate", options);
      config.validate_for_world(r.world_size);
    } catch (const ConfigError&) {
      continue;  // a combination the engine does not run
    }
    // Rank 0 and the last rank: shards are equal in size, the last ranks'
    // hold the padding; the one with more bytes (the last on a tie). Each
    // tier's bytes are its peak in the ledger after one step.
    std::array<std::uint64_t, 3> best{};
    for (int rank = 0; rank < r.world_size; rank = std::max(rank + 1, r.world_size - 1)) {
      const MemoryEstimate e = estimate_memory(layout, config, rank, r.ranks_per_node);
      std::array<std::uint64_t, 3> b{};
      for (std::size_t t = 0; t < kTiers.size(); ++t) b[t] = e.after_step.peak_total(kTiers[t]);
      if (rank == 0 || b[0] + b[1] + b[2] >= best[0] + best[1] + best[2]) {
        best = b;
        c.rank = rank;
      }
    }
    c.activation_bytes = r.activation_bytes_per_sample * static_cast<std::uint64_t>(s.micro);
    best[0] += c.activation_bytes;
    c.bytes = best;
    for (std::size_t t = 0; t < kTiers.size(); ++t) {
      const std::uint64_t limit = budget_of(r.budget, kTiers[t]);
      if (c.bytes[t] > limit) {
        if (!c.rejection.empty()) c.rejection += "; ";
        c.rejection += fmt::format("{} needs {}, budget {} ({} over)", mem_tier_name(kTiers[t]),
                                   format_bytes(c.bytes[t]), format_bytes(limit), format_bytes(c.bytes[t] - limit));
      }
    }
    c.fits = c.rejection.empty();
    if (r.rates) {
      MachineRates rates = *r.rates;
      if (r.ranks_per_node > 0) rates.ranks_per_node = r.ranks_per_node;
      c.cost = predict_step(layout, config, c.rank, rates, r.loop_seconds_per_sample * static_cast<double>(s.micro));
      c.seconds_per_sample = c.cost->step() / static_cast<double>(s.micro * s.accumulation * r.world_size);
    }
    // A sub-group / buffer-count / bucket variant that changes neither the
    // bytes nor the predicted time is listed once (the first: the base
    // config's or DeepSpeed's defaults).
    auto& list = c.fits ? plan.fits : plan.rejected;
    const auto same = [&](const PlanCandidate& o) {
      return o.stage == c.stage && o.offload_optimizer == c.offload_optimizer && o.offload_param == c.offload_param &&
             o.quantized_weights == c.quantized_weights && o.hpz_partition_size == c.hpz_partition_size &&
             o.quantized_gradients == c.quantized_gradients && o.micro_batch == c.micro_batch && o.bytes == c.bytes &&
             o.seconds_per_sample == c.seconds_per_sample;
    };
    const bool same_as_earlier = (s.sub_group != 0 || s.bucket != 0) && std::any_of(list.begin(), list.end(), same);
    if (!same_as_earlier) list.push_back(std::move(c));
  }
  std::stable_sort(plan.fits.begin(), plan.fits.end(), [&](const PlanCandidate& a, const PlanCandidate& b) {
    if (plan.ranked_by_time && a.seconds_per_sample != b.seconds_per_sample) {
      return a.seconds_per_sample < b.seconds_per_sample;
    }
    return a.bytes[0] < b.bytes[0];
  });
  if (plan.fits.empty()) {
    const PlanCandidate* smallest = nullptr;
    for (const PlanCandidate& c : plan.rejected) {
      if (smallest == nullptr || c.bytes[0] + c.bytes[1] < smallest->bytes[0] + smallest->bytes[1]) smallest = &c;
    }
    plan.nothing_fits =
        smallest == nullptr
            ? "no configuration of the engine applies to this request"
            : fmt::format("nothing fits: the smallest footprint in memory (device + host) is {} ({}: {}); {}",
                          format_bytes(smallest->bytes[0] + smallest->bytes[1]), smallest->label,
                          tier_list(smallest->bytes), smallest->rejection);
  }
  return plan;
}

std::string plan_text(const PlanRequest& r, const Plan& plan) {
  std::string out = fmt::format("budget per rank: device {}, host {}, nvme {}; world size {}", format_bytes(r.budget.device),
                                format_bytes(r.budget.host), format_bytes(r.budget.nvme), r.world_size);
  if (r.ranks_per_node > 0 && r.ranks_per_node < r.world_size) {
    out += fmt::format(" on hosts of {} ranks", r.ranks_per_node);
    if (r.rates && r.rates->link_bandwidth > 0) {
      out += fmt::format(" (link {:.0f} Mbit/s)", r.rates->link_bandwidth * 8 / 1e6);
    }
  }
  if (r.activation_bytes_per_sample > 0) {
    out += fmt::format("; activations {} per sample", format_bytes(r.activation_bytes_per_sample));
  }
  out += "\n";
  out += plan.ranked_by_time
             ? fmt::format("fits, fastest first (predicted with the calibration, loop {:.3f} ms per sample):\n",
                           r.loop_seconds_per_sample * 1e3)
             : "fits, smallest device footprint first (no calibration given: not ranked by time):\n";
  for (const PlanCandidate& c : plan.fits) {
    out += fmt::format("  {:<74} {}", c.label, tier_list(c.bytes));
    if (c.cost) {
      out += fmt::format(" | step {:.1f} ms (optimizer {:.1f}, comm exposed {:.1f}, swap exposed {:.1f}), {:.3f} ms/sample",
                         c.cost->step() * 1e3, c.cost->optimizer * 1e3, c.cost->comm_exposed * 1e3,
                         c.cost->swap_exposed * 1e3, c.seconds_per_sample * 1e3);
      if (c.cost->cross_host_bytes > 0) {
        out += fmt::format(", {} between hosts per step", format_bytes(static_cast<std::uint64_t>(c.cost->cross_host_bytes)));
      }
    }
    out += "\n";
  }
  if (plan.fits.empty()) out += "  (none)\n";
  out += "rejected:\n";
  for (const PlanCandidate& c : plan.rejected) out += fmt::format("  {:<74} {}\n", c.label, c.rejection);
  if (plan.rejected.empty()) out += "  (none)\n";
  out += plan.chosen() != nullptr ? fmt::format("chosen: {}\n", plan.chosen()->label) : plan.nothing_fits + "\n";
  return out;
}

}  // namespace zeroshard
