// estimate_clock_offset; see [Note: clock offset] in comm/traced/clock_sync.h.
#include "comm/traced/clock_sync.h"

#include <cmath>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/tracer.h"

namespace zeroshard {

ClockOffset estimate_clock_offset(Communicator& comm, int rounds) {
  ZS_CHECK(rounds >= 1, "estimate_clock_offset: rounds must be >= 1, got {}", rounds);
  const bool root = comm.rank() == 0;
  ClockOffset best{0, -1};
  for (int i = 0; i < rounds; ++i) {
    const std::int64_t t1 = Tracer::now_ns();
    comm.barrier();
    // T0 as two exact doubles (high and low 32 bits): the interface has no
    // integer type, and a double holds integers below 2^53 exactly.
    double stamp[2] = {0.0, 0.0};
    if (root) {
      const auto t0 = static_cast<std::uint64_t>(Tracer::now_ns());
      stamp[0] = static_cast<double>(t0 >> 32);
      stamp[1] = static_cast<double>(t0 & 0xffffffffu);
    }
    comm.broadcast(stamp, 2, DType::f64, 0);
    const std::int64_t t2 = Tracer::now_ns();
    if (root) continue;
    const auto t0 = static_cast<std::int64_t>((static_cast<std::uint64_t>(stamp[0]) << 32) |
                                              static_cast<std::uint64_t>(stamp[1]));
    const std::int64_t bound = (t2 - t1 + 1) / 2;  // rounded up: still a bound
    if (best.bound_ns < 0 || bound < best.bound_ns) {
      best.bound_ns = bound;
      best.offset_ns = t0 - (t1 + (t2 - t1) / 2);
    }
  }
  if (root) return ClockOffset{0, 0};
  return best;
}

}  // namespace zeroshard
