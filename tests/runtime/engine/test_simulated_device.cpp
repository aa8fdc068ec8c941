// The engine's GPU data flow on a CPU: an Engine on the simulated device of
// runtime/sharding/device_ops.h (host memory presented as a separate memory space;
// every operation checks that its pointers are device memory and its host_*
// pointers are not) against the cpu engine, at this process group's world
// size, with the loop and configurations of tests/support/device_engine_run.h
// (stages 0-3, precisions, optimizers, buckets, overlap, offload_optimizer
// cpu / nvme, offload_param cpu / nvme with their staged copies). Both
// compute with kernels/cpu and reduce with the same MPI calls, so master
// weights, optimizer states and gradient norms are bitwise equal (norms with
// nvme gradients to 1e-12: summed per reduced block); a pointer
// of the wrong memory space fails the run with the operation's name, and an
// asynchronous copy whose host buffer is used before the engine waits for it
// gives stale bytes (the simulated queue completes copies only when waited
// for, or before the next operation or collective).
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "runtime/sharding/device_ops.h"
#include "runtime/engine/engine.h"
#include "tests/support/device_engine_run.h"
#include "tests/support/queue_ordered_comm.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// The simulated device's memory is host memory: the loop copies with memcpy.
const DeviceCopy kMemcpy = [](void* dst, const void* src, std::size_t bytes, bool) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
};

}  // namespace

TEST_CASE("simulated device: every configuration bitwise equal to the cpu engine") {
  Communicator& comm = world();
  const auto root = std::filesystem::temp_directory_path() / fmt::format("zs-test-simdev-{}", ::getppid());
  for (const DeviceCase& c : device_cases(root)) {
    INFO(c.name);
    Engine cpu(without_offload(c.config), comm);
    std::unique_ptr<DeviceOps> ops = make_simulated_device_ops();
    QueueOrderedComm device_comm(comm, *ops);
    Engine sim(c.config, device_comm, comm, std::move(ops));
    const DeviceRun want = run_device_model(cpu, kMemcpy);
    const DeviceRun got = run_device_model(sim, kMemcpy);
    // Every tier takes the gradient statistics sub-group by sub-group
    // (unit_grad_stats), so the norms are bitwise equal too.
    check_device_run(got, want, 0.0);
  }
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(root);
}

TEST_CASE("simulated device: an operation on memory of the wrong space is an error naming it") {
  auto ops = make_simulated_device_ops();
  DeviceArray a = ops->allocate(16, DType::f32);
  std::vector<float> host(16, 1.0f);
  ops->upload(a.data(), host.data(), 64);
  ops->download(host.data(), a.data(), 64);
  CHECK_THROWS_WITH_AS(ops->zero(host.data(), 64), doctest::Contains("zero (64 bytes"), InvariantError);
  CHECK_THROWS_WITH_AS(ops->upload(host.data(), a.data(), 64), doctest::Contains("upload dst"), InvariantError);
  CHECK_THROWS_WITH_AS(ops->download(a.data(), a.data(), 64), doctest::Contains("is device memory"), InvariantError);
  // One element past the end is outside the allocation.
  CHECK_THROWS_AS(ops->zero(a.at(1), 64), InvariantError);
  CHECK_FALSE(ops->host_addressable());
}
