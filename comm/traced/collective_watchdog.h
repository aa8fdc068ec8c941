// The collective watchdog: a hang or a mismatched collective ends the job
// with one message naming where every rank is, instead of hanging.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/traced/collective_record.h"

// [Note: collective watchdog]
// Every TracedCommunicator with a timeout holds a CollectiveWatchdog::Slot
// and tells it, per collective or point-to-point message (a send or recv,
// reported as "recv #4 (pp, from rank 1, ...)": the 4th message from rank
// 1, which rank 1 reports as its send #4 to this rank if it got that far),
// when the calling thread starts blocking in
// it (wait(), or a blocking call), when it completes, and when the inner
// communicator threw. The first slot of the process creates the watchdog:
// a side channel over every process of the job (Communicator::
// make_side_channel(), collective over the whole job, bounded by the slot's
// timeout: a process that never gets there, e.g. one that stalled before
// its Engine, ends the job with a "collective timeout" line from the
// waiting ranks instead of holding them there) and one thread that
// lives while any slot does. Every kPollInterval the thread looks for
//  - a slot blocked in one collective for longer than its timeout,
//  - a slot whose inner collective threw (e.g. MPI_ERR_TRUNCATE when ranks
//    issued different collectives),
//  - a report from another rank on the side channel.
// On any of these it sends this rank's status (what it is blocked in, or
// that it is in no collective and the last one it completed, or the error)
// to every rank, collects the others' statuses until all have arrived or
// kGracePeriod has passed (a rank not heard from is "unreachable"), and the
// lowest rank it heard from (itself included) prints ONE message to stderr:
//   zeroshard: collective timeout after 5 s: rank 2 is in all_gather #812
//   (dp, unit fc2, 262144 f32); ranks 0, 1, 3 are in reduce_scatter #811
//   (dp, unit fc3, 1024 f32); rank 4 unreachable
// (ranks in the same state grouped; sequence numbers are per communicator,
// ranks are world ranks) and ends the job with SideChannel::abort (MPI_Abort)
// and status kWatchdogExitCode. A rank that is not the lowest aborts too
// after kGracePeriod more, so no process is left behind if the printer died.
// The report is never cut short: destroying the last slot while a report
// runs waits for it (i.e. for the end of the job).

namespace zeroshard {

class Communicator;

/// The exit status of a job ended by the watchdog.
inline constexpr int kWatchdogExitCode = 3;

/// See [Note: collective watchdog]. The static members and Slot may be used
/// from any thread; one Slot is updated by one thread at a time (its
/// communicator's).
class CollectiveWatchdog {
 public:
  /// How often the watchdog thread checks the slots and the side channel.
  static constexpr std::chrono::milliseconds kPollInterval{100};
  /// How long a reporting rank waits for the others' statuses, and how much
  /// longer a rank that does not print waits before aborting itself.
  static constexpr std::chrono::milliseconds kGracePeriod{2000};

  /// The watched state of one communicator. Destroying it deregisters; the
  /// last one stops the watchdog thread and frees the side channel.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    /// The calling thread starts blocking in collective `seq` at `now_ns`.
    void begin_wait(std::int64_t seq, const CollectiveFingerprint& fp, std::int64_t now_ns);
    /// The calling thread stops blocking in `seq` without it completing
    /// (e.g. after the fingerprint check that precedes it).
    void end_wait(std::int64_t seq);
    /// Collective `seq` completed at `now_ns` (ends a wait on it, if any:
    /// the one blocked in with the same seq and fingerprint).
    void completed(std::int64_t seq, const CollectiveFingerprint& fp, std::int64_t now_ns);
    /// The inner communicator threw `what` in collective `seq`: the watchdog
    /// reports at once (and then ends the job).
    void failed(std::int64_t seq, const CollectiveFingerprint& fp, const std::string& what);

    struct State;  ///< implementation detail (collective_watchdog.cpp)

   private:
    friend class CollectiveWatchdog;
    Slot(std::string name, double timeout_s);

    std::unique_ptr<State> state_;
  };

  /// Watches the communicator named `name` (e.g. "dp") with `timeout_s`
  /// seconds (> 0). The first call of a process (and the first after every
  /// slot is gone) calls comm.make_side_channel(): collective over the whole
  /// job, so every process must create its first watched communicator at
  /// the same point; after timeout_s seconds without every process it
  /// prints why and ends the job (Communicator::abort, status
  /// kWatchdogExitCode), as for any hang. Throws CommError if the backend has no
  /// side channel or MPI lacks MPI_THREAD_MULTIPLE, InvariantError for
  /// timeout_s <= 0.
  static std::unique_ptr<Slot> watch(Communicator& comm, std::string name, double timeout_s);

  /// The text of the one report message, from each rank's encoded status
  /// (index = world rank, empty = unreachable). Exposed for tests.
  static std::string format_report(const std::vector<std::string>& statuses);
};

}  // namespace zeroshard
