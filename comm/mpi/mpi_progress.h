// MpiProgress: a helper thread that advances Open MPI's non-blocking
// collectives while the loop computes ([Note: MPI progress] below).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

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
// While a thread is blocked in MpiWork::wait() (MPI_Wait drives Open MPI's
// progress engine itself, for every outstanding request) the thread does not
// poll: it is woken when the first collective starts, and a caller that
// waits at once (i*().wait()) is usually inside MPI_Wait before
// the thread runs, so it sleeps on without a probe. MpiCommunicator's
// blocking collectives (MPI_Allreduce, ...) drive the progress engine the
// same way and hold a WaitScope too. When that collective
// moves at least kYieldMinBytes, the thread yields its core once before
// checking. Neither end() nor a waiter leaving MPI_Wait with nothing
// outstanding wakes it. Measured with bench/collectives on 2 ranks and 2
// cores (runs of the variants interleaved): probing every interval through
// blocking collectives, or a timed grace sleep before the first probe (a
// second wake-up in the middle of the collective), cost 5-25% of the bus
// bandwidth of all_reduce and all_gather at 1-8 MiB; without the yield,
// all_reduce and all_gather at 1 MiB reached 0.69-0.91 of raw MPI against
// 0.90-1.13 with it, while a yield raised the latency of 1-16 KiB
// collectives 1.5-3x, hence the threshold
// (bench/collectives/README.md).
//
// Only collectives of at least ZS_MPI_PROGRESS_MIN_BYTES (default 1 MiB,
// their largest buffer) wake the thread; smaller ones complete in the wait.
// A thread woken for every collective costs a wake-up, a yield and probes
// on cores that the ranks compute on; for a collective that moves little
// that is more than the overlap it buys. Measured: the small GPT
// (examples/gpt, units of 0.8 MB, 4 ranks on 2 cores, stage 3) stepped in
// 73.6 ms with every collective waking the thread, 67.6 ms with the thread
// off and 68.0 ms with this threshold (2 ranks: 36.1 ms woken, 34.0 off),
// while bench_step's 32 MB units at stage 3 stepped 4-13% faster with the
// thread (bench/step/README.md).
//
// ZS_MPI_PROGRESS_US sets the poll interval in microseconds (default 50;
// 0 turns the thread off). Costs: one probe per interval per rank while
// collectives are in flight and no thread waits for one.

namespace zeroshard {

/// The process-wide progress thread. Thread safety: begin()/end() and
/// begin_wait()/end_wait() may be called from any thread.
class MpiProgress {
 public:
  /// The instance, started on first use (after MPI is initialised).
  static MpiProgress& instance();
  ~MpiProgress();
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  /// Collectives of at least this many bytes make a freshly woken thread
  /// yield its core once before it checks for work ([Note: MPI progress]).
  static constexpr std::size_t kYieldMinBytes = std::size_t{64} << 10;

  /// One more outstanding non-blocking collective (wakes the thread), which
  /// moves `bytes` bytes (its largest buffer; 0 for a barrier), if the
  /// thread runs and bytes >= min_bytes(). Returns whether it counted the
  /// collective: then end() must follow once, else never.
  bool begin(std::size_t bytes);
  /// One fewer (after a begin() that returned true).
  void end();
  /// The smallest collective (bytes) that wakes the thread:
  /// ZS_MPI_PROGRESS_MIN_BYTES, default 1 MiB.
  std::size_t min_bytes() const { return min_bytes_; }

  /// Marks the calling thread as blocked in MPI_Wait for its lifetime: the
  /// progress thread does not poll while any WaitScope exists.
  class WaitScope {
   public:
    explicit WaitScope(MpiProgress& progress) : progress_(progress) { progress_.begin_wait(); }
    ~WaitScope() { progress_.end_wait(); }
    WaitScope(const WaitScope&) = delete;
    WaitScope& operator=(const WaitScope&) = delete;

   private:
    MpiProgress& progress_;
  };
  /// A thread starts blocking in MPI_Wait (prefer WaitScope).
  void begin_wait();
  /// That thread returned from MPI_Wait (wakes the progress thread if it
  /// was the last waiter and collectives are still outstanding).
  void end_wait();
  /// True if the thread runs (thread level and ZS_MPI_PROGRESS_US allow it).
  bool enabled() const { return enabled_; }
  /// MPI_Iprobe calls made so far (for tests and benchmarks).
  std::uint64_t polls() const { return polls_.load(); }

 private:
  MpiProgress();
  void run();
  // Collectives outstanding and no thread in MPI_Wait; caller holds mu_.
  bool should_poll() const;

  bool enabled_ = false;
  std::int64_t interval_us_ = 50;
  std::size_t min_bytes_ = std::size_t{1} << 20;
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t outstanding_ = 0;
  std::int64_t waiting_ = 0;  // threads inside MPI_Wait
  bool yield_first_ = false;  // the collective that woke the thread is large
  bool stop_ = false;
  std::atomic<std::uint64_t> polls_{0};
  std::thread thread_;
};

}  // namespace zeroshard
