// Tests of the fashion_mnist example's training parts: the data-parallel
// sampler, the paper's model-state ratios, the MLP's backward pass against
// central finite differences on a tiny network driven by a stage-0 Engine at
// world size 1, its 16-bit gradients against fp32 ones, and (at any world
// size, also run under mpirun) the same training steps giving the same
// parameters at ZeRO stages 0-3.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "comm/communicator.h"
#include "examples/fashion_mnist/compare_stages.h"
#include "examples/fashion_mnist/data_parallel.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "examples/fashion_mnist/mlp.h"
#include "examples/fashion_mnist/trainer.h"
#include "kernels/cpu/cast.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"

using namespace zeroshard;
using namespace zeroshard::examples;

TEST_CASE("data parallel: ranks take disjoint slices covering each global batch") {
  const std::size_t n = 103, micro = 4, accumulation = 2;
  const int world = 3;
  std::vector<DataParallelSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(n, micro, accumulation, r, world, 5);
  CHECK(ranks[0].global_batch() == 24);
  CHECK(ranks[0].steps_per_epoch() == 4);  // 103 / 24, the incomplete batch dropped
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& s : ranks) s.start_epoch(epoch);
    std::set<SampleIndex> seen;
    for (std::size_t step = 0; step < ranks[0].steps_per_epoch(); ++step) {
      std::set<SampleIndex> batch;
      for (auto& s : ranks) {
        for (std::size_t k = 0; k < accumulation; ++k) {
          const auto mb = s.micro_batch(step, k);
          CHECK(mb.size() == micro);
          for (auto i : mb) {
            CHECK(i < n);
            batch.insert(i);
          }
        }
      }
      CHECK(batch.size() == 24);                          // disjoint across ranks and micro-batches
      for (auto i : batch) CHECK(seen.insert(i).second);  // and across steps
    }
  }
  // The permutation changes between epochs and is reproducible.
  DataParallelSampler a(n, micro, accumulation, 0, world, 5), b = a;
  a.start_epoch(0);
  b.start_epoch(1);
  const auto a0 = a.micro_batch(0, 0), b0 = b.micro_batch(0, 0);
  CHECK_FALSE(std::equal(a0.begin(), a0.end(), b0.begin()));
  b.start_epoch(0);
  const auto b1 = b.micro_batch(0, 0);
  CHECK(std::equal(a0.begin(), a0.end(), b1.begin()));
}

TEST_CASE("data parallel: rank_slice is balanced and covers everything") {
  for (std::size_t count : {0, 1, 7, 10000}) {
    for (int world : {1, 3, 4}) {
      std::size_t next = 0;
      for (int r = 0; r < world; ++r) {
        const auto [b, e] = rank_slice(count, r, world);
        CHECK(b == next);
        CHECK(e - b <= count / std::size_t(world) + 1);
        next = e;
      }
      CHECK(next == count);
    }
  }
}

TEST_CASE("paper ratios of model states") {
  CHECK(predicted_model_state_ratio(0, 4) == 1.0);
  CHECK(predicted_model_state_ratio(1, 4) == doctest::Approx((8.0 + 2.0) / 16.0));
  CHECK(predicted_model_state_ratio(2, 4) == doctest::Approx((4.0 + 3.0) / 16.0));
  CHECK(predicted_model_state_ratio(3, 4) == doctest::Approx(0.25));
  CHECK(predicted_model_state_ratio(3, 1) == doctest::Approx(1.0));
}

TEST_CASE("softmax cross-entropy of one row") {
  const float logits[3] = {0.0f, 0.0f, 0.0f};
  float d[3];
  CHECK(softmax_cross_entropy_row(logits, 3, 1, 1.0f, d) == doctest::Approx(std::log(3.0)));
  CHECK(d[0] == doctest::Approx(1.0 / 3));
  CHECK(d[1] == doctest::Approx(1.0 / 3 - 1));
  const float big[2] = {1000.0f, 0.0f};  // stable for large logits
  CHECK(softmax_cross_entropy_row(big, 2, 1, 1.0f, nullptr) == doctest::Approx(1000.0));
}

namespace {

EngineConfig stage0_config(std::int64_t micro, std::int64_t accumulation) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = micro;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = 0.0;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-2f;
  c.zero.stage = 0;
  return c;
}

struct TinyBatch {
  std::vector<float> x;
  std::vector<std::uint8_t> y;
};

TinyBatch tiny_batch(std::size_t n, std::size_t inputs, std::size_t classes) {
  TinyBatch b;
  std::mt19937_64 rng(11);
  for (std::size_t i = 0; i < n * inputs; ++i) {
    b.x.push_back(float(uniform_below(rng, 2001)) / 1000.0f - 1.0f);
  }
  for (std::size_t i = 0; i < n; ++i) b.y.push_back(std::uint8_t(uniform_below(rng, classes)));
  return b;
}

std::vector<ParamId> all_params(const Mlp& mlp) {
  std::vector<ParamId> ps;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    ps.push_back(mlp.weight(l));
    ps.push_back(mlp.bias(l));
  }
  return ps;
}

}  // namespace

TEST_CASE("mlp: declared parameters, deterministic Kaiming-uniform initialisation") {
  auto comm = make_world_communicator();
  if (comm->world_size() != 1) return;  // single-process checks; see the stage test below
  Engine engine(stage0_config(4, 1), *comm);
  Mlp mlp(engine, {6, 5, 3}, 4);
  engine.finalize();
  CHECK(mlp.num_parameters() == 5 * 7 + 3 * 6);
  CHECK(engine.layout().find_param("fc1.weight") == mlp.weight(0));
  CHECK(engine.layout().find_param("fc2.bias") == mlp.bias(1));
  CHECK(engine.layout().param(mlp.weight(0)).shape == std::vector<std::int64_t>{5, 6});
  CHECK(engine.layout().param(mlp.bias(1)).group != engine.layout().param(mlp.weight(1)).group);
  mlp.initialize(3);
  const auto w1 = engine.gather_parameter(mlp.weight(0));
  const float bound = 1.0f / std::sqrt(6.0f);
  for (float v : w1) CHECK(std::abs(v) <= bound);
  CHECK(*std::max_element(w1.begin(), w1.end()) > 0.5f * bound);
  mlp.initialize(3);
  CHECK(engine.gather_parameter(mlp.weight(0)) == w1);
  mlp.initialize(4);
  CHECK(engine.gather_parameter(mlp.weight(0)) != w1);
}

TEST_CASE("mlp: backward matches central finite differences") {
  auto comm = make_world_communicator();
  if (comm->world_size() != 1) return;  // single-process checks; see the stage test below
  const std::size_t n = 3, inputs = 5, classes = 3;
  Engine engine(stage0_config(4, 1), *comm);
  Mlp mlp(engine, {std::int64_t(inputs), 4, 6, std::int64_t(classes)}, 4);
  engine.finalize();
  mlp.initialize(7);
  const TinyBatch batch = tiny_batch(n, inputs, classes);

  const double loss = mlp.forward_backward(batch.x, batch.y, n);
  const EvalCounts eval = mlp.evaluate(batch.x, batch.y, n);
  CHECK(loss == doctest::Approx(eval.loss_sum / double(n)).epsilon(1e-6));

  const double h = 1e-3;
  for (ParamId p : all_params(mlp)) {
    const std::vector<float> analytic(engine.grad(p).begin(), engine.grad(p).end());
    const std::vector<float> base = engine.gather_parameter(p);
    std::vector<float> values = base;
    for (std::size_t i = 0; i < base.size(); ++i) {
      values[i] = base[i] + float(h);
      engine.set_parameter(p, values);
      const double plus = mlp.evaluate(batch.x, batch.y, n).loss_sum / double(n);
      values[i] = base[i] - float(h);
      engine.set_parameter(p, values);
      const double minus = mlp.evaluate(batch.x, batch.y, n).loss_sum / double(n);
      values[i] = base[i];
      // The difference of the actually stored perturbations (fp32 rounding).
      const double step = double(base[i] + float(h)) - double(base[i] - float(h));
      const double numeric = (plus - minus) / step;
      INFO(engine.layout().param(p).name, "[", i, "]");
      CHECK(double(analytic[i]) == doctest::Approx(numeric).epsilon(1e-2).scale(0.05));
    }
    engine.set_parameter(p, base);
  }
}

TEST_CASE("mlp: gradients accumulate over micro-batches until the step") {
  auto comm = make_world_communicator();
  if (comm->world_size() != 1) return;  // single-process checks; see the stage test below
  const std::size_t n = 2, inputs = 4, classes = 3;
  Engine engine(stage0_config(2, 2), *comm);
  Mlp mlp(engine, {std::int64_t(inputs), 5, std::int64_t(classes)}, 2);
  engine.finalize();
  mlp.initialize(9);
  const TinyBatch batch = tiny_batch(n, inputs, classes);
  const auto w_before = engine.gather_parameter(mlp.weight(0));

  mlp.forward_backward(batch.x, batch.y, n);
  const std::vector<float> once(engine.grad(mlp.weight(0)).begin(),
                                engine.grad(mlp.weight(0)).end());
  CHECK_FALSE(engine.step().applied);
  mlp.forward_backward(batch.x, batch.y, n);
  const auto twice = engine.grad(mlp.weight(0));
  REQUIRE(twice.size() == once.size());
  for (std::size_t i = 0; i < once.size(); ++i) {
    CHECK(twice[i] == doctest::Approx(2.0 * once[i]).epsilon(1e-5).scale(1e-6));
  }
  CHECK(engine.step().applied);
  CHECK(engine.gather_parameter(mlp.weight(0)) != w_before);
}

namespace {

/// A synthetic, learnable labelled set: `count` samples of `features`
/// values in [0, 1], label = arg-max of the first `classes` features.
LabeledImages synthetic_set(std::size_t count, std::size_t features, std::size_t classes,
                            std::uint64_t seed) {
  LabeledImages data;
  data.images.count = count;
  data.images.rows = 1;
  data.images.cols = features;
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < count * features; ++i) {
    data.images.pixels.push_back(float(uniform_below(rng, 256)) / 255.0f);
  }
  for (std::size_t i = 0; i < count; ++i) {
    const float* row = data.images.pixels.data() + i * features;
    data.labels.push_back(std::uint8_t(std::max_element(row, row + classes) - row));
  }
  return data;
}

}  // namespace

TEST_CASE("trainer: stages 0-3 take the same steps to the same parameters") {
  auto comm = make_world_communicator();
  const LabeledImages train = synthetic_set(203, 9, 3, 1);
  const LabeledImages test = synthetic_set(37, 9, 3, 2);
  RunSpec spec;
  spec.layer_sizes = {9, 17, 3};  // odd sizes: flat buffers need padding
  spec.init_seed = 5;
  spec.train.epochs = 3;
  spec.train.max_steps = 8;
  spec.train.seed = 6;
  spec.train.print_epochs = false;
  spec.train.eval_batch = 7;
  EngineConfig config = stage0_config(3, 2);
  config.gradient_clipping = 0.5;  // exercised: the early gradients are larger

  std::vector<std::vector<float>> reference;
  double reference_loss = 0.0;
  for (int stage = 0; stage <= 3; ++stage) {
    config.zero.stage = stage;
    std::vector<std::vector<float>> params;
    std::int64_t engine_steps = 0;
    const RunOutcome out = train_fresh(config, *comm, train, test, spec, [&](Engine& engine) {
      for (const ParamInfo& p : engine.layout().params()) {
        params.push_back(engine.gather_parameter(engine.layout().find_param(p.name)));
      }
      engine_steps = engine.optimizer_steps();
    });
    INFO("stage ", stage);
    CHECK(engine_steps == 8);
    CHECK(out.result.optimizer_steps == 8);
    CHECK(out.num_parameters == 17 * 10 + 3 * 18);
    CHECK(out.result.final_accuracy > 0.0);
    if (stage == 0) {
      reference = params;
      reference_loss = out.result.last_step_loss;
      continue;
    }
    CHECK(out.result.last_step_loss == doctest::Approx(reference_loss).epsilon(1e-5));
    REQUIRE(params.size() == reference.size());
    for (std::size_t p = 0; p < params.size(); ++p) {
      REQUIRE(params[p].size() == reference[p].size());
      for (std::size_t i = 0; i < params[p].size(); ++i) {
        CHECK(params[p][i] == doctest::Approx(reference[p][i]).epsilon(1e-5).scale(1e-4));
      }
    }
  }
}

TEST_CASE("mlp: bf16 and fp16 gradients match fp32 within 16-bit rounding (fp16: loss-scaled)") {
  auto comm = make_world_communicator();
  if (comm->world_size() != 1) return;
  const std::size_t n = 4, inputs = 6, classes = 3;
  const std::vector<std::int64_t> sizes = {std::int64_t(inputs), 8, std::int64_t(classes)};
  const TinyBatch batch = tiny_batch(n, inputs, classes);
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO("compute dtype ", dtype_name(dtype));
    EngineConfig config16 = stage0_config(4, 1);
    config16.compute_dtype = dtype;
    config16.loss_scale.dynamic = false;
    config16.loss_scale.static_scale = 1024.0;  // used by fp16 only
    // The 16-bit buffer keeps the reduced gradient only with 16-bit
    // accumulation; with the default fp32 accumulator the reduction folds
    // it away ([Note: gradient accumulator]).
    config16.grad_accum_dtype = dtype;
    Engine engine16(config16, *comm);
    Mlp mlp16(engine16, sizes, n);
    engine16.finalize();
    mlp16.initialize(21);

    // The fp32 reference starts from the 16-bit values, so only the
    // gradient's rounding to 16 bits differs.
    Engine engine32(stage0_config(4, 1), *comm);
    Mlp mlp32(engine32, sizes, n);
    engine32.finalize();
    for (ParamId p : all_params(mlp16)) engine32.set_parameter(p, engine16.gather_parameter(p));

    const double loss16 = mlp16.forward_backward(batch.x, batch.y, n);
    const double loss32 = mlp32.forward_backward(batch.x, batch.y, n);
    CHECK(loss16 == doctest::Approx(loss32).epsilon(1e-6));
    const double scale = engine16.loss_scale();
    CHECK(scale == (dtype == DType::f16 ? 1024.0 : 1.0));
    for (ParamId p : all_params(mlp16)) {
      const auto g32 = engine32.grad(p);
      std::vector<float> g16(g32.size());
      kernels::cast(g16.data(), DType::f32, engine16.grad_data(p, dtype), dtype, g16.size());
      for (std::size_t i = 0; i < g16.size(); ++i) {
        CHECK(g16[i] / scale == doctest::Approx(g32[i]).epsilon(1e-2).scale(1e-3));
      }
    }
  }
}
