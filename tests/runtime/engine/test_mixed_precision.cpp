// Mixed precision: fp16 overflow skipped together on every rank with the
// loss scale backing off, fp32 master weights keeping what bf16 cannot hold,
// bf16 stage equivalence, conversion edge values, learning-rate schedules.
#include <csignal>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "runtime/engine/engine.h"
#include "tests/support/test_world.h"
#include "tests/support/tiny_mlp.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// True when x has the same value on every rank.
bool same_on_all_ranks(double x) {
  double lo = x, hi = x;
  world().all_reduce(&lo, 1, DType::f64, ReduceOp::min);
  world().all_reduce(&hi, 1, DType::f64, ReduceOp::max);
  return lo == hi;
}

// Kills the process after `seconds` so a hang fails the test instead of
// blocking CI.
struct Watchdog {
  explicit Watchdog(unsigned seconds) { alarm(seconds); }
  ~Watchdog() { alarm(0); }
};

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// A bf16 engine on the world at ZeRO `stage` with optimizer `kind` at
// learning rate `lr` (make_config's other settings), holding one unit "u"
// with one parameter "p" of `numel` elements; finalized.
struct OneBf16Param {
  OneBf16Param(int stage, OptimizerKind kind, float lr, std::int64_t numel) : e(config(stage, kind, lr), world()) {
    p = e.add_parameter(e.add_unit("u"), "p", {numel});
    e.finalize();
  }
  static EngineConfig config(int stage, OptimizerKind kind, float lr) {
    OptimizerHyper h;
    h.kind = kind;
    h.lr = lr;
    EngineConfig cfg = make_config(stage, h);
    cfg.compute_dtype = DType::bf16;
    return cfg;
  }
  Engine e;
  ParamId p = 0;
};

}  // namespace

TEST_CASE("fp16: Inf on one rank's shard and NaN on rank 0 make every rank skip; scale halves") {
  Watchdog dog(60);
  const int n = world().world_size(), r = world().rank();
  const int inf_rank = std::min(2, n - 1);
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    EngineConfig cfg = make_config(stage);
    cfg.compute_dtype = DType::f16;
    cfg.loss_scale = LossScaleConfig{.dynamic = true, .initial_scale_power = 16, .loss_scale_window = 1000,
                                     .hysteresis = 1, .min_loss_scale = 1};
    cfg.scheduler.kind = LrScheduleKind::warmup_lr;
    cfg.scheduler.warmup_type = "linear";
    cfg.scheduler.warmup_num_steps = 10;
    cfg.scheduler.warmup_min_lr = {1e-4};
    cfg.scheduler.warmup_max_lr = {1e-3};
    Engine e(cfg, world());
    const UnitId u = e.add_unit("u");
    const ParamId p = e.add_parameter(u, "p", {1000});
    e.finalize();
    std::vector<float> init(1000);
    for (int i = 0; i < 1000; ++i) init[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
    e.set_parameter(p, init);
    // Element 600 lies in the shard of rank inf_rank at world size 4 (shard 256).
    const std::size_t shard = e.layout().unit(u).shard;
    const std::size_t inf_index = std::min<std::size_t>(static_cast<std::size_t>(inf_rank) * shard + 88, 999);
    const std::int64_t want_steps[] = {1, 2, 2, 3, 3, 4};
    const double want_scale_after[] = {65536, 65536, 32768, 32768, 16384, 16384};
    for (int step = 1; step <= 6; ++step) {
      CAPTURE(step);
      const double scale = e.loss_scale();
      auto g = e.grad_as<f16>(p);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = from_float<f16>(static_cast<float>(1e-4 * scale));
      if (step == 3 && r == inf_rank) g[inf_index] = from_float<f16>(std::numeric_limits<float>::infinity());
      if (step == 5 && r == 0) g[17] = from_float<f16>(std::numeric_limits<float>::quiet_NaN());
      const std::vector<float> before = e.gather_master(p), before_compute = e.gather_parameter(p);
      const double lr_before = e.current_lr(0);
      const StepResult res = e.step();
      const bool skip = step == 3 || step == 5;
      CHECK(res.skipped == skip);
      CHECK(res.applied == !skip);
      CHECK(e.optimizer_steps() == want_steps[step - 1]);
      CHECK(e.loss_scale() == want_scale_after[step - 1]);
      CHECK(e.skipped_steps() == (step >= 5 ? 2 : step >= 3 ? 1 : 0));
      CHECK(same_on_all_ranks(e.loss_scale()));
      CHECK(same_on_all_ranks(static_cast<double>(e.skipped_steps())));
      CHECK(same_on_all_ranks(static_cast<double>(e.optimizer_steps())));
      CHECK(same_on_all_ranks(e.current_lr(0)));
      if (skip) {
        CHECK(bits(e.gather_master(p)) == bits(before));
        CHECK(bits(e.gather_parameter(p)) == bits(before_compute));
        CHECK(e.current_lr(0) == lr_before);
      } else {
        CHECK(bits(e.gather_master(p)) != bits(before));
        CHECK(e.current_lr(0) > lr_before);
      }
    }
  }
}

TEST_CASE("bf16: fp32 master weights keep what bf16 cannot hold") {
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    OneBf16Param f(stage, OptimizerKind::adamw, 1e-3f, 3);
    Engine& e = f.e;
    const ParamId p = f.p;
    const float w = 1.0f + std::ldexp(1.0f, -20);  // not representable in bf16
    e.set_parameter(p, std::vector<float>{w, w, w});
    e.step();  // zero gradient, no weight decay
    for (float m : e.gather_master(p)) CHECK(m == w);
    for (float c : e.gather_parameter(p)) CHECK(c == 1.0f);
  }
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    OneBf16Param f(stage, OptimizerKind::sgd, 1e-4f, 1);
    Engine& e = f.e;
    const ParamId p = f.p;
    e.set_parameter(p, std::vector<float>{1.0f});
    float pure_bf16 = 1.0f;
    for (int s = 0; s < 100; ++s) {
      e.grad_as<bf16>(p)[0] = from_float<bf16>(-1.0f);  // lr x update = 1e-4
      e.step();
      pure_bf16 = bf16_to_float(float_to_bf16(pure_bf16 + 1e-4f));
    }
    CHECK(e.gather_master(p)[0] == doctest::Approx(1.01).epsilon(1e-4));
    CHECK(pure_bf16 == 1.0f);
    CHECK(e.gather_parameter(p)[0] == bf16_to_float(float_to_bf16(e.gather_master(p)[0])));
  }
}

namespace {

// The tiny MLP of the stage-equivalence test on a bf16 engine: parameters
// widened to fp32 for the math, gradients accumulated in fp32 per micro-batch
// and added into the bf16 gradient buffers once per unit.
struct Bf16Mlp {
  TinyMlpShape shape;
  Engine engine;
  std::vector<UnitId> units;
  std::vector<ParamId> w, b;
  std::vector<std::vector<float>> fw, fb, gw, gb;

  Bf16Mlp(const EngineConfig& cfg, TinyMlpShape s) : shape(s), engine(cfg, world()) {
    const std::int64_t h = s.hidden;
    for (int p = 0; p < s.param_sets(); ++p) {
      units.push_back(engine.add_unit(fmt::format("layer{}", p)));
      w.push_back(engine.add_parameter(units.back(), fmt::format("layer{}.weight", p), {h, h}));
      b.push_back(engine.add_parameter(units.back(), fmt::format("layer{}.bias", p), {h}));
    }
    engine.finalize();
    fw.resize(w.size()), fb.resize(w.size()), gw.resize(w.size()), gb.resize(w.size());
    for (int p = 0; p < s.param_sets(); ++p) {
      init_params(p, s.hidden, fw[p], fb[p]);
      engine.set_parameter(w[p], fw[p]);
      engine.set_parameter(b[p], fb[p]);
      gw[p].assign(fw[p].size(), 0.0f);
      gb[p].assign(fb[p].size(), 0.0f);
    }
  }

  static void widen_into(std::span<const bf16> src, std::vector<float>& dst) {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = to_float(src[i]);
  }
  static void add_into(std::vector<float>& src, std::span<bf16> dst) {
    for (std::size_t i = 0; i < src.size(); ++i) dst[i] = from_float<bf16>(to_float(dst[i]) + src[i]);
    std::fill(src.begin(), src.end(), 0.0f);
  }

  double micro_batch(const std::vector<float>& x, const std::vector<float>& t, int batch) {
    return forward_backward(
        shape, x, t, batch, [&](int p) { return std::span<const float>(fw[p]); },
        [&](int p) { return std::span<const float>(fb[p]); }, [&](int p) { return std::span<float>(gw[p]); },
        [&](int p) { return std::span<float>(gb[p]); },
        [&](int l, bool) {
          const int p = shape.owner(l);
          engine.unshard(units[p]);
          widen_into(engine.param_as<bf16>(w[p]), fw[p]);
          widen_into(engine.param_as<bf16>(b[p]), fb[p]);
        },
        [&](int l, bool backward) {
          const int p = shape.owner(l);
          if (backward && p == l) {
            add_into(gw[p], engine.grad_as<bf16>(w[p]));
            add_into(gb[p], engine.grad_as<bf16>(b[p]));
            engine.reduce_gradients(units[p]);
          }
          engine.reshard(units[p]);
        });
  }
};

}  // namespace

TEST_CASE("bf16: stages 0-3 agree with each other, and with fp32 within bf16 tolerance") {
  const int n = world().world_size(), r = world().rank();
  TinyMlpShape shape{.hidden = 8, .layers = 6};
  const int local = 12 / n;
  std::vector<float> x, t;
  make_samples(r * local, local, shape.hidden, x, t);
  OptimizerHyper adamw;
  adamw.kind = OptimizerKind::adamw;
  adamw.lr = 1e-2f;
  adamw.weight_decay = 0.01f;
  std::vector<std::vector<float>> first;
  for (DType comm : {DType::f32, DType::bf16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(stage);
      CAPTURE(dtype_name(comm));
      EngineConfig cfg = make_config(stage, adamw);
      cfg.compute_dtype = DType::bf16;
      cfg.communication_data_type = comm;
      Bf16Mlp mlp(cfg, shape);
      for (int s = 0; s < 5; ++s) {
        mlp.micro_batch(x, t, local);
        CHECK(mlp.engine.step().applied);
      }
      for (int p = 0; p < shape.param_sets(); ++p) {
        const std::vector<float> m = mlp.engine.gather_master(mlp.w[p]);
        if (first.size() <= static_cast<std::size_t>(p)) {
          first.push_back(m);  // stage 0, fp32 reduction: the reference for the others
        } else if (comm == DType::f32) {
          CHECK(m == first[p]);  // same reduction order at every stage: bitwise
        } else {
          check_close(m, first[p], 2e-2, 2e-3, "bf16-reduced master");  // bf16 tolerance
        }
      }
    }
  }
}

TEST_CASE("casts of edge values equal the scalar conversions bit for bit") {
  const float edge[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                        6.1035156e-05f, 6.0975552e-05f, 3.3895314e38f, std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                        1.0f + std::ldexp(1.0f, -8), 1.0f + 3 * std::ldexp(1.0f, -8),
                        1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 1.00048828125f};
  const std::size_t n = std::size(edge);
  std::vector<bf16> b(n);
  std::vector<f16> h(n);
  std::vector<float> back(n);
  kernels::cast(b.data(), DType::bf16, edge, DType::f32, n);
  kernels::cast(h.data(), DType::f16, edge, DType::f32, n);
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(edge[i]);
    CHECK(b[i].bits == float_to_bf16(edge[i]));
    CHECK(h[i].bits == float_to_f16(edge[i]));
  }
  kernels::cast(back.data(), DType::f32, h.data(), DType::f16, n);
  for (std::size_t i = 0; i < n; ++i) CHECK(float_bits(back[i]) == float_bits(f16_to_float(h[i].bits)));
  // Known values: halfway cases round to even, overflow to Inf, NaN stays NaN.
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even (down)
  CHECK(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie -> even (up)
  CHECK(float_to_f16(65520.0f) == 0x7c00);
  CHECK(float_to_f16(65519.0f) == 0x7bff);
  CHECK(float_to_f16(5.9604645e-08f) == 0x0001);  // smallest subnormal
  CHECK(float_to_f16(2.9802322e-08f) == 0x0000);  // half of it: tie -> even (zero)
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to Inf
  for (std::uint32_t v = 0; v < 0x10000; ++v) {  // every fp16 value round-trips exactly
    const float f = f16_to_float(static_cast<std::uint16_t>(v));
    if (!std::isnan(f)) REQUIRE(float_to_f16(f) == v);
  }
}
