// Collective kinds, sizes and descriptions; see comm/traced/collective_record.h.
#include "comm/traced/collective_record.h"

#include <fmt/format.h>

namespace zeroshard {

namespace {
constexpr const char* kNames[kCollectiveKinds] = {"all_reduce", "reduce_scatter", "all_gather",
                                                  "all_to_all", "broadcast",      "barrier",
                                                  "send",       "recv"};
}  // namespace

const char* to_string(CollectiveKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  return i < kCollectiveKinds ? kNames[i] : "?";
}

bool parse_collective_kind(std::string_view name, CollectiveKind& kind) {
  for (std::size_t i = 0; i < kCollectiveKinds; ++i) {
    if (name == kNames[i]) {
      kind = static_cast<CollectiveKind>(i);
      return true;
    }
  }
  return false;
}

std::uint64_t collective_bytes(CollectiveKind kind, std::size_t count, DType dtype,
                               int world_size) {
  const std::uint64_t block = static_cast<std::uint64_t>(count) * dtype_size(dtype);
  const std::uint64_t n = world_size < 1 ? 1 : static_cast<std::uint64_t>(world_size);
  switch (kind) {
    case CollectiveKind::all_reduce:
    case CollectiveKind::broadcast:
    case CollectiveKind::send:
    case CollectiveKind::recv: return block;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return block * n;
    case CollectiveKind::barrier: return 0;
  }
  return 0;
}

std::uint64_t cross_host_bytes(CollectiveKind kind, std::size_t count, DType dtype, int rank, int root, int peer,
                               const std::vector<int>& node_of_rank) {
  const auto world = static_cast<int>(node_of_rank.size());
  if (world == 0 || rank < 0 || rank >= world) return 0;
  const int mine = node_of_rank[static_cast<std::size_t>(rank)];
  std::uint64_t remote = 0;
  for (const int node : node_of_rank) remote += node != mine ? 1 : 0;
  const std::uint64_t block = static_cast<std::uint64_t>(count) * dtype_size(dtype);
  switch (kind) {
    case CollectiveKind::all_gather:
    case CollectiveKind::all_to_all:
    case CollectiveKind::reduce_scatter: return block * remote;
    case CollectiveKind::all_reduce: return 2 * block * remote / static_cast<std::uint64_t>(world);
    case CollectiveKind::broadcast: return rank == root ? block * remote : 0;
    case CollectiveKind::send:
      return peer >= 0 && peer < world && node_of_rank[static_cast<std::size_t>(peer)] != mine ? block : 0;
    case CollectiveKind::recv:
    case CollectiveKind::barrier: return 0;
  }
  return 0;
}

double bus_bandwidth_factor(CollectiveKind kind, int world_size) {
  const double n = world_size < 1 ? 1.0 : static_cast<double>(world_size);
  switch (kind) {
    case CollectiveKind::all_reduce: return 2.0 * (n - 1.0) / n;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return (n - 1.0) / n;
    case CollectiveKind::broadcast:
    case CollectiveKind::send:
    case CollectiveKind::recv: return 1.0;
    case CollectiveKind::barrier: return 0.0;
  }
  return 0.0;
}

std::string describe(const CollectiveFingerprint& fp, std::int64_t seq,
                     std::string_view communicator) {
  std::string inside(communicator);
  if (fp.kind == CollectiveKind::send) inside += fmt::format(", to rank {}", fp.peer);
  if (fp.kind == CollectiveKind::recv) inside += fmt::format(", from rank {}", fp.peer);
  if (!fp.label.empty()) inside += fmt::format(", unit {}", fp.label);
  if (fp.kind != CollectiveKind::barrier) {
    inside += fmt::format(", {} {}", fp.count, dtype_name(fp.dtype));
  }
  if (fp.kind == CollectiveKind::broadcast) inside += fmt::format(", root {}", fp.root);
  return fmt::format("{} #{} ({})", to_string(fp.kind), seq, inside);
}

}  // namespace zeroshard
