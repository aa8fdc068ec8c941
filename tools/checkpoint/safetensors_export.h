// Consolidating a sharded zeroshard checkpoint into one safetensors file of
// fp32 parameters (the master weights), streamed tensor by tensor. The
// file's layout and header come from runtime/checkpoint/safetensors_writer.h ([Note:
// safetensors layout]): tensors in the model's order (units, then
// parameters within a unit). Details: docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/checkpoint/safetensors_writer.h"

namespace zeroshard::tools {

/// One tensor of the export: its parameter and where its bytes go.
struct ExportTensor {
  std::size_t unit = 0;           ///< index into Manifest::units
  const ManifestParam* param = nullptr;  ///< points into the manifest the plan was made from
  std::uint64_t begin = 0;        ///< byte offset of its data, relative to the data section
  std::uint64_t end = 0;          ///< one past its last byte (begin + 4 * numel)
};

/// The layout of an export: tensors in order, each with its parameter,
/// and the file's layout (header, data bytes, largest tensor: the read
/// buffer's size).
struct ExportPlan {
  std::vector<ExportTensor> tensors;
  SafetensorsPlan layout;  ///< plan_checkpoint_safetensors(m, f32): the same tensors in the same order
};

/// Plans the export of manifest `m` (validated by Manifest::read,
/// runtime/checkpoint/manifest_checks.h) through plan_checkpoint_safetensors:
/// __metadata__ holds "format": "pt", "tag", "optimizer_step",
/// "world_size", "stage", "compute_dtype" (all strings).
/// The plan points into `m`, which must outlive it. Throws IoError if a
/// parameter is named "__metadata__".
ExportPlan plan_safetensors_export(const Manifest& m);

/// What export_safetensors did.
struct ExportResult {
  std::string checkpoint_dir;       ///< the resolved checkpoint directory
  std::string tag;                  ///< its tag
  std::int64_t optimizer_step = 0;  ///< the manifest's optimizer_steps
  std::size_t tensors = 0;          ///< tensors written
  std::uint64_t data_bytes = 0;     ///< bytes of tensor data
  std::uint64_t file_bytes = 0;     ///< size of the output file
  std::uint64_t buffer_bytes = 0;   ///< the one read buffer's size (the largest tensor)
};

/// Writes the master weights of the checkpoint at `ckpt_path` (a checkpoint
/// directory, or a save directory whose `latest` names one) to `out_path`
/// as fp32 safetensors. First verifies every rank file (size and CRC-32
/// against the manifest), then writes the header and, tensor by tensor,
/// reads the tensor's element ranges from the rank files that hold them
/// into one reused buffer and appends it: memory stays near the largest
/// tensor. The output is written to out_path + ".tmp", fsynced and renamed
/// over out_path (its directory fsynced); on any error the temporary file
/// is removed and out_path is untouched. Throws IoError (unreadable,
/// corrupted or truncated checkpoint; write failure). Not thread safe with
/// another export to the same out_path.
/// A save directory of an engine on a mesh with tp > 1 (its tp-TT folders,
/// docs/checkpoint-format.md "Checkpoints on a mesh") is passed to
/// export_mesh_safetensors. With `progress`, a progress line (tensors
/// written, rate, ETA) goes to stderr while it writes.
ExportResult export_safetensors(const std::string& ckpt_path, const std::string& out_path,
                                bool progress = true);

/// The full, unsplit tensors of a mesh save directory: the latest
/// checkpoint of every tp-TT folder (verified as above) put together, each
/// split parameter's slices concatenated in tp-rank order along its
/// manifest's tp_split_dim (its shape there times tp), each replicated one
/// from tp-00. Throws IoError as export_safetensors, and when a tp folder is
/// missing or the folders' manifests are not one save (tp size and rank,
/// tag, optimizer step, units).
ExportResult export_mesh_safetensors(const std::string& save_dir, const std::string& out_path,
                                     bool progress = true);

}  // namespace zeroshard::tools
