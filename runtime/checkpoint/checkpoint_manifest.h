// The checkpoint manifest: what a sharded checkpoint holds and how its rank
// files are laid out. Format documented in docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optimizer/optimizer.h"
#include "optimizer/loss_scaler.h"
#include "optimizer/state_format.h"
#include "runtime/sharding/flat_layout.h"

namespace zeroshard {

/// Version written by this build. Version 2 added `manifest_crc32`,
/// version 3 the optimizer state format (`state_format` at the top and per
/// unit; 8-bit states stored as codes and absmax, bf16 states as bf16
/// values: a reader without bf16 support refuses "bf16"); this build also reads
/// versions 1 and 2 (all states fp32, otherwise the same format); any other
/// version is an error.
inline constexpr int kCheckpointFormatVersion = 3;
/// Oldest version this build reads.
inline constexpr int kOldestCheckpointFormatVersion = 1;

/// One parameter as saved.
struct ManifestParam {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t numel = 0;
  std::uint64_t offset = 0;  ///< element offset in its unit's flat buffer
  int group = 0;
  /// Tensor-parallel split dimension of the full tensor (-1: replicated or
  /// no mesh); `shape` is then the saving tp rank's slice. Written only with
  /// a mesh (`mesh` below).
  int tp_split_dim = -1;
};

/// The device mesh a checkpoint was saved on (comm/mesh.h). Manifests
/// without the `mesh` key (no mesh, or written before it existed) read as
/// dp = world_size, tp = 1, pp = 1; without `pp` / `pp_rank` as pp = 1.
struct ManifestMesh {
  bool recorded = false;  ///< the manifest has a `mesh` key
  int dp = 1;             ///< data-parallel size (= world_size)
  int tp = 1;             ///< tensor-parallel size
  int tp_rank = 0;        ///< the tp rank whose slices this checkpoint holds
  int pp = 1;             ///< pipeline stages (key absent: 1)
  int pp_rank = 0;        ///< the pipeline stage whose layers this checkpoint holds
};

/// The model as the saving engine saw it (manifest key `model`, written by
/// every save of this build; absent in older manifests: recorded = false).
/// A load compares it with its own engine's ([Note: mesh checkpoint commit]
/// in runtime/engine/engine_save.cpp).
struct ManifestModel {
  bool recorded = false;   ///< the manifest has a `model` key
  nlohmann::json config;   ///< the loop's model configuration (Engine::set_model_config; null: none given)
  std::string fingerprint; ///< 8 hex digits: CRC-32 of the units, parameters, shapes, tp layouts and config
};

/// One unit's flat-buffer layout at save time.
struct ManifestUnit {
  std::string name;
  std::uint64_t numel = 0, padded = 0, shard = 0;
  std::vector<ManifestParam> params;
  /// How its optimizer states are stored: "fp32", "8bit" (codes and
  /// absmax, blocks of ManifestStates::block_size per shard) or "bf16"
  /// (bf16 values). Versions 1 and 2: "fp32".
  std::string state_format = "fp32";
};

/// The optimizer state format the checkpoint was saved with (manifest key
/// `state_format`; absent before version 3: fp32).
struct ManifestStates {
  std::string type = "fp32";       ///< "fp32", "8bit" or "bf16" (the configured format)
  std::uint64_t block_size = 0;    ///< 8-bit: elements per absmax block
  std::uint64_t min_8bit_size = 0; ///< 8-bit: units below it hold fp32 states
};

/// One rank file.
struct ManifestFile {
  std::string name;  ///< relative to the checkpoint directory
  int rank = 0;
  std::uint64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

/// The consolidated weights file of a checkpoint saved with
/// zero_optimization.stage3_gather_16bit_weights_on_model_save
/// (docs/checkpoint-format.md, "Consolidated weights"). A manifest without
/// the `weights_file` key (the knob off, or written before it existed)
/// reads as recorded = false.
struct ManifestWeights {
  bool recorded = false;    ///< the manifest has a `weights_file` key
  std::string name;         ///< kWeightsFileName, relative to the checkpoint directory
  std::string dtype;        ///< the dtype it holds: the manifest's compute_dtype
  std::uint64_t bytes = 0;  ///< size of the file
  std::uint32_t crc32 = 0;  ///< CRC-32 (zlib) of the whole file
};

/// Name of the consolidated weights file in a checkpoint directory.
inline constexpr const char* kWeightsFileName = "model.safetensors";

/// The parsed manifest.json. Plain value type.
struct Manifest {
  int format_version = kCheckpointFormatVersion;
  std::string tag;
  int world_size = 1;
  int stage = 0;
  std::string compute_dtype = "f32";
  std::vector<std::string> tensors;  ///< per-unit arrays in each rank file, in order
  std::vector<ManifestUnit> units;
  std::vector<ManifestFile> files;
  std::int64_t optimizer_steps = 0;
  std::int64_t micro_steps = 0;
  LossScalerState scaler;
  nlohmann::json optimizer;     ///< hyper-parameters (informational)
  nlohmann::json param_groups;  ///< [{name, lr, weight_decay}]
  nlohmann::json scheduler;     ///< {type, position}
  nlohmann::json client_state;  ///< the training loop's own state (data position, RNG, ...)
  ManifestMesh mesh;            ///< the mesh at save time
  ManifestWeights weights;      ///< the consolidated weights file, if saved
  ManifestStates states;        ///< the optimizer state format
  ManifestModel model;          ///< the model's configuration and fingerprint

  /// The manifest as JSON, without `manifest_crc32`.
  nlohmann::json to_json() const;
  /// The text of manifest.json: to_json() plus `manifest_crc32`, the
  /// CRC-32 (zlib) of to_json().dump() (compact, keys sorted), indented.
  std::string to_text() const;
  /// Parses and validates; `path` names the manifest in errors. Throws
  /// IoError for an unsupported format version, a `manifest_crc32` that
  /// does not match the body (version 2), a malformed manifest, a
  /// `weights_file` not named kWeightsFileName or of another dtype than
  /// compute_dtype, or any field validate_manifest
  /// (runtime/checkpoint/manifest_checks.h) refuses.
  static Manifest from_json(const nlohmann::json& j, const std::string& path);
  /// Reads and validates <dir>/manifest.json (nesting depth capped first:
  /// check_json_depth). Throws IoError naming the file: for text that is
  /// not JSON or holds a number a double cannot hold (1e400), with the
  /// byte offset (runtime/config/json_text.h); otherwise as from_json.
  static Manifest read(const std::string& dir);

  /// CRC-32 of the body as read (to_json().dump() without manifest_crc32),
  /// for every version. Loaders compare it across ranks.
  std::uint32_t body_crc32 = 0;

  /// Bytes of tensor t of unit u in a rank file: `shard` fp32 values for
  /// master and fp32 states; for an 8-bit unit's state, shard code bytes
  /// then ceil(shard / block_size) fp32 absmax values; for a bf16 unit's
  /// state, `shard` bf16 values (2 bytes each).
  std::uint64_t tensor_bytes(std::size_t u, std::size_t t) const;
  /// Byte offset, in old rank `rank`'s file, of tensor `t` of unit `u`:
  /// units follow each other, each holding its tensors.size() tensors of
  /// tensor_bytes each.
  std::uint64_t file_offset(std::size_t u, std::size_t t) const;
  /// Total bytes of one rank file.
  std::uint64_t file_bytes() const;
};

/// The fp32 arrays a checkpoint holds per unit for this optimizer:
/// "master" (the values the optimizer updates), then its state arrays
/// ("exp_avg", "exp_avg_sq" / "momentum_buffer").
std::vector<std::string> checkpoint_tensor_names(const OptimizerHyper& hyper);

/// The model fingerprint of a manifest's `model` key: 8 lower-case hex
/// digits of the CRC-32 (zlib) of the compact JSON of the units' names and
/// element counts, their parameters' names, shapes and (at tensor-parallel
/// size `tp` > 1, where they place the data) tp_split_dim, and `config`
/// (the loop's model configuration). The optimizer state format
/// and the data-parallel sharding are not part of it (a load converts
/// them).
std::string model_fingerprint(const std::vector<ManifestUnit>& units, const nlohmann::json& config, int tp);

/// The units and parameters of `layout` (finalized) as a manifest records
/// them: names, sizes, shapes, groups, each unit's state format
/// `state_format(u)` and each parameter's tensor-parallel split dimension
/// `split_dim(p)` (-1: replicated). Pure.
std::vector<ManifestUnit> layout_manifest_units(const FlatLayout& layout,
                                                const std::function<StateDtype(UnitId)>& state_format,
                                                const std::function<int(ParamId)>& split_dim);

/// Name of rank r's file ("rank-00003.bin").
std::string rank_file_name(int r);

}  // namespace zeroshard
