// MPI start-up and shutdown for zeroshard.
//
// MPI is initialised at most once per process, on first use
// (make_world_communicator), with MPI_Init_thread requesting
// MPI_THREAD_MULTIPLE. Whatever level the library provides is accepted and
// remembered (mpi_thread_level()). If zeroshard initialised MPI it also
// finalises it, from a std::atexit handler, unless someone else already
// did. If the application initialised MPI itself, zeroshard neither
// re-initialises nor finalises it. A process started without mpirun gets a
// world of size 1 through MPI singleton initialisation.
#pragma once

#include <string_view>

namespace zeroshard {

/// Initialises MPI if it is not yet initialised: MPI_Init_thread
/// requesting MPI_THREAD_MULTIPLE (argc/argv not needed), MPI_ERRORS_RETURN
/// on MPI_COMM_WORLD and MPI_COMM_SELF, and MPI_Finalize registered with
/// std::atexit. If the application initialised MPI it changes nothing.
/// Returns the provided thread level
/// (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE). Idempotent. Throws CommError
/// if MPI was already finalised or initialisation fails.
/// Thread safety: safe to call from several threads at once.
int mpi_init_once();

/// The thread support level MPI provides (as MPI_Query_thread): the level
/// remembered by mpi_init_once(), or queried when the application
/// initialised MPI. Throws CommError if MPI is not initialised.
/// Thread safety: safe from any thread.
int mpi_thread_level();

/// "MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
/// "MPI_THREAD_MULTIPLE", or "unknown". Thread safety: pure function.
std::string_view mpi_thread_level_name(int level);

/// True once MPI_Finalize has been called (by anyone); legal to ask at any
/// time. Destructors use it to skip MPI calls after finalisation.
/// Thread safety: safe from any thread.
bool mpi_finalized();

}  // namespace zeroshard
