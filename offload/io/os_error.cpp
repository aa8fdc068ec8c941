#include "offload/io/os_error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

std::string errno_text(int err) {
  const char* desc = ::strerrordesc_np(err);
  const char* name = ::strerrorname_np(err);
  return fmt::format("{} ({})", desc != nullptr ? desc : "unknown error",
                     name != nullptr ? name : fmt::format("errno {}", err));
}

std::string_view errno_hint(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "Free space on that filesystem or point the nvme offload path to a larger one.";
    case EIO:
      return "The device reported an I/O error; check the disk (dmesg, smartctl).";
    case EROFS:
    case EACCES:
    case EPERM:
      return "Check that the offload directory is writable by this process.";
    case EMFILE:
    case ENFILE:
      return "Too many open files; raise the limit (ulimit -n).";
    case EINVAL:
      return "The filesystem may not support O_DIRECT; set ZS_FORCE_BUFFERED_IO=1 to use buffered I/O.";
    default:
      return "";
  }
}

std::string io_failure_message(std::string_view what, const std::filesystem::path& path,
                               std::uint64_t offset, std::uint64_t length, int err) {
  const std::string_view hint = errno_hint(err);
  return fmt::format("{} {} failed at offset {} ({} bytes): {}{}{}", what, path.string(), offset,
                     length, errno_text(err), hint.empty() ? "" : ". ", hint);
}

void throw_file_error(std::string_view what, const std::filesystem::path& path, int err) {
  const std::string_view hint = errno_hint(err);
  throw IoError(fmt::format("{} {} failed: {}{}{}", what, path.string(), errno_text(err),
                            hint.empty() ? "" : ". ", hint));
}

void log_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard lk(mu);
  if (!seen.insert(message).second) return;
  std::fprintf(stderr, "zeroshard: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace zeroshard
