#include "runtime/sharding/swap_sharing.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <vector>

namespace zeroshard {

namespace fs = std::filesystem;

std::uint64_t file_system_key(const std::string& path) {
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the host name
  for (const char* c = host.data(); *c != '\0'; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 0x100000001b3ULL;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = "/";
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0) {
    if (!p.has_parent_path() || p.parent_path() == p) {
      p = "/";
      if (::stat("/", &st) != 0) st.st_dev = 0;
      break;
    }
    p = p.parent_path();
  }
  return h ^ (static_cast<std::uint64_t>(st.st_dev) * 0x9e3779b97f4a7c15ULL);
}

SwapSharers count_swap_sharers(Communicator& comm, const OffloadConfig& c) {
  const bool opt = c.optimizer.device == OffloadDevice::nvme, param = c.param.device == OffloadDevice::nvme;
  SwapSharers out;
  if (!opt && !param) return out;  // the same on every rank: the configs agree ([Note: model fingerprint])
  const std::array<std::uint64_t, 2> mine = {opt ? file_system_key(c.optimizer.nvme_path) : 0,
                                             param ? file_system_key(c.param.nvme_path) : 0};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(mine.data(), all.data(), 2 * sizeof(std::uint64_t) / 2, DType::f16);  // raw bytes
  out = {0, 0};
  for (int q = 0; q < comm.world_size(); ++q) {
    out.optimizer += all[2 * static_cast<std::size_t>(q)] == mine[0] ? 1 : 0;
    out.param += all[2 * static_cast<std::size_t>(q) + 1] == mine[1] ? 1 : 0;
  }
  return out;
}

}  // namespace zeroshard
