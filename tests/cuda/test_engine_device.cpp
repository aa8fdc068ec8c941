// The Engine on the cuda compute device against the same Engine on the cpu
// device, on one GPU (NCCL world of size 1), with the synthetic loop and the
// configurations of tests/support/device_engine_run.h: stages 0-3, fp32 /
// bf16 / fp16, AdamW / Adam / SGD with momentum, accumulation, small and
// large buckets, overlap on and off, offload_optimizer cpu / nvme and
// offload_param cpu / nvme (ZeRO-Offload: the update on the host, staged
// copies). After four steps the master weights and optimizer states are
// bitwise equal, and the gradient norms agree to 1e-12 (their double sums
// run in different orders: kernels/cuda/grad_check.h). The kernels are
// bitwise the CPU's ([Note: bitwise GPU kernels]), so any difference is an
// engine bug.
#include <cuda_runtime_api.h>

#include <filesystem>
#include <vector>

#include <doctest/doctest.h>

#include "comm/nccl/nccl_communicator.h"
#include "comm/self/self_communicator.h"
#include "core/cuda_check.h"
#include "runtime/engine/engine.h"
#include "tests/support/device_engine_run.h"

using namespace zeroshard;
using namespace zeroshard::testing;

TEST_CASE("cuda engine: every configuration bitwise equal to the cpu engine") {
  SelfCommunicator host;
  NcclCommunicator nccl(host);
  const DeviceCopy memcpy_host = [](void* dst, const void* src, std::size_t bytes, bool) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  };
  const DeviceCopy memcpy_device = [](void* dst, const void* src, std::size_t bytes, bool to_host) {
    if (bytes > 0) ZS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
  };
  const auto root = std::filesystem::temp_directory_path() / "zs-test-cuda-engine";
  // Offload cases with pinned host buffers, so that the copies really run in
  // the background (tests/runtime/engine/test_simulated_device.cpp covers pageable).
  for (const DeviceCase& c : device_cases(root, /*pin_memory=*/true)) {
    INFO(c.name);
    Engine cpu(without_offload(c.config), host);
    Engine gpu(c.config, nccl, host);
    REQUIRE(gpu.device() == ComputeDevice::cuda);
    const DeviceRun want = run_device_model(cpu, memcpy_host);
    const DeviceRun got = run_device_model(gpu, memcpy_device);
    check_device_run(got, want, 1e-12);
    CHECK(gpu.ledger().current(MemCategory::parameters) > 0);
  }
  std::filesystem::remove_all(root);
}

TEST_CASE("cuda engine: device pointers and configuration errors") {
  SelfCommunicator host;
  NcclCommunicator nccl(host);
  EngineConfig cfg;
  cfg.zero.stage = 3;
  Engine e(cfg, nccl, host);
  const UnitId u = e.add_unit("u");
  const ParamId p = e.add_parameter(u, "w", {10});
  e.finalize();
  e.set_parameter(p, std::vector<float>(10, 2.0f));
  e.unshard(u);
  cudaPointerAttributes attr{};
  ZS_CUDA_CHECK(cudaPointerGetAttributes(&attr, e.param(p).data()));
  CHECK(attr.type == cudaMemoryTypeDevice);
  e.reshard(u);
  CHECK(e.gather_parameter(p) == std::vector<float>(10, 2.0f));

  // The cuda constructor refuses a host communicator, and offload_param alone.
  SelfCommunicator other;
  CHECK_THROWS_AS(Engine(cfg, other, host), ConfigError);
  EngineConfig off = cfg;
  off.offload.param.device = OffloadDevice::cpu;
  CHECK_THROWS_AS(Engine(off, nccl, host), ConfigError);
}
