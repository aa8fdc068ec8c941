#include "runtime/offload_config.h"

#include <fmt/format.h>

#include "core/error.h"

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

namespace {

[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& value,
                      const std::string& why) {
  throw ConfigError(fmt::format("{}: \"{}\" = {} {}", source, key, value, why));
}

}  // namespace

void OffloadConfig::validate(int stage, const std::string& source) const {
  const std::string oo = "zero_optimization.offload_optimizer", op = "zero_optimization.offload_param";
  if (optimizer.device != OffloadDevice::none && stage < 1) {
    bad(source, oo + ".device", fmt::format("\"{}\"", offload_device_name(optimizer.device)),
        "needs zero_optimization.stage >= 1 (the offloaded optimizer state is the rank's shard)");
  }
  if (param.device != OffloadDevice::none && stage != 3) {
    bad(source, op + ".device", fmt::format("\"{}\"", offload_device_name(param.device)),
        "needs zero_optimization.stage 3 (only stage 3 shards parameters)");
  }
  if (optimizer.device == OffloadDevice::nvme && optimizer.nvme_path.empty()) {
    bad(source, oo + ".nvme_path", "\"\"", "must name a directory when device is \"nvme\"");
  }
  if (param.device == OffloadDevice::nvme && param.nvme_path.empty()) {
    bad(source, op + ".nvme_path", "\"\"", "must name a directory when device is \"nvme\"");
  }
  if (optimizer.buffer_count < 1) bad(source, oo + ".buffer_count", std::to_string(optimizer.buffer_count), "must be >= 1");
  if (param.buffer_count < 2) bad(source, op + ".buffer_count", std::to_string(param.buffer_count), "must be >= 2");
  if (param.buffer_size < 1) bad(source, op + ".buffer_size", std::to_string(param.buffer_size), "must be >= 1");
  if (param.max_in_cpu < 0) bad(source, op + ".max_in_cpu", std::to_string(param.max_in_cpu), "must be >= 0");
  if (sub_group_size < 1) {
    bad(source, "zero_optimization.sub_group_size", std::to_string(sub_group_size), "must be >= 1");
  }
  aio.validate(source, "aio");
}

}  // namespace zeroshard
