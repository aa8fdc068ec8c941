// bench_order_check: what the reduce-order check ([Note: reduce order
// check], runtime/engine/reduce_order.h) adds to one optimizer step, measured
// in its two parts (bench/step/README.md, "The reduce-order check"):
//  - host work: ReduceOrder::record() for --units units in each of
//    --micro-batches micro-batches, end_micro_batch(), clear(): the calls
//    the engine makes per step;
//  - exchange: the gradient norm's all-gather grew from 2 to 6 doubles per
//    rank (runtime/engine/grad_norm.h); timed as both sizes over the world,
//    interleaved, the difference of their medians.
// Prints both and their sum in microseconds per step; bench/step/main_job.py
// divides the sum by the main job's measured step (same ranks, same run of
// the script). Run under mpirun; every rank makes the same calls.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/mpi_main.h"
#include "comm/communicator.h"
#include "runtime/engine/reduce_order.h"

using namespace zeroshard;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  int units = 3, micro_batches = 1, reps = 2000;
  CLI::App app{"the reduce-order check's cost per optimizer step"};
  app.add_option("--units", units, "units reduced per micro-batch")->check(CLI::Range(1, 1 << 20));
  app.add_option("--micro-batches", micro_batches, "micro-batches per step")->check(CLI::Range(1, 1 << 16));
  app.add_option("--reps", reps, "timed repetitions of each part")->check(CLI::Range(11, 1 << 24));
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<Communicator> world = make_world_communicator();

  // Host work: the engine's calls for one step, repeated; the median of
  // batches of 100 steps (a step alone is below the clock's resolution).
  ReduceOrder order;
  std::vector<double> host;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < 100; ++s) {
      for (int m = 0; m < micro_batches; ++m) {
        for (int u = 0; u < units; ++u) order.record(static_cast<UnitId>(u));
        order.end_micro_batch();
      }
      order.clear();
    }
    host.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 100);
  }

  // Exchange: all-gathers of 2 and 6 doubles per rank, interleaved.
  const auto n = static_cast<std::size_t>(world->world_size());
  std::vector<double> send(6, 1.0), recv(6 * n);
  std::vector<double> two, six;
  for (int r = 0; r < reps; ++r) {
    for (const std::size_t count : {std::size_t{2}, std::size_t{6}}) {
      world->barrier();
      const auto t0 = Clock::now();
      world->all_gather(send.data(), recv.data(), count, DType::f64);
      (count == 2 ? two : six).push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  // Rank 0's figures; the all-gathers end together on every rank.
  const double h = median(host), g2 = median(two), g6 = median(six);
  if (world->rank() == 0) {
    fmt::print("order check, {} ranks, {} units x {} micro-batch(es) per step: host {:.3f} us, all-gather of 6 "
               "doubles per rank {:.2f} us vs 2 doubles {:.2f} us (+{:.2f} us); total {:.3f} us per step\n",
               n, units, micro_batches, h, g6, g2, g6 - g2, h + std::max(0.0, g6 - g2));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_or_abort("bench_order_check", [&] { return run(argc, argv); });
}
