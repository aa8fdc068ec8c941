// The cuBLAS MLP (examples/fashion_mnist/cuda_mlp.h) against the CPU MLP
// (mlp.h) on fixed samples: the loss and every gradient of one
// forward_backward, the accumulation over two micro-batches, and evaluate.
//
// Not bitwise: cuBLAS and OpenBLAS sum each GEMM's inner products (up to 784
// terms) in different orders, so results differ by rounding. An fp32 sum of
// k terms differs between orders by up to about k x 2^-24 of the sum of the
// terms' magnitudes; for these sizes that is below 1e-5 of a gradient's
// largest element, and the checks allow 1e-4 of an element plus 1e-5 of the
// largest one. In bf16 both sides round the (slightly different) fp32
// gradient once to bf16, so they may differ by one bf16 step (2^-8).
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "examples/fashion_mnist/cuda_mlp.h"
#include "examples/fashion_mnist/mlp.h"
#include "kernels/cpu/cast.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"

using namespace zeroshard;
using namespace zeroshard::examples;

namespace {

EngineConfig test_config(std::int64_t micro, std::int64_t accumulation, DType dtype) {
  EngineConfig c;
  c.train_micro_batch_size_per_gpu = micro;
  c.gradient_accumulation_steps = accumulation;
  c.gradient_clipping = 0.0;
  c.optimizer.kind = OptimizerKind::adamw;
  c.optimizer.lr = 1e-3f;
  c.zero.stage = 0;  // the full gradient stays readable after reduce_gradients
  c.compute_dtype = dtype;
  return c;
}

/// n samples of `inputs` pixels in [0, 1] (like the data set) and labels.
struct Samples {
  std::vector<float> x;
  std::vector<std::uint8_t> y;
};

Samples fixed_samples(std::size_t n, std::size_t inputs, std::size_t classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Samples s;
  for (std::size_t i = 0; i < n * inputs; ++i) s.x.push_back(float(rng() % 256) / 255.0f);
  for (std::size_t i = 0; i < n; ++i) s.y.push_back(std::uint8_t(rng() % classes));
  return s;
}

/// One engine + CPU MLP + (optionally) its cuBLAS twin, initialised alike.
struct Model {
  Model(const std::vector<std::int64_t>& sizes, std::size_t max_batch, const EngineConfig& config,
        Communicator& comm, bool gpu)
      : engine(config, comm), mlp(engine, sizes, max_batch) {
    engine.finalize();
    mlp.initialize(1234);
    if (gpu) cuda = std::make_unique<CudaMlp>(mlp);
  }
  Classifier& model() { return cuda ? static_cast<Classifier&>(*cuda) : mlp; }
  /// Parameter p's gradient as fp32.
  std::vector<float> grad(ParamId p) {
    const DType dtype = engine.compute_dtype();
    std::vector<float> g(engine.layout().param(p).numel);
    kernels::cast(g.data(), DType::f32, engine.grad_data(p, dtype), dtype, g.size());
    return g;
  }

  Engine engine;
  Mlp mlp;
  std::unique_ptr<CudaMlp> cuda;
};

/// CHECKs |got - want| <= rel x |want| + rel_of_max x max|want| element-wise,
/// naming the first element that is not.
void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                 double rel_of_max, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double max_abs = 0.0;
  for (float v : want) max_abs = std::max(max_abs, double(std::fabs(v)));
  CHECK_MESSAGE(max_abs > 0.0, what << ": the reference gradient is all zero");
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(double(got[i]) - double(want[i]));
    const double tol = rel * std::fabs(double(want[i])) + rel_of_max * max_abs;
    if (!(diff <= tol)) {
      std::ostringstream msg;
      msg << what << "[" << i << "] of " << got.size() << ": gpu " << got[i] << ", cpu " << want[i]
          << ", |diff| " << diff << " > tolerance " << tol << " (max |cpu| " << max_abs << ")";
      FAIL_CHECK(msg.str());
      return;
    }
  }
}

void compare_gradients(Model& gpu, Model& cpu, double rel, double rel_of_max) {
  for (int l = 0; l < cpu.mlp.num_layers(); ++l) {
    for (const ParamId p : {cpu.mlp.weight(l), cpu.mlp.bias(l)}) {
      check_close(gpu.grad(p), cpu.grad(p), rel, rel_of_max, cpu.engine.layout().param(p).name);
    }
  }
}

// One micro-batch of s (n samples) forward and backward on both models; the
// losses agree to 1e-5 (GEMM summation orders differ).
void check_forward_backward(Model& gpu, Model& cpu, const Samples& s, std::size_t n) {
  const double loss_cpu = cpu.model().forward_backward(s.x, s.y, n);
  const double loss_gpu = gpu.model().forward_backward(s.x, s.y, n);
  CHECK(loss_gpu == doctest::Approx(loss_cpu).epsilon(1e-5));
}

}  // namespace

TEST_CASE("cuda mlp: fp32 loss and every gradient match the CPU MLP") {
  auto comm = make_world_communicator();
  const std::vector<std::vector<std::int64_t>> shapes = {
      {784, 1024, 1024, 10},  // the main job's model
      {37, 33, 1, 17, 10},    // odd widths, a width of 1
  };
  for (const auto& sizes : shapes) {
    for (const std::size_t n : {std::size_t(1), std::size_t(13), std::size_t(32)}) {
      // One sample can leave the width-1 layer's single ReLU at zero, and then
      // every gradient below it is zero: nothing to compare (seen on an H100).
      if (n == 1 && std::ranges::find(sizes, std::int64_t{1}) != sizes.end()) continue;
      INFO("layers " << sizes.size() - 1 << ", inputs " << sizes.front() << ", n " << n);
      const EngineConfig config = test_config(32, 1, DType::f32);
      Model cpu(sizes, 32, config, *comm, false);
      Model gpu(sizes, 32, config, *comm, true);
      const Samples s = fixed_samples(n, std::size_t(sizes.front()), 10, 7 + n);
      check_forward_backward(gpu, cpu, s, n);
      compare_gradients(gpu, cpu, 1e-4, 1e-5);
    }
  }
}

TEST_CASE("cuda mlp: gradients accumulate over micro-batches as on the CPU") {
  auto comm = make_world_communicator();
  const std::vector<std::int64_t> sizes = {100, 64, 10};
  const EngineConfig config = test_config(8, 2, DType::f32);
  Model cpu(sizes, 8, config, *comm, false);
  Model gpu(sizes, 8, config, *comm, true);
  for (std::uint64_t k = 0; k < 2; ++k) {
    const Samples s = fixed_samples(8, 100, 10, 100 + k);
    check_forward_backward(gpu, cpu, s, 8);
    if (k == 0) {
      // Ends the first micro-batch, as a training loop does (no update: the
      // boundary is the second); the gradients stay in the accumulator.
      CHECK_FALSE(cpu.engine.step().boundary);
      CHECK_FALSE(gpu.engine.step().boundary);
    }
  }
  compare_gradients(gpu, cpu, 1e-4, 1e-5);
}

TEST_CASE("cuda mlp: bf16 gradients match the CPU MLP within one bf16 step") {
  auto comm = make_world_communicator();
  const std::vector<std::int64_t> sizes = {784, 256, 10};
  EngineConfig config = test_config(16, 1, DType::bf16);
  // The loop's bf16 buffer is then the gradient itself; with the default fp32
  // accumulator reduce_gradients() folds it away and leaves zeros behind.
  config.grad_accum_dtype = DType::bf16;
  Model cpu(sizes, 16, config, *comm, false);
  Model gpu(sizes, 16, config, *comm, true);
  const Samples s = fixed_samples(16, 784, 10, 99);
  check_forward_backward(gpu, cpu, s, 16);
  compare_gradients(gpu, cpu, 1.0 / 128, 1e-5);
}

TEST_CASE("cuda mlp: evaluate matches the CPU MLP, n = 0 included") {
  auto comm = make_world_communicator();
  const std::vector<std::int64_t> sizes = {784, 128, 10};
  const EngineConfig config = test_config(8, 1, DType::f32);
  Model cpu(sizes, 200, config, *comm, false);
  Model gpu(sizes, 200, config, *comm, true);
  const Samples s = fixed_samples(200, 784, 10, 5);
  const EvalCounts c = cpu.model().evaluate(s.x, s.y, 200);
  const EvalCounts g = gpu.model().evaluate(s.x, s.y, 200);
  CHECK(g.samples == 200);
  CHECK(g.loss_sum == doctest::Approx(c.loss_sum).epsilon(1e-5));
  // An arg-max may flip only where two logits tie to rounding.
  CHECK(std::abs(g.correct - c.correct) <= 1);
  const EvalCounts none = gpu.model().evaluate({}, {}, 0);
  CHECK(none.samples == 0);
  CHECK(none.correct == 0);
  CHECK(none.loss_sum == 0.0);
}

TEST_CASE("cuda mlp: select_cuda_device picks the node-local rank's GPU") {
  auto comm = make_world_communicator();
  const std::string text = select_cuda_device(*comm);
  CHECK(text.rfind("cuda:", 0) == 0);
  int device = -1;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(text.rfind("cuda:" + std::to_string(device) + " ", 0) == 0);
}
