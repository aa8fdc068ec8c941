// Node-local and cross-node groups from a host-identifier exchange; see
// comm/node_groups.h, [Note: node groups].
#include "comm/node_groups.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

static_assert(kNodeIdBytes % sizeof(float) == 0, "the identifier travels as whole f32 words");
constexpr std::size_t kNodeIdWords = kNodeIdBytes / sizeof(float);
using NodeId = std::array<char, kNodeIdBytes>;

bool valid_id(std::string_view id) {
  return !id.empty() && id.size() < kNodeIdBytes && id.find('\0') == std::string_view::npos;
}

}  // namespace

std::string this_host_id() {
  std::array<char, kNodeIdBytes> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) {
    throw CommError(fmt::format("gethostname failed: {}", std::strerror(errno)));
  }
  return std::string(name.data());
}

NodeGroups split_by_node(Communicator& comm) { return split_by_node(comm, this_host_id()); }

std::vector<int> node_of_ranks(Communicator& comm, std::string_view host_id) {
  const int n = comm.world_size(), me = comm.rank();
  // An invalid identifier travels as an all-zero block, so every rank
  // learns of it after the same collective.
  NodeId mine{};
  if (valid_id(host_id)) std::memcpy(mine.data(), host_id.data(), host_id.size());
  std::vector<NodeId> all(static_cast<std::size_t>(n));
  comm.all_gather(mine.data(), all.data(), kNodeIdWords, DType::f32);

  for (int r = 0; r < n; ++r) {
    if (all[static_cast<std::size_t>(r)][0] == '\0') {
      if (r == me) {
        throw CommError(fmt::format(
            "split_by_node: rank {} passed a host identifier of {} bytes; it must be 1 to {} bytes "
            "without a zero byte",
            me, host_id.size(), kNodeIdBytes - 1));
      }
      throw CommError(fmt::format(
          "split_by_node: rank {} passed an invalid host identifier (empty, longer than {} bytes, or "
          "with a zero byte); this is rank {}",
          r, kNodeIdBytes - 1, me));
    }
  }

  // Nodes numbered by their lowest rank.
  std::vector<int> node_of(static_cast<std::size_t>(n), -1);
  std::vector<int> first_rank;  // lowest rank of each node
  for (int r = 0; r < n; ++r) {
    const auto& id = all[static_cast<std::size_t>(r)];
    int node = -1;
    for (std::size_t k = 0; k < first_rank.size(); ++k) {
      if (all[static_cast<std::size_t>(first_rank[k])] == id) {
        node = static_cast<int>(k);
        break;
      }
    }
    if (node < 0) {
      node = static_cast<int>(first_rank.size());
      first_rank.push_back(r);
    }
    node_of[static_cast<std::size_t>(r)] = node;
  }
  return node_of;
}

NodeGroups split_by_node(Communicator& comm, std::string_view host_id) {
  const int me = comm.rank();
  const std::vector<int> node_of = node_of_ranks(comm, host_id);
  // local_of[r]: rank r's index among its node's ranks.
  std::vector<int> local_of(node_of.size(), 0), node_size;
  for (std::size_t r = 0; r < node_of.size(); ++r) {
    const auto node = static_cast<std::size_t>(node_of[r]);
    if (node >= node_size.size()) node_size.resize(node + 1, 0);
    local_of[r] = node_size[node]++;
  }

  NodeGroups g;
  g.node_of_rank = node_of;
  g.node = node_of[static_cast<std::size_t>(me)];
  g.num_nodes = static_cast<int>(node_size.size());
  g.local_rank = local_of[static_cast<std::size_t>(me)];
  g.local_size = node_size[static_cast<std::size_t>(g.node)];
  // Within a node: ordered by parent rank. Across nodes: ordered by node.
  g.local = comm.split(g.node, me);
  g.cross = comm.split(g.local_rank, g.node);
  ZS_CHECK(g.local->world_size() == g.local_size && g.local->rank() == g.local_rank,
           "split_by_node: the node split disagrees with the identifier exchange");
  return g;
}

}  // namespace zeroshard
