// Swap folders: naming, creation, and removal of folders left by killed runs.
#include "offload/swap_folder.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.h"
#include "core/quoted.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  std::string h(buf);
  for (char& ch : h) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  }
  return h.empty() ? "host" : h;
}

fs::path run_folder(const std::string& base, int rank, int index) {
  return fs::path(base) / fmt::format("zeroshard-{}-{}-rank{}-e{}", host_name(), ::getpid(), rank, index);
}

// Removes the folders under `base` named for this host whose process no
// longer exists. One log line each.
void remove_stale_folders(const fs::path& base) {
  const std::string prefix = fmt::format("zeroshard-{}-", host_name());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const std::size_t dash = rest.find("-rank");
    if (dash == std::string::npos || dash == 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() + dash || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    const auto n = fs::remove_all(entry.path(), rm);
    if (!rm) fmt::print(stderr, "zeroshard: removed {} ({} files) left by an earlier run (process {} is gone)\n",
                        entry.path().string(), n, pid);
  }
}

}  // namespace

fs::path make_swap_folder(const std::string& base, const std::string& config_key, int rank, int index,
                          const char* tier) {
  const fs::path folder = run_folder(base, rank, index);
  std::error_code ec;
  fs::create_directories(folder / tier, ec);
  if (ec) {
    // The configured folder once and cut (brief): it may be megabytes long.
    throw IoError(fmt::format("\"{}\" = \"{}\": cannot create the swap folder {} in it: {}", config_key,
                              brief(base), (folder.filename() / tier).string(), ec.message()));
  }
  remove_stale_folders(base);
  return folder / tier;
}

void remove_swap_folder(const fs::path& folder) noexcept {
  std::error_code ec;
  fs::remove(folder, ec);
  fs::remove(folder.parent_path(), ec);  // only if empty: both tiers may share it
}

}  // namespace zeroshard
