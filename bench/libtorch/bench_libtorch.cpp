// bench_libtorch: training samples per second of the libtorch example's
// model (examples/libtorch/fashion_cnn.h) under zeroshard_torch at ZeRO
// stages 0-3, against the same libtorch loop with no sharding, whose
// gradients are averaged by a hand-written all-reduce of each .grad()
// tensor (Communicator::all_reduce, MPI_Iallreduce under MPI; none at one
// rank) before torch::optim::AdamW, measured in the same run
// (bench/libtorch/README.md).
//
//   ./build/bench/libtorch/bench_libtorch                      # one rank
//   mpirun -np 4 ./build/bench/libtorch/bench_libtorch --rounds 7
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include "comm/communicator.h"
#include "examples/job_config.h"
#include "examples/libtorch/fashion_cnn.h"
#include "libtorch/optimizer.h"
#include "libtorch/shard.h"

namespace zeroshard::bench {
namespace {

using examples::FashionCnnImpl;

struct Options {
  std::vector<int> stages{0, 1, 2, 3};
  std::int64_t micro_batch = 32;
  int steps = 20;  // per round and variant
  int rounds = 5;
  int warmup = 5;
  int threads = 1;
};

// One way of training: a step function over a micro-batch.
struct Variant {
  std::string name;
  std::function<void(const at::Tensor&, const at::Tensor&)> step;
  std::vector<double> samples_per_s;  // one per round
};

std::string cpu_line() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU", flags;
  while (std::getline(in, line)) {
    if (model == "unknown CPU" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  auto has = [&](const char* f) { return flags.find(std::string(" ") + f + " ") != std::string::npos; };
  return fmt::format("{}; AVX2 {}, AVX-512F {}, FMA {}", model, has("avx2") ? "yes" : "no",
                     has("avx512f") ? "yes" : "no", has("fma") ? "yes" : "no");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Options& o) {
  auto comm = make_world_communicator();
  ::torch::set_num_threads(o.threads);
  const int world = comm->world_size();
  ::torch::manual_seed(11 + static_cast<std::uint64_t>(comm->rank()));
  const at::Tensor images = ::torch::rand({o.micro_batch, 1, 28, 28});
  const at::Tensor labels = ::torch::randint(0, 10, {o.micro_batch}, ::torch::kLong);

  std::vector<Variant> variants;
  // The libtorch loop without zeroshard: .grad() all-reduced by hand.
  auto plain = examples::make_fashion_cnn(1);
  ::torch::optim::AdamW adamw(plain->parameters(),
                              ::torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  variants.push_back({world == 1 ? "libtorch, no sharding" : "libtorch + all-reduce of .grad()",
                      [&](const at::Tensor& x, const at::Tensor& y) {
                        adamw.zero_grad();
                        ::torch::nn::functional::nll_loss(plain->forward(x), y).backward();
                        if (world > 1) {
                          for (auto& p : plain->parameters()) {
                            comm->all_reduce(p.grad().data_ptr<float>(), static_cast<std::size_t>(p.numel()),
                                             DType::f32, ReduceOp::sum);
                            p.grad().div_(world);
                          }
                        }
                        adamw.step();
                      },
                      {}});
  // zeroshard at each stage: the same loop with shard() and its optimizer.
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::unique_ptr<zeroshard::torch::Sharded<FashionCnnImpl>>> modules;
  std::vector<std::unique_ptr<zeroshard::torch::Optimizer>> optimizers;
  for (int stage : o.stages) {
    EngineConfig c = examples::adamw_job_defaults(o.micro_batch, 1e-3, 0.999, 0.01);
    c.gradient_clipping = 0.0;  // as the hand-written loop
    c.zero.stage = stage;
    engines.push_back(std::make_unique<Engine>(c, *comm));
    modules.push_back(std::make_unique<zeroshard::torch::Sharded<FashionCnnImpl>>(examples::make_fashion_cnn(1),
                                                                                  *engines.back(), *comm));
    optimizers.push_back(std::make_unique<zeroshard::torch::Optimizer>(*modules.back()));
    auto* m = modules.back().get();
    auto* opt = optimizers.back().get();
    variants.push_back({fmt::format("zeroshard stage {}", stage),
                        [m, opt](const at::Tensor& x, const at::Tensor& y) {
                          opt->zero_grad();
                          ::torch::nn::functional::nll_loss((*m)(x), y).backward();
                          opt->step();
                        },
                        {}});
  }

  for (auto& v : variants) {
    for (int i = 0; i < o.warmup; ++i) v.step(images, labels);
  }
  // Rounds: every variant runs `steps` steps in turn, so that a slow
  // moment of the machine falls on all of them alike.
  for (int r = 0; r < o.rounds; ++r) {
    for (auto& v : variants) {
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.steps; ++i) v.step(images, labels);
      comm->barrier();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      v.samples_per_s.push_back(static_cast<double>(o.steps * o.micro_batch * world) / s);
    }
  }

  if (comm->rank() == 0) {
    std::printf(
        "bench_libtorch: FashionCnn (80,202 parameters), %lld images per rank per step, %d ranks, %d "
        "libtorch thread(s) per rank; median of %d rounds of %d steps after %d warm-up steps, variants "
        "interleaved\nCPU: %s\n\n",
        static_cast<long long>(o.micro_batch), world, o.threads, o.rounds, o.steps, o.warmup, cpu_line().c_str());
    const double base = median(variants[0].samples_per_s);
    std::printf("%-36s %12s %8s\n", "variant", "samples/s", "ratio");
    for (const auto& v : variants) {
      std::printf("%-36s %12.0f %8.3f\n", v.name.c_str(), median(v.samples_per_s), median(v.samples_per_s) / base);
    }
  }
  return 0;
}

}  // namespace
}  // namespace zeroshard::bench

int main(int argc, char** argv) {
  zeroshard::bench::Options o;
  CLI::App app{
      "Samples/s of a libtorch CNN under zeroshard_torch against plain libtorch with a hand-written all-reduce"};
  app.add_option("--stages", o.stages, "ZeRO stages to measure")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app.add_option("--micro-batch", o.micro_batch, "images per rank per step")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "steps per round and variant")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--rounds", o.rounds, "timed rounds (the median is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps per variant first")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "libtorch intra-op threads per rank")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return zeroshard::bench::run(o);
}
