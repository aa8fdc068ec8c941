#include "runtime/config.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "offload/aio_config.h"

namespace zeroshard {

namespace {

using nlohmann::json;

// Reads one JSON object, remembering which keys were consumed so that any
// key left over is reported by name. `path` is the dotted key prefix.
class Section {
 public:
  Section(const json& j, std::string path, const std::string& source)
      : j_(j), path_(std::move(path)), source_(source) {
    if (!j_.is_object()) fail_type(path_.empty() ? "<top level>" : path_, "an object");
  }

  bool has(const char* key) const { return j_.contains(key); }

  std::string key_path(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  template <class T>
  void get(const char* key, T& out) {
    if (!j_.contains(key)) return;
    used_.insert(key);
    const json& v = j_.at(key);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail_type(key_path(key), "true or false");
      out = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail_type(key_path(key), "an integer");
      // Values outside T's range are an error quoting the value as written,
      // never a silent wrap-around.
      const bool fits = v.is_number_unsigned()
                            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                            : v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                                  v.get<std::int64_t>() <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
      if (!fits) {
        throw ConfigError(fmt::format("{}: \"{}\" = {} is out of range [{}, {}]", source_, key_path(key), v.dump(),
                                      std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
      }
      out = v.get<T>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail_type(key_path(key), "a number");
      const double d = v.get<double>();
      const T t = static_cast<T>(d);
      if (!std::isfinite(t) || (d != 0 && t == 0)) {
        throw ConfigError(fmt::format("{}: \"{}\" = {} cannot be represented as a {}-bit float", source_,
                                      key_path(key), v.dump(), 8 * sizeof(T)));
      }
      out = t;
    } else {
      if (!v.is_string()) fail_type(key_path(key), "a string");
      out = v.get<std::string>();
    }
  }

  /// An element count: a JSON integer, or a number with an integral value
  /// such as 1e9 (DeepSpeed configs write sizes that way).
  void get_count(const char* key, std::int64_t& out) {
    if (!j_.contains(key)) return;
    const json& v = j_.at(key);
    if (v.is_number_integer()) {
      get(key, out);
      return;
    }
    used_.insert(key);
    const double d = v.is_number() ? v.get<double>() : 0.5;
    if (!v.is_number() || d != std::floor(d) || !(std::fabs(d) < 9.0e18)) {
      throw ConfigError(fmt::format("{}: \"{}\" = {} must be a whole number of elements", source_, key_path(key),
                                    v.dump()));
    }
    out = static_cast<std::int64_t>(d);
  }

  const std::string& source() const { return source_; }

  Section sub(const char* key) {
    used_.insert(key);
    return Section(j_.at(key), key_path(key), source_);
  }

  const json& raw(const char* key) {
    used_.insert(key);
    return j_.at(key);
  }

  /// Throws for the first key that was never read.
  void reject_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (!used_.count(it.key())) {
        throw ConfigError(fmt::format(
            "{}: unknown or unsupported configuration key \"{}\" (zeroshard rejects keys it does "
            "not implement rather than ignoring them; see runtime/config.h for the supported keys)",
            source_, key_path(it.key().c_str())));
      }
    }
  }

  [[noreturn]] void fail_type(const std::string& key, const char* expected) const {
    throw ConfigError(fmt::format("{}: \"{}\" must be {}", source_, key, expected));
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> used_;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

OffloadDevice parse_device(Section& sec, const std::string& source) {
  std::string d = "none";
  sec.get("device", d);
  const std::string l = lower(d);
  if (l == "none") return OffloadDevice::none;
  if (l == "cpu") return OffloadDevice::cpu;
  if (l == "nvme") return OffloadDevice::nvme;
  throw ConfigError(fmt::format("{}: \"{}\" is \"{}\"; expected \"none\", \"cpu\" or \"nvme\"", source,
                                sec.key_path("device"), d));
}

// The keys offload_optimizer and offload_param share.
template <class Tier>
void parse_tier(Section& sec, Tier& t, const std::string& source) {
  t.device = parse_device(sec, source);
  sec.get("nvme_path", t.nvme_path);
  sec.get("buffer_count", t.buffer_count);
  sec.get("pin_memory", t.pin_memory);
}

// zero_optimization.offload_optimizer / offload_param / sub_group_size
// (runtime/offload_config.h). Ranges are checked by OffloadConfig::validate.
void parse_offload(Section& z, OffloadConfig& o) {
  const std::string& source = z.source();
  if (z.has("offload_optimizer")) {
    Section sec = z.sub("offload_optimizer");
    parse_tier(sec, o.optimizer, source);
    sec.get("pipeline_read", o.optimizer.pipeline_read);
    sec.get("pipeline_write", o.optimizer.pipeline_write);
    sec.reject_unknown();
  }
  if (z.has("offload_param")) {
    Section sec = z.sub("offload_param");
    parse_tier(sec, o.param, source);
    sec.get_count("buffer_size", o.param.buffer_size);
    sec.get_count("max_in_cpu", o.param.max_in_cpu);
    sec.reject_unknown();
  }
  z.get_count("sub_group_size", o.sub_group_size);
}

// zero_optimization.reduce_bucket_size / allgather_bucket_size /
// overlap_comm / contiguous_gradients (runtime/config.h, grad_reducer.h).
// Ranges are checked by validate_in.
void parse_overlap(Section& z, ZeroConfig& zc) {
  z.get_count("reduce_bucket_size", zc.reduce_bucket_size);
  z.get_count("allgather_bucket_size", zc.allgather_bucket_size);
  if (z.has("overlap_comm")) {
    bool overlap = false;
    z.get("overlap_comm", overlap);
    zc.overlap_comm = overlap;
  }
  z.get("contiguous_gradients", zc.contiguous_gradients);
}

void parse_optimizer(Section& top, EngineConfig& c, const std::string& source) {
  Section opt = top.sub("optimizer");
  std::string type = "AdamW";
  opt.get("type", type);
  const std::string t = lower(type);
  OptimizerHyper& h = c.optimizer;
  if (t == "adamw") {
    h.kind = OptimizerKind::adamw;
  } else if (t == "adam") {
    h.kind = OptimizerKind::adamw;  // DeepSpeed: adam_w_mode defaults to true
  } else if (t == "sgd") {
    h.kind = OptimizerKind::sgd;
  } else {
    throw ConfigError(fmt::format(
        "{}: \"optimizer.type\" is \"{}\"; supported types are Adam, AdamW and SGD", source, type));
  }
  if (!opt.has("params")) {
    opt.reject_unknown();
    return;
  }
  Section p = opt.sub("params");
  p.get("lr", h.lr);
  p.get("weight_decay", h.weight_decay);
  if (h.kind != OptimizerKind::sgd) {
    if (p.has("betas")) {
      const json& b = p.raw("betas");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number()) {
        p.fail_type(p.key_path("betas"), "an array of two numbers [beta1, beta2]");
      }
      h.beta1 = static_cast<float>(b[0].get<double>());
      h.beta2 = static_cast<float>(b[1].get<double>());
    }
    p.get("eps", h.eps);
    if (t == "adam") {
      bool adam_w_mode = true;
      p.get("adam_w_mode", adam_w_mode);
      h.kind = adam_w_mode ? OptimizerKind::adamw : OptimizerKind::adam;
    }
  } else {
    p.get("momentum", h.momentum);
    p.get("dampening", h.dampening);
    p.get("nesterov", h.nesterov);
  }
  p.reject_unknown();
  opt.reject_unknown();
}

[[noreturn]] void bad_value(const std::string& source, const char* key, const std::string& value,
                            const char* rule) {
  throw ConfigError(fmt::format("{}: \"{}\" = {} is invalid: {}", source, key, value, rule));
}

// Ranges of the keys parse_overlap reads.
void validate_overlap(const ZeroConfig& z, const std::string& source) {
  if (z.reduce_bucket_size <= 0) {
    bad_value(source, "zero_optimization.reduce_bucket_size", std::to_string(z.reduce_bucket_size),
              "must be > 0 (elements)");
  }
  if (z.allgather_bucket_size <= 0) {
    bad_value(source, "zero_optimization.allgather_bucket_size", std::to_string(z.allgather_bucket_size),
              "must be > 0 (elements)");
  }
  if (!z.contiguous_gradients) {
    bad_value(source, "zero_optimization.contiguous_gradients", "false",
              "zeroshard's gradients are always in one flat buffer per unit (see runtime/config.h); "
              "remove the key or set it to true");
  }
}

}  // namespace

EngineConfig EngineConfig::from_json(const nlohmann::json& j, const std::string& source) {
  EngineConfig c;
  Section top(j, "", source);
  std::int64_t tbs = 0;
  if (top.has("train_batch_size")) {
    top.get("train_batch_size", tbs);
    c.train_batch_size = tbs;
  }
  top.get("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu);
  top.get("gradient_accumulation_steps", c.gradient_accumulation_steps);
  top.get("gradient_clipping", c.gradient_clipping);
  top.get("steps_per_print", c.steps_per_print);
  if (top.has("optimizer")) parse_optimizer(top, c, source);
  if (top.has("bf16")) {
    Section b = top.sub("bf16");
    bool enabled = false;
    b.get("enabled", enabled);
    b.reject_unknown();
    if (enabled) c.compute_dtype = DType::bf16;
  }
  if (top.has("fp16")) {
    Section f = top.sub("fp16");
    bool enabled = false;
    f.get("enabled", enabled);
    double scale = 0;
    f.get("loss_scale", scale);
    LossScaleConfig& ls = c.loss_scale;
    ls.dynamic = scale == 0;
    ls.static_scale = scale;
    f.get("initial_scale_power", ls.initial_scale_power);
    f.get("loss_scale_window", ls.loss_scale_window);
    f.get("hysteresis", ls.hysteresis);
    f.get("min_loss_scale", ls.min_loss_scale);
    f.reject_unknown();
    if (enabled) {
      if (c.compute_dtype == DType::bf16) {
        throw ConfigError(fmt::format("{}: \"fp16.enabled\" and \"bf16.enabled\" are both true; choose one", source));
      }
      c.compute_dtype = DType::f16;
    }
  }
  if (top.has("communication_data_type")) {
    std::string t;
    top.get("communication_data_type", t);
    if (t == "fp32") {
      c.communication_data_type = DType::f32;
    } else if (t == "bf16") {
      c.communication_data_type = DType::bf16;
    } else if (t == "fp16") {
      c.communication_data_type = DType::f16;
    } else {
      throw ConfigError(fmt::format("{}: \"communication_data_type\" = \"{}\" is invalid: use fp32, bf16 or fp16",
                                    source, t));
    }
  }
  if (top.has("scheduler")) c.scheduler = LrSchedule::from_json(top.raw("scheduler"), source);
  if (top.has("zero_optimization")) {
    Section z = top.sub("zero_optimization");
    z.get("stage", c.zero.stage);
    parse_overlap(z, c.zero);
    parse_offload(z, c.offload);
    z.reject_unknown();
  }
  if (top.has("aio")) c.offload.aio = AioConfig::from_json(top.raw("aio"), source, "aio");
  top.reject_unknown();
  c.source = source;
  c.validate_in(source);
  return c;
}

namespace {

// json::parse, but a key that appears twice in one object is a ConfigError
// naming it (nlohmann keeps the last one silently; a ds_config with two
// "device" keys would run with whichever came last).
json parse_rejecting_duplicates(const std::string& text, const std::string& source) {
  struct Frame {
    std::string path;  // dotted path of this object or array
    std::string last;  // last key read in it
    std::set<std::string> keys;
  };
  std::vector<Frame> stack;
  auto child_path = [&]() {
    if (stack.empty()) return std::string();
    const Frame& top = stack.back();
    return top.path.empty() ? top.last : top.path + "." + top.last;
  };
  auto cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        stack.push_back(Frame{child_path(), "", {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key: {
        Frame& top = stack.back();
        top.last = parsed.get<std::string>();
        if (!top.keys.insert(top.last).second) {
          throw ConfigError(fmt::format("{}: key \"{}\" appears twice; each key may be given once", source,
                                        top.path.empty() ? top.last : top.path + "." + top.last));
        }
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  return json::parse(text, cb);
}

}  // namespace

EngineConfig EngineConfig::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(fmt::format("{}: is a directory, not a configuration file", path));
  }
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(fmt::format("{}: cannot open configuration file: {}", path, std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = parse_rejecting_duplicates(ss.str(), path);
  } catch (const json::parse_error& e) {
    throw ConfigError(fmt::format("{}: invalid JSON at byte {}: {}", path, e.byte, e.what()));
  }
  return from_json(j, path);
}

void EngineConfig::validate() const { validate_in(source); }

void EngineConfig::validate_in(const std::string& source) const {
  const OptimizerHyper& h = optimizer;
  if (zero.stage < 0 || zero.stage > 3) {
    bad_value(source, "zero_optimization.stage", std::to_string(zero.stage), "must be 0, 1, 2 or 3");
  }
  validate_overlap(zero, source);
  offload.validate(zero.stage, source);
  if (train_micro_batch_size_per_gpu < 1) {
    bad_value(source, "train_micro_batch_size_per_gpu",
              std::to_string(train_micro_batch_size_per_gpu), "must be >= 1");
  }
  if (gradient_accumulation_steps < 1) {
    bad_value(source, "gradient_accumulation_steps", std::to_string(gradient_accumulation_steps),
              "must be >= 1");
  }
  if (train_batch_size && *train_batch_size < 1) {
    bad_value(source, "train_batch_size", std::to_string(*train_batch_size), "must be >= 1");
  }
  if (!(gradient_clipping >= 0.0)) {
    bad_value(source, "gradient_clipping", fmt::format("{}", gradient_clipping),
              "must be >= 0 (0 disables clipping)");
  }
  const LossScaleConfig& ls = loss_scale;
  if (!(ls.static_scale >= 0)) bad_value(source, "fp16.loss_scale", fmt::format("{}", ls.static_scale), "must be >= 0");
  if (ls.initial_scale_power < 0 || ls.initial_scale_power > 64) {
    bad_value(source, "fp16.initial_scale_power", std::to_string(ls.initial_scale_power), "must be in [0, 64]");
  }
  if (ls.loss_scale_window < 1) {
    bad_value(source, "fp16.loss_scale_window", std::to_string(ls.loss_scale_window), "must be >= 1");
  }
  if (ls.hysteresis < 1) bad_value(source, "fp16.hysteresis", std::to_string(ls.hysteresis), "must be >= 1");
  if (!(ls.min_loss_scale > 0)) bad_value(source, "fp16.min_loss_scale", fmt::format("{}", ls.min_loss_scale), "must be > 0");
  if (steps_per_print < 1) {
    bad_value(source, "steps_per_print", std::to_string(steps_per_print), "must be >= 1");
  }
  if (!(h.lr >= 0.0f)) bad_value(source, "optimizer.params.lr", fmt::format("{}", h.lr), "must be >= 0");
  if (!(h.weight_decay >= 0.0f)) {
    bad_value(source, "optimizer.params.weight_decay", fmt::format("{}", h.weight_decay),
              "must be >= 0");
  }
  if (h.kind != OptimizerKind::sgd) {
    if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f) || !(h.beta2 >= 0.0f && h.beta2 < 1.0f)) {
      bad_value(source, "optimizer.params.betas", fmt::format("[{}, {}]", h.beta1, h.beta2),
                "each beta must be in [0, 1)");
    }
    if (!(h.eps > 0.0f)) bad_value(source, "optimizer.params.eps", fmt::format("{}", h.eps), "must be > 0");
  } else {
    if (!(h.momentum >= 0.0f)) {
      bad_value(source, "optimizer.params.momentum", fmt::format("{}", h.momentum), "must be >= 0");
    }
    if (h.nesterov && (h.momentum <= 0.0f || h.dampening != 0.0f)) {
      bad_value(source, "optimizer.params.nesterov", "true",
                "Nesterov momentum requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
    }
  }
}

void EngineConfig::validate_for_world(int world_size) const {
  validate();
  if (train_batch_size) {
    const std::int64_t expect = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size;
    if (*train_batch_size != expect) {
      throw ConfigError(fmt::format(
          "{}: \"train_batch_size\" = {} does not equal train_micro_batch_size_per_gpu ({}) x "
          "gradient_accumulation_steps ({}) x world size ({}) = {}",
          source, *train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps,
          world_size, expect));
    }
  }
}

}  // namespace zeroshard
