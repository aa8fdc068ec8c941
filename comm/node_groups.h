// Node-aware groups: a communicator's ranks grouped by the machine (node)
// they run on, for placing traffic that should stay inside a node (tensor
// parallelism, the first stage of a hierarchical all-reduce) apart from
// traffic that must cross nodes.
//
// [Note: node groups]
// A node is a set of ranks that share a host identifier, by default the
// host name (gethostname). split_by_node() all-gathers every rank's
// identifier (a fixed-size block of kNodeIdBytes bytes, zero-padded) over
// the communicator and numbers the nodes in order of their lowest rank, so
// node 0 holds rank 0. Two communicators come out of it, both through
// Communicator::split (so the function works with any backend whose
// collectives take host buffers):
//  - local: the ranks of this rank's node, in rank order (local rank =
//    rank in it, local rank 0 = the node's leader);
//  - cross: the ranks with the same local rank on every node that has one,
//    ordered by node. For local rank 0 this is the group of node leaders,
//    one per node; for local rank k it is the "rail" of k-th ranks (only
//    nodes with more than k ranks take part).
// With Open MPI's default by-slot mapping on a hostfile of 2 hosts with 2
// slots each, -np 4 gives nodes {0, 1} and {2, 3}: leaders are ranks 0, 2.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace zeroshard {

/// Bytes of a host identifier in the exchange: 64 (HOST_NAME_MAX on Linux)
/// plus a terminating zero, rounded up to whole f32 words.
inline constexpr std::size_t kNodeIdBytes = 68;

/// This rank's place among the nodes of a communicator
/// ([Note: node groups]). Move-only (owns two communicators).
struct NodeGroups {
  /// This rank's node, in [0, num_nodes); nodes numbered by lowest rank.
  int node = 0;
  /// Number of distinct host identifiers among the ranks.
  int num_nodes = 1;
  /// This rank's rank among the ranks of its node (rank order), == local->rank().
  int local_rank = 0;
  /// Number of ranks on this rank's node, == local->world_size().
  int local_size = 1;
  /// Every rank's node, indexed by rank in the parent communicator.
  std::vector<int> node_of_rank;
  /// The ranks of this node, ordered by rank in the parent communicator.
  std::unique_ptr<Communicator> local;
  /// The ranks with this rank's local_rank, one per node, ordered by node;
  /// for local_rank 0 the node leaders (cross->rank() == node for them).
  std::unique_ptr<Communicator> cross;

  /// True for local rank 0, the rank that represents its node in `cross`.
  bool is_leader() const { return local_rank == 0; }
};

/// The host identifier split_by_node(comm) uses: this machine's host name
/// (gethostname). Throws CommError if gethostname fails.
std::string this_host_id();

/// Every rank's node, indexed by rank of `comm`: the host identifiers of
/// all ranks exchanged as split_by_node exchanges them, nodes numbered in
/// order of their lowest rank (so element 0 is 0). Collective over `comm`
/// (one all_gather of kNodeIdBytes bytes per rank); the same rules and
/// errors for `host_id` as split_by_node (an agreed CommError naming the
/// lowest rank with a bad identifier). Thread safety: a collective.
std::vector<int> node_of_ranks(Communicator& comm, std::string_view host_id);

/// Splits `comm` into node-local groups and cross-node groups, with the
/// host name as node identifier. Equivalent to
/// split_by_node(comm, this_host_id()).
NodeGroups split_by_node(Communicator& comm);

/// Splits `comm` by the given node identifier: ranks passing equal `host_id`
/// strings form one node ([Note: node groups]). Collective over `comm`
/// (one all_gather of kNodeIdBytes bytes per rank as f32 words, bytes
/// unchanged, then two splits); every rank must call it. `host_id` must be
/// 1 to kNodeIdBytes - 1 bytes without a zero byte; a rank with a bad one
/// still joins the all_gather (sending an empty block), and then every rank
/// throws CommError naming the lowest such rank, so none is left waiting in
/// a later collective. The communicator's collectives
/// must accept host buffers (MPI, self; for NCCL split its host bootstrap
/// communicator). Thread safety: a collective; one thread at a time per
/// communicator. Errors of the collectives propagate (CommError).
NodeGroups split_by_node(Communicator& comm, std::string_view host_id);

}  // namespace zeroshard
