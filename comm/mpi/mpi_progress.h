// [Note: MPI progress]
// Open MPI advances a non-blocking collective (its libnbc schedule) only
// inside MPI calls. A training loop that starts an all-gather or a
// reduce-scatter and then computes for milliseconds makes no MPI call, so
// the collective would sit still until the next wait: no overlap at all.
// MpiProgress is a background thread that, while at least one non-blocking
// collective is outstanding, calls MPI_Iprobe on MPI_COMM_SELF (a call that
// runs Open MPI's progress engine and matches nothing) every poll interval,
// and sleeps on a condition variable otherwise. It needs
// MPI_THREAD_MULTIPLE; with a lower thread level it stays off.
//
// ZS_MPI_PROGRESS_US sets the poll interval in microseconds (default 50;
// 0 turns the thread off). Costs: one probe per interval per rank while
// collectives are in flight.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace zeroshard {

/// The process-wide progress thread. Thread safety: begin()/end() may be
/// called from any thread.
class MpiProgress {
 public:
  /// The instance, started on first use (after MPI is initialised).
  static MpiProgress& instance();
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  /// One more outstanding non-blocking collective (wakes the thread).
  void begin();
  /// One fewer.
  void end();
  /// True if the thread runs (thread level and ZS_MPI_PROGRESS_US allow it).
  bool enabled() const { return enabled_; }
  /// MPI_Iprobe calls made so far (for tests and benchmarks).
  std::uint64_t polls() const { return polls_.load(); }

 private:
  MpiProgress();
  void run();

  bool enabled_ = false;
  std::int64_t interval_us_ = 50;
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t outstanding_ = 0;
  bool stop_ = false;
  std::atomic<std::uint64_t> polls_{0};
  std::thread thread_;
};

}  // namespace zeroshard
