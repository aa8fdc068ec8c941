// MPI start-up and shutdown; see comm/mpi/mpi_environment.h.
#include "comm/mpi/mpi_environment.h"

#include <mpi.h>

#include <cstdlib>
#include <mutex>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_leak_scope.h"
#include "core/error.h"

namespace zeroshard {

namespace {

std::mutex g_init_mutex;
int g_provided = -1;  // thread level MPI_Init_thread returned; -1 until we initialised

void finalize_at_exit() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    check_leaks_before_mpi_finalize();  // [Note: leak checks beside OpenMPI]
    MPI_Finalize();
  }
}

}  // namespace

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

int mpi_init_once() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (mpi_finalized()) {
    throw CommError(
        "MPI is already finalized; create communicators before MPI_Finalize (zeroshard "
        "finalizes MPI at exit when it initialized it)");
  }
  int initialized = 0;
  ZS_MPI_CALL(-1, MPI_Initialized, &initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    {
      const MpiLeakScope openmpi_allocations;  // [Note: leak checks beside OpenMPI]
      ZS_MPI_CALL(-1, MPI_Init_thread, nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    }
    g_provided = provided;
    ZS_MPI_CALL(-1, MPI_Comm_set_errhandler, MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ZS_MPI_CALL(-1, MPI_Comm_set_errhandler, MPI_COMM_SELF, MPI_ERRORS_RETURN);
    if (std::atexit(finalize_at_exit) != 0) {
      throw CommError("std::atexit refused to register MPI_Finalize; too many exit handlers");
    }
    return provided;
  }
  if (g_provided >= 0) return g_provided;
  int provided = MPI_THREAD_SINGLE;
  ZS_MPI_CALL(-1, MPI_Query_thread, &provided);
  return provided;
}

int mpi_thread_level() {
  int initialized = 0;
  ZS_MPI_CALL(-1, MPI_Initialized, &initialized);
  if (!initialized || mpi_finalized()) {
    throw CommError("mpi_thread_level: MPI is not running; call make_world_communicator() first");
  }
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (g_provided >= 0) return g_provided;
  int provided = MPI_THREAD_SINGLE;
  ZS_MPI_CALL(-1, MPI_Query_thread, &provided);
  return provided;
}

std::string_view mpi_thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
  }
}

}  // namespace zeroshard
