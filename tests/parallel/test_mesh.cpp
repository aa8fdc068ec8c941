// Mesh tests (comm/mesh.h) at world sizes 1-4: coordinates, group sizes,
// ranks and membership for every (dp, tp) and every (dp, tp, pp)
// factorisation of the world, checked with collectives over each group and
// point-to-point messages along each pipeline; bad shapes give a ConfigError
// naming the sizes and the world size on every rank. Checks come after the collectives
// of each case, so a failure on one rank never leaves the others waiting.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "comm/mesh_placement.h"
#include "comm/node_groups.h"
#include "core/error.h"
#include "parallel_test_util.h"
#include "tests/support/thrown.h"

namespace zeroshard {
namespace {

using testing::contains;
using testing::error_message;
using tptest::factorisations;
using tptest::world;

// The world ranks of a group's members, gathered over the group itself.
std::vector<int> gathered_world_ranks(Communicator& group, int world_rank) {
  std::vector<double> all(static_cast<std::size_t>(group.world_size()));
  const double mine = world_rank;
  group.all_gather(&mine, all.data(), 1, DType::f64);
  return std::vector<int>(all.begin(), all.end());
}

// Checks that an all-reduce (sum) over `group` of (world rank, 1) from every
// member gives the sum of the world ranks `members` and `size`: the
// reduction reaches exactly the members. Collective over `group`.
void check_group_sum(Communicator& group, int world_rank, const std::vector<int>& members, int size) {
  double sums[2] = {static_cast<double>(world_rank), 1.0};
  group.all_reduce(sums, 2, DType::f64, ReduceOp::sum);
  double want_sum = 0;
  for (int r : members) want_sum += r;
  CHECK(sums[0] == want_sum);
  CHECK(sums[1] == size);
}

TEST_CASE("mesh: coordinates and groups for every dp x tp factorisation of the world") {
  Communicator& w = world();
  const int n = w.world_size();
  const int me = w.rank();
  for (MeshShape shape : factorisations(n)) {
    CAPTURE(shape.dp);
    CAPTURE(shape.tp);
    Mesh mesh(w, shape);
    // Megatron order: the tensor-parallel coordinate varies fastest.
    CHECK(mesh.dp_size() == shape.dp);
    CHECK(mesh.tp_size() == shape.tp);
    CHECK(mesh.dp_rank() == me / shape.tp);
    CHECK(mesh.tp_rank() == me % shape.tp);
    CHECK(mesh.coord() == MeshCoord{me / shape.tp, me % shape.tp});
    CHECK(Mesh::world_rank_of(shape, mesh.coord()) == me);
    CHECK(&mesh.world() == &w);

    CHECK(mesh.tp_group().world_size() == shape.tp);
    CHECK(mesh.tp_group().rank() == mesh.tp_rank());
    CHECK(mesh.dp_group().world_size() == shape.dp);
    CHECK(mesh.dp_group().rank() == mesh.dp_rank());

    // Membership, as the groups themselves see it: the members of this
    // rank's tp group are dp_rank * tp + 0..tp-1 (adjacent), those of its dp
    // group tp_rank + 0..dp-1 times tp.
    std::vector<int> want_tp, want_dp;
    for (int t = 0; t < shape.tp; ++t) want_tp.push_back(mesh.dp_rank() * shape.tp + t);
    for (int d = 0; d < shape.dp; ++d) want_dp.push_back(d * shape.tp + mesh.tp_rank());
    CHECK(gathered_world_ranks(mesh.tp_group(), me) == want_tp);
    CHECK(gathered_world_ranks(mesh.dp_group(), me) == want_dp);
    CHECK(mesh.tp_group_world_ranks() == want_tp);
    CHECK(mesh.dp_group_world_ranks() == want_dp);

    // A reduction over each group sums exactly its members: tp groups are
    // disjoint and cover the world (and so are the dp groups).
    check_group_sum(mesh.tp_group(), me, want_tp, shape.tp);
    check_group_sum(mesh.dp_group(), me, want_dp, shape.dp);
  }
}

TEST_CASE("mesh: world_rank_of and coord_of are inverse for shapes up to 4 x 4") {
  for (int dp = 1; dp <= 4; ++dp) {
    for (int tp = 1; tp <= 4; ++tp) {
      const MeshShape shape{dp, tp};
      for (int r = 0; r < dp * tp; ++r) {
        const MeshCoord c = Mesh::coord_of(shape, r);
        CHECK(c.dp_rank == r / tp);
        CHECK(c.tp_rank == r % tp);
        CHECK(Mesh::world_rank_of(shape, c) == r);
      }
      CHECK_THROWS_AS(Mesh::coord_of(shape, dp * tp), ConfigError);
      CHECK_THROWS_AS(Mesh::coord_of(shape, -1), ConfigError);
      CHECK_THROWS_AS(Mesh::world_rank_of(shape, MeshCoord{dp, 0}), ConfigError);
      CHECK_THROWS_AS(Mesh::world_rank_of(shape, MeshCoord{0, tp}), ConfigError);
    }
  }
}

// The ConfigError message a bad shape gives, or "" when none is thrown.
std::string mesh_error(Communicator& w, MeshShape shape) {
  return error_message<ConfigError>([&] { Mesh mesh(w, shape); });
}

TEST_CASE("mesh: a bad shape is a ConfigError naming dp, tp and the world size") {
  Communicator& w = world();
  const int n = w.world_size();
  const std::string world_size = "world size " + std::to_string(n);
  const std::vector<MeshShape> bad = {
      {n, 2}, {1, n + 1}, {n + 1, 1}, {2, 2 * n}, {n, 0}, {0, n}, {0, 0}, {-1, -n}, {n, -1}};
  for (MeshShape shape : bad) {
    CAPTURE(shape.dp);
    CAPTURE(shape.tp);
    const std::string msg = mesh_error(w, shape);
    CHECK(contains(msg, "dp=" + std::to_string(shape.dp)));
    CHECK(contains(msg, "tp=" + std::to_string(shape.tp)));
    CHECK(contains(msg, world_size));
    if (shape.dp > 0 && shape.tp > 0) {
      CHECK(contains(msg, "does not equal"));
    } else {
      CHECK(contains(msg, "must all be positive"));
    }
  }
  if (n == 4) {
    // 4 ranks do not split as 3 x 1 or 1 x 3 (3 does not divide 4).
    CHECK(contains(mesh_error(w, {1, 3}), "= 3 does not equal the world size 4"));
    CHECK(contains(mesh_error(w, {3, 1}), "= 3 does not equal the world size 4"));
  }
  // Every rank threw before communicating: the world still works.
  double one = 1.0;
  w.all_reduce(&one, 1, DType::f64, ReduceOp::sum);
  CHECK(one == n);
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

// Synthetic nodes on one machine: ranks in blocks of `per_node` (by-slot
// mapping) or dealt round-robin over `nodes` (--map-by node).
std::string host_of(int rank, bool round_robin, int per_node_or_nodes) {
  return "node" + std::to_string(round_robin ? rank % per_node_or_nodes : rank / per_node_or_nodes);
}

TEST_CASE("tp_placement: groups inside nodes under by-slot mapping, spanning under round-robin") {
  Communicator& w = world();
  const int n = w.world_size(), r = w.rank();
  for (const MeshShape shape : factorisations(n)) {
    const int dp = shape.dp, tp = shape.tp;
    CAPTURE(dp);
    CAPTURE(tp);
    Mesh mesh(w, shape);
    // Nodes of tp ranks each (by slot): every group inside one node.
    {
      const NodeGroups nodes = split_by_node(w, host_of(r, false, tp));
      const TpPlacement p = tp_placement(mesh, nodes);
      CHECK(p.num_nodes == dp);
      CHECK(p.within_nodes());
      CHECK(p.describe() == fmt::format("tensor-parallel groups (tp {}): all {} inside a node ({} node{})", tp, dp,
                                        dp, dp == 1 ? "" : "s"));
    }
    // Two nodes, ranks dealt round-robin: with tp > 1 every group spans both.
    if (n >= 2) {
      const NodeGroups nodes = split_by_node(w, host_of(r, true, 2));
      const TpPlacement p = tp_placement(mesh, nodes);
      CHECK(p.num_nodes == 2);
      std::vector<int> all;
      if (tp > 1) {
        for (int d = 0; d < dp; ++d) all.push_back(d);
      }
      CHECK(p.spanning_groups == all);
      if (tp > 1) CHECK(p.describe().find("span nodes (dp ranks 0") != std::string::npos);
    }
    // One node: everything inside it.
    CHECK(tp_placement(mesh, split_by_node(w, "one-machine")).within_nodes());
  }
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

// Every (dp, tp, pp) with dp x tp x pp = n.
std::vector<MeshShape> factorisations3(int n) {
  std::vector<MeshShape> out;
  for (int pp = 1; pp <= n; ++pp) {
    for (int tp = 1; tp <= n; ++tp) {
      if (n % (pp * tp) == 0) out.push_back(MeshShape{n / (pp * tp), tp, pp});
    }
  }
  return out;
}

TEST_CASE("mesh: pipeline stages, groups and neighbours for every dp x tp x pp of the world") {
  Communicator& w = world();
  const int n = w.world_size();
  const int me = w.rank();
  for (MeshShape shape : factorisations3(n)) {
    const int dp = shape.dp, tp = shape.tp, pp = shape.pp;
    CAPTURE(dp);
    CAPTURE(tp);
    CAPTURE(pp);
    Mesh mesh(w, shape);
    // Megatron order: tp fastest, then dp, pp outermost.
    const int pp_rank = me / (dp * tp), d = (me % (dp * tp)) / tp, t = me % tp;
    CHECK(mesh.coord() == MeshCoord{d, t, pp_rank});
    CHECK(mesh.pp_size() == pp);
    CHECK(mesh.pp_rank() == pp_rank);
    CHECK(mesh.is_first_pipeline_stage() == (pp_rank == 0));
    CHECK(mesh.is_last_pipeline_stage() == (pp_rank == pp - 1));
    CHECK(Mesh::world_rank_of(shape, mesh.coord()) == me);
    CHECK(mesh.pp_group().world_size() == pp);
    CHECK(mesh.pp_group().rank() == pp_rank);
    CHECK(mesh.prev_pp_rank() == (pp_rank > 0 ? std::optional<int>(pp_rank - 1) : std::nullopt));
    CHECK(mesh.next_pp_rank() == (pp_rank < pp - 1 ? std::optional<int>(pp_rank + 1) : std::nullopt));
    CHECK(mesh.prev_pipeline_stage_world_rank() == (pp_rank > 0 ? std::optional<int>(me - dp * tp) : std::nullopt));
    CHECK(mesh.next_pipeline_stage_world_rank() ==
          (pp_rank < pp - 1 ? std::optional<int>(me + dp * tp) : std::nullopt));

    std::vector<int> want_tp, want_dp, want_pp;
    for (int k = 0; k < tp; ++k) want_tp.push_back((pp_rank * dp + d) * tp + k);
    for (int k = 0; k < dp; ++k) want_dp.push_back((pp_rank * dp + k) * tp + t);
    for (int k = 0; k < pp; ++k) want_pp.push_back((k * dp + d) * tp + t);
    CHECK(gathered_world_ranks(mesh.tp_group(), me) == want_tp);
    CHECK(gathered_world_ranks(mesh.dp_group(), me) == want_dp);
    CHECK(gathered_world_ranks(mesh.pp_group(), me) == want_pp);
    CHECK(mesh.tp_group_world_ranks() == want_tp);
    CHECK(mesh.dp_group_world_ranks() == want_dp);
    CHECK(mesh.pp_group_world_ranks() == want_pp);
    check_group_sum(mesh.pp_group(), me, want_pp, pp);
    // The embedding group: first and last stage of this pipeline, alone elsewhere.
    std::vector<int> want_emb = {me};
    if (pp_rank == 0 || pp_rank == pp - 1) {
      want_emb = {d * tp + t};
      if (pp > 1) want_emb.push_back(((pp - 1) * dp + d) * tp + t);
    }
    CHECK(gathered_world_ranks(mesh.embedding_group(), me) == want_emb);

    // Point-to-point along the pipeline: each stage sends its world rank to
    // the next stage and receives the previous stage's.
    double from_prev = -1;
    const double mine = me;
    CommWork r, s;
    if (mesh.prev_pp_rank()) r = mesh.pp_group().irecv(&from_prev, 1, DType::f64, *mesh.prev_pp_rank());
    if (mesh.next_pp_rank()) s = mesh.pp_group().isend(&mine, 1, DType::f64, *mesh.next_pp_rank());
    r.wait();
    s.wait();
    if (mesh.prev_pipeline_stage_world_rank()) CHECK(from_prev == *mesh.prev_pipeline_stage_world_rank());
  }
}

TEST_CASE("mesh: world_rank_of and coord_of are inverse with a pipeline dimension") {
  for (int dp = 1; dp <= 3; ++dp) {
    for (int tp = 1; tp <= 3; ++tp) {
      for (int pp = 1; pp <= 4; ++pp) {
        const MeshShape shape{dp, tp, pp};
        for (int r = 0; r < dp * tp * pp; ++r) {
          const MeshCoord c = Mesh::coord_of(shape, r);
          CHECK(c.pp_rank == r / (dp * tp));
          CHECK(Mesh::world_rank_of(shape, c) == r);
          if (pp == 1) CHECK(c == MeshCoord{r / tp, r % tp, 0});  // the dp x tp numbering
        }
        CHECK_THROWS_AS(Mesh::coord_of(shape, dp * tp * pp), ConfigError);
        CHECK_THROWS_AS(Mesh::world_rank_of(shape, MeshCoord{0, 0, pp}), ConfigError);
        CHECK_THROWS_AS(Mesh::world_rank_of(shape, MeshCoord{0, 0, -1}), ConfigError);
      }
    }
  }
}

TEST_CASE("mesh: a bad shape with a pipeline size names dp, tp, pp and the world size") {
  Communicator& w = world();
  const int n = w.world_size();
  std::string msg = mesh_error(w, MeshShape{n, 1, 2});
  CHECK(contains(msg, "dp=" + std::to_string(n) + " x tensor-parallel size tp=1 x pipeline-parallel size pp=2 = " +
                          std::to_string(2 * n) + " does not equal the world size " + std::to_string(n)));
  msg = mesh_error(w, MeshShape{n, 1, 0});
  CHECK(contains(msg, "pp=0 must all be positive"));
  CHECK(contains(msg, "world size " + std::to_string(n)));
}

TEST_CASE("tp_placement: tensor-parallel groups of every stage") {
  Communicator& w = world();
  const int n = w.world_size(), r = w.rank();
  if (n != 4) return;
  Mesh mesh(w, MeshShape{1, 2, 2});  // two stages, one tp group of 2 each
  const TpPlacement inside = tp_placement(mesh, split_by_node(w, host_of(r, false, 2)));
  CHECK(inside.groups == 2);
  CHECK(inside.pp == 2);
  CHECK(inside.within_nodes());
  const TpPlacement spread = tp_placement(mesh, split_by_node(w, host_of(r, true, 2)));
  CHECK(spread.spanning_groups == std::vector<int>{0, 1});
  CHECK(spread.describe().find("2 of 2 span nodes (groups 0, 1, numbered stage * dp + dp_rank)") !=
        std::string::npos);
}

}  // namespace
}  // namespace zeroshard
