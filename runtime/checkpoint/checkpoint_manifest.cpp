#include "runtime/checkpoint/checkpoint_manifest.h"

#include <limits>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/durable_file.h"

namespace zeroshard {

using nlohmann::json;

std::vector<std::string> checkpoint_tensor_names(const OptimizerHyper& hyper) {
  std::vector<std::string> names = {"master"};
  for (int k = 0; k < optimizer_state_count(hyper); ++k) names.emplace_back(optimizer_state_name(hyper, k));
  return names;
}

std::string model_fingerprint(const std::vector<ManifestUnit>& units, const json& config, int tp) {
  json j = json::array();
  for (const ManifestUnit& u : units) {
    json params = json::array();
    for (const ManifestParam& p : u.params) params.push_back({p.name, p.shape, tp > 1 ? p.tp_split_dim : -1});
    j.push_back({u.name, u.numel, params});
  }
  const std::string text = json{{"units", j}, {"config", config}}.dump();
  return fmt::format("{:08x}", crc32_update(0, text.data(), text.size()));
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
  if (model.recorded) out["model"] = {{"config", model.config}, {"fingerprint", model.fingerprint}};
  if (weights.recorded) {
    out["weights_file"] = {{"name", weights.name}, {"dtype", weights.dtype}, {"bytes", weights.bytes},
                           {"crc32", weights.crc32}};
  }
  return out;
}


std::string Manifest::to_text() const {
  json j = to_json();
  const std::string body = j.dump();
  j["manifest_crc32"] = crc32_update(0, body.data(), body.size());
  return j.dump(2) + "\n";
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

std::vector<ManifestUnit> layout_manifest_units(const FlatLayout& layout,
                                                const std::function<StateDtype(UnitId)>& state_format,
                                                const std::function<int(ParamId)>& split_dim) {
  std::vector<ManifestUnit> units;
  for (UnitId id = 0; id < static_cast<UnitId>(layout.units().size()); ++id) {
    const UnitInfo& u = layout.unit(id);
    ManifestUnit mu{.name = u.name, .numel = u.numel, .padded = u.padded, .shard = u.shard, .params = {},
                    .state_format = std::string(state_dtype_name(state_format(id)))};
    for (ParamId p : u.params) {
      const ParamInfo& info = layout.param(p);
      mu.params.push_back(ManifestParam{.name = info.name, .shape = info.shape, .numel = info.numel,
                                        .offset = info.offset, .group = info.group, .tp_split_dim = split_dim(p)});
    }
    units.push_back(std::move(mu));
  }
  return units;
}

std::uint64_t Manifest::file_bytes() const { return file_offset(units.size(), 0); }

}  // namespace zeroshard
