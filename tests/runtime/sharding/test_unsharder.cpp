// Unsharder (runtime/sharding/unsharder.h) alone, without an Engine or a model.
// Byte k of rank r's shard of unit u (generation g) is
// (31 r + 17 u + 7 k + 101 g) mod 256, so every rank knows every other
// rank's shard: a full buffer must equal the ranks' shards concatenated, bit
// for bit, in f32 and bf16. Also checked: the recorded order and the
// prefetch that follows it (which units the source is asked for, when),
// nested unshard/reshard counts, keeping a unit gathered when it is
// unsharded next, refresh() after the shards change, reset(), and errors.
// Units are [N, 7, N] elements for N in 0, 1, 7, 57, 10001. On the
// simulated device (runtime/sharding/device_ops.h), shards in host memory must be
// uploaded before their all-gather.
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/unsharder.h"
#include "tests/support/queue_ordered_comm.h"
#include "tests/support/pattern_shard_source.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr const auto& kSizes = kComponentSizes;
constexpr DType kDtypes[] = {DType::f32, DType::bf16};

UnsharderOptions gather_options(bool overlap, DType t) {
  return UnsharderOptions{.gather = true, .overlap = overlap, .dtype = t};
}

// A forward then backward pass over the three units of layout l, each
// full buffer checked against generation gen's shards.
void forward_backward(Unsharder& us, const FlatLayout& l, DType t, int gen) {
  for (UnitId u : {0, 1, 2, 2, 1, 0}) {
    us.unshard(u);
    CHECK(wrong_bytes(us.full(u), l, u, t, gen) == 0);
    us.reshard(u);
  }
}

// An Unsharder over component_layout(n) on the world, its shards from a
// TestSource of generation 0, its buffers from a CPU pool.
struct Fixture : UnsharderStack {
  Fixture(std::size_t n, DType t, UnsharderOptions o, bool host = false)
      : UnsharderStack(component_layout(n, world().world_size()), t, o, host) {}
  // Gathering in dtype t with overlap_comm (records the order, prefetches).
  Fixture(std::size_t n, DType t) : Fixture(n, t, gather_options(true, t)) {}
  // One micro-batch: a checked forward-backward pass of generation 0, then end_micro_batch().
  void micro_batch(DType t) {
    forward_backward(unsharder, layout, t, 0);
    unsharder.end_micro_batch();
  }
};

using Order = std::vector<UnitId>;

}  // namespace

TEST_CASE("Unsharder: on a device, host shards are uploaded and device shards gathered in place") {
  for (std::size_t n : kSizes) {
    for (bool host : {false, true}) {
      CAPTURE(n);
      CAPTURE(host);
      const DType t = DType::bf16;
      auto cpu = make_cpu_ops();
      auto dev = make_simulated_device_ops();
      QueueOrderedComm comm(world(), *dev);
      const FlatLayout layout = component_layout(n, world().world_size());
      MemoryLedger ledger;
      BufferPool pool(ledger, *dev);
      // Host shards in host memory; device shards filled by an upload.
      TestSource source(*cpu, layout, t, host);
      std::vector<DeviceArray> device_shards;
      if (!host) {
        for (std::size_t u = 0; u < 3; ++u) {
          device_shards.push_back(dev->allocate(layout.unit(static_cast<UnitId>(u)).shard, t));
          dev->upload(device_shards[u].data(), source.shards[u].data(), source.shards[u].bytes());
          source.shards[u] = std::move(device_shards[u]);
        }
      }
      Unsharder us(comm, layout, *dev, pool, gather_options(true, t), source);
      for (int micro = 0; micro < 2; ++micro) {
        for (UnitId u : {0, 1, 2, 2, 1, 0}) {
          us.unshard(u);
          const UnitInfo& info = layout.unit(u);
          std::vector<std::byte> back(info.padded * dtype_size(t));
          if (!back.empty()) dev->download(back.data(), us.full(u), back.size());
          CHECK(wrong_bytes(back.data(), layout, u, t, 0) == 0);
          us.reshard(u);
        }
        us.end_micro_batch();
      }
      CHECK(ledger.current(MemCategory::unsharded) == 0);  // uploads and full buffers went back
    }
  }
}

TEST_CASE("Unsharder: a full buffer is the ranks' shards concatenated, bitwise") {
  for (std::size_t n : kSizes) {
    for (DType t : kDtypes) {
      for (bool overlap : {false, true}) {
        for (bool host : {false, true}) {
          CAPTURE(n);
          CAPTURE(dtype_name(t));
          CAPTURE(overlap);
          CAPTURE(host);
          Fixture f(n, t, gather_options(overlap, t), host);
          for (int micro = 0; micro < 3; ++micro) forward_backward(f.unsharder, f.layout, t, 0);
          for (UnitId u = 0; u < 3; ++u) {
            CHECK(f.unsharder.count(u) == 0);
            CHECK_FALSE(f.unsharder.gathered(u));
            CHECK(f.unsharder.full(u) == nullptr);
          }
          CHECK(f.ledger.current(MemCategory::unsharded) == 0);  // every full buffer went back
        }
      }
    }
  }
}

TEST_CASE("Unsharder: the first micro-batch's order is recorded and the prefetch follows it") {
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    const DType t = DType::bf16;
    Fixture f(n, t);
    Unsharder& us = f.unsharder;
    forward_backward(us, f.layout, t, 0);
    CHECK(us.recording());
    CHECK(us.order() == Order{0, 1, 2, 2, 1, 0});
    // While recording nothing is prefetched or kept: one fetch per unshard.
    CHECK(f.source.fetched == Order{0, 1, 2, 2, 1, 0});
    CHECK(f.source.hinted.empty());
    us.end_micro_batch();
    CHECK_FALSE(us.recording());

    f.source.fetched.clear();
    us.unshard(0);  // gathers 0, prefetches 1, hints 2
    CHECK(f.source.fetched == Order{0, 1});
    CHECK(f.source.hinted == Order{2});
    CHECK(us.gathered(1));
    us.reshard(0);
    CHECK_FALSE(us.gathered(0));  // 1 is next, not 0
    us.unshard(1);                // prefetched: no fetch of 1; prefetches 2
    CHECK(f.source.fetched == Order{0, 1, 2});
    CHECK(wrong_bytes(us.full(1), f.layout, 1, t, 0) == 0);
    us.reshard(1);
    us.unshard(2);
    CHECK(wrong_bytes(us.full(2), f.layout, 2, t, 0) == 0);
    us.reshard(2);
    CHECK(us.gathered(2));  // the recorded order unshards 2 again next: kept
    us.unshard(2);          // reuses the kept buffer, prefetches 1
    CHECK(wrong_bytes(us.full(2), f.layout, 2, t, 0) == 0);
    us.reshard(2);
    us.unshard(1);
    us.reshard(1);
    us.unshard(0);
    us.reshard(0);
    // 2 is kept from forward into backward: fetched once; 0 and 1 twice.
    CHECK(f.source.fetched == Order{0, 1, 2, 1, 0});
    for (UnitId u = 0; u < 3; ++u) CHECK_FALSE(us.gathered(u));
    CHECK(f.ledger.current(MemCategory::unsharded) == 0);

    // A different order later: the cursor finds each unit's first occurrence.
    us.end_micro_batch();
    f.source.fetched.clear();
    us.unshard(2);  // found at position 2: prefetches order[3] = 2 itself, so nothing
    CHECK(f.source.fetched == Order{2});
    us.reshard(2);
    CHECK(us.gathered(2));  // order[3] is 2: kept
    us.unshard(2);          // position 3: prefetches 1
    CHECK(f.source.fetched == Order{2, 1});
    us.reshard(2);
    CHECK_FALSE(us.gathered(2));
    us.unshard(1);
    us.reshard(1);
    us.end_micro_batch();
    for (UnitId u = 0; u < 3; ++u) (void)us.full(u);
    us.reset();  // drops the prefetch of 0
    CHECK(f.ledger.current(MemCategory::unsharded) == 0);
    CHECK(us.recording());
    CHECK(us.order().empty());
  }
}

TEST_CASE("Unsharder: without overlap_comm nothing is recorded, prefetched or kept") {
  const DType t = DType::f32;
  Fixture f(57, t, gather_options(false, t));
  for (int micro = 0; micro < 2; ++micro) f.micro_batch(t);
  CHECK(f.unsharder.order().empty());
  CHECK(f.source.fetched == Order{0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1, 0});
  CHECK(f.source.hinted.empty());
}

TEST_CASE("Unsharder: nested unshard/reshard are counted; the buffer goes at zero") {
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    const DType t = DType::f32;
    Fixture f(n, t);
    Unsharder& us = f.unsharder;
    us.unshard(1);
    us.unshard(1);
    us.unshard(0);
    CHECK(us.count(1) == 2);
    CHECK(us.count(0) == 1);
    CHECK(f.source.fetched == Order{1, 0});  // the second unshard of 1 reuses its buffer
    us.reshard(1);
    CHECK(us.count(1) == 1);
    CHECK(us.gathered(1));
    CHECK(wrong_bytes(us.full(1), f.layout, 1, t, 0) == 0);
    us.reshard(1);
    CHECK(us.count(1) == 0);
    CHECK_FALSE(us.gathered(1));
    CHECK_THROWS_WITH_AS(us.reshard(1), doctest::Contains("reshard(\"u1\") without a matching unshard()"),
                         InvariantError);
    us.reshard(0);
    CHECK(f.ledger.current(MemCategory::unsharded) == 0);
  }
}

TEST_CASE("Unsharder: gather off (stages 0-2) only counts") {
  Fixture f(7, DType::f32, UnsharderOptions{.gather = false, .overlap = true, .dtype = DType::f32});
  Unsharder& us = f.unsharder;
  us.unshard(2);
  us.unshard(2);
  CHECK(us.count(2) == 2);
  CHECK_FALSE(us.gathered(2));
  CHECK(us.full(2) == nullptr);
  us.reshard(2);
  us.reshard(2);
  CHECK_THROWS_AS(us.reshard(2), InvariantError);
  us.end_micro_batch();
  us.refresh();
  CHECK(f.source.fetched.empty());
  CHECK(f.source.released.empty());
  CHECK(us.order().empty());
}

TEST_CASE("Unsharder: refresh() regathers held units and drops prefetched ones") {
  for (std::size_t n : kSizes) {
    CAPTURE(n);
    const DType t = DType::bf16;
    Fixture f(n, t);
    Unsharder& us = f.unsharder;
    f.micro_batch(t);
    us.unshard(0);  // holds 0, prefetches 1
    CHECK(us.gathered(1));
    f.source.fill(1);  // the optimizer changed every shard
    f.source.released.clear();
    f.source.fetched.clear();
    us.refresh();
    CHECK(us.gathered(0));
    CHECK_FALSE(us.gathered(1));
    CHECK(f.source.fetched == Order{0});
    CHECK(wrong_bytes(us.full(0), f.layout, 0, t, 1) == 0);
    // drop_stale: 0 finished, 1 dropped, 2 had nothing; then 0 finished
    // again after its regather.
    CHECK(f.source.released == Order{0, 1, 2, 0});
    us.reshard(0);
    us.unshard(1);
    CHECK(wrong_bytes(us.full(1), f.layout, 1, t, 1) == 0);
    us.reshard(1);
  }
}

TEST_CASE("Unsharder: reset() drops every buffer and count and records again") {
  const DType t = DType::f32;
  Fixture f(57, t);
  Unsharder& us = f.unsharder;
  f.micro_batch(t);
  us.unshard(0);
  us.unshard(0);
  us.reset();
  CHECK(us.count(0) == 0);
  for (UnitId u = 0; u < 3; ++u) CHECK_FALSE(us.gathered(u));
  CHECK(us.recording());
  CHECK(us.order().empty());
  CHECK(f.ledger.current(MemCategory::unsharded) == 0);
  CHECK_THROWS_AS(us.reshard(0), InvariantError);
  forward_backward(us, f.layout, t, 0);
  CHECK(us.order() == Order{0, 1, 2, 2, 1, 0});
}

TEST_CASE("Unsharder: errors") {
  const DType t = DType::f32;
  Fixture f(7, t);
  Unsharder& us = f.unsharder;
  CHECK_THROWS_WITH_AS(us.unshard(3), doctest::Contains("unit id 3 is not one of the 3 units"), InvariantError);
  CHECK_THROWS_AS(us.unshard(-1), InvariantError);
  CHECK_THROWS_AS(us.reshard(3), InvariantError);
  CHECK_THROWS_AS(us.count(7), InvariantError);
  // A failing source: the error comes through; u is left without a buffer
  // or count, and unshards again once the source works.
  f.source.fail = true;
  CHECK_THROWS_WITH_AS(us.unshard(1), doctest::Contains("swap-in of unit 1 failed"), IoError);
  CHECK(us.count(1) == 0);
  CHECK_FALSE(us.gathered(1));
  CHECK(f.ledger.current(MemCategory::unsharded) == 0);
  f.source.fail = false;
  us.unshard(1);
  CHECK(wrong_bytes(us.full(1), f.layout, 1, t, 0) == 0);
  us.reshard(1);
  // A layout for another world size.
  const FlatLayout other = component_layout(7, world().world_size() + 1);
  CHECK_THROWS_WITH_AS(Unsharder(world(), other, *f.ops, f.pool, gather_options(false, t), f.source),
                       doctest::Contains("the layout is finalized for"), InvariantError);
}
