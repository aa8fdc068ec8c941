// MPI return-code checking; see comm/mpi/mpi_check.h.
#include "comm/mpi/mpi_check.h"

#include <climits>
#include <string>

#include "core/error.h"

namespace zeroshard {

namespace {

std::string rank_text(int rank) {
  if (rank >= 0) return fmt::format("rank {}", rank);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int world_rank = -1;
  if (initialized && !finalized && MPI_Comm_rank(MPI_COMM_WORLD, &world_rank) == MPI_SUCCESS) {
    return fmt::format("MPI_COMM_WORLD rank {}", world_rank);
  }
  return "a process where MPI is not running";
}

}  // namespace

void mpi_check(int rc, std::string_view call, int rank) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  int error_class = rc;
  if (MPI_Error_class(rc, &error_class) != MPI_SUCCESS) error_class = rc;
  throw CommError(fmt::format(
      "{} failed on {}: {} (MPI error code {}, class {}); check that every rank issues the "
      "same collectives in the same order with matching counts, types and roots",
      call, rank_text(rank),
      len > 0 ? std::string(text, static_cast<std::size_t>(len)) : "unknown error", rc,
      error_class));
}

int mpi_count(std::size_t count, std::string_view call, int rank) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw CommError(fmt::format(
        "{}: count {} elements exceeds the MPI limit of {} (INT_MAX) on {}; split the buffer "
        "into collectives of at most {} elements",
        call, count, INT_MAX, rank_text(rank), INT_MAX));
  }
  return static_cast<int>(count);
}

}  // namespace zeroshard
