// split_by_node ([Note: node groups], comm/node_groups.h): node numbering,
// local ranks and the two group communicators against closed forms, for
// synthetic host identifiers (several "nodes" on one machine) and for the
// real host names. With ZS_EXPECT_NODES=k in the environment (the
// multi-node driver, tests/multinode, sets it on the testbed) the real
// host names must form k nodes of world_size / k consecutive ranks, as
// Open MPI's by-slot mapping places them; without it, the job must be on
// one machine. Where the launcher exports the node-local rank and size
// (Open MPI), they must agree with what the exchange found.
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "comm/node_groups.h"
#include "core/error.h"
#include "tests/comm/comm_test_util.h"

using namespace zeroshard;
using zeroshard::test::world;

namespace {

// Sum over the ranks of `comm` of `value`, as f64 (exact for small integers).
double sum_over(Communicator& comm, double value) {
  comm.all_reduce(&value, 1, DType::f64, ReduceOp::sum);
  return value;
}

// Every rank of `comm` contributes `value`; returns them in comm rank order.
std::vector<double> gather(Communicator& comm, double value) {
  std::vector<double> all(static_cast<std::size_t>(comm.world_size()));
  comm.all_gather(&value, all.data(), 1, DType::f64);
  return all;
}

// Checks g against the node assignment node_of(rank) for every world rank.
void check_groups(const NodeGroups& g, const std::function<int(int)>& node_of) {
  const int n = world().world_size(), me = world().rank();
  std::vector<int> members_of_mine, leaders;
  int nodes = 0, local = 0;
  for (int r = 0; r < n; ++r) {
    const int k = node_of(r);
    if (k == nodes) {  // node_of numbers the nodes by their lowest rank
      leaders.push_back(r);
      ++nodes;
    }
    REQUIRE(k < nodes);
    if (k == node_of(me)) {
      if (r < me) ++local;
      members_of_mine.push_back(r);
    }
  }
  CHECK(g.node == node_of(me));
  CHECK(g.num_nodes == nodes);
  CHECK(g.local_rank == local);
  CHECK(g.local_size == static_cast<int>(members_of_mine.size()));
  CHECK(g.is_leader() == (members_of_mine.front() == me));
  REQUIRE(g.local);
  REQUIRE(g.cross);
  CHECK(g.local->rank() == g.local_rank);
  CHECK(g.local->world_size() == g.local_size);

  // The local group holds exactly this node's ranks, in rank order.
  const std::vector<double> local_members = gather(*g.local, me);
  REQUIRE(local_members.size() == members_of_mine.size());
  for (std::size_t i = 0; i < members_of_mine.size(); ++i) CHECK(local_members[i] == members_of_mine[i]);

  // The cross group: the local_rank-th rank of every node that has one, by node.
  std::vector<int> rail;
  for (int k = 0; k < nodes; ++k) {
    int seen = 0;
    for (int r = 0; r < n; ++r) {
      if (node_of(r) == k && seen++ == g.local_rank) rail.push_back(r);
    }
  }
  const std::vector<double> cross_members = gather(*g.cross, me);
  REQUIRE(cross_members.size() == rail.size());
  for (std::size_t i = 0; i < rail.size(); ++i) CHECK(cross_members[i] == rail[i]);
  if (g.is_leader()) {
    CHECK(g.cross->world_size() == nodes);
    CHECK(g.cross->rank() == g.node);
    for (int k = 0; k < nodes; ++k) CHECK(cross_members[static_cast<std::size_t>(k)] == leaders[static_cast<std::size_t>(k)]);
  }

  // A reduction inside each group sums exactly its members' ranks.
  double local_sum = 0, cross_sum = 0;
  for (int r : members_of_mine) local_sum += r;
  for (int r : rail) cross_sum += r;
  CHECK(sum_over(*g.local, me) == local_sum);
  CHECK(sum_over(*g.cross, me) == cross_sum);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::atoi(v) : fallback;
}

}  // namespace

TEST_CASE("split_by_node: synthetic host identifiers") {
  SUBCASE("one node") {
    check_groups(split_by_node(world(), "same-machine"), [](int) { return 0; });
  }
  SUBCASE("every rank its own node") {
    check_groups(split_by_node(world(), "host-" + std::to_string(world().rank())), [](int r) { return r; });
  }
  SUBCASE("blocks of two consecutive ranks") {
    check_groups(split_by_node(world(), "block-" + std::to_string(world().rank() / 2)), [](int r) { return r / 2; });
  }
  SUBCASE("ranks dealt round-robin to two nodes (odd, even)") {
    // Rank 0 is on the "even" node, so it is node 0 and rank 1's node is 1.
    check_groups(split_by_node(world(), world().rank() % 2 == 0 ? "even" : "odd"),
                 [](int r) { return r % 2; });
  }
  SUBCASE("identifiers of the longest allowed length differing only in the last byte") {
    std::string id(kNodeIdBytes - 1, 'x');
    id.back() = static_cast<char>('a' + world().rank() % 3);
    check_groups(split_by_node(world(), id), [](int r) { return r % 3; });
  }
}

TEST_CASE("split_by_node: a bad identifier on one rank throws on every rank") {
  const int n = world().world_size(), last = n - 1;
  for (const std::string& bad : {std::string(), std::string(kNodeIdBytes, 'y'), std::string("a\0b", 3)}) {
    CAPTURE(bad.size());
    const std::string id = world().rank() == last ? bad : std::string("fine");
    try {
      split_by_node(world(), id);
      FAIL("split_by_node accepted an invalid identifier");
    } catch (const CommError& e) {
      CHECK(std::string(e.what()).find("rank " + std::to_string(last)) != std::string::npos);
    }
    // Nobody was left inside a collective: the communicator still works.
    CHECK(sum_over(world(), 1.0) == n);
  }
}

TEST_CASE("split_by_node: real host names") {
  const int n = world().world_size();
  const int expect_nodes = env_int("ZS_EXPECT_NODES", 1);
  REQUIRE(expect_nodes >= 1);
  REQUIRE_MESSAGE(n % expect_nodes == 0, "ZS_EXPECT_NODES=" << expect_nodes << " does not divide " << n);
  const int per_node = n / expect_nodes;
  const NodeGroups g = split_by_node(world());
  CHECK(!this_host_id().empty());
  check_groups(g, [per_node](int r) { return r / per_node; });
  // The launcher's own view of the node, where it exports one.
  CHECK(g.local_rank == env_int("OMPI_COMM_WORLD_LOCAL_RANK", g.local_rank));
  CHECK(g.local_size == env_int("OMPI_COMM_WORLD_LOCAL_SIZE", g.local_size));
  // This rank's host name is its node's: equal for the members of a node.
  const std::string mine = this_host_id();
  const NodeGroups again = split_by_node(world(), mine);
  CHECK(again.node == g.node);
  CHECK(again.local_rank == g.local_rank);
}
