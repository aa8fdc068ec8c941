// The device mesh: a world Communicator split into data-parallel and
// tensor-parallel groups (ZeRO over the data-parallel group, Megatron-style
// tensor parallelism inside the tensor-parallel group).
//
// [Note: mesh rank order]
// A world of N = dp x tp ranks is laid out with the tensor-parallel
// coordinate fastest, as Megatron-LM orders its groups (Shoeybi et al.,
// 2019; Narayanan et al., SC 2021):
//
//     world_rank = dp_rank * tp + tp_rank
//
// so the tp ranks of one tensor-parallel group are adjacent world ranks and,
// with ranks placed on nodes in order (mpirun's default by-core mapping), a
// tensor-parallel group stays inside a node, where its per-layer all-reduces
// are cheapest. A data-parallel group is every tp-th rank: the ranks that
// hold the same slice of the model.
//
// A pipeline dimension, when added, goes outermost, as in Megatron:
//
//     world_rank = (pp_rank * dp + dp_rank) * tp + tp_rank
//
// which keeps tensor-parallel groups adjacent and each pipeline stage a
// contiguous block of dp x tp ranks. The present Mesh is that layout with
// pp = 1.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace zeroshard {

/// Sizes of the mesh's dimensions (ranks). dp x tp must equal the world size.
struct MeshShape {
  int dp = 1;  ///< data-parallel size: replicas of the (tensor-parallel) model
  int tp = 1;  ///< tensor-parallel size: ranks that split each layer
};

/// A rank's place in the mesh: dp_rank in [0, dp), tp_rank in [0, tp).
struct MeshCoord {
  int dp_rank = 0;
  int tp_rank = 0;
  friend bool operator==(const MeshCoord&, const MeshCoord&) = default;
};

/// The mesh over a world communicator, with this rank's coordinates and the
/// communicators of its data-parallel and tensor-parallel groups. See
/// [Note: mesh rank order].
///
/// Group ranks: in tp_group(), this rank is tp_rank (group members are world
/// ranks dp_rank * tp + 0..tp-1); in dp_group(), it is dp_rank (members are
/// world ranks 0..dp-1 times tp, plus tp_rank).
///
/// Thread safety: as Communicator (one thread at a time). The mesh keeps a
/// reference to the world communicator, which must outlive it.
class Mesh {
 public:
  /// Splits `world` into groups for `shape`. Collective over `world`: every
  /// rank calls it with the same shape (two Communicator::split calls, the
  /// tensor-parallel group first). Throws ConfigError when a size is zero or
  /// negative or dp x tp differs from world.world_size() (the message names
  /// both sizes and the world size); every rank throws before any
  /// communication, so a bad shape never leaves ranks waiting. Throws what
  /// Communicator::split throws.
  Mesh(Communicator& world, MeshShape shape);

  /// Checks `shape` against a world of `world_size` ranks without building
  /// anything; throws the ConfigError the constructor would.
  static void validate(MeshShape shape, int world_size);

  /// World rank of the rank at `coord` in a mesh of `shape`
  /// (dp_rank * tp + tp_rank). Throws ConfigError for a coordinate outside
  /// the shape.
  static int world_rank_of(MeshShape shape, MeshCoord coord);
  /// Coordinates of world rank `world_rank` in a mesh of `shape`. Throws
  /// ConfigError for a rank outside [0, dp x tp).
  static MeshCoord coord_of(MeshShape shape, int world_rank);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  int dp_rank() const { return coord_.dp_rank; }
  int tp_rank() const { return coord_.tp_rank; }

  /// The world communicator the mesh was built from.
  Communicator& world() const { return world_; }
  /// This rank's data-parallel group: dp ranks, one per replica, ordered by
  /// dp_rank; the communicator to give the Engine (ZeRO shards over it).
  Communicator& dp_group() const { return *dp_group_; }
  /// This rank's tensor-parallel group: tp adjacent world ranks, ordered by
  /// tp_rank; the communicator of the parallel/ layers.
  Communicator& tp_group() const { return *tp_group_; }

  /// World ranks of this rank's tensor-parallel group, in tp_rank order.
  std::vector<int> tp_group_world_ranks() const;
  /// World ranks of this rank's data-parallel group, in dp_rank order.
  std::vector<int> dp_group_world_ranks() const;

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> tp_group_;
  std::unique_ptr<Communicator> dp_group_;
};

}  // namespace zeroshard
