// Locating a sharded checkpoint and verifying its rank files against the
// manifest (size and CRC-32), for the offline tools zs_ckpt_export and
// zs_ckpt_inspect. Format: docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/durable_file.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

namespace zeroshard::tools {

/// The checkpoint directory that `path` names: `path` itself if it holds
/// manifest.json, else <path>/<tag> where tag is the content of
/// <path>/latest (a save directory). Throws IoError saying which of the
/// two was expected when neither exists, naming the folders to give for a
/// mesh run's save directory (its `latest` is the mesh-level commit, not a
/// checkpoint of its own), or when `latest` names a directory without a
/// manifest.
std::string resolve_checkpoint_dir(const std::string& path);

/// The top-level folders of a mesh run's save directory `path`
/// (docs/checkpoint-format.md): its pp-SS entries, or, without any, its
/// tp-TT entries (SS, TT: two or more digits), in name order, whether or
/// not they hold a checkpoint. Empty when there are none or `path` is not a
/// directory. Never throws.
std::vector<std::string> mesh_top_dirs(const std::string& path);

/// One save directory per (pipeline stage, tp rank) of a mesh run's save
/// directory: each top-level folder (mesh_top_dirs), or the tp-TT entries
/// inside it when it has any, in name order, whether or not they hold a
/// checkpoint (the caller's reading of each says). Empty as
/// mesh_top_dirs. Never throws.
std::vector<std::string> mesh_save_dirs(const std::string& path);

/// What is wrong with a mesh run's checkpoints taken together, one line
/// each (empty: nothing): `checkpoints` holds each save directory of
/// mesh_save_dirs that could be read, with its manifest. Checks that they
/// record one mesh (pp and tp sizes), that every (pipeline stage, tp rank)
/// of it is there exactly once, and that they hold the same optimizer step
/// (as Engine::load_checkpoint requires). Pure.
std::vector<std::string> mesh_checkpoint_problems(
    const std::vector<std::pair<std::string, Manifest>>& checkpoints);

/// The outcome of checking one rank file.
struct RankFileCheck {
  std::string path;                  ///< <checkpoint dir>/<file name>
  int rank = 0;                      ///< the rank that wrote it
  std::uint64_t expected_bytes = 0;  ///< from the manifest
  std::uint64_t actual_bytes = 0;    ///< on disk (0 if it cannot be opened)
  std::uint32_t expected_crc32 = 0;  ///< from the manifest
  std::uint32_t actual_crc32 = 0;    ///< computed (0 if not computed)
  std::string problem;               ///< "" if the file is good, else one line saying what is wrong

  /// True if the file matches the manifest.
  bool ok() const { return problem.empty(); }
};

/// Checks one open rank file: its size must equal the manifest entry's
/// `bytes` and the size the unit layout implies (m.file_bytes()); only then
/// is the CRC-32 computed (zlib polynomial, whole file, streamed in 4 MiB
/// pieces) and compared. Never throws for a bad file: the result says what
/// is wrong. Throws IoError only if reading fails.
RankFileCheck check_rank_file(const Manifest& m, const ManifestFile& f, const FileReader& file);

/// Checks the consolidated weights file (m.weights, recorded: a save with
/// stage3_gather_16bit_weights_on_model_save) of the checkpoint in `dir`:
/// its size, then its CRC-32, against the manifest's `weights_file`; `rank`
/// is 0 (its writer). A missing or unreadable file is reported in the
/// result, not thrown.
RankFileCheck check_weights_file(const Manifest& m, const std::string& dir);

/// Checks every rank file of the checkpoint in `dir` (one RankFileCheck per
/// manifest entry, in rank order). A missing or unreadable file is reported
/// in its result, not thrown.
std::vector<RankFileCheck> check_rank_files(const Manifest& m, const std::string& dir);

}  // namespace zeroshard::tools
