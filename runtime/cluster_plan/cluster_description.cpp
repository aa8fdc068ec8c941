// ClusterDescription: see runtime/cluster_plan/cluster_description.h.
#include "runtime/cluster_plan/cluster_description.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

namespace {

using json = nlohmann::json;

constexpr double kGB = 1e9, kGiB = 1024.0 * 1024.0 * 1024.0, kTera = 1e12;

// One JSON object of the description: its keys read by name, checked
// against the known ones, each error naming the key's path.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, const std::string& source, std::set<std::string> known)
      : j_(j), path_(std::move(path)), source_(source) {
    if (!j_.is_object()) throw error(path_.empty() ? "the cluster description" : path_, "must be an object", j_);
    for (const auto& [key, value] : j_.items()) {
      if (known.count(key) == 0) {
        throw ConfigError(fmt::format("{}: unknown key \"{}\" (known: {})", source_, where(key), fmt::join(known, ", ")));
      }
    }
  }

  bool has(const std::string& key) const { return j_.contains(key); }
  const json& at(const std::string& key) const {
    if (!j_.contains(key)) throw ConfigError(fmt::format("{}: \"{}\" is missing", source_, where(key)));
    return j_.at(key);
  }
  std::string where(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  std::string text(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_string() || v.get<std::string>().empty()) throw error(where(key), "must be a nonempty string", v);
    return v.get<std::string>();
  }
  int count(const std::string& key) const {
    const json& v = at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 1'000'000) {
      throw error(where(key), "must be an integer from 1 to 1000000", v);
    }
    return v.get<int>();
  }
  // A number > 0 (positive) or >= 0, times `unit`.
  double number(const std::string& key, double unit, bool positive = true) const {
    const json& v = at(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
        (positive && v.get<double>() == 0)) {
      throw error(where(key), positive ? "must be a number > 0" : "must be a number >= 0", v);
    }
    return v.get<double>() * unit;
  }
  ObjectReader object(const std::string& key, std::set<std::string> known) const {
    return ObjectReader(at(key), where(key), source_, std::move(known));
  }

 private:
  ConfigError error(const std::string& key, const char* what, const json& v) const {
    return ConfigError(fmt::format("{}: \"{}\" {}, got {}", source_, key, what, brief(v)));
  }

  const json& j_;
  std::string path_;
  const std::string& source_;
};

LinkDescription read_link(const ObjectReader& r) {
  return LinkDescription{.kind = r.text("kind"), .bandwidth_bytes_per_s = r.number("bandwidth_GBps", kGB),
                         .latency_s = r.number("latency_us", 1e-6, false)};
}

}  // namespace

double ClusterDescription::peak_flops(DType dtype) const {
  switch (dtype) {
    case DType::bf16: return peak_flops_bf16;
    case DType::f16: return peak_flops_fp16;
    case DType::f32: return peak_flops_fp32;
    default: break;
  }
  throw InvariantError(fmt::format("cluster {}: no peak FLOP/s for dtype {}", name, dtype_name(dtype)));
}

double ClusterDescription::checked_peak_flops(DType dtype, const std::string& source) const {
  const double peak = peak_flops(dtype);
  if (peak <= 0) {
    throw ConfigError(fmt::format("{}: {} has no {} peak (accelerator.peak_TFLOPs.{} is 0); use another compute dtype",
                                  source, accelerator, dtype_name(dtype), dtype == DType::bf16 ? "bf16" : "fp16"));
  }
  return peak;
}

ClusterDescription ClusterDescription::from_json(std::string_view text, const std::string& source) {
  const json doc = parse_config_text(std::string(text), source);  // duplicate keys refused
  const ObjectReader top(doc, "", source,
                         {"name", "source", "notes", "nodes", "accelerators_per_node", "accelerator", "intra_node", "inter_node",
                          "host", "price_per_accelerator_hour", "compute_efficiency"});
  ClusterDescription c;
  c.name = top.text("name");
  if (top.has("notes")) c.notes = top.text("notes");
  const json& src = top.at("source");
  if (!src.is_array() || src.empty()) {
    throw ConfigError(fmt::format("{}: \"source\" must be a nonempty array of strings, got {}", source, brief(src)));
  }
  for (const json& s : src) {
    if (!s.is_string()) throw ConfigError(fmt::format("{}: \"source\" entries must be strings, got {}", source, brief(s)));
    c.sources.push_back(s.get<std::string>());
  }
  c.nodes = top.count("nodes");
  c.accelerators_per_node = top.count("accelerators_per_node");
  const ObjectReader acc = top.object("accelerator", {"name", "memory_GiB", "peak_TFLOPs", "memory_bandwidth_GBps"});
  c.accelerator = acc.text("name");
  c.memory_bytes = acc.number("memory_GiB", kGiB);
  const ObjectReader peak = acc.object("peak_TFLOPs", {"bf16", "fp16", "fp32"});
  c.peak_flops_bf16 = peak.number("bf16", kTera, false);  // 0: not supported (V100 has no bf16)
  c.peak_flops_fp16 = peak.number("fp16", kTera, false);
  c.peak_flops_fp32 = peak.number("fp32", kTera);
  c.memory_bandwidth = acc.number("memory_bandwidth_GBps", kGB);
  const std::set<std::string> link_keys = {"kind", "bandwidth_GBps", "latency_us"};
  c.intra_node = read_link(top.object("intra_node", link_keys));
  c.inter_node = read_link(top.object("inter_node", link_keys));
  const ObjectReader host =
      top.object("host", {"memory_GiB", "device_bandwidth_GBps", "nvme_read_GBps", "nvme_write_GBps"});
  c.host_memory_bytes = host.number("memory_GiB", kGiB);
  c.host_device_bandwidth = host.number("device_bandwidth_GBps", kGB);
  c.nvme_read_bandwidth = host.number("nvme_read_GBps", kGB, false);
  c.nvme_write_bandwidth = host.number("nvme_write_GBps", kGB, false);
  if ((c.nvme_read_bandwidth == 0) != (c.nvme_write_bandwidth == 0)) {
    throw ConfigError(fmt::format("{}: \"host.nvme_read_GBps\" and \"host.nvme_write_GBps\" must both be 0 (no NVMe) "
                                  "or both > 0",
                                  source));
  }
  if (top.has("price_per_accelerator_hour")) c.price_per_accelerator_hour = top.number("price_per_accelerator_hour", 1.0, false);
  if (top.has("compute_efficiency")) {
    c.compute_efficiency = top.number("compute_efficiency", 1.0);
    if (*c.compute_efficiency > 1) {
      throw ConfigError(fmt::format("{}: \"compute_efficiency\" must be in (0, 1], got {}", source,
                                    *c.compute_efficiency));
    }
  }
  return c;
}

ClusterDescription ClusterDescription::from_file(const std::string& path) {
  return from_json(read_text_file(path), path);
}

}  // namespace zeroshard
