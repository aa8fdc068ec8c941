// fashion_mnist's up-front checks (examples/fashion_mnist/preflight.h): a
// model or micro-batch too large for the memory is refused naming the
// option; a --save-dir that cannot be written fails on every rank before
// the training.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <doctest/doctest.h>

#include "core/error.h"
#include "examples/fashion_mnist/preflight.h"
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
