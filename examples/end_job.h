// How the example programs end after an error, following the rule of
// [Note: agreeing on errors] (comm/collective_error.h). Header-only.
#pragma once

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/error.h"
#include "examples/report/error_message.h"
#include "comm/collective_error.h"

namespace zeroshard::examples {

/// Reports the exception `e` that ended `program`'s main on stderr (one
/// line) and returns the exit status 1, or does not return:
///  - an AgreedError was thrown on every rank with the same message: rank 0
///    prints "<program>: error: <message>" and every rank returns 1;
///  - any other exception may be this rank's alone while the others wait in
///    a collective: this rank prints "<program>: error on rank R of N
///    (ending every rank): <message>" and ends the whole job with
///    Communicator::abort(1) (MPI_Abort); with one rank it returns 1.
/// Never throws.
inline int end_job_with_error(const char* program, const std::exception& e) noexcept {
  if (const auto* agreed = dynamic_cast<const AgreedError*>(&e)) {
    if (agreed->rank() == 0) print_error(program, e);
    return 1;
  }
  std::unique_ptr<Communicator> world;
  try {
    world = make_world_communicator();
  } catch (...) {
    // MPI itself failed to start: this process is alone.
  }
  if (world == nullptr || world->world_size() == 1) return print_error(program, e);
  std::fprintf(stderr, "%s: %s on rank %d of %d (ending every rank): %s\n", program, error_kind(e), world->rank(),
               world->world_size(), one_line_message(e.what()).c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  world->abort(1);
  return 1;  // not reached: abort() ends the process
}

}  // namespace zeroshard::examples
