// The one place where MPI return codes become exceptions.
//
// Every MPI call in zeroshard goes through ZS_MPI_CALL (or mpi_check
// directly), which throws CommError naming the call, MPI's error string and
// the rank. This works because every communicator zeroshard creates or wraps
// has the MPI_ERRORS_RETURN error handler set (see MpiCommunicator), so MPI
// reports failures by return code instead of aborting the job.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string_view>

namespace zeroshard {

/// Throws CommError if rc != MPI_SUCCESS. The message names `call` (e.g.
/// "MPI_Iallreduce"), the error string from MPI_Error_string, the error
/// class and `rank` (the rank in the communicator used; pass -1 when there
/// is none, and the MPI_COMM_WORLD rank is reported if MPI is running).
/// Thread safety: safe from any thread.
void mpi_check(int rc, std::string_view call, int rank);

/// Converts an element count to the int that MPI's interfaces take. Throws
/// CommError naming the count, the call and the rank if count > INT_MAX
/// (never truncates). Thread safety: pure function.
int mpi_count(std::size_t count, std::string_view call, int rank);

}  // namespace zeroshard

/// Calls MPI function `fn` with the remaining arguments and checks its
/// return code with mpi_check, naming the call by its own spelling.
#define ZS_MPI_CALL(rank, fn, ...) ::zeroshard::mpi_check(fn(__VA_ARGS__), #fn, (rank))
