#include "core/durable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw IoError(fmt::format("{} {}: {} (errno {})", what, path, std::strerror(err), err));
}

int open_or_throw(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) fail(what, path, errno);
  return fd;
}

}  // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong value = crc;
  // zlib's crc32 takes uInt lengths: fold in pieces.
  for (std::size_t off = 0; off < bytes; off += (1u << 30)) {
    const std::size_t len = std::min<std::size_t>(bytes - off, 1u << 30);
    value = ::crc32(value, p + off, static_cast<uInt>(len));
  }
  return static_cast<std::uint32_t>(value);
}

DurableFileWriter::DurableFileWriter(std::string path) : path_(std::move(path)) {
  fd_ = open_or_throw(path_, O_WRONLY | O_CREAT | O_TRUNC, "cannot create checkpoint file");
}

DurableFileWriter::~DurableFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFileWriter::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, p + done, bytes - done, static_cast<off_t>(offset_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      throw IoError(fmt::format("writing {} bytes at offset {} of {}: {} (errno {})", bytes - done,
                                offset_ + done, path_, std::strerror(err), err));
    }
    done += static_cast<std::size_t>(n);
  }
  crc_ = crc32_update(crc_, p, bytes);
  offset_ += bytes;
}

void DurableFileWriter::finish() {
  if (::fsync(fd_) != 0) fail("fsync of", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of", path_, errno);
}

void read_exact(int fd, const std::string& path, std::uint64_t offset, void* data, std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw IoError(fmt::format("reading {} bytes at offset {} of {}: {} (errno {})", bytes - done, offset + done,
                                path, std::strerror(errno), errno));
    }
    if (n == 0) {
      throw IoError(fmt::format("{} is truncated: {} bytes expected at offset {}, the file ends before", path,
                                bytes - done, offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

FileReader::FileReader(std::string path) : path_(std::move(path)) {
  fd_ = open_or_throw(path_, O_RDONLY, "cannot open checkpoint file");
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t FileReader::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("stat of", path_, errno);
  return static_cast<std::uint64_t>(st.st_size);
}

std::uint32_t FileReader::crc32() const {
  std::vector<unsigned char> buf(4u << 20);
  std::uint32_t crc = 0;
  const std::uint64_t total = size();
  for (std::uint64_t off = 0; off < total; off += buf.size()) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), total - off));
    read(off, buf.data(), len);
    crc = crc32_update(crc, buf.data(), len);
  }
  return crc;
}

void fsync_directory(const std::string& dir) {
  const int fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY, "cannot open directory");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync of directory", dir, err);
}

void rename_durable(const std::string& from, const std::string& to, const std::string& parent) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int err = errno;
    throw IoError(fmt::format("renaming {} to {}: {} (errno {})", from, to, std::strerror(err), err));
  }
  fsync_directory(parent);
}

bool exchange_durable(const std::string& a, const std::string& b, const std::string& parent) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP) return false;
    throw IoError(fmt::format("exchanging {} and {}: {} (errno {})", a, b, std::strerror(err), err));
  }
  fsync_directory(parent);
  return true;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  DurableFileWriter w(tmp);
  w.write(text.data(), text.size());
  w.finish();
  const std::size_t slash = path.find_last_of('/');
  rename_durable(tmp, path, slash == std::string::npos ? "." : path.substr(0, slash));
}

std::string read_text_file(const std::string& path) {
  FileReader r(path);
  std::string s(static_cast<std::size_t>(r.size()), '\0');
  r.read(0, s.data(), s.size());
  return s;
}

}  // namespace zeroshard
