// The Unsharder's stage3_* knobs (runtime/sharding/unsharder.h, [Note: unshard
// order]) on six units of 1000 elements (padded to P) and a few odd ones:
// how far the prefetch runs (stage3_prefetch_bucket_size), the live
// elements never above stage3_max_live_parameters (the ledger's peak of
// gathered bytes, with the prefetch and the kept units that would pass it),
// units kept across an inner loop (stage3_max_reuse_distance), and
// persistent units gathered once per refresh (stage3_param_persistence_
// threshold, stage3_model_persistence_threshold). Every full buffer is
// checked bit for bit against the ranks' shards.
#include <cstdint>
#include <memory>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/unsharder.h"
#include "tests/support/pattern_shard_source.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

using Order = std::vector<UnitId>;
constexpr DType kT = DType::bf16;

// Units "u0".."u5" of one 1000-element parameter each.
FlatLayout six_units() {
  FlatLayout l;
  for (int u = 0; u < 6; ++u) l.add_param(l.add_unit(fmt::format("u{}", u)), fmt::format("u{}.w", u), {1000}, 0);
  l.finalize(world().world_size());
  return l;
}

// An Unsharder with overlap on over `layout`, shards from a TestSource.
struct Knobs : UnsharderStack {
  Knobs(FlatLayout l, UnsharderOptions o) : UnsharderStack(std::move(l), kT, with_gather(o)) {}
  static UnsharderOptions with_gather(UnsharderOptions o) {
    o.gather = true;
    o.overlap = true;
    o.dtype = kT;
    return o;
  }
  // Unshards, checks, reshards each unit of `order`; then ends the
  // micro-batch. Checks the live elements against the limit after each.
  void pass(const Order& order, int gen = 0) {
    for (UnitId u : order) {
      unsharder.unshard(u);
      CHECK(wrong_bytes(unsharder.full(u), layout, u, kT, gen) == 0);
      CHECK(unsharder.live_elements() <= limit);
      unsharder.reshard(u);
    }
    unsharder.end_micro_batch();
  }
  std::int64_t padded(UnitId u) const { return static_cast<std::int64_t>(layout.unit(u).padded); }
  std::int64_t limit = INT64_MAX;
};

const Order kForwardBackward = {0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0};

}  // namespace

TEST_CASE("stage3_prefetch_bucket_size: the prefetch walks ahead until the bucket is full") {
  const std::int64_t p = six_units().unit(0).padded;
  struct Case {
    std::int64_t bucket;
    Order fetched_by_first;  // after unshard(0) of the second micro-batch
    Order hinted;
  };
  for (const Case& c : {Case{0, {0}, {1}}, Case{1, {0, 1}, {2}}, Case{p, {0, 1}, {2}},
                        Case{p + 1, {0, 1, 2}, {3}}, Case{5 * p / 2, {0, 1, 2, 3}, {4}}}) {
    CAPTURE(c.bucket);
    Knobs k(six_units(), UnsharderOptions{.prefetch_bucket_size = c.bucket});
    k.pass(kForwardBackward);  // recording
    k.source.fetched.clear();
    k.source.hinted.clear();
    k.unsharder.unshard(0);
    CHECK(k.source.fetched == c.fetched_by_first);
    CHECK(k.source.hinted == c.hinted);
    k.unsharder.reshard(0);
    // The rest of the micro-batch: every unit is gathered once forward and
    // once backward (5 is used twice in a row: kept), whatever the bucket.
    for (std::size_t i = 1; i < kForwardBackward.size(); ++i) {
      const UnitId u = kForwardBackward[i];
      k.unsharder.unshard(u);
      CHECK(wrong_bytes(k.unsharder.full(u), k.layout, u, kT, 0) == 0);
      k.unsharder.reshard(u);
    }
    k.unsharder.end_micro_batch();
    CHECK(k.source.fetched.size() == 11);
    for (UnitId u = 0; u < 6; ++u) CHECK_FALSE(k.unsharder.gathered(u));
    CHECK(k.unsharder.live_elements() == 0);
  }
}

TEST_CASE("stage3_max_live_parameters: prefetch and kept units never take the gathered bytes above it") {
  const std::int64_t p = six_units().unit(0).padded;
  const std::int64_t everything = 1000000000;
  // Without a limit, a whole-model bucket and reuse distance gather all six
  // units at once; each limit caps the ledger's peak of gathered bytes.
  for (const std::int64_t limit : {everything, 4 * p, 3 * p, 2 * p, p}) {
    CAPTURE(limit);
    Knobs k(six_units(), UnsharderOptions{.prefetch_bucket_size = everything,
                                          .max_live_parameters = limit,
                                          .max_reuse_distance = everything});
    k.limit = limit;
    k.pass(kForwardBackward);  // recording: one unit at a time
    CHECK(k.unsharder.peak_live_elements() == p);
    for (int micro = 0; micro < 3; ++micro) k.pass(kForwardBackward);
    const std::int64_t peak = k.unsharder.peak_live_elements();
    CHECK(peak == std::min<std::int64_t>(limit, 6 * p));
    CHECK(k.ledger.peak(MemCategory::unsharded) == static_cast<std::uint64_t>(peak) * dtype_size(kT));
    // Kept across steps: every unit's next use is within the reuse distance.
    CHECK(k.unsharder.live_elements() <= limit);
  }
}

TEST_CASE("stage3_max_live_parameters: a unit larger than the limit is still gathered when asked for") {
  const std::int64_t p = six_units().unit(0).padded;
  Knobs k(six_units(), UnsharderOptions{.prefetch_bucket_size = 1000000000, .max_live_parameters = p / 2});
  k.pass(kForwardBackward);
  k.source.fetched.clear();
  k.pass(kForwardBackward);
  // Nothing prefetched or kept (each unit alone is over the limit): one
  // all-gather per unshard except 5's reuse... which is not kept either.
  CHECK(k.source.fetched == kForwardBackward);
  CHECK(k.unsharder.peak_live_elements() == p);
}

TEST_CASE("stage3_max_reuse_distance: a unit used again within the distance stays gathered across an inner loop") {
  const std::int64_t p = six_units().unit(0).padded;
  // Unit 0, then an inner loop over 1 and 2 three times, then 3.
  const Order order = {0, 1, 2, 1, 2, 1, 2, 3};
  struct Case {
    std::int64_t distance;
    std::int64_t gathers_of_1;  // per micro-batch after the first
  };
  for (const Case& c : {Case{0, 3}, Case{p - 1, 3}, Case{p, 1}, Case{1000000000, 1}}) {
    CAPTURE(c.distance);
    Knobs k(six_units(), UnsharderOptions{.prefetch_bucket_size = 0, .max_reuse_distance = c.distance});
    k.pass(order);
    const std::int64_t before = k.unsharder.all_gathers(1);
    CHECK(before == 3);  // recording: nothing kept
    k.pass(order);
    CHECK(k.unsharder.all_gathers(1) - before == c.gathers_of_1);
    CHECK(k.unsharder.all_gathers(2) - 3 == c.gathers_of_1);
    CHECK(k.unsharder.all_gathers(0) == 2);  // never used again within the micro-batch
  }
}

TEST_CASE("stage3_param_persistence_threshold: persistent units are gathered once per refresh") {
  // "big": [1000]; "small": [7] and [3]; "mixed": [1000] and [5]; "empty": [0].
  const auto layout = [] {
    FlatLayout l;
    const UnitId big = l.add_unit("big"), small = l.add_unit("small"), mixed = l.add_unit("mixed"),
                 empty = l.add_unit("empty");
    l.add_param(big, "big.w", {1000}, 0);
    l.add_param(small, "small.w", {7}, 0);
    l.add_param(small, "small.b", {3}, 0);
    l.add_param(mixed, "mixed.w", {1000}, 0);
    l.add_param(mixed, "mixed.b", {5}, 0);
    l.add_param(empty, "empty.w", {0}, 0);
    l.finalize(world().world_size());
    return l;
  };
  const Order order = {0, 1, 2, 3, 3, 2, 1, 0};
  struct Case {
    std::int64_t threshold, model_threshold;
    std::vector<bool> persistent;
  };
  const std::int64_t none = INT64_MAX;
  for (const Case& c : {Case{0, none, {false, false, false, false}}, Case{6, none, {false, false, false, true}},
                        Case{7, none, {false, true, false, true}},
                        Case{10, none, {false, true, false, true}}, Case{10, 9, {false, false, false, true}},
                        Case{1000, none, {true, true, true, true}}, Case{1000, 1010, {true, true, false, true}}}) {
    CAPTURE(c.threshold);
    CAPTURE(c.model_threshold);
    Knobs k(layout(), UnsharderOptions{.param_persistence_threshold = c.threshold,
                                       .model_persistence_threshold = c.model_threshold});
    std::uint64_t persistent_bytes = 0;
    for (UnitId u = 0; u < 4; ++u) {
      CHECK(k.unsharder.persistent(u) == c.persistent[static_cast<std::size_t>(u)]);
      if (c.persistent[static_cast<std::size_t>(u)]) persistent_bytes += k.layout.unit(u).padded * dtype_size(kT);
    }
    for (int micro = 0; micro < 3; ++micro) k.pass(order);
    for (UnitId u = 0; u < 4; ++u) {
      CAPTURE(u);
      // Persistent: gathered once. Others: twice per micro-batch except the
      // unit used twice in a row after recording (3, kept), and prefetches.
      if (c.persistent[static_cast<std::size_t>(u)]) {
        CHECK(k.unsharder.all_gathers(u) == 1);
        CHECK(k.unsharder.gathered(u));
      } else {
        CHECK(k.unsharder.all_gathers(u) >= 4);
      }
    }
    CHECK(k.ledger.current(MemCategory::persistent) == persistent_bytes);
    // The optimizer changed the shards: persistent units are gathered again
    // at once, with the new values; no all-gather at their next use.
    k.source.fill(1);
    k.unsharder.refresh();
    CHECK(k.ledger.current(MemCategory::persistent) == persistent_bytes);
    for (UnitId u = 0; u < 4; ++u) {
      if (c.persistent[static_cast<std::size_t>(u)]) {
        CHECK(wrong_bytes(k.unsharder.full(u), k.layout, u, kT, 1) == 0);
      }
    }
    k.pass(order, 1);
    for (UnitId u = 0; u < 4; ++u) {
      if (c.persistent[static_cast<std::size_t>(u)]) CHECK(k.unsharder.all_gathers(u) == 2);
    }
    CHECK(k.ledger.current(MemCategory::persistent) == persistent_bytes);
    k.unsharder.reset();
    CHECK(k.ledger.current(MemCategory::persistent) == 0);
    CHECK(k.ledger.current(MemCategory::unsharded) == 0);
  }
}

TEST_CASE("stage3_* knobs: gather off counts only, and negative values are refused") {
  auto ops = make_cpu_ops();
  MemoryLedger ledger;
  BufferPool pool(ledger, *ops);
  const FlatLayout l = six_units();
  TestSource source(*ops, l, kT, false);
  Unsharder off(world(), l, *ops, pool, UnsharderOptions{.param_persistence_threshold = 5000}, source);
  for (UnitId u = 0; u < 6; ++u) CHECK_FALSE(off.persistent(u));
  CHECK_THROWS_AS(Unsharder(world(), l, *ops, pool, UnsharderOptions{.gather = true, .max_live_parameters = -1}, source),
                  InvariantError);
}
