// What the MPI benchmarks' main() functions share (bench_collectives,
// bench_pipeline): running the benchmark so that an error on one rank ends
// the whole job instead of leaving the other ranks waiting for it.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "comm/mpi/mpi_environment.h"

namespace zeroshard::bench {

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
