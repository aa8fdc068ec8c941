// tp_placement: see comm/mesh_placement.h, [Note: tensor-parallel placement].
#include "comm/mesh_placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace zeroshard {

std::string TpPlacement::describe() const {
  if (within_nodes()) {
    return fmt::format("tensor-parallel groups (tp {}): all {} inside a node ({} node{})", tp, groups, num_nodes,
                       num_nodes == 1 ? "" : "s");
  }
  const std::string which = pp == 1 ? fmt::format("dp ranks {}", fmt::join(spanning_groups, ", "))
                                    : fmt::format("groups {}, numbered stage * dp + dp_rank",
                                                  fmt::join(spanning_groups, ", "));
  return fmt::format(
      "tensor-parallel groups (tp {}): {} of {} span nodes ({}); their per-layer all-reduces cross the "
      "network: place consecutive ranks on one machine (Open MPI's default --map-by slot) with a multiple of {} "
      "ranks per node",
      tp, spanning_groups.size(), groups, which, tp);
}

TpPlacement tp_placement(const Mesh& mesh, const NodeGroups& nodes) {
  Communicator& world = mesh.world();
  ZS_CHECK(nodes.num_nodes >= 1 && nodes.num_nodes <= world.world_size() && nodes.node >= 0 &&
               nodes.node < nodes.num_nodes,
           "tp_placement: node {} of {} does not fit a world of {} ranks", nodes.node, nodes.num_nodes,
           world.world_size());
  const double mine = nodes.node;
  std::vector<double> node_of(static_cast<std::size_t>(world.world_size()));
  world.all_gather(&mine, node_of.data(), 1, DType::f64);
  TpPlacement p;
  p.tp = mesh.tp_size();
  p.pp = mesh.pp_size();
  p.groups = mesh.dp_size() * mesh.pp_size();
  p.num_nodes = nodes.num_nodes;
  for (int s = 0; s < mesh.pp_size(); ++s) {
    for (int d = 0; d < mesh.dp_size(); ++d) {
      const double first = node_of[static_cast<std::size_t>(Mesh::world_rank_of(mesh.shape(), {d, 0, s}))];
      for (int t = 1; t < mesh.tp_size(); ++t) {
        if (node_of[static_cast<std::size_t>(Mesh::world_rank_of(mesh.shape(), {d, t, s}))] != first) {
          p.spanning_groups.push_back(s * mesh.dp_size() + d);
          break;
        }
      }
    }
  }
  return p;
}

}  // namespace zeroshard
