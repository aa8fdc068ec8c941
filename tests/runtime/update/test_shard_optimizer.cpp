// ShardOptimizer (runtime/update/shard_optimizer.h) alone, over an
// ArrayStore without an Engine, at world sizes 1-4, stages 0-3, fp32 and
// bf16 compute dtypes and the three state formats (fp32, bf16 with
// stochastic rounding, 8-bit with 64-element blocks), on a model with two
// parameter groups: unit "u0" holds "a" [N] (group 0) and "b" [7] (group 1),
// unit "u1" "c" [N] (group 1), for N in 0, 1, 7, 57, 10001. Two updates of
// this rank's shards must equal, bit for bit, the kernels run on the
// unsharded arrays: fp32 and bf16 states one call per parameter over its
// whole flat range (bf16 with the flat index as the rounding position),
// 8-bit states one optimizer_update_8bit per shard window with the
// parameters in it as runs (the blocks start at each window: [Note: state
// arrays]): the weights (parameters, or master weights and the rounded
// compute copy), and every state array of every window this rank holds. The
// state windows read back as fp32 equal the reference's widened or
// dequantized states, and fp32 / bf16 values written back give the stored
// bytes. A wrong group, window or rounding position changes bits.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "kernels/cpu/adam/quant_map.h"
#include "kernels/cpu/cast.h"
#include "optimizer/update_8bit.h"
#include "optimizer/update_bf16.h"
#include "runtime/update/shard_optimizer.h"
#include "runtime/sharding/array_store.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

constexpr const auto& kSizes = kComponentSizes;
constexpr StateDtype kFormats[] = {StateDtype::fp32, StateDtype::bf16, StateDtype::q8};
constexpr DType kDtypes[] = {DType::f32, DType::bf16};
constexpr double kLr[] = {1e-3, 3e-3};      // per group
constexpr double kDecay[] = {0.01, 0.0};    // per group
constexpr float kGradScale = 0.5f;

FlatLayout two_group_layout(std::size_t n, int world_size) {
  FlatLayout l;
  const UnitId u0 = l.add_unit("u0"), u1 = l.add_unit("u1");
  l.add_param(u0, "a", {static_cast<std::int64_t>(n)}, 0);
  l.add_param(u0, "b", {7}, 1);
  l.add_param(u1, "c", {static_cast<std::int64_t>(n)}, 1);
  l.finalize(world_size);
  return l;
}

OptimizerHyper hyper_for(StateDtype f) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = kLr[0];
  h.weight_decay = kDecay[0];
  h.states.dtype = f;
  h.states.block_size = 64;
  h.states.min_8bit_size = 1;
  h.states.rounding = StateRounding::stochastic;
  h.states.seed = 11;
  return h;
}

// Values at flat index i of unit u (padding: 0).
float param_value(UnitId u, std::size_t i) { return 0.01f * static_cast<float>((i * 3 + u) % 13) - 0.05f; }
float grad_value(UnitId u, std::size_t i, int step) {
  return 0.1f * static_cast<float>((i * 7 + u + static_cast<std::size_t>(step)) % 11) - 0.5f;
}

// One unit's whole (unsharded) arrays, updated by the kernels directly.
struct Reference {
  std::vector<float> weights;           // padded fp32: parameters or master weights
  std::vector<std::byte> copy;          // mixed precision: the compute copy (padded)
  std::vector<std::vector<std::byte>> states;  // the unit's state arrays, every window end to end
};

// Bytes of element range [lo, hi) of a typed array.
std::vector<std::byte> slice(const void* p, DType t, std::size_t lo, std::size_t hi) {
  const auto* b = static_cast<const std::byte*>(p);
  return std::vector<std::byte>(b + lo * dtype_size(t), b + hi * dtype_size(t));
}

// The padded buffer of f(i) for i < numel, in dtype t.
std::vector<std::byte> typed(std::size_t padded, std::size_t numel, DType t, auto f) {
  std::vector<float> v(padded, 0.0f);
  for (std::size_t i = 0; i < numel; ++i) v[i] = f(i);
  std::vector<std::byte> out(padded * dtype_size(t));
  kernels::cast(out.data(), t, v.data(), DType::f32, padded);
  return out;
}

void run_case(std::size_t n, int stage, DType dtype, StateDtype format) {
  Communicator& w = world();
  const int W = w.world_size(), rank = w.rank();
  const FlatLayout layout = two_group_layout(n, W);
  const OptimizerHyper h = hyper_for(format);
  const bool mixed = dtype != DType::f32;
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  MemoryLedger ledger;
  ArrayStoreOptions so;
  so.stage = stage;
  so.rank = rank;
  so.dtype = dtype;
  so.grad_accum_dtype = dtype;  // gradients in the compute dtype, as the kernels' reference reads them
  so.state_count = optimizer_state_count(h);
  so.states = h.states;
  so.source = "test";
  ArrayStore store(layout, *ops, ledger, so);
  ShardOptimizer opt(layout, *ops,
                     ShardOptimizerOptions{.stage = stage, .rank = rank, .dtype = dtype, .grad_dtype = dtype, .hyper = h, .schedule = {},
                                           .swap = {}});
  CHECK(opt.add_group("g1", ParamGroupOptions{.lr = kLr[1], .weight_decay = kDecay[1]}) == 1);
  opt.finalize();

  // This rank's part of a padded full array: the whole of it when the
  // store keeps it full, else the rank's shard.
  auto part = [&](UnitId u, ArrayRef a, const std::vector<std::byte>& full) {
    const UnitInfo& info = layout.unit(u);
    const DType t = store.dtype(u, a);
    if (store.numel(u, a) == info.padded) return full;
    const std::size_t lo = static_cast<std::size_t>(rank) * info.shard;
    return slice(full.data(), t, lo, lo + info.shard);
  };

  std::vector<Reference> ref(layout.units().size());
  for (UnitId u = 0; u < static_cast<UnitId>(ref.size()); ++u) {
    const UnitInfo& info = layout.unit(u);
    const auto p = [&](std::size_t i) { return param_value(u, i); };
    Reference& r = ref[static_cast<std::size_t>(u)];
    r.weights.assign(info.padded, 0.0f);
    for (std::size_t i = 0; i < info.numel; ++i) r.weights[i] = p(i);
    r.copy = typed(info.padded, info.numel, dtype, p);
    const UnitStates& st = store.states(u);
    for (int k = 0; k < st.arrays(); ++k) {
      const std::size_t numel = info.shard > 0 ? st.array_numel(k, info.padded, info.shard) : 0;
      r.states.emplace_back(numel * dtype_size(st.array_dtype(k)));
    }
    store.store(u, {ArrayKind::params}, part(u, {ArrayKind::params}, r.copy).data());
    if (mixed) {
      const std::vector<std::byte> master = typed(info.padded, info.numel, DType::f32, p);
      store.store(u, {ArrayKind::master}, part(u, {ArrayKind::master}, master).data());
    }
  }

  for (int step = 1; step <= 2; ++step) {
    for (UnitId u = 0; u < static_cast<UnitId>(ref.size()); ++u) {
      const UnitInfo& info = layout.unit(u);
      const std::vector<std::byte> g = typed(info.padded, info.numel, dtype, [&](std::size_t i) {
        return grad_value(u, i, step);
      });
      store.store(u, {ArrayKind::grad}, part(u, {ArrayKind::grad}, g).data());
      Reference& r = ref[static_cast<std::size_t>(u)];
      const UnitStates& st = store.states(u);
      void* copy = mixed ? r.copy.data() : nullptr;
      auto state = [&](int k, std::size_t at) {
        return r.states[static_cast<std::size_t>(k)].data() + at * dtype_size(st.array_dtype(k));
      };
      if (st.dtype == StateDtype::q8) {
        // One call per shard window, the window's parameters as runs.
        const std::size_t S = info.shard, nb = kernels::quant_block_count(S, st.block);
        for (int win = 0; win < W && S > 0; ++win) {
          const std::size_t lo = static_cast<std::size_t>(win) * S;
          std::vector<UpdateRun> runs;
          for (ParamId id : info.params) {
            const ParamInfo& pi = layout.param(id);
            const std::size_t a = std::max(pi.offset, lo), b = std::min(pi.offset + pi.numel, lo + S);
            if (a < b) runs.push_back({a - lo, b - lo, kLr[pi.group], kDecay[pi.group]});
          }
          if (runs.empty()) continue;
          const kernels::Adam8bitState q{reinterpret_cast<std::uint8_t*>(state(0, lo)),
                                         reinterpret_cast<float*>(state(1, win * nb)),
                                         reinterpret_cast<std::uint8_t*>(state(2, lo)),
                                         reinterpret_cast<float*>(state(3, win * nb))};
          optimizer_update_8bit(h, step, kGradScale, r.weights.data() + lo, g.data() + lo * dtype_size(dtype), dtype, q,
                                mixed ? r.copy.data() + lo * dtype_size(dtype) : nullptr, dtype, S, st.block, runs);
        }
      } else {
        // One call per parameter over its whole flat range.
        for (ParamId id : info.params) {
          const ParamInfo& pi = layout.param(id);
          if (pi.numel == 0) continue;
          const std::size_t at = pi.offset;
          const void* gp = g.data() + at * dtype_size(dtype);
          void* cp = copy != nullptr ? r.copy.data() + at * dtype_size(dtype) : nullptr;
          if (st.dtype == StateDtype::bf16) {
            optimizer_update_bf16(h, kLr[pi.group], kDecay[pi.group], step, kGradScale, r.weights.data() + at, gp,
                                  dtype, reinterpret_cast<std::uint16_t*>(state(0, at)),
                                  reinterpret_cast<std::uint16_t*>(state(1, at)), cp, dtype, pi.numel, at);
          } else {
            float* s2[2] = {reinterpret_cast<float*>(state(0, at)), reinterpret_cast<float*>(state(1, at))};
            optimizer_update_mixed(h, kLr[pi.group], kDecay[pi.group], step, kGradScale, r.weights.data() + at, gp,
                                   dtype, s2, cp, dtype, pi.numel);
          }
        }
      }
    }
    opt.step(store, step, kGradScale);
  }

  // Every window this rank updates: all of them at stage 0, its own else.
  for (UnitId u = 0; u < static_cast<UnitId>(ref.size()); ++u) {
    const UnitInfo& info = layout.unit(u);
    const Reference& r = ref[static_cast<std::size_t>(u)];
    const UnitStates& st = store.states(u);
    const std::size_t S = info.shard;
    for (int win = stage == 0 ? 0 : rank; win < (stage == 0 ? W : rank + 1); ++win) {
      CAPTURE(u);
      CAPTURE(win);
      const std::size_t lo = static_cast<std::size_t>(win) * S;
      auto held = [&](ArrayRef a, HostBuffer& holder) {
        const auto* p = static_cast<const std::byte*>(store.read(u, a, holder));
        const std::size_t first = store.numel(u, a) == info.padded ? lo : 0;
        return slice(p, store.dtype(u, a), first, first + S);
      };
      HostBuffer h1, h2;
      CHECK(held({mixed ? ArrayKind::master : ArrayKind::params}, h1) ==
            slice(r.weights.data(), DType::f32, lo, lo + S));
      if (mixed) CHECK(held({ArrayKind::params}, h2) == slice(r.copy.data(), dtype, lo, lo + S));
      for (int k = 0; k < st.arrays(); ++k) {
        CAPTURE(k);
        const std::size_t per = S > 0 ? st.array_numel(k, S, S) : 0;
        const DType t = st.array_dtype(k);
        const std::vector<std::byte> want = slice(r.states[static_cast<std::size_t>(k)].data(), t, win * per,
                                                  (win + 1) * per);
        CHECK(opt.state_array_window(store, u, k, win) == want);
      }
      // As fp32, and back.
      std::vector<std::vector<float>> values;
      for (int i = 0; i < st.count; ++i) {
        values.push_back(opt.state_window_f32(store, u, i, win));
        std::vector<float> want(S);
        if (st.dtype == StateDtype::q8 && S > 0) {
          const std::size_t nb = kernels::quant_block_count(S, st.block);
          kernels::dequantize_blockwise(reinterpret_cast<const std::uint8_t*>(r.states[2 * i].data()) + lo,
                                        reinterpret_cast<const float*>(r.states[2 * i + 1].data()) + win * nb, S,
                                        st.block,
                                        i == 0 ? kernels::QuantMap::signed_dynamic : kernels::QuantMap::unsigned_dynamic,
                                        want.data());
        } else if (S > 0) {
          kernels::cast(want.data(), DType::f32, r.states[static_cast<std::size_t>(i)].data() +
                        lo * dtype_size(st.array_dtype(i)), st.array_dtype(i), S);
        }
        CHECK(values.back() == want);
      }
      const std::vector<std::vector<std::byte>> back = opt.state_arrays_from_f32(store, u, win, values);
      REQUIRE(back.size() == static_cast<std::size_t>(st.arrays()));
      for (int k = 0; k < st.arrays(); ++k) {
        if (st.dtype == StateDtype::q8) {
          CHECK(back[static_cast<std::size_t>(k)].size() == opt.state_array_window(store, u, k, win).size());
        } else {
          CHECK(back[static_cast<std::size_t>(k)] == opt.state_array_window(store, u, k, win));
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("ShardOptimizer: the shards' update equals the kernels on the unsharded arrays, bitwise") {
  for (std::size_t n : kSizes) {
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType dtype : kDtypes) {
        for (StateDtype format : kFormats) {
          CAPTURE(n);
          CAPTURE(stage);
          CAPTURE(dtype_name(dtype));
          CAPTURE(state_dtype_name(format));
          run_case(n, stage, dtype, format);
        }
      }
    }
  }
}

TEST_CASE("ShardOptimizer: parameter groups and the schedule") {
  const FlatLayout layout = two_group_layout(7, 1);
  const std::unique_ptr<DeviceOps> ops = make_cpu_ops();
  ShardOptimizerOptions o;
  o.hyper = hyper_for(StateDtype::fp32);
  ShardOptimizer opt(layout, *ops, o);
  REQUIRE(opt.groups().size() == 1);
  CHECK(opt.group(0).name == "default");
  CHECK(opt.group(0).lr == kLr[0]);
  CHECK(opt.add_group("no_decay", ParamGroupOptions{.lr = std::nullopt, .weight_decay = 0.0}) == 1);
  CHECK(opt.group(1).lr == kLr[0]);
  CHECK(opt.group(1).weight_decay == 0.0);
  CHECK(opt.lr_at(1, 5) == kLr[0]);  // no schedule: the group's lr
  opt.set_lr_scale(0.25);            // a parameter server's staleness-aware lr
  CHECK(opt.lr_at(1, 5) == 0.25 * kLr[0]);
  CHECK_THROWS_AS(opt.set_lr_scale(0.0), InvariantError);
  CHECK_THROWS_AS(opt.set_lr_scale(std::nan("")), InvariantError);
  CHECK(opt.lr_scale() == 0.25);
  opt.set_lr_scale(1.0);
  CHECK_THROWS_WITH_AS(opt.add_group("bad", ParamGroupOptions{.lr = -1.0, .weight_decay = std::nullopt}), doctest::Contains("parameter group \"bad\""),
                       ConfigError);
  CHECK_THROWS_AS(opt.group(2), InvariantError);
  // A per-group schedule list that does not match the groups fails at finalize(), not at step 1.
  ShardOptimizerOptions scheduled = o;
  scheduled.schedule.kind = LrScheduleKind::warmup_lr;
  scheduled.schedule.warmup_min_lr = {0.0, 0.0, 0.0};
  scheduled.schedule.warmup_max_lr = {1e-3, 1e-3, 1e-3};
  ShardOptimizer three(layout, *ops, scheduled);
  three.add_group("g1", ParamGroupOptions{});
  CHECK_THROWS_WITH_AS(three.finalize(), doctest::Contains("parameter groups"), ConfigError);
}
