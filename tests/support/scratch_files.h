// Scratch files and directories of the tests. Directories the ranks share:
// rank 0 removes (and, for a fresh one, creates) the directory while the
// others wait in a barrier, so that no rank starts using it before it is in
// the state the test expects (collective over `comm`; throws
// std::filesystem::filesystem_error on rank 0 when the file system refuses).
// Files: a byte's bits flipped in place, to corrupt a file and restore it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "comm/communicator.h"

namespace zeroshard::testing {

/// A fresh directory (removed if present, then created) for a test of one
/// process: "<temp>/zs-test-<what>-<pid>", so runs of the same test in
/// parallel do not meet. Throws std::filesystem::filesystem_error.
inline std::filesystem::path fresh_scratch_dir(const std::string& what) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("zs-test-" + what + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Removes `dir` and everything in it (nothing if absent) on rank 0 once
/// every rank is done with it (a first barrier: another rank's engine may
/// still be deleting its own swap files there, and remove_all fails on a
/// file that vanishes under it); every rank returns once it is gone.
inline void remove_dir_on_rank0(Communicator& comm, const std::filesystem::path& dir) {
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
  comm.barrier();
}

/// Makes `dir` an empty directory (removed, then created) on rank 0 once
/// every rank is done with it (as remove_dir_on_rank0); every rank returns
/// once it is there and empty.
inline void make_empty_dir_on_rank0(Communicator& comm, const std::filesystem::path& dir) {
  comm.barrier();
  if (comm.rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  comm.barrier();
}

/// Flips the bits `mask` of the byte at `offset` of the file at `path` in
/// place (calling it again restores the byte). The file must exist and
/// hold that byte; nothing is checked.
inline void flip_bits(const std::string& path, std::uint64_t offset, unsigned char mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ static_cast<char>(mask));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

}  // namespace zeroshard::testing
