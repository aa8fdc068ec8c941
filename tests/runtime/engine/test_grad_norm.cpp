// GradNorm (runtime/engine/grad_norm.h) alone, at world sizes 1-4, over
// units of [N, 7, N] elements for N in 0, 1, 7, 57, 10001, stages 0-3 and
// both reduction orders, against closed forms (every gradient value is a
// small integer or half-integer, so every sum of squares is exact in double
// whatever the summation order):
//   - the data-parallel norm: each rank's share of the reduced gradient,
//     summed over the world, is the whole model's sum of squares, through
//     the unit path (GradSource::shard_stats) and the parameter-run path
//     (taken with a tie over a one-rank group, which changes nothing else);
//   - ties: a parameter tied over the world has its gradient summed on
//     every rank and counted once in the norm;
//   - tensor parallelism: the replicated parameter's gradient becomes the
//     tp average on every rank, counted once; the split one counts on every
//     rank; an undeclared parameter is named;
//   - an Inf on one rank only is counted on every rank.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "comm/collective_error.h"
#include "core/error.h"
#include "core/memory_ledger.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/grad_norm.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr const auto& kSizes = kComponentSizes;
constexpr ReductionOrder kOrders[] = {ReductionOrder::rank, ReductionOrder::native};

// The reduced gradient at flat index i of unit u (padding: 0): -2 .. 2.
float grad_value(UnitId u, std::size_t i, std::size_t numel) {
  return i < numel ? static_cast<float>(static_cast<int>((i + static_cast<std::size_t>(u)) % 5) - 2) : 0.0f;
}

// This rank's gradient buffers as the engine's ArrayStore keeps them: the
// full flat buffer at stages 0/1, the shard at stages 2/3, in host memory.
struct TestGrads final : GradSource {
  TestGrads(DeviceOps& ops, const FlatLayout& l, int stage, int rank) : layout(l), stage(stage), rank(rank) {
    for (const UnitInfo& u : l.units()) bufs.push_back(ops.allocate(stage < 2 ? u.padded : u.shard, DType::f32));
  }
  // Element at flat index i of unit u (which this rank's buffer must hold).
  float& at(UnitId u, std::size_t i) {
    const std::size_t first = stage < 2 ? 0 : static_cast<std::size_t>(rank) * layout.unit(u).shard;
    return bufs[static_cast<std::size_t>(u)].as<float>()[i - first];
  }
  // Every element this rank holds set to f(u, flat index).
  template <class F>
  void fill(F f) {
    for (UnitId u = 0; u < static_cast<UnitId>(bufs.size()); ++u) {
      const UnitInfo& info = layout.unit(u);
      const std::size_t lo = stage < 2 ? 0 : static_cast<std::size_t>(rank) * info.shard;
      const std::size_t hi = stage < 2 ? info.padded : lo + info.shard;
      for (std::size_t i = lo; i < hi; ++i) at(u, i) = f(u, i);
    }
  }
  std::byte* grads(UnitId u) override { return static_cast<std::byte*>(bufs[static_cast<std::size_t>(u)].data()); }
  // The rank's window, as ArrayStore::grad_stats reads it.
  kernels::GradStats shard_stats(UnitId u) override {
    const std::size_t shard = layout.unit(u).shard;
    const std::size_t first = stage < 2 ? static_cast<std::size_t>(rank) * shard : 0;
    return kernels::grad_stats(grads(u) + first * sizeof(float), DType::f32, shard);
  }

  const FlatLayout& layout;
  int stage, rank;
  std::vector<DeviceArray> bufs;
};

// The whole model's sum of squares of grad_value.
double closed_form(const FlatLayout& l) {
  double s = 0;
  for (UnitId u = 0; u < static_cast<UnitId>(l.units().size()); ++u) {
    for (std::size_t i = 0; i < l.unit(u).numel; ++i) s += std::pow(grad_value(u, i, l.unit(u).numel), 2);
  }
  return s;
}

GradNormOptions options(int stage, int rank, ReductionOrder order) {
  GradNormOptions o;
  o.stage = stage;
  o.rank = rank;
  o.order = order;
  return o;
}

// A two-unit model for one data-parallel rank (the mesh tests): unit "a"
// with "a.split" [n] and "a.rep" [7], unit "b" with "b.w" [n].
FlatLayout mesh_layout(std::size_t n) {
  FlatLayout l;
  const UnitId a = l.add_unit("a"), b = l.add_unit("b");
  l.add_param(a, "a.split", {static_cast<std::int64_t>(n)}, 0);
  l.add_param(a, "a.rep", {7}, 0);
  l.add_param(b, "b.w", {static_cast<std::int64_t>(n)}, 0);
  l.finalize(1);
  return l;
}

// Rank r's gradient at flat index i of unit u in the mesh tests: r + (i mod
// 3) + shift (padding: 0).
float mesh_value(const FlatLayout& l, int r, UnitId u, std::size_t i, int shift) {
  return i < l.unit(u).numel ? static_cast<float>(r + static_cast<int>(i % 3) + shift) : 0.0f;
}

// One stage's gradient buffers of a one-rank data-parallel group, holding
// this rank's mesh_value, and the pool GradNorm leases from.
struct MeshGrads {
  MeshGrads(DeviceOps& ops, const FlatLayout& l, int stage, int shift) : pool(ledger, ops), g(ops, l, stage, 0) {
    const int r = world().rank();
    g.fill([&](UnitId u, std::size_t i) { return mesh_value(l, r, u, i, shift); });
  }
  MemoryLedger ledger;
  BufferPool pool;
  TestGrads g;
};

// value(r, u, i) summed over the W ranks, in rank order (exact: small integers).
template <class Value>
float rank_sum(int W, UnitId u, std::size_t i, Value value) {
  float sum = 0;
  for (int r = 0; r < W; ++r) sum += value(r, u, i);
  return sum;
}

// The squares of every rank's value(r, u, i) outside parameter `skip`.
template <class Value>
double squares_outside(const FlatLayout& l, int W, const ParamInfo& skip, Value value) {
  double s = 0;
  for (int r = 0; r < W; ++r) {
    for (UnitId u = 0; u < static_cast<UnitId>(l.units().size()); ++u) {
      for (std::size_t i = 0; i < l.unit(u).numel; ++i) {
        if (u == skip.unit && i >= skip.offset && i < skip.offset + skip.numel) continue;
        s += std::pow(value(r, u, i), 2);
      }
    }
  }
  return s;
}

}  // namespace

TEST_CASE("GradNorm: the data-parallel norm is the whole model's, by units and by parameter runs") {
  Communicator& w = world();
  const std::unique_ptr<Communicator> alone = w.split(w.rank(), 0);  // a one-rank tie group
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  for (std::size_t n : kSizes) {
    const FlatLayout layout = component_layout(n, w.world_size());
    const double want = closed_form(layout);
    for (int stage = 0; stage <= 3; ++stage) {
      for (ReductionOrder order : kOrders) {
        for (bool runs : {false, true}) {
          CAPTURE(n);
          CAPTURE(stage);
          CAPTURE(runs);
          MemoryLedger ledger;
          BufferPool pool(ledger, *ops);
          TestGrads g(*ops, layout, stage, w.rank());
          g.fill([&](UnitId u, std::size_t i) { return grad_value(u, i, layout.unit(u).numel); });
          GradNorm norm(layout, *ops, pool, nullptr, w, options(stage, w.rank(), order));
          if (runs) norm.tie(layout.unit(0).params[0], *alone);  // the parameter-run path, no sum
          const GradTotals t = norm.compute(g, nullptr);
          CHECK(t.sum_of_squares == want);
          CHECK(t.nonfinite == 0);
          // The gradients are unchanged.
          TestGrads fresh(*ops, layout, stage, w.rank());
          fresh.fill([&](UnitId u, std::size_t i) { return grad_value(u, i, layout.unit(u).numel); });
          for (std::size_t u = 0; u < g.bufs.size(); ++u) {
            if (g.bufs[u].bytes() == 0) continue;  // an empty shard has no data pointer (memcmp needs one)
            CHECK(std::memcmp(g.bufs[u].data(), fresh.bufs[u].data(), g.bufs[u].bytes()) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("GradNorm: an Inf on one rank is counted on every rank") {
  Communicator& w = world();
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  const FlatLayout layout = component_layout(57, w.world_size());
  const UnitId u = 1;  // 7 elements: every rank's shard holds at least padding
  for (int stage = 0; stage <= 3; ++stage) {
    for (ReductionOrder order : kOrders) {
      CAPTURE(stage);
      MemoryLedger ledger;
      BufferPool pool(ledger, *ops);
      TestGrads g(*ops, layout, stage, w.rank());
      g.fill([&](UnitId v, std::size_t i) { return grad_value(v, i, layout.unit(v).numel); });
      // The last rank's first shard element (padding beyond 7 elements at
      // world size > 1: the statistics cover the whole shard).
      const int last = w.world_size() - 1;
      if (w.rank() == last) g.at(u, static_cast<std::size_t>(last) * layout.unit(u).shard) =
          std::numeric_limits<float>::infinity();
      GradNorm norm(layout, *ops, pool, nullptr, w, options(stage, w.rank(), order));
      const GradTotals t = norm.compute(g, nullptr);
      CHECK(t.nonfinite == 1);
    }
  }
}

TEST_CASE("GradNorm: a parameter tied over the world is summed on every rank and counted once") {
  Communicator& w = world();
  const int W = w.world_size();
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  for (std::size_t n : kSizes) {
    // Each rank alone in its data-parallel group (a pipeline stage of its
    // own): "a.split" is tied over the world, the rest is each rank's.
    const FlatLayout layout = mesh_layout(n);
    const ParamId tied = 0;
    const ParamInfo& tp = layout.param(tied);
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(n);
      CAPTURE(stage);
      MeshGrads m(*ops, layout, stage, -1);
      TestGrads& g = m.g;
      const auto value = [&](int r, UnitId u, std::size_t i) { return mesh_value(layout, r, u, i, -1); };
      GradNorm norm(layout, *ops, m.pool, nullptr, w, options(stage, 0, ReductionOrder::rank));
      norm.tie(tied, w);
      norm.check_ties();
      const GradTotals t = norm.compute(g, nullptr);
      // The tied copy: the sum over ranks, on every rank, counted once; the
      // rest: every rank's own.
      double want = squares_outside(layout, W, tp, value);
      for (std::size_t i = tp.offset; i < tp.offset + tp.numel; ++i) {
        const float sum = rank_sum(W, 0, i, value);
        CHECK(g.at(0, i) == sum);
        want += static_cast<double>(sum) * sum;  // once, not W times
      }
      CHECK(t.sum_of_squares == want);
      CHECK(t.nonfinite == 0);
    }
  }
}

TEST_CASE("GradNorm: a tied copy laid out differently is refused on every rank") {
  Communicator& w = world();
  if (w.world_size() == 1) return;  // a tie needs two copies
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  MemoryLedger ledger;
  BufferPool pool(ledger, *ops);
  // Rank 0's copy has 7 elements, the others 8.
  const FlatLayout layout = mesh_layout(w.rank() == 0 ? 7 : 8);
  GradNorm norm(layout, *ops, pool, nullptr, w, options(1, 0, ReductionOrder::rank));
  norm.tie(0, w);
  CHECK_THROWS_WITH_AS(norm.check_ties(), doctest::Contains("tied parameter \"a.split\""), AgreedConfigError);
}

TEST_CASE("GradNorm: tensor parallelism averages the replicated gradient and counts it once") {
  Communicator& w = world();
  const int W = w.world_size();  // the whole world is one tp group
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  for (std::size_t n : kSizes) {
    const FlatLayout layout = mesh_layout(n);
    const ParamInfo& rep = layout.param(1);
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(n);
      CAPTURE(stage);
      MeshGrads m(*ops, layout, stage, 0);  // split slices and replicated alike
      TestGrads& g = m.g;
      const auto value = [&](int r, UnitId u, std::size_t i) { return mesh_value(layout, r, u, i, 0); };
      GradNorm norm(layout, *ops, m.pool, &w, w, options(stage, 0, ReductionOrder::rank));
      norm.declare(0, TensorParallel::split(0));
      norm.declare(1, TensorParallel::replicated());
      norm.declare(2, TensorParallel::split(0));
      CHECK(norm.parallel(1).is_replicated());
      CHECK(norm.parallel(2).split_dim == 0);
      norm.check_declarations();
      const GradTotals t = norm.compute(g, nullptr);
      // Every tp rank's split slices; the replicated mean once (tp rank 0).
      double want = squares_outside(layout, W, rep, value);
      for (std::size_t i = rep.offset; i < rep.offset + rep.numel; ++i) {
        const float mean = rank_sum(W, 0, i, value) * (1.0f / static_cast<float>(W));  // as the cast kernel
        CHECK(g.at(0, i) == mean);
        want += static_cast<double>(mean) * mean;
      }
      CHECK(t.sum_of_squares == want);
    }
  }
}

TEST_CASE("GradNorm: with tp > 1 an undeclared parameter is named") {
  Communicator& w = world();
  if (w.world_size() == 1) return;  // tp = 1 needs no declarations
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  MemoryLedger ledger;
  BufferPool pool(ledger, *ops);
  const FlatLayout layout = mesh_layout(7);
  GradNorm norm(layout, *ops, pool, &w, w, options(0, 0, ReductionOrder::rank));
  norm.declare(0, TensorParallel::split(0));
  norm.declare(2, TensorParallel::split(0));
  CHECK_THROWS_WITH_AS(norm.check_declarations(), doctest::Contains("undeclared: a.rep"), ConfigError);
}
