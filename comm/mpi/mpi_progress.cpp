#include "comm/mpi/mpi_progress.h"

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

void MpiProgress::begin() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_;
  }
  cv_.notify_one();
}

void MpiProgress::end() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  --outstanding_;
}

void MpiProgress::run() {
  const auto interval = std::chrono::microseconds(interval_us_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || outstanding_ > 0; });
    if (stop_) return;
    lock.unlock();
    if (!mpi_finalized()) {
      int flag = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, 32765, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
      polls_.fetch_add(1, std::memory_order_relaxed);
    }
    std::this_thread::sleep_for(interval);
    lock.lock();
  }
}

}  // namespace zeroshard
