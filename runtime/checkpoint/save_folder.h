// A save directory's own entries beside its checkpoints: `latest`, and what
// an interrupted save leaves (.tmp-<tag>, .old-<tag>; docs/checkpoint-
// format.md, "The atomic save protocol"). Local file operations, no
// collectives: the engine runs them on rank 0 and agrees on the outcome.
#pragma once

#include <string>
#include <thread>
#include <vector>

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
/// (.tmp-* and .pruned-* directories, and .old-<tag> ones whose <tag>
/// exists), after
/// restore_interrupted_save() of every .old-<tag> whose <tag> is missing.
/// Throws IoError or std::filesystem::filesystem_error.
void sweep_leftovers(const std::string& save_dir);

/// keep_last's pruning without waiting for the file system: renames the
/// checkpoint folder <save_dir>/<tag> to .pruned-<tag> (atomic; not
/// fsynced: a crash that undoes it leaves a complete older checkpoint,
/// which the next pruning removes) and returns the new path, for a
/// FolderRemover. A .pruned-<tag> already there is removed first. Throws
/// std::filesystem::filesystem_error.
std::string mark_pruned(const std::string& save_dir, const std::string& tag);

/// Removes folders (recursively) on a thread of its own, below the
/// training threads (run_below_training): the pruning of an
/// async save ([Note: async checkpoint]). Errors are ignored: what is left
/// is a .pruned-* folder, which sweep_leftovers removes at the next save.
/// Thread safety: one owner thread calls start, join and the destructor.
class FolderRemover {
 public:
  FolderRemover() = default;
  FolderRemover(const FolderRemover&) = delete;
  FolderRemover& operator=(const FolderRemover&) = delete;
  /// Joins the removal still running.
  ~FolderRemover();
  /// Starts removing `dirs`, after joining a previous removal. No-op for
  /// none.
  void start(std::vector<std::string> dirs);
  /// Waits for the removal. No-op when none runs.
  void join();

 private:
  std::thread thread_;
};

}  // namespace zeroshard
