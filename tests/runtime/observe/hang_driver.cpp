// A training loop whose rank 2 misbehaves at step 2, with a 3 s collective
// timeout (zeroshard.collective_timeout_s), for tests/runtime/observe/hang.sh:
//   hang_driver ok             every rank trains 3 steps (exit 0)
//   hang_driver skip_unshard   rank 2 skips the unshard of unit u1 (stage 3)
//   hang_driver extra_forward  rank 2 runs its forward twice
//   hang_driver kill           rank 2 is killed (SIGKILL) after its forward
//   hang_driver stall          rank 2 computes for 60 s after its forward (the
//                              others time out waiting for it)
//   hang_driver checked        skip_unshard with zeroshard.collective_check:
//                              every rank throws the same mismatch error
// Instead of hanging, the job must end within the timeout plus a few
// seconds with one message naming rank 2's and the others' collectives.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"
#include "runtime/engine/engine.h"

using namespace zeroshard;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  if (mode != "ok" && mode != "skip_unshard" && mode != "extra_forward" && mode != "kill" && mode != "stall" &&
      mode != "checked") {
    std::fprintf(stderr, "usage: hang_driver ok|skip_unshard|extra_forward|kill|stall|checked\n");
    return 2;
  }
  auto comm = make_world_communicator();
  EngineConfig c;
  c.zero.stage = 3;
  c.observe.collective_timeout_s = 3;
  c.zero.overlap_comm = false;  // no prefetch: a skipped unshard is a missing all-gather
  c.observe.collective_check = mode == "checked";
  Engine e(c, *comm);
  std::vector<UnitId> units;
  std::vector<ParamId> params;
  for (int u = 0; u < 3; ++u) {
    units.push_back(e.add_unit(fmt::format("u{}", u)));
    params.push_back(e.add_parameter(units.back(), fmt::format("w{}", u), {1000}));
  }
  e.finalize();
  const bool odd_one = comm->rank() == 2;
  auto forward = [&](bool skip_u1) {
    for (int u = 0; u < 3; ++u) {
      if (skip_u1 && u == 1) continue;
      e.unshard(units[u]);
      e.reshard(units[u]);
    }
  };
  try {
  for (int step = 1; step <= 3; ++step) {
    const bool act = odd_one && step == 2;
    forward(act && (mode == "skip_unshard" || mode == "checked"));
    if (act && mode == "extra_forward") forward(false);
    if (act && mode == "kill") std::raise(SIGKILL);
    if (act && mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(60));
    for (int u = 2; u >= 0; --u) {
      e.unshard(units[u]);
      for (float& g : e.grad(params[u])) g += 1.0f;
      e.reduce_gradients(units[u]);
      e.reshard(units[u]);
    }
    e.step();
  }
  } catch (const std::exception& err) {
    // The fingerprint check's error is the same on every rank: one prints it.
    if (comm->rank() == 0) std::fprintf(stderr, "hang_driver: error: %s\n", err.what());
    return 1;
  }
  if (comm->rank() == 0) std::printf("hang_driver: %s: 3 steps done\n", mode.c_str());
  return 0;
}
