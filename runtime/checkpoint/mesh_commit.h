// Which checkpoints every folder of a mesh holds: the listing of one
// folder's complete checkpoints and the agreement on the newest ones that
// all folders hold ([Note: mesh checkpoint commit] in
// runtime/engine/engine_save.cpp; docs/checkpoint-format.md, "Checkpoints
// on a mesh"). The agreement runs over a caller-given minimum reduction, so
// that this folder needs no communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zeroshard {

/// One complete checkpoint of a folder: its tag (the directory's name, what
/// a load names) and the optimizer step its manifest records. Plain value type.
struct FolderCheckpoint {
  std::int64_t step = 0;
  std::string tag;
  bool operator==(const FolderCheckpoint&) const = default;
};

/// The complete checkpoints of `folder`: every subdirectory not starting
/// with '.' whose manifest.json reads and validates (Manifest::read) and
/// whose rank files (and
/// model.safetensors when listed) exist with the sizes the manifest
/// records; CRC-32s are not read (the load checks them). Newest step
/// first, ties by tag, descending. Entries that do not qualify are left
/// out; a missing folder gives an empty list. Never throws for the
/// folder's contents. Local: reads files only.
std::vector<FolderCheckpoint> list_folder_checkpoints(const std::string& folder);

/// Minimum of `value` over every rank that takes part (a collective: every
/// rank calls it the same number of times).
using MinOverRanks = std::function<double(double value)>;

/// The newest checkpoints that every rank's list holds (the same step and
/// tag), at most `count`, newest first (the order of
/// list_folder_checkpoints). `mine` is this rank's list in that order
/// (ranks of one folder pass the same list). Ties within a step are
/// decided by the tag's CRC-32. Runs 2 or 3 reductions per candidate
/// step, the same number on every rank, and returns the same list on
/// every rank. Steps must be below 2^53 (exact in a double).
std::vector<FolderCheckpoint> common_checkpoints(const std::vector<FolderCheckpoint>& mine, std::size_t count,
                                                 const MinOverRanks& min);

}  // namespace zeroshard
