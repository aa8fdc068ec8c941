// Clock offsets between ranks, for merging per-rank traces onto one
// timeline (core/tracer.h: every time is this process's steady clock).
//
// [Note: clock offset]
// Each round, every rank r stamps t1 on its steady clock and enters a
// barrier; rank 0 stamps T0 on its own clock right after leaving the
// barrier and broadcasts it; rank r stamps t2 when the broadcast has
// arrived. Rank 0 cannot leave the barrier before r has entered it (after
// t1), and r cannot receive T0 before rank 0 stamped it (before t2), so in
// absolute time T0 happened inside [t1, t2] of r's clock. With the offset
// defined as "rank 0's clock minus r's clock", the estimate
//   offset = T0 - (t1 + t2) / 2
// is wrong by at most bound = (t2 - t1) / 2, whatever the latencies of the
// barrier and the broadcast and however asymmetric they are. Of several
// rounds each rank keeps the one with the smallest bound (the least
// disturbed round on that rank). Rank 0 gets {0, 0}. The clocks are
// assumed not to drift apart measurably during the rounds (a few
// milliseconds), which steady clocks satisfy (drift ~1e-5 at worst).
#pragma once

#include <cstdint>

namespace zeroshard {

class Communicator;

/// This rank's steady clock against rank 0's.
struct ClockOffset {
  /// Add to this rank's Tracer::now_ns() to get rank 0's clock, nanoseconds.
  std::int64_t offset_ns = 0;
  /// |true offset - offset_ns| <= bound_ns (nanoseconds, >= 0).
  std::int64_t bound_ns = 0;
};

/// Estimates this rank's clock offset to rank 0 of `comm` by `rounds`
/// barrier + broadcast rounds ([Note: clock offset]). Collective over
/// `comm`: every rank calls it with the same rounds. Throws InvariantError
/// for rounds < 1, and what the communicator's barrier and broadcast throw.
/// Thread safety: the communicator's (one thread at a time).
ClockOffset estimate_clock_offset(Communicator& comm, int rounds = 8);

}  // namespace zeroshard
