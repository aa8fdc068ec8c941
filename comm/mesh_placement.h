// Where a mesh's tensor-parallel groups sit among the machines (nodes) of
// the job: inside one node each, where their per-layer all-reduces run over
// shared memory or NVLink, or across nodes, where every layer's all-reduce
// crosses the network.
//
// [Note: tensor-parallel placement]
// The Mesh numbers ranks with the tensor-parallel coordinate fastest
// ([Note: mesh rank order]), so a tensor-parallel group is tp consecutive
// world ranks. Open MPI's default by-slot mapping puts consecutive ranks on
// one machine until its slots are full, so the groups land inside nodes
// whenever each node holds a multiple of tp ranks. A round-robin mapping
// (--map-by node), or a node count that does not divide the ranks that
// way, leaves groups that span nodes: tp_placement() finds them (from
// split_by_node's node numbers) and says so with the fix, rather than
// letting the job run at network speed unnoticed.
#pragma once

#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/node_groups.h"

namespace zeroshard {

/// Where the tensor-parallel groups of a mesh are. Plain value.
struct TpPlacement {
  int tp = 1;         ///< tensor-parallel size
  int pp = 1;         ///< pipeline-parallel size
  int groups = 1;     ///< tensor-parallel groups (dp x pp)
  int num_nodes = 1;  ///< nodes of the job
  /// Indices pp_rank * dp + dp_rank (the dp rank when pp = 1) of the
  /// tensor-parallel groups that have ranks on more than one node,
  /// ascending; empty when every group is inside a node.
  std::vector<int> spanning_groups;
  bool within_nodes() const { return spanning_groups.empty(); }
  /// One line for the job's log, e.g. "tensor-parallel groups (tp 2): all
  /// 2 inside a node (2 nodes)" or which groups span nodes and what to do.
  std::string describe() const;
};

/// The placement of `mesh`'s tensor-parallel groups over the nodes of
/// `nodes`, which must come from split_by_node(mesh.world()) on the same
/// ranks. Collective over mesh.world() (one all_gather of one f64 per
/// rank); every rank gets the same answer. Covers every stage's groups. Throws InvariantError when
/// `nodes` does not match the world's size (num_nodes out of range), and
/// what Communicator::all_gather throws.
TpPlacement tp_placement(const Mesh& mesh, const NodeGroups& nodes);

}  // namespace zeroshard
