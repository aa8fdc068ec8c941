// How many ranks write swap files to the same file system, so that the
// free-space check before training counts all of them (offload/io/free_space.h).
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"
#include "runtime/config/offload_config.h"

namespace zeroshard {

/// Ranks writing swap files of each nvme tier onto this rank's file system.
struct SwapSharers {
  int optimizer = 1;  ///< for zero_optimization.offload_optimizer.nvme_path (1 if not on nvme)
  int param = 1;      ///< for zero_optimization.offload_param.nvme_path (1 if not on nvme)
};

/// Identifies the file system a swap folder under `path` will be on: a hash
/// of this host's name and the device number (st_dev) of the nearest
/// existing ancestor of `path`. Ranks on different hosts never share (a
/// network file system mounted on several hosts is not detected: each
/// host's ranks are counted alone). Never throws (an unreadable path
/// counts as "/").
std::uint64_t file_system_key(const std::string& path);

/// Collective over comm: all-gathers every rank's file_system_key of each
/// nvme tier's path and returns, per tier, how many ranks have the same
/// key as this one (>= 1). Every rank's swap files have the same size
/// (equal shards), so the space one file system needs is this count times
/// one rank's. Throws CommError if the exchange fails.
SwapSharers count_swap_sharers(Communicator& comm, const OffloadConfig& config);

}  // namespace zeroshard
