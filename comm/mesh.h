// The device mesh: a world Communicator split into data-parallel,
// tensor-parallel and pipeline-parallel groups (ZeRO over the data-parallel
// group, Megatron-style tensor parallelism inside the tensor-parallel group,
// pipeline stages along the pipeline-parallel group).
//
// [Note: mesh rank order]
// A world of N = dp x tp x pp ranks is laid out with the tensor-parallel
// coordinate fastest, then the data-parallel one, and the pipeline stage
// outermost, as Megatron-LM orders its groups (Shoeybi et al., 2019;
// Narayanan et al., SC 2021):
//
//     world_rank = (pp_rank * dp + dp_rank) * tp + tp_rank
//
// so the tp ranks of one tensor-parallel group are adjacent world ranks and,
// with ranks placed on nodes in order (mpirun's default by-core mapping), a
// tensor-parallel group stays inside a node, where its per-layer all-reduces
// are cheapest. A data-parallel group is every tp-th rank: the ranks that
// hold the same slice of the model.
//
// With pp = 1 this is world_rank = dp_rank * tp + tp_rank, the numbering
// of the dp x tp mesh. The pipeline stage outermost keeps tensor-parallel
// groups adjacent and makes each pipeline stage a contiguous block of
// dp x tp ranks; a pipeline-parallel group is the pp ranks with the same
// (dp_rank, tp_rank), dp x tp apart, ordered by stage: in it, a rank's
// rank is its stage (pp_rank), its previous stage is pp_rank - 1 and its
// next pp_rank + 1. Activations go to the next stage and gradients to the
// previous one over that group's point-to-point messages.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"

namespace zeroshard {

/// Sizes of the mesh's dimensions (ranks). dp x tp x pp must equal the
/// world size.
struct MeshShape {
  int dp = 1;  ///< data-parallel size: replicas of the (tensor-parallel) model stage
  int tp = 1;  ///< tensor-parallel size: ranks that split each layer
  int pp = 1;  ///< pipeline-parallel size: stages the layers are cut into
};

/// A rank's place in the mesh: dp_rank in [0, dp), tp_rank in [0, tp),
/// pp_rank (its pipeline stage) in [0, pp).
struct MeshCoord {
  int dp_rank = 0;
  int tp_rank = 0;
  int pp_rank = 0;
  friend bool operator==(const MeshCoord&, const MeshCoord&) = default;
};

/// The mesh over a world communicator, with this rank's coordinates and the
/// communicators of its data-parallel and tensor-parallel groups. See
/// [Note: mesh rank order].
///
/// Group ranks (with base = pp_rank * dp * tp, the first world rank of this
/// rank's stage): in tp_group(), this rank is tp_rank (members are world
/// ranks base + dp_rank * tp + 0..tp-1); in dp_group(), it is dp_rank
/// (members are base + tp_rank + 0..dp-1 times tp); in pp_group(), it is
/// pp_rank (members are dp_rank * tp + tp_rank + 0..pp-1 times dp * tp).
///
/// Thread safety: as Communicator (one thread at a time). The mesh keeps a
/// reference to the world communicator, which must outlive it.
class Mesh {
 public:
  /// Splits `world` into groups for `shape`. Collective over `world`: every
  /// rank calls it with the same shape (four Communicator::split calls:
  /// the tensor-parallel group, the data-parallel group, the
  /// pipeline-parallel group and the embedding group, also for pp = 1). Throws ConfigError when a
  /// size is zero or negative or dp x tp x pp differs from
  /// world.world_size() (the message names the three sizes and the world
  /// size); every rank throws before any communication, so a bad shape
  /// never leaves ranks waiting. Throws what Communicator::split throws.
  Mesh(Communicator& world, MeshShape shape);

  /// Checks `shape` against a world of `world_size` ranks without building
  /// anything; throws the ConfigError the constructor would.
  static void validate(MeshShape shape, int world_size);

  /// World rank of the rank at `coord` in a mesh of `shape`
  /// ((pp_rank * dp + dp_rank) * tp + tp_rank). Throws ConfigError for a
  /// coordinate outside the shape.
  static int world_rank_of(MeshShape shape, MeshCoord coord);
  /// Coordinates of world rank `world_rank` in a mesh of `shape`. Throws
  /// ConfigError for a rank outside [0, dp x tp x pp).
  static MeshCoord coord_of(MeshShape shape, int world_rank);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  /// Number of pipeline stages (pp).
  int pp_size() const { return shape_.pp; }
  int dp_rank() const { return coord_.dp_rank; }
  int tp_rank() const { return coord_.tp_rank; }
  /// This rank's pipeline stage in [0, pp): its rank in pp_group().
  int pp_rank() const { return coord_.pp_rank; }
  /// True on stage 0 (the stage that reads the input: embedding).
  bool is_first_pipeline_stage() const { return coord_.pp_rank == 0; }
  /// True on stage pp - 1 (the stage that computes the loss).
  bool is_last_pipeline_stage() const { return coord_.pp_rank == shape_.pp - 1; }
  /// The previous stage as a rank of pp_group() (pp_rank - 1), the peer
  /// this rank receives activations from and sends gradients to; none on
  /// the first stage.
  std::optional<int> prev_pp_rank() const;
  /// The next stage as a rank of pp_group() (pp_rank + 1), the peer this
  /// rank sends activations to and receives gradients from; none on the
  /// last stage.
  std::optional<int> next_pp_rank() const;
  /// World rank of the previous stage's rank with this rank's (dp_rank,
  /// tp_rank): this rank's world rank - dp x tp; none on the first stage.
  std::optional<int> prev_pipeline_stage_world_rank() const;
  /// World rank of the next stage's rank with this rank's (dp_rank,
  /// tp_rank): this rank's world rank + dp x tp; none on the last stage.
  std::optional<int> next_pipeline_stage_world_rank() const;

  /// The world communicator the mesh was built from.
  Communicator& world() const { return world_; }
  /// This rank's data-parallel group: dp ranks, one per replica, ordered by
  /// dp_rank; the communicator to give the Engine (ZeRO shards over it).
  Communicator& dp_group() const { return *dp_group_; }
  /// This rank's tensor-parallel group: tp adjacent world ranks, ordered by
  /// tp_rank; the communicator of the parallel/ layers.
  Communicator& tp_group() const { return *tp_group_; }
  /// This rank's pipeline-parallel group: pp world ranks, one per stage,
  /// ordered by stage; the communicator whose point-to-point messages carry
  /// activations and gradients between stages (parallel/pipeline_executor.h).
  /// A group of one rank when pp = 1.
  Communicator& pp_group() const { return *pp_group_; }

  /// The embedding group (Megatron-LM's): the first and the last pipeline
  /// stage's ranks with this rank's (dp_rank, tp_rank), first stage first,
  /// which hold the tied token embedding and LM head and sum its gradient
  /// (Engine::tie_parameter). On a middle stage, and when pp = 1, a group
  /// of this rank alone.
  Communicator& embedding_group() const { return *embedding_group_; }

  /// World ranks of this rank's tensor-parallel group, in tp_rank order.
  std::vector<int> tp_group_world_ranks() const;
  /// World ranks of this rank's data-parallel group, in dp_rank order.
  std::vector<int> dp_group_world_ranks() const;
  /// World ranks of this rank's pipeline-parallel group, in stage order.
  std::vector<int> pp_group_world_ranks() const;

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> tp_group_;
  std::unique_ptr<Communicator> dp_group_;
  std::unique_ptr<Communicator> pp_group_;
  std::unique_ptr<Communicator> embedding_group_;
};

}  // namespace zeroshard
