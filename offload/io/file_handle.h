// FileHandle: the owning type for one open file descriptor of the offload
// layer, remembering the path (for error messages) and whether the file was
// opened with O_DIRECT (which imposes 4 KiB alignment on buffers, offsets
// and lengths).
#pragma once

#include <cstddef>
#include <filesystem>

namespace zeroshard {

/// Alignment O_DIRECT requires of buffer addresses, file offsets and lengths
/// (bytes). 4 KiB covers every logical block size in use.
inline constexpr std::size_t kDirectIoAlignment = 4096;

/// How to open a file.
enum class FileMode {
  read,          ///< O_RDONLY
  write_create,  ///< O_WRONLY | O_CREAT | O_TRUNC, mode 0600
};

/// An open file. Move-only; closes on destruction (errors ignored there: call
/// close() to see them). Thread safety: the descriptor may be used by many
/// threads at once for pread/pwrite at distinct offsets; open/close are not
/// synchronised.
class FileHandle {
 public:
  FileHandle() = default;
  FileHandle(FileHandle&& o) noexcept;
  FileHandle& operator=(FileHandle&& o) noexcept;
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  ~FileHandle();

  /// Opens `path`; with `direct`, adds O_DIRECT. Throws IoError naming the
  /// path and errno on failure.
  static FileHandle open(const std::filesystem::path& path, FileMode mode, bool direct);
  /// As open(), but returns an invalid handle and sets `err` (errno) instead
  /// of throwing. Used to probe whether a filesystem accepts O_DIRECT.
  static FileHandle try_open(const std::filesystem::path& path, FileMode mode, bool direct, int& err);
  /// Opens a directory (O_RDONLY | O_DIRECTORY), for fsync after a rename.
  /// Throws IoError.
  static FileHandle open_directory(const std::filesystem::path& path);

  /// The descriptor, or -1.
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  /// Whether O_DIRECT is set (alignment rules apply).
  bool direct() const { return direct_; }
  const std::filesystem::path& path() const { return path_; }

  /// fdatasync; throws IoError naming the path.
  void sync_data() const;
  /// fsync (data and metadata; for directories); throws IoError.
  void sync_all() const;
  /// Closes now; throws IoError if close reports an error. No-op when invalid.
  void close();

 private:
  FileHandle(int fd, std::filesystem::path path, bool direct)
      : fd_(fd), direct_(direct), path_(std::move(path)) {}
  int fd_ = -1;
  bool direct_ = false;
  std::filesystem::path path_;
};

}  // namespace zeroshard
