// Durable files: writes that survive a crash (fsync of files and
// directories, atomic rename and exchange), streaming CRC-32, and positioned
// reads that report failures as IoError naming file, offset, length and errno.
// Used by checkpoints, reports, traces and the cost model's saved rates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zeroshard {

/// The CRC-32 (zlib's polynomial) of `bytes` bytes at `data` continued
/// from `crc` (0 to start). Pure; thread safe.
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t bytes);

/// An open file for writing; the destructor closes it (no fsync).
/// Not thread safe.
class DurableFileWriter {
 public:
  /// Creates (truncates) `path`. Throws IoError.
  explicit DurableFileWriter(std::string path);
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;
  /// Appends `bytes` bytes and folds them into the running CRC-32. Throws
  /// IoError (ENOSPC, EIO, short write) naming the file and offset.
  void write(const void* data, std::size_t bytes);
  /// fsyncs and closes. Throws IoError.
  void finish();
  std::uint32_t crc32() const { return crc_; }
  std::uint64_t size() const { return offset_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
  std::uint32_t crc_ = 0;
};

/// Reads `bytes` bytes at `offset` of the open file `fd` (named `path` in
/// errors). Throws IoError on an error or a short read (truncated file).
void read_exact(int fd, const std::string& path, std::uint64_t offset, void* data, std::size_t bytes);

/// A file opened for reading; closes on destruction. Throws IoError naming
/// the path if it cannot be opened (e.g. a deleted shard).
class FileReader {
 public:
  explicit FileReader(std::string path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  void read(std::uint64_t offset, void* data, std::size_t bytes) const { read_exact(fd_, path_, offset, data, bytes); }
  /// Size of the file in bytes.
  std::uint64_t size() const;
  /// CRC-32 (zlib) of the whole file, streamed in 4 MiB pieces.
  std::uint32_t crc32() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Writes `text` to `path` durably: to path + ".tmp", fsync, rename over
/// `path`, fsync of the directory. Throws IoError.
void write_file_atomic(const std::string& path, const std::string& text);
/// Whole file as a string. Throws IoError naming the path.
std::string read_text_file(const std::string& path);
/// fsync of a directory (makes renames and creations in it durable).
void fsync_directory(const std::string& dir);
/// Renames `from` to `to` (atomic on one file system) and fsyncs the parent.
void rename_durable(const std::string& from, const std::string& to, const std::string& parent);
/// Swaps `a` and `b` (two existing directories or files on one file
/// system) in one atomic step, renameat2(RENAME_EXCHANGE), and fsyncs the
/// parent: at every instant both names exist. Returns false, changing
/// nothing, when the file system does not support the exchange (EINVAL,
/// ENOSYS, ENOTSUP); throws IoError for any other failure.
bool exchange_durable(const std::string& a, const std::string& b, const std::string& parent);

}  // namespace zeroshard
