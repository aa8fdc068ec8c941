// Writing safetensors files (https://github.com/huggingface/safetensors):
// the header planning shared by a checkpoint's consolidated weights
// (Engine::save_checkpoint with
// zero_optimization.stage3_gather_16bit_weights_on_model_save,
// runtime/engine/engine_save.cpp) and the fp32 export tool zs_ckpt_export
// (tools/checkpoint/safetensors_export.h).
//
// [Note: safetensors layout]
// A file is an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"<key>": "<string>", ...},
//    "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
// padded with spaces to a multiple of 8 (so the data starts 8-byte
// aligned), then the tensors' bytes, little-endian, in header order with no
// gaps: data_offsets are relative to the start of the data section and tile
// it exactly. Metadata values are strings, as safetensors requires. The
// writers here list the tensors in the model's order (units, then
// parameters in declaration order), the order of a checkpoint manifest.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace zeroshard {

struct Manifest;

/// safetensors' name of a dtype: "F32", "F64", "BF16" or "F16".
const char* safetensors_dtype_name(DType t);

/// One tensor of a planned file. Plain value type.
struct SafetensorsEntry {
  std::string name;                 ///< the header key (not "__metadata__")
  DType dtype = DType::f32;         ///< element type of its bytes
  std::vector<std::int64_t> shape;  ///< row-major; zeros allowed
  std::uint64_t numel = 0;          ///< product of shape
  std::uint64_t begin = 0;          ///< set by plan_safetensors: first byte, relative to the data section
  std::uint64_t end = 0;            ///< set by plan_safetensors: one past its last byte (begin + numel x size)
};

/// The layout of one safetensors file. Plain value type.
struct SafetensorsPlan {
  std::vector<SafetensorsEntry> tensors;  ///< in file order, offsets filled in
  std::string header;                     ///< the JSON, space-padded to a multiple of 8 bytes
  std::uint64_t data_bytes = 0;           ///< sum of the tensors' bytes
  std::uint64_t largest_bytes = 0;        ///< bytes of the largest tensor
  /// Bytes of the whole file: the 8-byte length, the header, the data.
  std::uint64_t file_bytes() const { return 8 + header.size() + data_bytes; }
};

/// The __metadata__ entries of a file, in order (key, string value).
using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

/// Lays out `tensors` in the given order (data_offsets tiling the data
/// section from 0) and builds the padded header (nlohmann-json, keys in
/// that order after __metadata__). Throws IoError when a tensor is named
/// "__metadata__" (safetensors reserves that key) or two tensors share a
/// name. Thread safe (no shared state).
SafetensorsPlan plan_safetensors(const SafetensorsMetadata& metadata, std::vector<SafetensorsEntry> tensors);

/// The parameters of checkpoint manifest `m` (validated by Manifest::read
/// or built by a save) as tensors of dtype `t`, in model order, with the
/// metadata "format": "pt", "tag", "optimizer_step", "world_size", "stage",
/// "compute_dtype" (from `m`), then `extra`. Throws IoError as
/// plan_safetensors.
SafetensorsPlan plan_checkpoint_safetensors(const Manifest& m, DType t, const SafetensorsMetadata& extra = {});

/// The metadata a save adds to the consolidated weights of checkpoint
/// manifest `m`: tp_size and tp_rank when `m` was saved on a mesh, none
/// otherwise. Pure.
SafetensorsMetadata mesh_safetensors_metadata(const Manifest& m);

/// The first bytes of the file of `plan`: the header length (8 bytes,
/// little-endian) and the padded header. The tensors' bytes follow, in
/// plan order. Pure.
std::string safetensors_prefix(const SafetensorsPlan& plan);

}  // namespace zeroshard
