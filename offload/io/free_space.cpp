#include "offload/io/free_space.h"

#include <cerrno>

#include <fmt/format.h>
#include <sys/statvfs.h>

#include "core/error.h"
#include "offload/io/os_error.h"

namespace zeroshard {

namespace {

std::string human(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.2f} {} ({} bytes)", v, units[u], bytes);
}

}  // namespace

std::uint64_t available_bytes(const std::filesystem::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) throw_file_error("statvfs of", dir, errno);
  return static_cast<std::uint64_t>(st.f_bavail) * static_cast<std::uint64_t>(st.f_frsize);
}

void check_free_space(const std::filesystem::path& dir, std::uint64_t bytes_needed, int ranks) {
  const std::uint64_t avail = available_bytes(dir);
  const auto n = static_cast<std::uint64_t>(ranks < 1 ? 1 : ranks);
  const std::uint64_t total = bytes_needed > UINT64_MAX / n ? UINT64_MAX : bytes_needed * n;
  if (total <= avail) return;
  throw IoError(fmt::format(
      "{}: not enough free space for NVMe offload: the configuration needs {}{} but only {} are "
      "available; free {} there, point the nvme path to a larger filesystem, or offload less",
      dir.string(), human(total),
      n > 1 ? fmt::format(" ({} for each of the {} ranks writing to this file system)", human(bytes_needed), n) : "",
      human(avail), human(total - avail)));
}

}  // namespace zeroshard
