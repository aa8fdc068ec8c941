// MpiSideChannel; see comm/mpi/mpi_side_channel.h.
#include "comm/mpi/mpi_side_channel.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_environment.h"
#include "core/error.h"

namespace zeroshard {

namespace {
constexpr int kTag = 7215;  // any tag: the duplicate carries nothing else
}  // namespace

MpiSideChannel::MpiSideChannel(double setup_timeout_s) {
  const int level = mpi_thread_level();  // throws CommError if MPI is not running
  if (level < MPI_THREAD_MULTIPLE) {
    throw CommError(std::string("collective timeouts need MPI_THREAD_MULTIPLE (the watchdog "
                                "thread talks to other ranks while this one waits); MPI gave ") +
                    std::string(mpi_thread_level_name(level)));
  }
  int world_rank = -1, world_size = 0;
  ZS_MPI_CALL(-1, MPI_Comm_rank, MPI_COMM_WORLD, &world_rank);
  ZS_MPI_CALL(world_rank, MPI_Comm_size, MPI_COMM_WORLD, &world_size);
  MPI_Request dup = MPI_REQUEST_NULL;
  MPI_Comm pending = MPI_COMM_NULL;
  ZS_MPI_CALL(world_rank, MPI_Comm_idup, MPI_COMM_WORLD, &pending, &dup);
  const auto start = std::chrono::steady_clock::now();
  for (int done = 0; done == 0;) {
    ZS_MPI_CALL(world_rank, MPI_Test, &dup, &done, MPI_STATUS_IGNORE);
    if (done != 0) break;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (setup_timeout_s > 0 && waited >= setup_timeout_s) {
      throw SideChannelTimeout(fmt::format(
          "zeroshard: collective timeout after {:g} s: rank {} of {} waited for every process of the job to set up "
          "the collective watchdog (MPI_Comm_idup of MPI_COMM_WORLD, at each process's first communicator with "
          "collective_timeout_s, e.g. its Engine); at least one process has not got there (it stalled or failed "
          "before it, or never makes one)",
          setup_timeout_s, world_rank, world_size),
          world_rank);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  comm_ = pending;
  try {
    ZS_MPI_CALL(-1, MPI_Comm_set_errhandler, comm_, MPI_ERRORS_RETURN);
    ZS_MPI_CALL(-1, MPI_Comm_rank, comm_, &rank_);
    ZS_MPI_CALL(rank_, MPI_Comm_size, comm_, &size_);
  } catch (...) {
    MPI_Comm_free(&comm_);
    throw;
  }
}

MpiSideChannel::~MpiSideChannel() {
  if (mpi_finalized()) return;
  for (Pending& p : sends_) {
    int done = 0;
    if (p.request != MPI_REQUEST_NULL) MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
    if (p.request != MPI_REQUEST_NULL && done == 0) {
      MPI_Request_free(&p.request);
      (void)p.buffer.release();  // MPI may still read it
    }
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiSideChannel::post_to_all(const std::string& message) {
  if (message.size() > static_cast<std::size_t>(INT_MAX)) return;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Pending p;
    p.buffer = std::make_unique<std::string>(message);
    const int rc = MPI_Isend(p.buffer->data(), static_cast<int>(p.buffer->size()), MPI_CHAR, r,
                             kTag, comm_, &p.request);
    if (rc == MPI_SUCCESS) sends_.push_back(std::move(p));
  }
}

std::vector<std::pair<int, std::string>> MpiSideChannel::poll() {
  std::vector<std::pair<int, std::string>> out;
  while (!poll_failed_) {
    int found = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kTag, comm_, &found, &msg, &status) != MPI_SUCCESS) {
      poll_failed_ = true;
      break;
    }
    if (found == 0) break;
    int bytes = 0;
    MPI_Get_count(&status, MPI_CHAR, &bytes);
    std::string text(static_cast<std::size_t>(bytes > 0 ? bytes : 0), '\0');
    if (MPI_Mrecv(text.data(), bytes, MPI_CHAR, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      poll_failed_ = true;
      break;
    }
    out.emplace_back(status.MPI_SOURCE, std::move(text));
  }
  return out;
}

void MpiSideChannel::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::unique_ptr<SideChannel> MpiCommunicator::make_side_channel(double setup_timeout_s) {
  return std::make_unique<MpiSideChannel>(setup_timeout_s);
}

}  // namespace zeroshard
