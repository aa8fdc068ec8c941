// Mesh: see comm/mesh.h and [Note: mesh rank order].
#include "comm/mesh.h"

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

namespace {

long long product(MeshShape shape) {
  return static_cast<long long>(shape.dp) * shape.tp * shape.pp;
}

std::string sizes(MeshShape shape) {
  return fmt::format(
      "data-parallel size dp={} x tensor-parallel size tp={} x pipeline-parallel size pp={}",
      shape.dp, shape.tp, shape.pp);
}

}  // namespace

void Mesh::validate(MeshShape shape, int world_size) {
  if (shape.dp <= 0 || shape.tp <= 0 || shape.pp <= 0) {
    throw ConfigError(fmt::format("mesh: {} must all be positive (world size {})", sizes(shape),
                                  world_size));
  }
  if (product(shape) != world_size) {
    throw ConfigError(fmt::format("mesh: {} = {} does not equal the world size {}", sizes(shape),
                                  product(shape), world_size));
  }
}

int Mesh::world_rank_of(MeshShape shape, MeshCoord coord) {
  if (coord.dp_rank < 0 || coord.dp_rank >= shape.dp || coord.tp_rank < 0 ||
      coord.tp_rank >= shape.tp || coord.pp_rank < 0 || coord.pp_rank >= shape.pp) {
    throw ConfigError(fmt::format(
        "mesh: coordinate (dp_rank={}, tp_rank={}, pp_rank={}) is outside the mesh dp={} x tp={} "
        "x pp={}",
        coord.dp_rank, coord.tp_rank, coord.pp_rank, shape.dp, shape.tp, shape.pp));
  }
  return (coord.pp_rank * shape.dp + coord.dp_rank) * shape.tp + coord.tp_rank;
}

MeshCoord Mesh::coord_of(MeshShape shape, int world_rank) {
  if (shape.dp <= 0 || shape.tp <= 0 || shape.pp <= 0 || world_rank < 0 ||
      static_cast<long long>(world_rank) >= product(shape)) {
    throw ConfigError(fmt::format("mesh: world rank {} is outside the mesh dp={} x tp={} x pp={}",
                                  world_rank, shape.dp, shape.tp, shape.pp));
  }
  const int pipeline_stage_size = shape.dp * shape.tp;
  const int in_pipeline_stage = world_rank % pipeline_stage_size;
  return MeshCoord{in_pipeline_stage / shape.tp, in_pipeline_stage % shape.tp, world_rank / pipeline_stage_size};
}

Mesh::Mesh(Communicator& world, MeshShape shape) : world_(world), shape_(shape) {
  validate(shape, world.world_size());
  coord_ = coord_of(shape, world.rank());
  const int dp = shape.dp, tp = shape.tp;
  // Same colour = same group; the key orders the group's ranks. With pp = 1
  // the colours are dp_rank and tp_rank, as in the dp x tp mesh.
  tp_group_ = world.split(/*color=*/coord_.pp_rank * dp + coord_.dp_rank, /*key=*/coord_.tp_rank);
  dp_group_ = world.split(/*color=*/coord_.pp_rank * tp + coord_.tp_rank, /*key=*/coord_.dp_rank);
  pp_group_ = world.split(/*color=*/coord_.dp_rank * tp + coord_.tp_rank, /*key=*/coord_.pp_rank);
  // First and last stage of a pipeline together; every other rank alone
  // (colours past dp x tp, one per world rank).
  const bool ends = coord_.pp_rank == 0 || coord_.pp_rank == shape.pp - 1;
  embedding_group_ = world.split(/*color=*/ends ? coord_.dp_rank * tp + coord_.tp_rank : dp * tp + world.rank(),
                                 /*key=*/coord_.pp_rank);
  ZS_CHECK(tp_group_->world_size() == shape.tp && tp_group_->rank() == coord_.tp_rank,
           "mesh: tensor-parallel group has size {} and rank {}, expected {} and {}",
           tp_group_->world_size(), tp_group_->rank(), shape.tp, coord_.tp_rank);
  ZS_CHECK(dp_group_->world_size() == shape.dp && dp_group_->rank() == coord_.dp_rank,
           "mesh: data-parallel group has size {} and rank {}, expected {} and {}",
           dp_group_->world_size(), dp_group_->rank(), shape.dp, coord_.dp_rank);
  ZS_CHECK(pp_group_->world_size() == shape.pp && pp_group_->rank() == coord_.pp_rank,
           "mesh: pipeline-parallel group has size {} and rank {}, expected {} and {}",
           pp_group_->world_size(), pp_group_->rank(), shape.pp, coord_.pp_rank);
}

std::optional<int> Mesh::prev_pp_rank() const {
  if (is_first_pipeline_stage()) return std::nullopt;
  return coord_.pp_rank - 1;
}

std::optional<int> Mesh::next_pp_rank() const {
  if (is_last_pipeline_stage()) return std::nullopt;
  return coord_.pp_rank + 1;
}

std::optional<int> Mesh::prev_pipeline_stage_world_rank() const {
  if (is_first_pipeline_stage()) return std::nullopt;
  MeshCoord c = coord_;
  --c.pp_rank;
  return world_rank_of(shape_, c);
}

std::optional<int> Mesh::next_pipeline_stage_world_rank() const {
  if (is_last_pipeline_stage()) return std::nullopt;
  MeshCoord c = coord_;
  ++c.pp_rank;
  return world_rank_of(shape_, c);
}

std::vector<int> Mesh::tp_group_world_ranks() const {
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(shape_.tp));
  for (int t = 0; t < shape_.tp; ++t) {
    ranks.push_back(world_rank_of(shape_, {coord_.dp_rank, t, coord_.pp_rank}));
  }
  return ranks;
}

std::vector<int> Mesh::dp_group_world_ranks() const {
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(shape_.dp));
  for (int d = 0; d < shape_.dp; ++d) {
    ranks.push_back(world_rank_of(shape_, {d, coord_.tp_rank, coord_.pp_rank}));
  }
  return ranks;
}

std::vector<int> Mesh::pp_group_world_ranks() const {
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(shape_.pp));
  for (int p = 0; p < shape_.pp; ++p) {
    ranks.push_back(world_rank_of(shape_, {coord_.dp_rank, coord_.tp_rank, p}));
  }
  return ranks;
}

}  // namespace zeroshard
