// zs_hang_probe: a program whose rank 2 breaks SPMD on purpose, for
// tests/comm/hang_tests.sh ([Note: collective watchdog]).
//
// Usage: zs_hang_probe MODE TIMEOUT_S   (run under mpirun with >= 3 ranks)
//   MODE none   every rank makes the same calls (must exit 0)
//        skip   rank 2 skips the all_gather of step 5
//        extra  rank 2 makes one extra all_reduce in step 5
//        kill   rank 2 raises SIGKILL at step 5
//        count  rank 2's all_reduce of step 5 has 2048 elements, not 1024
//        p2p    at step 5, before its collectives, every rank sends 256 f32 to
//               the next rank (ring) and receives from the previous one,
//               except that rank 2 does not send
//        late   rank 2 stalls for 60 s before it makes its communicator (and
//               so the watchdog's side channel, collective over the job)
// Every step makes, under the label "fc<step % 4>", an all_reduce of 1024
// f32, an all_gather of 4096 f32 per rank and a reduce_scatter of 1024 f32
// per rank (sequence numbers 3 step + 1, + 2, + 3); 20 steps, then a
// barrier. Exit status: 0 when the sequence completes, 2 on a usage error,
// otherwise whatever the watchdog or mpirun makes of it.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/traced/traced_communicator.h"

using namespace zeroshard;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: zs_hang_probe none|skip|extra|kill|count|p2p|late TIMEOUT_S\n");
    return 2;
  }
  const std::string mode = argv[1];
  const double timeout = std::stod(argv[2]);
  try {
    std::unique_ptr<Communicator> world = make_world_communicator();
    if (mode == "late" && world->rank() == 2) std::this_thread::sleep_for(std::chrono::seconds(60));
    TracedCommunicator dp(*world, "dp", {.timeout_s = timeout});
    const int n = dp.world_size();
    const bool odd_one = dp.rank() == 2;
    std::vector<float> a(1024 * static_cast<std::size_t>(n), 1.0f);
    std::vector<float> g(4096 * static_cast<std::size_t>(n), 0.0f);
    std::vector<float> s(4096, 1.0f);
    std::vector<float> out(256, 1.0f), in(256, 0.0f);
    for (int step = 0; step < 20; ++step) {
      TracedCommunicator::LabelScope label(dp, "fc" + std::to_string(step % 4));
      if (odd_one && step == 5 && mode == "kill") std::raise(SIGKILL);
      if (step == 5 && mode == "p2p") {
        CommWork r = dp.irecv(in.data(), in.size(), DType::f32, (dp.rank() + n - 1) % n);
        CommWork w;
        if (!odd_one) w = dp.isend(out.data(), out.size(), DType::f32, (dp.rank() + 1) % n);
        r.wait();
        w.wait();
      }
      const bool more = odd_one && step == 5 && mode == "count";
      dp.all_reduce(a.data(), more ? 2048 : 1024, DType::f32, ReduceOp::sum);
      if (odd_one && step == 5 && mode == "extra") {
        dp.all_reduce(a.data(), 1024, DType::f32, ReduceOp::sum);
      }
      if (!(odd_one && step == 5 && mode == "skip")) {
        dp.iall_gather(s.data(), g.data(), 4096, DType::f32).wait();
      }
      dp.reduce_scatter(a.data(), s.data(), 1024, DType::f32, ReduceOp::sum);
    }
    dp.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zs_hang_probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
