// The folder each training process keeps its swap files in, under a
// configured nvme_path, and the clean-up of folders that killed runs left.
#pragma once

#include <filesystem>
#include <string>

namespace zeroshard {

/// Creates <base>/zeroshard-<host>-<pid>-rank<rank>-e<index>/<tier> and
/// returns it: the host in the name keeps a shared file system's folders
/// apart, the process id and rank one run's ranks, `index` two stores of
/// one process. Then removes the folders under `base` that runs of this
/// host left behind (named for this host, with a process id that no longer
/// exists), printing one line each to stderr. Throws IoError naming
/// `config_key`, `base` and the path when the folder cannot be made.
/// Thread safety: as the file system.
std::filesystem::path make_swap_folder(const std::string& base, const std::string& config_key, int rank, int index,
                                       const char* tier);

/// Removes `folder` (from make_swap_folder) and its parent when they are
/// empty. Never throws.
void remove_swap_folder(const std::filesystem::path& folder) noexcept;

}  // namespace zeroshard
