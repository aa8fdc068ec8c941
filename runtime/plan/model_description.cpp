// Model descriptions: see runtime/plan/model_description.h.
#include "runtime/plan/model_description.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config_diagnostics.h"

namespace zeroshard {

namespace {

using json = nlohmann::json;

// Element counts of a model stay below 2^63 (as FlatLayout's).
constexpr std::uint64_t kMaxElements = (std::uint64_t{1} << 63) - 1;

// The shape at v; ConfigError naming `where` when it is not an array of
// integers >= 0 or its product exceeds kMaxElements.
std::vector<std::int64_t> read_shape(const json& v, const std::string& where) {
  if (!v.is_array()) throw ConfigError(fmt::format("{}: \"shape\" must be an array of integers", where));
  std::vector<std::int64_t> shape;
  for (const json& d : v) {
    if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<std::uint64_t>() > kMaxElements) ||
        d.get<std::int64_t>() < 0) {
      throw ConfigError(fmt::format("{}: \"shape\" must hold integers in [0, 2^63 - 1], not {}", where, brief(d)));
    }
    shape.push_back(d.get<std::int64_t>());
  }
  std::uint64_t n = 1;
  bool overflow = false;
  for (std::int64_t d : shape) {
    overflow = overflow || __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n) || n > kMaxElements;
  }
  if (overflow && std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    throw ConfigError(fmt::format("{}: shape {} has more than 2^63 - 1 elements", where, brief(v)));
  }
  return shape;
}

// ConfigError when two parameters of `m` share a name (the Engine refuses
// them too), naming both places.
void check_unique_names(const ModelDescription& m, const std::string& source) {
  std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>> seen;
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    for (std::size_t k = 0; k < m.units[u].params.size(); ++k) {
      const std::string& name = m.units[u].params[k].name;
      const auto [it, fresh] = seen.emplace(name, std::pair{u, k});
      if (!fresh) {
        throw ConfigError(fmt::format("{}: parameter \"{}\" appears twice (units[{}].params[{}] and "
                                      "units[{}].params[{}]); each parameter name may be given once",
                                      source, brief(name), it->second.first, it->second.second, u, k));
      }
    }
  }
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

FlatLayout ModelDescription::layout(int world_size) const {
  FlatLayout l;
  for (const UnitDescription& u : units) {
    const UnitId id = l.add_unit(u.name);
    for (const ParamDescription& p : u.params) l.add_param(id, p.name, p.shape, p.group);
  }
  l.finalize(world_size);
  return l;
}

std::uint64_t ModelDescription::parameter_count() const {
  std::uint64_t n = 0;
  for (const UnitDescription& u : units) {
    for (const ParamDescription& p : u.params) {
      std::uint64_t e = 1;
      bool overflow = false;
      for (std::int64_t d : p.shape) {
        overflow = overflow || d < 0 || __builtin_mul_overflow(e, static_cast<std::uint64_t>(d), &e);
      }
      if (std::find(p.shape.begin(), p.shape.end(), 0) != p.shape.end()) continue;
      if (overflow || __builtin_add_overflow(n, e, &n) || n > kMaxElements) {
        throw ConfigError(fmt::format("the model holds more than 2^63 - 1 parameter elements (at parameter \"{}\")",
                                      brief(p.name)));
      }
    }
  }
  return n;
}

int ModelDescription::group_count() const {
  GroupId g = 0;
  for (const UnitDescription& u : units) {
    for (const ParamDescription& p : u.params) g = std::max(g, p.group);
  }
  return g + 1;
}

ModelDescription ModelDescription::from_json(std::string_view text, const std::string& source) {
  // Duplicate keys ("units" twice) are refused, not resolved to the last.
  const json doc = parse_config_text(std::string(text), source);
  if (!doc.is_object() || !doc.contains("units") || !doc["units"].is_array()) {
    throw ConfigError(fmt::format("{}: a model description is an object with a \"units\" array", source));
  }
  ModelDescription m;
  for (std::size_t i = 0; i < doc["units"].size(); ++i) {
    const json& u = doc["units"][i];
    const std::string where = fmt::format("{}: units[{}]", source, i);
    if (!u.is_object() || !u.contains("name") || !u["name"].is_string() || !u.contains("params") ||
        !u["params"].is_array()) {
      throw ConfigError(fmt::format("{}: a unit has a string \"name\" and a \"params\" array", where));
    }
    UnitDescription unit{.name = u["name"].get<std::string>(), .params = {}};
    for (std::size_t k = 0; k < u["params"].size(); ++k) {
      const json& p = u["params"][k];
      const std::string pw = fmt::format("{}.params[{}]", where, k);
      if (!p.is_object() || !p.contains("name") || !p["name"].is_string() || !p.contains("shape")) {
        throw ConfigError(fmt::format("{}: a parameter has a string \"name\" and a \"shape\"", pw));
      }
      ParamDescription param{.name = p["name"].get<std::string>(), .shape = read_shape(p["shape"], pw), .group = 0};
      if (p.contains("group")) {
        if (!p["group"].is_number_integer() || p["group"].get<std::int64_t>() < 0 ||
            p["group"].get<std::int64_t>() > 1'000'000) {
          throw ConfigError(fmt::format("{}: \"group\" must be an integer >= 0", pw));
        }
        param.group = p["group"].get<GroupId>();
      }
      unit.params.push_back(std::move(param));
    }
    m.units.push_back(std::move(unit));
  }
  check_unique_names(m, source);
  (void)m.parameter_count();  // refuses a total beyond 2^63 - 1 elements
  return m;
}

std::string safetensors_unit_of(std::string_view name) {
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = name.find('.', start);
    const std::string_view part = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (all_digits(part)) return std::string(name.substr(0, start + part.size()));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  const std::size_t last = name.rfind('.');
  return std::string(last == std::string_view::npos ? name : name.substr(0, last));
}

ModelDescription ModelDescription::from_safetensors_header(std::string_view text, const std::string& source) {
  // A tensor named twice is refused, not resolved to the last.
  const json doc = parse_config_text(std::string(text), source + " (safetensors header)");
  if (!doc.is_object()) throw ConfigError(fmt::format("{}: the safetensors header is not a JSON object", source));
  struct Tensor {
    std::uint64_t begin = 0;
    std::string name;
    std::vector<std::int64_t> shape;
  };
  std::vector<Tensor> tensors;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const json& v = it.value();
    const std::string where = fmt::format("{}: tensor \"{}\"", source, it.key());
    if (!v.is_object() || !v.contains("shape") || !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2 || !v["data_offsets"][0].is_number_unsigned()) {
      throw ConfigError(fmt::format("{}: needs \"shape\" and \"data_offsets\" [begin, end]", where));
    }
    tensors.push_back(Tensor{v["data_offsets"][0].get<std::uint64_t>(), it.key(), read_shape(v["shape"], where)});
  }
  std::stable_sort(tensors.begin(), tensors.end(), [](const Tensor& a, const Tensor& b) { return a.begin < b.begin; });
  ModelDescription m;
  std::map<std::string, std::size_t> index;
  for (Tensor& t : tensors) {
    const std::string unit = safetensors_unit_of(t.name);
    auto [it, fresh] = index.emplace(unit, m.units.size());
    if (fresh) m.units.push_back(UnitDescription{.name = unit, .params = {}});
    m.units[it->second].params.push_back(ParamDescription{.name = std::move(t.name), .shape = std::move(t.shape)});
  }
  (void)m.parameter_count();  // refuses a total beyond 2^63 - 1 elements
  return m;
}

ModelDescription ModelDescription::from_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  unsigned char len[8] = {};
  if (!in.read(reinterpret_cast<char*>(len), 8)) {
    throw IoError(fmt::format("{}: shorter than a safetensors header length (8 bytes)", path));
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  constexpr std::uint64_t kMaxHeader = 100'000'000;  // safetensors' own limit
  if (n > kMaxHeader) throw ConfigError(fmt::format("{}: safetensors header of {} bytes, more than 100 MB", path, n));
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) {
    throw IoError(fmt::format("{}: shorter than its safetensors header ({} bytes)", path, n));
  }
  return from_safetensors_header(header, path);
}

ModelDescription ModelDescription::from_file(const std::string& path) {
  constexpr std::string_view kExt = ".safetensors";
  if (path.size() >= kExt.size() && path.compare(path.size() - kExt.size(), kExt.size(), kExt) == 0) {
    return from_safetensors(path);
  }
  return from_json(read_text(path), path);
}

ModelDescription ModelDescription::generated(std::uint64_t params, int units) {
  if (units < 1) throw ConfigError(fmt::format("a generated model needs at least 1 unit, not {}", units));
  const auto u = static_cast<std::uint64_t>(units);
  ModelDescription m;
  for (std::uint64_t i = 0; i < u; ++i) {
    const std::uint64_t n = params / u + (i < params % u ? 1 : 0);
    m.units.push_back(UnitDescription{
        .name = fmt::format("unit{}", i),
        .params = {ParamDescription{.name = fmt::format("unit{}.weight", i),
                                    .shape = {static_cast<std::int64_t>(n)}}}});
  }
  return m;
}

}  // namespace zeroshard
