// Node-local rank from the launcher's environment or a host-name exchange;
// see comm/nccl/local_rank.h.
#include "comm/nccl/local_rank.h"

#include <unistd.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace zeroshard {

namespace {

// Host names are at most 64 bytes (HOST_NAME_MAX on Linux); one more for the
// terminating zero, rounded up to whole f32 words.
constexpr std::size_t kNameWords = 17;
using HostName = std::array<float, kNameWords>;

HostName host_name_words() {
  std::array<char, kNameWords * sizeof(float)> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) {
    std::strncpy(name.data(), "unknown-host", name.size() - 1);
  }
  HostName words;
  std::memcpy(words.data(), name.data(), name.size());
  return words;
}

int exported_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                          "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* value = std::getenv(var);
    if (value == nullptr || *value == '\0') continue;
    const std::string_view text(value);
    int rank = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rank);
    if (ec != std::errc() || end != text.data() + text.size() || rank < 0) {
      throw CommError(fmt::format(
          "environment variable {}='{}' is not a node-local rank (a non-negative integer); "
          "unset it or fix the launcher",
          var, text));
    }
    return rank;
  }
  return -1;
}

}  // namespace

int node_local_rank(Communicator& comm) {
  const HostName mine = host_name_words();
  std::vector<HostName> all(static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(mine.data(), all.data(), kNameWords, DType::f32);
  const int exported = exported_local_rank();
  if (exported >= 0) return exported;
  int local = 0;
  for (int r = 0; r < comm.rank(); ++r) {
    if (std::memcmp(all[static_cast<std::size_t>(r)].data(), mine.data(), sizeof(HostName)) == 0) {
      ++local;
    }
  }
  return local;
}

}  // namespace zeroshard
