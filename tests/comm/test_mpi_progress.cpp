// [Note: MPI progress]: a non-blocking collective completes while the
// caller computes without making any MPI call.
#include <chrono>
#include <cmath>
#include <thread>
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

TEST_CASE("only collectives of at least min_bytes() wake the thread") {
  Communicator& comm = world();  // MPI initialised, the thread started
  MpiProgress& progress = MpiProgress::instance();
  REQUIRE(progress.enabled());
  CHECK(progress.min_bytes() == (std::size_t{1} << 20));  // the default: tests run without the variable
  // Small non-blocking collectives left outstanding for 20 ms each complete
  // in the wait, with no probe made for them: at most one, in flight from
  // the test before. (Had they woken the thread, it would probe every 50 us.)
  std::vector<float> small(1000, 1.0f);
  comm.barrier();
  const std::uint64_t polls_before = progress.polls();
  for (int i = 0; i < 5; ++i) {
    CommWork work = comm.iall_reduce(small.data(), small.size(), DType::f32, ReduceOp::sum);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    work.wait();
  }
  const float n = static_cast<float>(comm.world_size());
  CHECK(small.front() == n * n * n * n * n);
  CHECK(small.back() == n * n * n * n * n);
  CHECK(progress.polls() - polls_before <= 1);
  CHECK_FALSE(progress.begin(0));
  CHECK_FALSE(progress.begin(progress.min_bytes() - 1));
  REQUIRE(progress.begin(progress.min_bytes()));
  progress.end();
}
