// Memory ledger: per-rank model-state bytes equal the ZeRO paper's formulas
// for fp32 training with Adam (Rajbhandari et al. 2020, section 5: stage 0
// 16 Psi, stage 1 8 Psi + 8 Psi/N, stage 2 4 Psi + 12 Psi/N, stage 3
// 16 Psi/N), plus the padding the ledger itemises.
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include "core/error.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// Bytes of the formula, with Psi the full element count and psi_local this
// rank's share of every sharded buffer.
std::uint64_t formula(int stage, std::uint64_t psi, std::uint64_t psi_local) {
  switch (stage) {
    case 0: return 16 * psi;
    case 1: return 8 * psi + 8 * psi_local;
    case 2: return 4 * psi + 12 * psi_local;
    default: return 16 * psi_local;
  }
}

}  // namespace

TEST_CASE("model-state bytes per rank follow the ZeRO formulas, padding itemised") {
  const int n = world().world_size(), r = world().rank();
  // Divisible case: every unit a multiple of 16 x 12 elements, so no padding
  // at 1-4 ranks and Psi/N is exact. Uneven case: 57 + 1 + 1000 elements.
  const std::vector<std::vector<std::int64_t>> divisible = {{192, 4}, {384}, {192}};
  const std::vector<std::vector<std::int64_t>> uneven = {{7, 5}, {11}, {3}, {8}, {1}, {1000}};
  for (const auto* shapes : {&divisible, &uneven}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(stage);
      Engine e(make_config(stage), world());
      for (std::size_t i = 0; i < shapes->size(); ++i) {
        const UnitId u = e.add_unit(fmt::format("u{}", i));
        e.add_parameter(u, fmt::format("p{}", i), (*shapes)[i]);
      }
      e.finalize();
      const MemoryLedger& led = e.ledger();
      const std::uint64_t psi = e.layout().total_numel();
      std::uint64_t local = 0, shard_elems = 0, padded = 0;
      for (const auto& u : e.layout().units()) {
        local += u.logical_in_shard(r);
        shard_elems += u.shard;
        padded += u.padded;
      }
      // Logical bytes (without padding) are the formula with this rank's share.
      const std::uint64_t logical = led.model_state_bytes() - led.model_state_padding();
      CHECK(logical == formula(stage, psi, local));
      // With padding: the formula over padded sizes (Psi -> padded, Psi/N -> shard).
      CHECK(led.model_state_bytes() == formula(stage, padded, shard_elems));
      if (shapes == &divisible) {
        CHECK(led.model_state_padding() == 0);
        CHECK(led.model_state_bytes() * static_cast<std::uint64_t>(n) ==
              formula(stage, psi * n, psi));  // 16 Psi/N etc. exactly
      }
      // Shares of the sharded buffers add up to Psi over all ranks.
      double total_local = static_cast<double>(local);
      world().all_reduce(&total_local, 1, DType::f64, ReduceOp::sum);
      CHECK(total_local == static_cast<double>(psi));
      // Categories.
      const std::uint64_t full = stage == 0 ? padded : shard_elems;
      CHECK(led.current(MemCategory::optimizer_states) == 8 * full);
      CHECK(led.current(MemCategory::parameters) == 4 * (stage < 3 ? padded : shard_elems));
      CHECK(led.current(MemCategory::gradients) == 4 * (stage < 2 ? padded : shard_elems));
      CHECK(led.current(MemCategory::unsharded) == 0);
    }
  }
}

TEST_CASE("stage 3 transient buffers are counted while unsharded and freed after") {
  Engine e(make_config(3), world());
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "p", {1000});
  e.finalize();
  const std::uint64_t padded = e.layout().unit(u).padded;
  e.unshard(u);
  CHECK(e.ledger().current(MemCategory::unsharded) == 4 * padded);
  CHECK(e.param(p).size() == 1000);
  e.reshard(u);
  CHECK(e.ledger().current(MemCategory::unsharded) == 0);
  CHECK(e.ledger().peak(MemCategory::unsharded) == 4 * padded);
  CHECK_THROWS_AS(e.param(p), InvariantError);
  CHECK_THROWS_AS(e.reshard(u), InvariantError);
}

TEST_CASE("grad() after reduce_gradients() in the same micro-batch is an error at stages 2 and 3") {
  for (int stage = 2; stage <= 3; ++stage) {
    CAPTURE(stage);
    Engine e(make_config(stage), world());
    const UnitId u = e.add_unit("u");
    const ParamId p = e.add_parameter(u, "p", {10});
    e.finalize();
    e.grad(p)[0] += 1.0f;
    e.reduce_gradients(u);
    CHECK_THROWS_WITH_AS(e.grad(p), doctest::Contains("already had reduce_gradients()"), InvariantError);
    e.step();
    CHECK_NOTHROW(e.grad(p));  // a new micro-batch
  }
}

TEST_CASE("the buffer pool reuses its buffers: a steady state allocates nothing, for any request size") {
  MemoryLedger ledger;
  auto ops = make_cpu_ops();
  BufferPool pool(ledger, *ops);
  for (const std::size_t numel : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
    for (const DType t : {DType::bf16, DType::f32}) {
      pool.trim();
      { PoolLease a = pool.acquire(numel, t, true); }
      const std::uint64_t reserved = pool.reserved_bytes();
      CHECK(reserved >= numel * dtype_size(t));
      for (int i = 0; i < 100; ++i) {
        PoolLease a = pool.acquire(numel, t, true);
        CHECK(static_cast<const unsigned char*>(a.data())[0] == 0);  // zeroed on reuse
        static_cast<unsigned char*>(a.data())[0] = 7;
      }
      CHECK(pool.reserved_bytes() == reserved);
      CHECK(ledger.current(MemCategory::unsharded) == 0);
    }
  }
}

TEST_CASE("per-tier totals and peaks follow adds and removes in closed form") {
  MemoryLedger l;
  l.add(MemCategory::parameters, MemTier::device, 100, 4);
  l.add(MemCategory::optimizer_states, MemTier::host, 300);
  l.add(MemCategory::unsharded, MemTier::device, 50);
  l.remove(MemCategory::unsharded, MemTier::device, 50);
  l.add(MemCategory::unsharded, MemTier::host, 20);
  l.add(MemCategory::master_weights, MemTier::nvme, 7);
  CHECK(l.current_total(MemTier::device) == 100);
  CHECK(l.current_total(MemTier::host) == 320);
  CHECK(l.current_total(MemTier::nvme) == 7);
  CHECK(l.peak_total(MemTier::device) == 150);  // while the 50 transient bytes were held
  CHECK(l.peak_total(MemTier::host) == 320);
  CHECK(l.peak_total(MemTier::nvme) == 7);
  CHECK(l.current_total() == 427);
  CHECK(l.peak_total() == 450);  // 100 + 300 + 50: the tiers' peaks need not coincide
}
