#include "optimizer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quoted.h"

namespace zeroshard {

namespace {

using nlohmann::json;

std::vector<double> number_or_list(const json& v, const std::string& key, const std::string& source) {
  if (v.is_number()) return {v.get<double>()};
  if (v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); })) {
    return v.get<std::vector<double>>();
  }
  throw ConfigError(fmt::format("{}: \"{}\" must be a number or a list of numbers (one per parameter group)",
                                source, key));
}

}  // namespace

LrSchedule LrSchedule::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw ConfigError(fmt::format("{}: \"scheduler\" must be an object", source));
  LrSchedule s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "type" && it.key() != "params") {
      throw ConfigError(fmt::format("{}: unknown or unsupported configuration key \"scheduler.{}\"", source, brief(it.key())));
    }
  }
  if (!j.contains("type") || !j.at("type").is_string()) {
    throw ConfigError(fmt::format("{}: \"scheduler.type\" must be a string: WarmupLR, WarmupDecayLR or WarmupCosineLR",
                                  source));
  }
  const std::string type = j.at("type").get<std::string>();
  std::set<std::string> allowed;
  if (type == "WarmupLR") {
    s.kind = LrScheduleKind::warmup_lr;
    allowed = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"};
  } else if (type == "WarmupDecayLR") {
    s.kind = LrScheduleKind::warmup_decay_lr;
    allowed = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps"};
  } else if (type == "WarmupCosineLR") {
    s.kind = LrScheduleKind::warmup_cosine_lr;
    allowed = {"warmup_min_ratio", "warmup_num_steps", "warmup_type", "total_num_steps", "cos_min_ratio"};
  } else {
    throw ConfigError(fmt::format(
        "{}: \"scheduler.type\" is \"{}\"; supported: WarmupLR, WarmupDecayLR, WarmupCosineLR", source, brief(type)));
  }
  const json params = j.value("params", json::object());
  if (!params.is_object()) throw ConfigError(fmt::format("{}: \"scheduler.params\" must be an object", source));
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string key = "scheduler.params." + it.key();
    if (!allowed.count(it.key())) {
      throw ConfigError(fmt::format("{}: unknown or unsupported configuration key \"{}\" for {}", source, brief(key), type));
    }
    const json& v = it.value();
    auto integer = [&]() {
      if (!v.is_number_integer()) throw ConfigError(fmt::format("{}: \"{}\" must be an integer", source, key));
      // Above INT64_MAX get<int64_t> would wrap (18446744073709551615 -> -1).
      if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        throw ConfigError(fmt::format("{}: \"{}\" = {} is out of range (at most {})", source, key, brief(v.dump()), INT64_MAX));
      }
      return v.get<std::int64_t>();
    };
    auto number = [&]() {
      if (!v.is_number()) throw ConfigError(fmt::format("{}: \"{}\" must be a number", source, key));
      return v.get<double>();
    };
    if (it.key() == "warmup_min_lr") s.warmup_min_lr = number_or_list(v, key, source);
    if (it.key() == "warmup_max_lr") s.warmup_max_lr = number_or_list(v, key, source);
    if (it.key() == "warmup_num_steps") s.warmup_num_steps = integer();
    if (it.key() == "total_num_steps") s.total_num_steps = integer();
    if (it.key() == "warmup_min_ratio") s.warmup_min_ratio = number();
    if (it.key() == "cos_min_ratio") s.cos_min_ratio = number();
    if (it.key() == "warmup_type") {
      if (!v.is_string() || (v.get<std::string>() != "log" && v.get<std::string>() != "linear")) {
        throw ConfigError(fmt::format("{}: \"{}\" = {} is invalid: must be \"log\" or \"linear\"", source, key, brief(v.dump())));
      }
      s.warmup_type = v.get<std::string>();
    }
  }
  auto bad = [&](const char* key, const std::string& value, const char* rule) {
    throw ConfigError(fmt::format("{}: \"scheduler.params.{}\" = {} is invalid: {}", source, key, value, rule));
  };
  if (s.warmup_num_steps < 0) bad("warmup_num_steps", std::to_string(s.warmup_num_steps), "must be >= 0");
  for (double v : s.warmup_min_lr) if (!(v >= 0)) bad("warmup_min_lr", fmt::format("{}", v), "must be >= 0");
  for (double v : s.warmup_max_lr) if (!(v >= 0)) bad("warmup_max_lr", fmt::format("{}", v), "must be >= 0");
  if (s.kind == LrScheduleKind::warmup_decay_lr || s.kind == LrScheduleKind::warmup_cosine_lr) {
    if (s.total_num_steps <= 0) bad("total_num_steps", std::to_string(s.total_num_steps), "must be > 0");
  }
  if (s.kind == LrScheduleKind::warmup_cosine_lr) {
    if (s.total_num_steps <= std::max<std::int64_t>(2, s.warmup_num_steps)) {
      bad("total_num_steps", std::to_string(s.total_num_steps), "must exceed warmup_num_steps (and 2)");
    }
    if (!(s.warmup_min_ratio >= 0 && s.warmup_min_ratio <= 1)) bad("warmup_min_ratio", fmt::format("{}", s.warmup_min_ratio), "must be in [0, 1]");
    if (!(s.cos_min_ratio >= 0 && s.cos_min_ratio <= 1)) bad("cos_min_ratio", fmt::format("{}", s.cos_min_ratio), "must be in [0, 1]");
  }
  return s;
}

double LrSchedule::lr_at(std::int64_t k, int group, int groups, double group_lr) const {
  if (kind == LrScheduleKind::none) return group_lr;
  const double w = static_cast<double>(std::max<std::int64_t>(2, warmup_num_steps));
  const double kd = static_cast<double>(k);
  const bool warming = kd < w;
  const double gamma = warmup_type == "linear" ? kd / w : std::log(kd + 1) / std::log(w);
  if (kind == LrScheduleKind::warmup_cosine_lr) {
    double ratio;
    if (warming) {
      ratio = warmup_min_ratio + (1.0 - warmup_min_ratio) * gamma;
    } else {
      const double real_step = kd - w + 1, real_total = static_cast<double>(total_num_steps) - w;
      ratio = std::max(0.0, cos_min_ratio + (1.0 - cos_min_ratio) *
                                                (1 + std::cos(std::numbers::pi * real_step / real_total)) / 2);
    }
    return group_lr * ratio;
  }
  auto pick = [&](const std::vector<double>& v, const char* key) {
    if (v.size() == 1) return v[0];
    if (static_cast<int>(v.size()) != groups) {
      throw ConfigError(fmt::format("\"scheduler.params.{}\" has {} values but there are {} parameter groups", key,
                                    v.size(), groups));
    }
    return v[static_cast<std::size_t>(group)];
  };
  const double lo = pick(warmup_min_lr, "warmup_min_lr"), hi = pick(warmup_max_lr, "warmup_max_lr");
  double g = 1.0;
  if (warming) {
    g = gamma;
  } else if (kind == LrScheduleKind::warmup_decay_lr) {
    g = std::max(0.0, (static_cast<double>(total_num_steps) - kd) / std::max(1.0, static_cast<double>(total_num_steps) - w));
  }
  return lo + (hi - lo) * g;
}

std::string LrSchedule::name() const {
  switch (kind) {
    case LrScheduleKind::none: return "none";
    case LrScheduleKind::warmup_lr: return "WarmupLR";
    case LrScheduleKind::warmup_decay_lr: return "WarmupDecayLR";
    case LrScheduleKind::warmup_cosine_lr: return "WarmupCosineLR";
  }
  return "?";
}

}  // namespace zeroshard
