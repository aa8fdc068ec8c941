// safetensors header planning; see [Note: safetensors layout] in
// runtime/checkpoint/safetensors_writer.h.
#include "runtime/checkpoint/safetensors_writer.h"

#include <algorithm>
#include <bit>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; its writers copy the engine's bytes as they are");

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::u8: return "U8";
  }
  throw InvariantError(fmt::format("no safetensors name for dtype {}", static_cast<int>(t)));
}

SafetensorsPlan plan_safetensors(const SafetensorsMetadata& metadata, std::vector<SafetensorsEntry> tensors) {
  SafetensorsPlan plan;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) meta[key] = value;
  header["__metadata__"] = meta;
  std::uint64_t pos = 0;
  for (SafetensorsEntry& t : tensors) {
    if (t.name == "__metadata__") {
      throw IoError("a parameter named \"__metadata__\" cannot be written to safetensors: the format reserves that "
                    "key");
    }
    if (header.contains(t.name)) {
      throw IoError(fmt::format("two tensors named \"{}\": a safetensors header holds each name once", t.name));
    }
    const std::uint64_t bytes = t.numel * dtype_size(t.dtype);
    t.begin = pos;
    t.end = pos + bytes;
    header[t.name] = {
        {"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    pos = t.end;
    plan.largest_bytes = std::max(plan.largest_bytes, bytes);
  }
  plan.tensors = std::move(tensors);
  plan.data_bytes = pos;
  plan.header = header.dump();
  plan.header.resize((plan.header.size() + 7) / 8 * 8, ' ');
  return plan;
}

SafetensorsPlan plan_checkpoint_safetensors(const Manifest& m, DType t, const SafetensorsMetadata& extra) {
  SafetensorsMetadata metadata = {{"format", "pt"},
                                  {"tag", m.tag},
                                  {"optimizer_step", std::to_string(m.optimizer_steps)},
                                  {"world_size", std::to_string(m.world_size)},
                                  {"stage", std::to_string(m.stage)},
                                  {"compute_dtype", m.compute_dtype}};
  metadata.insert(metadata.end(), extra.begin(), extra.end());
  std::vector<SafetensorsEntry> tensors;
  for (const ManifestUnit& u : m.units) {
    for (const ManifestParam& p : u.params) {
      tensors.push_back(SafetensorsEntry{.name = p.name, .dtype = t, .shape = p.shape, .numel = p.numel});
    }
  }
  return plan_safetensors(metadata, std::move(tensors));
}

SafetensorsMetadata mesh_safetensors_metadata(const Manifest& m) {
  if (!m.mesh.recorded) return {};
  return {{"tp_size", std::to_string(m.mesh.tp)}, {"tp_rank", std::to_string(m.mesh.tp_rank)}};
}

std::string safetensors_prefix(const SafetensorsPlan& plan) {
  std::string out(8, '\0');
  const auto n = static_cast<std::uint64_t>(plan.header.size());
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + plan.header;
}

}  // namespace zeroshard
