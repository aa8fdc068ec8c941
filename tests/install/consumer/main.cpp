// An out-of-tree training loop built against the installed zeroshard (by
// tests/install/consumer.sh, once with pkg-config and once with CMake):
// linear regression y = W* x + b* with a known W* (4 x 8) and b*, learned by
// SGD at ZeRO stage 3 on every rank of the world, each rank drawing its
// own micro-batch of 16 samples a step. Prints the loss of each step (the
// mean over the global batch of 0.5 * |W x + b - y|^2, before the update)
// and exits 1 unless the loss of the last step is below a tenth of the
// first's.
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include <zeroshard/comm/collective_error.h>
#include <zeroshard/comm/communicator.h>
#include <zeroshard/runtime/engine/engine.h>

namespace {

constexpr int kIn = 8;
constexpr int kOut = 4;
constexpr int kBatch = 16;  // samples per rank and step
constexpr int kSteps = 20;

// The known weights the loop should find: W*[j][i] = sin(j + 2i), b*[j] = 0.5 - j / 4.
float true_weight(int j, int i) { return std::sin(static_cast<float>(j + 2 * i)); }
float true_bias(int j) { return 0.5f - 0.25f * static_cast<float>(j); }

}  // namespace

int main() {
  using namespace zeroshard;
  std::unique_ptr<Communicator> comm;
  try {
    comm = make_world_communicator();
    const EngineConfig config = EngineConfig::from_json(nlohmann::json::parse(R"({
      "train_micro_batch_size_per_gpu": 16,
      "gradient_accumulation_steps": 1,
      "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
      "zero_optimization": {"stage": 3}
    })"), "consumer ds_config");
    Engine engine(config, *comm);
    const UnitId linear = engine.add_unit("linear");
    const ParamId weight = engine.add_parameter(linear, "linear.weight", {kOut, kIn});
    const ParamId bias = engine.add_parameter(linear, "linear.bias", {kOut});
    engine.finalize();
    engine.set_parameter(weight, std::vector<float>(kOut * kIn, 0.0f));
    engine.set_parameter(bias, std::vector<float>(kOut, 0.0f));

    std::mt19937 rng(1000 + comm->rank());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(kBatch * kIn), residual(kBatch * kOut);
    double first_loss = 0.0, last_loss = 0.0;
    for (int step = 0; step < kSteps; ++step) {
      for (float& v : x) v = normal(rng);
      // Forward: residual = W x + b - y.
      engine.unshard(linear);
      const std::span<const float> w = engine.param(weight), b = engine.param(bias);
      double loss = 0.0;
      for (int s = 0; s < kBatch; ++s) {
        for (int j = 0; j < kOut; ++j) {
          float pred = b[j], target = true_bias(j);
          for (int i = 0; i < kIn; ++i) {
            pred += w[j * kIn + i] * x[s * kIn + i];
            target += true_weight(j, i) * x[s * kIn + i];
          }
          residual[s * kOut + j] = pred - target;
          loss += 0.5 * residual[s * kOut + j] * residual[s * kOut + j] / kBatch;
        }
      }
      engine.reshard(linear);
      // Backward: the gradient of this rank's mean loss, added into grad().
      engine.unshard(linear);
      const std::span<float> gw = engine.grad(weight), gb = engine.grad(bias);
      for (int s = 0; s < kBatch; ++s) {
        for (int j = 0; j < kOut; ++j) {
          gb[j] += residual[s * kOut + j] / kBatch;
          for (int i = 0; i < kIn; ++i) gw[j * kIn + i] += residual[s * kOut + j] * x[s * kIn + i] / kBatch;
        }
      }
      engine.reduce_gradients(linear);
      engine.reshard(linear);
      engine.step();

      comm->all_reduce(&loss, 1, DType::f64, ReduceOp::sum);
      loss /= comm->world_size();
      if (step == 0) first_loss = loss;
      last_loss = loss;
      if (comm->rank() == 0) std::printf("step %d loss %.6g\n", step + 1, loss);
    }
    const bool fell = last_loss < first_loss / 10.0;
    if (comm->rank() == 0) {
      std::printf("stage 3, %d ranks: loss %.6g -> %.6g after %d steps: %s\n", comm->world_size(), first_loss,
                  last_loss, kSteps, fell ? "fell more than tenfold" : "did NOT fall tenfold");
    }
    return fell ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    if (comm != nullptr && comm->world_size() > 1 && !is_agreed(e)) comm->abort(1);
    return 1;
  }
}
