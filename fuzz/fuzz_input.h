// Shared by the fuzz targets: the readers under test take a file path, so
// each input is written to a scratch file first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace zeroshard::fuzz {

/// A scratch path unique to this process, under the temporary directory
/// ($TMPDIR or /tmp): `<tmp>/zs-fuzz-<name>-<pid>`. Not thread-safe to share
/// between threads (libFuzzer runs one input at a time per process).
inline std::string scratch_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          ("zs-fuzz-" + std::string(name) + "-" + std::to_string(::getpid())))
      .string();
}

/// Writes `size` bytes at `data` to `path`, replacing the file.
inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace zeroshard::fuzz
