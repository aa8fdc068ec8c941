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
  return fmt::format(
      "tensor-parallel groups (tp {}): {} of {} span nodes (dp ranks {}); their per-layer all-reduces cross the "
      "network: place consecutive ranks on one machine (Open MPI's default --map-by slot) with a multiple of {} "
      "ranks per node",
      tp, spanning_groups.size(), groups, fmt::join(spanning_groups, ", "), tp);
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
  p.groups = mesh.dp_size();
  p.num_nodes = nodes.num_nodes;
  for (int d = 0; d < mesh.dp_size(); ++d) {
    const double first = node_of[static_cast<std::size_t>(Mesh::world_rank_of(mesh.shape(), {d, 0}))];
    for (int t = 1; t < mesh.tp_size(); ++t) {
      if (node_of[static_cast<std::size_t>(Mesh::world_rank_of(mesh.shape(), {d, t}))] != first) {
        p.spanning_groups.push_back(d);
        break;
      }
    }
  }
  return p;
}

}  // namespace zeroshard
