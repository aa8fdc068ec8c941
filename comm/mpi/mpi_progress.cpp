#include "comm/mpi/mpi_progress.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include <mpi.h>

#include "comm/mpi/mpi_environment.h"

namespace zeroshard {

MpiProgress& MpiProgress::instance() {
  // Constructed after mpi_init_once() registered MPI_Finalize with atexit,
  // so it is destroyed (thread joined) before MPI is finalised.
  static MpiProgress progress;
  return progress;
}

MpiProgress::MpiProgress() {
  if (const char* env = std::getenv("ZS_MPI_PROGRESS_US")) interval_us_ = std::atoll(env);
  if (const char* env = std::getenv("ZS_MPI_PROGRESS_MIN_BYTES")) {
    min_bytes_ = static_cast<std::size_t>(std::max(0LL, std::atoll(env)));
  }
  enabled_ = interval_us_ > 0 && mpi_thread_level() == MPI_THREAD_MULTIPLE;
  if (enabled_) thread_ = std::thread([this] { run(); });
}

MpiProgress::~MpiProgress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool MpiProgress::begin(std::size_t bytes) {
  if (!enabled_ || bytes < min_bytes_) return false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = outstanding_++ == 0;  // otherwise the thread is polling or a waiter drives MPI
    if (wake) yield_first_ = bytes >= kYieldMinBytes;
  }
  if (wake) cv_.notify_one();
  return true;
}

void MpiProgress::end() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
}

void MpiProgress::begin_wait() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++waiting_;
}

void MpiProgress::end_wait() {
  if (!enabled_) return;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = --waiting_ == 0 && outstanding_ > 0;
  }
  if (wake) cv_.notify_one();
}

bool MpiProgress::should_poll() const {
  return outstanding_ > 0 && waiting_ == 0;
}

void MpiProgress::run() {
  const auto interval = std::chrono::microseconds(interval_us_);
  std::unique_lock<std::mutex> lock(mu_);
  bool idle = true;
  while (true) {
    if (idle) {
      cv_.wait(lock, [this] { return stop_ || should_poll(); });
      if (stop_) return;
      // A caller that waits at once (i*().wait()) is usually in
      // MPI_Wait before this thread runs: cv_.wait then sees nothing to
      // poll for and sleeps on, with no probe. For a large collective the
      // thread first yields once ([Note: MPI progress]).
      if (yield_first_) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
        if (stop_) return;
        if (!should_poll()) continue;
      }
      idle = false;
    }
    lock.unlock();
    if (!mpi_finalized()) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, 32765, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
      polls_.fetch_add(1, std::memory_order_relaxed);
    }
    std::this_thread::sleep_for(interval);
    lock.lock();
    if (stop_) return;
    idle = !should_poll();
  }
}

}  // namespace zeroshard
