// Free-space check for the NVMe offload directory, done before training
// starts so that a configuration that cannot fit fails at once with a clear
// message instead of with ENOSPC in the middle of a step.
#pragma once

#include <cstdint>
#include <filesystem>

namespace zeroshard {

/// Bytes an unprivileged writer may still use on the filesystem holding
/// `dir` (statvfs: f_bavail x f_frsize). Throws IoError naming the
/// directory if statvfs fails.
std::uint64_t available_bytes(const std::filesystem::path& dir);

/// Throws IoError "<dir>: not enough free space for NVMe offload: the
/// configuration needs X but only Y are available ..." when `bytes_needed`
/// x `ranks` exceeds available_bytes(dir). Because SwapDirectory writes
/// each new generation next to the previous one before switching,
/// `bytes_needed` should be one rank's padded size of every swap file plus
/// the largest batch written at once; `ranks` is the number of ranks
/// writing as much to the same file system (runtime/sharding/swap_sharing.h), named
/// in the message when > 1.
void check_free_space(const std::filesystem::path& dir, std::uint64_t bytes_needed, int ranks = 1);

}  // namespace zeroshard
