#include "offload/free_space.h"

#include <cerrno>

#include <fmt/format.h>
#include <sys/statvfs.h>

#include "core/error.h"
#include "offload/os_error.h"

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

void check_free_space(const std::filesystem::path& dir, std::uint64_t bytes_needed) {
  const std::uint64_t avail = available_bytes(dir);
  if (bytes_needed <= avail) return;
  throw IoError(fmt::format(
      "{}: not enough free space for NVMe offload: the configuration needs {} but only {} are "
      "available; free {} there, point the nvme path to a larger filesystem, or offload less",
      dir.string(), human(bytes_needed), human(avail), human(bytes_needed - avail)));
}

}  // namespace zeroshard
