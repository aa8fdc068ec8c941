// A ShardSource for the Unsharder's tests (runtime/sharding/unsharder.h): byte k of
// rank r's shard of unit u (generation g) is (31 r + 17 u + 7 k + 101 g)
// mod 256, so every rank knows every other rank's shard and a full buffer
// can be checked bit for bit. Records every call. Also the Unsharder the
// tests build over it.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/flat_layout.h"
#include "runtime/sharding/unsharder.h"
#include "tests/support/test_world.h"

namespace zeroshard::testing {

/// Byte k of rank r's shard of unit u in generation gen.
inline std::byte pattern(int r, UnitId u, std::size_t k, int gen) {
  return static_cast<std::byte>((31 * r + 17 * u + 7 * static_cast<int>(k % 256) + 101 * gen) & 0xff);
}

/// Each unit's shard of this rank in host memory (or wherever `ops` allocates).
struct TestSource final : ShardSource {
  TestSource(DeviceOps& ops, const FlatLayout& l, DType t, bool host) : host(host) {
    for (const UnitInfo& u : l.units()) shards.push_back(ops.allocate(u.shard, t));
    fill(0);
  }
  void fill(int g) {
    gen = g;
    for (std::size_t u = 0; u < shards.size(); ++u) {
      auto* p = static_cast<std::byte*>(shards[u].data());
      for (std::size_t k = 0; k < shards[u].bytes(); ++k) p[k] = pattern(world().rank(), static_cast<UnitId>(u), k, g);
    }
  }
  ShardView shard(UnitId u) override {
    if (fail) throw IoError(fmt::format("swap-in of unit {} failed", u));
    fetched.push_back(u);
    return ShardView{.data = shards[static_cast<std::size_t>(u)].data(), .host = host};
  }
  void prefetch(UnitId u) noexcept override { hinted.push_back(u); }
  void release(UnitId u) noexcept override { released.push_back(u); }

  bool host = false;
  bool fail = false;
  int gen = 0;
  std::vector<DeviceArray> shards;
  std::vector<UnitId> fetched, hinted, released;
};

/// An Unsharder with options `o` over `layout` on the world, its shards
/// from a TestSource in dtype t (in host memory when `host`), its buffers
/// from a pool on CPU ops.
struct UnsharderStack {
  UnsharderStack(FlatLayout l, DType t, UnsharderOptions o, bool host = false)
      : ops(make_cpu_ops()),
        layout(std::move(l)),
        pool(ledger, *ops),
        source(*ops, layout, t, host),
        unsharder(world(), layout, *ops, pool, o, source) {}
  std::unique_ptr<DeviceOps> ops;
  FlatLayout layout;
  MemoryLedger ledger;
  BufferPool pool;
  TestSource source;
  Unsharder unsharder;
};

/// Number of wrong bytes of unit u's full buffer against generation g's shards.
inline std::size_t wrong_bytes(const void* full, const FlatLayout& l, UnitId u, DType t, int g) {
  const UnitInfo& info = l.unit(u);
  const std::size_t shard_bytes = info.shard * dtype_size(t);
  const auto* p = static_cast<const std::byte*>(full);
  std::size_t bad = 0;
  for (int r = 0; r < l.world_size(); ++r) {
    for (std::size_t k = 0; k < shard_bytes; ++k) {
      if (p[static_cast<std::size_t>(r) * shard_bytes + k] != pattern(r, u, k, g)) ++bad;
    }
  }
  return bad;
}

}  // namespace zeroshard::testing
