// Test hooks of checkpoint saves, compiled in only with -Dtest_hooks=true
// (ZS_TEST_HOOKS; no-ops otherwise). Each reads one environment variable:
//   ZS_CHECKPOINT_CRASH_AT=<point>  rank 0 kills itself (SIGKILL) at that
//       point of the save protocol ([Note: crash points of a save] in
//       runtime/engine/engine_save.cpp);
//   ZS_CHECKPOINT_PAUSE_RANK=r      rank r leaves <dir>/paused and sleeps
//       ten minutes in the middle of its file, so a test can kill it there;
//   ZS_CHECKPOINT_FAIL_RANK=r       rank r's file write fails (IoError);
//   ZS_CHECKPOINT_WRITE_ERRNO=e     (background writes) every rank's write
//       fails after its first slice as a write(2) returning errno e would
//       (28 ENOSPC, 5 EIO): an IoError naming the file and offset;
//   ZS_CHECKPOINT_WRITE_DELAY_MS=t  (background writes) each 8 MiB of a
//       file waits t ms before it is written, so that training steps run
//       during the write;
//   ZS_CHECKPOINT_NO_HARD_LINKS=1   (async snapshots) nvme arrays are read
//       into the staging area as on a file system without hard links.
#pragma once

#include <cstdint>
#include <string>

namespace zeroshard {

/// ZS_CHECKPOINT_CRASH_AT: SIGKILL of rank 0 when `point` is the one named.
void checkpoint_crash_point(const char* point, int rank);
/// ZS_CHECKPOINT_PAUSE_RANK: on that rank, writes <dir>/paused and sleeps.
void checkpoint_pause_point(const std::string& dir, int rank);
/// ZS_CHECKPOINT_FAIL_RANK: on that rank, throws IoError naming `file`.
void checkpoint_fail_point(const std::string& file, int rank);
/// ZS_CHECKPOINT_WRITE_ERRNO: throws the IoError a failed write of `bytes`
/// bytes at `offset` of `file` gives (core/durable_file.h's wording).
void checkpoint_write_error_point(const std::string& file, std::uint64_t offset, std::size_t bytes);
/// ZS_CHECKPOINT_WRITE_DELAY_MS: sleeps that long (0 without the hook).
void checkpoint_write_delay();
/// ZS_CHECKPOINT_NO_HARD_LINKS: true when set (false without the hook).
bool checkpoint_hard_links_refused();

}  // namespace zeroshard
