// Collective times on a described cluster: see runtime/cluster_plan/collective_time.h.
#include "runtime/cluster_plan/collective_time.h"

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

// n - 1 ring steps of a collective over n ranks of one link level, each
// moving bytes / n (the whole, gathered buffer being `bytes`).
double ring_half(double bytes, int n, const LinkDescription& link) {
  if (n <= 1) return 0;
  const auto ranks = static_cast<double>(n);
  return (ranks - 1) * (link.latency_s + bytes / (ranks * link.bandwidth_bytes_per_s));
}

void check_group(const GroupPlacement& g) {
  if (g.size < 1 || g.per_node < 1 || g.per_node > g.size || g.size % g.per_node != 0) {
    throw InvariantError(fmt::format("collective time: a group of {} ranks cannot lie {} on each node", g.size,
                                     g.per_node));
  }
}

}  // namespace

double all_gather_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster) {
  check_group(group);
  // [Note: collective time]: across nodes on 1 / k of the data per rail, then inside the node.
  const int k = group.per_node, nodes = group.size / group.per_node;
  return ring_half(bytes / k, nodes, cluster.inter_node) + ring_half(bytes, k, cluster.intra_node);
}

double reduce_scatter_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster) {
  return all_gather_seconds(bytes, group, cluster);  // the same steps in reverse order
}

double all_reduce_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster) {
  return reduce_scatter_seconds(bytes, group, cluster) + all_gather_seconds(bytes, group, cluster);
}

double point_to_point_seconds(double bytes, bool across_nodes, const ClusterDescription& cluster) {
  const LinkDescription& link = across_nodes ? cluster.inter_node : cluster.intra_node;
  return link.latency_s + bytes / link.bandwidth_bytes_per_s;
}

double pipeline_bubble_fraction(int stages, int micro_batches) {
  if (stages < 1 || micro_batches < 1) {
    throw InvariantError(fmt::format("pipeline bubble: {} stages and {} micro-batches (each must be >= 1)", stages,
                                     micro_batches));
  }
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace zeroshard
