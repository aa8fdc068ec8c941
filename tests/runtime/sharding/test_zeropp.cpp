// ZeRO++ in the engine's components, without an Engine:
//  - qwZ (Unsharder, [Note: ZeRO++ unsharding]): every full buffer equals
//    the ranks' shards quantized and dequantized by the CPU reference
//    kernels, bit for bit (f32, bf16, f16; int8 and int4), and the shards
//    are untouched;
//  - hpZ: full buffers bitwise the plain all-gather's, the later gathers of
//    a step from the group's secondary shards, fresh values after
//    refresh(), the secondary shards in the ledger;
//  - qgZ (GradReducer, [Note: hierarchical quantized reduce-scatter]): the
//    reduced shard equals a simulation of the algorithm with the reference
//    kernels, bit for bit, and is within the quantization bound of the fp32
//    reduction; with error feedback the residuals follow the simulation
//    over two micro-batches; uneven nodes keep the plain reduce-scatter.
// At every world size 1-4 (nodes of 1, 2 or 4 ranks, by synthetic host
// names), units [n, 7, n] for n in 0, 1, 7, 57, 10001.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "comm/node_groups.h"
#include "kernels/cpu/convert.h"
#include "kernels/quant/symmetric_quant.h"
#include "runtime/sharding/buffer_pool.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/sharding/grad_reducer.h"
#include "runtime/sharding/unsharder.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;
using kernels::QuantBits;
using kernels::SymQuantFormat;

namespace {

constexpr const auto& kSizes = kComponentSizes;

// Value k of rank r's shard (or gradient) of unit u in generation g: in
// [-1, 1], with magnitudes changing every 40 elements so that blocks get
// different scales.
float value(int r, UnitId u, std::size_t k, int g) {
  const int h = static_cast<int>((31 * r + 17 * u + 7 * static_cast<int>(k % 4001) + 101 * g) % 1999) - 999;
  const float scale[] = {1.0f, 0.01f, 3.0f, 1e-4f};
  return static_cast<float>(h) / 999.0f * scale[(k / 40) % 4];
}

// n values of dtype t as bytes.
std::vector<std::byte> as_bytes(const std::vector<float>& v, DType t) {
  std::vector<std::byte> out(v.size() * dtype_size(t) + 4);
  for (std::size_t i = 0; i < v.size(); ++i) kernels::store_from_float(out.data(), t, i, v[i]);
  return out;
}

// Rank r's shard of unit u (generation g) as dtype t bytes.
std::vector<std::byte> shard_bytes(int r, UnitId u, std::size_t shard, DType t, int g) {
  std::vector<float> v(shard);
  for (std::size_t k = 0; k < shard; ++k) v[k] = value(r, u, k, g);
  return as_bytes(v, t);
}

// n elements of dtype t quantized in format f and dequantized back, by the
// reference kernels.
std::vector<std::byte> round_trip(const std::vector<std::byte>& x, std::size_t n, DType t, SymQuantFormat f) {
  std::vector<float> chunk(kernels::sym_quant_chunk_bytes(n, f) / 4 + 1);
  kernels::quantize_symmetric_reference(x.data(), t, n, f, chunk.data());
  std::vector<std::byte> y(n * dtype_size(t) + 4);
  kernels::dequantize_symmetric_reference(chunk.data(), n, f, y.data(), t);
  return y;
}

// This rank's shards of every unit, in the ops' memory.
struct FloatSource final : ShardSource {
  FloatSource(DeviceOps& ops, const FlatLayout& l, DType t) : ops(ops), layout(l), dtype(t) {
    for (const UnitInfo& u : l.units()) shards.push_back(ops.allocate(u.shard, t));
    fill(0);
  }
  void fill(int g) {
    for (std::size_t u = 0; u < shards.size(); ++u) {
      const auto b = shard_bytes(world().rank(), static_cast<UnitId>(u), shards[u].numel(), dtype, g);
      if (shards[u].bytes() > 0) std::memcpy(shards[u].data(), b.data(), shards[u].bytes());
    }
  }
  ShardView shard(UnitId u) override { return ShardView{.data = shards[static_cast<std::size_t>(u)].data()}; }
  DeviceOps& ops;
  const FlatLayout& layout;
  DType dtype;
  std::vector<DeviceArray> shards;
};

// The full buffer of unit u expected in generation g: every rank's shard,
// through the qwZ round trip when `format` is given.
std::vector<std::byte> expected_full(const FlatLayout& l, UnitId u, DType t, int g, const SymQuantFormat* format) {
  const UnitInfo& info = l.unit(u);
  const std::size_t e = dtype_size(t);
  std::vector<std::byte> full(info.padded * e + 4);
  for (int r = 0; r < l.world_size(); ++r) {
    auto part = shard_bytes(r, u, info.shard, t, g);
    if (format != nullptr) part = round_trip(part, info.shard, t, *format);
    if (info.shard > 0) std::memcpy(full.data() + static_cast<std::size_t>(r) * info.shard * e, part.data(), info.shard * e);
  }
  return full;
}

bool same_bytes(const void* a, const std::vector<std::byte>& b, std::size_t bytes) {
  return bytes == 0 || std::memcmp(a, b.data(), bytes) == 0;
}

struct UnsharderFixture {
  UnsharderFixture(std::size_t n, DType t, UnsharderOptions o, int k)
      : ops(make_cpu_ops()),
        layout(component_layout(n, world().world_size())),
        pool(ledger, *ops),
        source(*ops, layout, t),
        group(k > 1 ? world().split(world().rank() / k, world().rank()) : nullptr),
        unsharder(world(), layout, *ops, pool, o, source, group.get()) {}
  std::unique_ptr<DeviceOps> ops;
  FlatLayout layout;
  MemoryLedger ledger;
  BufferPool pool;
  FloatSource source;
  std::unique_ptr<Communicator> group;
  Unsharder unsharder;
};

// Forward 0, 1, 2 and backward 2, 1, 0 (overlap on: unit 2 is kept from
// its forward to its backward use), each full buffer checked.
void check_pass(UnsharderFixture& f, DType t, int g, const SymQuantFormat* format) {
  for (UnitId u : {0, 1, 2, 2, 1, 0}) {
    f.unsharder.unshard(u);
    const std::vector<std::byte> want = expected_full(f.layout, u, t, g, format);
    CAPTURE(u);
    CHECK(same_bytes(f.unsharder.full(u), want, f.layout.unit(u).padded * dtype_size(t)));
    f.unsharder.reshard(u);
  }
  f.unsharder.end_micro_batch();
}

}  // namespace

TEST_CASE("qwZ: every gathered full buffer is the ranks' dequantized shards, bit for bit; shards untouched") {
  for (std::size_t n : kSizes) {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (SymQuantFormat fmt_ : {SymQuantFormat{QuantBits::int8, 16}, SymQuantFormat{QuantBits::int4, 2048}}) {
        CAPTURE(n);
        CAPTURE(dtype_name(t));
        CAPTURE(kernels::quant_bits_name(fmt_.bits));
        UnsharderOptions o{.gather = true, .overlap = true, .dtype = t};
        o.quantized = fmt_;
        UnsharderFixture f(n, t, o, 1);
        for (int step = 0; step < 2; ++step) {
          check_pass(f, t, step, &fmt_);
          // The optimizer changed the shards: the next gathers see them.
          f.source.fill(step + 1);
          f.unsharder.refresh();
        }
        // The shards themselves are exact (the master copy is never quantized).
        for (UnitId u = 0; u < 3; ++u) {
          const auto want = shard_bytes(world().rank(), u, f.layout.unit(u).shard, t, 2);
          CHECK(same_bytes(f.source.shards[static_cast<std::size_t>(u)].data(), want,
                           f.source.shards[static_cast<std::size_t>(u)].bytes()));
        }
        CHECK(f.ledger.current(MemCategory::unsharded) == 0);  // chunks and full buffers went back
      }
    }
  }
}

TEST_CASE("hpZ: full buffers equal the plain all-gather's; a unit's later gathers in a step stay in the group") {
  const int w = world().world_size();
  for (int k = 2; k <= w; ++k) {
    if (w % k != 0) continue;
    for (std::size_t n : kSizes) {
      for (bool quantized : {false, true}) {
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(quantized);
        const DType t = DType::bf16;
        const SymQuantFormat q8{QuantBits::int8, 64};
        UnsharderOptions o{.gather = true, .overlap = true, .dtype = t};
        if (quantized) o.quantized = q8;
        o.hpz_partition_size = k;
        UnsharderFixture f(n, t, o, k);
        std::uint64_t secondary = 0;
        for (const UnitInfo& u : f.layout.units()) secondary += u.padded / static_cast<std::size_t>(k) * 2;
        CHECK(f.ledger.current(MemCategory::secondary) == secondary);
        CHECK(hpz_secondary_bytes(f.layout, o) == secondary);
        for (int step = 0; step < 2; ++step) {
          check_pass(f, t, step, quantized ? &q8 : nullptr);  // forward: world; backward of 1, 0: the group
          check_pass(f, t, step, quantized ? &q8 : nullptr);  // a second micro-batch: the group only
          f.source.fill(step + 1);
          f.unsharder.refresh();  // stale secondary shards: the next step gathers over the world again
        }
        // Per step: unit 0 and 1 over the world once, then 1 (unit 0: 1
        // + 2) from the group; unit 2 kept from forward to backward.
        CHECK(f.unsharder.all_gathers(0) == 2 * 4);
        CHECK(f.unsharder.secondary_gathers(0) == 2 * 3);
        CHECK(f.unsharder.secondary_gathers(1) == 2 * 3);
        CHECK(f.unsharder.all_gathers(2) - f.unsharder.secondary_gathers(2) == 2);
        // A unit held across refresh() is gathered again with the new
        // shards, over the world (its secondary copy is stale), and its
        // next gather from the group sees them too.
        f.unsharder.unshard(1);
        f.source.fill(7);
        f.unsharder.refresh();
        const std::size_t bytes = f.layout.unit(1).padded * dtype_size(t);
        CHECK(same_bytes(f.unsharder.full(1), expected_full(f.layout, 1, t, 7, quantized ? &q8 : nullptr), bytes));
        f.unsharder.reshard(1);
        f.unsharder.unshard(1);
        CHECK(same_bytes(f.unsharder.full(1), expected_full(f.layout, 1, t, 7, quantized ? &q8 : nullptr), bytes));
        f.unsharder.reshard(1);
      }
    }
  }
}

namespace {

// The gradient shards of a GradReducer's target, fp32 in host memory.
struct ShardTarget final : GradTarget {
  ShardTarget(DeviceOps& ops, const FlatLayout& l) : ops(ops) {
    for (const UnitInfo& u : l.units()) shard.push_back(ops.allocate(u.shard, DType::f32));
  }
  void* full_grad(UnitId) override { return nullptr; }
  void accumulate_shard(UnitId u, std::size_t at, const void* src, DType src_type, std::size_t n,
                        float scale) override {
    ops.accumulate_cast(shard[static_cast<std::size_t>(u)].at(at), DType::f32, src, src_type, n, scale);
  }
  DeviceOps& ops;
  std::vector<DeviceArray> shard;
};

// Rank r's micro-batch gradient of unit u (micro-batch m): padded
// elements, 0 in the padding.
std::vector<float> gradient(int r, const UnitInfo& info, UnitId u, int m) {
  std::vector<float> g(info.padded, 0.0f);
  for (std::size_t i = 0; i < info.numel; ++i) g[i] = value(r, u, i, 5 + m);
  return g;
}

std::vector<float> dequantized(const std::vector<float>& chunk, std::size_t n, SymQuantFormat f) {
  std::vector<float> y(n);
  kernels::dequantize_symmetric_reference(chunk.data(), n, f, y.data(), DType::f32);
  return y;
}

// Quantizes x (n floats; with feedback into *residual) and returns the
// dequantized values; `scales` receives the block scales.
std::vector<float> quantize_round(const float* x, std::size_t n, SymQuantFormat f, float* residual,
                                  std::vector<float>* scales) {
  std::vector<float> chunk(kernels::sym_quant_chunk_bytes(n, f) / 4 + 1);
  if (residual != nullptr) {
    kernels::quantize_symmetric_feedback_reference(x, DType::f32, n, f, residual, chunk.data());
  } else {
    kernels::quantize_symmetric_reference(x, DType::f32, n, f, chunk.data());
  }
  if (scales != nullptr) {
    const auto* s = reinterpret_cast<const float*>(reinterpret_cast<const std::byte*>(chunk.data()) +
                                                   kernels::sym_quant_scales_offset(n, f));
    scales->assign(s, s + kernels::sym_quant_scale_count(n, f));
  }
  return dequantized(chunk, n, f);
}

// The qgZ simulation of [Note: hierarchical quantized reduce-scatter] for
// one unit sent as one bucket (world blocks of `shard`): rank `me`'s
// result, every rank's residual updated when `residuals` is given, and
// per element the bound of the quantizations it went through.
struct Simulated {
  std::vector<float> out, bound;
};
Simulated simulate(const std::vector<std::vector<float>>& grads, std::size_t shard, int nodes, int per_node,
                   SymQuantFormat f, std::vector<std::vector<float>>* residuals, int me) {
  const int world = nodes * per_node;
  Simulated s;
  s.out.assign(shard, 0.0f);
  s.bound.assign(shard, 0.0);
  const double qterm = kernels::sym_quant_qmax(f.bits) * std::ldexp(1.0, -149);
  auto add_bound = [&](const std::vector<float>& scales) {
    for (std::size_t i = 0; i < shard; ++i) s.bound[i] += scales[i / f.block] * (0.5 + std::ldexp(1.0, -16)) + qterm;
  };
  // Step 1 (per rank, every destination block), or with one rank per node
  // the blocks as they are.
  std::vector<std::vector<std::vector<float>>> sent(static_cast<std::size_t>(world));  // [rank][dest]
  for (int r = 0; r < world; ++r) {
    for (int d = 0; d < world; ++d) {
      const float* x = grads[static_cast<std::size_t>(r)].data() + static_cast<std::size_t>(d) * shard;
      float* res = residuals ? (*residuals)[static_cast<std::size_t>(r)].data() + static_cast<std::size_t>(d) * shard
                             : nullptr;
      if (per_node == 1) {
        sent[static_cast<std::size_t>(r)].emplace_back(x, x + shard);
        if (res != nullptr) {
          // With one rank per node the first quantization is hop 2's: fed back there.
          std::vector<float> scales;
          sent[static_cast<std::size_t>(r)].back() = quantize_round(x, shard, f, res, d == me ? &scales : nullptr);
          if (d == me) add_bound(scales);
        }
        continue;
      }
      std::vector<float> scales;
      sent[static_cast<std::size_t>(r)].push_back(quantize_round(x, shard, f, res, d == me ? &scales : nullptr));
      if (d == me) add_bound(scales);
    }
  }
  // Steps 3-5 for destination `me`.
  std::vector<std::vector<float>> node_sums;
  for (int m = 0; m < nodes; ++m) {
    std::vector<float> acc = sent[static_cast<std::size_t>(m * per_node)][static_cast<std::size_t>(me)];
    for (int j = 1; j < per_node; ++j) {
      const auto& y = sent[static_cast<std::size_t>(m * per_node + j)][static_cast<std::size_t>(me)];
      for (std::size_t i = 0; i < shard; ++i) acc[i] = acc[i] + y[i];
    }
    node_sums.push_back(acc);
  }
  if (nodes == 1) {
    s.out = node_sums[0];
    return s;
  }
  for (int m = 0; m < nodes; ++m) {
    std::vector<float> y;
    if (per_node == 1 && residuals != nullptr) {
      y = node_sums[static_cast<std::size_t>(m)];  // quantized in step 1 above, with feedback
    } else {
      std::vector<float> scales;
      y = quantize_round(node_sums[static_cast<std::size_t>(m)].data(), shard, f, nullptr, &scales);
      add_bound(scales);
    }
    for (std::size_t i = 0; i < shard; ++i) s.out[i] = m == 0 ? y[i] : s.out[i] + y[i];
  }
  return s;
}

struct ReducerRig {
  ReducerRig(const FlatLayout& l, GradReducerOptions o, int per_node)
      : ops(make_cpu_ops()),
        pool(ledger, *ops),
        target(*ops, l),
        nodes(split_by_node(world(), fmt::format("node-{}", world().rank() / per_node))),
        reducer(world(), l, *ops, pool, o, target, &nodes) {}
  std::unique_ptr<DeviceOps> ops;
  MemoryLedger ledger;
  BufferPool pool;
  ShardTarget target;
  NodeGroups nodes;
  GradReducer reducer;
};

// One micro-batch: every unit's gradient handed over and reduced.
void reduce_micro_batch(ReducerRig& rig, const FlatLayout& l, int m) {
  for (UnitId u = 2; u >= 0; --u) {
    const UnitInfo& info = l.unit(u);
    const std::vector<float> g = gradient(world().rank(), info, u, m);
    if (!g.empty()) std::memcpy(rig.reducer.micro_batch_grad(u), g.data(), g.size() * 4);
    rig.reducer.reduce(u);
  }
  rig.reducer.complete();
}

}  // namespace

TEST_CASE("qgZ: the reduced shard is the simulated hierarchy bit for bit, within the bound of the fp32 sum") {
  const int w = world().world_size(), me = world().rank();
  for (int per_node = 1; per_node <= w; ++per_node) {
    if (w % per_node != 0) continue;
    const int nodes = w / per_node;
    for (std::size_t n : kSizes) {
      for (SymQuantFormat fq : {SymQuantFormat{QuantBits::int4, 16}, SymQuantFormat{QuantBits::int8, 2048}}) {
        for (bool feedback : {false, true}) {
          for (bool overlap : {false, true}) {
            CAPTURE(per_node);
            CAPTURE(n);
            CAPTURE(kernels::quant_bits_name(fq.bits));
            CAPTURE(feedback);
            CAPTURE(overlap);
            const FlatLayout l = component_layout(n, w);
            // Buckets of one unit each: in place, world blocks of the shard.
            const GradReducerOptions o{.stage = 3, .reduce_bucket_size = std::size_t{1} << 30, .overlap = overlap,
                                       .quantized = fq, .error_feedback = feedback};
            ReducerRig rig(l, o, per_node);
            CHECK(rig.reducer.quantized() == (w > 1));
            CHECK(rig.ledger.current(MemCategory::residual) == (w > 1 ? error_feedback_bytes(l, o) : 0));
            // Every rank's residual per unit, simulated.
            std::vector<std::vector<std::vector<float>>> residuals(3);
            for (std::size_t u = 0; u < 3; ++u) {
              residuals[u].assign(static_cast<std::size_t>(w), std::vector<float>(l.units()[u].padded, 0.0f));
            }
            std::vector<std::vector<float>> want(3);
            for (int m = 0; m < 2; ++m) {
              reduce_micro_batch(rig, l, m);
              for (UnitId u = 0; u < 3; ++u) {
                const UnitInfo& info = l.unit(u);
                std::vector<std::vector<float>> grads;
                for (int r = 0; r < w; ++r) grads.push_back(gradient(r, info, u, m));
                auto& mine = want[static_cast<std::size_t>(u)];
                mine.resize(info.shard, 0.0f);
                if (w == 1) {
                  for (std::size_t i = 0; i < info.shard; ++i) mine[i] += grads[0][i];
                } else {
                  const Simulated s = simulate(grads, info.shard, nodes, per_node, fq,
                                               feedback ? &residuals[static_cast<std::size_t>(u)] : nullptr, me);
                  // The fp32 sum, and the quantized one within the stated bound of it.
                  long outside = -1;
                  for (std::size_t i = 0; i < info.shard; ++i) {
                    double exact = 0;
                    for (int r = 0; r < w; ++r) {
                      exact += grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(me) * info.shard + i];
                    }
                    const double slack = 1e-6 * (1.0 + std::fabs(exact)) * w;
                    if (!feedback && std::fabs(s.out[i] - exact) > s.bound[i] + slack) outside = static_cast<long>(i);
                    mine[i] += s.out[i];
                  }
                  CHECK(outside == -1);
                }
                const auto* got = static_cast<const float*>(rig.target.shard[static_cast<std::size_t>(u)].data());
                long bad = -1;
                for (std::size_t i = 0; i < info.shard; ++i) {
                  if (float_bits(got[i]) != float_bits(mine[i])) bad = static_cast<long>(i);
                }
                CAPTURE(u);
                CAPTURE(m);
                CHECK(bad == -1);
                if (feedback && w > 1) {
                  const float* res = rig.reducer.residual(u);
                  const auto& sim = residuals[static_cast<std::size_t>(u)][static_cast<std::size_t>(me)];
                  CHECK((sim.empty() || std::memcmp(res, sim.data(), sim.size() * 4) == 0));
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("qgZ: packed buckets stay within the bound; uneven nodes keep the plain reduce-scatter, saying why") {
  const int w = world().world_size(), me = world().rank();
  const FlatLayout l = component_layout(57, w);
  SUBCASE("small buckets: several units and partial units per bucket") {
    for (bool feedback : {false, true}) {
      const SymQuantFormat fq{QuantBits::int4, 16};
      const GradReducerOptions o{.stage = 2, .reduce_bucket_size = 20 * static_cast<std::size_t>(w), .overlap = true,
                                 .quantized = fq, .error_feedback = feedback};
      ReducerRig rig(l, o, 1);
      reduce_micro_batch(rig, l, 0);
      for (UnitId u = 0; u < 3; ++u) {
        const UnitInfo& info = l.unit(u);
        float amax = 0;
        std::vector<double> exact(info.shard, 0.0);
        for (int r = 0; r < w; ++r) {
          const auto g = gradient(r, info, u, 0);
          for (std::size_t i = 0; i < info.shard; ++i) exact[i] += g[static_cast<std::size_t>(me) * info.shard + i];
          for (float x : g) amax = std::max(amax, std::fabs(x));
        }
        // Every quantization of every rank and node: scale at most amax x w / 7.
        const double bound = (w == 1 ? 0.0 : 2.0 * w * (amax * w / 7.0) * (0.5 + std::ldexp(1.0, -16))) + 1e-5;
        const auto* got = static_cast<const float*>(rig.target.shard[static_cast<std::size_t>(u)].data());
        for (std::size_t i = 0; i < info.shard; ++i) {
          CAPTURE(i);
          CHECK(std::fabs(got[i] - exact[i]) <= bound);
        }
      }
    }
  }
  SUBCASE("nodes of unequal size: the plain path, bitwise the rank-ordered sum") {
    if (w != 3) return;
    // Ranks 0 and 1 on one node, rank 2 alone.
    GradReducerOptions o{.stage = 3, .quantized = SymQuantFormat{QuantBits::int4, 16}};
    ReducerRig rig(l, o, 2);
    CHECK_FALSE(rig.reducer.quantized());
    CHECK(rig.reducer.note().find("do not split evenly") != std::string::npos);
    reduce_micro_batch(rig, l, 0);
    for (UnitId u = 0; u < 3; ++u) {
      const UnitInfo& info = l.unit(u);
      const auto* got = static_cast<const float*>(rig.target.shard[static_cast<std::size_t>(u)].data());
      for (std::size_t i = 0; i < info.shard; ++i) {
        float sum = gradient(0, info, u, 0)[static_cast<std::size_t>(me) * info.shard + i];
        for (int r = 1; r < w; ++r) sum += gradient(r, info, u, 0)[static_cast<std::size_t>(me) * info.shard + i];
        CHECK(float_bits(got[i]) == float_bits(sum));
      }
    }
  }
}
