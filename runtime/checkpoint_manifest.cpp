#include "runtime/checkpoint_manifest.h"

#include <zlib.h>

#include <limits>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/checkpoint_files.h"
#include "runtime/json_text.h"
#include "runtime/manifest_checks.h"

namespace zeroshard {

using nlohmann::json;

std::vector<std::string> checkpoint_tensor_names(const OptimizerHyper& hyper) {
  std::vector<std::string> names = {"master"};
  for (int k = 0; k < optimizer_state_count(hyper); ++k) names.emplace_back(optimizer_state_name(hyper, k));
  return names;
}

std::string rank_file_name(int r) { return fmt::format("rank-{:05d}.bin", r); }

json Manifest::to_json() const {
  json units_j = json::array();
  for (const auto& u : units) {
    json params_j = json::array();
    for (const auto& p : u.params) {
      params_j.push_back({{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"offset", p.offset},
                          {"group", p.group}});
      if (mesh.recorded) params_j.back()["tp_split_dim"] = p.tp_split_dim;
    }
    units_j.push_back({{"name", u.name}, {"numel", u.numel}, {"padded", u.padded}, {"shard", u.shard},
                       {"params", params_j}, {"state_format", u.state_format}});
  }
  json files_j = json::array();
  for (const auto& f : files) {
    files_j.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"crc32", f.crc32}});
  }
  json out{{"format", "zeroshard-checkpoint"},
              {"format_version", format_version},
              {"tag", tag},
              {"world_size", world_size},
              {"stage", stage},
              {"compute_dtype", compute_dtype},
              {"tensors", tensors},
              {"units", units_j},
              {"files", files_j},
              {"optimizer_steps", optimizer_steps},
              {"micro_steps", micro_steps},
              {"loss_scaler",
               {{"scale", scaler.scale},
                {"clean_steps", scaler.clean_steps},
                {"hysteresis_left", scaler.hysteresis_left},
                {"overflows", scaler.overflows}}},
              {"optimizer", optimizer},
              {"param_groups", param_groups},
              {"scheduler", scheduler},
              {"client_state", client_state}};
  out["state_format"] = {{"type", states.type}};
  if (states.type == "8bit") {
    out["state_format"]["block_size"] = states.block_size;
    out["state_format"]["min_8bit_size"] = states.min_8bit_size;
  }
  if (mesh.recorded) {
    out["mesh"] = {{"dp", mesh.dp}, {"tp", mesh.tp}, {"tp_rank", mesh.tp_rank}};
    if (mesh.pp > 1) {
      out["mesh"]["pp"] = mesh.pp;
      out["mesh"]["pp_rank"] = mesh.pp_rank;
    }
  }
  if (weights.recorded) {
    out["weights_file"] = {{"name", weights.name}, {"dtype", weights.dtype}, {"bytes", weights.bytes},
                           {"crc32", weights.crc32}};
  }
  return out;
}

namespace {

std::uint32_t crc_of(const std::string& text) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (std::size_t off = 0; off < text.size(); off += (1u << 30)) {
    const std::size_t len = std::min<std::size_t>(text.size() - off, 1u << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(text.data() + off), static_cast<uInt>(len));
  }
  return static_cast<std::uint32_t>(crc);
}

// v as an integer of type T, or IoError "<path>: <field>: <value> is not
// an integer in [lo, hi]". nlohmann-json's get<T>() would convert a float
// (1e300: undefined behaviour) or wrap an integer (2^32 + 1 as int is 1)
// without a word.
template <class T>
T integer_value(const json& v, const char* field, const std::string& path) {
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  bool fits = false;
  if (v.is_number_unsigned()) {
    fits = std::cmp_less_equal(v.get<std::uint64_t>(), hi);
  } else if (v.is_number_integer()) {
    const auto x = v.get<std::int64_t>();
    fits = std::cmp_greater_equal(x, lo) && std::cmp_less_equal(x, hi);
  }
  if (!fits) {
    const std::string shown = v.dump();
    throw IoError(fmt::format("{}: {}: {} is not an integer in [{}, {}]", path, field,
                              shown.size() <= 40 ? shown : shown.substr(0, 40) + "...", lo, hi));
  }
  return v.get<T>();
}

// obj[key] (json::out_of_range when absent) as integer_value reads it.
template <class T>
T integer(const json& obj, const char* key, const std::string& path) {
  return integer_value<T>(obj.at(key), key, path);
}

}  // namespace

std::string Manifest::to_text() const {
  json j = to_json();
  j["manifest_crc32"] = crc_of(j.dump());
  return j.dump(2) + "\n";
}

Manifest Manifest::from_json(const json& j, const std::string& path) {
  Manifest m;
  try {
    if (j.value("format", "") != "zeroshard-checkpoint") {
      throw IoError(fmt::format("{}: not a zeroshard checkpoint manifest (\"format\" is missing or wrong)", path));
    }
    m.format_version = integer<int>(j, "format_version", path);
    if (m.format_version < kOldestCheckpointFormatVersion || m.format_version > kCheckpointFormatVersion) {
      throw IoError(fmt::format(
          "{}: checkpoint format version {} is not supported by this build (it reads versions {} to {})", path,
          m.format_version, kOldestCheckpointFormatVersion, kCheckpointFormatVersion));
    }
    json body = j;
    body.erase("manifest_crc32");
    m.body_crc32 = crc_of(body.dump());
    if (m.format_version >= 2) {
      const std::uint32_t want = integer<std::uint32_t>(j, "manifest_crc32", path);
      if (m.body_crc32 != want) {
        throw IoError(fmt::format("{}: manifest_crc32: the body's CRC-32 is {:08x}, the manifest says {:08x} (the "
                                  "manifest was edited or corrupted)",
                                  path, m.body_crc32, want));
      }
    }
    m.tag = j.at("tag").get<std::string>();
    m.world_size = integer<int>(j, "world_size", path);
    m.stage = integer<int>(j, "stage", path);
    m.compute_dtype = j.at("compute_dtype").get<std::string>();
    m.tensors = j.at("tensors").get<std::vector<std::string>>();
    for (const auto& uj : j.at("units")) {
      ManifestUnit u;
      u.name = uj.at("name").get<std::string>();
      u.numel = integer<std::uint64_t>(uj, "numel", path);
      u.padded = integer<std::uint64_t>(uj, "padded", path);
      u.shard = integer<std::uint64_t>(uj, "shard", path);
      for (const auto& pj : uj.at("params")) {
        std::vector<std::int64_t> shape;
        for (const json& d : pj.at("shape")) shape.push_back(integer_value<std::int64_t>(d, "shape", path));
        u.params.push_back(ManifestParam{.name = pj.at("name").get<std::string>(),
                                         .shape = std::move(shape),
                                         .numel = integer<std::uint64_t>(pj, "numel", path),
                                         .offset = integer<std::uint64_t>(pj, "offset", path),
                                         .group = integer<int>(pj, "group", path),
                                         .tp_split_dim = pj.contains("tp_split_dim")
                                                             ? integer<int>(pj, "tp_split_dim", path)
                                                             : -1});
      }
      if (m.format_version >= 3) u.state_format = uj.at("state_format").get<std::string>();
      m.units.push_back(std::move(u));
    }
    if (m.format_version >= 3) {
      const json& sj = j.at("state_format");
      m.states.type = sj.at("type").get<std::string>();
      if (m.states.type == "8bit") {
        m.states.block_size = integer<std::uint64_t>(sj, "block_size", path);
        m.states.min_8bit_size = integer<std::uint64_t>(sj, "min_8bit_size", path);
      }
    }
    for (const auto& fj : j.at("files")) {
      m.files.push_back(ManifestFile{.name = fj.at("name").get<std::string>(),
                                     .rank = integer<int>(fj, "rank", path),
                                     .bytes = integer<std::uint64_t>(fj, "bytes", path),
                                     .crc32 = integer<std::uint32_t>(fj, "crc32", path)});
    }
    m.optimizer_steps = integer<std::int64_t>(j, "optimizer_steps", path);
    m.micro_steps = integer<std::int64_t>(j, "micro_steps", path);
    const json& ls = j.at("loss_scaler");
    m.scaler = LossScalerState{.scale = ls.at("scale").get<double>(),
                               .clean_steps = integer<std::int64_t>(ls, "clean_steps", path),
                               .hysteresis_left = integer<int>(ls, "hysteresis_left", path),
                               .overflows = integer<std::int64_t>(ls, "overflows", path)};
    m.optimizer = j.at("optimizer");
    m.param_groups = j.at("param_groups");
    m.scheduler = j.at("scheduler");
    m.client_state = j.value("client_state", json::object());
    m.mesh.dp = m.world_size;
    if (j.contains("mesh")) {
      const json& mj = j.at("mesh");
      m.mesh = ManifestMesh{.recorded = true,
                            .dp = integer<int>(mj, "dp", path),
                            .tp = integer<int>(mj, "tp", path),
                            .tp_rank = integer<int>(mj, "tp_rank", path),
                            .pp = mj.contains("pp") ? integer<int>(mj, "pp", path) : 1,
                            .pp_rank = mj.contains("pp_rank") ? integer<int>(mj, "pp_rank", path) : 0};
      if (m.mesh.dp != m.world_size || m.mesh.tp < 1 || m.mesh.tp > (1 << 24) || m.mesh.tp_rank < 0 ||
          m.mesh.tp_rank >= m.mesh.tp) {
        throw IoError(fmt::format("{}: mesh: dp {} x tp {} (tp_rank {}) does not fit world_size {}", path, m.mesh.dp,
                                  m.mesh.tp, m.mesh.tp_rank, m.world_size));
      }
      if (m.mesh.pp < 1 || m.mesh.pp > (1 << 24) || m.mesh.pp_rank < 0 || m.mesh.pp_rank >= m.mesh.pp) {
        throw IoError(fmt::format("{}: mesh: pp_rank {} is outside [0, pp {})", path, m.mesh.pp_rank, m.mesh.pp));
      }
    }
    if (j.contains("weights_file")) {
      const json& wj = j.at("weights_file");
      m.weights = ManifestWeights{.recorded = true,
                                  .name = wj.at("name").get<std::string>(),
                                  .dtype = wj.at("dtype").get<std::string>(),
                                  .bytes = integer<std::uint64_t>(wj, "bytes", path),
                                  .crc32 = integer<std::uint32_t>(wj, "crc32", path)};
      if (m.weights.name != kWeightsFileName || m.weights.dtype != m.compute_dtype) {
        throw IoError(fmt::format("{}: weights_file: \"{}\" of dtype \"{}\"; a save writes \"{}\" in the compute "
                                  "dtype \"{}\"",
                                  path, m.weights.name.substr(0, 40), m.weights.dtype.substr(0, 16), kWeightsFileName,
                                  m.compute_dtype.substr(0, 16)));
      }
    }
    for (std::size_t u = 0; u < m.units.size(); ++u) {
      for (std::size_t i = 0; i < m.units[u].params.size(); ++i) {
        const ManifestParam& p = m.units[u].params[i];
        if (p.tp_split_dim < -1 || p.tp_split_dim >= static_cast<int>(p.shape.size()) ||
            (!m.mesh.recorded && p.tp_split_dim != -1)) {
          throw IoError(fmt::format("{}: units[{}].params[{}].tp_split_dim: {} for a {}-dimensional shape{}", path, u,
                                    i, p.tp_split_dim, p.shape.size(), m.mesh.recorded ? "" : " without a mesh"));
        }
      }
    }
  } catch (const json::exception& e) {
    throw IoError(fmt::format("{}: malformed checkpoint manifest: {}", path, e.what()));
  }
  validate_manifest(m, path);
  return m;
}

Manifest Manifest::read(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  json j;
  const std::string text = read_text_file(path);
  check_json_depth(text, path);
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range 406 for a number like 1e400
    const JsonTextError err = describe_json_error(text, e);
    throw IoError(fmt::format("{}: invalid JSON at byte {}: {}", path, err.byte, err.reason));
  }
  return from_json(j, path);
}

std::uint64_t Manifest::tensor_bytes(std::size_t u, std::size_t t) const {
  const std::uint64_t shard = units[u].shard;
  if (t > 0 && units[u].state_format == "bf16") return shard * sizeof(std::uint16_t);
  if (t == 0 || units[u].state_format != "8bit") return shard * sizeof(float);
  return shard + (shard + states.block_size - 1) / states.block_size * sizeof(float);
}

std::uint64_t Manifest::file_offset(std::size_t u, std::size_t t) const {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < u; ++i) {
    for (std::size_t k = 0; k < tensors.size(); ++k) off += tensor_bytes(i, k);
  }
  if (u < units.size()) {
    for (std::size_t k = 0; k < t; ++k) off += tensor_bytes(u, k);
  }
  return off;
}

std::uint64_t Manifest::file_bytes() const { return file_offset(units.size(), 0); }

}  // namespace zeroshard
