#include "runtime/config/config_diagnostics.h"

#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/config/json_text.h"

namespace zeroshard {

using nlohmann::json;

std::string brief(const json& v) { return brief(v.dump()); }

void ConfigDiagnostics::bad_value(const std::string& path, const json& value, const std::string& what) {
  problems_.push_back(fmt::format("\"{}\" = {} {}", brief(path), brief(value), what));
}

std::vector<std::string> ConfigDiagnostics::warnings() const {
  std::vector<std::string> out;
  for (const std::string& w : warnings_) out.push_back(fmt::format("{}: {}", source_, w));
  return out;
}

void ConfigDiagnostics::throw_if_any() const {
  if (problems_.empty()) return;
  if (problems_.size() == 1) throw ConfigError(fmt::format("{}: {}", source_, problems_.front()));
  std::string text = fmt::format("{}: {} problems in the configuration:", source_, problems_.size());
  for (const std::string& p : problems_) text += "\n  " + p;
  throw ConfigError(text);
}

void check_config_depth(const json& j, const std::string& source) {
  if (!j.is_object()) return;  // the reader reports the wrong type
  std::vector<std::pair<const json*, int>> pending;
  for (auto it = j.begin(); it != j.end(); ++it) {
    pending.assign(1, {&it.value(), 2});
    while (!pending.empty()) {
      const auto [v, depth] = pending.back();
      pending.pop_back();
      if (!v->is_structured()) continue;
      if (depth > kMaxConfigDepth) {
        throw ConfigError(fmt::format("{}: \"{}\" holds objects and arrays nested deeper than {} levels", source,
                                      brief(it.key()), kMaxConfigDepth));
      }
      for (const json& child : *v) pending.emplace_back(&child, depth + 1);
    }
  }
}

json parse_config_text(const std::string& text, const std::string& source) {
  if (const auto at = json_too_deep_at(text, kMaxConfigDepth)) {
    throw ConfigError(
        fmt::format("{}: objects and arrays nest deeper than {} levels at byte {}", source, kMaxConfigDepth, *at));
  }
  // One frame per open object or array: the key last read (objects) or the
  // index of the element being read (arrays). The dotted path is put
  // together only for a message.
  struct Frame {
    bool array = false;
    std::size_t index = 0;
    std::string last;
    std::set<std::string> keys;
  };
  std::vector<Frame> stack;
  auto path = [&]() {
    std::string p;
    for (const Frame& f : stack) {
      if (f.array) {
        p += fmt::format("[{}]", f.index);
      } else if (!f.last.empty()) {
        p += (p.empty() ? "" : ".") + f.last;
      }
    }
    return p.empty() ? std::string("<top level>") : p;
  };
  auto next_element = [&]() {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
  };
  auto cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        stack.push_back(Frame{event == json::parse_event_t::array_start, 0, "", {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!stack.empty()) stack.pop_back();
        next_element();
        break;
      case json::parse_event_t::key: {
        Frame& top = stack.back();
        top.last = parsed.get<std::string>();
        if (!top.keys.insert(top.last).second) {
          throw ConfigError(
              fmt::format("{}: key \"{}\" appears twice; each key may be given once", source, brief(path())));
        }
        break;
      }
      case json::parse_event_t::value:
        next_element();
        break;
    }
    return true;
  };
  try {
    return json::parse(text, cb);
  } catch (const json::exception& e) {
    const JsonTextError err = describe_json_error(text, e);
    if (err.number_overflow) {
      // The parse stopped at the value of the key path() names.
      throw ConfigError(fmt::format("{}: \"{}\": {} (at byte {})", source, brief(path()), err.reason, err.byte));
    }
    throw ConfigError(fmt::format("{}: invalid JSON at byte {}: {}", source, err.byte, err.reason));
  }
}

}  // namespace zeroshard
