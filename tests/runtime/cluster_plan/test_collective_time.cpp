// Collective times on a described cluster (runtime/cluster_plan/
// collective_time.h) against the alpha-beta closed forms of [Note:
// collective time]: rings inside a node, across nodes one rank per node,
// hierarchical with k ranks per node; a point-to-point transfer; the
// pipeline bubble.
#include <doctest/doctest.h>

#include "core/error.h"
#include "tests/runtime/cluster_plan/test_cluster.h"
#include "runtime/cluster_plan/collective_time.h"

using namespace zeroshard;

namespace {

// 2 nodes x 8: inside 100 GB/s and 2 us, between 10 GB/s and 10 us.
ClusterDescription cluster() { return testing::test_cluster(2, 8); }

}  // namespace

TEST_CASE("a ring inside one node") {
  const ClusterDescription c = cluster();
  const double S = 1e9;
  // 7 steps of alpha + S / 8 B each way.
  const double half = 7 * (2e-6 + S / (8 * 100e9));
  CHECK(all_gather_seconds(S, {8, 8}, c) == doctest::Approx(half).epsilon(1e-12));
  CHECK(reduce_scatter_seconds(S, {8, 8}, c) == doctest::Approx(half).epsilon(1e-12));
  CHECK(all_reduce_seconds(S, {8, 8}, c) == doctest::Approx(2 * half).epsilon(1e-12));
  CHECK(all_reduce_seconds(S, {1, 1}, c) == 0);
  // 3 ranks: 2 steps of S / 3.
  CHECK(all_reduce_seconds(S, {3, 3}, c) == doctest::Approx(2 * 2 * (2e-6 + S / (3 * 100e9))).epsilon(1e-12));
}

TEST_CASE("across nodes: one rank per node is a flat ring on the slower link; k per node is hierarchical") {
  const ClusterDescription c = cluster();
  const double S = 1e9;
  CHECK(all_reduce_seconds(S, {2, 1}, c) == doctest::Approx(2 * (10e-6 + S / (2 * 10e9))).epsilon(1e-12));
  // 16 ranks, 8 per node: inside on S, across the 2 nodes on S / 8 per rail.
  const double inside = 7 * (2e-6 + S / (8 * 100e9)), across = 1 * (10e-6 + (S / 8) / (2 * 10e9));
  CHECK(all_gather_seconds(S, {16, 8}, c) == doctest::Approx(inside + across).epsilon(1e-12));
  CHECK(all_reduce_seconds(S, {16, 8}, c) == doctest::Approx(2 * (inside + across)).epsilon(1e-12));
  // The hierarchy beats a flat ring over the slow link: 15 steps of S / 16 at 10 GB/s.
  CHECK(all_reduce_seconds(S, {16, 8}, c) < 2 * 15 * (10e-6 + S / (16 * 10e9)));
  CHECK_THROWS_AS(all_reduce_seconds(S, {16, 3}, c), InvariantError);
  CHECK_THROWS_AS(all_reduce_seconds(S, {4, 8}, c), InvariantError);
}

TEST_CASE("point to point and the pipeline bubble") {
  const ClusterDescription c = cluster();
  CHECK(point_to_point_seconds(4e6, false, c) == doctest::Approx(2e-6 + 4e6 / 100e9).epsilon(1e-12));
  CHECK(point_to_point_seconds(4e6, true, c) == doctest::Approx(10e-6 + 4e6 / 10e9).epsilon(1e-12));
  CHECK(pipeline_bubble_fraction(1, 8) == 0);
  CHECK(pipeline_bubble_fraction(4, 8) == doctest::Approx(3.0 / 11).epsilon(1e-15));
  CHECK(pipeline_bubble_fraction(8, 1) == doctest::Approx(7.0 / 8).epsilon(1e-15));
  CHECK_THROWS_AS(pipeline_bubble_fraction(0, 8), InvariantError);
  CHECK_THROWS_AS(pipeline_bubble_fraction(4, 0), InvariantError);
}
