// What the MPI benchmarks share (bench_collectives, bench_pipeline): the
// MPI library's name for their header line, and running the benchmark so
// that an error on one rank ends the whole job instead of leaving the other
// ranks waiting for it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "comm/mpi/mpi_environment.h"

namespace zeroshard::bench {

/// MPI_Get_library_version's text up to its first comma or line break
/// (e.g. "Open MPI v4.1.4"). Needs MPI initialised.
inline std::string mpi_library_name() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  const std::string lib(version, static_cast<std::size_t>(len));
  return lib.substr(0, lib.find_first_of(",\n"));
}

/// Returns run()'s exit status. When run() throws, prints "<program>:
/// <what>" on stderr and, while MPI is initialised and not finalised, ends
/// every rank of the job with MPI_Abort(MPI_COMM_WORLD, 1): one rank that
/// failed alone would leave the others waiting in a collective or for its
/// messages. Returns 1 when MPI is not running.
template <class Run>
int run_or_abort(const char* program, Run&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, 1);
  return 1;
}

}  // namespace zeroshard::bench
