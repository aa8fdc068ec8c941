// [Note: agreeing on errors]
// A rank that fails alone must not leave the others waiting in the next
// collective. Every fallible phase of a collective operation (checkpoint
// save and load) runs its local work through run_agreed(): the outcome is
// all-reduced, and if any rank failed, every rank throws the same IoError,
// the message of the lowest failing rank (prefixed with that rank).
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace zeroshard {

/// Collective over comm: given this rank's error message ("" = success),
/// returns if every rank succeeded, else throws IoError on every rank with
/// the first failing rank's message.
void agree_on_error(Communicator& comm, const std::string& local_error);

/// Runs f(), turning any exception into a message, then agree_on_error.
template <class F>
void run_agreed(Communicator& comm, F&& f) {
  std::string err;
  try {
    f();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
  }
  agree_on_error(comm, err);
}

}  // namespace zeroshard
