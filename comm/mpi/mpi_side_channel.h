// MpiSideChannel: the SideChannel (comm/side_channel.h) of an MPI job.
//
// A duplicate of MPI_COMM_WORLD, made when the channel is (MPI_Comm_idup:
// collective over the job, bounded by the watchdog's timeout), carries the messages: post_to_all is one
// MPI_Isend per other rank (never waited for: the job ends soon after a
// report, and a send to a dead rank may never complete), poll is
// MPI_Improbe + MPI_Mrecv (a matched probe, safe while another thread uses
// MPI). Nothing is posted in advance, so a channel that never reports
// leaves no request behind at MPI_Finalize. Because the duplicate is a
// communicator of its own, these messages never match anything the
// collectives on other communicators send, and they progress while other
// threads are blocked in a collective (MPI_THREAD_MULTIPLE is required).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/side_channel.h"

namespace zeroshard {

/// See the file comment. Thread safety: one thread at a time (the
/// watchdog's), concurrently with other threads' MPI calls.
class MpiSideChannel final : public SideChannel {
 public:
  /// Duplicates MPI_COMM_WORLD (collective over the job: MPI_Comm_idup,
  /// tested every millisecond) with MPI_ERRORS_RETURN. Throws CommError if
  /// MPI is not running, its thread level is below MPI_THREAD_MULTIPLE, an
  /// MPI call fails; SideChannelTimeout if (`setup_timeout_s` > 0) the
  /// duplicate is not complete after that many seconds: some process has
  /// not reached this point. The pending duplicate is then left to MPI (the job is ending:
  /// freeing it would need the missing process).
  explicit MpiSideChannel(double setup_timeout_s = 0);
  /// Frees the duplicate (unless MPI is finalised); sends still pending are
  /// abandoned (their buffers leak: a send to a dead rank never completes).
  ~MpiSideChannel() override;
  MpiSideChannel(const MpiSideChannel&) = delete;
  MpiSideChannel& operator=(const MpiSideChannel&) = delete;

  /// Rank in MPI_COMM_WORLD.
  int rank() const override { return rank_; }
  /// Size of MPI_COMM_WORLD.
  int world_size() const override { return size_; }
  /// One MPI_Isend of `message` to every other rank; failures are ignored.
  void post_to_all(const std::string& message) override;
  /// Receives every message that has arrived (MPI_Improbe + MPI_Mrecv).
  std::vector<std::pair<int, std::string>> poll() override;
  /// MPI_Abort(MPI_COMM_WORLD, code).
  [[noreturn]] void abort(int code) override;

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::unique_ptr<std::string> buffer;
  };
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  bool poll_failed_ = false;
  std::vector<Pending> sends_;
};

}  // namespace zeroshard
