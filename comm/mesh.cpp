#include "comm/mesh.h"

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard {

void Mesh::validate(MeshShape shape, int world_size) {
  if (shape.dp <= 0 || shape.tp <= 0) {
    throw ConfigError(fmt::format(
        "mesh: data-parallel size dp={} and tensor-parallel size tp={} must both be positive "
        "(world size {})",
        shape.dp, shape.tp, world_size));
  }
  if (static_cast<long long>(shape.dp) * shape.tp != world_size) {
    throw ConfigError(fmt::format(
        "mesh: data-parallel size dp={} x tensor-parallel size tp={} = {} does not equal the "
        "world size {}",
        shape.dp, shape.tp, static_cast<long long>(shape.dp) * shape.tp, world_size));
  }
}

int Mesh::world_rank_of(MeshShape shape, MeshCoord coord) {
  if (coord.dp_rank < 0 || coord.dp_rank >= shape.dp || coord.tp_rank < 0 ||
      coord.tp_rank >= shape.tp) {
    throw ConfigError(fmt::format("mesh: coordinate (dp_rank={}, tp_rank={}) is outside the "
                                  "mesh dp={} x tp={}",
                                  coord.dp_rank, coord.tp_rank, shape.dp, shape.tp));
  }
  return coord.dp_rank * shape.tp + coord.tp_rank;
}

MeshCoord Mesh::coord_of(MeshShape shape, int world_rank) {
  if (shape.dp <= 0 || shape.tp <= 0 || world_rank < 0 ||
      static_cast<long long>(world_rank) >= static_cast<long long>(shape.dp) * shape.tp) {
    throw ConfigError(fmt::format("mesh: world rank {} is outside the mesh dp={} x tp={}",
                                  world_rank, shape.dp, shape.tp));
  }
  return MeshCoord{world_rank / shape.tp, world_rank % shape.tp};
}

Mesh::Mesh(Communicator& world, MeshShape shape) : world_(world), shape_(shape) {
  validate(shape, world.world_size());
  coord_ = coord_of(shape, world.rank());
  // Same colour = same group; the key orders the group's ranks.
  tp_group_ = world.split(/*color=*/coord_.dp_rank, /*key=*/coord_.tp_rank);
  dp_group_ = world.split(/*color=*/coord_.tp_rank, /*key=*/coord_.dp_rank);
  ZS_CHECK(tp_group_->world_size() == shape.tp && tp_group_->rank() == coord_.tp_rank,
           "mesh: tensor-parallel group has size {} and rank {}, expected {} and {}",
           tp_group_->world_size(), tp_group_->rank(), shape.tp, coord_.tp_rank);
  ZS_CHECK(dp_group_->world_size() == shape.dp && dp_group_->rank() == coord_.dp_rank,
           "mesh: data-parallel group has size {} and rank {}, expected {} and {}",
           dp_group_->world_size(), dp_group_->rank(), shape.dp, coord_.dp_rank);
}

std::vector<int> Mesh::tp_group_world_ranks() const {
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(shape_.tp));
  for (int t = 0; t < shape_.tp; ++t) ranks.push_back(world_rank_of(shape_, {coord_.dp_rank, t}));
  return ranks;
}

std::vector<int> Mesh::dp_group_world_ranks() const {
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(shape_.dp));
  for (int d = 0; d < shape_.dp; ++d) ranks.push_back(world_rank_of(shape_, {d, coord_.tp_rank}));
  return ranks;
}

}  // namespace zeroshard
