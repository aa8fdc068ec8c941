#include "offload/io/file_handle.h"

#include <cerrno>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "offload/io/os_error.h"

namespace zeroshard {

FileHandle::FileHandle(FileHandle&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), direct_(o.direct_), path_(std::move(o.path_)) {}

FileHandle& FileHandle::operator=(FileHandle&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    direct_ = o.direct_;
    path_ = std::move(o.path_);
  }
  return *this;
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

FileHandle FileHandle::try_open(const std::filesystem::path& path, FileMode mode, bool direct,
                                int& err) {
  int flags = O_CLOEXEC;
  flags |= mode == FileMode::read ? O_RDONLY : (O_WRONLY | O_CREAT | O_TRUNC);
  if (direct) flags |= O_DIRECT;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    err = errno;
    return FileHandle();
  }
  err = 0;
  return FileHandle(fd, path, direct);
}

FileHandle FileHandle::open(const std::filesystem::path& path, FileMode mode, bool direct) {
  int err = 0;
  FileHandle f = try_open(path, mode, direct, err);
  if (!f.valid()) {
    throw_file_error(mode == FileMode::read ? "opening for reading" : "creating", path, err);
  }
  return f;
}

FileHandle FileHandle::open_directory(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_file_error("opening directory", path, errno);
  return FileHandle(fd, path, false);
}

void FileHandle::sync_data() const {
  if (::fdatasync(fd_) != 0) throw_file_error("fdatasync of", path_, errno);
}

void FileHandle::sync_all() const {
  if (::fsync(fd_) != 0) throw_file_error("fsync of", path_, errno);
}

void FileHandle::close() {
  if (fd_ < 0) return;
  const int rc = ::close(std::exchange(fd_, -1));
  if (rc != 0 && errno != EINTR) throw_file_error("closing", path_, errno);
}

}  // namespace zeroshard
