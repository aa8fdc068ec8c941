// SideChannel: small messages between every process of the job that do not
// go through any collective, so that ranks can still talk when one
// collective is stuck or mismatched. The collective watchdog
// (comm/traced/collective_watchdog.h) reports hangs over it.
//
// Implementations: LocalSideChannel (one process; below) and
// MpiSideChannel (comm/mpi/mpi_side_channel.h: point-to-point messages on
// a duplicate of MPI_COMM_WORLD). Communicator::make_side_channel() gives
// the one for a communicator's backend.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace zeroshard {

/// Communicator::make_side_channel(setup_timeout_s) ran out of time: some
/// process of the job has not reached its own call. The collective
/// watchdog ends the job on it, as on any other hang.
class SideChannelTimeout : public CommError {
 public:
  SideChannelTimeout(const std::string& what, int world_rank) : CommError(what), world_rank_(world_rank) {}
  /// The rank in the job of the process that waited.
  int world_rank() const { return world_rank_; }

 private:
  int world_rank_;
};

/// Messages to and from every process of the job (world ranks, not the
/// ranks of any sub-communicator). Thread safety: used by one thread at a
/// time (the watchdog's); may run while other threads are blocked in
/// collectives (MPI needs MPI_THREAD_MULTIPLE for that, checked when the
/// channel is made).
class SideChannel {
 public:
  virtual ~SideChannel() = default;
  /// This process's rank in the job.
  virtual int rank() const = 0;
  /// Processes in the job.
  virtual int world_size() const = 0;
  /// Sends `message` to every other process without blocking; a process
  /// that cannot be reached (dead) is skipped silently. Never throws.
  virtual void post_to_all(const std::string& message) = 0;
  /// The messages that arrived since the last call, as (sender rank, text);
  /// never blocks. Never throws (a failing receive ends the polling).
  virtual std::vector<std::pair<int, std::string>> poll() = 0;
  /// Ends every process of the job with exit status `code`.
  [[noreturn]] virtual void abort(int code) = 0;
};

/// The side channel of a one-process job: nothing to send or receive;
/// abort is std::_Exit. Thread safety: stateless.
class LocalSideChannel final : public SideChannel {
 public:
  /// Always 0.
  int rank() const override { return 0; }
  /// Always 1.
  int world_size() const override { return 1; }
  /// No other process: does nothing.
  void post_to_all(const std::string&) override {}
  /// Always empty.
  std::vector<std::pair<int, std::string>> poll() override { return {}; }
  /// std::_Exit(code).
  [[noreturn]] void abort(int code) override;
};

}  // namespace zeroshard
