#include "runtime/config/offload_config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

const char* offload_device_name(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::none: return "none";
    case OffloadDevice::cpu: return "cpu";
    case OffloadDevice::nvme: return "nvme";
  }
  return "?";
}

std::size_t OffloadConfig::sub_group_elements() const {
  constexpr std::int64_t kAlign = 4096;
  const std::int64_t rounded = sub_group_size / kAlign * kAlign;
  return static_cast<std::size_t>(rounded < kAlign ? kAlign : rounded);
}

void OffloadConfig::validate(int stage, const std::string& source) const {
  ConfigDiagnostics d(source);
  collect_problems(stage, d);
  d.throw_if_any();
}

void OffloadConfig::collect_problems(int stage, ConfigDiagnostics& d) const {
  auto bad = [&](const std::string& key, const std::string& value, const std::string& why) {
    d.problem(fmt::format("\"{}\" = {} {}", key, value, why));
  };
  const std::string oo = "zero_optimization.offload_optimizer", op = "zero_optimization.offload_param";
  if (optimizer.device != OffloadDevice::none && stage < 1) {
    bad(oo + ".device", fmt::format("\"{}\"", offload_device_name(optimizer.device)),
        "needs zero_optimization.stage >= 1 (the offloaded optimizer state is the rank's shard)");
  }
  if (param.device != OffloadDevice::none && stage != 3) {
    bad(op + ".device", fmt::format("\"{}\"", offload_device_name(param.device)),
        "needs zero_optimization.stage 3 (only stage 3 shards parameters)");
  }
  if (optimizer.device == OffloadDevice::nvme && optimizer.nvme_path.empty()) {
    bad(oo + ".nvme_path", "\"\"", "must name a directory when device is \"nvme\"");
  }
  if (param.device == OffloadDevice::nvme && param.nvme_path.empty()) {
    bad(op + ".nvme_path", "\"\"", "must name a directory when device is \"nvme\"");
  }
  if (optimizer.buffer_count < 1) bad(oo + ".buffer_count", std::to_string(optimizer.buffer_count), "must be >= 1");
  if (param.buffer_count < 2) bad(op + ".buffer_count", std::to_string(param.buffer_count), "must be >= 2");
  if (param.buffer_size < 1) bad(op + ".buffer_size", std::to_string(param.buffer_size), "must be >= 1");
  if (param.max_in_cpu < 0) bad(op + ".max_in_cpu", std::to_string(param.max_in_cpu), "must be >= 0");
  if (sub_group_size < 0) bad("zero_optimization.sub_group_size", std::to_string(sub_group_size), "must be >= 0");
  try {
    aio.validate(d.source(), "aio");
  } catch (const ConfigError& e) {
    const std::string what = e.what(), prefix = d.source() + ": ";
    d.problem(what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
  }
}

}  // namespace zeroshard
