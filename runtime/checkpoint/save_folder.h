// A save directory's own entries beside its checkpoints: `latest`, and what
// an interrupted save leaves (.tmp-<tag>, .old-<tag>; docs/checkpoint-
// format.md, "The atomic save protocol"). Local file operations, no
// collectives: the engine runs them on rank 0 and agrees on the outcome.
#pragma once

#include <string>

namespace zeroshard {

/// The tag that <save_dir>/latest names: its text without trailing
/// newlines and spaces. Throws IoError naming the file when it cannot be
/// read, is empty, or holds a NUL byte or another control character (a
/// damaged file: the message gives the byte's offset and value, and is never
/// cut by the byte itself). A tag is a folder name in save_dir.
std::string read_latest_tag(const std::string& save_dir);

/// A re-save of `tag` that was killed between the two renames of the
/// fallback without renameat2(RENAME_EXCHANGE) left <tag> missing, the
/// committed checkpoint in .old-<tag> and the unfinished one in .tmp-<tag>:
/// renames .old-<tag> back to <tag> (durably) and returns true. Returns
/// false, changing nothing, in every other case. Throws IoError when the
/// rename fails.
bool restore_interrupted_save(const std::string& save_dir, const std::string& tag);

/// Before a save: removes what killed or failed saves left in save_dir
/// (.tmp-* directories, and .old-<tag> ones whose <tag> exists), after
/// restore_interrupted_save() of every .old-<tag> whose <tag> is missing.
/// Throws IoError or std::filesystem::filesystem_error.
void sweep_leftovers(const std::string& save_dir);

}  // namespace zeroshard
