// Raw sequential O_DIRECT pwrite/pread loops over shard files: the disk
// limit the offload benchmarks (bench_io, bench_offload_step) measure
// themselves against in the same run.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "offload/io/file_handle.h"
#include "offload/io/os_error.h"

namespace zeroshard::bench {

/// The shard files of one path and their staging buffers (4 KiB aligned).
struct Pass {
  std::filesystem::path dir;
  std::string prefix;
  std::size_t shards = 0;
  std::size_t shard_bytes = 0;
  std::vector<std::span<std::byte>> buffers;  // shard i uses buffers[i % size]

  std::filesystem::path file(std::size_t i) const { return dir / fmt::format("{}_{}.bin", prefix, i); }
  std::byte* buffer(std::size_t i) const { return buffers[i % buffers.size()].data(); }
};

/// Writes every shard of `p` with one pwrite loop per file (O_DIRECT),
/// fdatasync, close; one file after the other. Throws IoError.
inline void raw_write(const Pass& p) {
  for (std::size_t i = 0; i < p.shards; ++i) {
    FileHandle f = FileHandle::open(p.file(i), FileMode::write_create, true);
    std::size_t done = 0;
    while (done < p.shard_bytes) {
      const ssize_t n = ::pwrite(f.fd(), p.buffer(i) + done, p.shard_bytes - done, static_cast<off_t>(done));
      if (n <= 0) throw IoError(io_failure_message("write of", f.path(), done, p.shard_bytes - done, n < 0 ? errno : EIO));
      done += static_cast<std::size_t>(n);
    }
    f.sync_data();
    f.close();
  }
}

/// Reads every shard of `p` back the same way. Throws IoError.
inline void raw_read(const Pass& p) {
  for (std::size_t i = 0; i < p.shards; ++i) {
    FileHandle f = FileHandle::open(p.file(i), FileMode::read, true);
    std::size_t done = 0;
    while (done < p.shard_bytes) {
      const ssize_t n = ::pread(f.fd(), p.buffer(i) + done, p.shard_bytes - done, static_cast<off_t>(done));
      if (n <= 0) throw IoError(io_failure_message("read of", f.path(), done, p.shard_bytes - done, n < 0 ? errno : EIO));
      done += static_cast<std::size_t>(n);
    }
  }
}

}  // namespace zeroshard::bench
