// bench_layout: how long laying out a model takes as it grows, against the
// target of 1e6 units in under 2 s. Lays out U units of one parameter each
// (names "layerI.w", as a deep model's), finalizes for a world size, and
// estimates rank 0 and the last rank's memory at a very large world size
// (what zs_plan does to find the largest rank). Prints each time and its
// ratio to the target (CPU time of the one thread that lays out); exit 1
// when 1e6 units take longer than the target.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/config/config.h"
#include "runtime/plan/memory_estimate.h"
#include "runtime/plan/model_description.h"
#include "runtime/sharding/flat_layout.h"

using namespace zeroshard;

namespace {

// This thread's CPU seconds: the layout is single-threaded, so its CPU
// time is its cost whatever else the machine runs (wall time is printed
// beside it).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds to add `units` units of one parameter each and finalize for
// `world`; `wall` gets the wall-clock seconds.
double layout_seconds(int units, int world, double& wall) {
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  FlatLayout l;
  for (int i = 0; i < units; ++i) {
    const std::string name = "layer" + std::to_string(i);
    l.add_param(l.add_unit(name), name + ".w", {1024}, 0);
  }
  l.finalize(world);
  wall = seconds_since(t0);
  return cpu_seconds() - c0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Model layout time against 1e6 units in 2 s"};
  int world = 8;
  double target = 2.0;
  app.add_option("--world", world, "world size to finalize for")->check(CLI::Range(1, 1 << 20));
  app.add_option("--target", target, "seconds allowed for 1e6 units")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::printf("%10s %12s %12s %10s\n", "units", "cpu seconds", "wall seconds", "x target");
  double at_million = 0;
  for (int units : {10'000, 100'000, 1'000'000}) {
    double wall = 0;
    const double s = layout_seconds(units, world, wall);
    const double scaled = target * units / 1e6;
    std::printf("%10d %12.3f %12.3f %10.3f\n", units, s, wall, s / scaled);
    if (units == 1'000'000) at_million = s;
  }
  // zs_plan's largest rank at 1e7 ranks: two estimates, not 1e7.
  const auto t0 = std::chrono::steady_clock::now();
  const ModelDescription m = ModelDescription::generated(1'000'000'000, 100);
  const FlatLayout layout = m.layout(10'000'000);
  EngineConfig c;
  c.zero.stage = 3;
  const auto first = estimate_memory(layout, c, 0).after_finalize.current_total();
  const auto last = estimate_memory(layout, c, 10'000'000 - 1).after_finalize.current_total();
  std::printf("largest rank of 1e7 (1e9 parameters, 100 units, stage 3): rank %d, %.3f s\n",
              first > last ? 0 : 10'000'000 - 1, seconds_since(t0));
  std::printf("1e6 units: %.3f s, %.2fx the %.1f s target\n", at_million, at_million / target, target);
  return at_million <= target ? 0 : 1;
}
