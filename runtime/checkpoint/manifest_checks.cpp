// Manifest::from_json and Manifest::read (runtime/checkpoint/checkpoint_manifest.h)
// with the checks every reader runs; see runtime/checkpoint/manifest_checks.h.
#include "runtime/checkpoint/manifest_checks.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/quoted.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/config/json_text.h"

namespace zeroshard {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& why) {
  throw IoError(fmt::format("{}: {}: {}", path, field, why));
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& path, const std::string& field) {
  if (a > UINT64_MAX - b) bad(path, field, fmt::format("{} + {} overflows 64 bits", a, b));
  return a + b;
}


std::uint32_t crc_of(const std::string& text) { return crc32_update(0, text.data(), text.size()); }

// v as an integer of type T, or IoError "<path>: <field>: <value> is out of
// range [lo, hi]" for a whole number T cannot hold (one beyond 2^64 - 1 is
// read as a double: a whole number all the same), "... is not an integer
// in [lo, hi]" for anything else. nlohmann-json's get<T>() would convert a
// float (1e300: undefined behaviour) or wrap an integer (2^32 + 1 as int is
// 1) without a word.
template <class T>
T integer_value(const json& v, const char* field, const std::string& path) {
  constexpr T lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
  bool fits = false, whole = v.is_number_integer();
  if (v.is_number_unsigned()) {
    fits = std::cmp_less_equal(v.get<std::uint64_t>(), hi);
  } else if (v.is_number_integer()) {
    const auto x = v.get<std::int64_t>();
    fits = std::cmp_greater_equal(x, lo) && std::cmp_less_equal(x, hi);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    whole = std::isfinite(d) && d == std::floor(d) &&
            (d < static_cast<double>(lo) || d >= static_cast<double>(hi) + 1.0);
  }
  if (!fits) {
    throw IoError(fmt::format("{}: {}: {} {} [{}, {}]", path, field, brief(v.dump()),
                              whole ? "is out of range" : "is not an integer in", lo, hi));
  }
  return v.get<T>();
}

// obj[key] (json::out_of_range when absent) as integer_value reads it.
template <class T>
T integer(const json& obj, const char* key, const std::string& path) {
  return integer_value<T>(obj.at(key), key, path);
}

}  // namespace

std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& path, const std::string& field) {
  if (b != 0 && a > UINT64_MAX / b) bad(path, field, fmt::format("{} x {} overflows 64 bits", a, b));
  return a * b;
}

void check_json_depth(std::string_view text, const std::string& path, int max_depth) {
  if (const auto at = json_too_deep_at(text, max_depth)) {
    throw IoError(fmt::format("{}: JSON nested deeper than {} levels at byte {} (a manifest needs 5; "
                              "client_state may use the rest)",
                              path, max_depth, *at));
  }
}

void validate_manifest(const Manifest& m, const std::string& path) {
  if (m.tag.empty() || m.tag.find('/') != std::string::npos) {
    bad(path, "tag", fmt::format("\"{}\" is not a directory name", m.tag));
  }
  if (m.world_size < 1 || m.world_size > (1 << 24)) {
    bad(path, "world_size", fmt::format("{} is not a number of ranks (1 to 2^24)", m.world_size));
  }
  if (m.stage < 0 || m.stage > 3) bad(path, "stage", fmt::format("{} is not a ZeRO stage (0-3)", m.stage));
  if (m.compute_dtype != "f32" && m.compute_dtype != "bf16" && m.compute_dtype != "f16") {
    bad(path, "compute_dtype", fmt::format("\"{}\" is not f32, bf16 or f16", m.compute_dtype));
  }
  if (m.tensors.empty() || m.tensors.front() != "master") {
    bad(path, "tensors", "the first per-unit tensor must be \"master\" (the fp32 parameter values)");
  }
  const std::set<std::string> states = {"exp_avg", "exp_avg_sq", "momentum_buffer", "sum"};
  std::set<std::string> seen_tensors;
  for (std::size_t t = 1; t < m.tensors.size(); ++t) {
    if (!states.count(m.tensors[t]) || !seen_tensors.insert(m.tensors[t]).second) {
      bad(path, fmt::format("tensors[{}]", t),
          fmt::format("\"{}\" is not an optimizer state (exp_avg, exp_avg_sq, momentum_buffer, sum) or is listed "
                      "twice",
                      m.tensors[t]));
    }
  }
  // The state format (version 3; earlier versions read as fp32).
  if (m.states.type != "fp32" && m.states.type != "8bit" && m.states.type != "bf16") {
    bad(path, "state_format.type", fmt::format("\"{}\" is not fp32, 8bit or bf16", m.states.type.substr(0, 16)));
  }
  if (m.states.type == "bf16" && m.tensors != std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}) {
    bad(path, "state_format", "bf16 states are Adam's exp_avg and exp_avg_sq only");
  }
  if (m.states.type == "8bit") {
    const std::uint64_t b = m.states.block_size;
    if (b < 64 || b > 4096 || (b & (b - 1)) != 0) {
      bad(path, "state_format.block_size", fmt::format("{} is not a power of two from 64 to 4096", b));
    }
    if (m.tensors != std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"}) {
      bad(path, "state_format", "8-bit states are Adam's exp_avg and exp_avg_sq only");
    }
  }
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    const std::string& f = m.units[u].state_format;
    // A unit holds fp32 states or the configured format (8-bit units
    // below min_8bit_size keep fp32).
    if (f != "fp32" && (f != m.states.type || (f != "8bit" && f != "bf16"))) {
      bad(path, fmt::format("units[{}].state_format", u),
          fmt::format("\"{}\" is not fp32{}", f.substr(0, 16),
                      m.states.type != "fp32" ? " or " + m.states.type.substr(0, 16) : ""));
    }
  }
  const auto ws = static_cast<std::uint64_t>(m.world_size);
  const std::uint64_t quantum = ws * kShardAlignElements;
  const std::size_t ngroups = m.param_groups.is_array() ? m.param_groups.size() : 0;
  std::set<std::string> unit_names, param_names;
  std::uint64_t shard_sum = 0;
  for (std::size_t u = 0; u < m.units.size(); ++u) {
    const ManifestUnit& unit = m.units[u];
    const std::string uf = fmt::format("units[{}]", u);
    if (unit.name.empty() || !unit_names.insert(unit.name).second) {
      bad(path, uf + ".name", fmt::format("\"{}\" is empty or names two units", unit.name));
    }
    const std::uint64_t padded = unit.numel == 0 ? 0
                                                 : checked_mul((unit.numel - 1) / quantum + 1, quantum, path,
                                                               uf + ".numel");
    if (unit.padded != padded || unit.shard != padded / ws) {
      bad(path, uf, fmt::format("unit \"{}\": padded {} and shard {} do not follow from numel {} on {} ranks "
                                "(expected padded {}, shard {})",
                                unit.name, unit.padded, unit.shard, unit.numel, m.world_size, padded, padded / ws));
    }
    shard_sum = checked_add(shard_sum, unit.shard, path, uf + ".shard");
    std::uint64_t next = 0;  // where the next parameter must start
    for (std::size_t k = 0; k < unit.params.size(); ++k) {
      const ManifestParam& p = unit.params[k];
      const std::string pf = fmt::format("{}.params[{}]", uf, k);
      if (p.name.empty() || !param_names.insert(p.name).second) {
        bad(path, pf + ".name", fmt::format("\"{}\" is empty or names two parameters", p.name));
      }
      std::uint64_t n = 1;
      for (std::size_t d = 0; d < p.shape.size(); ++d) {
        if (p.shape[d] < 0) {
          bad(path, fmt::format("{}.shape[{}]", pf, d), fmt::format("{} is negative", p.shape[d]));
        }
        n = checked_mul(n, static_cast<std::uint64_t>(p.shape[d]), path, pf + ".shape");
      }
      if (n != p.numel) {
        bad(path, pf + ".numel",
            fmt::format("parameter \"{}\": numel {} is not the product of its shape ({})", p.name, p.numel, n));
      }
      if (p.offset != next) {
        bad(path, pf + ".offset",
            fmt::format("parameter \"{}\" starts at {}, but the parameters before it in unit \"{}\" end at {} "
                        "(offsets must tile the unit in declaration order)",
                        p.name, p.offset, unit.name, next));
      }
      if (p.numel > unit.numel - next) {
        bad(path, pf + ".numel",
            fmt::format("parameter \"{}\" ({} elements at offset {}) runs past the end of unit \"{}\" ({} elements)",
                        p.name, p.numel, p.offset, unit.name, unit.numel));
      }
      next += p.numel;
      if (p.group < 0 || (ngroups > 0 && static_cast<std::size_t>(p.group) >= ngroups)) {
        bad(path, pf + ".group", fmt::format("{} is not one of the {} param_groups", p.group, ngroups));
      }
    }
    if (next != unit.numel) {
      bad(path, uf + ".numel",
          fmt::format("unit \"{}\" has numel {} but its parameters hold {} elements", unit.name, unit.numel, next));
    }
  }
  // fp32 bounds every format (8-bit: 1 + 4 / block <= 4 bytes per element),
  // so once the fp32 size fits, the file's size in its format does too.
  const std::uint64_t fp32_bytes = checked_mul(checked_mul(shard_sum, m.tensors.size(), path, "units"),
                                               sizeof(float), path, "units");
  if (fp32_bytes > static_cast<std::uint64_t>(INT64_MAX)) bad(path, "units", "a rank file would exceed 2^63 bytes");
  const std::uint64_t bytes = m.file_bytes();
  if (m.files.size() != ws) {
    bad(path, "files", fmt::format("lists {} rank files for world size {}", m.files.size(), m.world_size));
  }
  for (std::size_t q = 0; q < m.files.size(); ++q) {
    const ManifestFile& f = m.files[q];
    const std::string ff = fmt::format("files[{}]", q);
    if (f.rank != static_cast<int>(q) || f.name != rank_file_name(static_cast<int>(q))) {
      bad(path, ff, fmt::format("entry {} is \"{}\" of rank {}; expected \"{}\" of rank {} (files are in rank order)",
                                q, f.name, f.rank, rank_file_name(static_cast<int>(q)), q));
    }
    if (f.bytes != bytes) {
      bad(path, ff + ".bytes", fmt::format("{} bytes, but the unit layout implies {}", f.bytes, bytes));
    }
  }
  if (m.optimizer_steps < 0) bad(path, "optimizer_steps", fmt::format("{} is negative", m.optimizer_steps));
  if (m.micro_steps < m.optimizer_steps) {
    bad(path, "micro_steps", fmt::format("{} is fewer than optimizer_steps ({})", m.micro_steps, m.optimizer_steps));
  }
  if (!(m.scaler.scale > 0.0) || !std::isfinite(m.scaler.scale)) {
    bad(path, "loss_scaler.scale", fmt::format("{} is not a positive finite number", m.scaler.scale));
  }
  if (m.scaler.clean_steps < 0 || m.scaler.hysteresis_left < 0 || m.scaler.overflows < 0) {
    bad(path, "loss_scaler", "clean_steps, hysteresis_left and overflows must be >= 0");
  }
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
    if (j.contains("model")) {
      const json& mj = j.at("model");
      m.model = ManifestModel{.recorded = true, .config = mj.at("config"),
                              .fingerprint = mj.at("fingerprint").get<std::string>()};
      if (m.model.fingerprint.size() != 8 ||
          m.model.fingerprint.find_first_not_of("0123456789abcdef") != std::string::npos) {
        throw IoError(fmt::format("{}: model.fingerprint: \"{}\" is not 8 lower-case hex digits", path,
                                  m.model.fingerprint.substr(0, 40)));
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

}  // namespace zeroshard
