// GradReducer (runtime/sharding/grad_reducer.h) alone, without an Engine: rank r
// contributes f(r, u, i) = (r + 1) + (i mod 5) + u at element i of unit u
// (zero in the padding); the reduced full gradient (stages 0/1, all-reduce)
// or gradient shard (stages 2/3, reduce-scatter) must equal the closed-form
// sum over ranks, W(W+1)/2 + W((i mod 5) + u), times the stored scale, for
// several bucket sizes, overlap on and off, and compute / communication
// dtypes f32/f32, bf16/f32 and bf16/bf16 (every value and sum is exact in
// both dtypes; only the stored scale rounds, as a cast of the exact sum).
// The post-step all-gather must reassemble each unit from the ranks' shards.
// Units are [N, 7, N] elements for N in 0, 1, 7, 57, 10001.
#include <cstring>
#include <initializer_list>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "kernels/cpu/cast.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/grad_reducer.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr const auto& kSizes = kComponentSizes;

float contribution(int r, UnitId u, std::size_t i, std::size_t numel) {
  return i < numel ? static_cast<float>(r + 1) + static_cast<float>(i % 5) + static_cast<float>(u) : 0.0f;
}

float exact_sum(int world, UnitId u, std::size_t i, std::size_t numel) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += contribution(r, u, i, numel);
  return s;
}

// v converted to t (times scale) and back: what the reducer stores.
float stored(float v, DType t, float scale) {
  std::byte buf[4];
  kernels::cast(buf, t, &v, DType::f32, 1, scale);
  float out = 0;
  kernels::cast(&out, DType::f32, buf, t, 1);
  return out;
}

float read_at(const void* p, DType t, std::size_t i) {
  float out = 0;
  kernels::cast(&out, DType::f32, static_cast<const std::byte*>(p) + i * dtype_size(t), t, 1);
  return out;
}

void write_at(void* p, DType t, std::size_t i, float v) {
  kernels::cast(static_cast<std::byte*>(p) + i * dtype_size(t), t, &v, DType::f32, 1);
}

// Full gradients (stages 0/1) and gradient shards (stages 2/3) in host
// memory; shards accumulate as the engine's do. Counts the blocks it gets.
struct ArrayTarget final : GradTarget {
  ArrayTarget(DeviceOps& ops, const FlatLayout& l, DType t) : ops(ops), dtype(t) {
    for (const UnitInfo& u : l.units()) {
      full.push_back(ops.allocate(u.padded, t));
      shard.push_back(ops.allocate(u.shard, t));
    }
  }
  void* full_grad(UnitId u) override { return full[static_cast<std::size_t>(u)].data(); }
  void accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                        float scale) override {
    REQUIRE(at + n <= shard[static_cast<std::size_t>(u)].numel());
    ops.accumulate_cast(shard[static_cast<std::size_t>(u)].at(at), dtype, src, src_type, n, scale);
    ++blocks;
  }
  DeviceOps& ops;
  DType dtype;
  std::vector<DeviceArray> full, shard;
  int blocks = 0;
};

struct Dtypes {
  DType compute, comm;
};
constexpr Dtypes kDtypes[] = {{DType::f32, DType::f32}, {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}};

// Bucket sizes: tiny (many buckets per unit; not for the 10001-element
// units, to keep the run short), medium, one bucket for everything, and
// exactly one unit's shard per rank (the in-place paths).
std::vector<std::size_t> bucket_sizes(const FlatLayout& l, std::size_t n) {
  std::vector<std::size_t> out;
  if (n < 10000) out.push_back(3);
  out.push_back(1000);
  out.push_back(std::size_t{1} << 30);
  const std::size_t exact = l.unit(0).shard * static_cast<std::size_t>(l.world_size());
  if (exact > 0) out.push_back(exact);
  return out;
}

GradReducerOptions options(int stage, std::size_t bucket, bool overlap, Dtypes d) {
  const int w = world().world_size();
  return GradReducerOptions{.stage = stage, .reduce_bucket_size = bucket, .allgather_bucket_size = bucket,
                            .overlap = overlap, .compute_dtype = d.compute, .comm_dtype = d.comm,
                            .grad_dtype = d.compute,
                            .stored_scale = d.compute == DType::f32 ? 1.0f : 1.0f / static_cast<float>(w)};
}

// A GradReducer over `layout` on the world with options `o`, its buffers
// from a pool of `ops` counted in `ledger`, its gradients in an ArrayTarget
// of dtype `compute`.
struct ReducerFixture {
  ReducerFixture(DeviceOps& ops, const FlatLayout& layout, DType compute, GradReducerOptions o)
      : pool(ledger, ops), target(ops, layout, compute), reducer(world(), layout, ops, pool, o, target) {}
  MemoryLedger ledger;
  BufferPool pool;
  ArrayTarget target;
  GradReducer reducer;
};

// Runs body(layout, d, f) for every layout size of kSizes, bucket size of
// bucket_sizes, stage of `stages`, overlap off and on, and dtype pair of
// kDtypes, each with a fresh ReducerFixture f; the case is captured for
// failure messages.
template <class Body>
void for_each_reduction(DeviceOps& ops, std::initializer_list<int> stages, Body body) {
  for (std::size_t n : kSizes) {
    const FlatLayout layout = component_layout(n, world().world_size());
    for (std::size_t bucket : bucket_sizes(layout, n)) {
      for (int stage : stages) {
        for (bool overlap : {false, true}) {
          for (Dtypes d : kDtypes) {
            CAPTURE(n);
            CAPTURE(bucket);
            CAPTURE(stage);
            CAPTURE(overlap);
            CAPTURE(dtype_name(d.compute));
            CAPTURE(dtype_name(d.comm));
            ReducerFixture f(ops, layout, d.compute, options(stage, bucket, overlap, d));
            body(layout, d, f);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("GradReducer: stages 0/1 all-reduce the full gradients into the closed-form sum") {
  const int w = world().world_size(), r = world().rank();
  auto ops = make_cpu_ops();
  for_each_reduction(*ops, {0, 1}, [&](const FlatLayout& layout, Dtypes d, ReducerFixture& f) {
    for (UnitId u = 0; u < 3; ++u) {
      const UnitInfo& info = layout.unit(u);
      for (std::size_t i = 0; i < info.padded; ++i) {
        write_at(f.target.full_grad(u), d.compute, i, contribution(r, u, i, info.numel));
      }
    }
    for (UnitId u = 2; u >= 0; --u) f.reducer.reduce(u);  // backward order
    f.reducer.complete();
    const float scale = f.reducer.options().stored_scale;
    for (UnitId u = 0; u < 3; ++u) {
      const UnitInfo& info = layout.unit(u);
      int bad = 0;
      for (std::size_t i = 0; i < info.padded && bad < 3; ++i) {
        const float want = stored(exact_sum(w, u, i, info.numel), d.compute, scale);
        const float got = read_at(f.target.full_grad(u), d.compute, i);
        if (got != want) {
          ++bad;
          FAIL_CHECK("unit " << u << " element " << i << ": got " << got << ", want " << want);
        }
      }
    }
    CHECK(f.target.blocks == 0);
    CHECK(f.ledger.current(MemCategory::unsharded) == 0);  // every bucket buffer went back
  });
}

TEST_CASE("GradReducer: stages 2/3 reduce-scatter micro-batch gradients into the shards, accumulating") {
  const int w = world().world_size(), r = world().rank();
  auto ops = make_cpu_ops();
  for_each_reduction(*ops, {2, 3}, [&](const FlatLayout& layout, Dtypes d, ReducerFixture& f) {
    // fp32: two micro-batches (the shard holds twice the sum, exact);
    // 16-bit: one (a second addition would round).
    const int micro = d.compute == DType::f32 ? 2 : 1;
    for (int m = 0; m < micro; ++m) {
      for (UnitId u = 2; u >= 0; --u) {
        const UnitInfo& info = layout.unit(u);
        void* g = f.reducer.micro_batch_grad(u);
        CHECK(f.reducer.micro_batch_grad(u) == g);  // one buffer per micro-batch
        for (std::size_t i = 0; i < info.padded; ++i) {
          CHECK(read_at(g, d.compute, i) == 0.0f);  // leased zeroed
          write_at(g, d.compute, i, contribution(r, u, i, info.numel));
        }
        f.reducer.reduce(u);
      }
      f.reducer.complete();
    }
    const float scale = f.reducer.options().stored_scale;
    for (UnitId u = 0; u < 3; ++u) {
      const UnitInfo& info = layout.unit(u);
      int bad = 0;
      for (std::size_t j = 0; j < info.shard && bad < 3; ++j) {
        const std::size_t i = static_cast<std::size_t>(r) * info.shard + j;
        const float want =
            static_cast<float>(micro) * stored(exact_sum(w, u, i, info.numel), d.compute, scale);
        const float got = read_at(f.target.shard[static_cast<std::size_t>(u)].data(), d.compute, j);
        if (got != want) {
          ++bad;
          FAIL_CHECK("unit " << u << " shard element " << j << ": got " << got << ", want " << want);
        }
      }
    }
    CHECK(f.ledger.current(MemCategory::unsharded) == 0);  // micro-batch and bucket buffers went back
  });
}

TEST_CASE("GradReducer: a unit never handed a gradient reduces as zeros; discard() drops a half-done micro-batch") {
  auto ops = make_cpu_ops();
  const FlatLayout layout = component_layout(57, world().world_size());
  ReducerFixture f(*ops, layout, DType::f32, options(2, 1000, true, kDtypes[0]));
  // Half a micro-batch, then discarded: nothing reaches the shards.
  const UnitInfo& u1 = layout.unit(1);
  void* g = f.reducer.micro_batch_grad(1);
  for (std::size_t i = 0; i < u1.padded; ++i) write_at(g, DType::f32, i, 100.0f);
  f.reducer.reduce(1);
  f.reducer.micro_batch_grad(0);
  f.reducer.discard();
  CHECK(f.ledger.current(MemCategory::unsharded) == 0);
  for (UnitId u = 0; u < 3; ++u) f.reducer.reduce(u);  // units 0 and 2: no grad asked for
  f.reducer.complete();
  for (UnitId u = 0; u < 3; ++u) {
    const DeviceArray& s = f.target.shard[static_cast<std::size_t>(u)];
    for (std::size_t j = 0; j < s.numel(); ++j) REQUIRE(read_at(s.data(), DType::f32, j) == 0.0f);
  }
}

TEST_CASE("GradReducer: the stage 1/2 all-gather reassembles every unit from the ranks' shards") {
  const int r = world().rank();
  auto ops = make_cpu_ops();
  for (std::size_t n : kSizes) {
    const FlatLayout layout = component_layout(n, world().world_size());
    for (std::size_t bucket : bucket_sizes(layout, n)) {
      for (int stage : {1, 2}) {
        for (DType t : {DType::f32, DType::bf16}) {
          CAPTURE(n);
          CAPTURE(bucket);
          CAPTURE(stage);
          CAPTURE(dtype_name(t));
          ReducerFixture f(*ops, layout, t, options(stage, bucket, false, Dtypes{t, DType::f32}));
          // Full parameter buffers: this rank's shard holds h(u, i) = i mod 97 + u,
          // the rest -1 (overwritten by the gather).
          std::vector<DeviceArray> params;
          for (UnitId u = 0; u < 3; ++u) {
            const UnitInfo& info = layout.unit(u);
            params.push_back(ops->allocate(info.padded, t));
            for (std::size_t i = 0; i < info.padded; ++i) {
              const bool mine = i / info.shard == static_cast<std::size_t>(r);
              write_at(params.back().data(), t, i, mine ? static_cast<float>(i % 97 + u) : -1.0f);
            }
          }
          f.reducer.all_gather_shards([&](UnitId u) { return params[static_cast<std::size_t>(u)].data(); });
          for (UnitId u = 0; u < 3; ++u) {
            const UnitInfo& info = layout.unit(u);
            for (std::size_t i = 0; i < info.padded; ++i) {
              REQUIRE(read_at(params[static_cast<std::size_t>(u)].data(), t, i) == static_cast<float>(i % 97 + u));
            }
          }
          CHECK(f.ledger.current(MemCategory::unsharded) == 0);
        }
      }
    }
  }
}
