// [Note: MPI progress]: a non-blocking collective completes while the
// caller computes without making any MPI call.
#include <chrono>
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "comm/communicator.h"
#include "comm/mpi/mpi_progress.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using zeroshard::testing::world;

TEST_CASE("iall_reduce of 16 MiB finishes during compute, driven by the progress thread") {
  Communicator& comm = world();
  const int n = comm.world_size();
  MpiProgress& progress = MpiProgress::instance();
  REQUIRE(progress.enabled());
  const std::size_t count = std::size_t{4} << 20;
  std::vector<float> buf(count, static_cast<float>(comm.rank() + 1));
  const float want = static_cast<float>(n * (n + 1) / 2);
  comm.barrier();
  const std::uint64_t polls_before = progress.polls();
  CommWork work = comm.iall_reduce(buf.data(), count, DType::f32, ReduceOp::sum);
  // Compute (no MPI call) until the result shows up in the buffer, at most
  // 20 s on a loaded machine. volatile reads: the collective writes buf
  // from inside MPI, invisibly to the compiler.
  const auto start = std::chrono::steady_clock::now();
  double sink = 0;
  bool arrived = false;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    for (int i = 0; i < 100000; ++i) sink += std::sqrt(static_cast<double>(i) + sink * 1e-12);
    const volatile float* first = buf.data();
    const volatile float* last = buf.data() + count - 1;
    if (*first == want && *last == want) {
      arrived = true;
      break;
    }
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("result arrived after " << waited << " s of compute, " << progress.polls() - polls_before
                                  << " progress polls (sink " << sink << ")");
  CHECK(arrived);
  CHECK(progress.polls() > polls_before);
  work.wait();
  for (std::size_t i = 0; i < count; i += 4099) REQUIRE(buf[i] == want);
}
