#include "runtime/config/config_normalize.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/config_keys.h"

namespace zeroshard {

using nlohmann::json;

namespace {

constexpr const char* kStrictHint =
    " (strict mode: zeroshard.strict or ConfigOptions::strict; remove them or turn strict mode off)";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = path.find('.', pos);
    parts.push_back(path.substr(pos, dot - pos));
    if (dot == std::string::npos) return parts;
    pos = dot + 1;
  }
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    parts.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Why `v` is not of type `t` ("" when it is).
std::string type_problem(KeyType t, const json& v) {
  // A whole number beyond what the type holds: nlohmann-json reads one
  // beyond 2^64 - 1 (or below -2^63) as a double, which is still an integer
  // the user wrote, so it is named out of range, not a non-integer.
  auto out_of_range = [&](std::int64_t lo, std::int64_t hi) -> std::string {
    const double d = v.get<double>();
    const bool beyond = std::isfinite(d) && d == std::floor(d) &&
                        (d < static_cast<double>(lo) || d >= static_cast<double>(hi) + 1.0);
    return beyond ? fmt::format("is out of range [{}, {}]", lo, hi) : "";
  };
  auto int_range = [&](std::int64_t lo, std::int64_t hi) -> std::string {
    if (v.is_number_float()) {
      const std::string beyond = out_of_range(lo, hi);
      if (!beyond.empty()) return beyond;
    }
    if (!v.is_number_integer()) return "must be an integer";
    const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                                             : v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
    return fits ? "" : fmt::format("is out of range [{}, {}]", lo, hi);
  };
  switch (t) {
    case KeyType::section:
    case KeyType::object:
      return v.is_object() ? "" : "must be an object";
    case KeyType::boolean:
      return v.is_boolean() ? "" : "must be true or false";
    case KeyType::int32:
      return int_range(std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    case KeyType::int64:
      return int_range(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    case KeyType::count: {
      if (v.is_number_integer()) {
        return int_range(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
      }
      if (v.is_number_float()) {
        const std::string beyond =
            out_of_range(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
        if (!beyond.empty()) return beyond;
      }
      const double d = v.is_number() ? v.get<double>() : 0.5;
      return v.is_number() && d == std::floor(d) && std::fabs(d) < 9.0e18 ? "" : "must be a whole number of elements";
    }
    case KeyType::float32: {
      if (!v.is_number()) return "must be a number";
      const double d = v.get<double>();
      const float f = static_cast<float>(d);
      return std::isfinite(f) && !(d != 0 && f == 0) ? "" : "cannot be represented as a 32-bit float";
    }
    case KeyType::float64:
      return v.is_number() && std::isfinite(v.get<double>()) ? "" : "must be a number";
    case KeyType::string:
      return v.is_string() ? "" : "must be a string";
    case KeyType::betas:
      return v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number()
                 ? ""
                 : "must be an array of two numbers [beta1, beta2]";
    case KeyType::numbers: {
      const bool list = v.is_array() && !v.empty() &&
                        std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number(); });
      return v.is_number() || list ? "" : "must be a number or a list of numbers (one per parameter group)";
    }
    case KeyType::any:
      return "";
  }
  return "";
}

bool is_auto(const json* v) { return v && v->is_string() && v->get<std::string>() == "auto"; }

// Whether `v` is a no-effect key's neutral value: equal to it, or, for a
// section whose neutral value is an object, holding those values for the
// keys it names ({"enabled": false}); a key it leaves out keeps DeepSpeed's
// default, which is the neutral one.
bool is_neutral(const json& v, const json& neutral) {
  if (!neutral.is_object() || !v.is_object()) return v == neutral;
  for (auto it = neutral.begin(); it != neutral.end(); ++it) {
    const auto found = v.find(it.key());
    if (found != v.end() && *found != it.value()) return false;
  }
  return true;
}

}  // namespace

const json* json_at(const json& doc, const std::string& path) {
  const json* v = &doc;
  for (const std::string& part : split(path)) {
    if (!v->is_object()) return nullptr;
    const auto it = v->find(part);
    if (it == v->end()) return nullptr;
    v = &*it;
  }
  return v;
}

json* json_at(json& doc, const std::string& path) {
  return const_cast<json*>(json_at(static_cast<const json&>(doc), path));
}

void normalize_legacy(json& doc, bool strict, ConfigDiagnostics& d) {
  if (!doc.is_object()) return;
  std::vector<std::string> notes;
  auto legacy_bool = [&](const json& v, const std::string& path) {
    if (v.is_boolean()) return true;
    d.bad_value(path, v, "must be true or false");
    return false;
  };
  // zero_optimization: true / false (DeepSpeed's first form: stage 1 / 0,
  // with the bucket from the top-level allgather_size).
  if (doc.contains("zero_optimization") && doc["zero_optimization"].is_boolean()) {
    const bool on = doc["zero_optimization"].get<bool>();
    json z = {{"stage", on ? 1 : 0}};
    std::string became = fmt::format("zero_optimization = {} -> {{\"stage\": {}}}", on, on ? 1 : 0);
    if (on && doc.contains("allgather_size")) {
      z["allgather_bucket_size"] = doc["allgather_size"];
      became += ", allgather_size -> zero_optimization.allgather_bucket_size";
    }
    doc.erase("allgather_size");
    doc["zero_optimization"] = z;
    notes.push_back(became);
  } else if (doc.contains("zero_optimization") && doc["zero_optimization"].is_number()) {
    d.bad_value("zero_optimization", doc["zero_optimization"],
                fmt::format("is not a form DeepSpeed reads either: write {{\"stage\": {}}}",
                            brief(doc["zero_optimization"])));
    doc.erase("zero_optimization");
  }
  if (doc.contains("allgather_size")) {
    d.bad_value("allgather_size", doc["allgather_size"],
                "is read only with DeepSpeed's old form \"zero_optimization\": true; write "
                "zero_optimization.allgather_bucket_size");
    doc.erase("allgather_size");
  }
  if (doc.contains("bfloat16")) {
    if (doc.contains("bf16")) {
      d.problem("\"bfloat16\" and \"bf16\" are both given (bfloat16 is DeepSpeed's older name of bf16); keep bf16");
    } else {
      doc["bf16"] = doc["bfloat16"];
      notes.push_back("bfloat16 -> bf16");
    }
    doc.erase("bfloat16");
  }
  if (json* z = json_at(doc, "zero_optimization"); z && z->is_object()) {
    bool pin = false, pin_given = false;
    if (z->contains("cpu_offload_use_pin_memory")) {
      const json v = (*z)["cpu_offload_use_pin_memory"];
      pin_given = legacy_bool(v, "zero_optimization.cpu_offload_use_pin_memory");
      pin = pin_given && v.get<bool>();
      z->erase("cpu_offload_use_pin_memory");
    }
    bool applied_pin = false;
    const std::pair<const char*, const char*> tiers[] = {{"cpu_offload", "offload_optimizer"},
                                                         {"cpu_offload_param", "offload_param"}};
    for (const auto& [old_key, tier] : tiers) {
      if (!z->contains(old_key)) continue;
      const json v = (*z)[old_key];
      z->erase(old_key);
      const std::string path = fmt::format("zero_optimization.{}", old_key);
      if (!legacy_bool(v, path)) continue;
      if (z->contains(tier)) {
        d.problem(fmt::format("\"{}\" and \"zero_optimization.{}\" are both given ({} is DeepSpeed's older form); "
                              "keep {}",
                              path, tier, old_key, tier));
        continue;
      }
      if (!v.get<bool>()) {
        notes.push_back(fmt::format("{} = false -> no {}", path, tier));
        continue;
      }
      (*z)[tier] = json{{"device", "cpu"}};
      if (pin_given) {
        (*z)[tier]["pin_memory"] = pin;
        applied_pin = true;
      }
      notes.push_back(fmt::format("{} -> zero_optimization.{}.device \"cpu\"{}", path, tier,
                                  pin_given ? fmt::format(", pin_memory {}", pin) : std::string()));
    }
    if (pin_given && !applied_pin) {
      notes.push_back("zero_optimization.cpu_offload_use_pin_memory -> nothing (no cpu_offload / cpu_offload_param "
                      "tier to apply it to)");
    }
  }
  if (json* z = json_at(doc, "zero_optimization"); z && z->is_object()) {
    // DeepSpeed's field names of the stage3_* keys (its config model takes
    // both), and the older name of stage3_gather_16bit_weights_on_model_save;
    // values are type-checked under the new name.
    const std::pair<const char*, const char*> renames[] = {
        {"prefetch_bucket_size", "stage3_prefetch_bucket_size"},
        {"max_live_parameters", "stage3_max_live_parameters"},
        {"max_reuse_distance", "stage3_max_reuse_distance"},
        {"param_persistence_threshold", "stage3_param_persistence_threshold"},
        {"model_persistence_threshold", "stage3_model_persistence_threshold"},
        {"stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
        {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save"},
        {"module_granularity_threshold", "stage3_module_granularity_threshold"},
        {"use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params"}};
    for (const auto& [from, to] : renames) {
      if (!z->contains(from)) continue;
      if (z->contains(to)) {
        d.problem(fmt::format("\"zero_optimization.{}\" and \"zero_optimization.{}\" are both given (the same "
                              "DeepSpeed setting; {} is its other name); keep {}",
                              from, to, from, to));
      } else {
        (*z)[to] = (*z)[from];
        notes.push_back(fmt::format("zero_optimization.{} -> zero_optimization.{}", from, to));
      }
      z->erase(from);
    }
  }
  // communication_data_type "bfp16": DeepSpeed's spelling of bf16 before
  // 0.14.1 (its reader lower-cases the value first).
  if (json* t = json_at(doc, "communication_data_type"); t && t->is_string() && lower(t->get<std::string>()) == "bfp16") {
    notes.push_back(fmt::format("communication_data_type \"{}\" -> \"bf16\" (DeepSpeed's spelling before 0.14.1)",
                                brief(t->get<std::string>())));
    *t = "bf16";
  }
  if (const json* a = json_at(doc, "aio"); a && a->is_object() && a->contains("thread_count")) {
    notes.push_back("aio.thread_count -> aio.intra_op_parallelism");
  }
  if (notes.empty()) return;
  const std::string line = "legacy DeepSpeed spellings mapped: " + fmt::format("{}", fmt::join(notes, "; "));
  if (strict) {
    d.problem(line + kStrictHint);
  } else {
    d.warn(line);
  }
}

std::set<std::string> resolve_auto(json& doc, const ConfigOptions& o, std::set<std::string>& unfilled,
                                   std::vector<AutoFill>& fills, ConfigDiagnostics& d) {
  for (const auto& [key, value] : o.values) {
    const ConfigKey* row = find_config_key(key);
    if (!row || !row->auto_ok) {
      d.problem(fmt::format("ConfigOptions::values[\"{}\"]: \"{}\" is not a key that may be \"auto\" (docs/config.md "
                            "lists those that may)",
                            brief(key), brief(key)));
    }
  }
  std::vector<std::string> unresolved;
  std::set<std::string> batch_auto;
  const std::set<std::string> batch_keys = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                            "gradient_accumulation_steps"};
  for (const ConfigKey& row : config_keys()) {
    if (!row.auto_ok) continue;
    const std::string path = row.path;
    json* v = json_at(doc, path);
    if (!is_auto(v)) continue;
    if (const auto it = o.values.find(path); it != o.values.end()) {
      *v = it->second;
      const auto rule = o.rules.find(path);
      fills.push_back({path, *v, rule != o.rules.end() ? rule->second : "ConfigOptions::fill"});
      continue;
    }
    if (o.hidden_size && (path == "zero_optimization.reduce_bucket_size" ||
                          path == "zero_optimization.stage3_prefetch_bucket_size" ||
                          path == "zero_optimization.stage3_param_persistence_threshold")) {
      try {
        const AutoBucketSizes b = auto_bucket_sizes(*o.hidden_size);
        *v = path == "zero_optimization.reduce_bucket_size"            ? b.reduce_bucket_size
             : path == "zero_optimization.stage3_prefetch_bucket_size" ? b.stage3_prefetch_bucket_size
                                                                       : b.stage3_param_persistence_threshold;
        const char* rule = path == "zero_optimization.reduce_bucket_size"            ? "hidden^2"
                           : path == "zero_optimization.stage3_prefetch_bucket_size" ? "0.9 hidden^2"
                                                                                     : "10 hidden";
        fills.push_back({path, *v, fmt::format("{}, hidden {}", rule, *o.hidden_size)});
      } catch (const ConfigError& e) {
        d.problem(e.what());
        unresolved.push_back(path);
      }
      continue;
    }
    if (batch_keys.count(path)) {
      doc.erase(path);
      batch_auto.insert(path);
      continue;
    }
    unresolved.push_back(path);
  }
  // A batch key left "auto" is derived only when the others determine it:
  // one of them "auto" and the other two given, or train_batch_size "auto"
  // with the micro-batch given (accumulation 1 when absent, as DeepSpeed).
  if (!batch_auto.empty()) {
    std::size_t present = 0;
    for (const std::string& k : batch_keys) present += doc.contains(k) ? 1 : 0;
    const bool determined = (batch_auto.size() == 1 && present == 2) ||
                            (batch_auto == std::set<std::string>{"train_batch_size"} &&
                             doc.contains("train_micro_batch_size_per_gpu"));
    if (!determined) unresolved.insert(unresolved.begin(), batch_auto.begin(), batch_auto.end());
  }
  if (!unresolved.empty()) {
    d.problem(fmt::format(
        "\"auto\" is left unfilled for {}: the launcher (HF Trainer, Accelerate) or the program must fill it: "
        "ConfigOptions::from_program (HF Trainer's rules) or ConfigOptions::fill(key, value) "
        "(ConfigOptions::hidden_size for the bucket sizes) before EngineConfig::from_file",
        join(unresolved)));
  }
  unfilled.insert(unresolved.begin(), unresolved.end());
  return batch_auto;
}

std::set<std::string> check_keys(const json& doc, bool strict, const std::set<std::string>& skip,
                                 ConfigDiagnostics& d) {
  std::set<std::string> bad = skip;
  std::vector<std::string> no_effect;
  if (!doc.is_object()) {
    d.bad_value("<top level>", doc, "must be an object");
    bad.insert("");
    return bad;
  }
  auto governing_type = [&](const std::string& section) -> std::string {
    const char* type_key = section == "optimizer.params" ? "optimizer.type"
                           : section == "scheduler.params" ? "scheduler.type"
                                                           : nullptr;
    if (!type_key) return "";
    const json* t = json_at(doc, type_key);
    if (t && t->is_string()) return t->get<std::string>();
    return section == "optimizer.params" ? "AdamW" : "";
  };
  for (const std::string& section : config_sections()) {
    if (bad.count(section)) continue;
    const json* obj = section.empty() ? &doc : json_at(doc, section);
    if (!obj || !obj->is_object()) continue;
    const std::string type = governing_type(section);
    for (auto it = obj->begin(); it != obj->end(); ++it) {
      const std::string path = section.empty() ? it.key() : section + "." + it.key();
      if (skip.count(path)) continue;
      const ConfigKey* row = find_config_key(path);
      if (!row) {
        const std::string near = closest_config_key(section, it.key());
        d.problem(fmt::format("unknown or unsupported configuration key \"{}\"{}", brief(path),
                              near.empty() ? std::string()
                                           : fmt::format("; did you mean \"{}\"?",
                                                         section.empty() ? near : section + "." + near)));
        bad.insert(path);
        continue;
      }
      std::string why = type_problem(row->type, it.value());
      if (!why.empty()) {
        if (is_auto(&it.value())) why += " (\"auto\" is not accepted for this key; docs/config.md lists those that are)";
        d.bad_value(path, it.value(), why);
        bad.insert(path);
        continue;
      }
      if (*row->only_for && !type.empty()) {
        bool applies = false;
        for (const std::string& t : split_list(row->only_for)) applies = applies || lower(t) == lower(type);
        if (!applies) {
          d.problem(fmt::format("\"{}\" applies only to {} ({} is \"{}\")", path, row->only_for,
                                section == "optimizer.params" ? "optimizer.type" : "scheduler.type", brief(type)));
          bad.insert(path);
          continue;
        }
      }
      switch (row->status) {
        case KeyStatus::implemented:
        case KeyStatus::legacy:
          break;
        case KeyStatus::no_effect:
          if (*row->neutral && !is_neutral(it.value(), json::parse(row->neutral))) {
            d.bad_value(path, it.value(),
                        *row->refusal ? fmt::format("is not supported: {}", row->refusal)
                                      : fmt::format("would change the math, and zeroshard does not implement it ({}); "
                                                    "remove it or set {}",
                                                    row->description, row->neutral));
            bad.insert(path);
          } else {
            no_effect.push_back(path);
          }
          break;
        case KeyStatus::refused:
          d.bad_value(path, it.value(), fmt::format("is not supported: {}", row->description));
          bad.insert(path);
          break;
      }
    }
  }
  if (!no_effect.empty()) {
    const std::string line =
        fmt::format("accepted without effect in zeroshard (docs/config.md says why each changes nothing here): {}",
                    join(no_effect));
    if (strict) {
      d.problem(line + kStrictHint);
    } else {
      d.warn(line);
    }
  }
  return bad;
}

}  // namespace zeroshard
