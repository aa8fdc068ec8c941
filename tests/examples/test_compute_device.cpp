// fashion_mnist --device: the names, and the clear error where the GPU path
// cannot run. The process hides every GPU (CUDA_VISIBLE_DEVICES="", set
// before any CUDA call), so on any machine a CUDA build must report "no CUDA
// device" and a CPU-only build "built without CUDA"; neither may crash.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"
#include "examples/fashion_mnist/compute_device.h"
#include "examples/fashion_mnist/mlp.h"
#include "runtime/config/config.h"
#include "runtime/engine/engine.h"
#include "tests/support/thrown.h"

using namespace zeroshard;
using namespace zeroshard::examples;

namespace {

/// The message of the zeroshard::Error that f throws ("" if none).
std::string error_of(auto&& f) { return testing::error_message<Error>(f); }

}  // namespace

TEST_CASE("compute device: names") {
  CHECK(parse_compute_device("cpu") == ComputeDevice::cpu);
  CHECK(parse_compute_device("cuda") == ComputeDevice::cuda);
  CHECK(compute_device_name(ComputeDevice::cuda) == "cuda");
  CHECK_THROWS_AS(parse_compute_device("gpu"), ConfigError);
}

TEST_CASE("compute device: cpu needs nothing; cuda without a GPU fails with a clear error") {
  REQUIRE(setenv("CUDA_VISIBLE_DEVICES", "", 1) == 0);
  auto comm = make_world_communicator();
  CHECK(select_compute_device(ComputeDevice::cpu, *comm) == "cpu");

  const std::string selected =
      error_of([&] { select_compute_device(ComputeDevice::cuda, *comm); });
  INFO("select_compute_device(cuda): " << selected);
  if (cuda_compiled_in()) {
    CHECK(selected.find("no CUDA device visible") != std::string::npos);
  } else {
    CHECK(selected.find("built without CUDA") != std::string::npos);
  }

  EngineConfig config;
  config.train_micro_batch_size_per_gpu = 4;
  Engine engine(config, *comm);
  Mlp mlp(engine, {6, 5, 3}, 4);
  engine.finalize();
  CHECK(make_device_classifier(mlp, ComputeDevice::cpu) == nullptr);
  const std::string made = error_of([&] { make_device_classifier(mlp, ComputeDevice::cuda); });
  INFO("make_device_classifier(cuda): " << made);
  CHECK(made.find(cuda_compiled_in() ? "no CUDA device visible" : "built without CUDA") !=
        std::string::npos);
}
