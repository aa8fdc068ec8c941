// fashion_mnist's up-front checks (examples/fashion_mnist/preflight.h): a
// model or micro-batch too large for the memory is refused naming the
// option; a --save-dir that cannot be written fails on every rank before
// the training; the GPT's sizes are checked alike, naming --layers/--dim,
// --gradient-accumulation-steps or --micro-batch/--seq.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <doctest/doctest.h>

#include "core/error.h"
#include "examples/fashion_mnist/preflight.h"
#include "examples/gpt/gpt_preflight.h"
#include "comm/collective_error.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::examples;
namespace fs = std::filesystem;

TEST_CASE("training_bytes_estimate: 16 bytes per parameter plus 8 per sample and unit, no wrap-around") {
  // 784-64-10: 784*64 + 64 + 64*10 + 10 = 50890 parameters; 858 units.
  CHECK(training_bytes_estimate({784, 64, 10}, 0) == 16.0 * 50890);
  CHECK(training_bytes_estimate({784, 64, 10}, 32) == 16.0 * 50890 + 8.0 * 32 * 858);
  CHECK(training_bytes_estimate({784, 99999999999, 10}, 1) > 1e15);
}

TEST_CASE("a model or a micro-batch too large for the memory is refused naming the option") {
  const std::uint64_t gib = 1ull << 30;
  CHECK_NOTHROW(check_model_fits({784, 64, 10}, "64", 32, 1000, gib));
  CHECK_THROWS_WITH_AS(check_model_fits({784, 99999999999, 10}, "99999999999", 32, 1000, 64 * gib),
                       doctest::Contains("--hidden \"99999999999\": the model would have"), ConfigError);
  CHECK_THROWS_WITH_AS(check_model_fits({784, 64, 10}, "64", 100000000, 1000, 64 * gib),
                       doctest::Contains("train_micro_batch_size_per_gpu 100000000:"), ConfigError);
  CHECK(physical_memory_bytes() > (1ull << 20));
}

TEST_CASE("--save-dir: created by rank 0 and probed by every rank before the training") {
  Communicator& comm = testing::world();
  const fs::path dir = fs::temp_directory_path() / fmt::format("zs-test-preflight-{}", comm.world_size()) / "a" / "b";
  if (comm.rank() == 0) fs::remove_all(dir.parent_path().parent_path());
  comm.barrier();
  check_save_dir(comm, dir.string());
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_empty(dir));  // the probes are gone
  comm.barrier();
  // A save directory under a regular file cannot exist: every rank gets the same error.
  const fs::path file = dir / "plain-file";
  if (comm.rank() == 0) std::fclose(std::fopen(file.c_str(), "w"));
  comm.barrier();
  std::string msg;
  bool agreed = false;
  try {
    check_save_dir(comm, (file / "ckpt").string());
  } catch (const IoError& e) {
    msg = e.what();
    agreed = is_agreed(e);
  }
  CHECK(agreed);
  CHECK(msg.find(fmt::format("--save-dir {}: cannot save checkpoints there", (file / "ckpt").string())) !=
        std::string::npos);
  comm.barrier();
}

TEST_CASE("gpt: model states, activations and token buffers in closed form; the flag to blame is named") {
  GptRunSizes s;  // 4 layers, width 128, context 64: 834,304 parameters
  const double p = 4 * (12.0 * 128 * 128 + 13 * 128) + (256 + 64 + 2) * 128.0;
  CHECK(p == 834304);
  CHECK(gpt_memory_estimate(s).parameters == p);
  CHECK(gpt_memory_estimate(s).model_states == 16 * p);  // fp32 stage 0: 4 + 4 + 8
  s.element_bytes = 2;
  CHECK(gpt_memory_estimate(s).model_states == 20 * p);  // 2 + 2 + 12, fp32 accumulator 4
  s.stage = 3, s.dp = 4;
  CHECK(gpt_memory_estimate(s).model_states == 5 * p);
  // Only what stays in memory counts: parameters on nvme leave 4.5 bytes
  // (gradients 0.5, optimizer 3, accumulator 1); optimizer on nvme takes
  // gradients, optimizer and accumulator (0.5 left), both take everything.
  s.param_nvme = true;
  CHECK(gpt_memory_estimate(s).model_states == 4.5 * p);
  s.optimizer_nvme = true;
  CHECK(gpt_memory_estimate(s).model_states == 0);
  s.param_nvme = false;
  CHECK(gpt_memory_estimate(s).model_states == 0.5 * p);
  s.optimizer_nvme = false;
  // Tokens: one step's micro-batches plus the dp-wide window, int32.
  s.accumulation = 3;
  CHECK(gpt_memory_estimate(s).token_buffers == (3 + 4) * 8 * 65 * 4.0);
  CHECK_NOTHROW(check_gpt_fits(s, 1ull << 30));

  auto refusal = [](GptRunSizes r) {
    try {
      check_gpt_fits(r, 8ull << 30);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  GptRunSizes big;
  big.shape.layers = 100000;
  CHECK(refusal(big).find("--layers 100000 --dim 128") == 0);
  big = GptRunSizes{};
  big.accumulation = 100000000;
  CHECK(refusal(big).find("--gradient-accumulation-steps 100000000") == 0);
  big = GptRunSizes{};
  big.micro_batch = 1000000;
  CHECK(refusal(big).find("--micro-batch 1000000 --seq 64:") == 0);
  big.micro_batch = 1 << 30;  // no wrap-around: still refused
  big.seq = 1 << 30;
  CHECK(refusal(big).find("--micro-batch") == 0);
  big = GptRunSizes{};
  big.micro_batch = 64, big.pp = 2, big.accumulation = 4000, big.schedule = PipelineScheduleKind::gpipe;
  const std::string gpipe = refusal(big);
  CHECK(gpipe.find("--gradient-accumulation-steps 4000 (GPipe keeps every micro-batch)") != std::string::npos);
  CHECK(gpipe.find("--schedule 1f1b") != std::string::npos);
  big.schedule = PipelineScheduleKind::one_f_one_b;  // keeps 2 micro-batches: fits
  CHECK(refusal(big).empty());
}
