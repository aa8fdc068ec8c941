// How long a collective takes on a cluster that is described, not run on
// (runtime/cluster_plan/cluster_description.h): the alpha-beta model
// (Hockney 1994; Thakur, Rabenseifner and Gropp 2005, "Optimization of
// Collective Communication Operations in MPICH") for ring algorithms on
// the cluster's two link levels, and the pipeline bubble.
//
// [Note: collective time]
// A ring over n ranks moves (n - 1) / n of the data through every rank's
// link in n - 1 steps: an all-gather or a reduce-scatter of a buffer of S
// bytes (the whole, gathered size) costs (n - 1) (alpha + S / (n B)), an
// all-reduce twice that. Where the group lies inside one node, alpha and B
// are the node's link (NVLink or PCIe); where it spans nodes with k of its
// ranks on each of the n / k nodes, the collective runs hierarchically, as
// NCCL's rings and trees over the nodes' rails do: a reduce-scatter inside
// each node over its k ranks, the same collective across nodes on 1 / k of
// the data (the k ranks of a node each on their own NIC, in parallel),
// then an all-gather inside the node; an all-gather or reduce-scatter
// alone runs the inside and outside halves once. The link between nodes
// gives each accelerator bandwidth_GBps (the description's "per
// accelerator" figure), so the k parallel transfers do not share it. A
// point-to-point transfer of S bytes costs alpha + S / B of the link it
// crosses. Computation of the reduction is not counted (a GPU reduces far
// faster than a link carries data).
#pragma once

#include <cstdint>

#include "runtime/cluster_plan/cluster_description.h"

namespace zeroshard {

/// Where a communicator's ranks lie: `size` ranks, `per_node` of them on
/// each node they use (1 <= per_node <= size, per_node divides size; a
/// group inside one node has per_node == size). Plain value.
struct GroupPlacement {
  int size = 1;
  int per_node = 1;
  /// Whether the group spans nodes.
  bool spans_nodes() const { return per_node < size; }
};

/// Seconds of a ring all-gather whose gathered buffer is `bytes` (each
/// rank contributes bytes / size), on `group` of `cluster` ([Note:
/// collective time]). 0 for a group of one. InvariantError for a
/// placement that does not divide.
double all_gather_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster);
/// Seconds of a ring reduce-scatter of a `bytes` buffer (each rank keeps
/// bytes / size); the same as all_gather_seconds.
double reduce_scatter_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster);
/// Seconds of a ring all-reduce of `bytes`: a reduce-scatter then an
/// all-gather.
double all_reduce_seconds(double bytes, const GroupPlacement& group, const ClusterDescription& cluster);
/// Seconds of one transfer of `bytes` between two ranks, inside a node
/// (`across_nodes` false) or between nodes.
double point_to_point_seconds(double bytes, bool across_nodes, const ClusterDescription& cluster);

/// The fraction of a pipeline's step that its stages stand idle with
/// 1F1B or GPipe over `stages` stages and `micro_batches` micro-batches:
/// (p - 1) / (m + p - 1) (Narayanan et al. 2021, section 2.2.1: the bubble
/// is (p - 1) / m of the ideal time). InvariantError for p or m < 1.
double pipeline_bubble_fraction(int stages, int micro_batches);

}  // namespace zeroshard
